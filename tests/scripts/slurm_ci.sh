#!/usr/bin/env bash
# slurm_ci.sh - a one-machine Slurm (slurmctld + slurmd, no systemd, no munge)
# for the tests labelled slurm.
#   slurm_ci.sh start DIR   starts both daemons on free ports, waits until the
#                           node is idle; prints "export SLURM_CONF=DIR/slurm.conf"
#   slurm_ci.sh stop DIR    stops exactly the daemons it started
# Exit status 1 when Slurm does not come up (logs in DIR). Needs slurmctld and
# slurmd (MOON_SLURM_DEPS=1 launch/install_deps.sh) and root.
set -euo pipefail
cmd=${1:?usage: slurm_ci.sh start|stop DIR}
DIR=${2:?usage: slurm_ci.sh start|stop DIR}
HERE=$(cd "$(dirname "$0")" && pwd)

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

case $cmd in
start)
    rm -rf "$DIR"
    mkdir -p "$DIR/state" "$DIR/spool"
    cpus=$(nproc)
    [ "$cpus" -ge 4 ] || cpus=4
    sed -e "s#@DIR@#$DIR#g" -e "s#@CTLD_PORT@#$(free_port)#" -e "s#@SLURMD_PORT@#$(free_port)#" \
        -e "s#@CPUS@#$cpus#g" "$HERE/slurm.conf.in" >"$DIR/slurm.conf"
    export SLURM_CONF="$DIR/slurm.conf"
    slurmctld -D -i -f "$SLURM_CONF" >"$DIR/slurmctld.out" 2>&1 &
    echo $! >"$DIR/slurmctld.mypid"
    slurmd -D -N localhost -f "$SLURM_CONF" >"$DIR/slurmd.out" 2>&1 &
    echo $! >"$DIR/slurmd.mypid"
    for _ in $(seq 300); do
        if [ "$(sinfo -h -N -o %T 2>/dev/null)" = idle ]; then
            echo "export SLURM_CONF=$SLURM_CONF"
            exit 0
        fi
        sleep 0.1
    done
    echo "slurm_ci: slurm did not come up; logs in $DIR" >&2
    exit 1
    ;;
stop)
    for f in slurmd slurmctld; do
        [ -f "$DIR/$f.mypid" ] || continue
        pid=$(cat "$DIR/$f.mypid")
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        rm -f "$DIR/$f.mypid"
    done
    ;;
esac
