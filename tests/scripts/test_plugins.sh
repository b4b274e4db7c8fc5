#!/usr/bin/env bash
# test_plugins.sh PART MPIEXEC MOONLET MODEL TEST_PLUGINS_DIR EXAMPLES_DIR [DATA_DIR]
# Plugins (moonlet/plugin.h) as users load them. PART:
#   errors   another ABI, no entry symbol, a missing host symbol, ids outside
#            the plugin range, a --place for no actor: each refused at start
#            with a clear line naming the cause; then a filter that never
#            answers fails closed (503) or open (200) as declared
#   cluster  mpirun -n 4 moonlet serve with the three examples and a probe
#            observer on the decode ranks that fails every 3rd event: quota
#            429 + Retry-After per key, affinity keeps a session on its
#            instances, one audit line per request, the probe restarted and
#            every other request answered
#   sim      moonlet replay --sim with the examples: the quota refuses, the
#            audit log has a line per request, the policy is the plugin's
# Run by CTest (label plugins).
set -u
PART=${1:?usage: test_plugins.sh PART MPIEXEC MOONLET MODEL TEST_PLUGINS_DIR EXAMPLES_DIR [DATA]}
MPIEXEC=${2:?mpiexec}
MOONLET=${3:?moonlet}
MODEL=${4:?model}
TP=${5:?test plugins dir}
EX=${6:?examples dir}
DATA=${7:-}
T=$(mktemp -d)
SRV=
stop_server() {
    if [ -n "$SRV" ] && kill -0 "$SRV" 2>/dev/null; then
        kill -TERM "$SRV" 2>/dev/null
        for _ in $(seq 150); do kill -0 "$SRV" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$SRV" 2>/dev/null
    fi
    wait 2>/dev/null
    SRV=
}
cleanup() {
    stop_server
    rm -rf "$T"
}
trap cleanup EXIT
fail() {
    echo "FAIL: $*"
    [ -f "$T/serve.log" ] && { echo "--- server log:"; tail -30 "$T/serve.log"; }
    exit 1
}

# start_server [mpirun -n N] moonlet serve ARGS...: URL set once it answers.
start_server() {
    "$@" > "$T/serve.log" 2>&1 < /dev/null &
    SRV=$!
    URL=
    for _ in $(seq 900); do
        kill -0 "$SRV" 2>/dev/null || fail "moonlet serve exited"
        URL=$(sed -n 's|.*serving on \(http://[^ ]*\)/v1.*|\1|p' "$T/serve.log" | head -1)
        [ -n "$URL" ] && break
        sleep 0.1
    done
    [ -n "$URL" ] || fail "moonlet serve never said where it serves"
    for _ in $(seq 300); do
        curl -sf "$URL/health" > /dev/null && return 0
        sleep 0.1
    done
    fail "no /health"
}

# complete KEY USER: the response with its headers, into $T/r
complete() {
    curl -s -i --max-time 60 "$URL/v1/completions" -H "authorization: Bearer $1" \
        -H 'content-type: application/json' \
        -d "{\"prompt\": \"Once upon a time\", \"max_tokens\": 16, \"temperature\": 0, \"user\": \"$2\", \"moonlet_details\": true}" \
        | tr -d '\r' > "$T/r"
}
status_of() { sed -n '1s|^HTTP/[0-9.]* \([0-9]*\).*|\1|p' "$T/r"; }

refused() { # refused NAME PATTERN ARGS...: moonlet serve exits 1 with PATTERN on stderr
    local name=$1 pat=$2
    shift 2
    timeout 60 "$MOONLET" serve --model "$MODEL" --port 0 --seconds 5 "$@" > "$T/o" 2>&1
    local rc=$?
    [ "$rc" = 1 ] || fail "$name: exit $rc, not 1: $(tail -3 "$T/o")"
    grep -q -- "$pat" "$T/o" || fail "$name: no '$pat' in: $(tail -3 "$T/o")"
    echo "ok: $name refused: $(grep -m1 -- "$pat" "$T/o" | sed 's/.*\] [a-z]* [^ ]* //')"
}

