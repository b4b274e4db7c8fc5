#!/usr/bin/env bash
# tests/data/scripts/fuzz_gguf.sh [SECONDS] - builds the libFuzzer target
# tests/unit/model/fuzz_gguf.c with clang (ASan + UBSan) and runs it on
# tests/data/gguf_corpus for SECONDS (default 120), then minimizes the corpus
# in place (-merge=1). test_gguf replays the corpus in CI. Needs Debian's clang
# (libclang-rt-dev provides libFuzzer).
set -euo pipefail
cd "$(dirname "$0")/../../.."
secs=${1:-120}
out=${FUZZ_OUT:-/tmp/moon_fuzz_gguf}
mkdir -p "$out/new"
clang -std=c11 -D_POSIX_C_SOURCE=200809L -g -O1 -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=undefined -Iinclude -Imodel \
    tests/unit/model/fuzz_gguf.c model/gguf/gguf.c model/gguf/quant.c model/gguf/fp16.c model/tokenizer.c \
    model/model.c model/kv_cache.c base/status.c base/log.c base/alloc.c base/vec.c \
    -lm -lpthread -o "$out/fuzz_gguf"
"$out/fuzz_gguf" -max_total_time="$secs" -max_len=65536 -rss_limit_mb=2048 \
    "$out/new" tests/data/gguf_corpus
mkdir -p "$out/merged"
"$out/fuzz_gguf" -merge=1 "$out/merged" tests/data/gguf_corpus "$out/new"
rm -f tests/data/gguf_corpus/*
cp "$out/merged"/* tests/data/gguf_corpus/
echo "corpus: $(ls tests/data/gguf_corpus | wc -l) files"
