#!/usr/bin/env bash
# benchmarks/suites/job_start.sh - a serving job's time from its start to
# its first token, against its anchor in the same run: the model's load time
# (the wall time of `moonlet generate --max-tokens 1` on the same file: one
# process loading the model and computing a token) + 10 s (target: below
# it). Per model (stories260K and the generated 110M-shaped Llama, F32) and
# launcher:
#   process  `moonlet serve` alone (the whole cluster in one process)
#   mpirun   `mpirun -np 4 moonlet serve` (conductor, store, prefill, decode)
#   slurm    `sbatch -n 4 launch/slurm/serve.sbatch` (MOON_LAUNCHER=mpirun) on
#            a one-machine Slurm (tests/scripts/slurm_ci.sh; skipped with a
#            line when it cannot start)
# the client polls /health every 20 ms from the launch, sends one streamed
# request the moment it answers 200, and stops the clock at the first token.
# The job's start is the launch (the job script's start under Slurm, which
# the queue wait comes before); the server's own figure (its log line and
# moonlet:job_start_to_first_token_seconds) is reported beside the client's.
# Rounds alternate anchor and measurement. Each round starts the job twice
# over a new calibration cache (--calibration-cache): first empty (the
# engines are timed, as on a first start), then holding the fits the first
# start filed (a requeued or restarted job). One JSON line per model,
# launcher and calibration ("timed" or "cached"): the medians, min and max of
# the client's figure, the anchor's median and ratio = value / anchor.
# ROUNDS (3) for stories260K, ROUNDS_110M (1) for the 110M model. SMOKE=1:
# stories260K, one round.
set -euo pipefail
BUILD_DIR=${BUILD_DIR:-build}
MOONLET=$BUILD_DIR/launch/moonlet
MD="$BUILD_DIR/bench-models"
ROUNDS=${ROUNDS:-3}
ROUNDS_110M=${ROUNDS_110M:-1}
LAUNCHERS=${LAUNCHERS:-process mpirun slurm}
mkdir -p "$MD"
# shellcheck source=bench_models.inc
source "$(dirname "$0")/bench_models.inc"
MODELS="examples/models/stories260K/stories260K.gguf:$ROUNDS"
if [ "${SMOKE:-0}" = 1 ]; then
    MODELS="examples/models/stories260K/stories260K.gguf:1"
else
    gen_llama110m >/dev/null
    MODELS="$MODELS $MD/llama110m-f32.gguf:$ROUNDS_110M"
fi
T=$(mktemp -d)
SLURM=
cleanup() {
    [ -z "$SLURM" ] || bash tests/scripts/slurm_ci.sh stop "$T/slurm" || true
    rm -rf "$T"
}
trap cleanup EXIT
if [[ " $LAUNCHERS " == *" slurm "* ]]; then
    if [ "$(id -u)" != 0 ] || ! command -v slurmctld >/dev/null || ! command -v sbatch >/dev/null; then
        echo "job_start.sh: slurm skipped: no slurmctld/sbatch, or not root" \
            "(MOON_SLURM_DEPS=1 launch/install_deps.sh)" >&2
        LAUNCHERS=${LAUNCHERS/slurm/}
    elif conf=$(bash tests/scripts/slurm_ci.sh start "$T/slurm" 2>"$T/slurm.err"); then
        SLURM=1
        eval "$conf"
        export SLURM_CONF
    else
        echo "job_start.sh: slurm skipped: it did not start ($(tail -1 "$T/slurm.err"))" >&2
        LAUNCHERS=${LAUNCHERS/slurm/}
    fi
fi
python3 - "$MOONLET" "$T" "$LAUNCHERS" $MODELS <<'PY'
import json, os, signal, statistics, subprocess, sys, time, urllib.request
moonlet, tmp, launchers = sys.argv[1], sys.argv[2], sys.argv[3].split()
models = [m.rsplit(":", 1) for m in sys.argv[4:]]  # path:rounds
moonlet = os.path.abspath(moonlet)
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", MOON_LOG_LEVEL="warn")

def load_s(model):  # the anchor: one process loads the model and computes a token
    t0 = time.time()
    subprocess.run([moonlet, "generate", "--model", model, "--prompt", "Once upon a time",
                    "--max-tokens", "1"], check=True, capture_output=True, timeout=600)
    return time.time() - t0

