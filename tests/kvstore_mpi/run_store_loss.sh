#!/usr/bin/env bash
# tests/kvstore_mpi/run_store_loss.sh MPIEXEC BINARY - runs the store rank-loss
# test (-np 3, the last rank SIGKILLs itself holding a reservation and a lease)
# and passes when both survivors print "store-loss result: rank R ok". mpirun's
# own exit status reflects the killed rank, so it is not used.
set -u
mpiexec=$1; bin=$2; shift 2
out=$("$mpiexec" -np 3 --mca orte_enable_recovery 1 "$@" "$bin" loss </dev/null 2>&1)
echo "$out"
ok=$(echo "$out" | grep -c "store-loss result: rank [01] ok")
[ "$ok" -eq 2 ]
