#!/usr/bin/env bash
# tests/scripts/run_serve_pause.sh MOONLET MODEL [PAUSE_S] [RANKS] - a serving
# cluster survives a paused rank (issue 27). Starts `mpirun -np 4 moonlet
# serve` (rank 0 gateway and conductor, then store, prefill, decode), and for
# each rank of RANKS (default "3 2 1 0") in turn: kill -STOP for PAUSE_S
# seconds (default 3, past the 2 s peer timeout) with a completion sent
# during the pause, then kill -CONT. Passes when every completion (the one
# sent during each pause, and two after each) answers 200 with text, and no
# rank was declared lost. Run beside stress-ng by run_contended.sh in CTest.
# MPIEXEC: the launcher (default mpirun).
set -u
M=$1; MODEL=$2; PAUSE=${3:-3}; RANKS=${4:-"3 2 1 0"}
PORT=${PORT:-$((18000 + $$ % 2000))}
URL=http://127.0.0.1:$PORT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
export OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_rmaps_base_oversubscribe=1 UCX_NET_DEVICES=lo
LOG=$(mktemp)
OUT=$(mktemp -d)
"${MPIEXEC:-mpirun}" -np 4 --mca orte_enable_recovery 1 "$M" serve --model "$MODEL" --port "$PORT" \
    </dev/null >"$LOG" 2>&1 &
SERVER=$!
cleanup() {
    for p in $(pgrep -P "$SERVER" 2>/dev/null); do kill -CONT "$p" 2>/dev/null; done
    kill -TERM "$SERVER" 2>/dev/null
    wait "$SERVER" 2>/dev/null
    rm -rf "$LOG" "$OUT"
}
trap cleanup EXIT
for _ in $(seq 240); do
    curl -sf "$URL/health" >/dev/null && break
    kill -0 $SERVER 2>/dev/null || { cat "$LOG"; exit 1; }
    sleep 0.5
done
curl -sf "$URL/health" >/dev/null || { echo "the cluster did not come up"; cat "$LOG"; exit 1; }
# the ranks' pids in rank order (OMPI_COMM_WORLD_RANK in their environment)
declare -A pid_of
for p in $(pgrep -P "$SERVER"); do
    r=$(tr '\0' '\n' <"/proc/$p/environ" | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
    [ -n "$r" ] && pid_of[$r]=$p
done
[ ${#pid_of[@]} -eq 4 ] || { echo "found ${#pid_of[@]} rank pids, not 4"; exit 1; }
n=0 fail=0
complete() { # complete NAME: one greedy completion, 30 s at most; its status and body
    curl -s -m 30 -o "$OUT/$1.body" -w "%{http_code} %{time_total}" "$URL/v1/completions" \
        -H 'content-type: application/json' \
        -d '{"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}' >"$OUT/$1.code"
}
check() { # check NAME WHAT
    local code
    code=$(cut -d' ' -f1 "$OUT/$1.code" 2>/dev/null)
    n=$((n + 1))
    if [ "$code" = 200 ] && grep -q '"text"' "$OUT/$1.body"; then
        echo "ok: $2 ($(cut -d' ' -f2 "$OUT/$1.code") s)"
    else
        echo "FAILED: $2: HTTP '${code:-none}' $(head -c 200 "$OUT/$1.body" 2>/dev/null)"
        fail=$((fail + 1))
    fi
}
complete before && check before "a completion before any pause"
for r in $RANKS; do
    kill -STOP "${pid_of[$r]}"
    sleep 0.5
    complete "during$r" &
    cur=$!
    sleep "$(awk -v p="$PAUSE" 'BEGIN { print p - 0.5 }')"
    kill -CONT "${pid_of[$r]}"
    wait $cur
    check "during$r" "a completion sent while rank $r was stopped ${PAUSE} s"
    for i in 1 2; do
        complete "after$r.$i" && check "after$r.$i" "completion $i after rank $r ran again"
    done
done
if grep -E "rank [0-9]+ lost|declared lost" "$LOG"; then
    echo "FAILED: a rank was declared lost (log lines above)"
    fail=$((fail + 1))
fi
grep -E "suspected|heard from again" "$LOG" | sed 's/^/log: /' | head -20
echo "serve pause: $((n - fail)) of $n checks passed"
[ $fail -eq 0 ]
