#!/usr/bin/env bash
# tests/scripts/test_cli.sh MOONLET MODEL - the moonlet command line as a new
# user tries it: every bad flag or value is an error naming the flag (exit 2),
# --help on stdout (exit 0), --version, prompts from stdin and files, the stop
# reason and the rates on stderr with only the text on stdout, `moonlet
# config`. Run by CTest (label unit).
set -u
M=$1
MODEL=$2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0

# expect RC PATTERN CMD...: runs CMD, wants exit status RC and PATTERN (grep -E)
# in its stderr (its stdout for RC 0).
expect() {
    local want_rc=$1 pattern=$2 rc out
    shift 2
    "$@" >"$T/out" 2>"$T/err" </dev/null
    rc=$?
    out=$T/err
    [ "$want_rc" = 0 ] && out=$T/out
    if [ "$rc" != "$want_rc" ] || ! grep -Eq -- "$pattern" "$out"; then
        echo "FAIL: $* -> exit $rc (want $want_rc), wanted /$pattern/ in:"
        sed 's/^/    /' "$T/out" "$T/err" | head -20
        fails=$((fails + 1))
    else
        echo "ok: $*"
    fi
}

G=(generate --model "$MODEL")
# the issue's list (issue 17): each was silently accepted before
expect 2 "unknown option '-p'" "$M" generate -p "Once" -n 5 --model "$MODEL"
expect 2 "--max-tokens: 'abc' is not an integer in \[0, 1048576\]" "$M" "${G[@]}" --max-tokens abc
expect 2 "--max-tokens: '5x'" "$M" "${G[@]}" --max-tokens 5x
expect 2 "--temperature: 'inf' is not a finite number" "$M" "${G[@]}" --temperature inf
expect 2 "--top-p: '2' is not a finite number in \[0, 1\]" "$M" "${G[@]}" --top-p 2
expect 2 "--top-p: '0' is not in \(0, 1\]" "$M" "${G[@]}" --top-p 0
expect 2 "--threads: '-1' is not an integer" "$M" "${G[@]}" --threads -1
expect 2 "--backend: 'bogus' is not one of ref\|cpu\|cuda" "$M" "${G[@]}" --backend bogus
expect 2 "unknown option '--max-token'" "$M" "${G[@]}" --max-token 5
expect 2 "--max-tokens needs a value" "$M" "${G[@]}" --max-tokens
expect 2 "unexpected argument 'Once'" "$M" "${G[@]}" Once
expect 2 "--model is required" "$M" generate --prompt Once
expect 2 "exclude each other" "$M" "${G[@]}" --prompt Once --prompt-file "$T/none"
expect 1 "$T/none: No such file" "$M" "${G[@]}" --prompt-file "$T/none"
expect 2 "--cpu-isa: 'avx1' is not one of" "$M" "${G[@]}" --cpu-isa avx1
# a FIFO as the model fails at once (timeout: a hang in open() fails the test)
mkfifo "$T/fifo"
expect 1 "not a regular file" timeout 30 "$M" generate --model "$T/fifo" --prompt Once
expect 2 "--log-level: 'loud'" "$M" "${G[@]}" --log-level loud
expect 2 "--dim: 'abc'" "$M" gen-model --out "$T/m.gguf" --dim abc
expect 2 "--type: 'f8' is not one of f32" "$M" gen-model --out "$T/m.gguf" --type f8
expect 2 "--out is required" "$M" gen-model --dim 8
expect 2 "unknown option '--bogus'" "$M" convert --bogus
expect 2 "--checkpoint, --tokenizer and --out are required" "$M" convert --out x
expect 2 "--prefill: 'x' is not an integer" "$M" serve --model "$MODEL" --prefill x
expect 2 "--transport: 'tcp' is not one of auto\|ucx\|mpi" "$M" serve --model "$MODEL" --transport tcp
expect 2 "--model is required" "$M" serve
expect 0 "dist options \(distributed runtime\)" "$M" serve --help
expect 2 "unknown command 'bogus'" "$M" bogus
expect 2 "usage: moonlet COMMAND" "$M"

# help on stdout, exit 0, nothing on stderr
for c in generate gen-model convert config; do
    expect 0 "^usage: moonlet $c" "$M" "$c" --help
    [ -s "$T/err" ] && { echo "FAIL: moonlet $c --help wrote on stderr"; fails=$((fails + 1)); }
