#!/usr/bin/env python3
"""tests/scripts/hf_checkpoint.py - Hugging Face checkpoints for the converter's
tests, with the standard library only (no torch, no safetensors package).

  vocab DIR [--pre llama-bpe|qwen2|spm]  a small byte-level BPE tokenizer.json
                                      (+ tokenizer_config.json) in DIR; spm: a
                                      SentencePiece-style one (byte_fallback,
                                      as Llama 2 / Mistral ship)
  export MODEL.gguf DIR [--shards N]  the inverse of `moonlet convert --hf`:
                                      config.json + safetensors (HF names, HF
                                      Q/K layout) from a GGUF model; DIR keeps
                                      any tokenizer files already there
  compare A.gguf B.gguf               same tensors (names, types, shapes, bytes)
                                      and same tokenizer.* keys; exit 1 if not
  corrupt DIR KIND                    breaks DIR's checkpoint: noconfig, arch,
                                      truncated, badjson, dtype, unigram (the
                                      tokenizer's model), nomerges
"""
import json
import os
import re
import struct
import sys

# ---- GGUF (reader) ---------------------------------------------------------
SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
          10: "<Q", 11: "<q", 12: "<d"}
TYPE_SIZE = {0: (1, 4), 1: (1, 2), 30: (1, 2), 2: (32, 18), 8: (32, 34),
             12: (256, 144), 13: (256, 176), 14: (256, 210)}
ST_DTYPE = {0: "F32", 1: "F16", 30: "BF16"}


class Gguf:
    def __init__(self, path):
        with open(path, "rb") as f:
            self.buf = f.read()
        self.pos = 0
        magic, self.version, n_t, n_kv = struct.unpack_from("<4sIQQ", self.buf, 0)
        assert magic == b"GGUF", path
        self.pos = 24
        self.kv = {}     # key -> (type, raw bytes, value; a string array: its count)
        for _ in range(n_kv):
            key = self.string()
            t = self.u32()
            start = self.pos
            val = self.value(t)
            self.kv[key] = (t, self.buf[start:self.pos], val)
        infos = []
        for _ in range(n_t):
            name = self.string()
            nd = self.u32()
            ne = list(struct.unpack_from("<%dQ" % nd, self.buf, self.pos))
            self.pos += 8 * nd
            t, off = struct.unpack_from("<IQ", self.buf, self.pos)
            self.pos += 12
            infos.append((name, t, ne, off))
        align = self.kv.get("general.alignment", (0, b"", 32))[2]
        data = (self.pos + align - 1) // align * align
        self.tensors = {}
        self.order = []
        view = memoryview(self.buf)
        for name, t, ne, off in infos:
            n = 1
            for d in ne:
                n *= d
            blk, size = TYPE_SIZE[t]
            nbytes = n // blk * size
            self.tensors[name] = (t, ne, view[data + off:data + off + nbytes])  # no copy
            self.order.append(name)

    def u32(self):
        v = struct.unpack_from("<I", self.buf, self.pos)[0]
        self.pos += 4
        return v

    def string(self):
        n = struct.unpack_from("<Q", self.buf, self.pos)[0]
        s = self.buf[self.pos + 8:self.pos + 8 + n].decode("utf-8", "surrogateescape")
        self.pos += 8 + n
        return s

    def skip_strings(self, n):
        """Steps over n strings; their count stands for them (kv's raw bytes
        are what compare reads, and nothing reads a string array's items)."""
        buf, pos = self.buf, self.pos
        for _ in range(n):
            pos += 8 + int.from_bytes(buf[pos:pos + 8], "little")
        self.pos = pos
        return n

    def value(self, t):
        if t == 8:
            return self.string()
        if t == 9:
            et = self.u32()
            n = struct.unpack_from("<Q", self.buf, self.pos)[0]
            self.pos += 8
            if et in SCALAR and et != 7:  # numbers: one unpack (bools stay per item)
                fmt = "<%d%s" % (n, SCALAR[et][1])
                v = list(struct.unpack_from(fmt, self.buf, self.pos))
                self.pos += struct.calcsize(fmt)
                return v
            if et == 8:  # strings: a real tokenizer's 400k, compared by their bytes
                return self.skip_strings(n)
            return [self.value(et) for _ in range(n)]
        fmt = SCALAR[t]
        v = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return v

    def get(self, key, dflt=None):
        return self.kv[key][2] if key in self.kv else dflt


