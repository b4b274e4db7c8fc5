#!/usr/bin/env bash
# tests/soak/run.sh [--minutes M] [--moonlet BIN] [--model GGUF] [--mpirun BIN]
#                   [soak.py options] - the soak (issue 27): a 7-rank
# `mpirun moonlet serve` (two store shards, --replicas 2, a 1 MiB DRAM arena
# each so blocks are evicted all along) under a mixed load of streamed and
# whole completions and chats with shared prefixes, with a kill -9 of a
# prefill, a store shard and a decode rank in turn, bounded to M minutes
# (default 3). Prints JSON lines (RSS samples per rank, kills) and a summary:
# completed, failed with their reasons, lost (no answer and no error by the
# deadline), RSS per rank. Exits 1 when a request was lost. soak.py has the
# details; CTest runs it for half a minute (test_soak, label faults).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
MOONLET=$ROOT/build/launch/moonlet
MODEL=$ROOT/examples/models/stories260K/stories260K.gguf
ARGS=()
while [ $# -gt 0 ]; do
    case $1 in
    --moonlet) MOONLET=$2; shift 2 ;;
    --model) MODEL=$2; shift 2 ;;
    *) ARGS+=("$1"); shift ;;
    esac
done
exec "${PYTHON3:-python3}" "$HERE/soak.py" --moonlet "$MOONLET" --model "$MODEL" "${ARGS[@]}"
