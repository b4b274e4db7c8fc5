// benchmarks/llamacpp_decode.mjs MODEL THREADS N - llama.cpp (npm
// node-llama-cpp, prebuilt CPU) decodes N tokens greedily at batch 1 after a
// one-token prompt; prints {"tokens_per_s", "rss_mib"} (rss: this node process,
// runtime included, after the run).
import { getLlama, LlamaLogLevel } from "node-llama-cpp";
const [modelPath, threads, n] = process.argv.slice(2);
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath });
const ctx = await model.createContext({ contextSize: 512, threads: Number(threads), batchSize: 512 });
const seq = ctx.getSequence();
let k = 0, t0 = 0;
for await (const t of seq.evaluate([1], { temperature: 0 })) {
  if (k === 0) t0 = performance.now(); /* the prompt's step is not decode */
  if (++k > Number(n)) break;
}
const s = (performance.now() - t0) / 1000;
console.log(JSON.stringify({ tokens_per_s: Number(n) / s, rss_mib: process.memoryUsage().rss / 1048576 }));
await ctx.dispose(); await model.dispose(); await llama.dispose();