# ---- safetensors (writer) --------------------------------------------------
def write_safetensors(path, tensors):
    """tensors: list of (name, dtype, shape, bytes)."""
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for t in tensors:
            f.write(t[3])


LAYER = {"attn_norm.weight": "input_layernorm.weight", "attn_q.weight": "self_attn.q_proj.weight",
         "attn_k.weight": "self_attn.k_proj.weight", "attn_v.weight": "self_attn.v_proj.weight",
         "attn_q.bias": "self_attn.q_proj.bias", "attn_k.bias": "self_attn.k_proj.bias",
         "attn_v.bias": "self_attn.v_proj.bias", "attn_q_norm.weight": "self_attn.q_norm.weight",
         "attn_k_norm.weight": "self_attn.k_norm.weight",
         "attn_output.weight": "self_attn.o_proj.weight",
         "ffn_norm.weight": "post_attention_layernorm.weight",
         "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_down.weight": "mlp.down_proj.weight",
         "ffn_up.weight": "mlp.up_proj.weight"}
TOP = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
       "output.weight": "lm_head.weight"}
ARCHS = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}


def hf_name(name):
    if name in TOP:
        return TOP[name]
    m = re.match(r"blk\.(\d+)\.(.*)$", name)
    return "model.layers.%s.%s" % (m.group(1), LAYER[m.group(2)])