def first_token(url, t0, deadline):  # polls /health, then one streamed request
    while True:
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if time.time() > deadline:
            sys.exit("job_start.sh: /health never answered 200")
        time.sleep(0.02)
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 4, "stream": True}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        for line in r:
            if line.startswith(b"data: {"):
                t = time.time() - t0
                break
        for _ in r:
            pass
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        server = [float(l.split()[-1]) for l in r.read().decode().splitlines()
                  if l.startswith("moonlet:job_start_to_first_token_seconds")]
    return t, server[0] if server else None

def wait_for(pred, deadline, what):
    while not pred():
        if time.time() > deadline:
            sys.exit("job_start.sh: %s" % what)
        time.sleep(0.02)

def text(path):
    try:
        return open(path).read()
    except OSError:
        return ""

def url_of(log):
    for l in text(log).splitlines():
        if "serving on http://" in l:
            return l.split("serving on ")[1].split("/v1")[0]
    return None

def job(model, launcher, cache):  # (client s, server s)
    log = os.path.join(tmp, "serve.log")
    t0 = time.time()
    deadline = t0 + 600
    e = dict(env, MOON_SERVE_START_TIME="%.6f" % t0, MOON_CALIBRATION_CACHE=cache)
    if launcher == "slurm":
        ep = os.path.join(tmp, "serve.endpoint")
        for p in (ep, log):
            if os.path.exists(p):
                os.remove(p)
        e.update(MOON_MODEL=os.path.abspath(model), MOONLET=moonlet, MOON_ENDPOINT_FILE=ep,
                 MOON_GATEWAY_HOST="127.0.0.1", MOON_LAUNCHER="mpirun")
        del e["MOON_SERVE_START_TIME"]  # the job script's own start
        r = subprocess.run(["sbatch", "--parsable", "-n", "4", "--cpus-per-task", "1",
                            "-o", log, "launch/slurm/serve.sbatch"], env=e, check=True,
                           capture_output=True, text=True)
        jid = r.stdout.strip().split(";")[0]
        try:
            wait_for(lambda: text(ep).strip(), deadline, "no endpoint file")
            res = first_token("http://" + text(ep).strip(), t0, deadline)
        finally:
            subprocess.run(["scancel", jid], env=e)
            wait_for(lambda: "exited with status" in text(log), time.time() + 120,
                     "the serving job did not end")
        return res
    cmd = [moonlet, "serve", "--model", model, "--port", "0"]
    if launcher == "mpirun":
        cmd = ["mpirun", "-np", "4"] + cmd
    with open(log, "w") as f:
        p = subprocess.Popen(cmd, stdout=f, stderr=f, stdin=subprocess.DEVNULL, env=e)
    try:
        wait_for(lambda: url_of(log) or p.poll() is not None, deadline, "no url")
        if p.poll() is not None:
            sys.exit("job_start.sh: moonlet serve ended:\n" + text(log)[-2000:])
        return first_token(url_of(log), t0, deadline)
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=120)

load1 = lambda: round(os.getloadavg()[0], 2)
for model, rounds in models:
    rounds = int(rounds)
    name = os.path.basename(model).rsplit(".", 1)[0]
    for launcher in launchers:
        a = []
        runs = {"timed": ([], []), "cached": ([], [])}  # client s, server s
        for r in range(rounds):
            if r % 2 == 0:
                a.append(load_s(model))
            cache = os.path.join(tmp, "calibration-%s-%d" % (launcher, r))
            for kind in ("timed", "cached"):  # empty cache, then the one just filed
                c, srv = job(model, launcher, cache)
                runs[kind][0].append(c)
                runs[kind][1].append(srv)
            if r % 2 == 1:
                a.append(load_s(model))
        anchor = statistics.median(a) + 10.0
        for kind, (v, s) in runs.items():
            value = statistics.median(v)
            print(json.dumps({
                "bench": "job_start_to_first_token", "model": name, "launcher": launcher,
                "ranks": 1 if launcher == "process" else 4, "calibration": kind,
                "metric": "seconds", "value": round(value, 3), "min": round(min(v), 3),
                "max": round(max(v), 3),
                "server_reported": [round(x, 3) if x is not None else None for x in s],
                "anchor_load_plus_10s": round(anchor, 3),
                "load_s_median": round(statistics.median(a), 3),
                "ratio": round(value / anchor, 3), "rounds": rounds, "target": "<= anchor",
                "loadavg_1m": load1()}), flush=True)
PY
