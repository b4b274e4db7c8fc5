#!/usr/bin/env bash
# benchmarks/suites/batch.sh - `moonlet batch` against its anchor, in the same
# run: output tokens/s of N prompts (default 500; 24 random token ids each,
# 64 tokens out, ignore_eos) on stories260K, with C requests in flight
# (default 16), beside `moonlet bench random` (the same lengths, streamed)
# driving a `moonlet serve` cluster with the same options at
# --max-concurrency C. Rounds alternate anchor and measurement; one JSON
# line: the medians, ratio = the median of the rounds' batch / bench with
# min and max (target >= 0.95). Each side's clock starts when its cluster is
# up (model load and start-up are left out of both). Then the serving job's
# time from its start to its first token (job_start.sh). SMOKE=1: tiny
# counts; ONLY=ttft: only the second line (interactive TTFT beside
# /v1/batches); ONLY=start: only job_start.sh's lines.
set -euo pipefail
MOONLET=${BUILD_DIR:-build}/launch/moonlet
M=${MODEL:-examples/models/stories260K/stories260K.gguf}
N=${N:-500}
C=${C:-16}
ROUNDS=${ROUNDS:-3}
OUT=${OUT_LEN:-64}
if [ "${SMOKE:-0}" = 1 ]; then N=20; ROUNDS=1; fi
if [ "${ONLY:-}" = start ]; then
    exec bash "$(dirname "$0")/job_start.sh"
fi
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

if [ "${ONLY:-}" != ttft ]; then
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
fi

# Interactive TTFT while a /v1/batches job runs, against the same stream
# alone (the anchor), on one `moonlet serve --data-dir` in the same run: a
# `moonlet bench random` stream (NI prompts, 100, at RATE/s, 24 tokens in, 32
# out) alone, then beside a batch of NB prompts (OUT_B tokens out, C in
# flight, its SLO class
# below interactive) created just before it and cancelled after it. Rounds
# alternate; one JSON line: the medians of TTFT p50 and p99 with and
# without the batch, ratio = the median of the rounds' p99 with / without,
# with min and max (target <= 1.5), and the same for p50.
NI=${NI:-100}
RATE=${RATE:-4}
NB=${NB:-4000}
OUT_B=${OUT_B:-256}
if [ "${SMOKE:-0}" = 1 ]; then NI=5; NB=50; fi
python3 - "$T/api.jsonl" "$NB" "$OUT_B" <<'PY'
import json, random, sys
rng = random.Random(2)
with open(sys.argv[1], "w") as f:
    for i in range(int(sys.argv[2])):
        ids = [rng.randrange(3, 500) for _ in range(24)]
        f.write(json.dumps({"custom_id": "b%d" % i, "method": "POST", "url": "/v1/completions",
                            "body": {"prompt": ids, "max_tokens": int(sys.argv[3]),
                                     "ignore_eos": True, "temperature": 0}}) + "\n")
PY
MOON_LOG_LEVEL=warn "$MOONLET" serve --model "$M" --port 0 --data-dir "$T/data" \
    --batch-inflight "$C" >"$T/serve.log" 2>&1 </dev/null &
SRV=$!
url=
for _ in $(seq 600); do
    url=$(sed -n 's|.*serving on \(http://[^ ]*\)/v1.*|\1|p' "$T/serve.log" | head -1)
    [ -n "$url" ] && curl -sf "$url/health" >/dev/null && break
    sleep 0.1
done
[ -n "$url" ] || { echo "batch.sh: moonlet serve did not start" >&2; tail "$T/serve.log" >&2; exit 1; }
python3 - "$MOONLET" "$url" "$T" "$ROUNDS" "$NI" "$RATE" "$C" "$NB" <<'PY'
import json, statistics, subprocess, sys, time, urllib.error, urllib.request
moonlet, url, tmp, rounds, ni, rate, c, nb = sys.argv[1:9]
rounds, ni, nb = int(rounds), int(ni), int(nb)

