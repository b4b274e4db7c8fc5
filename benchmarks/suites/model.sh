#!/usr/bin/env bash
# benchmarks/suites/model.sh - model engine suite: for each model, the anchors
# (impl=roofline: streaming-read bandwidth with threads = cores over the
# weight bytes per token = the batch-1 decode bound; impl=openblas: sgemm's
# FLOP rate at the 512-token prefill shapes, as tokens/s; impl=compute_roofline,
# batch 32: the peak multiply-add rate with threads = cores (AVX-512 FMA, and
# vdpbf16ps for the BF16 model) over the FLOPs of one decode token = the bound
# of a compute-bound decode batch) and the engine
# (impl=cpu): decode at batch 1, 8, 32 and a 512-token prefill; for the BF16
# model also batch 32 without BF16 products (impl=cpu_f32_act). One process
# per configuration (peak_rss_mib is that configuration's). Models: the
# 110M-parameter random Llama (dim 768, hidden 2048, 12 layers, 12 heads,
# vocab 32000) in F32 and BF16, generated once into $BUILD_DIR/bench-models,
# and the bundled stories260K. Env: BENCH_BIN, BUILD_DIR, SMOKE=1 (tiny).
set -euo pipefail
BENCH_BIN=${BENCH_BIN:-build/benchmarks}
BUILD_DIR=${BUILD_DIR:-build}
B="$BENCH_BIN/bench_model"
MOONLET="$BUILD_DIR/launch/moonlet"
T=$(nproc)
MD="$BUILD_DIR/bench-models"
mkdir -p "$MD"
# shellcheck source=bench_models.inc
source "$(dirname "$0")/bench_models.inc"

if [ "${SMOKE:-0}" = 1 ]; then
    [ -f "$MD/smoke.gguf" ] || "$MOONLET" gen-model --out "$MD/smoke.gguf" --dim 64 --hidden 128 \
        --layers 2 --heads 4 --vocab 512 --seq-len 128
    "$B" --model="$MD/smoke.gguf" --label=smoke --bench=decode --batch=2 --iters=2
    "$B" --model="$MD/smoke.gguf" --label=smoke --bench=prefill --prompt=32 --iters=1
    "$B" --model="$MD/smoke.gguf" --label=smoke --bench=fma_peak --batch=32 --iters=1
    exit 0
fi

gen_llama110m

# The engine runs its own thread pool and calls OpenBLAS single-threaded. An
# OpenBLAS built with threads starts its workers at load, and they spin
# (sched_yield) for about 0.1 s before they sleep: in a run that short (the
# stories260K lines) they take cores from the engine's threads (prefill 512
# 55-63k -> 128-131k tok/s without them). So engine runs load OpenBLAS with
# one thread; the openblas anchor keeps T.
E() { OPENBLAS_NUM_THREADS=1 "$B" "$@"; }

run_model() { # path label decode_iters
    local m=$1 l=$2 it=$3
    "$B" --model="$m" --label="$l" --bench=roofline --threads="$T" --iters=12
    "$B" --model="$m" --label="$l" --bench=openblas --threads="$T" --prompt=512 --iters=6
    "$B" --model="$m" --label="$l" --bench=fma_peak --threads="$T" --batch=32 --iters=8
    # batch 1 also carries roofline_tokens_per_s measured between its rounds
    E --model="$m" --label="$l" --bench=decode --batch=1 --threads="$T" --iters=$((it * 2)) \
        --interleave=6
    # best of 3 rounds of it/3 steps: the context span of each of batch 1's rounds
    # (attention grows with it; it is most of a step for stories260K)
    for b in 8 32; do
        E --model="$m" --label="$l" --bench=decode --batch=$b --threads="$T" --iters="$it" --rounds=3
    done
    if [ "$l" = llama110m-bf16 ]; then
        # impl=cpu_f32_act: the batch-in-lanes steps without BF16 products
        # (MOON_CPU_BF16_DP=0, activations stay F32: the exact mode)
        MOON_CPU_BF16_DP=0 E --model="$m" --label="$l" --impl=cpu_f32_act --bench=decode \
            --batch=32 --threads="$T" --iters="$it" --rounds=3
    fi
    E --model="$m" --label="$l" --bench=prefill --prompt=512 --threads="$T" --iters=8
}

# REPEAT=n runs the whole set n times (the machine is shared: compare the best).
for i in $(seq "${REPEAT:-1}"); do
    run_model "$MD/llama110m-f32.gguf" llama110m-f32 24
    run_model "$MD/llama110m-bf16.gguf" llama110m-bf16 24
    run_model examples/models/stories260K/stories260K.gguf stories260K 200 # ctx 512: 64 + 2 x 200 steps fit
done
