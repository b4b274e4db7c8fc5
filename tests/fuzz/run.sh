#!/usr/bin/env bash
# tests/fuzz/run.sh TARGET [MINUTES] - fuzzes one target (gguf, msg, trace)
# with clang's libFuzzer under ASan + UBSan for MINUTES (default 5), then
# merges what it found into tests/fuzz/corpus/TARGET (-merge=1 keeps the
# inputs that add coverage). CTest replays that corpus in every run. Needs
# Debian's clang and libclang-rt-dev (launch/install_deps.sh installs them).
# BUILD_DIR (default build-fuzz) holds the clang build.
set -euo pipefail
cd "$(dirname "$0")/../.."
target=${1:?usage: tests/fuzz/run.sh TARGET [MINUTES]}
minutes=${2:-5}
dir=${BUILD_DIR:-build-fuzz}
corpus=tests/fuzz/corpus/$target
[ -d "$corpus" ] || { echo "run.sh: no corpus folder $corpus (targets: $(ls tests/fuzz/corpus))" >&2; exit 2; }
cmake -S . -B "$dir" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DMOON_FUZZ=ON \
    -DMOON_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build "$dir" -j "${JOBS:-$(nproc)}" --target "fuzz_$target"
new=$(mktemp -d)
merged=$(mktemp -d)
trap 'rm -rf "$new" "$merged"' EXIT
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
"$dir/tests/fuzz/fuzz_$target" -max_total_time=$((minutes * 60)) -max_len=65536 \
    -rss_limit_mb=2048 -print_final_stats=1 "$new" "$corpus"
"$dir/tests/fuzz/fuzz_$target" -merge=1 "$merged" "$corpus" "$new"
find "$corpus" -type f -delete
cp "$merged"/* "$corpus"/
echo "run.sh: corpus/$target holds $(ls "$corpus" | wc -l) inputs"
