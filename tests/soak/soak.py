#!/usr/bin/env python3
"""tests/soak/soak.py - the soak driver behind tests/soak/run.sh (which says
how to run it; its options are this file's argparse table).

Starts `mpirun moonlet serve` (rank 0 gateway and conductor, two store shards
with --replicas 2 and a small DRAM arena, so blocks are evicted all along,
two prefill and two decode instances) under orte_enable_recovery, as the
README deploys it, and for --minutes runs a mixed load against it: streamed
and whole completions and chats, greedy and sampled, prompts that share a few
long prefixes. Every --kill-every seconds it kill -9s one rank, a prefill, a
store shard and a decode in turn, while each role keeps one live instance (a
role with none would answer 503 by design, which is not what a soak tests).
Every --sample seconds it reads each rank's VmRSS from /proc/PID/status.

Each request ends as one of: completed (an answer and its finish reason;
a greedy prompt's text is also checked against its first answer: "wrong"
counts those that differ), failed (an HTTP error, an error event in the
stream or a refused/reset connection: the client was told, with a reason)
or lost (no answer and no error by its deadline, --deadline seconds: what
must never happen). Prints JSON lines: {"sample": ...} per RSS sample,
{"kill": ...} per kill, then one {"summary": ...}; exits 1 when a request
was lost or the cluster never came up, 0 otherwise."""
import argparse
import collections
import http.client
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

PREFIXES = [
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun. ",
    "One day, a big dog came to the park. The dog was very happy and wanted to play with the ball. ",
    "Tom and his mom went to the store to buy some food. They saw a big red apple and a small cat. ",
]
WORDS = "the a big small happy sad dog cat girl boy tree ball sun park home red blue ran saw played".split()
CLASSES = ["completion", "completion_stream", "chat", "chat_stream"]


def now():
    return time.monotonic()


def emit(obj, lock=threading.Lock()):
    with lock:
        print(json.dumps(obj), flush=True)


