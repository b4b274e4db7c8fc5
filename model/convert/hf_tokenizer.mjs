// model/convert/hf_tokenizer.mjs - a Hugging Face tokenizer.json (byte-level
// BPE: Llama 3, Qwen 2.5/3, SmolLM; or SentencePiece-style BPE with
// byte_fallback: Llama 2, Mistral 7B v0.1, TinyLlama) as GGUF vocabulary
// metadata, the keys llama.cpp's converter writes: tokenizer.ggml.{model,pre,
// tokens,scores,token_type,merges,bos_token_id,eos_token_id,unknown_token_id,
// padding_token_id,add_bos_token,add_eos_token} and tokenizer.chat_template.
// The JS twin of model/convert/hf_vocab.c (see there for the score rule).
// No dependencies (node >= 18).
//
//   node model/convert/hf_tokenizer.mjs tokenizer.json [tokenizer_config.json]
//        --out vocab.gguf [--pre llama-bpe|qwen2|smollm|gpt2] [--arch llama]
//
// The output is a GGUF with no tensors (general.type = vocab): moonlet's
// tokenizer tests open it, and `moonlet gen-model --vocab` copies its keys
// into a random model.
import fs from "fs";

const T_NORMAL = 1, T_UNKNOWN = 2, T_CONTROL = 3, T_USER = 4, T_UNUSED = 5, T_BYTE = 6;
const SP = "\u2581";

// The pre-tokenizer regexes of the families llama.cpp names (tokenizer.ggml.pre).
const LLAMA3_RE = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN2_RE = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

function flattenPre(p) {
  if (!p) return [];
  return p.type === "Sequence" ? p.pretokenizers.flatMap(flattenPre) : [p];
}

// The tokenizer.ggml.pre name of a tokenizer.json, or throws.
export function detectPre(tj) {
  const pres = flattenPre(tj.pre_tokenizer);
  const split = pres.find((p) => p.type === "Split");
  const re = split && split.pattern && split.pattern.Regex;
  if (re === LLAMA3_RE) return "llama-bpe";
  if (re === QWEN2_RE) return "qwen2";
  const bl = pres.find((p) => p.type === "ByteLevel");
  if (!split && bl && bl.use_regex !== false) {
    return pres.some((p) => p.type === "Digits" && p.individual_digits) ? "smollm" : "gpt2";
  }
  throw new Error(`unknown pre-tokenizer ${JSON.stringify(tj.pre_tokenizer).slice(0, 200)}: ` +
                  "pass --pre (llama-bpe, qwen2, smollm, gpt2)");
}

function tokenContent(v) {
  return v == null ? null : typeof v === "string" ? v : v.content;
}

// Whether a SentencePiece-style tokenizer.json prefixes "\u2581" and writes
// spaces as it (the legacy normalizer, or a Metaspace pre-tokenizer).
function spmShapeOk(tj) {
  const n = tj.normalizer, p = tj.pre_tokenizer;
  if (p && p.type === "Metaspace" && !n) {
    return p.replacement === SP && p.prepend_scheme !== "never" && p.add_prefix_space !== false;
  }
  if (!n || n.type !== "Sequence" || p) return false;
  let prepend = false, replace = false;
  for (const e of n.normalizers || []) {
    if (e.type === "Prepend" && e.prepend === SP) prepend = true;
    else if (e.type === "Replace" && e.pattern && e.pattern.String === " " && e.content === SP) replace = true;
    else return false;
  }
  return prepend && replace;
}

// A piece scores minus the rank of the first merge that makes it; pieces no
// merge makes score below every merge (NORMAL, by id) or 0 (hf_vocab.c).
function spmScores(tokens, types, merges) {
  const byPiece = new Map();
  tokens.forEach((t, i) => { if (!byPiece.has(t)) byPiece.set(t, i); });
  const scores = new Array(tokens.length).fill(null);
  merges.forEach((m, r) => {
    const sp = m.indexOf(" ");
    if (sp < 0) return;
    const id = byPiece.get(m.slice(0, sp) + m.slice(sp + 1));
    if (id !== undefined && scores[id] === null) scores[id] = -r;
  });
  return scores.map((v, i) => (v !== null ? v : types[i] === T_NORMAL ? -merges.length - i : 0));
}

