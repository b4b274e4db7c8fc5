#!/usr/bin/env bash
# test_bench_serve.sh MOONLET MODEL PYTHON3 - `moonlet bench` against a real
# `moonlet serve` process (one rank: gateway, conductor, prefill, decode and
# store on the bundled stories260K) on a free loopback port, as a user runs
# both: a few streamed requests of each workload over completions and chat,
# the result files checked, then the server stopped with SIGTERM. Run by
# CTest (label gateway).
set -u
MOONLET=${1:?usage: test_bench_serve.sh MOONLET MODEL PYTHON3}
MODEL=${2:?model}
PY=${3:-python3}
T=$(mktemp -d)
SRV=
cleanup() {
    if [ -n "$SRV" ] && kill -0 "$SRV" 2>/dev/null; then
        kill -TERM "$SRV" 2>/dev/null
        for _ in $(seq 100); do kill -0 "$SRV" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$SRV" 2>/dev/null
    fi
    wait 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; echo "--- server log:"; tail -20 "$T/serve.log"; exit 1; }

"$MOONLET" serve --model "$MODEL" --port 0 --model-name stories260K \
    > "$T/serve.log" 2>&1 < /dev/null &
SRV=$!
URL=
for _ in $(seq 600); do
    kill -0 "$SRV" 2>/dev/null || fail "moonlet serve exited"
    URL=$(sed -n 's|.*serving on \(http://[^ ]*\)/v1.*|\1|p' "$T/serve.log" | head -1)
    [ -n "$URL" ] && break
    sleep 0.1
done
[ -n "$URL" ] || fail "moonlet serve never said where it serves"

check() { # python expression over r (the result JSON)
    "$PY" - "$T/r.json" "$1" <<'PYEOF' || fail "check: $1"
import json, sys
r = json.load(open(sys.argv[1]))
if not eval(sys.argv[2]):
    print("result:", {k: v for k, v in r.items() if not isinstance(v, list)})
    sys.exit(1)
PYEOF
}

# /health may still say 503 while the roles come up: bench's requests would
# fail, so wait for it the way the demo does
for _ in $(seq 300); do
    "$PY" -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1] + '/health', timeout=2)" \
        "$URL" 2>/dev/null && break
    sleep 0.1
done

"$MOONLET" bench random --base-url "$URL" --num-prompts 8 --max-concurrency 4 --input-len 32 \
    --output-len 16 --result-file "$T/r.json" > "$T/out.txt" 2>&1 || fail "random: $(cat "$T/out.txt")"
grep -q "Serving Benchmark Result" "$T/out.txt" || fail "no summary"
check "r['model_id'] == 'stories260K' and r['completed'] == 8 and r['failed'] == 0"
check "all(n == 16 for n in r['output_lens']) and r['mean_ttft_ms'] > 0 and r['mean_tpot_ms'] > 0"

"$MOONLET" bench shared-prefix --base-url "$URL" --endpoint chat --num-prompts 8 --turns 2 \
    --prefix-len 64 --output-len 8 --rate 50 --goodput "ttft:60000 tpot:60000" \
    --result-file "$T/r.json" > "$T/out.txt" 2>&1 || fail "chat: $(cat "$T/out.txt")"
check "r['completed'] == 8 and r['good_completed'] == 8 and r['slo_attainment'] == 1.0"

printf '%s\n' \
    '{"timestamp": 0, "input_length": 2048, "output_length": 256, "hash_ids": [1, 2, 3, 4]}' \
    '{"timestamp": 100, "input_length": 2048, "output_length": 128, "hash_ids": [1, 2, 3, 5]}' \
    > "$T/trace.jsonl"
"$MOONLET" bench trace "$T/trace.jsonl" --base-url "$URL" --block-scale 16 --max-concurrency 1 \
    --result-file "$T/r.json" > "$T/out.txt" 2>&1 || fail "trace: $(cat "$T/out.txt")"
check "r['completed'] == 2 and r['output_lens'] == [8, 4]"

# the same trace through `moonlet replay` over HTTP: the replay's CSV and
# summary, placement and cache hits from the server's moonlet_details
"$MOONLET" replay --trace "$T/trace.jsonl" --url "$URL" --block-scale 16 --out "$T/rp" \
    > "$T/out.txt" 2>&1 || fail "replay: $(cat "$T/out.txt")"
"$PY" - "$T/rp" <<'PYEOF' || fail "replay outputs: $(cat "$T/rp/requests.csv")"
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1] + "/requests.csv")))
s = json.load(open(sys.argv[1] + "/summary.json"))
assert [r["status"] for r in rows] == ["ok", "ok"], rows
assert [int(r["output_tokens"]) for r in rows] == [8, 4], rows
assert all(r["prefill"] == "0" and r["decode"] == "0" for r in rows), rows
assert int(rows[1]["prefix_hit_tokens"]) >= 48 and float(rows[1]["queue_s"]) >= 0, rows
assert 0 < float(rows[0]["ttft_s"]) <= float(rows[0]["finish_s"]) - float(rows[0]["arrival_s"])
assert s["requests"] == 2 and s["rejected"] == 0 and s["cache_hit_ratio"] > 0, s
PYEOF
"$MOONLET" replay --trace "$T/trace.jsonl" --url "$URL" --out "$T/rp" --policy mooncake \
    > "$T/out.txt" 2>&1 && fail "replay over HTTP took --policy"
grep -q "the server places requests" "$T/out.txt" || fail "no reason: $(cat "$T/out.txt")"

kill -TERM "$SRV"
for _ in $(seq 300); do kill -0 "$SRV" 2>/dev/null || break; sleep 0.1; done
kill -0 "$SRV" 2>/dev/null && fail "moonlet serve did not stop on SIGTERM"
wait "$SRV"; rc=$?
SRV=
[ "$rc" = 0 ] || fail "moonlet serve exited $rc"
echo "test_bench_serve: ok"
