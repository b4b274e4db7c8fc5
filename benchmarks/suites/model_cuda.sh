#!/usr/bin/env bash
# benchmarks/suites/model_cuda.sh - the CUDA engine (a MOON_WITH_CUDA build on
# a machine with a GPU): for each model, the GPU anchors measured in the same
# run (impl=cuda_roofline: device-memory read bandwidth over the bytes one
# decode token reads, with the weights as the backend keeps them, F32, and
# native_tokens_per_s over the file's weight bytes; impl=cublas: cuBLAS
# sgemm's FLOP rate at the 512-token prefill shapes, as tokens/s) and the
# engine (impl=cuda): decode at batch 1, 8, 32 (context 64 on) and a
# 512-token prefill; for the F32 model also decode without CUDA graphs
# (impl=cuda_nograph: a launch per kernel). Models as in model.sh: the 110M
# random Llama in F32 and BF16 (generated into $BUILD_DIR/bench-models) and
# stories260K.
# Env: BENCH_BIN, BUILD_DIR, SMOKE=1 (tiny).
set -euo pipefail
BENCH_BIN=${BENCH_BIN:-build/benchmarks}
BUILD_DIR=${BUILD_DIR:-build}
B="$BENCH_BIN/bench_model"
MOONLET="$BUILD_DIR/launch/moonlet"
MD="$BUILD_DIR/bench-models"
mkdir -p "$MD"
# shellcheck source=bench_models.inc
source "$(dirname "$0")/bench_models.inc"

if ! "$B" --model=examples/models/stories260K/stories260K.gguf --bench=cuda_roofline --iters=1 |
        grep -q '"read_gb_per_s": [1-9]'; then
    echo "model_cuda: no GPU, or a build without MOON_WITH_CUDA: nothing to measure" >&2
    exit 0
fi

run_model() { # path label decode_iters
    local m=$1 l=$2 it=$3
    "$B" --model="$m" --label="$l" --bench=cuda_roofline --iters=10
    "$B" --model="$m" --label="$l" --bench=cublas --prompt=512 --iters=10
    for b in 1 8 32; do
        "$B" --model="$m" --label="$l" --impl=cuda --bench=decode --batch=$b --threads=1 \
            --iters="$it" --rounds=3
    done
    if [ "$l" = llama110m-f32 ]; then
        for b in 1 32; do
            "$B" --model="$m" --label="$l" --impl=cuda_nograph --bench=decode \
                --batch=$b --threads=1 --iters="$it" --rounds=3
        done
    fi
    "$B" --model="$m" --label="$l" --impl=cuda --bench=prefill --prompt=512 --threads=1 --iters=24
}

if [ "${SMOKE:-0}" = 1 ]; then
    run_model examples/models/stories260K/stories260K.gguf stories260K 6
    exit 0
fi
gen_llama110m
for i in $(seq "${REPEAT:-1}"); do
    run_model "$MD/llama110m-f32.gguf" llama110m-f32 300
    run_model "$MD/llama110m-bf16.gguf" llama110m-bf16 300
    run_model examples/models/stories260K/stories260K.gguf stories260K 300
done
