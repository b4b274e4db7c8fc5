#!/usr/bin/env bash
# tests/scripts/run_contended.sh CMD... - runs CMD (a multi-rank test under
# mpirun) beside `stress-ng --cpu 2` (two busy loops, on a 2-core machine
# every core), as a shared node would. Without stress-ng it says so and runs
# CMD alone (launch/install_deps.sh installs it). The exit status is CMD's.
set -u
stress=
if command -v stress-ng >/dev/null 2>&1; then
    stress-ng --cpu 2 --timeout 120s --quiet &
    stress=$!
    echo "run_contended: CPU contention: stress-ng --cpu 2 (pid $stress)"
else
    echo "run_contended: stress-ng is not installed: no CPU contention (launch/install_deps.sh)"
fi
"$@"
rc=$?
if [ -n "$stress" ]; then
    kill -TERM "$stress" 2>/dev/null
    wait "$stress" 2>/dev/null
fi
exit $rc
