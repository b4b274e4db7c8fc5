#!/usr/bin/env bash
# tests/scripts/run_rank_kill.sh RESULT MPIEXEC BINARY [ARG] - runs a rank-loss
# test (-np 3 under orte_enable_recovery, one rank SIGKILLs itself) with ARG
# and passes when both survivors print "RESULT: rank R ok". mpirun's own exit
# status reflects the killed rank, so it is not used.
set -u
result=$1; mpiexec=$2; bin=$3; arg=${4:-}
out=$("$mpiexec" -np 3 --mca orte_enable_recovery 1 "$bin" $arg </dev/null 2>&1)
echo "$out"
[ "$(echo "$out" | grep -Ec "$result: rank [0-9]+ ok")" -eq 2 ]
