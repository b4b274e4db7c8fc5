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

# the test command also installs a one-machine Slurm (the tests labelled slurm),
# promtool and Chromium (the gateway's metrics lint and browser CORS test)
[ "$cmd" = test ] && export MOON_SLURM_DEPS=1 MOON_GATEWAY_DEPS=1
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
    # The main job: a local serving cluster under mpirun on the bundled
    # stories260K (rank 0: gateway + conductor; rank 1: store; ranks 2-3:
    # prefill; ranks 4-5: decode; any of ranks 1-5 may die and it serves on),
    # queried with curl and measured with moonlet bench.
    M=examples/models/stories260K/stories260K.gguf
    PORT=${PORT:-8000}
    URL=http://127.0.0.1:$PORT
    LOG=$(mktemp)
    export OMPI_MCA_btl=self,vader OMPI_MCA_oob_tcp_if_include=lo UCX_NET_DEVICES=lo
    export OMPI_MCA_rmaps_base_oversubscribe=1
    echo "--- mpirun -np 6 moonlet serve --model $M --prefill 2 --decode 2 --port $PORT  (log: $LOG)"
    mpirun -np 6 --oversubscribe --mca orte_enable_recovery 1 --mca odls_base_sigkill_timeout 35 \
        "$BUILD_DIR/launch/moonlet" serve --model "$M" --prefill 2 --decode 2 --port "$PORT" \
        </dev/null >"$LOG" 2>&1 &
    SERVER=$!
    trap 'kill -TERM $SERVER 2>/dev/null; wait $SERVER 2>/dev/null' EXIT
    for _ in $(seq 120); do
        curl -sf "$URL/health" >/dev/null && break
        kill -0 $SERVER 2>/dev/null || { cat "$LOG"; exit 1; }
        sleep 0.5
    done
    curl -sf "$URL/health" >/dev/null || { echo "the cluster did not come up"; cat "$LOG"; exit 1; }
    echo "--- GET /v1/models"
    curl -s "$URL/v1/models"; echo
    echo "--- POST /v1/completions (greedy)"
    curl -s "$URL/v1/completions" -H 'content-type: application/json' \
        -d "{\"prompt\": \"${PROMPT:-Once upon a time}\", \"max_tokens\": 48, \"temperature\": 0}"
    echo
    echo "--- POST /v1/chat/completions"
    curl -s "$URL/v1/chat/completions" -H 'content-type: application/json' \
        -d '{"messages": [{"role": "user", "content": "Tell me about Lily."}], "max_tokens": 32}'
    echo
    echo "--- POST /v1/completions, streamed (tokens as they arrive)"
    curl -sN "$URL/v1/completions" -H 'content-type: application/json' \
        -d '{"prompt": "Lily and Tom", "max_tokens": 48, "temperature": 0, "stream": true}' |
        python3 -u -c '
import json, sys
for line in sys.stdin:
    if line.startswith("data: {"):
        print(json.loads(line[6:])["choices"][0]["text"], end="", flush=True)
print()'
    echo "--- moonlet bench shared-prefix (32 chats over 4 system prompts)"
    "$BUILD_DIR/launch/moonlet" bench shared-prefix --base-url "$URL" --num-prompts 32 \
        --max-concurrency 4 --prefix-len 96 --output-len 24 --seed 1
    echo "--- /metrics: prefix cache"
    curl -s "$URL/metrics" | grep -E '^moonlet:prefix_cache_(queries|hits)_total'
    # SIGTERM to rank 0 drains and stops every rank at once (mpirun's own
    # SIGTERM waits odls_base_sigkill_timeout before it signals the ranks)
    R0=$(sed -n 's/.*rank 0 is pid \([0-9]*\).*/\1/p' "$LOG" | head -1)
    kill -TERM "${R0:-$SERVER}"; wait $SERVER 2>/dev/null || true
    trap - EXIT
    echo "--- the cluster stopped" ;;
test)
    tests/scripts/check_format.sh # the repository's .clang-format (skipped without it)
    (cd "$BUILD_DIR" && ctest --output-on-failure -j "$JOBS" ${CTEST_ARGS:-})
    [ "${QUICK:-0}" = 1 ] && exit 0
    # Sanitizer passes: every test under ASan+UBSan; under TSan the stress tests,
    # the two-rank runtime and store tests and two serving clusters (label tsan).
    export ASAN_OPTIONS=fast_unwind_on_malloc=0:detect_leaks=1
    export LSAN_OPTIONS=suppressions=$PWD/tests/scripts/lsan.supp:print_suppressions=0
    export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
    export UCX_MEM_EVENTS=no # UCX's malloc/madvise hooks crash under TSan
    for pass in asan tsan; do
        dir=$BUILD_DIR-$pass
        opt=$([ $pass = asan ] && echo -DMOON_SANITIZE=ON || echo -DMOON_TSAN=ON)
        echo "=== sanitizer pass: $pass ($dir)"
        cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Debug "$opt" >/dev/null
        labels=$([ $pass = asan ] && echo "unit|mpi|kvstore|model|serve|gateway|replay" || echo "stress|tsan")
        # TSan runs seven tests: build only what they run (the whole tree took minutes)
        targets=$([ $pass = tsan ] && echo "--target $(tests/scripts/pass_targets.sh "$dir" "$labels")" || true)
        cmake --build "$dir" -j "$JOBS" $targets
        (cd "$dir" && ctest --output-on-failure -j "$JOBS" -L "$labels" -LE "nosan|no$pass")
    done
    # CUDA pass: the CUDA build must compile, and its binaries start and skip
    # their GPU checks on a machine without a GPU.
    if [ -x "${CUDA_NVCC:-/usr/local/cuda/bin/nvcc}" ]; then
        echo "=== CUDA build ($BUILD_DIR-cuda)"
        cmake -S . -B "$BUILD_DIR-cuda" -DMOON_WITH_CUDA=ON >/dev/null
        # The code that CUDA changes: every library (moonlet links them all),
        # the CUDA anchors (bench_model) and what the cuda tests run.
        cmake --build "$BUILD_DIR-cuda" -j "$JOBS" --target moonlet bench_model \
            $(tests/scripts/pass_targets.sh "$BUILD_DIR-cuda" cuda)
        (cd "$BUILD_DIR-cuda" && ctest --output-on-failure -L cuda)
    else
        echo "=== CUDA build skipped: no CUDA toolkit (nvcc) on this machine"
    fi ;;
*)
    echo "usage: $0 demo|test" >&2; exit 2 ;;
esac
