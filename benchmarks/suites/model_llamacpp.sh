#!/usr/bin/env bash
# benchmarks/suites/model_llamacpp.sh - Moonlet beside llama.cpp (npm
# node-llama-cpp, its prebuilt CPU build: the anchor) on the same GGUF file and
# threads: decode at batch 1 (a one-token prompt, then N greedy steps), per
# family (llama, qwen2, qwen3) and type (F16, Q8_0, Q4_K_M) of the 110M shape
# (dim 768, hidden 2048, 12 layers, 12 heads, vocab 32000; F16 from gen-model,
# the others from `moonlet quantize`). ROUNDS rounds alternate anchor and
# measurement; one JSON line per configuration: the median ratio with its
# min/max, each side's median tok/s, and peak RSS (Moonlet: bench_model's
# process; llama.cpp: the node process, its runtime included). Needs npm
# (node-llama-cpp installed into $BUILD_DIR/llamacpp_npm); prints a skip
# line without. Env: ROUNDS (3), N (64), BENCH_BIN, BUILD_DIR.
set -uo pipefail
BENCH_BIN=${BENCH_BIN:-build/benchmarks}
BUILD_DIR=${BUILD_DIR:-build}
MOONLET="$BUILD_DIR/launch/moonlet"
T=$(nproc)
MD="$BUILD_DIR/bench-models"
NPM="$BUILD_DIR/llamacpp_npm"
ROUNDS=${ROUNDS:-3} N=${N:-64}
[ "${SMOKE:-0}" = 1 ] && ROUNDS=1 N=4
mkdir -p "$MD" "$NPM"
if [ ! -d "$NPM/node_modules/node-llama-cpp" ]; then
    (cd "$NPM" && echo '{"private":true,"type":"module"}' >package.json &&
        timeout 500 npm install --silent --no-audit --no-fund node-llama-cpp@3.22.1 >npm.log 2>&1) ||
        { echo '{"suite": "model_llamacpp", "skipped": "npm or node-llama-cpp unavailable"}'; exit 0; }
fi
cp benchmarks/llamacpp_decode.mjs "$NPM/"
shape=(--dim 768 --hidden 2048 --layers 12 --heads 12 --vocab 32000 --seq-len 1024)
[ "${SMOKE:-0}" = 1 ] && shape=(--dim 256 --hidden 512 --layers 2 --heads 4 --vocab 512 --seq-len 128)
for fam in ${FAMILIES:-llama qwen2 qwen3}; do
    f16="$MD/$fam-110m-f16.gguf"
    [ "${SMOKE:-0}" = 1 ] && f16="$MD/$fam-smoke-f16.gguf"
    [ -f "$f16" ] || "$MOONLET" gen-model --out "$f16" --arch "$fam" "${shape[@]}" --type f16 \
        --untied --seed 1 || exit 1
    for ty in F16 Q8_0 Q4_K_M; do
        m="${f16%-f16.gguf}-$(echo "$ty" | tr 'A-Z' 'a-z').gguf"
        [ "$ty" = F16 ] && m=$f16
        [ -f "$m" ] || "$MOONLET" quantize "$f16" "$m" --type "$ty" || exit 1
        mine=() anch=() mrss=0 arss=0
        for r in $(seq "$ROUNDS"); do
            a=$(cd "$NPM" && node llamacpp_decode.mjs "$(realpath "$OLDPWD/$m")" "$T" "$N" 2>/dev/null | tail -1)
            b=$(OPENBLAS_NUM_THREADS=1 "$BENCH_BIN/bench_model" --model="$m" --label=x --bench=decode \
                --batch=1 --threads="$T" --iters="$N" 2>/dev/null | tail -1)
            anch+=("$a") mine+=("$b")
        done
        node -e '
const [fam, ty, file, rounds, ...rest] = process.argv.slice(1);
const n = Number(rounds), A = rest.slice(0, n).map(JSON.parse), B = rest.slice(n).map(JSON.parse);
const med = (x) => { const s = [...x].sort((p, q) => p - q); return s[Math.floor(s.length / 2)]; };
const ratios = B.map((b, i) => b.tokens_per_s / A[i].tokens_per_s);
console.log(JSON.stringify({suite: "model_llamacpp", bench: "decode", batch: 1, family: fam, type: ty,
  file_mib: +(require("fs").statSync(file).size / 1048576).toFixed(1), rounds: n,
  moonlet_tokens_per_s: +med(B.map((b) => b.tokens_per_s)).toFixed(1),
  llamacpp_tokens_per_s: +med(A.map((a) => a.tokens_per_s)).toFixed(1),
  ratio_median: +med(ratios).toFixed(3), ratio_min: +Math.min(...ratios).toFixed(3),
  ratio_max: +Math.max(...ratios).toFixed(3),
  moonlet_peak_rss_mib: +Math.max(...B.map((b) => b.peak_rss_mib)).toFixed(1),
  llamacpp_rss_mib: +Math.max(...A.map((a) => a.rss_mib)).toFixed(1)}));
' "$fam" "$ty" "$m" "$ROUNDS" "${anch[@]}" "${mine[@]}" ||
            echo "{\"suite\": \"model_llamacpp\", \"family\": \"$fam\", \"type\": \"$ty\", \"error\": \"a run failed\"}"
    done
done
