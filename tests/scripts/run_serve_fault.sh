#!/usr/bin/env bash
# tests/scripts/run_serve_fault.sh FAULT MPIEXEC MOONLET MODEL [PYTHON3] - one
# scripted fault against `moonlet serve` under mpirun (-np 6: gateway and
# conductor on rank 0, store shard on 1, prefill on 2-3, decode on 4-5, with
# orte_enable_recovery as the README deploys it) under a load of N
# concurrent streamed greedy completions, every outcome checked against the
# same requests answered before the fault:
#   kill-prefill / kill-decode: kill -9 of rank 2 / rank 4 mid-stream (MIX=1:
#     with echo-with-logprobs and embeddings requests among them; and
#     kill-colocated: -np 3 with two colocated instances, rank 1): every
#     request completes with the text it had without the fault, or fails
#     with a reason; none is lost (no end and no error); the gauges of
#     requests in flight and running return to 0; /health says which
#     instance is down (200: its role has another); new requests are served.
#   kill-store: -np 7 with two store shards (--replicas 2), kill -9 of store
#     shard 0 (rank 1): reads fail over to the replica; checked as above.
#   kill-rank0: kill -9 of rank 0 (gateway and conductor, the single entry
#     point): each request in flight fails with a reason (its connection is
#     reset; none hangs), and every other rank exits (they stop once rank 0
#     is lost), so a supervisor can start the deployment again.
#   stop-prefill / stop-decode / stop-store / stop-rank0: kill -STOP of
#     that rank (store: -np 7 as kill-store) for 3 s, past the 2 s peer
#     timeout, then kill -CONT: every request completes with its text, none
#     fails, no rank is declared lost, /health names no instance down.
#   term-rank0 / term-decode / term-mpirun: SIGTERM to rank 0 alone, to a
#     decode rank alone (rank 4) or to mpirun mid-stream: a new request gets
#     503 (mpirun: once it signals the ranks), every request in flight
#     finishes (drained), and every rank exits within the deadline.
# Prints one line "fault-result: FAULT requests=N in_flight_at_fault=..
# ok=.. failed=.. lost=.. wrong=.. recover_s=.." (requests: all of the run;
# in flight: those sent and not yet ended when the signal went) and passes when lost = wrong = 0 and the checks
# hold. Run by CTest (label faults).
set -u
FAULT=${1:?usage: run_serve_fault.sh FAULT MPIEXEC MOONLET MODEL [PYTHON3]}
MPIEXEC=$2
MOONLET=$3
MODEL=$4
PY=${5:-python3}
HERE=$(cd "$(dirname "$0")" && pwd)
# kills: clients send one request after another (some land on the lost
# instance before its loss is known); SIGTERM: one long stream each
case $FAULT in
kill-prefill | stop-prefill) N=${N:-16} MAXTOK=${MAXTOK:-96} ROUNDS=${ROUNDS:-3} ;; # arrivals past the detection
kill-colocated) MAXTOK=${MAXTOK:-64} ROUNDS=${ROUNDS:-3} ;;
kill-* | stop-*) MAXTOK=${MAXTOK:-256} ROUNDS=${ROUNDS:-3} ;; # still streaming at the fault
*) MAXTOK=${MAXTOK:-256} ROUNDS=${ROUNDS:-1} ;;
esac
N=${N:-12}
DRAIN=10
# Open MPI 4's mpirun on SIGTERM: SIGCONT to the ranks, this long, SIGTERM,
# this long, SIGKILL; the ranks drain in the second window (README)
KILL_WAIT=$((DRAIN + 5))
T=$(mktemp -d)
MPI=
cleanup() {
    if [ -n "$MPI" ] && kill -0 "$MPI" 2>/dev/null; then
        # SIGTERM to the ranks, not to mpirun: idle, they drain at once and
        # exit, and mpirun with them; mpirun itself would hold the signal for
        # KILL_WAIT s (above), which this wait then spent in full each run
        local ranks
        ranks=$(rank_pids)
        kill -TERM $ranks 2>/dev/null
        for _ in $(seq 100); do kill -0 "$MPI" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$MPI" $ranks 2>/dev/null
    fi
    wait 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT
fail() {
    echo "FAIL ($FAULT): $*"
    echo "--- server log (tail):"
    tail -40 "$T/serve.log"
    exit 1
}
# rank R's pid (a child of mpirun carrying OMPI_COMM_WORLD_RANK=R)
rank_pid() {
    for p in $(pgrep -P "$MPI"); do
        if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1"; then
            echo "$p"
            return
        fi
    done
}
rank_pids() { [ -n "$MPI" ] && pgrep -P "$MPI"; }

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# kill-colocated: -np 3, two colocated instances (ranks 1-2), no store
# ranks: 0 gateway and conductor, then the store shards, 2 prefill, 2 decode
NP=6 ROLES="--prefill 2 --decode 2 --store 1" PREFILL=2 DECODE=4
case $FAULT in
kill-colocated) NP=3 ROLES="--colocated --prefill 1 --decode 1 --store 0" ;;
*-store) NP=7 ROLES="--prefill 2 --decode 2 --store 2 --replicas 2" PREFILL=3 DECODE=5 ;;
esac
LOAD_OPTS=
# MIX=1: echo with logprobs and embeddings among the requests (serve_load.py --mix)
MIX_OPTS=
[ "${MIX:-0}" = 1 ] && MIX_OPTS=--mix
# rank 0 lost: its connections are reset, which tells each client
[ "$FAULT" = kill-rank0 ] && LOAD_OPTS=--reset-is-error
# setsid: mpirun signals process groups; this script and its load are not ranks
MOON_LOG_LEVEL=warn setsid "$MPIEXEC" -np $NP --oversubscribe --mca orte_enable_recovery 1 \
    --mca odls_base_sigkill_timeout $KILL_WAIT \
    "$MOONLET" serve --model "$MODEL" $ROLES --port 0 \
    --drain-seconds $DRAIN --request-deadline 240 >"$T/serve.log" 2>&1 </dev/null &
