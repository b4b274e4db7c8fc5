#!/usr/bin/env bash
# tests/scripts/serve_greedy_check.sh MPIEXEC MOONLET WORK [GEN-MODEL FLAGS...] -
# a generated model served disaggregated gives `moonlet generate`'s greedy
# text. `moonlet gen-model` writes the model (FLAGS after the shape: e.g.
# --arch qwen3 --head-dim 32, heads twice dim / n_heads as in Qwen 3 0.6B);
# `moonlet generate` (one process) gives the reference text; `mpirun -np 4
# moonlet serve` (rank 0 gateway and conductor, then store, prefill and
# decode ranks: the KV of each prompt goes prefill -> store -> decode) answers
# the same prompt twice at temperature 0, the second time from the store's
# prefix blocks. Passes when both completions' text equals generate's.
# Skips (exit 0, with a message) without curl or python3.
set -u
MPIEXEC=$1 M=$(realpath "$2") WORK=$3
shift 3
skip() { echo "skipped: $*"; exit 0; }
command -v curl >/dev/null || skip "curl not found"
command -v python3 >/dev/null || skip "python3 not found"
mkdir -p "$WORK" && cd "$WORK" || exit 1
PORT=${PORT:-$((21000 + $$ % 2000))}
URL=http://127.0.0.1:$PORT
prompt="Once upon a time"
"$M" gen-model --out model.gguf --dim 64 --hidden 128 --layers 2 --heads 4 --kv-heads 2 \
    --seq-len 256 --vocab 512 --untied --seed 7 "$@" || { echo "FAILED: gen-model"; exit 1; }
"$M" generate --model model.gguf --prompt "$prompt" --max-tokens 24 --threads 1 >want.txt \
    2>gen.err || { cat gen.err; echo "FAILED: generate"; exit 1; }
"$MPIEXEC" -np 4 "$M" serve --model model.gguf --port "$PORT" --threads 1 </dev/null \
    >serve.log 2>&1 &
server=$!
trap 'kill -TERM $server 2>/dev/null; wait $server 2>/dev/null' EXIT
for _ in $(seq 240); do
    curl -sf "$URL/health" >/dev/null && break
    kill -0 $server 2>/dev/null || { cat serve.log; echo "FAILED: serve exited"; exit 1; }
    sleep 0.5
done
curl -sf "$URL/health" >/dev/null || { tail serve.log; echo "FAILED: no cluster in 120 s"; exit 1; }
grep -o "1 prefill, 1 decode, 1 store on 4 rank(s)" serve.log ||
    { tail serve.log; echo "FAILED: not disaggregated"; exit 1; }
rc=0
for i in 1 2; do
    curl -s -m 60 "$URL/v1/completions" -H 'content-type: application/json' \
        -d "{\"prompt\": \"$prompt\", \"max_tokens\": 24, \"temperature\": 0}" >"got$i.json"
    python3 - "got$i.json" want.txt "$i" <<'EOF' || rc=1
import json, sys
got, want, i = sys.argv[1], sys.argv[2], sys.argv[3]
try:
    text = json.load(open(got, encoding="utf-8"))["choices"][0]["text"]
except (ValueError, KeyError, IndexError):
    print("FAILED: completion %s is not an answer: %s" % (i, open(got).read()[:300]))
    sys.exit(1)
ref = open(want, encoding="utf-8", errors="replace").read()
ref = ref[:-1] if ref.endswith("\n") else ref
if text == ref:
    print("completion %s: served text equals moonlet generate's (%d chars)" % (i, len(text)))
    sys.exit(0)
print("FAILED: completion %s DIFFERS:\n  served   %r\n  generate %r" % (i, text, ref))
sys.exit(1)
EOF
done
exit $rc
