#!/usr/bin/env bash
# benchmarks/suites/weights.sh - weight pushes (bench_weights.c): a full push
# of a checkpoint of 64 MiB, 256 MiB and 1 GiB to 4 instance ranks (mpirun -np
# 5) against MPI_Bcast of the same bytes to the same ranks, rounds
# alternating; per size also a delta push (1 % of the chunks changed) against
# the full push of its round, the TTFT of requests streaming during pushes
# against quiet windows between them, and the instances' memory against the
# checkpoint's size (bench_weights.c says how), then ucx_perftest's put
# bandwidth beside the per-link rate, and the GPU path's staging. Env:
# BENCH_BIN (set by benchmarks/run), SMOKE=1 (8 MiB, 2 rounds), WEIGHTS_MIB
# (comma list), WEIGHTS_ROUNDS, WEIGHTS_CHUNK_MIB, WEIGHTS_GPU_MIB (1024).
set -euo pipefail
BENCH_BIN=${BENCH_BIN:-build/benchmarks}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
export OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_rmaps_base_oversubscribe=1 UCX_NET_DEVICES=lo
if [ "${SMOKE:-0}" = 1 ]; then
    mib=8; rounds=2
else
    mib=${WEIGHTS_MIB:-64,256,1024}; rounds=${WEIGHTS_ROUNDS:-5}
fi
for m in ${mib//,/ }; do
    mpirun -np 5 "$BENCH_BIN/bench_weights" --mib="$m" --rounds="$rounds" \
        --chunk_mib="${WEIGHTS_CHUNK_MIB:-4}" </dev/null
done
# the per-link anchor: bench_weights' stage_gbps is each chain link's rate
# (every link carries the whole checkpoint); beside it, ucx_perftest's
# ucp_put_bw between two processes here with the chunk's size (median of 3)
# shellcheck source=ucx_perftest.inc
source "$(dirname "$0")/ucx_perftest.inc"
if command -v ucx_perftest >/dev/null; then
    size=$(( ${WEIGHTS_CHUNK_MIB:-4} << 20 )) n=256
    [ "${SMOKE:-0}" = 1 ] && n=16
    for rep in 1 2 3; do perf_pair 24100 "$size" "$n"; done | sort -n | sed -n 2p |
        awk -v s="$size" '{ printf "{\"suite\": \"weights\", \"bench\": \"link\", \"impl\": " \
            "\"ucx_perftest\", \"test\": \"ucp_put_bw\", \"size_bytes\": %d, \"gbps\": %.3f}\n", s, $1 * 1.048576e-3 }'
else
    echo '{"suite": "weights", "bench": "link", "impl": "ucx_perftest", "skipped": "ucx_perftest not installed"}'
fi
# the GPU path on one device (a skip line without CUDA or a device)
"$BENCH_BIN/bench_gpu_stage" --mib="${WEIGHTS_GPU_MIB:-1024}" --rounds="${WEIGHTS_ROUNDS:-5}"
