// tests/e2e/gateway/tools_client.mjs - the official `openai` npm client and
// tool calls (test_gw_tools runs it against a model of each tool syntax): a
// forced call whose arguments parse and match the schema, the same streamed
// (the deltas accumulated as the client's docs do), and a two-turn loop that
// sends the call and the tool's result back and gets another call. Exits 0
// when everything matched.
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.env.MOON_GW_URL, apiKey: "none" });
const fail = (why) => { console.error("tools client: " + why); process.exit(1); };

const tools = [{
    type: "function",
    function: {
        name: "weather", description: "The weather in a city",
        parameters: {
            type: "object", required: ["city", "days"],
            properties: { city: { type: "string", maxLength: 6 }, days: { type: "integer", minimum: 1 } },
        },
    },
}];
const check = (call, where) => {
    if (call.type !== "function" || !call.id || call.function.name !== "weather")
        fail(`${where}: ${JSON.stringify(call)}`);
    const a = JSON.parse(call.function.arguments);
    if (typeof a.city !== "string" || a.city.length > 6 || !Number.isInteger(a.days) || a.days < 1 ||
        Object.keys(a).length !== 2)
        fail(`${where}: arguments ${call.function.arguments}`);
};
const ask = [{ role: "user", content: "Weather in Paris?" }];
const model = (await client.models.list()).data[0].id;

const whole = await client.chat.completions.create({
    model, messages: ask, tools, tool_choice: "required", parallel_tool_calls: false,
    temperature: 0.8, seed: 7 });
const msg = whole.choices[0].message;
if (whole.choices[0].finish_reason !== "tool_calls" || msg.content !== null || msg.tool_calls.length !== 1)
    fail("required: " + JSON.stringify(whole));
check(msg.tool_calls[0], "required");

const stream = await client.chat.completions.create({
    model, messages: ask, tools, tool_choice: { type: "function", function: { name: "weather" } },
    temperature: 0.8, seed: 8, stream: true });
const calls = [];
let finish = null;
for await (const chunk of stream) {
    const d = chunk.choices[0]?.delta ?? {};
    if (d.content) fail("content in a forced call: " + d.content);
    for (const t of d.tool_calls ?? []) {
        calls[t.index] ??= { id: t.id, type: t.type, function: { name: "", arguments: "" } };
        calls[t.index].function.name += t.function?.name ?? "";
        calls[t.index].function.arguments += t.function?.arguments ?? "";
    }
    finish = chunk.choices[0]?.finish_reason ?? finish;
}
if (calls.length !== 1 || finish !== "tool_calls") fail(`streamed: ${JSON.stringify(calls)} ${finish}`);
check(calls[0], "streamed");

// the loop: the call and its result back, then another call
const again = await client.chat.completions.create({
    model, tools, tool_choice: "required", parallel_tool_calls: false, temperature: 0.8, seed: 9,
    messages: [...ask, msg, { role: "tool", tool_call_id: msg.tool_calls[0].id, content: "sunny, 21C" },
               { role: "user", content: "And in Rome?" }] });
if (again.choices[0].message.tool_calls?.length !== 1) fail("second turn: " + JSON.stringify(again));
check(again.choices[0].message.tool_calls[0], "second turn");
console.log("tools client: required, streamed and a two-turn loop matched");
