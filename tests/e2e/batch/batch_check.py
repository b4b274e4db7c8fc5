"""tests/e2e/batch/batch_check.py - shared by the batch tests (plain and Slurm):
writes OpenAI batch input files and checks output files line by line.

check_output(out, inputs) asserts every request line is answered exactly
once (by custom_id and by line id), and returns the answers by custom_id."""
import json
import subprocess

PROMPTS = ["Once upon a time", "Lily and Tom", "The little dog", "One day, a girl",
           "The sun was", "Tim had a red ball", "A big cat", "Mom said"]


def request_lines(n, max_tokens=24, chat_every=5, model="stories260K"):
    """n greedy requests; every chat_every-th one a chat completion."""
    lines = []
    for i in range(n):
        p = PROMPTS[i % len(PROMPTS)]
        if chat_every and i % chat_every == chat_every - 1:
            body = {"model": model, "messages": [{"role": "user", "content": p}],
                    "max_tokens": max_tokens, "temperature": 0}
            url = "/v1/chat/completions"
        else:
            body = {"model": model, "prompt": "%s %d" % (p, i), "max_tokens": max_tokens,
                    "temperature": 0}
            url = "/v1/completions"
        lines.append({"custom_id": "req-%d" % i, "method": "POST", "url": url, "body": body})
    return lines


def write_input(path, lines):
    with open(path, "w") as f:
        for l in lines:
            f.write((l if isinstance(l, str) else json.dumps(l)) + "\n")


def read_output(path):
    with open(path) as f:
        text = f.read()
    assert text == "" or text.endswith("\n"), "output ends in a partial line"
    return [json.loads(l) for l in text.splitlines() if l.strip()]


def check_output(path, n_lines):
    """Every line id batch_req_1..n exactly once; returns {line: answer}."""
    out = read_output(path)
    by_line = {}
    for o in out:
        assert set(o) == {"id", "custom_id", "response", "error"}, o
        line = int(o["id"][len("batch_req_"):])
        assert line not in by_line, "line %d answered twice" % line
        by_line[line] = o
    missing = sorted(set(range(1, n_lines + 1)) - set(by_line))
    assert not missing, "lines not answered: %s" % missing[:10]
    assert len(by_line) == n_lines, "%d answers for %d lines" % (len(by_line), n_lines)
    return by_line


def text_of(answer):
    r = answer["response"]
    assert answer["error"] is None and r["status_code"] == 200, answer
    c = r["body"]["choices"][0]
    return c["message"]["content"] if "message" in c else c["text"]


def check_against_generate(moonlet, model, lines, by_line, limit=None):
    """Greedy completions equal `moonlet generate` for the same prompt."""
    n = 0
    for i, l in enumerate(lines):
        if l["url"] != "/v1/completions" or (limit is not None and n >= limit):
            continue
        b = l["body"]
        gen = subprocess.run([moonlet, "generate", "--model", model, "--prompt", b["prompt"],
                              "--max-tokens", str(b["max_tokens"])], capture_output=True,
                             text=True, timeout=120, check=True).stdout
        assert gen.endswith("\n")
        got = text_of(by_line[i + 1])
        assert got == gen[:-1], "line %d: batch %r, generate %r" % (i + 1, got, gen[:-1])
        n += 1
    return n
