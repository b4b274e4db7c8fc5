"""tests/e2e/batch/test_batchapi.py MOONLET MODEL WORKDIR - the gateway's Batch API
(/v1/files, /v1/batches) end to end on stories260K, with curl and the
official `openai` npm client (skipped with a message when npm or its
registry cannot be reached):
  - a file uploaded, a batch created and polled to completed: the output and
    error files answer every line exactly once, greedy completions equal
    `moonlet generate`, bad lines (not JSON, a duplicate custom_id, an unknown
    url) are lines of the error file;
  - bad input: a malformed multipart body, another purpose, a file over
    --file-limit, an unknown file or batch id, a bad create body: each an
    OpenAI error object (4xx);
  - cancel midway: the batch ends cancelled, what it answered answered once;
  - a write the file system refuses (a file size limit, as a full disk):
    507 storage_full, nothing listed, the server serves on;
  - kill -9 midway, restart on the same --data-dir: the server lists its
    files and batches and the batch completes, each line answered once;
  - SIGTERM midway: a clean exit, and the restarted server completes it."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import batch_check as bc  # noqa: E402

MOONLET, MODEL, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
HERE = os.path.dirname(os.path.abspath(__file__))
os.makedirs(WORK, exist_ok=True)


def path(name):
    return os.path.join(WORK, name)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    def __init__(self, data_dir, *extra, name="serve", preexec=None):
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.log = path(name + ".log")
        cmd = [MOONLET, "serve", "--model", MODEL, "--port", str(self.port), "--data-dir",
               data_dir] + list(extra)
        self.p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(self.log, "a"),
                                  preexec_fn=preexec)
        t0 = time.time()
        while True:
            assert self.p.poll() is None, "moonlet serve exited: " + open(self.log).read()[-2000:]
            assert time.time() - t0 < 60, "moonlet serve not up in 60 s"
            code, _ = self.curl("GET", "/health")
            if code == 200:
                break
            time.sleep(0.1)

    def curl(self, method, route, *args, raw=False):
        r = subprocess.run(["curl", "-s", "-m", "30", "-X", method, "-w", "\n%{http_code}",
                            self.url + route] + list(args), capture_output=True, timeout=60)
        body, _, code = r.stdout.rpartition(b"\n")
        code = int(code or 0)
        if raw:
            return code, body
        try:
            return code, json.loads(body) if body else None
        except ValueError:
            return code, body

    def upload(self, file, purpose="batch"):
        return self.curl("POST", "/v1/files", "-F", "purpose=" + purpose, "-F", "file=@" + file)

    def create(self, file_id, endpoint="/v1/completions", **extra):
        body = dict(input_file_id=file_id, endpoint=endpoint, completion_window="24h", **extra)
        return self.curl("POST", "/v1/batches", "-H", "Content-Type: application/json", "-d",
                         json.dumps(body))

    def batch(self, bid):
        code, b = self.curl("GET", "/v1/batches/" + bid)
        assert code == 200, (code, b)
        return b

    def wait(self, bid, states, deadline_s=240, pred=None):
        t0 = time.time()
        while True:
            b = self.batch(bid)
            if b["status"] in states and (pred is None or pred(b)):
                return b
            assert b["status"] not in ("failed", "expired") or b["status"] in states, b
            assert time.time() - t0 < deadline_s, "batch still %s after %d s: %s" % (
                b["status"], deadline_s, b)
            assert self.p.poll() is None, "moonlet serve exited"
            time.sleep(0.1)

    def content(self, fid):
        code, body = self.curl("GET", "/v1/files/%s/content" % fid, raw=True)
        assert code == 200, (code, body)
        return body.decode()

    def stop(self, sig=signal.SIGTERM, timeout=90):
        self.p.send_signal(sig)
        return self.p.wait(timeout=timeout)


def answers(srv, b):
    """The output and error files' lines, by line number, each once."""
    by_line = {}
    for fid in (b["output_file_id"], b["error_file_id"]):
        if not fid:
            continue
        for l in srv.content(fid).splitlines():
            if not l.strip():
                continue
            o = json.loads(l)
            n = int(o["id"][len("batch_req_"):])
            assert n not in by_line, "line %d answered twice" % n
            by_line[n] = o
    return by_line