case $PART in
errors)
    refused "another ABI" "built for plugin ABI 43; this moonlet speaks ABI 2" \
        --plugin "$TP/libplugin_bad_abi.so"
    refused "no entry" "no symbol 'moon_plugin_entry': not a moonlet plugin" \
        --plugin "$TP/libplugin_no_entry.so"
    refused "missing host symbol" "undefined symbol: moon_plugin_no_such_function" \
        --plugin "$TP/libplugin_undefined.so"
    refused "ids outside the range" "outside the plugin range 200-255" \
        --plugin "$TP/libplugin_bad_ids.so"
    refused "no such file" "does not load" --plugin "$T/nothing.so"
    refused "place for no actor" "no plugin registered an actor of that name" \
        --plugin "$TP/libplugin_probe.so" --place nosuch=0
    refused "bad placement" "bad placement 'rank9'" \
        --plugin "$TP/libplugin_probe.so" --place probe=rank9
    refused "bad plugin args" "unknown option 'bogus'" --plugin "$EX/libtenant_quota.so:bogus"

    # a filter that never answers: closed -> 503 at its deadline, the next
    # request too; open -> answered
    start_server "$MOONLET" serve --model "$MODEL" --port 0 \
        --plugin "$TP/libplugin_probe.so:filter=silent,fail=closed"
    complete k s
    [ "$(status_of)" = 503 ] || fail "silent filter, fail closed: $(cat "$T/r")"
    grep -q "did not answer in time" "$T/r" || fail "no reason: $(cat "$T/r")"
    complete k s
    [ "$(status_of)" = 503 ] || fail "second request: $(cat "$T/r")"
    grep -q "gave no verdict within 300 ms: fails closed" "$T/serve.log" || fail "no log line"
    stop_server
    echo "ok: a silent filter failing closed answers 503"
    start_server "$MOONLET" serve --model "$MODEL" --port 0 \
        --plugin "$TP/libplugin_probe.so:filter=silent,fail=open"
    complete k s
    [ "$(status_of)" = 200 ] || fail "silent filter, fail open: $(cat "$T/r")"
    grep -q '"finish_reason":"length"' "$T/r" || fail "not answered: $(cat "$T/r")"
    stop_server
    echo "ok: a silent filter failing open lets requests through"
    # a filter that changes a parameter: every request ends after 3 tokens
    start_server "$MOONLET" serve --model "$MODEL" --port 0 --plugin "$TP/libplugin_probe.so:clamp=3"
    complete k s
    [ "$(status_of)" = 200 ] || fail "clamp: $(cat "$T/r")"
    grep -q '"completion_tokens":3,' "$T/r" || fail "max_tokens not changed: $(cat "$T/r")"
    stop_server
    echo "ok: a filter changed max_tokens 16 -> 3"
    ;;
