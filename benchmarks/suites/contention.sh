#!/usr/bin/env bash
# benchmarks/suites/contention.sh - a cluster beside other programs (issue
# 27). Starts one idle 4-rank `mpirun moonlet serve` (stories260K: rank 0
# gateway and conductor, then store, prefill, decode) and prints two JSON
# lines:
#   idle_cpu_pct_per_rank  each rank's CPU over IDLE_S (default 10) seconds
#                          of an idle cluster, from /proc/PID/stat (utime +
#                          stime), in % of one core (target < 2 per rank)
#   lone_latency_s         lone greedy completions (16 tokens, one at a time,
#                          LONE_N per side and round, default 8): the anchor
#                          on the idle machine, the measurement beside
#                          `stress-ng --cpu 2` (every core of a 2-core
#                          machine busy), alternating per round (ROUNDS,
#                          default 5): per round the median of each side;
#                          ratio = stressed / idle: median, min, max over the
#                          rounds, and the slowest single request under
#                          stress (the issue saw 6-35 s before the fix).
# SMOKE=1: tiny counts. Needs stress-ng (launch/install_deps.sh).
set -euo pipefail
BUILD=${BUILD_DIR:-build}
MOONLET=$BUILD/launch/moonlet
M=examples/models/stories260K/stories260K.gguf
ROUNDS=${ROUNDS:-5}
LONE_N=${LONE_N:-8}
IDLE_S=${IDLE_S:-10}
CPUS=${STRESS_CPUS:-2}
if [ "${SMOKE:-0}" = 1 ]; then ROUNDS=2 LONE_N=2 IDLE_S=2; fi
command -v stress-ng >/dev/null || { echo "contention.sh: stress-ng not found" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
T=$(mktemp -d)
SERVER= STRESS=
cleanup() {
    [ -n "$STRESS" ] && kill -TERM "$STRESS" 2>/dev/null && wait "$STRESS" 2>/dev/null
    [ -n "$SERVER" ] && kill -TERM "$SERVER" 2>/dev/null && wait "$SERVER" 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT
MOON_LOG_LEVEL=error mpirun -np 4 --oversubscribe --mca orte_enable_recovery 1 "$MOONLET" serve \
    --model "$M" --port 0 </dev/null >"$T/serve.log" 2>&1 &
SERVER=$!
URL=
for _ in $(seq 1200); do
    URL=$(sed -n 's|.*serving on \(http://[^ ]*\)/v1.*|\1|p' "$T/serve.log" | head -1)
    [ -n "$URL" ] && curl -sf "$URL/health" >/dev/null && break
    kill -0 "$SERVER" 2>/dev/null || { cat "$T/serve.log" >&2; exit 1; }
    sleep 0.1
done
curl -sf "$URL/health" >/dev/null || { echo "contention.sh: the cluster did not come up" >&2; exit 1; }
# rank R's pid: a child of mpirun with OMPI_COMM_WORLD_RANK=R
declare -A pid_of
for p in $(pgrep -P "$SERVER"); do
    r=$(tr '\0' '\n' <"/proc/$p/environ" | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
    [ -n "$r" ] && pid_of[$r]=$p
done
ticks() { awk '{ s = $0; sub(/^.*\) /, "", s); split(s, f, " "); print f[12] + f[13] }' "/proc/$1/stat"; }
lone() { # lone OUT: LONE_N lone completions, 0.3 s apart, one time per line
    for _ in $(seq "$LONE_N"); do
        curl -s -m 120 -o /dev/null -w "%{time_total}\n" "$URL/v1/completions" \
            -H 'content-type: application/json' \
            -d '{"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0}' >>"$1"
        sleep 0.3
    done
}

# idle CPU, after the start has settled
lone "$T/warm"
sleep 3
for r in "${!pid_of[@]}"; do echo "$r $(ticks "${pid_of[$r]}")" >>"$T/t0"; done
sleep "$IDLE_S"
for r in "${!pid_of[@]}"; do echo "$r $(ticks "${pid_of[$r]}")" >>"$T/t1"; done

for r in $(seq "$ROUNDS"); do
    order="idle stress"
    [ $((r % 2)) = 0 ] && order="stress idle"
    for side in $order; do
        if [ "$side" = stress ]; then
            stress-ng --cpu "$CPUS" --timeout 600 >/dev/null 2>&1 &
            STRESS=$!
            sleep 1
        fi
        lone "$T/${side}_$r"
        if [ "$side" = stress ]; then
            kill -TERM "$STRESS" 2>/dev/null
            wait "$STRESS" 2>/dev/null || true
            STRESS=
            sleep 1
        fi
    done
done
lost=$(grep -cE "rank [0-9]+ lost|declared lost" "$T/serve.log" || true)
python3 - "$T" "$ROUNDS" "$LONE_N" "$IDLE_S" "$(getconf CLK_TCK)" "$CPUS" "$lost" <<'PY'
import json, statistics, sys
d, rounds, n, idle_s, hz, cpus, lost = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
    float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
def ticks(f):
    return {int(r): int(t) for r, t in (l.split() for l in open(f"{d}/{f}"))}
t0, t1 = ticks("t0"), ticks("t1")
pct = {r: round((t1[r] - t0[r]) * 100.0 / hz / idle_s, 2) for r in sorted(t0)}
print(json.dumps({"suite": "contention", "metric": "idle_cpu_pct_per_rank", "ranks": len(pct),
                  "seconds": idle_s, "per_rank": pct, "max": max(pct.values()),
                  "total": round(sum(pct.values()), 2), "target": "< 2 per rank"}))
def times(side, r):
    return [float(x) for x in open(f"{d}/{side}_{r}")]
idle = [statistics.median(times("idle", r)) for r in range(1, rounds + 1)]
hot = [statistics.median(times("stress", r)) for r in range(1, rounds + 1)]
ratios = [h / i for i, h in zip(idle, hot)]
worst = max(max(times("stress", r)) for r in range(1, rounds + 1))
print(json.dumps({"suite": "contention", "metric": "lone_latency_s",
                  "config": "16 tokens, stress-ng --cpu %d" % cpus, "n": n, "rounds": rounds,
                  "value": round(statistics.median(hot), 4),
                  "anchor": round(statistics.median(idle), 4),
                  "ratio_median": round(statistics.median(ratios), 3),
                  "ratio_min": round(min(ratios), 3), "ratio_max": round(max(ratios), 3),
                  "max_s_under_stress": round(worst, 4), "ranks_declared_lost": lost}))
PY