def check_all(srv, b, n_lines):
    by_line = answers(srv, b)
    missing = sorted(set(range(1, n_lines + 1)) - set(by_line))
    assert not missing, "lines not answered: %s" % missing[:10]
    assert len(by_line) == n_lines
    rc = b["request_counts"]
    assert rc["total"] == n_lines and rc["completed"] + rc["failed"] == n_lines, rc
    return by_line


def test_curl(srv):
    lines = bc.request_lines(24)
    raw = [json.dumps(l) for l in lines]
    raw.append("this is not json")
    raw.append(json.dumps(lines[0]))  # a duplicate custom_id
    bad = dict(lines[1], custom_id="bad-url", url="/v1/embeddings")
    raw.append(json.dumps(bad))
    inp = path("curl.jsonl")
    bc.write_input(inp, raw)
    code, f = srv.upload(inp)
    assert code == 200 and f["object"] == "file" and f["purpose"] == "batch", (code, f)
    assert f["bytes"] == os.path.getsize(inp)
    code, got = srv.curl("GET", "/v1/files/" + f["id"])
    assert code == 200 and got["id"] == f["id"] and got["filename"] == "curl.jsonl", got
    assert srv.content(f["id"]) == open(inp).read()
    code, b = srv.create(f["id"], metadata={"k": "v"})
    assert code == 200 and b["status"] == "validating" and b["metadata"] == {"k": "v"}, (code, b)
    b = srv.wait(b["id"], ["completed"])
    by_line = check_all(srv, b, 27)
    assert b["request_counts"]["failed"] == 3, b
    assert b["output_file_id"] and b["error_file_id"], b
    for n in range(1, 25):
        assert by_line[n]["custom_id"] == lines[n - 1]["custom_id"]
        assert by_line[n]["response"]["status_code"] == 200, by_line[n]
    assert by_line[25]["error"]["code"] == "invalid_json_line", by_line[25]
    assert by_line[26]["error"]["code"] == "duplicate_custom_id", by_line[26]
    assert by_line[27]["error"]["code"] == "invalid_url", by_line[27]
    n = bc.check_against_generate(MOONLET, MODEL, lines, by_line, limit=6)
    assert n == 6
    code, lst = srv.curl("GET", "/v1/batches")
    assert code == 200 and lst["object"] == "list" and lst["data"][0]["id"] == b["id"], lst
    code, lst = srv.curl("GET", "/v1/files")
    ids = [x["id"] for x in lst["data"]]
    assert f["id"] in ids and b["output_file_id"] in ids and b["error_file_id"] in ids, ids
    print("curl: ok (24 answered, 3 error lines, 6 equal moonlet generate)")
    return f["id"]


def expect_error(code_body, status):
    code, body = code_body
    assert code == status, (code, body)
    assert isinstance(body, dict) and set(body) == {"error"}, body
    e = body["error"]
    assert e["message"] and "type" in e and "code" in e and "param" in e, e
    return e


