#!/usr/bin/env bash
# benchmarks/suites/serve.sh - the serving cluster's questions (bench_serve.c),
# each line with its anchor from the same run: prefix_reuse (512 tokens:
# target <= 0.25), handover (512 tokens: <= 1.10), decode (>= 0.85),
# disagg_goodput (>= 1.2); on the 110M-parameter random Llama (F32) of the
# model suite and on stories260K. The issue's configuration (16-token blocks,
# a 2,048-token prompt: handover <= 1.05, prefix_reuse <= 0.15, the latter
# also with 1,792 cached tokens, 256 computed) runs on the 110M model with a
# 4,096-token context.
# messages (<= 0.2 of the per-block protocol's count): one cold 2,048-token
# request with 128 output tokens on the 110M model with a 4,096-token
# context, 16-token blocks, one store replica and two.
# One process per line; each timed line alternates anchor and measurement in
# ROUNDS rounds (default 5) and reports the median round ratio with its min
# and max (ratio_median, ratio_min, ratio_max; null ratio if the anchor read 0).
# Env: BENCH_BIN, BUILD_DIR, SMOKE=1 (tiny), THREADS (decode engine threads:
# default all cores), ROUNDS, MODELS (default "stories260K llama110m-f32"; the
# messages lines run with llama110m-f32).
set -euo pipefail
BENCH_BIN=${BENCH_BIN:-build/benchmarks}
BUILD_DIR=${BUILD_DIR:-build}
B="$BENCH_BIN/bench_serve"
MOONLET="$BUILD_DIR/launch/moonlet"
MD="$BUILD_DIR/bench-models"
T=${THREADS:-$(nproc)}
R=${ROUNDS:-5}
MODELS=${MODELS:-stories260K llama110m-f32}
S=examples/models/stories260K/stories260K.gguf
mkdir -p "$MD"
# shellcheck source=bench_models.inc
source "$(dirname "$0")/bench_models.inc"
export OPENBLAS_NUM_THREADS=1

if [ "${SMOKE:-0}" = 1 ]; then
    "$B" --bench=handover --model="$S" --label=stories260K --iters=1 --prompt=512
    "$B" --bench=prefix_reuse --model="$S" --label=stories260K --iters=1 --prompt=512 --shared=448
    "$B" --bench=decode --model="$S" --label=stories260K --threads=1
    "$B" --bench=disagg_goodput --model="$S" --label=stories260K --requests=6
    "$B" --bench=messages --model="$S" --label=stories260K --prompt=200 --max-tokens=8
    exit 0
fi

has() { case " $MODELS " in *" $1 "*) return 0 ;; esac; return 1; }
has llama110m-f32 && gen_llama110m
for m in "$S:stories260K" "$MD/llama110m-f32.gguf:llama110m-f32"; do
    p=${m%%:*} l=${m##*:}
    has "$l" || continue
    "$B" --bench=prefix_reuse --model="$p" --label="$l" --rounds="$R" --prompt=512 --shared=448
    "$B" --bench=handover --model="$p" --label="$l" --rounds="$R" --prompt=512
    "$B" --bench=decode --model="$p" --label="$l" --threads="$T" --rounds="$R"
    "$B" --bench=disagg_goodput --model="$p" --label="$l" --requests=48 --rounds="$R"
done
has llama110m-f32 || exit 0
M4K="$MD/llama110m-ctx4096-f32.gguf"
[ -f "$M4K" ] || "$MOONLET" gen-model --out "$M4K" --dim 768 --hidden 2048 --layers 12 \
    --heads 12 --vocab 32000 --seq-len 4096 --type f32 --seed 1
"$B" --bench=handover --model="$M4K" --label=llama110m-ctx4096-f32 --rounds="$R" --prompt=2048
for s in 1984 1792; do
    "$B" --bench=prefix_reuse --model="$M4K" --label=llama110m-ctx4096-f32 --rounds="$R" \
        --prompt=2048 --shared="$s"
done
for r in 1 2; do
    "$B" --bench=messages --model="$M4K" --label=llama110m-ctx4096-f32 --threads="$T" \
        --prompt=2048 --max-tokens=128 --replicas="$r"
done