done
expect 0 "--max-tokens N" "$M" generate --help
expect 0 "^usage: moonlet COMMAND" "$M" --help
expect 0 "^moonlet [0-9]+\.[0-9]+\.[0-9]+$" "$M" --version

# the text on stdout only; the stop reason and the rates on stderr
want=", there was a little girl named Lily. She loved"
expect 0 "^$want" "$M" "${G[@]}" --prompt "Once upon a time" --max-tokens 20
[ "$(wc -l <"$T/out")" = 1 ] || { echo "FAIL: stdout holds more than the text"; fails=$((fails + 1)); }
grep -q "stop: max-tokens after 20 new tokens" "$T/err" &&
    grep -Eq "20 new tokens in [0-9.]+ s \([0-9.]+ tokens/s\)" "$T/err" ||
    { echo "FAIL: no stop reason or rate on stderr:"; cat "$T/err"; fails=$((fails + 1)); }
cp "$T/out" "$T/golden"
# the same prompt from stdin and from a file
printf 'Once upon a time' | "$M" "${G[@]}" --prompt - --max-tokens 20 >"$T/out" 2>/dev/null
cmp -s "$T/out" "$T/golden" && echo "ok: --prompt - (stdin)" ||
    { echo "FAIL: --prompt - differs"; fails=$((fails + 1)); }
printf 'Once upon a time' >"$T/prompt.txt"
"$M" "${G[@]}" --prompt-file "$T/prompt.txt" --max-tokens 20 >"$T/out" 2>/dev/null
cmp -s "$T/out" "$T/golden" && echo "ok: --prompt-file" ||
    { echo "FAIL: --prompt-file differs"; fails=$((fails + 1)); }
# a 130 KB prompt (too long for a shell argument list entry elsewhere): read,
# tokenized, and refused for the context with a clear message
head -c 133120 /dev/zero | tr '\0' 'a' >"$T/big.txt"
expect 1 "does not fit the context" "$M" "${G[@]}" --prompt-file "$T/big.txt"
# a full context ends with its reason (stories260K: seq_len 512; this prompt
# is about 500 tokens: a few decode steps fill the context)
long=$(for i in $(seq 500); do printf 'Lily '; done)
expect 0 "" "$M" "${G[@]}" --prompt "$long" --max-tokens 100
grep -q "stop: context full (the model's seq_len) after [0-9]* new tokens" "$T/err" ||
    { echo "FAIL: no context-full stop:"; cat "$T/err"; fails=$((fails + 1)); }
# an end-of-text token ends a run before --max-tokens
expect 0 "" "$M" "${G[@]}" --prompt "Once" --max-tokens 2000
grep -q "stop: end of text after" "$T/err" ||
    { echo "FAIL: no end-of-text stop:"; cat "$T/err"; fails=$((fails + 1)); }

# moonlet config: every option, its value and its source
expect 0 "slice-bytes +2m +flag" "$M" config --slice-bytes 2m
MOON_TRANSPORT=mpi expect 0 "transport +mpi +env" "$M" config
expect 0 "cpu-isa +auto +default" "$M" config
expect 2 "MOON_PEER_TIMEOUT_MS: '2s'" env MOON_PEER_TIMEOUT_MS=2s "$M" config
expect 0 "^\| \`--slice-bytes\` \| \`MOON_SLICE_BYTES\`" "$M" config --markdown

# --calibration-cache: the first start times its engines and files the fits
# (one per instance: prefill and decode); the second reads them back
C=$T/calib
S=("$M" serve --model "$MODEL" --port 0 --seconds 1 --calibration-cache "$C")
MOON_LOG_LEVEL=info "${S[@]}" >/dev/null 2>"$T/err" </dev/null
grep -q "calibrated cpu" "$T/err" && [ "$(ls "$C" | wc -l)" = 2 ] ||
    { echo "FAIL: no calibration filed in $C:"; ls -l "$C"; cat "$T/err"; fails=$((fails + 1)); }
MOON_LOG_LEVEL=info "${S[@]}" >/dev/null 2>"$T/err" </dev/null
[ "$(grep -c "calibration from $C/calib-" "$T/err")" = 2 ] && ! grep -q "calibrated cpu" "$T/err" ||
    { echo "FAIL: the second start timed its engines again:"; cat "$T/err"; fails=$((fails + 1)); }

if [ "$fails" -gt 0 ]; then
    echo "$fails CLI check(s) failed"
    exit 1
fi
echo "every CLI check passed"