MPI=$!
URL=
for _ in $(seq 1200); do
    kill -0 "$MPI" 2>/dev/null || fail "mpirun exited"
    URL=$(sed -n 's|.*serving on \(http://[^ ]*\)/v1.*|\1|p' "$T/serve.log" | head -1)
    [ -n "$URL" ] && break
    sleep 0.1
done
[ -n "$URL" ] || fail "the cluster never said where it serves"
health() { "$PY" -c "
import sys, urllib.request, urllib.error
try:
    r = urllib.request.urlopen(sys.argv[1] + '/health', timeout=5); print(r.status, r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
except Exception as e:
    print(0, e)" "$URL"; }
for _ in $(seq 600); do
    [ "$(health | cut -d' ' -f1)" = 200 ] && break
    sleep 0.1
done
[ "$(health | cut -d' ' -f1)" = 200 ] || fail "/health never said 200: $(health)"

# the answers without a fault
"$PY" "$HERE/serve_load.py" "$URL" "$N" "$MAXTOK" "$T/base.json" --rounds "$ROUNDS" $MIX_OPTS ||
    fail "baseline load failed"

# the same requests, with the fault once half of them stream
# the victim, found before the load starts so that the fault lands while
# requests stream: SIG to VICTIM (STOP: CONT 3 s later)
case $FAULT in
kill-prefill) VICTIM=$(rank_pid $PREFILL) SIG=KILL ;;
kill-decode) VICTIM=$(rank_pid $DECODE) SIG=KILL ;;
kill-store | kill-colocated) VICTIM=$(rank_pid 1) SIG=KILL ;;
kill-rank0) VICTIM=$(rank_pid 0) SIG=KILL ;;
stop-prefill) VICTIM=$(rank_pid $PREFILL) SIG=STOP ;;
stop-decode) VICTIM=$(rank_pid $DECODE) SIG=STOP ;;
stop-store) VICTIM=$(rank_pid 1) SIG=STOP ;;
stop-rank0) VICTIM=$(rank_pid 0) SIG=STOP ;;
term-rank0) VICTIM=$(rank_pid 0) SIG=TERM ;;
term-decode) VICTIM=$(rank_pid $DECODE) SIG=TERM ;;
term-mpirun) VICTIM=$MPI SIG=TERM ;;
*) fail "unknown fault $FAULT" ;;
esac
[ -n "$VICTIM" ] || fail "no pid for the victim of $FAULT"
"$PY" "$HERE/serve_load.py" "$URL" "$N" "$MAXTOK" "$T/run.json" --rounds "$ROUNDS" \
    --started "$T/started" $LOAD_OPTS $MIX_OPTS &
