// tests/scripts/llamacpp_tokenize.mjs MODEL CORPUS... - llama.cpp (npm
// node-llama-cpp) tokenizes every case of the corpora (cases split by
// "\n%%\n", the files' cases one after the other), special tokens parsed, no
// BOS; prints one line of ids per case, as the tokenizer goldens are written.
import fs from "fs";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";
const [modelPath, ...corpora] = process.argv.slice(2);
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath, vocabOnly: true });
const cases = corpora.flatMap((f) => fs.readFileSync(f, "utf8").split("\n%%\n"));
console.log(cases.map((c) => Array.from(model.tokenize(c, true)).join(" ")).join("\n"));
await model.dispose(); await llama.dispose();
