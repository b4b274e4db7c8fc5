#!/usr/bin/env bash
# benchmarks/suites/plugins.sh - what plugins cost on the request path. Each
# round starts two `moonlet serve` (stories260K; NP=N: each under `mpirun -np
# N`, the roles spread over the ranks): the anchor with no plugin, and one
# with a pass-through request filter and a token observer (tests/e2e/plugins'
# probe: filter=pass,tokens=1: every request waits for the filter actor's
# verdict; every decode step's tokens also go to the observer). The start
# order alternates per round. `moonlet bench random` then drives them in
# turn, SUB times per round and NS requests a turn, the side going first
# alternating: the two see the same load within ~0.1 s of each other, which
# the machine's load (other jobs on 2 cores) does not shift between them. A
# turn is NS requests one at a time (TTFT), then NS with DEPTH in flight
# (requests/s). One JSON line per metric:
#   requests_per_s  (DEPTH in flight)   ratio = plugins / anchor per round
#                                       (requests over the turns' time):
#                                       median, min, max (target >= 0.99)
#   ttft_p50_us     (one at a time)     added = plugins - anchor per round
#                                       (p50 of its turns' TTFTs), us:
#                                       median, min, max; per filter (one
#                                       here; target <= 5)
# First, bench_plugin_gate: the same filter and observer measured where they
# run (the conductor's gate, a decode step), in one process: the figures the
# targets are about, which the machine's load barely moves.
# AA=1: an A/A check (neither side loads the plugin: the spread the method
# leaves on this machine). SMOKE=1: tiny counts.
set -euo pipefail
BUILD=${BUILD_DIR:-build}
MOONLET=$BUILD/launch/moonlet
PROBE=$BUILD/tests/e2e/plugins/libplugin_probe.so
M=examples/models/stories260K/stories260K.gguf
ROUNDS=${ROUNDS:-5}
SUB=${SUB:-8}
NS=${NS:-50}
DEPTH=${DEPTH:-8}
NP=${NP:-1}
if [ "${SMOKE:-0}" = 1 ]; then ROUNDS=2 SUB=2 NS=5; fi
[ -f "$PROBE" ] || { echo "plugins.sh: $PROBE not built (MOON_BUILD_TESTS=ON)" >&2; exit 1; }
GATE=${BENCH_BIN:-$BUILD/benchmarks}/bench_plugin_gate
if [ "${AA:-0}" != 1 ]; then
    MOON_LOG_LEVEL=error "$GATE" --probe="$PROBE" --rounds="${ROUNDS}" \
        --n="$([ "${SMOKE:-0}" = 1 ] && echo 200 || echo 20000)"
fi
T=$(mktemp -d)
declare -A PID URL
trap 'for p in "${PID[@]}"; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$T"' EXIT

