#!/usr/bin/env bash
# tests/scripts/test_serve_start_fail.sh MPIEXEC MOONLET MODEL - `mpirun -np 4
# moonlet serve` whose gateway cannot listen (the port is taken) exits with an
# error on every rank instead of leaving ranks 1-3 serving without a gateway
# (and rank 0 waiting for them at the final barrier). Run by CTest (label serve;
# the CTest timeout catches a hang).
set -u
MPIEXEC=$1
M=$2
MODEL=$3
T=$(mktemp -d)
trap 'kill "$HOLDER" 2>/dev/null; rm -rf "$T"' EXIT

# hold a port: a listener that lives as long as this script
python3 -c '
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
print(s.getsockname()[1], flush=True); time.sleep(600)' >"$T/port" &
HOLDER=$!
for _ in $(seq 50); do [ -s "$T/port" ] && break; sleep 0.1; done
PORT=$(cat "$T/port")

"$MPIEXEC" -np 4 "$M" serve --model "$MODEL" --port "$PORT" </dev/null >"$T/log" 2>&1
rc=$?
if [ "$rc" = 0 ] || ! grep -q "the gateway did not start on 127.0.0.1:$PORT" "$T/log"; then
    echo "FAIL: exit $rc (want non-zero and the gateway's error); log:"
    sed 's/^/    /' "$T/log" | head -30
    exit 1
fi
echo "ok: the taken port $PORT stopped every rank (exit $rc)"