// The vocabulary of a tokenizer.json (+ tokenizer_config.json): tokens, types,
// merges ("a b"), scores (SentencePiece-style), special ids and flags.
export function vocabFromHF(tj, cfg = {}, preOverride = null) {
  if (!tj.model || tj.model.type !== "BPE") {
    throw new Error(`model type ${tj.model && tj.model.type} is not BPE`);
  }
  const spm = tj.model.byte_fallback === true;
  if (!Array.isArray(tj.model.merges) || tj.model.merges.length === 0) {
    throw new Error("the BPE model has no merges");
  }
  if (spm && !spmShapeOk(tj)) {
    throw new Error("a SentencePiece-style BPE whose normalizer is not Prepend + Replace (nor Metaspace)");
  }
  const pre = spm ? "default" : preOverride || detectPre(tj);
  const vocab = tj.model.vocab;
  let n = 0;
  for (const id of Object.values(vocab)) n = Math.max(n, id + 1);
  for (const a of tj.added_tokens || []) n = Math.max(n, a.id + 1);
  const tokens = new Array(n).fill(null), types = new Array(n).fill(T_NORMAL);
  for (const [s, id] of Object.entries(vocab)) tokens[id] = s;
  for (const a of tj.added_tokens || []) {
    tokens[a.id] = a.content;
    types[a.id] = a.special ? T_CONTROL : T_USER;
  }
  for (let i = 0; i < n; i++) {
    if (tokens[i] === null) { tokens[i] = `[PAD${i}]`; types[i] = T_UNUSED; }
  }
  const merges = tj.model.merges.map((m) => (Array.isArray(m) ? m.join(" ") : m));
  const idOf = (v) => {
    const s = tokenContent(v);
    if (s == null) return null;
    const a = (tj.added_tokens || []).find((x) => x.content === s);
    return a ? a.id : vocab[s] ?? null;
  };
  const bos = idOf(cfg.bos_token), eos = idOf(cfg.eos_token), pad = idOf(cfg.pad_token);
  const unk = spm ? idOf(cfg.unk_token) ?? idOf(tj.model.unk_token) : null;
  let scores = null;
  if (spm) {
    tokens.forEach((t, i) => {
      if (types[i] === T_NORMAL && /^<0x[0-9A-Fa-f]{2}>$/.test(t)) types[i] = T_BYTE;
    });
    if (unk !== null) types[unk] = T_UNKNOWN;
    scores = spmScores(tokens, types, merges);
  }
  const template = JSON.stringify(tj.post_processor || {});
  let addBos = cfg.add_bos_token;
  if (addBos === undefined) addBos = spm || template.includes("TemplateProcessing") || pre === "llama-bpe";
  return {
    spm, scores, unk, pre, tokens, types, merges, bos: bos ?? eos, eos, pad,
    addBos: !!addBos, addEos: !!cfg.add_eos_token,
    chatTemplate: typeof cfg.chat_template === "string" ? cfg.chat_template : null,
    ignoreMerges: !!tj.model.ignore_merges,
  };
}

// ---- GGUF v3 (metadata only) ---------------------------------------------------
const G_U32 = 4, G_I32 = 5, G_F32 = 6, G_BOOL = 7, G_STRING = 8, G_ARRAY = 9;

class Writer {
  constructor() { this.parts = []; this.n = 0; }
  u32(v) { const b = Buffer.alloc(4); b.writeUInt32LE(v); this.parts.push(b); }
  i32(v) { const b = Buffer.alloc(4); b.writeInt32LE(v); this.parts.push(b); }
  f32(v) { const b = Buffer.alloc(4); b.writeFloatLE(v); this.parts.push(b); }
  u64(v) { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(v)); this.parts.push(b); }
  str(s) { const b = Buffer.from(s, "utf8"); this.u64(b.length); this.parts.push(b); }
  key(k, type) { this.str(k); this.u32(type); this.n++; }
}