def unpermute(data, rows, heads):
    """GGUF llama rows (adjacent rotary pairs) back to HF's (rotated halves)."""
    rb = len(data) // rows
    hd = rows // heads
    out = [None] * rows
    for r in range(rows):
        h, k, j = r // hd, (r % hd) // 2, r % 2
        out[h * hd + j * (hd // 2) + k] = data[r * rb:(r + 1) * rb]
    return b"".join(out)


def export(model, out, shards=1):
    g = Gguf(model)
    arch = g.get("general.architecture")
    a = lambda k, d=None: g.get("%s.%s" % (arch, k), d)
    heads, kv_heads = a("attention.head_count"), a("attention.head_count_kv")
    dim = a("embedding_length")
    cfg = {"architectures": [ARCHS[arch]], "model_type": arch, "hidden_size": dim,
           "num_hidden_layers": a("block_count"), "num_attention_heads": heads,
           "num_key_value_heads": kv_heads, "intermediate_size": a("feed_forward_length"),
           "rms_norm_eps": a("attention.layer_norm_rms_epsilon"),
           "rope_theta": a("rope.freq_base", 10000.0),
           "max_position_embeddings": a("context_length"),
           "vocab_size": g.tensors["token_embd.weight"][1][1],
           "tie_word_embeddings": "output.weight" not in g.tensors,
           "head_dim": a("attention.key_length", a("rope.dimension_count", dim // heads)),
           "torch_dtype": "float32"}
    if "rope_freqs.weight" in g.tensors:   # gen-model's Llama 3.1 factors
        cfg["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0,
                               "original_max_position_embeddings": 8192}
    tensors = []
    for name in g.order:
        if name == "rope_freqs.weight":
            continue
        t, ne, data = g.tensors[name]
        shape = list(reversed(ne))
        if arch == "llama" and name.endswith(("attn_q.weight", "attn_k.weight")):
            data = unpermute(data, shape[0], heads if "attn_q" in name else kv_heads)
        tensors.append((hf_name(name), ST_DTYPE[t], shape, data))
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    if shards == 1:
        write_safetensors(os.path.join(out, "model.safetensors"), tensors)
        return
    per = (len(tensors) + shards - 1) // shards
    wmap = {}
    for i in range(shards):
        fn = "model-%05d-of-%05d.safetensors" % (i + 1, shards)
        part = tensors[i * per:(i + 1) * per]
        write_safetensors(os.path.join(out, fn), part)
        for t in part:
            wmap[t[0]] = fn
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": wmap}, f, indent=2)


def compare(pa, pb):
    a, b = Gguf(pa), Gguf(pb)
    bad = 0
    if sorted(a.tensors) != sorted(b.tensors):
        print("tensor names differ: only in %s: %s; only in %s: %s" % (
            pa, sorted(set(a.tensors) - set(b.tensors)), pb, sorted(set(b.tensors) - set(a.tensors))))
        bad = 1
    for name in sorted(set(a.tensors) & set(b.tensors)):
        if a.tensors[name] != b.tensors[name]:
            ta, tb = a.tensors[name], b.tensors[name]
            print("tensor %s differs (type %d/%d, shape %s/%s)" % (name, ta[0], tb[0], ta[1], tb[1]))
            bad = 1
    for key in sorted(k for k in set(a.kv) | set(b.kv) if k.startswith("tokenizer.")):
        if a.kv.get(key, (None, None))[:2] != b.kv.get(key, (None, None))[:2]:
            print("key %s differs" % key)
            bad = 1
    arch = a.get("general.architecture")
    for key in sorted(k for k in a.kv if k.startswith(arch + ".")):
        if key in b.kv and a.kv[key][2] != b.kv[key][2]:
            print("key %s differs: %r / %r" % (key, a.kv[key][2], b.kv[key][2]))
            bad = 1
    print("%s and %s: %d tensors %s" % (pa, pb, len(a.tensors),
                                        "bit-identical, same tokenizer" if not bad else "DIFFER"))
    return bad


# ---- a small byte-level BPE vocabulary --------------------------------------
LLAMA3_RE = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?"
             "[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
QWEN2_RE = LLAMA3_RE.replace("\\p{N}{1,3}", "\\p{N}")
TEXT = ("Once upon a time there was a little girl who lived in a village near the forest. "
        "Whenever she went out, the little girl wore a red riding cloak, so everyone in the "
        "village called her Little Red Riding Hood. One morning she asked her mother if she "
        "could go to visit her grandmother as it had been a while since they had seen each other.")


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def learn_merges(words, tokens, n_merges):
    """BPE training: the most frequent adjacent pair merges, n_merges times
    (words, lists of symbols, merged in place); each merge's piece is
    appended to tokens. Returns the merges, (a, b) pairs in rank order."""
    merges = []
    while len(merges) < n_merges:
        counts = {}
        for w in words:
            for p in zip(w, w[1:]):
                counts[p] = counts.get(p, 0) + 1
        if not counts:
            break
        best = max(sorted(counts), key=lambda p: counts[p])
        merges.append(best)
        tokens.append(best[0] + best[1])
        for w in words:
            i = 0
            while i < len(w) - 1:
                if (w[i], w[i + 1]) == best:
                    w[i:i + 2] = [best[0] + best[1]]
                i += 1
    return merges


def vocab(out, pre="llama-bpe", n_merges=240):
    b2u = bytes_to_unicode()
    tokens = [b2u[b] for b in range(256)]
    words = [[b2u[c] for c in w.encode()] for w in re.findall(r" ?[A-Za-z]+| ?[^A-Za-z ]+", TEXT)]
    merges = learn_merges(words, tokens, n_merges)
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
    added = [{"id": len(tokens) + i, "content": s, "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True} for i, s in enumerate(specials)]
    tj = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
          "normalizer": None,
          "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
              {"type": "Split", "pattern": {"Regex": LLAMA3_RE if pre == "llama-bpe" else QWEN2_RE},
               "behavior": "Isolated", "invert": False},
              {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
               "use_regex": False}]},
          "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                             "use_regex": True},
          "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                      "use_regex": True},
          "model": {"type": "BPE", "dropout": None, "unk_token": None,
                    "continuing_subword_prefix": None, "end_of_word_suffix": None,
                    "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                    "vocab": {t: i for i, t in enumerate(tokens)},
                    "merges": [[a, b] for a, b in merges]}}
    tc = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "add_bos_token": True,
          "chat_template": "{% for m in messages %}<|begin_of_text|>{{ m['role'] }}: "
                           "{{ m['content'] }}<|eot_id|>{% endfor %}"}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False)
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tc, f, ensure_ascii=False)


