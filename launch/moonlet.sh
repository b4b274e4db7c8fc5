#!/usr/bin/env bash
# moonlet.sh - the README's two commands.
#   launch/moonlet.sh demo   install what is missing, build, run the main job
#   launch/moonlet.sh test   install what is missing, build, pass every test
# Options through the environment: BUILD_DIR (default build), JOBS (default nproc),
# MOON_SANITIZE=1 / MOON_TSAN=1 (sanitizer build in BUILD_DIR), CTEST_ARGS.
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
    cd "$BUILD_DIR"
    exec ctest --output-on-failure -j "$JOBS" ${CTEST_ARGS:-} ;;
*)
    echo "usage: $0 demo|test" >&2; exit 2 ;;
esac
