"""tests/e2e/batch/test_batch.py MOONLET MODEL WORKDIR - `moonlet batch` end to end
on stories260K: a 50-prompt file answered line by line (greedy completions
equal `moonlet generate`); a run killed with SIGKILL midway and run again
answers every line exactly once; SIGTERM stops cleanly (exit 3) and a rerun
resumes; bad lines each get their error line and the others are answered;
an output file of another input is refused; the response bodies equal what
`moonlet serve`'s gateway answers to the same request (but id and created)."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import batch_check as bc  # noqa: E402

MOONLET, MODEL, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(WORK, exist_ok=True)


def path(name):
    return os.path.join(WORK, name)


def batch(inp, out, *extra, check=True, timeout=300):
    cmd = [MOONLET, "batch", "--model", MODEL, "--input", inp, "--output", out] + list(extra)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        sys.stderr.write(r.stderr)
        raise AssertionError("moonlet batch exited %d" % r.returncode)
    return r


def start_batch(inp, out, *extra):
    cmd = [MOONLET, "batch", "--model", MODEL, "--input", inp, "--output", out] + list(extra)
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(out + ".log", "w"))


def lines_in(out):
    try:
        with open(out) as f:
            return f.read().count("\n")
    except FileNotFoundError:
        return 0


def wait_lines(proc, out, n, deadline_s=120):
    t0 = time.time()
    while lines_in(out) < n:
        assert proc.poll() is None, "moonlet batch ended before %d lines" % n
        assert time.time() - t0 < deadline_s, "no %d lines in %d s" % (n, deadline_s)
        time.sleep(0.05)


def test_fifty():
    lines = bc.request_lines(50)
    inp, out = path("fifty.jsonl"), path("fifty.out.jsonl")
    bc.write_input(inp, lines)
    if os.path.exists(out):
        os.remove(out)
    r = batch(inp, out, "--max-inflight", "8")
    assert "50/50 answered (50 ok, 0 failed" in r.stderr, r.stderr
    by_line = bc.check_output(out, 50)
    for i, l in enumerate(lines):
        a = by_line[i + 1]
        assert a["custom_id"] == l["custom_id"]
        body = a["response"]["body"]
        assert body["object"] == ("chat.completion" if "chat" in l["url"] else "text_completion")
        assert body["usage"]["completion_tokens"] > 0
        assert len(bc.text_of(a)) > 0
    n = bc.check_against_generate(MOONLET, MODEL, lines, by_line)
    assert n == 40
    # run again: nothing left to send
    r = batch(inp, out)
    assert "50 from an earlier run" in r.stderr, r.stderr
    bc.check_output(out, 50)
    print("fifty: ok (40 completions equal moonlet generate)")
    return lines, by_line


def test_kill9(ref_lines):
    lines = bc.request_lines(120, max_tokens=64)
    inp, out = path("kill.jsonl"), path("kill.out.jsonl")
    bc.write_input(inp, lines)
    if os.path.exists(out):
        os.remove(out)
    p = start_batch(inp, out, "--max-inflight", "2", "--fsync-ms", "1")
    wait_lines(p, out, 20)
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)
    n_first = lines_in(out)
    assert n_first < 120, "the run ended before the kill"
    # a kill inside a write leaves a partial line: make one
    with open(out, "a") as f:
        f.write('{"id":"batch_req_9999","custom_id":"req-')
    batch(inp, out, "--max-inflight", "4")
    by_line = bc.check_output(out, 120)
    # greedy: the answers equal a clean run's
    clean = path("kill.clean.jsonl")
    if os.path.exists(clean):
        os.remove(clean)
    batch(inp, clean, "--max-inflight", "8")
    ref = bc.check_output(clean, 120)
    for k in ref:
        assert bc.text_of(ref[k]) == bc.text_of(by_line[k]), "line %d differs after resume" % k
    print("kill -9: ok (%d lines before the kill, 120 after the rerun)" % n_first)


def term_repeatedly(p, timeout):
    """SIGTERM every 2 ms until p exits, as under Slurm (scancel signals
    every process of the job, its script passes the signal on): those after
    the first must not find the default action. Returns p's exit status."""
    t0 = time.time()
    while p.poll() is None:
        assert time.time() - t0 < timeout, "still running %d s after SIGTERM" % timeout
        p.send_signal(signal.SIGTERM)
        time.sleep(0.002)
    return p.returncode


def test_sigterm():
    lines = bc.request_lines(120, max_tokens=64)
    inp, out = path("term.jsonl"), path("term.out.jsonl")
    bc.write_input(inp, lines)
    if os.path.exists(out):
        os.remove(out)
    p = start_batch(inp, out, "--max-inflight", "2")
    wait_lines(p, out, 10)
    rc = term_repeatedly(p, 120)
    with open(out + ".log") as f:
        log = f.read()
    assert rc == 3, "exit %d after SIGTERM:\n%s" % (rc, log)
    assert "stopped: run again" in log, log
    n_first = lines_in(out)
    assert 10 <= n_first < 120
    batch(inp, out)
    bc.check_output(out, 120)
    print("sigterm: ok (exit 3 with %d answered, the rerun answered the rest)" % n_first)


