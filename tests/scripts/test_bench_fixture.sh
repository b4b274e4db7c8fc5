#!/usr/bin/env bash
# test_bench_fixture.sh MOONLET PYTHON3 - `moonlet bench`'s HTTP client
# against the TEST FIXTURE openai_sse_fixture.py (a fake OpenAI stream, no
# model): request bodies, SSE parsing over split reads, usage counts, the
# model lookup, API keys, failures, trace prefixes, result file and plots.
set -u
MOONLET=${1:?usage: test_bench_fixture.sh MOONLET PYTHON3}
PY=${2:-python3}
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d)
FIX_PID=
cleanup() { [ -n "$FIX_PID" ] && kill "$FIX_PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

start_fixture() { # extra fixture args
    [ -n "$FIX_PID" ] && kill "$FIX_PID" 2>/dev/null && wait "$FIX_PID" 2>/dev/null
    rm -f "$T/port" "$T/log"
    "$PY" "$HERE/openai_sse_fixture.py" --port-file "$T/port" --log "$T/log" "$@" &
    FIX_PID=$!
    for _ in $(seq 100); do [ -s "$T/port" ] && break; sleep 0.1; done
    [ -s "$T/port" ] || fail "fixture did not start"
    URL=http://127.0.0.1:$(cat "$T/port")
}

check() { # python expression over r (result JSON) and bodies (logged requests)
    "$PY" - "$T/r.json" "$T/log" "$1" <<'PYEOF' || fail "check: $1"
import json, sys
r = json.load(open(sys.argv[1]))
bodies = [json.loads(l) for l in open(sys.argv[2])]
ok = eval(sys.argv[3])
if not ok:
    print("result:", {k: v for k, v in r.items() if not isinstance(v, list)})
    sys.exit(1)
PYEOF
}

# 1. random token-id prompts, rate and concurrency cap, usage counts
start_fixture
"$MOONLET" bench random --base-url "$URL" --model m --num-prompts 20 --rate 200 \
    --max-concurrency 4 --input-len 16 --output-len 8 --seed 3 --result-file "$T/r.json" \
    > "$T/out.txt" || fail "random run failed"
grep -q "Serving Benchmark Result" "$T/out.txt" || fail "no summary"
grep -q "Mean TPOT (ms):" "$T/out.txt" || fail "no TPOT rows"
check "r['completed'] == 20 and r['failed'] == 0 and r['total_output_tokens'] == 160"
check "r['total_input_tokens'] == 320 and all(n == 16 for n in r['input_lens'])"
check "r['total_cached_tokens'] == 160"  # the fixture says half of each prompt was cached
check "all(len(g) == 7 for g in r['itls']) and r['mean_ttft_ms'] > 0 and r['mean_itl_ms'] > 0"
check "r['max_concurrent_requests'] <= 4 and r['max_concurrency'] == 4 and r['request_rate'] == 200"
check "r['request_goodput'] is None and r['mean_tpot_ms'] > 0 and r['p99_e2el_ms'] >= r['p90_e2el_ms']"
check "len(bodies) == 20 and all(b['path'] == '/v1/completions' for b in bodies)"
check "all(b['body']['stream'] is True and b['body']['stream_options']['include_usage'] and b['body']['ignore_eos'] and b['body']['max_tokens'] == 8 and b['body']['model'] == 'm' for b in bodies)"
check "all(len(b['body']['prompt']) == 16 and all(3 <= t < 512 for t in b['body']['prompt']) for b in bodies)"
sort "$T/log" > "$T/log1"

# 2. same seed, same bodies
start_fixture
"$MOONLET" bench random --base-url "$URL" --model m --num-prompts 20 --rate 200 \
    --max-concurrency 4 --input-len 16 --output-len 8 --seed 3 > /dev/null || fail "rerun failed"
sort "$T/log" | cmp -s - "$T/log1" || fail "same seed sent different bodies"

# 3. chat, model from /v1/models, API key, SLOs
start_fixture --api-key sesame
"$MOONLET" bench shared-prefix --base-url "$URL/v1" --endpoint chat --api-key sesame \
    --num-prompts 6 --turns 2 --num-prefixes 1 --prefix-len 8 --question-len 4 --output-len 3 \
    --slo-ttft-ms 60000 --slo-tpot-ms 60000 --result-file "$T/r.json" > /dev/null \
    || fail "chat run failed"
check "r['model_id'] == 'fixture-model' and r['completed'] == 6 and r['good_completed'] == 6"
check "r['slo_attainment'] == 1.0 and r['request_goodput'] > 0 and r['total_output_tokens'] == 18"
check "all(b['path'] == '/v1/chat/completions' and b['body']['messages'][0]['role'] == 'system' for b in bodies)"
check "len({b['body']['messages'][0]['content'] for b in bodies}) == 1"
"$MOONLET" bench random --base-url "$URL" --api-key wrong --num-prompts 2 > /dev/null 2>&1 \
    && fail "a wrong API key passed"

# 4. server errors are failed requests, with their message
start_fixture --fail-every 5
"$MOONLET" bench random --base-url "$URL" --model m --num-prompts 20 --input-len 4 \
    --output-len 2 --result-file "$T/r.json" > /dev/null 2> "$T/err.txt" || fail "run with failures"
check "r['completed'] == 16 and r['failed'] == 4"
check "sum('HTTP 400: fixture rejects' in e for e in r['errors']) == 4"
grep -q "fixture rejects" "$T/err.txt" || fail "errors not printed"

# 5. trace: equal hash ids -> equal prompt blocks; timestamps time-scaled
cat > "$T/trace.jsonl" <<'TR'
{"timestamp": 0, "input_length": 1024, "output_length": 100, "hash_ids": [1, 2]}
{"timestamp": 100, "input_length": 1500, "output_length": 50, "hash_ids": [1, 2, 3]}
{"timestamp": 200, "input_length": 700, "output_length": 10, "hash_ids": [4, 5]}
TR
start_fixture
"$MOONLET" bench trace "$T/trace.jsonl" --base-url "$URL" --model m --block-scale 16 \
    --time-scale 0.5 --result-file "$T/r.json" --plot-dir "$T/plots" > /dev/null 2> "$T/err.txt" \
    || fail "trace run failed"
check "r['completed'] == 3 and r['workload'] == 'trace' and sorted(r['input_lens']) == [22, 32, 47]"
check "sorted(len(b['body']['prompt']) for b in bodies) == [22, 32, 47]"
check "(lambda p: p[32][:32] == p[47][:32] and p[22][:16] != p[32][:16])({len(b['body']['prompt']): b['body']['prompt'] for b in bodies})"
check "sorted(b['body']['max_tokens'] for b in bodies) == [1, 2, 4]"
check "abs(r['send_times'][2] - 0.1) < 0.1 and r['send_times'][2] >= 0.099"
if command -v gnuplot > /dev/null; then
    for p in ttft_cdf tpot_cdf throughput; do
        [ -s "$T/plots/$p.png" ] || fail "no $p.png"
    done
else
    grep -q "plots skipped: gnuplot not found" "$T/err.txt" || fail "no skip message"
fi

# 6. bad input: a clear error, no crash
"$MOONLET" bench trace "$T/missing.jsonl" --model m > /dev/null 2>&1 && fail "missing trace passed"
"$MOONLET" bench random --num-prompts x > /dev/null 2> "$T/err.txt"; [ $? = 2 ] || fail "bad flag not rc 2"
grep -q "^moonlet bench: --num-prompts: 'x'" "$T/err.txt" || fail "bad flag not named"
"$MOONLET" bench sharegpt > /dev/null 2> "$T/err.txt"; [ $? = 2 ] || fail "bad workload not rc 2"
grep -q "unknown workload 'sharegpt'" "$T/err.txt" || fail "bad workload not named"
"$MOONLET" bench --help > "$T/out.txt" 2> "$T/err.txt" || fail "--help failed"
grep -q "^usage: moonlet bench" "$T/out.txt" && grep -q -- "--slo-tpot-ms" "$T/out.txt" \
    && [ ! -s "$T/err.txt" ] || fail "--help not the usage on stdout alone"
echo "test_bench_fixture: ok"
