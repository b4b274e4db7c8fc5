#!/usr/bin/env bash
# benchmarks/suites/kvstore.sh - kvstore suite, all in one run:
#  1. the shard library's in-process small-operation costs (impl=moonlet_local);
#  2. the distributed store under mpirun -np 5 (rank 0: shards, ranks 1-4:
#     clients; impl=moonlet): get/put of 256 KiB, 4 MiB, 32 MiB blocks with 1, 2,
#     4 clients, with and without client checksums; small_get/small_put of 4 KiB
#     and 32-key prefix queries, each client keeping 1 and then SMALL_DEPTH
#     (default 8) operations in flight (a prompt's blocks go together);
#  3. the copy ceiling of the bulk lines' access patterns on one core
#     (bench_copy: impl=memcpy, bench=copy, pattern one_buffer as the
#     anchor copies, get / get_stream / put as the store does);
#  4. anchors: ucx_perftest ucp_put_bw over the same UCX transports (1, 2, 4
#     concurrent server/client pairs, summed; impl=ucx_perftest) and
#     redis-server driven by redis-benchmark (GET/SET of 4 KiB values, loopback
#     TCP; impl=redis) with as many requests in flight as moonlet's line of the
#     same clients and depth: clients x depth connections, one request each
#     (redis-benchmark's own model: its default is 50 connections). So each
#     moonlet small_* line has a redis line with equal "in_flight".
# Env: BENCH_BIN (set by benchmarks/run), SMOKE=1 for tiny counts,
# KV_UCX_TLS (default self,sysv,posix,cma) for both moonlet and ucx_perftest,
# SMALL_DEPTH (default 8): small operations in flight per client; KV_SMALL_ONLY=1:
# only the small operations and their redis anchor (a quick run).
set -euo pipefail
BENCH_BIN=${BENCH_BIN:-build/benchmarks}
small_depth=${SMALL_DEPTH:-8}
if [ "${SMOKE:-0}" = 1 ]; then
    iters=1000; redis_n=500; dist_iters=8; perf_n=20; perf_bytes=$((64 << 20)); copy_bytes=$((64 << 20)); dist_min_mib=0
else
    iters=200000; redis_n=50000; dist_iters=400; perf_n=400; perf_bytes=$((16 << 30)); copy_bytes=$((8 << 30)); dist_min_mib=2048
fi

small_only=${KV_SMALL_ONLY:-0}
[ "$small_only" = 1 ] || "$BENCH_BIN/bench_kvstore_ops" --iters=$iters
[ "$small_only" = 1 ] || "$BENCH_BIN/bench_copy" --bytes=$copy_bytes

# ---- distributed store (moonlet) and its UCX anchor ----------------------------
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
export OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_rmaps_base_oversubscribe=1 UCX_NET_DEVICES=lo
export UCX_TLS=${KV_UCX_TLS:-self,sysv,posix,cma}
if command -v mpirun >/dev/null; then
    # one job per client count: rank 0 the shards, ranks 1..c the clients
    for c in 1 2 4; do
        for ck in $([ "$small_only" = 1 ] && echo 1 || echo 1 0); do
            # small operations once, in the checksum run; a failed job's log
            # goes to stderr (the runtime's warnings say why)
            log=$(mktemp)
            out=$(mpirun -np $((c + 1)) "$BENCH_BIN/bench_kvstore_dist" --iters=$dist_iters \
                      --min_mib="$dist_min_mib" \
                      --checksum=$ck --small_mask=$((ck * 7)) --small_depth="$small_depth" \
                      --small_only="$small_only" \
                      </dev/null 2>"$log") || {
                echo "{\"suite\": \"kvstore\", \"impl\": \"moonlet\", \"clients\": $c, \"checksum\": $ck, \"error\": \"bench_kvstore_dist failed\"}"
                echo "bench_kvstore_dist, $c client(s), checksum $ck, failed; its log:" >&2
                tail -n 40 "$log" >&2
            }
            rm -f "$log"
            echo "$out" | grep '^{' || true
        done
    done
