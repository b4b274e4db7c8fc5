#!/usr/bin/env bash
# tests/scripts/run_rank_kill.sh RESULT MPIEXEC BINARY [ARG] - runs a rank-loss
# test (-np 3 under orte_enable_recovery, one rank SIGKILLs itself) with ARG
# and passes when both survivors print "RESULT: rank R ok". mpirun's own exit
# status reflects the killed rank, so it is not used.
#
# One announced rerun, only when a survivor declared a live rank lost (the
# runtime logs "was declared lost but its process ... is alive"): over shared
# memory, UCX's receive FIFO is shared by every sender of the host and read in
# order, so a rank killed between taking a slot and filling it leaves a
# survivor deaf to the whole host. That is a limit of UCX's shm transport (the
# closing note of issue 3 says what would lift it), not of the failure handling
# under test; any other failure fails at once.
set -u
result=$1; mpiexec=$2; bin=$3; arg=${4:-}
attempt() { "$mpiexec" -np 3 --mca orte_enable_recovery 1 "$bin" $arg </dev/null 2>&1; }
passed() { [ "$(echo "$1" | grep -Ec "$result: rank [0-9]+ ok")" -eq 2 ]; }
out=$(attempt)
echo "$out"
if ! passed "$out" && echo "$out" | grep -q "was declared lost but its process"; then
    echo "run_rank_kill.sh: a survivor went deaf to a live rank (the killed rank left its UCX" \
         "shared-memory receive FIFO stuck): running once more"
    out=$(attempt)
    echo "$out"
fi
passed "$out"
