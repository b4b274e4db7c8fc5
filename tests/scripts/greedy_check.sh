#!/usr/bin/env bash
# tests/scripts/greedy_check.sh MOONLET SRC WORK [--llamacpp] - greedy
# continuations of random models of each architecture (llama with Llama 3.1
# rope_freqs, qwen2 with Q/K/V biases, qwen3 with Q/K norms, qwen3_hd: qwen3
# with 4 heads of 32 over dim 64, as Qwen 3 0.6B's heads are 2x dim / n_heads;
# yarn: qwen2 with YaRN rope scaling, factor 16 over an 8-token original
# context, so every position past the eighth is extended; untied
# classifier, gen-model's 512-token vocabulary) written by `moonlet gen-model`:
#  - always: `moonlet generate --print-ids` gives tests/data/greedy/greedy.txt
#    (32 new tokens after "Once upon a time");
#  - --llamacpp: llama.cpp (npm node-llama-cpp, installed into WORK) gives the
#    same 32 tokens from the same prompt ids on the same file, and tokenizes the
#    prompt as Moonlet does. Skips (exit 0, with a message) when node, npm or the
#    registry is missing.
set -u
moonlet=$(realpath "$1") src=$(realpath "$2") work=$3 llamacpp=${4:-}
skip() { echo "skipped: $*"; exit 0; }
mkdir -p "$work" && cd "$work" || exit 1
if [ -n "$llamacpp" ]; then
    command -v node >/dev/null && command -v npm >/dev/null || skip "node or npm not found"
    if [ ! -d node_modules/node-llama-cpp ]; then
        echo '{"private":true,"type":"module"}' >package.json
        timeout 500 npm install --silent --no-audit --no-fund node-llama-cpp@3.22.1 >npm.log 2>&1 ||
            skip "the npm registry is unreachable (npm install node-llama-cpp failed; see $work/npm.log)"
    fi
    cp "$src/tests/scripts/llamacpp_greedy.mjs" .
fi
rc=0
prompt="Once upon a time"
# q4_k_m: a qwen2 model of 256 wide rows (whole K-quant blocks) written in F32
# and quantized by `moonlet quantize --type Q4_K_M`. llama.cpp multiplies K-quants
# by activations it rounds to 8 bits (Q8_K), so a near tie may turn the other
# way: there the first 16 tokens must agree, the rest is reported.
rm -f l_jobs.tsv
l_arch=() l_got=() l_ids=()
for arch in llama qwen2 qwen3 qwen3_hd yarn q4_k_m; do
    extra="" gen_arch=$arch
    [ "$arch" = llama ] && extra=--rope-freqs
    [ "$arch" = qwen3_hd ] && gen_arch=qwen3 extra="--head-dim 32"
    [ "$arch" = yarn ] && gen_arch=qwen2 extra="--rope-scaling yarn --rope-factor 16 --rope-orig-ctx 8"
    if [ "$arch" = q4_k_m ]; then
        "$moonlet" gen-model --out g_f32.gguf --arch qwen2 --dim 256 --hidden 512 --layers 2 \
            --heads 4 --kv-heads 2 --seq-len 128 --vocab 512 --untied --seed 7 &&
            "$moonlet" quantize g_f32.gguf "g_$arch.gguf" --type Q4_K_M || { rc=1; continue; }
    else
        "$moonlet" gen-model --out "g_$arch.gguf" --arch "$gen_arch" --dim 64 --hidden 128 --layers 2 \
            --heads 4 --kv-heads 2 --seq-len 128 --vocab 512 --untied --seed 7 $extra ||
            { rc=1; continue; }
    fi
    "$moonlet" generate --model "g_$arch.gguf" --prompt "$prompt" --max-tokens 32 --print-ids \
        --threads 2 --backend "${MOON_GREEDY_BACKEND:-cpu}" >"m_$arch.txt" 2>"m_$arch.err" ||
        { cat "m_$arch.err"; rc=1; continue; }
    ids=$(sed -n 's/.*prompt ids: //p' "m_$arch.err")
    got=$(cat "m_$arch.txt")
    want=$(sed -n "s/^$arch | [^|]* | //p" "$src/tests/data/greedy/greedy.txt")
    if [ -z "$llamacpp" ]; then
        if [ "$got" = "$want" ]; then
            echo "$arch: greedy ids match the goldens"
        else
            echo "$arch: greedy ids differ from the goldens: got '$got', want '$want'"; rc=1
        fi
        continue
    fi
    # llama.cpp's run: queued, every architecture in one process (below)
    printf '%s\t%s\t32\t%s\n' "$PWD/g_$arch.gguf" "$ids" "$prompt" >>l_jobs.tsv
    l_arch+=("$arch") l_got+=("$got") l_ids+=("$ids")
done
[ -n "$llamacpp" ] && [ ${#l_arch[@]} -gt 0 ] || exit $rc
# the 240 s each architecture had when each was a run of its own
timeout $((240 * ${#l_arch[@]})) node llamacpp_greedy.mjs --jobs l_jobs.tsv >l_all.json 2>l_all.err
for k in "${!l_arch[@]}"; do
    arch=${l_arch[$k]} got=${l_got[$k]} ids=${l_ids[$k]}
    sed -n "$((k + 1))p" l_all.json >"l_$arch.json"
    if ! grep -q '"tokens"' "l_$arch.json"; then
        echo "$arch: llama.cpp failed: $(cat "l_$arch.json")"; tail -5 l_all.err; rc=1; continue
    fi
    node -e '
const [f, arch, got, ids, need] = process.argv.slice(1);
const r = JSON.parse(require("fs").readFileSync(f, "utf8").trim().split("\n").pop());
const mine = got.trim().split(/\s+/).map(Number);
let agree = 0;
while (agree < mine.length && mine[agree] === r.tokens[agree]) agree++;
const same = agree >= Number(need);
const tok = ids.trim().split(/\s+/).map(Number).slice(1); /* without BOS */
const sameTok = JSON.stringify(tok) === JSON.stringify(r.tokenize);
console.log(`${arch}: ${agree} of ${mine.length} greedy tokens agree with llama.cpp ` +
            `(${need} needed: ${same ? "agrees" : "DIFFERS"})` +
            `; prompt tokens ${sameTok ? "agree" : "DIFFER"}`);
if (agree < mine.length) console.log(`  moonlet   ${mine.join(" ")}\n  llama.cpp ${r.tokens.join(" ")}`);
if (!sameTok) console.log(`  moonlet   ${tok}\n  llama.cpp ${r.tokenize}`);
process.exit(same && sameTok ? 0 : 1);
' "l_$arch.json" "$arch" "$got" "$ids" "$([ "$arch" = q4_k_m ] && echo 16 || echo 32)" || rc=1
done
exit $rc