LOAD=$!
for _ in $(seq 600); do [ -e "$T/started" ] && break; sleep 0.05; done
[ -e "$T/started" ] || fail "the load never started streaming"
date +%s.%N >"$T/fault_at"
T0=$(cat "$T/fault_at")
kill -"$SIG" "$VICTIM"
if [ "$SIG" = STOP ]; then
    sleep 3
    kill -CONT "$VICTIM"
fi
echo "fault $FAULT: signalled pid $VICTIM"
if [ "$FAULT" = term-rank0 ] || [ "$FAULT" = term-decode ]; then
    sleep 0.5
    code=$(health | cut -d' ' -f1)
    [ "$code" = 503 ] || [ "$code" = 0 ] || fail "a new request while draining got $code, not 503"
fi
wait "$LOAD" || fail "the load client failed"
grep -E "is down|ran past|drain|suspect|heard from" "$T/serve.log" | cut -c1-220 | head -20

"$PY" - "$T/base.json" "$T/run.json" "$FAULT" "$T0" <<'PYEOF' || fail "outcomes: see above"
import json, sys
base = {r["i"]: r for r in json.load(open(sys.argv[1]))}
run = json.load(open(sys.argv[2]))
at = float(sys.argv[4])
streaming = sum(1 for r in run if r["t_start"] <= at < r["t_end"])
print("load from %+.2f s to %+.2f s of the fault" % (min(r["t_start"] for r in run) - at, max(r["t_end"] for r in run) - at))
ok = failed = lost = wrong = 0
bad_base = [i for i, b in base.items() if b["error"] is not None or not b["done"]]
if bad_base:  # the machine is too slow or the cluster lost ranks before the fault
    print("the run without the fault failed for requests", bad_base, [base[i]["error"] for i in bad_base])
    sys.exit(1)
for r in run:
    if r["lost"]:
        lost += 1
        print("lost:", r)
    elif r["error"] is not None and sys.argv[3].startswith("stop-"):
        wrong += 1  # a pause is no loss: nothing may fail
        print("failed under a pause:", r["i"], r["error"])
    elif r["error"] is not None:
        failed += 1
        print("failed with a reason:", r["i"], r["error"])
    elif r["text"] == base[r["i"]]["text"] and r["finish"] == base[r["i"]]["finish"]:
        ok += 1
    else:
        wrong += 1
        print("wrong text:", r["i"], repr(r["text"]), "expected", repr(base[r["i"]]["text"]))
gap = max(r["max_gap_s"] for r in run)
base_gap = max(r["max_gap_s"] for r in base.values())
print("fault-result: %s requests=%d in_flight_at_fault=%d ok=%d failed=%d lost=%d wrong=%d "
      "recover_s=%.2f (longest gap between events; without the fault %.2f)"
      % (sys.argv[3], len(run), streaming, ok, failed, lost, wrong, gap, base_gap))
# colocated instances batch prompt chunks with decode steps, and their greedy
# text already varies between two runs without a fault (pre-existing): there
# only the outcomes count
every_one_ended = ok + failed + wrong == len(run)
if sys.argv[3] == "kill-colocated":
    wrong = 0
sys.exit(0 if lost == 0 and wrong == 0 and every_one_ended else 1)
PYEOF

