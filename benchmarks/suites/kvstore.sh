#!/usr/bin/env bash
# benchmarks/suites/kvstore.sh - kvstore suite: the shard library's in-process
# small-operation costs (impl=moonlet_local), then an anchor measured in the same
# run: redis-server on a free 127.0.0.1 port driven by redis-benchmark (GET/SET
# of 4 KiB values, 1 client, loopback TCP, impl=redis). The two are not the same
# path: redis pays a socket round trip per op; the comparable moonlet figure is
# the distributed get/put path, which comes with the store shard actor.
# Env: BENCH_BIN (set by benchmarks/run), SMOKE=1 for tiny counts.
set -euo pipefail
BENCH_BIN=${BENCH_BIN:-build/benchmarks}
if [ "${SMOKE:-0}" = 1 ]; then iters=1000; redis_n=500; else iters=200000; redis_n=50000; fi

"$BENCH_BIN/bench_kvstore_ops" --iters=$iters

if ! command -v redis-server >/dev/null || ! command -v redis-benchmark >/dev/null; then
    echo '{"suite": "kvstore", "impl": "redis", "skipped": "redis-server or redis-benchmark not installed"}'
    exit 0
fi
port=""
for p in $(seq 23000 23100); do
    if ! (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null; then port=$p; break; fi
done
if [ -z "$port" ]; then
    echo '{"suite": "kvstore", "impl": "redis", "skipped": "no free loopback port"}'
    exit 0
fi
workdir=$(mktemp -d)
redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no \
    --dir "$workdir" --daemonize no --loglevel warning >"$workdir/redis.log" 2>&1 &
redis_pid=$!
cleanup() { kill "$redis_pid" 2>/dev/null || true; wait "$redis_pid" 2>/dev/null || true; rm -rf "$workdir"; }
trap cleanup EXIT
for _ in $(seq 1 50); do
    redis-cli -h 127.0.0.1 -p "$port" ping >/dev/null 2>&1 && break
    sleep 0.1
done
# CSV: "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
redis-benchmark -h 127.0.0.1 -p "$port" -t set,get -d 4096 -c 1 -n "$redis_n" -q --csv |
    tr -d '"' | awk -F, -v n="$redis_n" '
    $1 == "SET" || $1 == "GET" {
        bench = ($1 == "SET") ? "small_put" : "small_get"
        printf "{\"suite\": \"kvstore\", \"bench\": \"%s\", \"impl\": \"redis\", \"op\": \"%s\", " \
               "\"size_bytes\": 4096, \"clients\": 1, \"iters\": %d, \"ops_per_s\": %s, " \
               "\"p50_us\": %.1f, \"p99_us\": %.1f, \"note\": \"anchor: redis-server over loopback TCP, " \
               "not the same path as moonlet_local\"}\n", bench, $1, n, $2, $5 * 1000, $7 * 1000
    }'
