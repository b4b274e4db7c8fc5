#!/usr/bin/env python3
"""Independent NumPy Llama forward pass over a GGUF v3 file (F32 tensors), used
by tests/unit/model/test_numpy_xcheck.c to cross-check Moonlet's logits.
usage: numpy_llama.py MODEL.gguf OUT.f32 TOKEN [TOKEN...]
Writes the logits of every position, float32, (n_tokens, vocab), row-major."""
import struct
import sys

import numpy as np


def read_gguf(path):
    d = open(path, "rb").read()
    o = 0

    def rd(fmt):
        nonlocal o
        v = struct.unpack_from("<" + fmt, d, o)
        o += struct.calcsize("<" + fmt)
        return v[0]

    def rs():
        nonlocal o
        n = rd("Q")
        s = d[o:o + n]
        o += n
        return s.decode("utf-8", "replace")

    fm = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def rv(t):
        if t == 8:
            return rs()
        if t == 9:
            et, n = rd("I"), rd("Q")
            return [rv(et) for _ in range(n)]
        return rd(fm[t])

    assert rd("I") == 0x46554747 and rd("I") == 3
    nt, nk = rd("Q"), rd("Q")
    kv = {}
    for _ in range(nk):
        k = rs()
        kv[k] = rv(rd("I"))
    infos = []
    for _ in range(nt):
        name = rs()
        nd = rd("I")
        ne = [rd("Q") for _ in range(nd)]
        ty, off = rd("I"), rd("Q")
        assert ty == 0, "F32 tensors only"
        infos.append((name, ne, off))
    al = kv.get("general.alignment", 32)
    base = (o + al - 1) // al * al
    t = {}
    for name, ne, off in infos:
        cnt = int(np.prod(ne))
        a = np.frombuffer(d, dtype="<f4", count=cnt, offset=base + off)
        t[name] = a.reshape(list(reversed(ne))) if len(ne) > 1 else a
    return kv, t


def main():
    path, out = sys.argv[1], sys.argv[2]
    toks = [int(x) for x in sys.argv[3:]]
    kv, t = read_gguf(path)
    dim = kv["llama.embedding_length"]
    L = kv["llama.block_count"]
    nh = kv["llama.attention.head_count"]
    nkv = kv.get("llama.attention.head_count_kv", nh)
    eps = kv["llama.attention.layer_norm_rms_epsilon"]
    theta = kv.get("llama.rope.freq_base", 10000.0)
    hs = dim // nh
    n = len(toks)
    emb = t["token_embd.weight"].astype(np.float64)
    wcls = t.get("output.weight", t["token_embd.weight"]).astype(np.float64)

    def rms(x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w

    # RoPE on adjacent pairs within each head
    pos = np.arange(n)[:, None]
    freq = 1.0 / theta ** (np.arange(0, hs, 2) / hs)
    ang = pos * freq[None, :]
    cos, sin = np.cos(ang), np.sin(ang)

    def rope(x, heads):
        x = x.reshape(n, heads, hs // 2, 2)
        a, b = x[..., 0], x[..., 1]
        c, s = cos[:, None, :], sin[:, None, :]
        return np.stack([a * c - b * s, a * s + b * c], axis=-1).reshape(n, heads * hs)

    x = emb[toks]
    mask = np.triu(np.full((n, n), -np.inf), 1)
    for l in range(L):
        p = "blk.%d." % l
        W = lambda s: t[p + s + ".weight"].astype(np.float64)
        h = rms(x, W("attn_norm"))
        q = rope(h @ W("attn_q").T, nh)
        k = rope(h @ W("attn_k").T, nkv)
        v = h @ W("attn_v").T
        q = q.reshape(n, nh, hs).transpose(1, 0, 2)
        k = np.repeat(k.reshape(n, nkv, hs).transpose(1, 0, 2), nh // nkv, axis=0)
        v = np.repeat(v.reshape(n, nkv, hs).transpose(1, 0, 2), nh // nkv, axis=0)
        s = q @ k.transpose(0, 2, 1) / np.sqrt(hs) + mask
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        s /= s.sum(axis=-1, keepdims=True)
        a = (s @ v).transpose(1, 0, 2).reshape(n, dim)
        x = x + a @ W("attn_output").T
        h = rms(x, W("ffn_norm"))
        g = h @ W("ffn_gate").T
        x = x + ((g / (1 + np.exp(-g))) * (h @ W("ffn_up").T)) @ W("ffn_down").T
    logits = rms(x, t["output_norm.weight"]) @ wcls.T
    logits.astype("<f4").tofile(out)


if __name__ == "__main__":
    main()
