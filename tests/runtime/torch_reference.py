#!/usr/bin/python3
"""An independent PyTorch (Python) implementation of weft's GPT-2 and Llama decoders, for the
runtime's reference test. Reads a weft model JSON, a weft-params file, and the batch settings;
builds the same synthetic batch as weft's data source (SplitMix64 keyed by seed, step, index),
and prints {"loss": .., "grad_norm": ..} of one forward/backward in fp32. tests/runtime/torch_adamw.py
imports its model (logits), data (sample) and parameter reader.

Written from the published architectures (GPT-2: pre-LN, learned positions, tanh GELU; Llama:
RMSNorm, rotate-half RoPE with base 10000, SwiGLU, grouped-query attention), not from weft's code.
"""
import json
import math
import sys

import numpy as np
import torch
import torch.nn.functional as F

M64 = (1 << 64) - 1


def mix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def sample(seed, step, index, length, vocab):
    k = mix64(mix64(mix64(seed) ^ step) ^ index)
    start = k % vocab
    max_stride = 7 if vocab > 8 else vocab - 1
    stride = 1 + (k >> 32) % max_stride if max_stride > 0 else 0
    return [(start + stride * i) % vocab for i in range(length)]


def read_params(path):
    with open(path, "rb") as f:
        header = json.loads(f.readline())
        out = {}
        for p in header["params"]:
            n = int(np.prod(p["shape"]))
            data = np.frombuffer(f.read(4 * n), dtype="<f4").copy()
            out[p["name"]] = torch.tensor(data).view(p["shape"]).requires_grad_(True)
    return out


def rope(x, base=10000.0):  # x: [b, t, h, d]
    t, d = x.shape[1], x.shape[3]
    inv = base ** (-torch.arange(0, d // 2, dtype=torch.float64) * 2.0 / d)
    ang = torch.outer(torch.arange(t, dtype=torch.float64), inv)
    emb = torch.cat([ang, ang], -1)
    cos = emb.cos().float().view(1, t, 1, d)
    sin = emb.sin().float().view(1, t, 1, d)
    rot = torch.cat([-x[..., d // 2:], x[..., : d // 2]], -1)
    return x * cos + rot * sin


def logits(model, P, idx):
    """The decoder's output logits [b, t, vocab] for token ids idx [b, t], from the parameters P
    (a dict of weft parameter names to tensors)."""
    H, seq = model["hidden"], idx.shape[1]
    rms = model["norm"] == "rmsnorm"

    def norm(x, pre):
        if rms:
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * P[pre + ".weight"]
        return F.layer_norm(x, (H,), P[pre + ".weight"], P[pre + ".bias"], 1e-5)

    def lin(x, w, b=None):
        return F.linear(x, P[w], P[b] if b and b in P else None)

    x = F.embedding(idx, P["embed.wte"])
    if model["position"] == "learned":
        x = x + P["embed.wpe"][:seq]
    layer = 0
    for g in model["groups"]:
        nh, nkv, d = g["heads"], g["kv_heads"], g["head_dim"]
        for _ in range(g["count"]):
            pre = "layers.%d." % layer
            h = norm(x, pre + "ln1")
            b, t = h.shape[0], h.shape[1]
            q = lin(h, pre + "attn.wq", pre + "attn.bq").view(b, t, nh, d)
            k = lin(h, pre + "attn.wk", pre + "attn.bk").view(b, t, nkv, d)
            v = lin(h, pre + "attn.wv", pre + "attn.bv").view(b, t, nkv, d)
            if model["position"] == "rope":
                q, k = rope(q), rope(k)
            q, k, v = (z.transpose(1, 2) for z in (q, k, v))
            rep = nh // nkv  # grouped-query attention: kv head j serves query heads j*rep .. j*rep+rep-1
            k = k[:, :, None].expand(b, nkv, rep, t, d).reshape(b, nh, t, d)
            v = v[:, :, None].expand(b, nkv, rep, t, d).reshape(b, nh, t, d)
            s = q @ k.transpose(-2, -1) / math.sqrt(d)
            s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
            a = (s.softmax(-1) @ v).transpose(1, 2).reshape(b, t, nh * d)
            x = x + lin(a, pre + "attn.wo", pre + "attn.bo")
            h = norm(x, pre + "ln2")
            if g["ffn_kind"] == "gelu":
                f = F.gelu(lin(h, pre + "mlp.fc1", pre + "mlp.fc1_bias"), approximate="tanh")
                x = x + lin(f, pre + "mlp.fc2", pre + "mlp.fc2_bias")
            else:
                f = F.silu(lin(h, pre + "mlp.gate", pre + "mlp.gate_bias")) * lin(h, pre + "mlp.up", pre + "mlp.up_bias")
                x = x + lin(f, pre + "mlp.down", pre + "mlp.down_bias")
            layer += 1
    h = norm(x, "head.norm")
    w = P["embed.wte"] if model["tied_embeddings"] else P["head.lm_head"]
    return h @ w.t()


def main():
    model = json.load(open(sys.argv[1]))
    P = read_params(sys.argv[2])
    seq, batch, seed = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    V = model["vocab"]
    data = torch.tensor([sample(seed, 1, i, seq + 1, V) for i in range(batch)])
    idx, tgt = data[:, :-1], data[:, 1:]
    loss = F.cross_entropy(logits(model, P, idx).reshape(-1, V), tgt.reshape(-1))
    loss.backward()
    sq = sum(float(p.grad.double().pow(2).sum()) for p in P.values() if p.grad is not None)
    print(json.dumps({"loss": float(loss), "grad_norm": math.sqrt(sq)}))


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
