#!/usr/bin/env bash
# Savina trio on the in-process runtime, one process per benchmark (peak RSS).
# Anchors (benchmarks/ANCHORS.md, same 2-core machines): CAF 0.17.6 2.2/2.3/3.3 M msgs/s with
# 5.8/7.2/30 MiB; Erlang 25 3.5/3.6/2.1 M msgs/s. SMOKE=1: tiny counts.
set -euo pipefail
B=${BENCH_BIN:?}/bench_actors
if [ "${SMOKE:-0}" = 1 ]; then
    "$B" --bench=pingpong --n=1000
    "$B" --bench=ring --actors=100 --n=10000
    "$B" --bench=forkjoin --actors=10 --n=1000
    exit 0
fi
for i in $(seq "${REPEAT:-1}"); do
    "$B" --bench=pingpong --n=1000000
    "$B" --bench=ring --actors=1000 --n=10000000
    "$B" --bench=forkjoin --actors=60 --n=100000
done
