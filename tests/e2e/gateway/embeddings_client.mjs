// tests/e2e/gateway/embeddings_client.mjs - the official `openai` npm client's
// client.embeddings.create against the gateway (test_gw_embed runs it): one
// input and a batch, float and base64 (the client decodes it), unit norms.
// Exits 0 when everything matched.
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.env.MOON_GW_URL, apiKey: "none" });
const fail = (why) => { console.error("openai embeddings: " + why); process.exit(1); };
const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));

const one = await client.embeddings.create({ model: "stories260K", input: "Once upon a time",
                                             encoding_format: "float" });
const v = one.data[0].embedding;
if (one.object !== "list" || one.data.length !== 1 || v.length !== 64) fail(JSON.stringify(one));
if (Math.abs(norm(v) - 1) > 1e-5) fail("norm " + norm(v));
if (!(one.usage.prompt_tokens > 0) || one.usage.total_tokens !== one.usage.prompt_tokens)
    fail("usage " + JSON.stringify(one.usage));
// the client's default asks base64 and decodes it itself
const many = await client.embeddings.create({ model: "stories260K",
                                              input: ["Once upon a time", "Lily", "a dog"] });
if (many.data.length !== 3 || many.data.some((d, i) => d.index !== i)) fail("order");
const w = many.data[0].embedding;
if (w.length !== 64 || w.some((x, i) => Math.abs(x - v[i]) > 1e-6)) fail("base64 differs");
console.log("openai embeddings: ok");
