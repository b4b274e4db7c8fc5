#!/usr/bin/env bash
# moonlet.sh - the README's two commands.
#   launch/moonlet.sh demo   install what is missing, build, run the main job
#   launch/moonlet.sh test   install what is missing, build, pass every test; then the
#                            same tests under ASan+UBSan, the threaded ones under TSan,
#                            and the CUDA build (when a CUDA toolkit is installed)
# Options through the environment: BUILD_DIR (default build), JOBS (default nproc),
# MOON_SANITIZE=1 / MOON_TSAN=1 (sanitizer build in BUILD_DIR), CTEST_ARGS,
# QUICK=1 (test: skip the sanitizer passes).
set -euo pipefail
cd "$(dirname "$0")/.."
cmd=${1:-demo}
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}

launch/install_deps.sh

flags=(-DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo})
[ "${MOON_SANITIZE:-0}" = 1 ] && flags+=(-DMOON_SANITIZE=ON)
[ "${MOON_TSAN:-0}" = 1 ] && flags+=(-DMOON_TSAN=ON)
[ "${MOON_WITH_CUDA:-0}" = 1 ] && flags+=(-DMOON_WITH_CUDA=ON)
cmake -S . -B "$BUILD_DIR" "${flags[@]}" >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
case $cmd in
demo)
    # The actor runtime: a custom actor program (README walkthrough).
    "$BUILD_DIR/examples/supervised_pingpong"
    # The model engine on the bundled default model (stories260K).
    echo "--- moonlet generate (bundled stories260K) ---"
    exec "$BUILD_DIR/launch/moonlet" generate --model models/stories260K/stories260K.gguf \
        --prompt "${PROMPT:-Once upon a time}" --max-tokens "${MAX_TOKENS:-64}" ;;
test)
    tests/scripts/check_format.sh # the repository's .clang-format (skipped without it)
    (cd "$BUILD_DIR" && ctest --output-on-failure -j "$JOBS" ${CTEST_ARGS:-})
    [ "${QUICK:-0}" = 1 ] && exit 0
    # Sanitizer passes: every test under ASan+UBSan; under TSan the stress tests
    # and the two-rank runtime and store tests (label tsan).
    export ASAN_OPTIONS=fast_unwind_on_malloc=0:detect_leaks=1
    export LSAN_OPTIONS=suppressions=$PWD/tests/scripts/lsan.supp:print_suppressions=0
    export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
    export UCX_MEM_EVENTS=no # UCX's malloc/madvise hooks crash under TSan
    for pass in asan tsan; do
        dir=$BUILD_DIR-$pass
        opt=$([ $pass = asan ] && echo -DMOON_SANITIZE=ON || echo -DMOON_TSAN=ON)
        echo "=== sanitizer pass: $pass ($dir)"
        cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Debug "$opt" >/dev/null
        cmake --build "$dir" -j "$JOBS"
        labels=$([ $pass = asan ] && echo "unit|mpi|kvstore|model|serve" || echo "stress|tsan")
        (cd "$dir" && ctest --output-on-failure -j "$JOBS" -L "$labels" -LE "nosan|no$pass")
    done
    # CUDA pass: the CUDA build must compile, and its binaries start and skip
    # their GPU checks on a machine without a GPU.
    if [ -x "${CUDA_NVCC:-/usr/local/cuda/bin/nvcc}" ]; then
        echo "=== CUDA build ($BUILD_DIR-cuda)"
        cmake -S . -B "$BUILD_DIR-cuda" -DMOON_WITH_CUDA=ON >/dev/null
        cmake --build "$BUILD_DIR-cuda" -j "$JOBS"
        (cd "$BUILD_DIR-cuda" && ctest --output-on-failure -L cuda)
    else
        echo "=== CUDA build skipped: no CUDA toolkit (nvcc) on this machine"
    fi ;;
*)
    echo "usage: $0 demo|test" >&2; exit 2 ;;
esac
