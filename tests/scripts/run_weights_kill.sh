#!/usr/bin/env bash
# tests/scripts/run_weights_kill.sh MPIEXEC BINARY [ARGS...] - runs
# test_weights_kill (-np 6 under orte_enable_recovery: one rank kills itself
# midway through a weight push) and passes when rank 0 prints
# "weights-kill result: ok". mpirun's own exit status reflects the killed
# rank, so it is not used. Run by CTest (labels weights, faults).
set -u
mpiexec=${1:?usage: run_weights_kill.sh MPIEXEC BINARY [ARGS...]}
bin=${2:?binary}
shift 2
out=$("$mpiexec" -np 6 --mca orte_enable_recovery 1 "$bin" "$@" </dev/null 2>&1)
echo "$out"
echo "$out" | grep -q "weights-kill result: ok"