def test_bad_input(srv, fid):
    # not multipart, a broken multipart body, no file part, another purpose
    expect_error(srv.curl("POST", "/v1/files", "-H", "Content-Type: application/json", "-d",
                          "{}"), 400)
    expect_error(srv.curl("POST", "/v1/files", "-H",
                          "Content-Type: multipart/form-data; boundary=zz", "-d",
                          "--zz\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nab"), 400)
    expect_error(srv.curl("POST", "/v1/files", "-F", "purpose=batch"), 400)
    e = expect_error(srv.upload(path("curl.jsonl"), purpose="fine-tune"), 400)
    assert e["param"] == "purpose", e
    big = path("big.jsonl")
    with open(big, "w") as f:
        f.write("x" * 300000)
    expect_error(srv.upload(big), 413)
    # unknown ids, bad create bodies
    expect_error(srv.curl("GET", "/v1/files/file-nope"), 404)
    expect_error(srv.curl("GET", "/v1/files/file-nope/content"), 404)
    expect_error(srv.curl("DELETE", "/v1/files/file-nope"), 404)
    expect_error(srv.curl("GET", "/v1/batches/batch_nope"), 404)
    expect_error(srv.curl("POST", "/v1/batches/batch_nope/cancel"), 404)
    expect_error(srv.create("file-nope"), 404)
    e = expect_error(srv.create(fid, endpoint="/v1/embeddings"), 400)
    assert e["param"] == "endpoint", e
    expect_error(srv.curl("POST", "/v1/batches", "-d", "{not json"), 400)
    expect_error(srv.curl("POST", "/v1/batches", "-d", json.dumps(
        {"input_file_id": fid, "endpoint": "/v1/completions", "completion_window": "1h"})), 400)
    expect_error(srv.curl("PUT", "/v1/batches"), 405)
    # an empty file: the batch fails with its reason
    empty = path("empty.jsonl")
    open(empty, "w").write("\n\n")
    code, f = srv.upload(empty)
    assert code == 200, f
    code, b = srv.create(f["id"])
    b = srv.wait(b["id"], ["failed"], 60)
    assert b["errors"]["data"][0]["code"] == "empty_file", b
    # delete: gone from the list and its content
    code, d = srv.curl("DELETE", "/v1/files/" + f["id"])
    assert code == 200 and d == {"id": f["id"], "object": "file", "deleted": True}, d
    expect_error(srv.curl("GET", "/v1/files/%s/content" % f["id"]), 404)
    print("bad input: ok (each an error object)")


def long_file(name, n):
    inp = path(name)
    bc.write_input(inp, bc.request_lines(n, max_tokens=64))
    return inp


def test_cancel(srv):
    code, f = srv.upload(long_file("cancel.jsonl", 400))
    code, b = srv.create(f["id"])
    srv.wait(b["id"], ["in_progress"], 60, pred=lambda x: x["request_counts"]["completed"] >= 5)
    code, c = srv.curl("POST", "/v1/batches/%s/cancel" % b["id"])
    assert code == 200 and c["status"] in ("cancelling", "cancelled"), (code, c)
    c = srv.wait(b["id"], ["cancelled"], 120)
    assert c["cancelled_at"] and c["cancelling_at"], c
    by_line = answers(srv, c)
    assert 5 <= len(by_line) < 400, len(by_line)
    rc = c["request_counts"]
    assert rc["completed"] + rc["failed"] == len(by_line), rc
    code, again = srv.curl("POST", "/v1/batches/%s/cancel" % b["id"])
    assert code == 200 and again["status"] == "cancelled", again
    print("cancel: ok (%d of 400 answered before it ended)" % len(by_line))


def test_restart(data_dir, sig):
    """sig midway (SIGKILL or SIGTERM), restart on the same folder: it goes on."""
    n = 60
    srv = Server(data_dir, "--batch-inflight", "2", name="restart")
    code, f = srv.upload(long_file("restart.jsonl", n))
    code, b = srv.create(f["id"])
    srv.wait(b["id"], ["in_progress"], 60, pred=lambda x: x["request_counts"]["completed"] >= 10)
    rc = srv.stop(sig)
    if sig == signal.SIGTERM:
        assert rc == 0, "moonlet serve exit %d after SIGTERM" % rc
    srv = Server(data_dir, "--batch-inflight", "4", name="restart")
    code, lst = srv.curl("GET", "/v1/batches")
    assert b["id"] in [x["id"] for x in lst["data"]], lst
    code, got = srv.curl("GET", "/v1/files/" + f["id"])
    assert code == 200, got
    mid = srv.batch(b["id"])
    b = srv.wait(b["id"], ["completed"])
    by_line = check_all(srv, b, n)
    assert b["request_counts"]["failed"] == 0, b
    # greedy: the same answers as a run without a stop
    ref = bc.request_lines(n, max_tokens=64)
    n_gen = bc.check_against_generate(MOONLET, MODEL, ref, by_line, limit=3)
    assert n_gen == 3
    assert srv.stop() == 0
    print("restart after %s: ok (%s with %d answered, %d after the restart)" % (
        signal.Signals(sig).name, mid["status"], mid["request_counts"]["completed"], n))


