// tests/unit/gateway/openai_client.mjs - the official `openai` npm client
// against the gateway (test_gateway runs it): a completion, a chat, a
// streamed chat with usage, and an API error surfacing as the client's
// own error class. Exits 0 when everything matched.
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.env.MOON_GW_URL, apiKey: "none" });
const fail = (why) => { console.error("openai client: " + why); process.exit(1); };

const models = await client.models.list();
if (models.data[0].id !== "stories260K") fail("models: " + JSON.stringify(models.data));

const c = await client.completions.create({
    model: "stories260K", prompt: "Once upon a time", max_tokens: 8, temperature: 0 });
if (c.object !== "text_completion" || c.choices[0].finish_reason !== "length" ||
    c.usage.completion_tokens !== 8 || !c.choices[0].text) fail("completion: " + JSON.stringify(c));

const chat = await client.chat.completions.create({
    model: "stories260K", messages: [{ role: "user", content: "Tell me a story" }],
    max_tokens: 8, temperature: 0 });
const whole = chat.choices[0].message.content;
if (chat.object !== "chat.completion" || !whole) fail("chat: " + JSON.stringify(chat));

const stream = await client.chat.completions.create({
    model: "stories260K", messages: [{ role: "user", content: "Tell me a story" }],
    max_tokens: 8, temperature: 0, stream: true, stream_options: { include_usage: true } });
let text = "", usage = null, finish = null;
for await (const chunk of stream) {
    if (chunk.choices.length > 0) {
        text += chunk.choices[0].delta.content ?? "";
        finish = chunk.choices[0].finish_reason ?? finish;
    }
    if (chunk.usage) usage = chunk.usage;
}
if (text !== whole || finish !== "length" || !usage || usage.completion_tokens !== 8)
    fail(`stream: ${JSON.stringify(text)} vs ${JSON.stringify(whole)}, ${finish}, ${JSON.stringify(usage)}`);

// n = 3 with a seed: three choices, indexes 0..2, the same again; streamed,
// every index finishes
const three = async () => (await client.completions.create({
    model: "stories260K", prompt: "Once upon a time", max_tokens: 8, n: 3, seed: 11 })).choices;
const c1 = await three(), c2 = await three();
if (c1.length !== 3 || c1.map((c) => c.index).sort().join() !== "0,1,2" ||
    JSON.stringify(c1) !== JSON.stringify(c2))
    fail(`n=3: ${JSON.stringify(c1)} vs ${JSON.stringify(c2)}`);
const s3 = await client.completions.create({
    model: "stories260K", prompt: "Once upon a time", max_tokens: 8, n: 3, seed: 11, stream: true });
const ended = new Set();
for await (const chunk of s3) {
    for (const c of chunk.choices) if (c.finish_reason) ended.add(c.index);
}
if (ended.size !== 3) fail(`n=3 streamed: finished ${[...ended]}`);
try {
    await client.completions.create({ model: "stories260K", prompt: "x", n: 17 });
    fail("n=17 was accepted");
} catch (e) {
    if (!(e instanceof OpenAI.BadRequestError) || e.status !== 400) fail("error: " + e);
}
try {
    await client.completions.create({ model: "nope", prompt: "x" });
    fail("an unknown model was accepted");
} catch (e) {
    if (!(e instanceof OpenAI.NotFoundError)) fail("error: " + e);
}
console.log("openai client: ok");
