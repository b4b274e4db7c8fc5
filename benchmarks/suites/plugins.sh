#!/usr/bin/env bash
# benchmarks/suites/plugins.sh - what plugins cost on the request path. Two
# `moonlet serve` processes (stories260K) run side by side: the anchor with no
# plugin, and one with a pass-through request filter and a token observer
# (tests/e2e/plugins' probe: filter=pass,tokens=1: every request waits for
# the filter actor's verdict; every token is also sent to the observer).
# `moonlet bench random` drives each in turn, ROUNDS rounds, the order
# alternating per round. One JSON line per metric:
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

start() { # start NAME ARGS...: URL_NAME
    local name=$1
    shift
    MOON_LOG_LEVEL=error "$MOONLET" serve --model "$M" --port 0 --workers 1 "$@" \
        >"$T/$name.log" 2>&1 </dev/null &
    PIDS+=($!)
    for _ in $(seq 600); do
        u=$(sed -n 's|.*serving on \(http://[^ ]*\)/v1.*|\1|p' "$T/$name.log" | head -1)
        [ -n "$u" ] && curl -sf "$u/health" >/dev/null && { echo "$u"; return 0; }
        sleep 0.1
    done
    echo "plugins.sh: moonlet serve ($name) did not start" >&2
    tail "$T/$name.log" >&2
    exit 1
}
A=$(start anchor)
if [ "${AA:-0}" = 1 ]; then # A/A check: both without plugins
    P=$(start plugins)
else
    P=$(start plugins --plugin "$PROBE:filter=pass,tokens=1")
fi

bench() { # bench URL CONCURRENCY OUT
    "$MOONLET" bench random --base-url "$1" --num-prompts "$N" --max-concurrency "$2" \
        --input-len 24 --output-len 16 --ignore-eos --seed 1 --no-progress \
        --result-file "$3" >"$T/bench.log" 2>&1 ||
        { echo "plugins.sh: moonlet bench failed" >&2; cat "$T/bench.log" >&2; exit 1; }
}
bench "$A" 1 "$T/warm_a.json"
bench "$P" 1 "$T/warm_p.json"
for r in $(seq "$ROUNDS"); do
    for side in a p; do
        [ $((r % 2)) = 0 ] && side=$([ "$side" = a ] && echo p || echo a)
        url=$([ "$side" = a ] && echo "$A" || echo "$P")
        bench "$url" "$DEPTH" "$T/rps_${side}_$r.json"
        bench "$url" 1 "$T/ttft_${side}_$r.json"
    done
done
python3 - "$T" "$ROUNDS" "$N" "$DEPTH" <<'PY'
import json, statistics, sys
d, rounds, n, depth = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def load(kind, side, r):
    return json.load(open(f"{d}/{kind}_{side}_{r}.json"))
def p50_us(j):
    return statistics.median([t for t in j["ttfts"] if t > 0]) * 1e6
rps = [(load("rps", "a", r)["request_throughput"], load("rps", "p", r)["request_throughput"])
       for r in range(1, rounds + 1)]
ttft = [(p50_us(load("ttft", "a", r)), p50_us(load("ttft", "p", r))) for r in range(1, rounds + 1)]
ratios = [p / a for a, p in rps]
added = [p - a for a, p in ttft]
print(json.dumps({"suite": "plugins", "config": "pass_filter+token_observer", "metric": "requests_per_s",
                  "depth": depth, "n": n, "rounds": rounds,
                  "value": round(statistics.median([p for _, p in rps]), 2),
                  "anchor": round(statistics.median([a for a, _ in rps]), 2),
                  "ratio_median": round(statistics.median(ratios), 4),
                  "ratio_min": round(min(ratios), 4), "ratio_max": round(max(ratios), 4),
                  "target": ">= 0.99"}))
print(json.dumps({"suite": "plugins", "config": "pass_filter+token_observer", "metric": "ttft_p50_us",
                  "depth": 1, "n": n, "rounds": rounds,
                  "value": round(statistics.median([p for _, p in ttft]), 1),
                  "anchor": round(statistics.median([a for a, _ in ttft]), 1),
                  "added_median_us": round(statistics.median(added), 1),
                  "added_min_us": round(min(added), 1), "added_max_us": round(max(added), 1),
                  "target": "<= 5 us per filter"}))
PY