def test_bad_lines():
    good = bc.request_lines(6)
    long_prompt = "x" * 5000
    bad = [
        "this is not json",
        json.dumps([1, 2, 3]),
        json.dumps({"method": "POST", "url": "/v1/completions", "body": {"prompt": "a"}}),
        json.dumps({"custom_id": "u", "method": "POST", "url": "/v1/embeddings",
                    "body": {"input": "a"}}),
        json.dumps({"custom_id": "req-0", "method": "POST", "url": "/v1/completions",
                    "body": {"prompt": "dup", "max_tokens": 4}}),
        json.dumps({"custom_id": "g", "method": "GET", "url": "/v1/completions",
                    "body": {"prompt": "a"}}),
        json.dumps({"custom_id": "nb", "method": "POST", "url": "/v1/completions"}),
        json.dumps({"custom_id": "t", "method": "POST", "url": "/v1/completions",
                    "body": {"prompt": "a", "temperature": 5}}),
        json.dumps({"custom_id": "m", "method": "POST", "url": "/v1/completions",
                    "body": {"model": "gpt-4", "prompt": "a"}}),
        json.dumps({"custom_id": "big", "method": "POST", "url": "/v1/completions",
                    "body": {"prompt": long_prompt}}),
    ]
    expect = {  # line -> (custom_id, error code or http status)
        7: (None, "invalid_json_line"), 8: (None, "invalid_json_line"),
        9: (None, "invalid_custom_id"), 10: ("u", "invalid_url"),
        11: ("req-0", "duplicate_custom_id"), 12: ("g", "invalid_method"),
        13: ("nb", "invalid_body"), 14: ("t", 400), 15: ("m", 404),
        16: ("big", "request_too_large"),
    }
    inp, out = path("bad.jsonl"), path("bad.out.jsonl")
    # a blank line is no request
    bc.write_input(inp, good + bad)
    with open(inp, "a") as f:
        f.write("\n")
    if os.path.exists(out):
        os.remove(out)
    batch(inp, out, "--line-limit", "4k")
    by_line = bc.check_output(out, 16)
    for k in range(1, 7):
        assert len(bc.text_of(by_line[k])) > 0
    for k, (cid, want) in expect.items():
        a = by_line[k]
        assert a["custom_id"] == cid, (k, a)
        if isinstance(want, int):
            r = a["response"]
            assert a["error"] is None and r["status_code"] == want, (k, a)
            assert "error" in r["body"] and r["body"]["error"]["message"], (k, a)
        else:
            assert a["response"] is None and a["error"]["code"] == want, (k, a)
            assert a["error"]["message"], (k, a)
    # an output that belongs to another input is refused, and left as it was
    other = path("other.jsonl")
    lines = bc.request_lines(16)
    lines[0]["custom_id"] = "else"
    bc.write_input(other, lines)
    before = open(out).read()
    r = batch(other, out, check=False)
    assert r.returncode == 1 and "not this input's output" in r.stderr, r.stderr
    assert open(out).read() == before
    # a missing input: a clear error
    r = batch(path("none.jsonl"), path("none.out"), check=False)
    assert r.returncode == 1 and "none.jsonl" in r.stderr, r.stderr
    print("bad lines: ok (10 error lines, 6 answers)")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_same_as_gateway(lines, by_line):
    """The gateway's body for the same request, but id and created."""
    port = free_port()
    log = open(path("serve.log"), "w")
    p = subprocess.Popen([MOONLET, "serve", "--model", MODEL, "--port", str(port)],
                         stdout=log, stderr=log)
    try:
        t0 = time.time()
        while True:
            assert p.poll() is None, "moonlet serve exited"
            assert time.time() - t0 < 120, "the gateway was not ready in 120 s"
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=5) as r:
                    if r.status == 200:
                        break
            except Exception:
                time.sleep(0.2)
        for k in (1, 2, 5, 10):
            l = lines[k - 1]
            req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, l["url"]),
                                         data=json.dumps(l["body"]).encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=60) as r:
                gw = r.read().decode()
            line = open(path("fifty.out.jsonl")).read().splitlines()
            mine = [x for x in line if json.loads(x)["id"] == "batch_req_%d" % k][0]
            body = mine[mine.index('"body":') + 7:mine.rindex('},"error":null}')]
            g, m = json.loads(gw), json.loads(body)
            for o in (g, m):
                del o["id"], o["created"]
            assert g == m, "line %d: gateway %s, batch %s" % (k, g, m)
            # byte for byte, once id and created are set alike
            gj = json.loads(gw)
            body2 = body.replace(json.loads(body)["id"], gj["id"], 1).replace(
                '"created":%d' % json.loads(body)["created"], '"created":%d' % gj["created"], 1)
            assert body2 == gw, "line %d not byte-equal:\n%s\n%s" % (k, gw, body2)
    finally:
        rc = term_repeatedly(p, 60)
    assert rc == 0, "moonlet serve exit %d after two SIGTERMs" % rc
    print("gateway: ok (4 bodies byte-equal but id and created)")


lines, by_line = test_fifty()
test_bad_lines()
test_kill9(lines)
test_sigterm()
test_same_as_gateway(lines, by_line)
print("test_batch: all ok")
