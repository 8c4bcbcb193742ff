#!/usr/bin/env python3
"""Measurements of one GPU through PyTorch, beside `weft profile model` (data/reference/h100/README.md).

Writes one JSON file: bf16 GEMM throughput at square shapes and at the GEMM shapes of a Llama-2-7B and a
GPT-3 2.7B layer, fused attention (scaled_dot_product_attention) forward and backward time, device
memory bandwidth (a copy), host launch overhead (back-to-back small kernels), and a plain PyTorch
eager Llama-2-7B decoder layer's forward and backward time, the yardstick for weft's own layer.
Timings are CUDA-event medians after warm-up.
Usage: python3 scripts/gpu/measure.py OUT.json kernels|host
"""
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F


def cuda_time(fn, iters=10, warmup=3, min_s=2e-3):
    """Median seconds of one call: each timed sample runs enough back-to-back calls between two CUDA
    events to last min_s, so host launch gaps (a busy or slow CPU) do not count as GPU time."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    reps = max(1, min(1000, int(min_s / max(time.perf_counter() - t0, 1e-6)) + 1))
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3 / reps)
    return statistics.median(times)


def gemm(m, k, n, dtype=torch.bfloat16):
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    w = torch.randn(k, n, device="cuda", dtype=dtype)
    s = cuda_time(lambda: x @ w)
    return {"m": m, "k": k, "n": n, "s": s, "tflops": 2.0 * m * k * n / s / 1e12}


def attention(b, h, t, d, dtype=torch.bfloat16):
    # [b, t, h, d] tensors seen heads-first, as weft's runtime and most models call the kernel
    q = torch.randn(b, t, h, d, device="cuda", dtype=dtype).transpose(1, 2).requires_grad_(True)
    k = torch.randn(b, t, h, d, device="cuda", dtype=dtype).transpose(1, 2).requires_grad_(True)
    v = torch.randn(b, t, h, d, device="cuda", dtype=dtype).transpose(1, 2).requires_grad_(True)
    fwd = cuda_time(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    g = torch.randn_like(o)

    def fb():
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y.backward(g)

    fb_s = cuda_time(fb)
    flops = 4.0 * b * h * t * t * d / 2  # causal: half of QK^T and PV
    return {"b": b, "heads": h, "seq": t, "head_dim": d, "dtype": str(dtype), "forward_s": fwd, "backward_s": fb_s - fwd,
            "forward_tflops": flops / fwd / 1e12}


def bandwidth(gib=2):
    n = gib * (1 << 30) // 2
    a = torch.empty(n, device="cuda", dtype=torch.bfloat16)
    b = torch.empty_like(a)
    s = cuda_time(lambda: b.copy_(a))
    return {"bytes_moved": 2 * n * 2, "s": s, "tb_per_s": 2 * n * 2 / s / 1e12}


def launch_overhead(n=2000):
    x = torch.zeros(16, device="cuda")
    for _ in range(100):
        x.add_(1)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        x.add_(1)
    torch.cuda.synchronize()
    return {"kernels": n, "s_per_kernel": (time.perf_counter() - t0) / n}


class LlamaLayer(torch.nn.Module):
    def __init__(self, h, heads, ffn):
        super().__init__()
        self.h, self.heads = h, heads
        self.n1 = torch.nn.Parameter(torch.ones(h))
        self.n2 = torch.nn.Parameter(torch.ones(h))
        self.qkv = torch.nn.Linear(h, 3 * h, bias=False)
        self.o = torch.nn.Linear(h, h, bias=False)
        self.gu = torch.nn.Linear(h, 2 * ffn, bias=False)
        self.down = torch.nn.Linear(ffn, h, bias=False)

    @staticmethod
    def rms(x, w):
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5).to(x.dtype) * w

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        d = self.h // self.heads
        q, k, v = self.qkv(self.rms(x, self.n1)).view(b, t, 3, self.heads, d).unbind(2)

        def rope(z):
            z1, z2 = z[..., : d // 2], z[..., d // 2:]
            return z * cos + torch.cat([-z2, z1], -1) * sin

        q, k = rope(q), rope(k)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, self.h))
        g, u = self.gu(self.rms(x, self.n2)).chunk(2, -1)
        return x + self.down(F.silu(g) * u)


def eager_layer(mb, seq, h=4096, heads=32, ffn=11008):
    layer = LlamaLayer(h, heads, ffn).cuda().to(torch.bfloat16)
    d = h // heads
    pos = torch.arange(seq, device="cuda", dtype=torch.float64)
    inv = 10000.0 ** (-torch.arange(0, d // 2, device="cuda", dtype=torch.float64) * 2 / d)
    ang = torch.cat([pos[:, None] * inv, pos[:, None] * inv], -1)
    cos = ang.cos().to(torch.bfloat16)[None, :, None, :]
    sin = ang.sin().to(torch.bfloat16)[None, :, None, :]
    x = torch.randn(mb, seq, h, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn_like(x)
    fwd = cuda_time(lambda: layer(x, cos, sin), iters=10)

    def fb():
        layer(x, cos, sin).backward(dy)

    total = cuda_time(fb, iters=10)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    y = layer(x, cos, sin)
    torch.cuda.synchronize()
    act = torch.cuda.memory_allocated() - before
    del y
    return {"micro_batch": mb, "seq": seq, "hidden": h, "heads": heads, "ffn": ffn, "forward_s": fwd,
            "backward_s": total - fwd, "activation_bytes": act}


def main():
    # PART: kernels (GEMM, attention, bandwidth: GPU-bound, may run beside a build) or host (launch
    # overhead and the eager layer, which need an idle CPU).
    out, part = sys.argv[1], sys.argv[2]
    torch.backends.cuda.matmul.allow_tf32 = False
    p = torch.cuda.get_device_properties(0)
    res = {"device": p.name, "sms": p.multi_processor_count, "memory_bytes": p.total_memory,
           "torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version()}
    if part == "kernels":
        res["gemm_square"] = [gemm(n, n, n) for n in (1024, 2048, 4096, 8192)]
        shapes = []
        for t in (2048, 4096, 8192):  # tokens of a micro-batch: Llama-2-7B layer GEMMs
            shapes += [(t, 4096, 12288), (t, 4096, 4096), (t, 4096, 22016), (t, 11008, 4096)]
        for t in (2048, 4096, 8192):  # GPT-3 2.7B layer GEMMs
            shapes += [(t, 2560, 7680), (t, 2560, 2560), (t, 2560, 10240), (t, 10240, 2560)]
        shapes += [(4096, 4096, 32000), (2048, 2560, 50257), (2048, 2560, 50304)]  # LM heads (50304: padded vocab)
        res["gemm_layers"] = [gemm(*s) for s in shapes]
        fp32 = []
        for t in (2048, 4096, 8192):  # GPT-3 1.3B layer GEMMs in fp32 (the closed loop's model)
            fp32 += [(t, 2048, 6144), (t, 2048, 2048), (t, 2048, 8192), (t, 8192, 2048)]
        res["gemm_fp32"] = [gemm(*s, dtype=torch.float32) for s in fp32 + [(2048, 4096, 4096), (8192, 8192, 8192)]]
        res["attention"] = [attention(b, 32, 4096, 128) for b in (1, 2)] + \
            [attention(b, 32, 2048, 80) for b in (1, 2, 4)]
        res["attention_fp32"] = [attention(b, 16, 1024, 128, dtype=torch.float32) for b in (2, 4, 8)]
        res["bandwidth"] = bandwidth()
        for g in res["gemm_square"]:
            print("gemm %d: %.0f TFLOP/s" % (g["m"], g["tflops"]))
        print("copy: %.2f TB/s" % res["bandwidth"]["tb_per_s"])
    else:
        res["launch"] = launch_overhead()
        res["eager_llama2_7b_layer"] = [eager_layer(mb, 4096) for mb in (1, 2)]
        print("launch: %.1f us per kernel" % (res["launch"]["s_per_kernel"] * 1e6))
        for e in res["eager_llama2_7b_layer"]:
            print("eager llama-2-7b layer mb %d: fwd %.2f ms bwd %.2f ms act %.2f GiB" % (
                e["micro_batch"], e["forward_s"] * 1e3, e["backward_s"] * 1e3, e["activation_bytes"] / 2**30))
    with open(out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