def test_npm(srv):
    if shutil.which("npm") is None or shutil.which("node") is None:
        print("skipped: npm or node is not installed: the openai npm client test did not run")
        return
    d = path("npm")
    os.makedirs(d, exist_ok=True)
    if not os.path.isdir(os.path.join(d, "node_modules", "openai")):
        r = subprocess.run(["npm", "install", "--silent", "--no-audit", "--no-fund", "openai@4"],
                           cwd=d, capture_output=True, text=True, timeout=180)
        if r.returncode != 0:
            print("skipped: npm or the npm registry is unreachable: the openai npm client "
                  "test did not run (%s)" % r.stderr.strip()[-200:])
            return
    lines = bc.request_lines(16, chat_every=0)
    raw = [json.dumps(l) for l in lines] + ['{"custom_id": 5}']
    inp = path("npm.jsonl")
    bc.write_input(inp, raw)
    out = path("npm-out")
    os.makedirs(out, exist_ok=True)
    script = os.path.join(d, "batch_client.mjs")
    shutil.copy(os.path.join(HERE, "batch_client.mjs"), script)
    env = dict(os.environ, MOON_GW_URL=srv.url + "/v1")
    r = subprocess.run(["node", script, inp, out], env=env, capture_output=True, text=True,
                       timeout=400)
    sys.stdout.write(r.stdout)
    assert r.returncode == 0, r.stderr
    by_line = {}
    for name in ("output.jsonl", "errors.jsonl"):
        for l in open(os.path.join(out, name)).read().splitlines():
            o = json.loads(l)
            k = int(o["id"][len("batch_req_"):])
            assert k not in by_line, "line %d answered twice" % k
            by_line[k] = o
    assert sorted(by_line) == list(range(1, 18)), sorted(by_line)
    assert by_line[17]["error"]["code"] == "invalid_custom_id", by_line[17]
    assert bc.check_against_generate(MOONLET, MODEL, lines, by_line, limit=4) == 4
    print("npm openai: ok (files.create, batches.create/retrieve/cancel, files.content)")


def test_storage_full():
    """A write the file system refuses (here a file size limit, as a full
    disk would): the upload gets an error object, nothing is listed, the
    server serves on."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))

    d = path("data-full")
    shutil.rmtree(d, ignore_errors=True)
    srv = Server(d, "--file-limit", "8m", name="full", preexec=limit)
    try:
        big = path("big2m.jsonl")
        line = json.dumps(bc.request_lines(1)[0]) + "\n"
        with open(big, "w") as f:
            f.write(line * ((2 << 20) // len(line) + 1))
        e = expect_error(srv.upload(big), 507)
        assert e["code"] == "storage_full" and "File too large" in e["message"], e
        code, lst = srv.curl("GET", "/v1/files")
        assert code == 200 and lst["data"] == [], lst
        assert not [n for n in os.listdir(os.path.join(d, "files")) if n.endswith(".tmp")]
        code, f = srv.upload(path("curl.jsonl"))
        assert code == 200, f
        assert srv.stop() == 0
    finally:
        if srv.p.poll() is None:
            srv.stop(signal.SIGKILL)
    print("storage full: ok (507 storage_full, nothing listed, the server serves on)")


def main():
    data = path("data")
    shutil.rmtree(data, ignore_errors=True)
    srv = Server(data, "--file-limit", "200k")
    try:
        fid = test_curl(srv)
        test_bad_input(srv, fid)
        test_cancel(srv)
        test_npm(srv)
        test_storage_full()
    finally:
        if srv.p.poll() is None:
            rc = srv.stop()
            assert rc == 0, "moonlet serve exit %d" % rc
    for sig in (signal.SIGKILL, signal.SIGTERM):
        d = path("data-" + signal.Signals(sig).name)
        shutil.rmtree(d, ignore_errors=True)
        test_restart(d, sig)
    print("test_batchapi: ok")


if __name__ == "__main__":
    main()