// GGUF bytes of a vocabulary (plus general.* keys).
export function vocabToGGUF(v, arch = "llama", name = null) {
  const w = new Writer();
  w.key("general.architecture", G_STRING); w.str(arch);
  w.key("general.type", G_STRING); w.str("vocab");
  if (name) { w.key("general.name", G_STRING); w.str(name); }
  w.key("tokenizer.ggml.model", G_STRING); w.str(v.spm ? "llama" : "gpt2");
  w.key("tokenizer.ggml.pre", G_STRING); w.str(v.pre);
  w.key("tokenizer.ggml.tokens", G_ARRAY); w.u32(G_STRING); w.u64(v.tokens.length);
  for (const t of v.tokens) w.str(t);
  if (v.spm) {
    w.key("tokenizer.ggml.scores", G_ARRAY); w.u32(G_F32); w.u64(v.scores.length);
    for (const s of v.scores) w.f32(s);
  }
  w.key("tokenizer.ggml.token_type", G_ARRAY); w.u32(G_I32); w.u64(v.types.length);
  for (const t of v.types) w.i32(t);
  if (!v.spm) {
    w.key("tokenizer.ggml.merges", G_ARRAY); w.u32(G_STRING); w.u64(v.merges.length);
    for (const m of v.merges) w.str(m);
  }
  if (v.bos != null) { w.key("tokenizer.ggml.bos_token_id", G_U32); w.u32(v.bos); }
  if (v.eos != null) { w.key("tokenizer.ggml.eos_token_id", G_U32); w.u32(v.eos); }
  if (v.unk != null) { w.key("tokenizer.ggml.unknown_token_id", G_U32); w.u32(v.unk); }
  if (v.pad != null) { w.key("tokenizer.ggml.padding_token_id", G_U32); w.u32(v.pad); }
  w.key("tokenizer.ggml.add_bos_token", G_BOOL); w.parts.push(Buffer.from([v.addBos ? 1 : 0]));
  w.key("tokenizer.ggml.add_eos_token", G_BOOL); w.parts.push(Buffer.from([v.addEos ? 1 : 0]));
  if (v.chatTemplate) { w.key("tokenizer.chat_template", G_STRING); w.str(v.chatTemplate); }
  const head = Buffer.alloc(24);
  head.write("GGUF", 0, "latin1");
  head.writeUInt32LE(3, 4);
  head.writeBigUInt64LE(0n, 8);
  head.writeBigUInt64LE(BigInt(w.n), 16);
  return Buffer.concat([head, ...w.parts]);
}

function main(argv) {
  const pos = [], opt = {};
  for (let i = 0; i < argv.length; i++) {
    if (argv[i].startsWith("--")) opt[argv[i].slice(2)] = argv[++i];
    else pos.push(argv[i]);
  }
  if (pos.length < 1 || !opt.out) {
    console.error("usage: hf_tokenizer.mjs tokenizer.json [tokenizer_config.json] --out vocab.gguf " +
                  "[--pre NAME] [--arch ARCH] [--name NAME]");
    process.exit(2);
  }
  const tj = JSON.parse(fs.readFileSync(pos[0], "utf8"));
  const cfg = pos[1] ? JSON.parse(fs.readFileSync(pos[1], "utf8")) : {};
  const v = vocabFromHF(tj, cfg, opt.pre || null);
  fs.writeFileSync(opt.out, vocabToGGUF(v, opt.arch || "llama", opt.name || null));
  console.error(`${opt.out}: ${v.tokens.length} tokens, ${v.merges.length} merges, pre ${v.pre}, ` +
                `bos ${v.bos} eos ${v.eos} add_bos ${v.addBos}`);
}

if (import.meta.url === `file://${process.argv[1]}`) main(process.argv.slice(2));
