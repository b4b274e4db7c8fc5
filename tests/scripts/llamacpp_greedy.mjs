// tests/scripts/llamacpp_greedy.mjs MODEL "IDS" N [TEXT] - llama.cpp (npm
// node-llama-cpp, its prebuilt CPU build) continues the prompt ids greedily
// for N tokens; prints {"tokens": [...], "tokenize": ids of TEXT or null}.
import { getLlama, LlamaLogLevel } from "node-llama-cpp";
const [modelPath, idsStr, n, text] = process.argv.slice(2);
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath });
const ctx = await model.createContext({ contextSize: 256, threads: 2 });
const seq = ctx.getSequence();
const ids = idsStr.split(" ").map(Number);
const out = [];
for await (const t of seq.evaluate(ids, { temperature: 0 })) {
  out.push(t);
  if (out.length >= Number(n)) break;
}
console.log(JSON.stringify({ tokens: out, tokenize: text ? Array.from(model.tokenize(text)) : null }));
await ctx.dispose(); await model.dispose(); await llama.dispose();
