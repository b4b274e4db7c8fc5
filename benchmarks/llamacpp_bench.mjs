// benchmarks/llamacpp_bench.mjs MODEL THREADS BENCH BATCH N [CTX|ITERS] - llama.cpp
// (npm node-llama-cpp, prebuilt CPU) on the shapes bench_model measures:
//   decode BATCH N: BATCH sequences in one context, each given a CTX-token
//     prompt (64), then N greedy steps each, all sequences evaluated in
//     parallel so llama.cpp batches them into one decode per step; the rate
//     is BATCH * N over the steps' time (aggregate tokens/s)
//   prefill 1 N [ITERS]: one N-token prompt evaluated at once (batchSize N),
//     best of max(2, ITERS / 8 + 1) runs, as bench_model --bench=prefill
// Prints {"tokens_per_s", "rss_mib"} (rss: this node process, runtime
// included, after the run). Prompt tokens are a fixed pseudo-random draw.
import { getLlama, LlamaLogLevel } from "node-llama-cpp";
const [modelPath, threadsArg, bench, batchArg, nArg, ctxArg] = process.argv.slice(2);
const threads = Number(threadsArg), batch = Number(batchArg), n = Number(nArg);
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath });
const vocab = model.fileInfo.metadata?.tokenizer?.ggml?.tokens?.length ?? 256;
let rng = 1n;
const draw = (k) => Array.from({ length: k }, () => {
  rng = (rng * 6364136223846793005n + 1442695040888963407n) & 0xffffffffffffffffn;
  return 2 + Number((rng >> 33n) % BigInt(vocab - 2));
});
let rate;
if (bench === "prefill") {
  const reps = Math.max(2, Math.floor(Number(ctxArg ?? 16) / 8) + 1);
  const ctx = await model.createContext({ contextSize: n + 64, batchSize: n, threads });
  const seq = ctx.getSequence(), prompt = draw(n);
  let best = Infinity;
  for (let r = 0; r < reps; r++) {
    await seq.clearHistory();
    const t0 = performance.now();
    await seq.evaluateWithoutGeneratingNewTokens(prompt);
    best = Math.min(best, (performance.now() - t0) / 1000);
  }
  rate = n / best;
  await ctx.dispose();
} else {
  const plen = Number(ctxArg ?? 64);
  const ctx = await model.createContext({ sequences: batch, contextSize: plen + n + 16,
    batchSize: 512, threads });
  const seqs = Array.from({ length: batch }, () => ctx.getSequence());
  const prompts = seqs.map(() => draw(plen));
  /* the context, as bench_model prefills it before timing decode */
  await Promise.all(seqs.map((s, i) => s.evaluateWithoutGeneratingNewTokens(prompts[i].slice(0, -1))));
  const t0 = performance.now();
  await Promise.all(seqs.map(async (s, i) => {
    let k = 0;
    for await (const t of s.evaluate(prompts[i].slice(-1), { temperature: 0 })) {
      if (++k >= n) break;
    }
  }));
  rate = (batch * n) / ((performance.now() - t0) / 1000);
  await ctx.dispose();
}
console.log(JSON.stringify({ tokens_per_s: rate, rss_mib: process.memoryUsage().rss / 1048576 }));
await model.dispose(); await llama.dispose();
