#!/usr/bin/env bash
# benchmarks/suites/gateway.sh - the HTTP gateway against its anchor, the
# client API, in the same process and run (bench_gateway alternates them):
# TTFT of one streamed request at a time (ratio = HTTP p50 - API p50, ms:
# target <= 1) and requests/s at saturation (16 in flight; ratio = HTTP /
# API: target >= 0.9), stories260K. SMOKE=1: tiny counts.
set -euo pipefail
B=${BENCH_BIN:?}/bench_gateway
M=examples/models/stories260K/stories260K.gguf
if [ "${SMOKE:-0}" = 1 ]; then
    MOON_LOG_LEVEL=error "$B" --model="$M" --n=10 --rounds=1 --depth=4
    exit 0
fi
MOON_LOG_LEVEL=error "$B" --model="$M" --n="${N:-300}" --rounds="${ROUNDS:-3}" --depth="${DEPTH:-16}"
