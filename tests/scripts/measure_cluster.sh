#!/usr/bin/env bash
# tests/scripts/measure_cluster.sh MOONLET MODEL [NP] [SECONDS] - starts an
# idle `mpirun -np NP moonlet serve` cluster (default 4 ranks), waits for
# /health, lets it settle, then prints one line per rank with its CPU over
# SECONDS (default 10) of idleness, read from /proc/PID/stat (utime+stime),
# in % of one core, and the latency of lone greedy /v1/completions (LONE_N,
# default 5, one at a time 0.5 s apart: median, min, max; run it beside
# `stress-ng --cpu 2` to see it under contention). A measurement, not a test: it asserts nothing. Extra serve
# flags: MOON_SERVE_ARGS. Port: PORT (default 8093).
set -u
M=$1; MODEL=$2; NP=${3:-4}; SECS=${4:-10}
PORT=${PORT:-8093}
URL=http://127.0.0.1:$PORT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
export OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_rmaps_base_oversubscribe=1 UCX_NET_DEVICES=lo
LOG=$(mktemp)
# shellcheck disable=SC2086
mpirun -np "$NP" "$M" serve --model "$MODEL" --port "$PORT" ${MOON_SERVE_ARGS:-} \
    </dev/null >"$LOG" 2>&1 &
SERVER=$!
trap 'kill -TERM $SERVER 2>/dev/null; wait $SERVER 2>/dev/null; rm -f "$LOG"' EXIT
for _ in $(seq 240); do
    curl -sf "$URL/health" >/dev/null && break
    kill -0 $SERVER 2>/dev/null || { cat "$LOG"; exit 1; }
    sleep 0.5
done
curl -sf "$URL/health" >/dev/null || { echo "the cluster did not come up"; cat "$LOG"; exit 1; }
sleep 3
pids=$(pgrep -P "$SERVER" -f "$M" | sort -n)
[ -n "$pids" ] || pids=$(pgrep -f "$M serve --model $MODEL --port $PORT" | grep -vx "$SERVER")
ticks() { awk '{ s = $0; sub(/^.*\) /, "", s); split(s, f, " "); print f[12] + f[13] }' "/proc/$1/stat"; }
declare -A t0
for p in $pids; do t0[$p]=$(ticks "$p"); done
sleep "$SECS"
hz=$(getconf CLK_TCK)
total=0
for p in $pids; do
    t1=$(ticks "$p")
    pct=$(awk -v a="${t0[$p]}" -v b="$t1" -v hz="$hz" -v s="$SECS" \
        'BEGIN { printf "%.2f", (b - a) * 100 / hz / s }')
    total=$(awk -v a="$total" -v b="$pct" 'BEGIN { printf "%.2f", a + b }')
    echo "idle cpu: pid $p ${pct}% of a core"
done
echo "idle cpu: total ${total}% of a core over ${SECS} s, $NP ranks"
lat=$(mktemp)
for i in $(seq "${LONE_N:-5}"); do
    curl -s -m 60 -o /dev/null -w "%{time_total}\n" "$URL/v1/completions" \
        -H 'content-type: application/json' \
        -d '{"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0}' >>"$lat"
    sleep 0.5
done
sort -g "$lat" | awk '{ v[NR] = $1 } END {
    printf "lone request (16 tokens, one at a time, %d): median %.4f s, min %.4f s, max %.4f s\n",
        NR, v[int((NR + 1) / 2)], v[1], v[NR] }'
rm -f "$lat"
grep -E "lost|stalled|suspected" "$LOG" | head -5