def vocab_spm(out, n_merges=240):
    """Llama 2's shape: <unk> <s> </s>, the 256 <0xXX> byte fallbacks, the
    characters, then a piece per merge learnt on the "\u2581"-prefixed words."""
    sp = "\u2581"
    words = [list(sp + w) for w in TEXT.split(" ")]
    tokens = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    tokens += sorted(set(c for w in words for c in w))
    merges = learn_merges(words, tokens, n_merges)
    added = [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, s in enumerate(tokens[:3])]
    tj = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
          "normalizer": {"type": "Sequence", "normalizers": [
              {"type": "Prepend", "prepend": sp},
              {"type": "Replace", "pattern": {"String": " "}, "content": sp}]},
          "pre_tokenizer": None,
          "post_processor": {"type": "TemplateProcessing", "single": [
              {"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
              "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
          "decoder": {"type": "Sequence", "decoders": [
              {"type": "Replace", "pattern": {"String": sp}, "content": " "},
              {"type": "ByteFallback"}, {"type": "Fuse"},
              {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
          "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                    "continuing_subword_prefix": None, "end_of_word_suffix": None,
                    "fuse_unk": True, "byte_fallback": True,
                    "vocab": {t: i for i, t in enumerate(tokens)},
                    "merges": ["%s %s" % m for m in merges]}}
    tc = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True,
          "add_eos_token": False, "legacy": True,
          "chat_template": "{% for m in messages %}<s>{{ m['content'] }}</s>{% endfor %}"}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False)
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tc, f, ensure_ascii=False)


def corrupt(d, kind):
    st = os.path.join(d, "model.safetensors")
    if kind == "noconfig":
        os.remove(os.path.join(d, "config.json"))
    elif kind == "arch":
        p = os.path.join(d, "config.json")
        cfg = json.load(open(p))
        cfg["architectures"] = ["GPTNeoXForCausalLM"]
        json.dump(cfg, open(p, "w"))
    elif kind == "truncated":
        size = os.path.getsize(st)
        with open(st, "r+b") as f:
            f.truncate(size - 100)
    elif kind in ("badjson", "dtype"):
        buf = open(st, "rb").read()
        n = struct.unpack_from("<Q", buf)[0]
        h = buf[8:8 + n]
        h = h.replace(b'"F32"', b'"I64"', 1) if kind == "dtype" else h[:n // 2] + b"{" * (n - n // 2)
        assert len(h) == n
        open(st, "wb").write(buf[:8] + h + buf[8 + n:])
    elif kind in ("unigram", "nomerges"):
        p = os.path.join(d, "tokenizer.json")
        tj = json.load(open(p, encoding="utf-8"))
        if kind == "unigram":
            tj["model"]["type"] = "Unigram"
        else:
            tj["model"]["byte_fallback"] = True
            del tj["model"]["merges"]
        json.dump(tj, open(p, "w", encoding="utf-8"), ensure_ascii=False)
    else:
        sys.exit("unknown corruption " + kind)


def main(argv):
    if len(argv) >= 2 and argv[0] == "vocab":
        pre = argv[argv.index("--pre") + 1] if "--pre" in argv else "llama-bpe"
        if pre == "spm":
            vocab_spm(argv[1])
        else:
            vocab(argv[1], pre)
    elif len(argv) >= 3 and argv[0] == "export":
        export(argv[1], argv[2], int(argv[argv.index("--shards") + 1]) if "--shards" in argv else 1)
    elif len(argv) == 3 and argv[0] == "compare":
        return compare(argv[1], argv[2])
    elif len(argv) == 3 and argv[0] == "corrupt":
        corrupt(argv[1], argv[2])
    else:
        sys.exit(__doc__)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