else
    echo '{"suite": "kvstore", "impl": "moonlet", "skipped": "mpirun not installed"}'
fi

# ucx_perftest ucp_put_bw: n concurrent loopback server/client pairs, bandwidth
# summed (the same concurrency as n moonlet client ranks). A sum is only the
# aggregate if the pairs run at the same time: each pair moves at least
# perf_bytes (a few hundred ms), far longer than the skew of their start-ups.
# (400 puts of 256 KiB last a millisecond: pairs that short ran one after the
# other, and four summed to four times one, more than two cores can copy.)
perf_iters() { # size -> iterations
    local n=$(( perf_bytes / $1 ))
    echo $(( n > perf_n ? n : perf_n ))
}
# shellcheck source=ucx_perftest.inc
source "$(dirname "$0")/ucx_perftest.inc"
if [ "$small_only" = 1 ]; then
    : # no bandwidth anchor
elif command -v ucx_perftest >/dev/null; then
    for size in 262144 4194304 33554432; do
        for n in 1 2 4; do
            tmp=$(mktemp -d)
            for rep in 1 2 3; do # median of three runs of n concurrent pairs
                for i in $(seq 1 $n); do perf_pair $((24000 + i)) "$size" "$(perf_iters "$size")" >"$tmp/$rep.$i" & done
                wait
                cat "$tmp/$rep".* | awk '{ s += $1; k++ } END { print k, s }' >>"$tmp/sums"
            done
            sort -n -k2 "$tmp/sums" | sed -n 2p | awk -v s="$size" -v n="$n" -v it="$(perf_iters "$size")" -v tls="$UCX_TLS" '
                { k = $1; sum = $2 }
                END {
                    if (k != n || sum == 0) {
                        printf "{\"suite\": \"kvstore\", \"bench\": \"put\", \"impl\": \"ucx_perftest\", " \
                               "\"size_bytes\": %d, \"clients\": %d, \"skipped\": \"a pair failed\"}\n", s, n
                    } else {
                        printf "{\"suite\": \"kvstore\", \"bench\": \"put\", \"impl\": \"ucx_perftest\", " \
                               "\"test\": \"ucp_put_bw\", \"size_bytes\": %d, \"clients\": %d, " \
                               "\"iters\": %d, \"gb_per_s\": %.3f, \"ucx_tls\": \"%s\", \"note\": " \
                               "\"anchor: sum over concurrent pairs, median of 3 runs, same buffer every iteration\"}\n",
                               s, n, it, sum * 1.048576 / 1000, tls
                    }
                }'
            rm -rf "$tmp"
        done
    done
else
    echo '{"suite": "kvstore", "impl": "ucx_perftest", "skipped": "ucx_perftest not installed"}'
fi

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
for c in 1 2 4; do
    for depth in $(echo 1 "$small_depth" | tr ' ' '\n' | sort -nu); do
        conns=$((c * depth))
        redis-benchmark -h 127.0.0.1 -p "$port" -t set,get -d 4096 -c "$conns" -n "$redis_n" -q --csv |
            tr -d '"' | awk -F, -v n="$redis_n" -v c="$c" -v d="$depth" -v k="$conns" '
            $1 == "SET" || $1 == "GET" {
                bench = ($1 == "SET") ? "small_put" : "small_get"
                printf "{\"suite\": \"kvstore\", \"bench\": \"%s\", \"impl\": \"redis\", \"op\": \"%s\", " \
                       "\"size_bytes\": 4096, \"clients\": %d, \"depth\": %d, \"in_flight\": %d, " \
                       "\"connections\": %d, \"iters\": %d, \"ops_per_s\": %s, " \
                       "\"p50_us\": %.1f, \"p99_us\": %.1f, \"note\": \"anchor: redis-server over " \
                       "loopback TCP, one request in flight per connection\"}\n", \
                       bench, $1, c, d, k, k, n, $2, $5 * 1000, $7 * 1000
            }'
    done
done
