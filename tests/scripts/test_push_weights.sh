#!/usr/bin/env bash
# test_push_weights.sh MPIEXEC MOONLET MODEL - `moonlet push-weights` against
# `mpirun -np 4 moonlet serve --admin-key` on a free loopback port, as the
# README shows it: answers before the push are version 0's (fingerprint and
# usage), the push answers version 1 with its figures (a delta: the
# perturbed copy moves only its changed chunks), answers after it are
# version 1's and differ; --state lists every instance on version 1; a
# wrong key gets 401, a bad body 400, no key at all turns the route off;
# /metrics has the version gauges and a push and a switch observed, and
# /v1/models the version served.
# Run by CTest (label weights).
set -u
MPIEXEC=${1:?usage: test_push_weights.sh MPIEXEC MOONLET MODEL}
MOONLET=${2:?moonlet}
MODEL=${3:?model}
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

"$MOONLET" perturb-model --model "$MODEL" --out "$T/b.gguf" > /dev/null || fail "perturb-model"
"$MPIEXEC" -n 4 "$MOONLET" serve --model "$MODEL" --port 0 --admin-key sekret \
    --weights-chunk-mib 0.0625 > "$T/serve.log" 2>&1 < /dev/null &
SRV=$!
URL=
for _ in $(seq 600); do
    kill -0 "$SRV" 2>/dev/null || fail "moonlet serve exited"
    URL=$(sed -n 's|.*serving on \(http://[^ ]*\)/v1.*|\1|p' "$T/serve.log" | head -1)
    [ -n "$URL" ] && break
    sleep 0.1
done
[ -n "$URL" ] || fail "moonlet serve never said where it serves"
for _ in $(seq 300); do
    curl -sf "$URL/health" > /dev/null && break
    sleep 0.1
done
complete() {
    curl -s "$URL/v1/completions" -H 'content-type: application/json' \
        -d '{"prompt": "Once upon a time", "max_tokens": 32, "temperature": 0}'
}
A=$(complete)
echo "$A" | grep -q '"system_fingerprint":"fp_[0-9a-f]*_v0"' || fail "fingerprint before: $A"
echo "$A" | grep -q '"moonlet":{"weight_version":0}' || fail "usage before: $A"

"$MOONLET" push-weights --url "$URL" --model "$T/b.gguf" --admin-key sekret > "$T/push.json" ||
    fail "push-weights: $(cat "$T/push.json")"
P=$(cat "$T/push.json")
echo "$P" | grep -q '"object":"weights.push","version":1,"old_version":0' || fail "push: $P"
echo "$P" | grep -q '"chunks":17,"chunks_moved":3,' || fail "not a delta: $P"

B=$(complete)
echo "$B" | grep -q '"system_fingerprint":"fp_[0-9a-f]*_v1"' || fail "fingerprint after: $B"
echo "$B" | grep -q '"moonlet":{"weight_version":1}' || fail "usage after: $B"
[ "${A#*\"text\":}" != "${B#*\"text\":}" ] || fail "the same text on both versions"

# /metrics: each instance's version, the serving one, one push and one
# switch observed (the gateway polls the broadcaster on its stats tick);
# /v1/models names the version served
M=
for _ in $(seq 100); do
    M=$(curl -s "$URL/metrics")
    echo "$M" | grep -q '^moonlet:weights_serving_version{[^}]*} 1$' && break
    sleep 0.1
done
echo "$M" | grep -q '^moonlet:weights_serving_version{[^}]*} 1$' || fail "serving gauge: $M"
[ "$(echo "$M" | grep -c '^moonlet:weights_version{.*role="\(prefill\|decode\)",instance="0"} 1$')" = 2 ] ||
    fail "instance gauges: $(echo "$M" | grep weights_version)"
echo "$M" | grep -q '^moonlet:weights_push_duration_seconds_count{[^}]*} 1$' ||
    fail "push histogram: $(echo "$M" | grep weights_push)"
echo "$M" | grep -q '^moonlet:weights_switch_duration_seconds_count{[^}]*} 1$' ||
    fail "switch histogram: $(echo "$M" | grep weights_switch)"
curl -s "$URL/v1/models" | grep -q '"moonlet":{"weight_version":1}' ||
    fail "models: $(curl -s "$URL/v1/models")"

MOON_PUSH_ADMIN_KEY=sekret "$MOONLET" push-weights --url "$URL" --state > "$T/state.json" ||
    fail "state: $(cat "$T/state.json")"
S=$(cat "$T/state.json")
echo "$S" | grep -q '"version":1,"phase":"idle"' || fail "state: $S"
[ "$(echo "$S" | grep -o '"version":1}' | wc -l)" = 2 ] || fail "instances not on 1: $S"

"$MOONLET" push-weights --url "$URL" --model "$T/b.gguf" --admin-key wrong > "$T/o" 2>&1 &&
    fail "a wrong key was taken"
grep -q "HTTP 401" "$T/o" || fail "wrong key: $(cat "$T/o")"
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$URL/v1/admin/weights" \
    -H 'authorization: Bearer sekret' -d '{"model": 3}')
[ "$code" = 400 ] || fail "bad body answered $code"
"$MOONLET" push-weights --url "$URL" --model /nonexistent.gguf --admin-key sekret > "$T/o" 2>&1 &&
    fail "a missing file was pushed"
grep -q "HTTP 404" "$T/o" || fail "missing file: $(cat "$T/o")"
echo "ok: $P"