case $FAULT in
kill-rank0)
    # the other ranks stop once rank 0 is lost; mpirun then exits
    for _ in $(seq 300); do kill -0 "$MPI" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$MPI" 2>/dev/null && fail "ranks still run 30 s after rank 0 was lost"
    echo "every rank exited $(echo "$(date +%s.%N) - $T0" | bc) s after rank 0 was killed"
    MPI=
    ;;
stop-*)
    grep -E "rank [0-9]+ lost|declared lost|is down" "$T/serve.log" && fail "a paused rank was declared lost"
    "$PY" "$HERE/serve_load.py" "$URL" 4 16 "$T/after.json" || fail "load after the pause"
    "$PY" -c "
import json, sys
r = json.load(open(sys.argv[1]))
bad = [x for x in r if not x['done'] or x['error']]
print('after the pause:', len(r) - len(bad), 'of', len(r), 'served')
sys.exit(1 if bad else 0)" "$T/after.json" || fail "requests after the pause"
    h=$(health)
    echo "health: $h"
    [ "$(echo "$h" | cut -d' ' -f1)" = 200 ] || fail "/health is not 200 after the pause"
    echo "$h" | grep -q '"down":\[[0-9]' && fail "/health names an instance down after the pause"
    ;;
kill-*)
    # new requests are served, /health names the lost instance, gauges settle
    "$PY" "$HERE/serve_load.py" "$URL" 4 16 "$T/after.json" || fail "load after the fault"
    "$PY" - "$T/after.json" <<'PYEOF' || fail "requests after the fault"
import json, sys
r = json.load(open(sys.argv[1]))
bad = [x for x in r if not x["done"] or x["error"]]
print("after the fault:", len(r) - len(bad), "of", len(r), "served")
sys.exit(1 if bad else 0)
PYEOF
    h=$(health)
    echo "health: $h"
    [ "$(echo "$h" | cut -d' ' -f1)" = 200 ] || fail "/health is not 200 with one instance lost"
    echo "$h" | grep -q '"down":\[0\]' || fail "/health does not name the lost instance"
    for _ in $(seq 50); do
        m=$("$PY" -c "import urllib.request,sys; print(urllib.request.urlopen(sys.argv[1] + '/metrics', timeout=5).read().decode())" "$URL")
        inflight=$(echo "$m" | sed -n 's/^moonlet:num_requests_in_flight{[^}]*} \(.*\)/\1/p')
        running=$(echo "$m" | sed -n 's/^moonlet:num_requests_running{[^}]*} \(.*\)/\1/p')
        [ "${inflight%.*}" = 0 ] && [ "${running%.*}" = 0 ] && break
        sleep 0.2
    done
    echo "gauges: in_flight=$inflight running=$running"
    [ "${inflight%.*}" = 0 ] && [ "${running%.*}" = 0 ] || fail "gauges stuck"
    echo "$m" | grep -E '^moonlet:instances_alive|resumed'
    echo "$m" | grep -q 'finished_reason="resumed"' ||
        echo "note: no request was on the lost instance when its loss was known"
    ;;
term-*)
    # every rank exits within the drain deadline (plus the stop's own time:
    # STOP_SLACK, longer in sanitizer builds, where each rank's exit scans
    # its heap for leaks and MPI's finalize runs instrumented)
    LIMIT=$((DRAIN + ${STOP_SLACK:-10}))
    [ "$FAULT" = term-mpirun ] && LIMIT=$((2 * KILL_WAIT + 5))
    for _ in $(seq $((LIMIT * 10))); do kill -0 "$MPI" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$MPI" 2>/dev/null && fail "mpirun still runs $LIMIT s after the signal"
    T1=$(date +%s.%N)
    echo "every rank exited $(echo "$T1 - $T0" | bc) s after the signal"
    grep -q "drained after" "$T/serve.log" || fail "rank 0 did not drain"
    MPI=
    ;;
esac
echo "PASS ($FAULT)"
