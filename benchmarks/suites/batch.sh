#!/usr/bin/env bash
# benchmarks/suites/batch.sh - `moonlet batch` against its anchor, in the same
# run: output tokens/s of N prompts (default 500; 24 random token ids each,
# 64 tokens out, ignore_eos) on stories260K, with C requests in flight
# (default 16), beside `moonlet bench random` (the same lengths, streamed)
# driving a `moonlet serve` cluster with the same options at
# --max-concurrency C. Rounds alternate anchor and measurement; one JSON
# line: the medians, ratio = the median of the rounds' batch / bench with
# min and max (target >= 0.95). Each side's clock starts when its cluster is
# up (model load and start-up are left out of both). SMOKE=1: tiny counts.
set -euo pipefail
MOONLET=${BUILD_DIR:-build}/launch/moonlet
M=${MODEL:-examples/models/stories260K/stories260K.gguf}
N=${N:-500}
C=${C:-16}
ROUNDS=${ROUNDS:-3}
OUT=${OUT_LEN:-64}
if [ "${SMOKE:-0}" = 1 ]; then N=20; ROUNDS=1; fi
T=$(mktemp -d)
SRV=
trap '[ -z "$SRV" ] || { kill -TERM "$SRV" 2>/dev/null; wait "$SRV" 2>/dev/null; }; rm -rf "$T"' EXIT

python3 - "$T/in.jsonl" "$N" "$OUT" <<'PY'
import json, random, sys
rng = random.Random(1)
with open(sys.argv[1], "w") as f:
    for i in range(int(sys.argv[2])):
        ids = [rng.randrange(3, 500) for _ in range(24)]
        f.write(json.dumps({"custom_id": "r%d" % i, "method": "POST", "url": "/v1/completions",
                            "body": {"prompt": ids, "max_tokens": int(sys.argv[3]),
                                     "ignore_eos": True, "temperature": 0}}) + "\n")
PY

anchor() { # output tok/s of moonlet bench against moonlet serve
    MOON_LOG_LEVEL=warn "$MOONLET" serve --model "$M" --port 0 >"$T/serve.log" 2>&1 </dev/null &
    SRV=$!
    local url=
    for _ in $(seq 600); do
        url=$(sed -n 's|.*serving on \(http://[^ ]*\)/v1.*|\1|p' "$T/serve.log" | head -1)
        [ -n "$url" ] && curl -sf "$url/health" >/dev/null && break
        sleep 0.1
    done
    [ -n "$url" ] || { echo "batch.sh: moonlet serve did not start" >&2; tail "$T/serve.log" >&2; exit 1; }
    "$MOONLET" bench random --base-url "$url" --num-prompts "$N" --max-concurrency "$C" \
        --input-len 24 --output-len "$OUT" --ignore-eos --seed 1 --no-progress \
        --result-file "$T/r.json" >"$T/bench.log" 2>&1 ||
        { echo "batch.sh: moonlet bench failed" >&2; cat "$T/bench.log" >&2; exit 1; }
    kill -TERM "$SRV"; wait "$SRV" 2>/dev/null || true; SRV=
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["output_throughput"])' "$T/r.json"
}

measure() { # output tok/s of moonlet batch
    rm -f "$T/out.jsonl"
    MOON_LOG_LEVEL=warn "$MOONLET" batch --model "$M" --input "$T/in.jsonl" --output "$T/out.jsonl" \
        --max-inflight "$C" >"$T/batch.log" 2>&1 </dev/null ||
        { echo "batch.sh: moonlet batch failed" >&2; cat "$T/batch.log" >&2; exit 1; }
    sed -n 's|.* completion tokens, \([0-9.]*\) tok/s.*|\1|p' "$T/batch.log" | tail -1
}

a=() b=()
for _ in $(seq "$ROUNDS"); do
    a+=("$(anchor)")
    b+=("$(measure)")
done
python3 - "$N" "$C" "$OUT" "${a[*]}" "${b[*]}" <<'PY'
import json, statistics, sys
a = [float(x) for x in sys.argv[4].split()]
b = [float(x) for x in sys.argv[5].split()]
r = [y / x for x, y in zip(a, b)]
print(json.dumps({"bench": "batch", "model": "stories260K", "n": int(sys.argv[1]),
                  "max_inflight": int(sys.argv[2]), "output_len": int(sys.argv[3]),
                  "metric": "output_tok_s", "value": round(statistics.median(b), 1),
                  "anchor_moonlet_bench": round(statistics.median(a), 1),
                  "ratio": round(statistics.median(r), 3), "ratio_min": round(min(r), 3),
                  "ratio_max": round(max(r), 3), "rounds": len(r),
                  "values": [round(x, 1) for x in b], "anchors": [round(x, 1) for x in a]}))
PY