start() { # start SIDE ARGS...: PID[SIDE], URL[SIDE] set
    local side=$1 url= launch=()
    shift
    [ "$NP" -gt 1 ] && launch=(mpirun --oversubscribe -np "$NP")
    MOON_LOG_LEVEL=error OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        "${launch[@]}" "$MOONLET" serve --model "$M" --port 0 --workers 1 "$@" \
        >"$T/$side.log" 2>&1 </dev/null &
    PID[$side]=$!
    for _ in $(seq 900); do
        url=$(sed -n 's|.*serving on \(http://[^ ]*\)/v1.*|\1|p' "$T/$side.log" | head -1)
        if [ -n "$url" ] && curl -sf "$url/health" >/dev/null; then
            URL[$side]=$url
            return 0
        fi
        sleep 0.1
    done
    echo "plugins.sh: moonlet serve ($side) did not start" >&2
    tail "$T/$side.log" >&2
    exit 1
}
stop() { # stop SIDE
    kill -TERM "${PID[$1]}" 2>/dev/null
    wait "${PID[$1]}" 2>/dev/null || true
    unset "PID[$1]"
}
descendants() { # mpirun's ranks (and their helpers)
    local c
    for c in $(pgrep -P "$1"); do
        echo "$c"
        descendants "$c"
    done
}
cpu_ns() { # cpu_ns SIDE: CPU time of the side's server so far, ns (every thread of
    # every rank; schedstat: ns, where /proc's ticks are 10 ms)
    for p in "${PID[$1]}" $(descendants "${PID[$1]}"); do cat /proc/"$p"/task/*/schedstat 2>/dev/null; done |
        awk '{ s += $1 } END { printf "%.0f\n", s }'
}
bench() { # bench SIDE CONCURRENCY N OUT: OUT.cpu gets the server's CPU ns for it
    local c0
    c0=$(cpu_ns "$1")
    "$MOONLET" bench random --base-url "${URL[$1]}" --num-prompts "$3" --max-concurrency "$2" \
        --input-len 24 --output-len 16 --ignore-eos --seed 1 --no-progress \
        --result-file "$4" >"$T/bench.log" 2>&1 ||
        { echo "plugins.sh: moonlet bench failed" >&2; cat "$T/bench.log" >&2; exit 1; }
    echo $(($(cpu_ns "$1") - c0)) >"$4.cpu"
}
for r in $(seq "$ROUNDS"); do
    order="a p"
    [ $((r % 2)) = 0 ] && order="p a"
    for side in $order; do
        if [ "$side" = a ] || [ "${AA:-0}" = 1 ]; then # AA: neither loads the plugin
            start "$side"
        else
            start "$side" --plugin "$PROBE:filter=pass,tokens=1"
        fi
    done
    for side in a p; do
        bench "$side" "$DEPTH" "$NS" "$T/warm.json"
    done
    for s in $(seq "$SUB"); do
        turn="a p"
        [ $(((r + s) % 2)) = 0 ] && turn="p a"
        for side in $turn; do
            bench "$side" 1 "$NS" "$T/ttft_${side}_${r}_$s.json"
            bench "$side" "$DEPTH" "$NS" "$T/rps_${side}_${r}_$s.json"
        done
    done
    stop a
    stop p
done
python3 - "$T" "$ROUNDS" "$SUB" "$NS" "$DEPTH" "$NP" "${AA:-0}" <<'PY'
import json, os, statistics, sys
d, rounds, sub, ns, depth, np = sys.argv[1], *map(int, sys.argv[2:7])
config = "aa_no_plugin_either_side" if sys.argv[7] == "1" else "pass_filter+token_observer"
load = lambda kind, side, r, s: json.load(open(f"{d}/{kind}_{side}_{r}_{s}.json"))
def rps(side, r):  # requests over the turns' summed time
    js = [load("rps", side, r, s) for s in range(1, sub + 1)]
    return sum(j["completed"] for j in js) / sum(j["duration"] for j in js)
def cpu_us(kind, side, r):  # the server's CPU time per request, us
    ns = sum(int(open(f"{d}/{kind}_{side}_{r}_{s}.json.cpu").read()) for s in range(1, sub + 1))
    return ns / 1e3 / sum(load(kind, side, r, s)["completed"] for s in range(1, sub + 1))
def p50_us(side, r):
    return statistics.median([t for s in range(1, sub + 1)
                              for t in load("ttft", side, r, s)["ttfts"] if t > 0]) * 1e6
rounds_ = range(1, rounds + 1)
tput = [(rps("a", r), rps("p", r)) for r in rounds_]
ttft = [(p50_us("a", r), p50_us("p", r)) for r in rounds_]
ratios = [p / a for a, p in tput]
added = [p - a for a, p in ttft]
load1 = os.getloadavg()[0]
common = {"suite": "plugins", "config": config, "filters": 0 if sys.argv[7] == "1" else 1,
          "ranks": np, "rounds": rounds, "turns_per_round": sub, "requests_per_turn": ns,
          "loadavg_1m": round(load1, 2)}
print(json.dumps({**common, "metric": "requests_per_s", "depth": depth,
                  "value": round(statistics.median([p for _, p in tput]), 2),
                  "anchor": round(statistics.median([a for a, _ in tput]), 2),
                  "ratio_median": round(statistics.median(ratios), 4),
                  "ratio_min": round(min(ratios), 4), "ratio_max": round(max(ratios), 4),
                  "target": ">= 0.99"}))
print(json.dumps({**common, "metric": "ttft_p50_us", "depth": 1,
                  "value": round(statistics.median([p for _, p in ttft]), 1),
                  "anchor": round(statistics.median([a for a, _ in ttft]), 1),
                  "added_median_us": round(statistics.median(added), 1),
                  "added_min_us": round(min(added), 1), "added_max_us": round(max(added), 1),
                  "target": "<= 5 us per filter"}))
# what each request costs the server's CPUs (all threads, all ranks): the
# machine's load shifts it far less than the wall-clock figures
for kind, dep in (("rps", depth), ("ttft", 1)):
    c = [(cpu_us(kind, "a", r), cpu_us(kind, "p", r)) for r in rounds_]
    x = [p - a for a, p in c]
    print(json.dumps({**common, "metric": "server_cpu_us_per_request", "depth": dep,
                      "value": round(statistics.median([p for _, p in c]), 1),
                      "anchor": round(statistics.median([a for a, _ in c]), 1),
                      "added_median_us": round(statistics.median(x), 1),
                      "added_min_us": round(min(x), 1), "added_max_us": round(max(x), 1),
                      "ratio_median": round(statistics.median([p / a for a, p in c]), 4)}))
PY
