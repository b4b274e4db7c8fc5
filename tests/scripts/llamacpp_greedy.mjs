// tests/scripts/llamacpp_greedy.mjs MODEL "IDS" N [TEXT] - llama.cpp (npm
// node-llama-cpp, its prebuilt CPU build) continues the prompt ids greedily
// for N tokens; prints {"tokens": [...], "tokenize": ids of TEXT or null}.
// llamacpp_greedy.mjs --jobs FILE: the same for each line of FILE (MODEL, IDS,
// N and TEXT separated by tabs; TEXT may be empty) in one process (starting
// llama.cpp took about 2 s of each run): one JSON line per job, in order, with
// {"error": ...} in place of the tokens when its model did not load or run.
import fs from "fs";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

async function greedy(llama, modelPath, idsStr, n, text) {
  const model = await llama.loadModel({ modelPath });
  const ctx = await model.createContext({ contextSize: 256, threads: 2 });
  const seq = ctx.getSequence();
  const ids = idsStr.split(" ").map(Number);
  const out = [];
  for await (const t of seq.evaluate(ids, { temperature: 0 })) {
    out.push(t);
    if (out.length >= Number(n)) break;
  }
  const tokenize = text ? Array.from(model.tokenize(text)) : null;
  await ctx.dispose(); await model.dispose();
  return { tokens: out, tokenize };
}

const args = process.argv.slice(2);
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
if (args[0] === "--jobs") {
  const jobs = fs.readFileSync(args[1], "utf8").split("\n").filter((l) => l.length > 0);
  for (const job of jobs) {
    const [modelPath, idsStr, n, text] = job.split("\t");
    try {
      console.log(JSON.stringify(await greedy(llama, modelPath, idsStr, n, text)));
    } catch (e) {
      console.error(`${modelPath}: ${e.stack || e}`);
      console.log(JSON.stringify({ error: String(e.message || e) }));
    }
  }
} else {
  const [modelPath, idsStr, n, text] = args;
  console.log(JSON.stringify(await greedy(llama, modelPath, idsStr, n, text)));
}
await llama.dispose();