def call(method, route, body=None, headers=None):
    req = urllib.request.Request(url + route, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:
        sys.exit("batch.sh: %s %s: %d %s" % (method, route, e.code, e.read()[:300]))

def upload(path):
    b = "----moonbench"
    data = open(path, "rb").read()
    body = (("--%s\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n"
             "--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"api.jsonl\"\r\n"
             "\r\n") % (b, b)).encode() + data + ("\r\n--%s--\r\n" % b).encode()
    return call("POST", "/v1/files", body,
                {"Content-Type": "multipart/form-data; boundary=" + b})["id"]

def stream(tag):
    out = "%s/ttft-%s.json" % (tmp, tag)
    subprocess.run([moonlet, "bench", "random", "--base-url", url, "--num-prompts", str(ni),
                    "--rate", rate, "--input-len", "24", "--output-len", "32", "--ignore-eos",
                    "--seed", "3", "--no-progress", "--result-file", out],
                   check=True, capture_output=True, timeout=600)
    r = json.load(open(out))
    return r["median_ttft_ms"], r["p99_ttft_ms"]

def wait(bid, pred, limit=300):
    t0 = time.time()
    while True:
        b = call("GET", "/v1/batches/" + bid)
        if pred(b):
            return b
        if time.time() - t0 > limit:
            sys.exit("batch.sh: batch %s stuck: %s" % (bid, b))
        time.sleep(0.1)

fid = upload(tmp + "/api.jsonl")
alone, beside, done = [], [], []
for _ in range(rounds):
    alone.append(stream("alone"))
    b = call("POST", "/v1/batches", json.dumps({"input_file_id": fid, "endpoint":
             "/v1/completions", "completion_window": "24h"}).encode(),
             {"Content-Type": "application/json"})
    wait(b["id"], lambda x: x["status"] == "in_progress" and x["request_counts"]["completed"] > 0)
    beside.append(stream("beside"))
    x = call("GET", "/v1/batches/" + b["id"])
    running = x["status"] == "in_progress"
    try:  # a batch that just completed refuses it (400): fine
        urllib.request.urlopen(urllib.request.Request(
            url + "/v1/batches/%s/cancel" % b["id"], data=b"", method="POST"), timeout=60)
    except urllib.error.HTTPError:
        pass
    x = wait(b["id"], lambda y: y["status"] in ("cancelled", "completed"))
    done.append(x["request_counts"]["completed"])
    if not running:
        print("batch.sh: the batch ended before the stream did (raise NB)", file=sys.stderr)
r99 = [b[1] / a[1] for a, b in zip(alone, beside)]
r50 = [b[0] / a[0] for a, b in zip(alone, beside)]
med = lambda v: round(statistics.median(v), 2)
print(json.dumps({"bench": "batch_api_interactive_ttft", "model": "stories260K",
                  "stream_prompts": ni, "stream_rate": float(rate), "batch_inflight": int(c),
                  "metric": "ttft_p99_ratio", "value": round(statistics.median(r99), 3),
                  "ratio_min": round(min(r99), 3), "ratio_max": round(max(r99), 3),
                  "p50_ratio": round(statistics.median(r50), 3),
                  "p50_ratio_min": round(min(r50), 3), "p50_ratio_max": round(max(r50), 3),
                  "ttft_p50_ms_with_batch": med([b[0] for b in beside]),
                  "ttft_p99_ms_with_batch": med([b[1] for b in beside]),
                  "anchor_ttft_p50_ms_alone": med([a[0] for a in alone]),
                  "anchor_ttft_p99_ms_alone": med([a[1] for a in alone]),
                  "batch_answers_per_round": done, "rounds": rounds}))
PY
kill -TERM "$SRV"; wait "$SRV" 2>/dev/null || true; SRV=
[ -n "${ONLY:-}" ] || bash "$(dirname "$0")/job_start.sh"
