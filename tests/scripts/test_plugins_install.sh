#!/usr/bin/env bash
# test_plugins_install.sh BUILD_DIR SRC_DIR MODEL MPIEXEC - the installable
# package: `cmake --install` into a temporary prefix; an out-of-tree project
# (tests/e2e/plugins/oot: a plugin and a client program) configured with
# find_package(Moonlet) against it and built; the client runs a cluster in
# its own process with the plugin loaded; the installed moonlet serves under
# mpirun with the same plugin; pkg-config builds the plugin again.
# Run by CTest (label plugins).
set -u
BUILD=${1:?usage: test_plugins_install.sh BUILD_DIR SRC_DIR MODEL MPIEXEC}
SRC=${2:?src}
MODEL=${3:?model}
MPIEXEC=${4:?mpiexec}
T=$(mktemp -d)
SRV=
cleanup() {
    if [ -n "$SRV" ] && kill -0 "$SRV" 2>/dev/null; then
        kill -TERM "$SRV" 2>/dev/null
        for _ in $(seq 150); do kill -0 "$SRV" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$SRV" 2>/dev/null
    fi
    wait 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
P=$T/prefix

cmake --install "$BUILD" --prefix "$P" > "$T/install.log" 2>&1 || fail "install: $(tail -5 "$T/install.log")"
for f in bin/moonlet lib/libmoonlet.so include/moonlet/plugin.h include/moonlet/serve_client.h \
    lib/pkgconfig/moonlet.pc lib/cmake/Moonlet/MoonletConfig.cmake; do
    [ -e "$P/$f" ] || fail "not installed: $f"
done
if ls "$P"/include/moonlet | grep -q -v '\.h$'; then fail "not only headers in include/moonlet"; fi
echo "ok: installed $(find "$P" -type f | wc -l) files"

cmake -S "$SRC/tests/e2e/plugins/oot" -B "$T/oot" -DCMAKE_PREFIX_PATH="$P" \
    -DCMAKE_BUILD_TYPE=Release > "$T/oot.log" 2>&1 || fail "configure: $(tail -5 "$T/oot.log")"
cmake --build "$T/oot" > "$T/oot.log" 2>&1 || fail "build: $(tail -20 "$T/oot.log")"
echo "ok: the out-of-tree plugin and client built with find_package(Moonlet)"

timeout 120 "$T/oot/oot_client" "$MODEL" "$T/oot/libcap_filter.so:32" > "$T/client.log" 2>&1 ||
    fail "client: $(tail -5 "$T/client.log")"
grep -q "length 8 tokens http 0" "$T/client.log" || fail "client: $(cat "$T/client.log")"
grep -q "rejected 0 tokens http 400 max_tokens over the deployment's cap" "$T/client.log" ||
    fail "client: $(cat "$T/client.log")"
echo "ok: client: $(grep -c '^request' "$T/client.log") answers through its own cluster and plugin"

"$MPIEXEC" -n 2 "$P/bin/moonlet" serve --model "$MODEL" --port 0 \
    --plugin "$T/oot/libcap_filter.so:16" > "$T/serve.log" 2>&1 < /dev/null &
SRV=$!
URL=
for _ in $(seq 900); do
    kill -0 "$SRV" 2>/dev/null || fail "installed moonlet serve exited: $(tail -5 "$T/serve.log")"
    URL=$(sed -n 's|.*serving on \(http://[^ ]*\)/v1.*|\1|p' "$T/serve.log" | head -1)
    [ -n "$URL" ] && break
    sleep 0.1
done
[ -n "$URL" ] || fail "no url"
code=$(curl -s -o "$T/r" -w '%{http_code}' --max-time 60 "$URL/v1/completions" \
    -H 'content-type: application/json' -d '{"prompt": "Once upon a time", "max_tokens": 40}')
[ "$code" = 400 ] || fail "over the cap: $code $(cat "$T/r")"
code=$(curl -s -o "$T/r" -w '%{http_code}' --max-time 60 "$URL/v1/completions" \
    -H 'content-type: application/json' -d '{"prompt": "Once upon a time", "max_tokens": 8}')
[ "$code" = 200 ] || fail "under the cap: $code $(cat "$T/r")"
echo "ok: the installed moonlet serves under mpirun with the out-of-tree plugin"

if command -v pkg-config > /dev/null; then
    flags=$(PKG_CONFIG_PATH="$P/lib/pkgconfig" pkg-config --cflags moonlet) || fail "pkg-config"
    cc -shared -fPIC $flags -o "$T/cap2.so" "$SRC/tests/e2e/plugins/oot/cap_filter.c" ||
        fail "cc with pkg-config flags"
    echo "ok: pkg-config --cflags moonlet: $flags"
fi
echo "ok: install"
