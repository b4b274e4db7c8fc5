#!/usr/bin/env python3
"""benchmarks/slowloris.py - a normal client's latency while a Slowloris
(or slow-body) flood holds the gateway, for an anchor moonlet binary and the
one measured, in alternating rounds of the same run.

Each round starts `moonlet serve` (one process, the given model), opens
--conns connections from 127.0.0.1 that send a request head (or a whole head
and then a body) one byte per --byte-interval seconds, reopening any the
server closes, and meanwhile sends a normal completion from 127.0.0.2 every
0.5 s (10 s timeout each). Prints one JSON line per round and one summary
line per binary: requests served, median and worst latency (a timeout counts
as 10 s). Loopback only; needs about conns + 64 file descriptors.

  benchmarks/slowloris.py --anchor OLD/moonlet --moonlet build/launch/moonlet \\
      --model examples/models/stories260K/stories260K.gguf --conns 1030
"""
import argparse
import json
import os
import resource
import shlex
import socket
import statistics
import subprocess
import threading
import time
import urllib.request

TIMEOUT_S = 10.0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(binary, model, port, extra):
    cmd = [binary, "serve", "--model", model, "--port", str(port)] + shlex.split(extra)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc
        except Exception:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"{binary} did not become healthy")


def flood(port, n, body, interval, stop, counts):
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
    if body:
        head += b"Content-Length: 100000\r\n\r\n"
    socks = [None] * n

    def open_one(i):
        s = socket.socket()
        s.setblocking(False)
        s.bind(("127.0.0.1", 0))
        try:
            s.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        socks[i] = [s, False]
        counts["opened"] += 1

    for i in range(n):
        open_one(i)
    while not stop.is_set():
        for i in range(n):
            s, started = socks[i]
            try:
                if s.recv(1, socket.MSG_PEEK) == b"":
                    raise ConnectionResetError
            except (BlockingIOError, InterruptedError):
                pass
            except OSError as e:
                if getattr(e, "errno", None) not in (107,):  # ENOTCONN: still connecting
                    counts["cut"] += 1
                    s.close()
                    open_one(i)
                    continue
            try:
                if not started:
                    s.send(head)
                    socks[i][1] = True
                else:
                    s.send(b"x" if body else b"X")
            except OSError:
                pass
        stop.wait(interval)
    for s, _ in socks:
        s.close()


def normal_request(port):
    body = b'{"prompt":"Once upon","max_tokens":4}'
    req = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
           b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)) + body
    t0 = time.monotonic()
    try:
        with socket.socket() as s:
            s.settimeout(TIMEOUT_S)
            s.bind(("127.0.0.2", 0))
            s.connect(("127.0.0.1", port))
            s.sendall(req)
            data = b""
            while time.monotonic() - t0 < TIMEOUT_S:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            ok = data.startswith(b"HTTP/1.1 200")
    except OSError:
        ok = False
    return ok, min(time.monotonic() - t0, TIMEOUT_S)


def one_round(name, binary, args, extra, rnd):
    port = free_port()
    proc = start(binary, args.model, port, extra)
    stop = threading.Event()
    counts = {"opened": 0, "cut": 0}
    t = threading.Thread(target=flood, args=(port, args.conns, args.mode == "body",
                                             args.byte_interval, stop, counts))
    t.start()
    time.sleep(2.0)  # the flood is in place
    lat, served = [], 0
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        ok, dt = normal_request(port)
        served += ok
        lat.append(dt)
        time.sleep(0.5)
    stop.set()
    t.join()
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
    rec = {"bench": "slowloris", "mode": args.mode, "binary": name, "round": rnd,
           "conns": args.conns, "extra": extra, "served": served, "requests": len(lat),
           "p50_ms": round(statistics.median(lat) * 1000, 1),
           "max_ms": round(max(lat) * 1000, 1), "flood_opened": counts["opened"],
           "flood_cut": counts["cut"]}
    print(json.dumps(rec), flush=True)
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--moonlet", required=True)
    ap.add_argument("--anchor", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--conns", type=int, default=1030)
    ap.add_argument("--mode", choices=["headers", "body"], default="headers")
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--byte-interval", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--extra", default="", help="more serve options for --moonlet only")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, args.conns + 256)), hard))
    recs = {"anchor": [], "moonlet": []}
    for rnd in range(args.rounds):
        recs["anchor"].append(one_round("anchor", args.anchor, args, "", rnd))
        recs["moonlet"].append(one_round("moonlet", args.moonlet, args, args.extra, rnd))
    for name, rs in recs.items():
        lat = [r["p50_ms"] for r in rs]
        print(json.dumps({"bench": "slowloris", "summary": name, "mode": args.mode,
                          "conns": args.conns,
                          "served": sum(r["served"] for r in rs),
                          "requests": sum(r["requests"] for r in rs),
                          "p50_ms_median": statistics.median(lat),
                          "max_ms": max(r["max_ms"] for r in rs)}), flush=True)


if __name__ == "__main__":
    main()