cluster)
    start_server "$MPIEXEC" -n 4 "$MOONLET" serve --model "$MODEL" --port 0 \
        --prefill 2 --decode 2 --store 1 --policy session-affinity \
        --plugin "$EX/libaudit_log.so:$T/audit.jsonl" \
        --plugin "$EX/libtenant_quota.so:tokens_per_min=100" \
        --plugin "$EX/libsession_affinity.so" \
        --plugin "$TP/libplugin_probe.so:crash_every=3,store=1,tokens=1" --place probe=decode
    for _ in $(seq 100); do
        [ "$(grep -c 'probe: incarnation 1 is up' "$T/serve.log")" -ge 2 ] && break
        sleep 0.1
    done
    grep -q '\[r1 .*probe: incarnation 1 is up' "$T/serve.log" &&
        grep -q '\[r2 .*probe: incarnation 1 is up' "$T/serve.log" ||
        fail "the probe is not on the decode ranks (1 and 2)"
    # quota: 21 tokens a request (5 + 16): four pass, the fifth gets 429
    for i in 1 2 3 4; do
        complete tenant-a s1
        [ "$(status_of)" = 200 ] || fail "tenant-a request $i: $(cat "$T/r")"
        grep -o '"prefill_instance":[0-9]*,"decode_instance":[0-9]*' "$T/r" >> "$T/s1"
    done
    complete tenant-a s1
    [ "$(status_of)" = 429 ] || fail "tenant-a over quota: $(cat "$T/r")"
    grep -qi '^retry-after: [1-9]' "$T/r" || fail "no Retry-After: $(cat "$T/r")"
    grep -q 'tenant quota: 84 of 100 tokens per minute used' "$T/r" || fail "why: $(cat "$T/r")"
    echo "ok: quota: 429 with $(grep -i '^retry-after' "$T/r")"
    # other keys and sessions: their own budgets; a session stays on its instances
    for s in s2 s3 s4 s5; do
        for i in 1 2; do
            complete "tenant-$s" "$s"
            [ "$(status_of)" = 200 ] || fail "tenant-$s: $(cat "$T/r")"
            grep -o '"prefill_instance":[0-9]*,"decode_instance":[0-9]*' "$T/r" >> "$T/$s"
        done
    done
    for s in s1 s2 s3 s4 s5; do
        [ "$(sort -u "$T/$s" | wc -l)" = 1 ] || fail "session $s moved: $(cat "$T/$s")"
    done
    [ "$(cat "$T"/s? | sort -u | wc -l)" -ge 2 ] || fail "every session on one pair: $(head -1 "$T"/s?)"
    echo "ok: affinity: $(for s in s1 s2 s3 s4 s5; do printf '%s->%s ' $s "$(head -1 "$T/$s")"; done)"
    # audit: one line per request (12 finished + 1 rejected), keys and usage
    # (checked before the requests below)
    for _ in $(seq 50); do [ "$(wc -l < "$T/audit.jsonl")" -ge 13 ] && break; sleep 0.1; done
    [ "$(wc -l < "$T/audit.jsonl")" = 13 ] || fail "audit lines: $(cat "$T/audit.jsonl")"
    [ "$(grep -c '"key":"tenant-a","prompt_tokens":5,"completion_tokens":16,' "$T/audit.jsonl")" = 4 ] ||
        fail "audit of tenant-a: $(cat "$T/audit.jsonl")"
    grep -q '"finish":"rejected","http_status":429' "$T/audit.jsonl" || fail "no rejected line"
    grep '"finish":"length"' "$T/audit.jsonl" | grep -q '"ttft_ms":-1' &&
        fail "a finished request without its ttft: $(cat "$T/audit.jsonl")"
    echo "ok: audit: $(head -1 "$T/audit.jsonl")"
    # the probe (every 3rd event fails it) was restarted; serving went on
    grep -q "probe: failing on purpose" "$T/serve.log" || fail "the probe never failed"
    grep -q "probe: incarnation 2 is up" "$T/serve.log" || fail "the probe was not restarted"
    complete tenant-z s9
    [ "$(status_of)" = 200 ] || fail "after the restarts: $(cat "$T/r")"
    echo "ok: the failing probe was restarted $(grep -c 'failing on purpose' "$T/serve.log") times"
    # store events reach an observer on another rank: a prompt of full blocks
    curl -s --max-time 60 "$URL/v1/completions" -H 'authorization: Bearer tenant-y' \
        -H 'content-type: application/json' -d '{"prompt": "Once upon a time there was a little girl named Lily who loved to play in the park with her dog and her friends every day after school", "max_tokens": 4}' > "$T/r"
    grep -q '"finish_reason":"length"' "$T/r" || fail "the long prompt: $(cat "$T/r")"
    for _ in $(seq 100); do
        grep -q "probe: first store event: stored" "$T/serve.log" && break
        sleep 0.1
    done
    grep -q "probe: first store event: stored" "$T/serve.log" || fail "no store event observed"
    echo "ok: store events observed"
    # token observers get the decode step's batch (MOON_MSG_PLUGIN_TOKENS)
    grep -q "probe: first tokens: [1-9][0-9]* in one message" "$T/serve.log" ||
        fail "no TOKENS reached the token observer"
    echo "ok: tokens observed: $(grep -m1 -o 'probe: first tokens: [0-9]* in one message' "$T/serve.log")"
    stop_server
    ;;
sim)
    [ -n "$DATA" ] || fail "sim needs DATA_DIR"
    TRACE=$(ls "$DATA"/traces/*.jsonl 2>/dev/null | head -1)
    [ -n "$TRACE" ] || fail "no trace in $DATA/traces"
    timeout 120 "$MOONLET" replay --sim --trace "$TRACE" --out "$T/out" --policy session-affinity \
        --plugin "$EX/libaudit_log.so:$T/audit.jsonl" \
        --plugin "$EX/libtenant_quota.so:tokens_per_min=3000000" \
        --plugin "$EX/libsession_affinity.so" > "$T/serve.log" 2>&1 || fail "replay --sim failed"
    n=$(grep -c . "$TRACE")
    lines=$(wc -l < "$T/audit.jsonl")
    # the simulation ends at the last request's answer: its event may still be
    # on its way to the audit actor then
    [ "$lines" -ge $((n - 1)) ] && [ "$lines" -le "$n" ] || fail "audit: $lines lines for $n requests"
    grep -q '"finish":"rejected","http_status":429,"reason":"tenant quota' "$T/audit.jsonl" ||
        fail "the quota refused none"
    grep -q "^session-affinity .*requests $n " "$T/serve.log" || fail "not the plugin's policy"
    grep -q '"finish":"length"\|"finish":"stop"' "$T/audit.jsonl" || fail "none finished"
    echo "ok: sim: $lines audit lines, $(grep -c rejected "$T/audit.jsonl") refused by the quota"
    ;;
*)
    fail "unknown part $PART"
    ;;
esac
echo "ok: $PART"
