// tests/e2e/batch/batch_client.mjs INPUT OUT_DIR - the official `openai` npm
// client against the gateway's Batch API (test_batchapi runs it, MOON_GW_URL
// set): files.create, batches.create, batches.retrieve until completed,
// files.content of the output and error files (written to OUT_DIR as
// output.jsonl and errors.jsonl for the test to check), files.list and
// batches.list, and a batch cancelled. Exits 0 when everything matched.
import fs from "node:fs";
import OpenAI from "openai";

const [input, outDir] = process.argv.slice(2);
const client = new OpenAI({ baseURL: process.env.MOON_GW_URL, apiKey: "none" });
const fail = (why) => { console.error("openai batch client: " + why); process.exit(1); };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function poll(id, done, deadlineS) {
    const t0 = Date.now();
    for (;;) {
        const b = await client.batches.retrieve(id);
        if (done.includes(b.status)) return b;
        if (["failed", "expired"].includes(b.status)) fail("batch " + JSON.stringify(b));
        if (Date.now() - t0 > deadlineS * 1000) fail("no end in " + deadlineS + " s: " + JSON.stringify(b));
        await sleep(200);
    }
}

const file = await client.files.create({ file: fs.createReadStream(input), purpose: "batch" });
if (file.object !== "file" || file.purpose !== "batch" || !file.id.startsWith("file-") ||
    file.bytes !== fs.statSync(input).size) fail("files.create: " + JSON.stringify(file));

const created = await client.batches.create({
    input_file_id: file.id, endpoint: "/v1/completions", completion_window: "24h",
    metadata: { test: "npm" } });
if (created.object !== "batch" || created.input_file_id !== file.id || created.metadata.test !== "npm")
    fail("batches.create: " + JSON.stringify(created));

const b = await poll(created.id, ["completed"], 240);
const rc = b.request_counts;
if (!b.output_file_id || rc.total !== rc.completed + rc.failed || rc.completed === 0 ||
    !b.completed_at || !b.in_progress_at || !b.finalizing_at)
    fail("completed batch: " + JSON.stringify(b));

const out = await client.files.content(b.output_file_id);
fs.writeFileSync(outDir + "/output.jsonl", await out.text());
if (b.error_file_id) {
    const err = await client.files.content(b.error_file_id);
    fs.writeFileSync(outDir + "/errors.jsonl", await err.text());
}
fs.writeFileSync(outDir + "/batch.json", JSON.stringify(b));

const files = [];
for await (const f of client.files.list()) files.push(f.id);
if (!files.includes(file.id) || !files.includes(b.output_file_id)) fail("files.list: " + files);
const batches = [];
for await (const x of client.batches.list()) batches.push(x.id);
if (!batches.includes(b.id)) fail("batches.list: " + batches);
const got = await client.files.retrieve(file.id);
if (got.id !== file.id || got.filename === undefined) fail("files.retrieve: " + JSON.stringify(got));

// cancel: a batch cancelled at once ends cancelled, whatever it answered
const second = await client.batches.create({
    input_file_id: file.id, endpoint: "/v1/completions", completion_window: "24h" });
const cancelling = await client.batches.cancel(second.id);
if (!["cancelling", "cancelled"].includes(cancelling.status)) fail("cancel: " + JSON.stringify(cancelling));
const cancelled = await poll(second.id, ["cancelled"], 120);
if (!cancelled.cancelled_at) fail("cancelled: " + JSON.stringify(cancelled));

try {
    await client.batches.retrieve("batch_nope");
    fail("an unknown batch was found");
} catch (e) {
    if (!(e instanceof OpenAI.NotFoundError)) fail("unknown batch: " + e);
}
try {
    await client.batches.create({ input_file_id: "file-nope", endpoint: "/v1/completions",
                                  completion_window: "24h" });
    fail("an unknown file was accepted");
} catch (e) {
    if (!(e instanceof OpenAI.NotFoundError)) fail("unknown file: " + e);
}
const del = await client.files.del(file.id);
if (!del.deleted) fail("files.del: " + JSON.stringify(del));
console.log("openai batch client: ok (" + rc.completed + " completed, " + rc.failed + " failed)");
