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
# Round trips: a million (100k lasted 30 ms: one descheduling sank a line).
# Bulk counts (per 4 MiB line; 64 MiB lines run a quarter): shared memory
# moves 4 MiB in ~70 us, so 2000 transfers (~0.15 s) and 1000 for the anchor,
# where a few hundred lasted 7-15 ms and one descheduling of a rank halved a
# line; tcp moves ~1.5 GB/s, and UCX's own tcp put ~0.03 GB/s (10 for it).
if [ "${SMOKE:-0}" = 1 ]; then
    rt=200; stream=2000; lat_n=1000; rounds=1
    bulk_shm=2; bulk_tcp=2; bw_n_shm=4; bw_n_tcp=2
else
    rt=1000000; stream=1000000; lat_n=1000000; rounds=3 # ~0.3 s of round trips each
    bulk_shm=2000; bulk_tcp=200; bw_n_shm=1000; bw_n_tcp=10
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

# The line with the largest value of FIELD among those on stdin.
best_of() {
    awk -v f="\"$1\": " '{ i = index($0, f); if (i == 0) next; v = substr($0, i + length(f)) + 0
                            if (line == "" || v > best) { best = v; line = $0 } } END { print line }'
}

# Round trips: $rounds rounds, each the anchor then Moonlet and MPI, and the
# best of each kind is printed. The VM's cores change speed for seconds at a
# time: a round of one side in a slow spell sank the ratio (MPI fell with
# Moonlet then, to a third).
for tls in shm tcp; do
    if [ "$tls" = shm ]; then
        export UCX_TLS=self,sysv,posix,cma
        n_bw=$bw_n_shm bulk=$bulk_shm
    else
        export UCX_TLS=self,tcp
        n_bw=$bw_n_tcp bulk=$bulk_tcp
    fi
    have_pt=0
    command -v ucx_perftest >/dev/null && have_pt=1
    rt_lines=""
    for _ in $(seq "$rounds"); do
        if [ $have_pt = 1 ]; then
            read -r n lat _ <<<"$(perftest "$tls" tag_lat 64 "$lat_n")"
            rt_lines+="$(anchor_line roundtrip "$tls" 64 round_trips_per_s \
                "$(awk -v l="$lat" 'BEGIN {printf "%.0f", 1e6 / (2 * l)}')" "$n" \
                "tag_lat one-way average latency, doubled; best of $rounds rounds")"$'\n'
        fi
        rt_lines+="$(mpirun -np 2 -x UCX_TLS "$BENCH_BIN/bench_transport" --tls="$tls" \
            --rt_iters="$rt" --stream_msgs=0 --bulk_iters=0 </dev/null)"$'\n'
    done
    for impl in ucx_perftest mpi moonlet; do
        grep "\"impl\": \"$impl\"" <<<"$rt_lines" | best_of round_trips_per_s || true
    done
    # Bulk: $rounds rounds too, each the anchors then Moonlet's four lines,
    # the best of each (bench, size, impl) printed. Run once each, a 64 MiB
    # line of either side fell 10-15% short in one run of four, the other
    # side not (the VM's memory bandwidth moves for seconds at a time).
    bulk_lines=""
    for round in $(seq "$rounds"); do
        if [ $have_pt = 1 ]; then
            for size in 4194304 67108864; do
                for t in ucp_put_bw ucp_get; do
                    # UCX's own tcp put crawls at 64 MiB (~0.03 GB/s, 20 s a
                    # run; the tcp anchor there is ucp_get): once is enough
                    if [ "$tls" = tcp ] && [ "$t" = ucp_put_bw ] && [ "$size" = 67108864 ] &&
                        [ "$round" -gt 1 ]; then
                        continue
                    fi
                    bench=bulk_put; [ "$t" = ucp_get ] && bench=bulk_get
                    read -r n _ bw <<<"$(perftest "$tls" "$t" "$size" "$n_bw")"
                    bulk_lines+="$(anchor_line "$bench" "$tls" "$size" gb_per_s \
                        "$(awk -v b="$bw" 'BEGIN {printf "%.3f", b / 1000}')" "$n" \
                        "$t average bandwidth; best of $rounds rounds")"$'\n'
                done
            done
        fi
        bulk_lines+="$(mpirun -np 2 -x UCX_TLS "$BENCH_BIN/bench_transport" --tls="$tls" \
            --rt_iters=0 --mpi_iters=0 --stream_msgs=0 --bulk_iters="$bulk" </dev/null)"$'\n'
    done
    if [ $have_pt = 0 ]; then
        echo "{\"suite\": \"transport\", \"impl\": \"ucx_perftest\", \"tls\": \"$tls\", \"skipped\": \"ucx_perftest not installed\"}"
    fi
    for bench in bulk_put bulk_get; do
        for size in 4194304 67108864; do
            for impl in ucx_perftest moonlet; do
                grep "\"bench\": \"$bench\"" <<<"$bulk_lines" | grep "\"impl\": \"$impl\"" |
                    grep "\"size_bytes\": $size," | best_of gb_per_s || true
            done
        done
    done
    mpirun -np 2 -x UCX_TLS "$BENCH_BIN/bench_transport" --tls="$tls" --rt_iters=0 --mpi_iters=0 \
        --stream_msgs="$stream" --bulk_iters=0 </dev/null
done
