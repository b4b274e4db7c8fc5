# tests/unit/gateway/openai_client.py - the official `openai` Python client
# against the gateway (test_gateway runs it in a venv of the build tree when
# PyPI is reachable): a completion, a chat, a streamed chat with usage, and
# API errors surfacing as the client's own exception classes. Exit 0: all
# matched.
import os
import sys

import openai
from openai import OpenAI


def fail(why):
    print("openai python client: " + why, file=sys.stderr)
    sys.exit(1)


client = OpenAI(base_url=os.environ["MOON_GW_URL"], api_key="none")

models = client.models.list()
if models.data[0].id != "stories260K":
    fail("models: %r" % models.data)

c = client.completions.create(model="stories260K", prompt="Once upon a time", max_tokens=8,
                              temperature=0)
if c.object != "text_completion" or c.choices[0].finish_reason != "length" or \
        c.usage.completion_tokens != 8 or not c.choices[0].text:
    fail("completion: %r" % c)

msgs = [{"role": "user", "content": "Tell me a story"}]
chat = client.chat.completions.create(model="stories260K", messages=msgs, max_tokens=8,
                                      temperature=0)
whole = chat.choices[0].message.content
if chat.object != "chat.completion" or not whole:
    fail("chat: %r" % chat)

stream = client.chat.completions.create(model="stories260K", messages=msgs, max_tokens=8,
                                        temperature=0, stream=True,
                                        stream_options={"include_usage": True})
text, usage, finish = "", None, None
for chunk in stream:
    if chunk.choices:
        text += chunk.choices[0].delta.content or ""
        finish = chunk.choices[0].finish_reason or finish
    if chunk.usage:
        usage = chunk.usage
if text != whole or finish != "length" or usage is None or usage.completion_tokens != 8:
    fail("stream: %r vs %r, %r, %r" % (text, whole, finish, usage))

c1 = client.completions.create(model="stories260K", prompt="Once upon a time",
                               max_tokens=8, n=3, seed=11).choices
c2 = client.completions.create(model="stories260K", prompt="Once upon a time",
                               max_tokens=8, n=3, seed=11).choices
if sorted(c.index for c in c1) != [0, 1, 2] or [c.text for c in c1] != [c.text for c in c2]:
    fail("n=3: %r vs %r" % (c1, c2))
try:
    client.completions.create(model="stories260K", prompt="x", n=17)
    fail("n=17 was accepted")
except openai.BadRequestError:
    pass
try:
    client.completions.create(model="nope", prompt="x")
    fail("an unknown model was accepted")
except openai.NotFoundError:
    pass
print("openai python client: ok")
