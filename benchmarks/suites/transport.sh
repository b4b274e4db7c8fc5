#!/usr/bin/env bash
# benchmarks/suites/transport.sh - the distributed runtime between two ranks
# under mpirun, over UCX shared memory and UCX tcp, each beside its anchors
# measured in the same run: ucx_perftest (tag_lat 64 B as round trips, ucp_put_bw
# and ucp_get at 4 MiB / 64 MiB) and an MPI ping-pong (inside bench_transport).
# One JSON line per configuration: suite, bench (roundtrip, stream, bulk_get,
# bulk_put), impl (moonlet, ucx_perftest, mpi), tls (shm, tcp), size_bytes and
# round_trips_per_s | msgs_per_s | gb_per_s.
# Env: BENCH_BIN (set by benchmarks/run), SMOKE=1 for tiny counts.
set -euo pipefail
BENCH_BIN=${BENCH_BIN:-build/benchmarks}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
export OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_rmaps_base_oversubscribe=1 UCX_NET_DEVICES=lo
if [ "${SMOKE:-0}" = 1 ]; then
    rt=200; stream=2000; bulk=2; lat_n=1000; bw_n=4
else
    rt=100000; stream=1000000; bulk=200; lat_n=100000; bw_n=100
fi

free_port() {
    local p
    for p in $(shuf -i 20000-40000 -n 50); do
        if ! (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null; then echo "$p"; return; fi
    done
    echo 23456
}

# Server and client on cores of their own, as mpirun binds the two ranks of
# the moonlet runs (unbound, the scheduler sometimes puts both on one core).
if [ "$(nproc)" -ge 2 ]; then pin_srv=(-c 0); pin_cli=(-c 1); else pin_srv=(); pin_cli=(); fi

# perftest TLS_LABEL TEST SIZE ITERS -> "Final:" fields on stdout
perftest() {
    local port out
    port=$(free_port)
    ucx_perftest -p "$port" "${pin_srv[@]}" >/dev/null 2>&1 &
    local srv=$!
    sleep 0.3
    out=$(timeout 60 ucx_perftest 127.0.0.1 -p "$port" "${pin_cli[@]}" -t "$2" -s "$3" -n "$4" 2>/dev/null |
          awk '/^Final:/ {print $2, $4, $6}')
    wait "$srv" 2>/dev/null || true
    echo "$out"
}

anchor_line() { # bench tls size metric value iters note
    printf '{"suite": "transport", "bench": "%s", "impl": "ucx_perftest", "tls": "%s", "size_bytes": %s, "%s": %s, "iters": %s, "note": "%s"}\n' "$@"
}

for tls in shm tcp; do
    n_bw=$bw_n
    if [ "$tls" = shm ]; then
        export UCX_TLS=self,sysv,posix,cma
    else
        export UCX_TLS=self,tcp
        n_bw=$(( bw_n / 10 > 2 ? bw_n / 10 : 2 )) # UCX's own tcp RMA is slow here
    fi
    if command -v ucx_perftest >/dev/null; then
        read -r n lat _ <<<"$(perftest "$tls" tag_lat 64 "$lat_n")"
        anchor_line roundtrip "$tls" 64 round_trips_per_s \
            "$(awk -v l="$lat" 'BEGIN {printf "%.0f", 1e6 / (2 * l)}')" "$n" \
            "tag_lat one-way average latency, doubled"
        for size in 4194304 67108864; do
            for t in ucp_put_bw ucp_get; do
                bench=bulk_put; [ "$t" = ucp_get ] && bench=bulk_get
                read -r n _ bw <<<"$(perftest "$tls" "$t" "$size" "$n_bw")"
                anchor_line "$bench" "$tls" "$size" gb_per_s \
                    "$(awk -v b="$bw" 'BEGIN {printf "%.3f", b / 1000}')" "$n" "$t average bandwidth"
            done
        done
    else
        echo "{\"suite\": \"transport\", \"impl\": \"ucx_perftest\", \"tls\": \"$tls\", \"skipped\": \"ucx_perftest not installed\"}"
    fi
    mpirun -np 2 -x UCX_TLS "$BENCH_BIN/bench_transport" --tls="$tls" --rt_iters="$rt" \
        --stream_msgs="$stream" --bulk_iters="$bulk" </dev/null
done
