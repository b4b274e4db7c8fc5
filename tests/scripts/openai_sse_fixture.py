#!/usr/bin/env python3
"""TEST FIXTURE ONLY - not a server, not Moonlet's gateway.

A tiny stand-in that answers the OpenAI streaming API the way vLLM does, so
`moonlet bench`'s HTTP client can be tested without a model. It streams
max_tokens chunks of fake text ("tok0 tok1 ..."), one per token, each event
written in two pieces (split reads), then a finish chunk, a usage chunk when
stream_options.include_usage is set, and `data: [DONE]`. Every request body
is appended as one JSON line to --log. The real end-to-end check runs
against the Moonlet gateway (tests/scripts/test_bench_gateway.sh).

usage: openai_sse_fixture.py --port-file F --log F [--api-key K] [--fail-every N]
Prints nothing; writes the bound port to --port-file and serves until killed.
"""
import argparse
import http.server
import json
import socketserver
import threading
import time


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    count = 0
    lock = threading.Lock()

    def log_message(self, *args):  # quiet
        pass

    def reply(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def authorized(self):
        key = self.server.opts.api_key
        if key and self.headers.get("Authorization") != "Bearer " + key:
            self.reply(401, {"error": {"message": "bad api key", "type": "auth", "param": None,
                                       "code": 401}})
            return False
        return True

    def do_GET(self):
        if not self.authorized():
            return
        if self.path == "/v1/models":
            self.reply(200, {"object": "list", "data": [{"id": "fixture-model", "object": "model"}]})
        else:
            self.reply(404, {"error": {"message": "no route", "type": "not_found"}})

    def event(self, obj):
        data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
        half = len(data) // 2
        for piece in (data[:half], data[half:]):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.flush()

    def do_POST(self):
        if not self.authorized():
            return
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        with Handler.lock:
            Handler.count += 1
            n = Handler.count
            with open(self.server.opts.log, "a") as f:
                f.write(json.dumps({"path": self.path, "body": body}) + "\n")
        fail_every = self.server.opts.fail_every
        if fail_every and n % fail_every == 0:
            self.reply(400, {"error": {"message": "fixture rejects request %d" % n,
                                       "type": "invalid_request_error"}})
            return
        chat = self.path == "/v1/chat/completions"
        if not chat and self.path != "/v1/completions":
            self.reply(404, {"error": {"message": "no route", "type": "not_found"}})
            return
        prompt = body.get("prompt", "")
        n_prompt = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
        if chat:
            n_prompt = sum(len(m["content"].split()) for m in body["messages"])
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        base = {"id": "cmpl-%d" % n, "created": int(time.time()), "model": body.get("model")}
        for i in range(int(body.get("max_tokens", 16))):
            time.sleep(0.002)
            if chat:
                choice = {"index": 0, "delta": {"content": "tok%d " % i}, "finish_reason": None}
            else:
                choice = {"index": 0, "text": "tok%d " % i, "finish_reason": None}
            self.event(dict(base, choices=[choice]))
        last = {"index": 0, "finish_reason": "length"}
        last.update({"delta": {}} if chat else {"text": ""})
        self.event(dict(base, choices=[last]))
        if body.get("stream_options", {}).get("include_usage"):
            mt = int(body.get("max_tokens", 16))
            self.event(dict(base, choices=[], usage={
                "prompt_tokens": n_prompt, "completion_tokens": mt,
                "total_tokens": n_prompt + mt,
                "prompt_tokens_details": {"cached_tokens": n_prompt // 2}}))
        self.event(b"[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--api-key")
    ap.add_argument("--fail-every", type=int, default=0)
    opts = ap.parse_args()
    srv = Server(("127.0.0.1", 0), Handler)
    srv.opts = opts
    with open(opts.port_file + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    import os
    os.rename(opts.port_file + ".tmp", opts.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    main()
