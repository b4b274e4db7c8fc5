#!/usr/bin/env bash
# tests/scripts/gpu_checks.sh CUDA_BUILD_DIR - the GPU checks of a
# MOON_WITH_CUDA build, on a machine with a GPU (CI has none: there these
# tests report themselves skipped). Runs the cuda-labelled tests (test_gpu,
# test_gpu_bcast: the weight path's staging, upload and one-rank NCCL group,
# test_cuda with and without CUDA graphs, the golden outputs on the CUDA
# backend in test_golden, `moonlet generate --backend cuda`), test_cuda under
# compute-sanitizer memcheck where it is installed, the weight path's staging
# benchmark (bench_gpu_stage), then the model_cuda
# benchmark suite (JSON lines). Exit status 1 if any check failed.
set -uo pipefail
B=$(cd "${1:?usage: gpu_checks.sh CUDA_BUILD_DIR}" && pwd)
cd "$(dirname "$0")/../.."
T=$B/tests/unit
fail=0
check() {
    echo "== $*"
    "$@" || { echo "FAILED: $*"; fail=1; }
}
check "$T/base/test_gpu"
check "$T/base/test_gpu_bcast"
check "$T/model/test_cuda"
check env MOON_CUDA_GRAPHS=0 "$T/model/test_cuda"
check "$T/model/test_golden"
echo "== moonlet generate --backend cuda (on the GPU, the golden text)"
out=$("$B/launch/moonlet" generate --model examples/models/stories260K/stories260K.gguf \
    --prompt "Once upon a time" --max-tokens 20 --backend cuda 2>&1)
echo "$out"
if ! grep -q '^, there was a little girl named Lily\. She loved' <<<"$out" ||
    grep -q 'running on the CPU' <<<"$out"; then
    echo "FAILED: moonlet generate --backend cuda"
    fail=1
fi
if command -v compute-sanitizer >/dev/null; then
    check compute-sanitizer --tool memcheck --error-exitcode 1 "$T/model/test_cuda"
fi
echo "== bench_gpu_stage (weights: pinned staging + NCCL, one rank, against a pinned cudaMemcpy)"
check "$B/benchmarks/bench_gpu_stage" --mib=1024 --rounds=5
echo "== benchmarks/suites/model_cuda.sh"
BUILD_DIR=$B BENCH_BIN=$B/benchmarks bash benchmarks/suites/model_cuda.sh || fail=1
exit $fail
