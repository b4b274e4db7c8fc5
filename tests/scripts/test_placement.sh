#!/usr/bin/env bash
# tests/scripts/test_placement.sh MPIEXEC MOONLET MODEL - `moonlet serve
# --print-placement`: alone, one line naming every actor on rank 0; under
# mpirun -np 4 --split-hosts 2 on this machine's cores, one line per rank
# (the roles where serve_cluster places them, two pseudo-hosts) and, the
# ranks oversubscribing the cores, a warning naming the counts that fit;
# a --gpu that is neither auto nor an index refused with its reason.
set -u
MPIEXEC=$1
M=$2
MODEL=$3
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "test_placement: $*"; cat "$T"/*.log 2>/dev/null | tail -30; exit 1; }

timeout 60 "$M" serve --model "$MODEL" --port 0 --print-placement --log-level info --seconds 1 >"$T/one.log" 2>&1 ||
    fail "moonlet serve --print-placement exited $?"
grep -q '^placement: rank 0/1 host .*: conductor,store/0,prefill/0,decode/0 | workers 1 ' \
    "$T/one.log" || fail "no placement line for one process"
# --numa (default on): the pools and the arena are bound to the rank's node,
# each says so, and the placement line names the node
grep -q '^placement: rank 0/1 .* | numa node [0-9][0-9,-]* (kv pools and store arenas bound' \
    "$T/one.log" || fail "the placement line names no numa node"
[ "$(grep -c 'kv pool: [0-9]* MiB bound to NUMA node [0-9]' "$T/one.log")" = 2 ] ||
    fail "the prefill's and the decode's kv pools did not both say where they were bound"
grep -q 'store shard 0: [0-9]* MiB arena bound to NUMA node [0-9]' "$T/one.log" ||
    fail "the store shard's arena did not say where it was bound"
timeout 60 "$M" serve --model "$MODEL" --port 0 --no-numa --print-placement --log-level info --seconds 1 \
    >"$T/nonuma.log" 2>&1 || fail "moonlet serve --no-numa exited $?"
if grep -q 'bound to NUMA node\|arenas bound' "$T/nonuma.log"; then
    fail "--no-numa still bound memory"
fi

timeout 120 "$MPIEXEC" -np 4 "$M" serve --model "$MODEL" --port 0 --print-placement --log-level info \
    --split-hosts 2 --seconds 2 >"$T/four.log" 2>&1 || fail "mpirun -np 4 moonlet serve exited $?"
for want in 'rank 0/4 .*(pseudo-host 0 of 2).*: conductor,weights |' \
            'rank 1/4 .*(pseudo-host 1 of 2).*: store/0 |' \
            'rank 2/4 .*(pseudo-host 0 of 2).*: prefill/0 |' \
            'rank 3/4 .*(pseudo-host 1 of 2).*: decode/0 |'; do
    grep -q "^placement: $want" "$T/four.log" || fail "no line '$want'"
done
# across ranks the pools and the arena are transport regions, bound all the same
[ "$(grep -c 'kv pool: [0-9]* MiB bound to NUMA node\|store shard 0: [0-9]* MiB arena bound' \
    "$T/four.log")" = 3 ] || fail "not every pool and arena of the 4 ranks was bound"
if [ "$(nproc)" -lt 8 ]; then
    grep -q 'oversubscribed.*What fits: at most [0-9]* such rank(s) per host (mpirun --map-by ppr:' \
        "$T/four.log" || fail "4 ranks on $(nproc) cores but no oversubscription warning"
fi
# --gpu: an index or auto (each rank its local rank's device); anything else
# is refused before the cluster starts, with the reason
if timeout 60 "$M" serve --model "$MODEL" --port 0 --gpu first --seconds 1 >"$T/gpu.log" 2>&1; then
    fail "moonlet serve --gpu first was accepted"
fi
grep -q -- '--gpu first is neither auto nor a device index' "$T/gpu.log" ||
    fail "no reason given for --gpu first"
timeout 60 "$M" serve --model "$MODEL" --port 0 --gpu 1 --print-placement --seconds 1 \
    >"$T/gpu1.log" 2>&1 || fail "moonlet serve --gpu 1 (cpu backend) exited $?"
echo "test_placement: ok"
