#!/usr/bin/env bash
# tests/scripts/jinja_xcheck.sh BIN SRC WORK - the chat-template engine
# against @huggingface/jinja (npm; the renderer transformers.js uses): the
# package renders every family's template (tests/data/jinja) on every
# conversation afresh (make_goldens.mjs into WORK) and BIN --goldens WORK
# (test_jinja) compares Moonlet's renderings with them. Says when the stored
# goldens drift from the package's. Skips (exit 0, with a message) when node,
# npm or the registry is missing. WORK keeps the installed package.
set -u
bin=$(realpath "$1") src=$(realpath "$2") work=$3
skip() { echo "skipped: $*"; exit 0; }
command -v node >/dev/null && command -v npm >/dev/null || skip "node or npm not found"
mkdir -p "$work" && cd "$work" || exit 1
pkg="@huggingface/jinja@0.5.13"
if [ ! -d node_modules/@huggingface/jinja ]; then
    [ -f package.json ] || echo '{"private":true}' >package.json
    timeout 240 npm install --silent --no-audit --no-fund "$pkg" >npm.log 2>&1 ||
        skip "the npm registry is unreachable (npm install $pkg failed; see $work/npm.log)"
fi
mkdir -p goldens
node "$src/tests/data/jinja/make_goldens.mjs" "$src/tests/data/jinja" goldens || exit 1
for g in goldens/*.golden; do
    cmp -s "$g" "$src/tests/data/jinja/$(basename "$g")" ||
        echo "note: $(basename "$g") from the package differs from tests/data/jinja (regenerate)"
done
"$bin" --goldens goldens
