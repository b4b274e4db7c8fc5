"""tests/e2e/batch/test_slurm.py SRC MOONLET MODEL WORKDIR - the Slurm scripts on a
one-machine Slurm (tests/scripts/slurm_ci.sh; slurmctld and slurmd installed by
MOON_SLURM_DEPS=1 launch/install_deps.sh): `sbatch --wait
launch/slurm/batch.sbatch` on a 50-prompt file, every answer checked (greedy
completions equal `moonlet generate`), in one task and with 4 tasks under
srun --mpi=pmix and under mpirun; a batch job requeued midway resumes with
every line exactly once; launch/slurm/serve.sbatch writes its endpoint,
answers curl, logs its start to its first token served, and scancel stops it
cleanly. Skipped, with a message, only when Slurm cannot be installed or
started."""
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import batch_check as bc  # noqa: E402

SRC, MOONLET, MODEL, WORK = sys.argv[1:5]
SLURM_DIR = os.path.join(WORK, "slurm")
os.makedirs(WORK, exist_ok=True)
ENV = dict(os.environ, MOONLET=MOONLET, MOON_MODEL=MODEL,
           OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_btl="self,vader", OMPI_MCA_oob_tcp_if_include="lo",
           OMPI_MCA_rmaps_base_oversubscribe="1", UCX_NET_DEVICES="lo")


def skip(why):
    print("skipped: %s" % why)
    sys.exit(0)


def path(name):
    return os.path.join(WORK, name)


