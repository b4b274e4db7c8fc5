#!/usr/bin/env bash
# tests/mpi/run_rank_loss.sh MPIEXEC BINARY [mpirun args...] - runs the rank-loss
# test (-np 3, one rank SIGKILLs itself: MOON_TEST_VICTIM, default the last)
# and passes when both survivors print "rank-loss result: rank R ok". mpirun's own exit status reflects the killed
# rank, so it is not used.
set -u
mpiexec=$1; bin=$2; shift 2
out=$("$mpiexec" -np 3 --mca orte_enable_recovery 1 "$@" "$bin" </dev/null 2>&1)
echo "$out"
ok=$(echo "$out" | grep -Ec "rank-loss result: rank [0-9]+ ok")
[ "$ok" -eq 2 ]
