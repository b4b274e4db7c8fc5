# tests/e2e/gateway/structured_schemas.py N SEED - N random JSON schemas
# (generated from SEED), each sent as response_format json_schema (chat, and
# every third one on /v1/completions); every answer must finish with "stop"
# and be a JSON document that validates against its schema (the python
# jsonschema module; exit 77 when it is missing). Schemas are bounded
# (maxLength, maxItems, depth) so a document always fits stories260K's
# 512-token context. Exit 0: all valid.
import concurrent.futures
import json
import os
import random
import re
import sys
import urllib.error
import urllib.request

try:
    import jsonschema
except ImportError:
    sys.exit(77)

URL = os.environ["MOON_GW_URL"]
UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
WORDS = ["cat", "dog", "sun", "Tom", "big", "a b", "x\"y", "\u00e9t\u00e9", "1", ""]


def leaf(r):
    k = r.randrange(11)
    if k == 0:
        return {"type": "string", "maxLength": r.randint(0, 10)}, 12
    if k == 1:
        return {"type": "string", "minLength": 1, "maxLength": r.randint(1, 6)}, 8
    if k == 2:
        return {"type": "integer"}, 17
    if k == 3:
        return {"type": "integer", "minimum": 0}, 16
    if k == 4:
        return {"type": "number"}, 36
    if k == 5:
        return {"type": "boolean"}, 5
    if k == 6:
        vals = r.sample(WORDS, r.randint(1, 4)) + ([r.randint(-5, 5)] if r.random() < 0.3 else [])
        return {"enum": vals}, 16
    if k == 7:
        return {"type": ["string", "null"], "maxLength": 5}, 7
    if k == 8:
        return {"const": r.choice(WORDS)}, 10
    if k == 9:
        return {"type": "string", "format": "uuid"}, 38
    return {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "maxLength": 4}]}, 17


def gen(r, depth):
    """A schema and an upper bound of its document's length in bytes."""
    k = r.randrange(10)
    if depth < 2 and k < 3:
        return obj(r, depth + 1)
    if depth < 2 and k < 5:
        item, n = gen(r, depth + 1) if r.random() < 0.4 else leaf(r)
        lo = r.randint(0, 1)
        hi = r.randint(lo, 3)
        return {"type": "array", "items": item, "minItems": lo, "maxItems": hi}, 2 + hi * (n + 1)
    return leaf(r)


def obj(r, depth):
    props, bound = {}, 2
    for i in range(r.randint(1, 4)):
        name = r.choice(["a", "name", "id", "x_y", "\u00fcber", "k%d" % i, "q\"t"]) + str(i)
        s, n = gen(r, depth)
        props[name] = s
        bound += len(json.dumps(name)) + 2 + n
    req = [p for p in props if r.random() < 0.6]
    schema = {"type": "object", "properties": props, "required": req}
    if r.random() < 0.5:
        schema["additionalProperties"] = False
    return schema, bound


def schema_of(r):
    while True:
        s, bound = obj(r, 0)
        if bound <= 330:
            return s


def uuids_ok(schema, doc):
    if isinstance(schema, dict) and schema.get("format") == "uuid":
        return isinstance(doc, str) and UUID.match(doc) is not None
    if isinstance(doc, dict):
        return all(uuids_ok(schema.get("properties", {}).get(k, {}), v) for k, v in doc.items())
    if isinstance(doc, list):
        return all(uuids_ok(schema.get("items", {}), v) for v in doc)
    return True


def post(path, body):
    req = urllib.request.Request(URL + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return {"http_error": e.code, "body": e.read().decode(errors="replace")}


def run(i, seed):
    r = random.Random(seed * 100003 + i)
    schema = schema_of(r)
    fmt = {"type": "json_schema", "json_schema": {"name": "s%d" % i, "strict": True,
                                                   "schema": schema}}
    body = {"max_tokens": 440, "temperature": r.choice([0, 0.7, 1.0]), "seed": i,
            "response_format": fmt}
    if i % 3 == 2:
        body["prompt"] = "Once"
        resp = post("/v1/completions", body)
    else:
        body["messages"] = [{"role": "user", "content": "Tell me"}]
        resp = post("/v1/chat/completions", body)
    if "http_error" in resp:
        return "schema %d: HTTP %d %s\n%s" % (i, resp["http_error"], resp["body"],
                                              json.dumps(schema))
    choice = resp["choices"][0]
    text = choice["message"]["content"] if "message" in choice else choice["text"]
    if choice["finish_reason"] != "stop":
        return "schema %d: finish %s: %r\n%s" % (i, choice["finish_reason"], text,
                                                 json.dumps(schema))
    try:
        doc = json.loads(text)
        jsonschema.validate(doc, schema)
    except (ValueError, jsonschema.ValidationError) as e:
        return "schema %d: %s: %r\n%s" % (i, str(e).split("\n")[0], text, json.dumps(schema))
    if not uuids_ok(schema, doc):
        return "schema %d: a uuid does not match: %r" % (i, text)
    return None


def main():
    n, seed = int(sys.argv[1]), int(sys.argv[2])
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        errors = [e for e in pool.map(lambda i: run(i, seed), range(n)) if e]
    for e in errors[:10]:
        print("structured_schemas: " + e, file=sys.stderr)
    print("structured_schemas: %d of %d schemas gave valid documents" % (n - len(errors), n))
    sys.exit(1 if errors else 0)


main()