def rank_pids(mpirun_pid):
    """{rank: pid} of mpirun's children (OMPI_COMM_WORLD_RANK in their environment)."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != mpirun_pid:
                continue
            with open("/proc/%s/environ" % d, "rb") as f:
                env = f.read().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        for e in env:
            if e.startswith(b"OMPI_COMM_WORLD_RANK="):
                out[int(e.split(b"=", 1)[1])] = int(d)
    return out


def signal_all(pids, sig):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass  # exited meanwhile


def rss_kib(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class Load:
    """The clients: each sends one request after another until told to stop."""

    def __init__(self, host, port, deadline, seed):
        self.host, self.port, self.deadline = host, port, deadline
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.count = collections.Counter()
        self.reasons = collections.Counter()
        self.greedy = {}  # (class, prompt, max_tokens) -> first answer's text
        self.lost = []
        self.done_at = []  # (end time, start time) of every completed request

    def pick(self):
        with self.lock:
            cls = self.rng.choice(CLASSES)
            prompt = self.rng.choice(PREFIXES) + "Then %s" % self.rng.choice(
                ["the sun came out.", "they ran home.", "a bird sang.", "it rained.", "she smiled."])
            if self.rng.random() < 0.5:  # a tail of its own: new blocks, so the store evicts
                prompt += " " + " ".join(self.rng.choice(WORDS) for _ in range(self.rng.randint(8, 40)))
            greedy = self.rng.random() < 0.7
            max_tokens = self.rng.choice([8, 16, 32, 48])
        return cls, prompt, greedy, max_tokens

    def one(self):
        cls, prompt, greedy, max_tokens = self.pick()
        stream = cls.endswith("_stream")
        chat = cls.startswith("chat")
        body = {"max_tokens": max_tokens, "stream": stream, "ignore_eos": True,
                "temperature": 0 if greedy else 0.8}
        if chat:
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        t0 = now()
        text, finish, err = "", None, None
        outcome = "lost"
        try:
            c = http.client.HTTPConnection(self.host, self.port, timeout=self.deadline)
            c.request("POST", "/v1/chat/completions" if chat else "/v1/completions",
                      json.dumps(body), {"content-type": "application/json"})
            r = c.getresponse()
            if r.status != 200:
                raw = r.read()
                try:
                    err = "http %d: %s" % (r.status, json.loads(raw)["error"]["message"])
                except (ValueError, KeyError, TypeError):
                    err = "http %d" % r.status
            elif not stream:
                ch = json.loads(r.read())["choices"][0]
                text = (ch["message"]["content"] if chat else ch["text"]) or ""
                finish = ch.get("finish_reason")
            else:
                done = False
                while now() - t0 < self.deadline:
                    line = r.fp.readline()
                    if not line:
                        break
                    line = line.decode("utf-8", "replace").strip()
                    if not line.startswith("data: "):
                        continue
                    if line[6:] == "[DONE]":
                        done = True
                        break
                    ev = json.loads(line[6:])
                    if "error" in ev:
                        err = "stream error: %s" % ev["error"].get("message", "?")
                        continue
                    ch = ev["choices"][0]
                    text += (ch.get("delta") or {}).get("content") or "" if chat else ch.get("text") or ""
                    finish = ch.get("finish_reason") or finish
                if not done:
                    finish = None  # no [DONE]: not an answer
                    if err is None and now() - t0 < self.deadline:
                        err = "stream closed before [DONE]"
            c.close()
        except (TimeoutError, OSError) as e:
            # a socket timeout is the deadline passing with no answer: lost;
            # a refused or reset connection told the client: failed
            if isinstance(e, TimeoutError) or "timed out" in str(e):
                err = None
            else:
                err = "connection: %s" % type(e).__name__
        except (ValueError, KeyError, IndexError, http.client.HTTPException) as e:
            err = "bad answer: %s" % type(e).__name__
        t1 = now()
        with self.lock:
            if err is not None:
                outcome = "failed"
                self.reasons[re.sub(r"\d+(\.\d+)?", "N", err)[:120]] += 1
            elif finish is not None:
                outcome = "completed"
                self.done_at.append((t1, t0))
                if greedy:
                    key = (cls, prompt, max_tokens)
                    first = self.greedy.setdefault(key, text)
                    if first != text:
                        self.count["wrong"] += 1
            else:
                self.lost.append({"class": cls, "max_tokens": max_tokens, "after_s": round(t1 - t0, 1)})
            self.count[outcome] += 1
            self.count[cls] += 1

    def client(self):
        while not self.stop.is_set():
            self.one()


def start_cluster(a, log):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               MOON_LOG_LEVEL="warn")
    cmd = [a.mpirun, "-np", "7", "--oversubscribe", "--mca", "orte_enable_recovery", "1",
           "--mca", "odls_base_sigkill_timeout", "15", a.moonlet, "serve", "--model", a.model,
           "--prefill", "2", "--decode", "2", "--store", "2", "--replicas", "2",
           "--store-dram-mib", str(a.store_mib), "--port", "0", "--drain-seconds", "10",
           "--request-deadline", str(a.request_deadline), "--print-placement"]
    # its own session: mpirun signals process groups, and this driver is no rank
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env=env, start_new_session=True)


def wait_ready(proc, logpath, timeout=120):
    t0 = now()
    while now() - t0 < timeout and proc.poll() is None:
        with open(logpath, errors="replace") as f:
            log = f.read()
        m = re.search(r"serving on http://([^:/ ]+):(\d+)/v1", log)
        roles = dict((int(r), role) for r, role in re.findall(r"placement: rank (\d+)/\d+ .*?: (\S+) \|", log))
        if m and len(roles) == 7:
            try:
                c = http.client.HTTPConnection(m.group(1), int(m.group(2)), timeout=5)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    return m.group(1), int(m.group(2)), roles
            except OSError:
                pass
        time.sleep(0.2)
    return None


def metric(host, port, name, label=""):
    """The sum of the /metrics lines named NAME whose labels hold LABEL."""
    try:
        c = http.client.HTTPConnection(host, port, timeout=10)
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
    except OSError:
        return None
    vals = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if re.match(r"%s(\{[^}]*%s[^}]*\})? " % (re.escape(name), re.escape(label)), line)]
    return sum(vals) if vals else None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=3)
    p.add_argument("--mpirun", default="mpirun")
    p.add_argument("--moonlet", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--clients", type=int, default=6)
    p.add_argument("--kill-every", type=float, default=0, help="seconds (0: the run cut in 4)")
    p.add_argument("--sample", type=float, default=5, help="seconds between RSS samples")
    p.add_argument("--deadline", type=float, default=120, help="client deadline per request, s")
    p.add_argument("--request-deadline", type=int, default=90, help="the server's, s")
    p.add_argument("--store-mib", type=int, default=1, help="DRAM per store shard (small: evictions)")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    run_s = a.minutes * 60
    kill_every = a.kill_every or run_s / 4
    tmp = tempfile.mkdtemp(prefix="moonlet-soak-")
    logpath = os.path.join(tmp, "serve.log")
    log = open(logpath, "w")
    proc = start_cluster(a, log)

    def stop_cluster():
        if proc.poll() is None:
            # SIGTERM to the ranks, not to mpirun: idle, they drain at once and
            # exit, and mpirun with them; mpirun itself holds the signal for its
            # odls_base_sigkill_timeout (15 s) before it passes it on
            ranks = list(rank_pids(proc.pid).values())
            signal_all(ranks, signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                signal_all(ranks, signal.SIGKILL)
                proc.kill()
                proc.wait()

    ready = wait_ready(proc, logpath)
    if not ready:
        stop_cluster()
        emit({"error": "the cluster never served", "log_tail": open(logpath).read()[-3000:]})
        shutil.rmtree(tmp, ignore_errors=True)
        return 1
    host, port, roles = ready
    pids = rank_pids(proc.pid)
    load = Load(host, port, a.deadline, a.seed)
    t_start = now()
    clients = [threading.Thread(target=load.client) for _ in range(a.clients)]
    for t in clients:
        t.start()
    # victims in turn; each role keeps one live instance
    victims = [r for want in ("prefill/0", "store/0", "decode/0") for r, role in roles.items() if role == want]
    kills, rss = [], collections.defaultdict(list)
    next_kill, next_sample = t_start + kill_every, t_start
    while now() - t_start < run_s:
        if now() >= next_sample:
            sample = {str(r): rss_kib(pid) for r, pid in sorted(pids.items())}
            for r, v in sample.items():
                if v is not None:
                    rss[r].append(v)
            emit({"sample": {"t_s": round(now() - t_start, 1), "rss_kib": sample,
                             "completed": load.count["completed"], "failed": load.count["failed"]}})
            next_sample += a.sample
        if victims and now() >= next_kill:
            r = victims.pop(0)
            os.kill(pids[r], signal.SIGKILL)
            kills.append({"t": now(), "rank": r, "role": roles[r]})
            emit({"kill": {"t_s": round(now() - t_start, 1), "rank": r, "role": roles[r], "pid": pids[r]}})
            next_kill += kill_every
        time.sleep(0.2)
    load.stop.set()
    for t in clients:
        t.join(a.deadline + 10)
    evictions = metric(host, port, "moonlet:store_evictions_total")
    alive = {role: metric(host, port, "moonlet:instances_alive", 'role="%s"' % role)
             for role in ("prefill", "decode", "store")}
    # per kill: how long until a request sent after it completed
    recover = []
    for k in kills:
        after = [t1 - k["t"] for t1, t0 in load.done_at if t0 >= k["t"]]
        recover.append({"rank": k["rank"], "role": k["role"],
                        "first_ok_after_s": round(min(after), 2) if after else None})
    stop_cluster()
    log.close()
    c = load.count
    summary = {
        "minutes": a.minutes, "clients": a.clients,
        "requests": c["completed"] + c["failed"] + c["lost"],
        "completed": c["completed"], "wrong_greedy_text": c["wrong"], "failed": c["failed"],
        "failed_reasons": dict(load.reasons), "lost": c["lost"], "lost_requests": load.lost[:10],
        "by_class": {k: c[k] for k in CLASSES},
        "kills": recover, "store_evictions": evictions, "instances_alive_at_end": alive,
        "rss_kib": {r: {"first": v[0], "max": max(v), "last": v[-1], "samples": len(v)}
                    for r, v in sorted(rss.items())},
        "roles": {str(r): role for r, role in sorted(roles.items())},
    }
    emit({"summary": summary})
    if c["lost"]:
        sys.stderr.write(open(logpath, errors="replace").read()[-3000:])
    shutil.rmtree(tmp, ignore_errors=True)  # the log's tail went out above when it matters
    return 1 if c["lost"] else 0


if __name__ == "__main__":
    sys.exit(main())
