#!/usr/bin/env bash
# benchmarks/suites/gateway.sh - the HTTP gateway against its anchors, in the
# same run:
# 1. bench_gateway (one process; it alternates HTTP and the client API):
#    TTFT of one streamed request at a time (ratio = HTTP p50 - API p50, ms:
#    target <= 1) and requests/s at saturation (16 in flight; ratio = the
#    median of the rounds' HTTP / API: target >= 0.9), stories260K; then
#    decode tokens/s of requests with sampling controls (penalties,
#    logit_bias, min_p) and with logprobs 5 against plain ones (anchor,
#    alternating in rounds; ratio = the median round's, with min/max);
#    then one request of n = 8 against 8 separate ones (decode tokens/s,
#    target >= 0.9 x; and the prompt tokens the prefill instance computed);
#    then /v1/embeddings requests/s against the engine's own prefill of the
#    same input (one engine thread, alternating in rounds).
# 2. `moonlet bench` beside the server's /metrics, as a user runs both: a
#    `moonlet serve` process, `moonlet bench random` (streamed) with 1 and
#    8 requests in flight; the mean TTFT and E2EL it reports beside the
#    means of the gateway's histograms over the same requests (_sum / _count
#    deltas); ratio = bench / metrics (target: within 5 %, or 0.5 ms apart).
# SMOKE=1: tiny counts.
set -euo pipefail
B=${BENCH_BIN:?}/bench_gateway
MOONLET=${BUILD_DIR:-build}/launch/moonlet
M=examples/models/stories260K/stories260K.gguf
N=${N:-300}
if [ "${SMOKE:-0}" = 1 ]; then
    MOON_LOG_LEVEL=error "$B" --model="$M" --n=10 --rounds=1 --depth=4
    N=10
else
    MOON_LOG_LEVEL=error "$B" --model="$M" --n="$N" --rounds="${ROUNDS:-3}" --depth="${DEPTH:-16}"
fi

T=$(mktemp -d)
SRV=
# moonlet serve stops cleanly on SIGTERM
trap '[ -z "$SRV" ] || { kill -TERM "$SRV" 2>/dev/null; wait "$SRV" 2>/dev/null; }; rm -rf "$T"' EXIT
MOON_LOG_LEVEL=warn "$MOONLET" serve --model "$M" --port 0 --model-name stories260K \
    >"$T/serve.log" 2>&1 </dev/null &
SRV=$!
URL=
for _ in $(seq 600); do
    URL=$(sed -n 's|.*serving on \(http://[^ ]*\)/v1.*|\1|p' "$T/serve.log" | head -1)
    [ -n "$URL" ] && curl -sf "$URL/health" >/dev/null && break
    sleep 0.1
done
[ -n "$URL" ] || { echo "gateway.sh: moonlet serve did not start" >&2; tail "$T/serve.log" >&2; exit 1; }
for c in 1 8; do
    curl -s "$URL/metrics" >"$T/m0"
    "$MOONLET" bench random --base-url "$URL" --num-prompts "$N" --max-concurrency "$c" \
        --input-len 24 --output-len 16 --ignore-eos --seed 1 --no-progress \
        --result-file "$T/r.json" >"$T/bench.log" 2>&1 ||
        { echo "gateway.sh: moonlet bench failed" >&2; cat "$T/bench.log" >&2; exit 1; }
    curl -s "$URL/metrics" >"$T/m1"
    python3 - "$T/r.json" "$T/m0" "$T/m1" "$c" "$N" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
def hist(path, name):  # (sum, count) of a histogram in a /metrics text
    v = {}
    for line in open(path):
        for k in ("_sum", "_count"):
            if line.startswith(name + k + "{"):
                v[k] = float(line.rsplit(" ", 1)[1])
    return v.get("_sum", 0.0), v.get("_count", 0.0)
for metric, key, name in (("ttft_mean_ms", "mean_ttft_ms", "moonlet:time_to_first_token_seconds"),
                          ("e2el_mean_ms", "mean_e2el_ms", "moonlet:e2e_request_latency_seconds")):
    s0, n0 = hist(sys.argv[2], name)
    s1, n1 = hist(sys.argv[3], name)
    server = (s1 - s0) * 1e3 / max(n1 - n0, 1)
    print(json.dumps({"bench": "gateway_metrics", "model": "stories260K", "max_tokens": 16,
                      "n": int(sys.argv[5]), "max_concurrency": int(sys.argv[4]),
                      "metric": metric, "value": round(r[key], 4),
                      "anchor_metrics_endpoint": round(server, 4),
                      "n_observed": int(n1 - n0),
                      "diff_ms": round(r[key] - server, 4),
                      "ratio": round(r[key] / server, 4) if server > 0 else 0}))
PY
done
# 3. bench_structured: constrained decoding (json_schema) against the same
#    requests unconstrained, 32 at once (ratio target >= 0.9), and the
#    compile time of a fresh 20-property schema (target <= 5 ms).
S=${BENCH_BIN:?}/bench_structured
if [ -x "$S" ]; then
    if [ "${SMOKE:-0}" = 1 ]; then
        MOON_LOG_LEVEL=error "$S" --model="$M" --rounds=1 --n=2 --depth=4 --max-tokens=8
    else
        MOON_LOG_LEVEL=error "$S" --model="$M" --rounds="${ROUNDS:-5}" --depth=32
    fi
fi
