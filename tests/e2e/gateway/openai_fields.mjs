// tests/e2e/gateway/openai_fields.mjs - the official `openai` npm client
// against the gateway (test_gw_api runs it): penalties and logit_bias take
// effect, chat logprobs parse, and every field the server does not implement surfaces as the
// client's BadRequestError naming it. Exits 0 when everything matched.
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.env.MOON_GW_URL, apiKey: "none" });
const fail = (why) => { console.error("openai fields: " + why); process.exit(1); };
const base = { model: "stories260K", prompt: "Once upon a time", max_tokens: 40, temperature: 0 };

const plain = await client.completions.create(base);
const pen = await client.completions.create({ ...base, presence_penalty: 2, frequency_penalty: 2 });
if (pen.choices[0].text === plain.choices[0].text) fail("penalties changed nothing");
const forced = await client.completions.create({ ...base, max_tokens: 4, logit_bias: { "300": 100 } });
if (forced.usage.completion_tokens !== 4) fail("forced: " + JSON.stringify(forced));

const lp = await client.chat.completions.create({
    model: "stories260K", messages: [{ role: "user", content: "Hi" }], max_tokens: 5,
    temperature: 0, logprobs: true, top_logprobs: 3 });
const content = lp.choices[0].logprobs?.content ?? [];
if (content.length !== 5 || content.some((t) => t.logprob > 0 || t.top_logprobs.length !== 3))
    fail("chat logprobs: " + JSON.stringify(lp.choices[0].logprobs));

const chat = { model: "stories260K", messages: [{ role: "user", content: "Hi" }], max_tokens: 4 };
// refused: a field not implemented, or one whose value cannot be served
for (const [field, value] of [["guided_regex", "a+"], ["function_call", "auto"],
                              ["response_format", "json"],
                              ["tool_choice", "required"], ["grammar", "x"]]) {
    try {
        await client.chat.completions.create({ ...chat, [field]: value });
        fail(field + " was accepted");
    } catch (e) {
        if (!(e instanceof OpenAI.BadRequestError) || e.status !== 400 || e.param !== field)
            fail(field + ": " + e);
    }
}
console.log("openai fields: ok");
