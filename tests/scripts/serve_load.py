#!/usr/bin/env python3
"""tests/scripts/serve_load.py URL N MAX_TOKENS OUT [--started FILE] [--timeout S] [--rounds R]
                              [--reset-is-error] [--mix]

N concurrent clients, each sending R (default 1) streamed greedy completions
one after the other (prompt "<i>: Once upon a time", i = client * R + round,
ignore_eos, max_tokens MAX_TOKENS) against a moonlet gateway. Writes OUT, a
JSON list with one entry per request: HTTP status, the streamed text, the
finish reason, the error event's message (if any), whether [DONE] came, the
first-byte time and the longest gap between two events (seconds). A request
whose stream neither finished nor failed within --timeout (default 120 s) is
"lost"; so is one whose connection was refused, reset or closed before
[DONE], unless --reset-is-error (the gateway itself was killed: the client
saw its connection end, an error with a reason). --started FILE is created once half of the streams received text
(a fault script waits for it before injecting its fault). --mix: requests
i % 4 == 1 ask echo with logprobs (their text then ends with the number of
token_logprobs, "!" when the first is not null) and i % 4 == 3 are
/v1/embeddings of the prompt (their text: the vector to 5 decimals), so
those the prefill answers for every prompt position face the fault too."""
import http.client
import json
import sys
import threading
import time
import urllib.parse


def embed(c, i, r, started):
    """An embeddings request's outcome into r: its vector as text."""
    c.request("POST", "/v1/embeddings", json.dumps({"input": "%d: Once upon a time" % i}),
              {"content-type": "application/json"})
    resp = c.getresponse()
    r["status"] = resp.status
    o = json.loads(resp.read())
    if resp.status != 200:
        r["error"] = o.get("error", {}).get("message", "http %d" % resp.status)
        return
    r["text"] = ",".join("%.5f" % x for x in o["data"][0]["embedding"])
    r["finish"] = "stop"
    r["done"] = True
    started(i)


def one(url, i, max_tokens, timeout, res, started, reset_is_error=False, mix=False):
    u = urllib.parse.urlparse(url)
    r = {"i": i, "status": 0, "text": "", "finish": None, "error": None, "done": False,
         "lost": False, "ttfb_s": None, "max_gap_s": 0.0}
    req = {"prompt": "%d: Once upon a time" % i, "max_tokens": max_tokens,
           "temperature": 0, "ignore_eos": True, "stream": True}
    echo = mix and i % 4 == 1
    if echo:
        req.update({"echo": True, "logprobs": 1})
    body = json.dumps(req)
    n_lp, first_null = 0, None
    r["t_start"] = time.time()  # wall clock: a fault script compares its own
    t0 = time.monotonic()
    last = t0
    try:
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
        if mix and i % 4 == 3:
            embed(c, i, r, started)
            raise StopIteration
        c.request("POST", "/v1/completions", body, {"content-type": "application/json"})
        resp = c.getresponse()
        r["status"] = resp.status
        if resp.status != 200:
            try:
                r["error"] = json.loads(resp.read())["error"]["message"]
            except Exception as e:  # noqa: BLE001 - any unreadable error body
                r["error"] = "http %d (%s)" % (resp.status, e)
            r["t_end"] = time.time()
            res[i] = r
            return
        while True:
            line = resp.fp.readline()
            if not line:
                break
            now = time.monotonic()
            if r["ttfb_s"] is None:
                r["ttfb_s"] = now - t0
            r["max_gap_s"] = max(r["max_gap_s"], now - last)
            last = now
            line = line.decode("utf-8", "replace").strip()
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                r["done"] = True
                break
            ev = json.loads(data)
            if "error" in ev:
                r["error"] = ev["error"].get("message", "?")
                continue
            ch = ev["choices"][0]
            r["text"] += ch.get("text") or ""
            lps = (ch.get("logprobs") or {}).get("token_logprobs") or []
            if first_null is None and lps:
                first_null = lps[0] is None
            n_lp += len(lps)
            if ch.get("finish_reason"):
                r["finish"] = ch["finish_reason"]
            if r["text"]:
                started(i)
    except StopIteration:
        pass
    except Exception as e:  # noqa: BLE001 - a timeout or a reset is the outcome
        r["exception"] = repr(e)
        if reset_is_error and not isinstance(e, TimeoutError) and r["error"] is None:
            r["error"] = "connection: %s" % type(e).__name__
    if reset_is_error and not r["done"] and r["error"] is None and "exception" not in r:
        r["error"] = "connection closed before [DONE]"
    if echo and r["done"]:
        r["text"] += "|%d%s" % (n_lp, "" if first_null else "!")
    if not r["done"] and r["error"] is None:
        r["lost"] = True  # no end, no error: what must never happen
    r["total_s"] = time.monotonic() - t0
    r["t_end"] = time.time()
    res[i] = r


def main():
    url, n, max_tokens, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    started_file = None
    timeout = 120.0
    rounds = 1
    reset_is_error = "--reset-is-error" in sys.argv
    mix = "--mix" in sys.argv
    args = [a for a in sys.argv[5:] if a not in ("--reset-is-error", "--mix")]
    while args:
        if args[0] == "--started":
            started_file = args[1]
        elif args[0] == "--timeout":
            timeout = float(args[1])
        elif args[0] == "--rounds":
            rounds = int(args[1])
        args = args[2:]
    res = [None] * (n * rounds)
    seen = set()
    lock = threading.Lock()

    def started(i):
        with lock:
            if i in seen:
                return
            seen.add(i)
            if started_file and len(seen) == (n + 1) // 2:
                open(started_file, "w").close()

    def client(c):
        for k in range(rounds):
            one(url, c * rounds + k, max_tokens, timeout, res, started, reset_is_error, mix)

    ts = [threading.Thread(target=client, args=(c,)) for c in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if started_file:
        open(started_file, "a").close()
    json.dump(res, open(out, "w"), indent=0)


if __name__ == "__main__":
    main()
