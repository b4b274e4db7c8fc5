#!/usr/bin/env bash
# benchmarks/suites/plugins.sh - what plugins cost on the request path. Each
# round starts `moonlet serve` (stories260K) twice, one after the other: the
# anchor with no plugin, and one with a pass-through request filter and a
# token observer (tests/e2e/plugins' probe: filter=pass,tokens=1: every
# request waits for the filter actor's verdict; every token is also sent to
# the observer); `moonlet bench random` drives each while it alone runs
# (two servers side by side measured the second one started up to 2x faster
# even with no plugin in either), the order alternating per round. One JSON
# line per metric:
#   requests_per_s  (DEPTH in flight)     ratio = plugins / anchor: median,
#                                         min, max over rounds (target >= 0.99)
#   ttft_p50_us     (one at a time)       added = plugins - anchor, us: median,
#                                         min, max over rounds (target <= 5 per
#                                         filter)
# AA=1: an A/A check (both without plugins: the spread the machine gives).
# SMOKE=1: tiny counts.
set -euo pipefail
BUILD=${BUILD_DIR:-build}
MOONLET=$BUILD/launch/moonlet
PROBE=$BUILD/tests/e2e/plugins/libplugin_probe.so
M=examples/models/stories260K/stories260K.gguf
N=${N:-400}
ROUNDS=${ROUNDS:-5}
DEPTH=${DEPTH:-8}
if [ "${SMOKE:-0}" = 1 ]; then N=10 ROUNDS=2; fi
[ -f "$PROBE" ] || { echo "plugins.sh: $PROBE not built (MOON_BUILD_TESTS=ON)" >&2; exit 1; }
T=$(mktemp -d)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$T"' EXIT

start() { # start NAME ARGS...: URL set
    local name=$1
    shift
    MOON_LOG_LEVEL=error "$MOONLET" serve --model "$M" --port 0 --workers 1 "$@" \
        >"$T/$name.log" 2>&1 </dev/null &
    PIDS+=($!)
    for _ in $(seq 600); do
        URL=$(sed -n 's|.*serving on \(http://[^ ]*\)/v1.*|\1|p' "$T/$name.log" | head -1)
        [ -n "$URL" ] && curl -sf "$URL/health" >/dev/null && return 0
        sleep 0.1
    done
    echo "plugins.sh: moonlet serve ($name) did not start" >&2
    tail "$T/$name.log" >&2
    exit 1
}
stop() {
    kill -TERM "${PIDS[-1]}" 2>/dev/null
    wait "${PIDS[-1]}" 2>/dev/null || true
    unset 'PIDS[-1]'
}
bench() { # bench URL CONCURRENCY OUT
    "$MOONLET" bench random --base-url "$1" --num-prompts "$N" --max-concurrency "$2" \
        --input-len 24 --output-len 16 --ignore-eos --seed 1 --no-progress \
        --result-file "$3" >"$T/bench.log" 2>&1 ||
        { echo "plugins.sh: moonlet bench failed" >&2; cat "$T/bench.log" >&2; exit 1; }
}
for r in $(seq "$ROUNDS"); do
    order="a p"
    [ $((r % 2)) = 0 ] && order="p a"
    for side in $order; do
        if [ "$side" = a ] || [ "${AA:-0}" = 1 ]; then # AA: both without plugins
            start "$side$r"
        else
            start "$side$r" --plugin "$PROBE:filter=pass,tokens=1"
        fi
        bench "$URL" 1 "$T/warm.json"
        bench "$URL" "$DEPTH" "$T/rps_${side}_$r.json"
        bench "$URL" 1 "$T/ttft_${side}_$r.json"
        stop
    done
done
python3 - "$T" "$ROUNDS" "$N" "$DEPTH" "${AA:-0}" <<'PY'
import json, statistics, sys
d, rounds, n, depth = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
config = "aa_no_plugin_either_side" if sys.argv[5] == "1" else "pass_filter+token_observer"
def load(kind, side, r):
    return json.load(open(f"{d}/{kind}_{side}_{r}.json"))
def p50_us(j):
    return statistics.median([t for t in j["ttfts"] if t > 0]) * 1e6
rps = [(load("rps", "a", r)["request_throughput"], load("rps", "p", r)["request_throughput"])
       for r in range(1, rounds + 1)]
ttft = [(p50_us(load("ttft", "a", r)), p50_us(load("ttft", "p", r))) for r in range(1, rounds + 1)]
ratios = [p / a for a, p in rps]
added = [p - a for a, p in ttft]
print(json.dumps({"suite": "plugins", "config": config, "metric": "requests_per_s",
                  "depth": depth, "n": n, "rounds": rounds,
                  "value": round(statistics.median([p for _, p in rps]), 2),
                  "anchor": round(statistics.median([a for a, _ in rps]), 2),
                  "ratio_median": round(statistics.median(ratios), 4),
                  "ratio_min": round(min(ratios), 4), "ratio_max": round(max(ratios), 4),
                  "target": ">= 0.99"}))
print(json.dumps({"suite": "plugins", "config": config, "metric": "ttft_p50_us",
                  "depth": 1, "n": n, "rounds": rounds,
                  "value": round(statistics.median([p for _, p in ttft]), 1),
                  "anchor": round(statistics.median([a for a, _ in ttft]), 1),
                  "added_median_us": round(statistics.median(added), 1),
                  "added_min_us": round(min(added), 1), "added_max_us": round(max(added), 1),
                  "target": "<= 5 us per filter"}))
PY
