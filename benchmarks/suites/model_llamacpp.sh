#!/usr/bin/env bash
# benchmarks/suites/model_llamacpp.sh - Moonlet beside llama.cpp (npm
# node-llama-cpp, its prebuilt CPU build: the anchor) on the same GGUF file and
# threads, per family (llama, qwen2, qwen3) and type (F16, Q8_0, Q4_K_M) of the
# 110M shape (dim 768, hidden 2048, 12 layers, 12 heads, vocab 32000; F16 from
# gen-model, the others from `moonlet quantize`), three benches:
#   decode b1    N greedy steps of one sequence after a 64-token context
#   decode b32   N32 steps of 32 sequences in one context, each after a
#                64-token context (llama.cpp: 32 sequences of one context
#                evaluated in parallel, so it batches them; aggregate tok/s)
#   prefill 512  one 512-token prompt, best of max(2, PITERS / 8 + 1) runs
# (bench_model --bench=decode --batch=B / --bench=prefill --prompt=P;
# benchmarks/llamacpp_bench.mjs the same on llama.cpp). ROUNDS rounds alternate
# anchor and measurement; one JSON line per configuration: the median ratio
# with its min/max, each side's median tok/s, peak RSS (Moonlet: bench_model's
# process; llama.cpp: the node process, its runtime included) and the 1-minute
# load average after the rounds. Needs npm (node-llama-cpp installed into
# $BUILD_DIR/llamacpp_npm); prints a skip line without. Env: ROUNDS (3), N
# (64), N32 (16), PROMPT (512), PITERS (16), THREADS (nproc), FAMILIES, TYPES,
# BENCHES (b1 b32 prefill), BENCH_BIN, BUILD_DIR.
set -uo pipefail
BENCH_BIN=${BENCH_BIN:-build/benchmarks}
BUILD_DIR=${BUILD_DIR:-build}
MOONLET="$BUILD_DIR/launch/moonlet"
T=${THREADS:-$(nproc)}
MD="$BUILD_DIR/bench-models"
NPM="$BUILD_DIR/llamacpp_npm"
ROUNDS=${ROUNDS:-3} N=${N:-64} N32=${N32:-16} PROMPT=${PROMPT:-512} PITERS=${PITERS:-16}
[ "${SMOKE:-0}" = 1 ] && ROUNDS=1 N=4 N32=2 PROMPT=64 PITERS=1
mkdir -p "$MD" "$NPM"
if [ ! -d "$NPM/node_modules/node-llama-cpp" ]; then
    (cd "$NPM" && echo '{"private":true,"type":"module"}' >package.json &&
        timeout 500 npm install --silent --no-audit --no-fund node-llama-cpp@3.22.1 >npm.log 2>&1) ||
        { echo '{"suite": "model_llamacpp", "skipped": "npm or node-llama-cpp unavailable"}'; exit 0; }
fi
cp benchmarks/llamacpp_bench.mjs "$NPM/"

# bench NAME -> "KIND BATCH COUNT": COUNT is the decode steps or prompt tokens
bench_args() {
    case $1 in
    b1) echo "decode 1 $N" ;;
    b32) echo "decode 32 $N32" ;;
    prefill) echo "prefill 1 $PROMPT" ;;
    esac
}

# one round of each side on MODEL for bench NAME: two JSON lines, anchor first
run_round() {
    local m=$1 kind batch count extra
    read -r kind batch count <<<"$(bench_args "$2")"
    if [ "$kind" = prefill ]; then extra=(--prompt="$count" --iters="$PITERS"); else
        extra=(--iters="$count"); fi
    (cd "$NPM" && node llamacpp_bench.mjs "$(realpath "$OLDPWD/$m")" "$T" "$kind" "$batch" \
        "$count" "$([ "$kind" = prefill ] && echo "$PITERS" || echo 64)" 2>/dev/null | tail -1)
    OPENBLAS_NUM_THREADS=1 "$BENCH_BIN/bench_model" --model="$m" --label=x --bench="$kind" \
        --batch="$batch" --threads="$T" "${extra[@]}" 2>/dev/null | tail -1
}

# the JSON line of one configuration from its rounds' lines (anchor, Moonlet, ...)
summarise() {
    node -e '
const [fam, ty, file, name, kind, batch, count, threads, load, ...lines] = process.argv.slice(1);
const A = lines.filter((_, i) => i % 2 === 0).map(JSON.parse);
const B = lines.filter((_, i) => i % 2 === 1).map(JSON.parse);
const med = (x) => { const s = [...x].sort((p, q) => p - q); return s[Math.floor(s.length / 2)]; };
const ratios = B.map((b, i) => b.tokens_per_s / A[i].tokens_per_s);
const line = {suite: "model_llamacpp", bench: kind, batch: Number(batch), family: fam, type: ty,
  file_mib: +(require("fs").statSync(file).size / 1048576).toFixed(1), threads: Number(threads),
  rounds: A.length, moonlet_tokens_per_s: +med(B.map((b) => b.tokens_per_s)).toFixed(1),
  llamacpp_tokens_per_s: +med(A.map((a) => a.tokens_per_s)).toFixed(1),
  ratio_median: +med(ratios).toFixed(3), ratio_min: +Math.min(...ratios).toFixed(3),
  ratio_max: +Math.max(...ratios).toFixed(3),
  moonlet_peak_rss_mib: +Math.max(...B.map((b) => b.peak_rss_mib)).toFixed(1),
  llamacpp_rss_mib: +Math.max(...A.map((a) => a.rss_mib)).toFixed(1), load1: Number(load)};
if (kind === "prefill") line.prompt = Number(count); else line.steps = Number(count);
console.log(JSON.stringify(line));
' "$@"
}

shape=(--dim 768 --hidden 2048 --layers 12 --heads 12 --vocab 32000 --seq-len 1024)
[ "${SMOKE:-0}" = 1 ] && shape=(--dim 256 --hidden 512 --layers 2 --heads 4 --vocab 512 --seq-len 192)
for fam in ${FAMILIES:-llama qwen2 qwen3}; do
    f16="$MD/$fam-110m-f16.gguf"
    [ "${SMOKE:-0}" = 1 ] && f16="$MD/$fam-smoke-f16.gguf"
    [ -f "$f16" ] || "$MOONLET" gen-model --out "$f16" --arch "$fam" "${shape[@]}" --type f16 \
        --untied --seed 1 || exit 1
    for ty in ${TYPES:-F16 Q8_0 Q4_K_M}; do
        m="${f16%-f16.gguf}-${ty,,}.gguf"
        [ "$ty" = F16 ] && m=$f16
        [ -f "$m" ] || "$MOONLET" quantize "$f16" "$m" --type "$ty" >/dev/null || exit 1
        for name in ${BENCHES:-b1 b32 prefill}; do
            lines=()
            for _ in $(seq "$ROUNDS"); do
                mapfile -t -O "${#lines[@]}" lines < <(run_round "$m" "$name")
            done
            # shellcheck disable=SC2046 # the words of bench_args on purpose
            summarise "$fam" "$ty" "$m" "$name" $(bench_args "$name") "$T" \
                "$(cut -d' ' -f1 /proc/loadavg)" "${lines[@]}" 2>/dev/null ||
                echo "{\"suite\": \"model_llamacpp\", \"family\": \"$fam\", \"type\": \"$ty\", \"bench\": \"$name\", \"error\": \"a run failed\"}"
        done
    done
done