def start_slurm():
    if shutil.which("slurmctld") is None or shutil.which("slurmd") is None:
        r = subprocess.run([os.path.join(SRC, "launch/install_deps.sh")],
                           env=dict(os.environ, MOON_SLURM_DEPS="1"), capture_output=True,
                           text=True, timeout=600)
        if r.returncode != 0 or shutil.which("slurmctld") is None:
            skip("slurm cannot be installed (launch/install_deps.sh with MOON_SLURM_DEPS=1: "
                 "%s)" % (r.stderr.strip().splitlines() or ["no output"])[-1])
    if os.geteuid() != 0:
        skip("the one-machine slurm runs its daemons as root")
    r = subprocess.run([os.path.join(SRC, "tests/scripts/slurm_ci.sh"), "start", SLURM_DIR],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        skip("slurm did not start: %s" % r.stderr.strip())
    ENV["SLURM_CONF"] = os.path.join(SLURM_DIR, "slurm.conf")


def stop_slurm():
    subprocess.run([os.path.join(SRC, "tests/scripts/slurm_ci.sh"), "stop", SLURM_DIR],
                   timeout=60)


def sbatch(script, *args, script_args=(), env=None, wait=True, timeout=600):
    cmd = ["sbatch", "--parsable", "--chdir", WORK] + (["--wait"] if wait else []) + list(args)
    cmd += [os.path.join(SRC, "launch/slurm", script)] + list(script_args)
    r = subprocess.run(cmd, env=env or ENV, capture_output=True, text=True, timeout=timeout)
    job = r.stdout.strip().split(";")[0]
    if r.returncode != 0:
        sys.stderr.write("%s: exit %d\n%s" % (" ".join(cmd), r.returncode, r.stderr))
    return r.returncode, job


def job_state(job):
    r = subprocess.run(["scontrol", "show", "job", job], env=ENV, capture_output=True, text=True)
    for tok in r.stdout.split():
        if tok.startswith("JobState="):
            return tok[len("JobState="):]
    return "GONE"


def wait_state(job, states, deadline_s):
    t0 = time.time()
    while True:
        s = job_state(job)
        if s in states:
            return s
        assert time.time() - t0 < deadline_s, "job %s still %s after %d s" % (job, s, deadline_s)
        time.sleep(0.5)


def log_of(name):
    try:
        with open(path(name)) as f:
            return f.read()
    except FileNotFoundError:
        return "(no log %s)" % name


def batch_env(inp, out):
    return dict(ENV, MOON_BATCH_INPUT=inp, MOON_BATCH_OUTPUT=out)


def test_batch_job(lines, tasks, launcher):
    inp, out = path("fifty.jsonl"), path("fifty-%d-%s.out.jsonl" % (tasks, launcher))
    if os.path.exists(out):
        os.remove(out)
    env = dict(batch_env(inp, out), MOON_LAUNCHER=launcher)
    log = "batch-%d-%s.log" % (tasks, launcher)
    rc, job = sbatch("batch.sbatch", "-n", str(tasks), "--cpus-per-task", "1", "-o", path(log),
                     script_args=("--max-inflight", "8"), env=env)
    assert rc == 0, "batch job %s failed:\n%s" % (job, log_of(log))
    by_line = bc.check_output(out, 50)
    n = bc.check_against_generate(MOONLET, MODEL, lines, by_line, limit=10)
    for k in by_line:
        assert bc.text_of(by_line[k])
    print("sbatch --wait batch.sbatch, %d task(s) (%s): ok, 50 answers, %d equal moonlet generate"
          % (tasks, launcher, n))


def test_requeue():
    lines = bc.request_lines(150, max_tokens=64)
    inp, out = path("requeue.jsonl"), path("requeue.out.jsonl")
    bc.write_input(inp, lines)
    if os.path.exists(out):
        os.remove(out)
    rc, job = sbatch("batch.sbatch", "-o", path("requeue.log"),
                     script_args=("--max-inflight", "2"), env=batch_env(inp, out), wait=False)
    assert rc == 0, "sbatch failed"
    t0 = time.time()
    while True:
        n = open(out).read().count("\n") if os.path.exists(out) else 0
        if n >= 10:
            break
        assert job_state(job) in ("PENDING", "RUNNING"), log_of("requeue.log")
        assert time.time() - t0 < 180, "no 10 answers in 180 s"
        time.sleep(0.1)
    r = subprocess.run(["scontrol", "requeue", job], env=ENV, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    n_first = open(out).read().count("\n")
    # a requeued job waits out Slurm's requeue delay (about 2 min): start it now
    wait_state(job, ("PENDING",), 120)
    subprocess.run(["scontrol", "update", "JobId=" + job, "StartTime=now"], env=ENV,
                   capture_output=True, timeout=30)
    state = wait_state(job, ("COMPLETED", "FAILED", "CANCELLED", "GONE"), 420)
    log = log_of("requeue.log")
    assert state == "COMPLETED", "requeued job %s ended %s:\n%s" % (job, state, log)
    assert "restart 1" in log, log
    bc.check_output(out, 150)
    assert n_first < 150
    print("requeue: ok (%d answered before the requeue, 150 after, each once)" % n_first)


def test_serve_job():
    ep = path("serve.endpoint")
    if os.path.exists(ep):
        os.remove(ep)
    env = dict(ENV, MOON_ENDPOINT_FILE=ep, MOON_GATEWAY_HOST="127.0.0.1")
    t_submit = time.time()
    rc, job = sbatch("serve.sbatch", "-o", path("serve.log"), env=env, wait=False)
    assert rc == 0
    t0 = time.time()
    while not (os.path.exists(ep) and open(ep).read().strip()):
        assert job_state(job) in ("PENDING", "RUNNING"), log_of("serve.log")
        assert time.time() - t0 < 180, "no endpoint in 180 s"
        time.sleep(0.2)
    host_port = open(ep).read().strip()
    assert host_port.startswith("localhost:"), host_port
    t0 = time.time()
    while "endpoint " + host_port not in log_of("serve.log"):
        assert time.time() - t0 < 30, "no endpoint line in the log:\n" + log_of("serve.log")
        time.sleep(0.2)
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0})
    out = subprocess.run(["curl", "-sf", "-H", "Content-Type: application/json", "-d", body,
                          "http://%s/v1/completions" % host_port], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    ans = json.loads(out.stdout)
    assert ans["choices"][0]["text"] and ans["usage"]["completion_tokens"] == 8, ans
    # the job reports its start to its first token served, once, in its log
    t0 = time.time()
    while "first token served" not in log_of("serve.log"):
        assert time.time() - t0 < 30, "no first-token line in the log:\n" + log_of("serve.log")
        time.sleep(0.2)
    took = [float(l.split("first token served ")[1].split(" s ")[0])
            for l in log_of("serve.log").splitlines() if "first token served" in l]
    assert len(took) == 1 and 0 < took[0] < time.time() - t_submit, took
    subprocess.run(["scancel", job], env=ENV, check=True)
    wait_state(job, ("CANCELLED", "COMPLETED", "GONE"), 120)
    t0 = time.time()
    while "exited with status" not in log_of("serve.log"):
        assert time.time() - t0 < 60, log_of("serve.log")
        time.sleep(0.2)
    log = log_of("serve.log")
    assert "moonlet serve exited with status 0" in log, log
    assert not os.path.exists(ep), "the endpoint file outlived the job"
    print("serve.sbatch: ok (endpoint %s, curl answered, scancel: exit 0)" % host_port)


start_slurm()
try:
    lines = bc.request_lines(50)
    bc.write_input(path("fifty.jsonl"), lines)
    test_batch_job(lines, 1, "srun")
    test_batch_job(lines, 4, "srun")
    test_batch_job(lines, 4, "mpirun")
    test_serve_job()
    test_requeue()
finally:
    stop_slurm()
print("test_slurm: all ok")
