#!/usr/bin/env python3
"""What a MoE layer's pieces cost on one GPU, through PyTorch (data/reference/h100/README.md).

For the expert shapes of published MoE runs (Qwen3-30B-A3B, Mixtral 8x7B, DeepSeek-V3, GPT-OSS-120B,
OLMoE) at the tokens one rank's local experts receive under a stated expert degree, in bf16:
- the experts' GEMMs three ways: one dense GEMM of the same FLOPs (the ideal), a grouped GEMM
  (torch._grouped_mm, what torchtitan and Megatron-LM's grouped-GEMM path run), a loop of one GEMM per
  expert (what weft's runtime runs); forward and forward + backward of the expert MLP;
- the grouped GEMM under uneven routing (the same copies, max over mean 1.5 and 3);
- fp8 GEMMs at the per-expert and the total shapes (torch._scaled_mm, per-tensor scales), and the fp8
  grouped GEMM where PyTorch has one (torch._scaled_grouped_mm, row-wise scales);
- the permutation (sort the copies by expert, gather the rows) and its inverse (weight the rows and
  add them back to their tokens), forward and backward;
- the router (fp32 scores, softmax, top-k, renormalise), forward and backward;
- (part "host") a whole eager MoE block as torchtitan writes it, its GPU time against its wall time
  per call with the host's device-to-host read of the expert counts.
Timings are CUDA-event medians after warm-up, as measure.py's.
Usage: python3 scripts/gpu/moe.py OUT.json kernels|host
"""
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from measure import cuda_time  # CUDA-event medians of back-to-back calls (scripts/gpu/measure.py)

# name, hidden, expert ffn, experts, top k, expert degree, tokens of the rank (micro-batch x seq)
CASES = [
    ("qwen3-30b-a3b_ep8_mb2", 2048, 768, 128, 8, 8, 8192),   # NVIDIA's 16-H100 recipe (EP 8, MBS 2)
    ("qwen3-30b-a3b_ep8_mb1", 2048, 768, 128, 8, 8, 4096),   # the 8-B200 recipe's MBS 1
    ("qwen3-30b-a3b_ep1_mb1", 2048, 768, 128, 8, 1, 4096),   # every expert local: 256 rows each
    ("mixtral-8x7b_ep8_mb1", 4096, 14336, 8, 2, 8, 4096),
    ("mixtral-8x7b_ep1_mb1", 4096, 14336, 8, 2, 1, 4096),
    ("deepseek-v3_ep64_mb1", 7168, 2048, 256, 8, 64, 4096),
    ("deepseek-v3_ep8_mb1", 7168, 2048, 256, 8, 8, 4096),
    ("gpt-oss-120b_ep8_mb1", 2880, 2880, 128, 4, 8, 4096),
    ("olmoe_ep8_mb1", 2048, 1024, 64, 8, 8, 4096),
]


def wall_time(fn, iters=10, warmup=3):
    """Median wall seconds of one call, synchronised after each (what the host adds shows here)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def attempt(what, fn):
    try:
        return fn()
    except Exception as e:  # a kernel this PyTorch lacks: say so in the file
        msg = "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:200] if str(e) else "")
        print("  %s failed: %s" % (what, msg), flush=True)
        return {"error": msg}


def offsets(counts):
    return torch.tensor(counts, device="cuda", dtype=torch.int32).cumsum(0, dtype=torch.int32)


def skewed_counts(total, groups, ratio):
    """Counts summing to total (multiples of 16 rows where they can be), max over mean = ratio: one
    expert takes ratio x the mean, the rest share the remainder evenly."""
    mean = total / groups
    top = int(round(ratio * mean / 16)) * 16
    units = (total - top) // 16  # the others' rows in whole 16-row units, the last taking any rest
    base = [16 * (units // (groups - 1))] * (groups - 1)
    for i in range(units - sum(base) // 16):
        base[i] += 16
    base[-1] += total - top - sum(base)
    return [top] + base


def grouped_mlp(x, w1, w2, offs):
    """gate|up grouped GEMM, SwiGLU, down grouped GEMM: w1 [E, 2F, H], w2 [E, H, F] (nn.Linear layout)."""
    h = torch._grouped_mm(x, w1.transpose(-2, -1), offs=offs)
    g, u = h.chunk(2, -1)
    return torch._grouped_mm(F.silu(g) * u, w2.transpose(-2, -1), offs=offs)


def loop_mlp(x, w1, w2, counts):
    outs, start = [], 0
    for e, c in enumerate(counts):
        xe = x[start:start + c]
        g, u = (xe @ w1[e].t()).chunk(2, -1)
        outs.append((F.silu(g) * u) @ w2[e].t())
        start += c
    return torch.cat(outs)


def dense_mlp(x, w1d, w2d):
    g, u = (x @ w1d.t()).chunk(2, -1)
    return (F.silu(g) * u) @ w2d.t()


def fwd_bwd(f, x, params):
    y = f()
    dy = torch.randn_like(y)

    def run():
        for p in params:
            p.grad = None
        f().backward(dy)

    return cuda_time(run)


def experts_case(name, h, ffn, experts, k, ep, tokens):
    local = experts // ep
    rows = tokens * k  # copies one rank's local experts receive under even routing (any ep)
    per = rows // local
    dt = torch.bfloat16
    x = torch.randn(rows, h, device="cuda", dtype=dt, requires_grad=True)
    w1 = (torch.randn(local, 2 * ffn, h, device="cuda", dtype=dt) * 0.02).requires_grad_(True)
    w2 = (torch.randn(local, h, ffn, device="cuda", dtype=dt) * 0.02).requires_grad_(True)
    counts = [per] * local
    offs = offsets(counts)
    flops = 2.0 * rows * h * 3 * ffn  # forward of the three expert matrices
    r = {"name": name, "hidden": h, "expert_ffn": ffn, "experts": experts, "top_k": k, "ep": ep, "tokens": tokens,
         "local_experts": local, "rows_per_expert": per, "forward_flops": flops}
    # the ideal: one GEMM pair of the same FLOPs (every row through one weight)
    w1d = w1[0].detach().clone().requires_grad_(True)
    w2d = w2[0].detach().clone().requires_grad_(True)
    r["dense_forward_s"] = cuda_time(lambda: dense_mlp(x, w1d, w2d))
    r["dense_fwd_bwd_s"] = fwd_bwd(lambda: dense_mlp(x, w1d, w2d), x, [x, w1d, w2d])
    r["grouped_forward_s"] = attempt("grouped", lambda: cuda_time(lambda: grouped_mlp(x, w1, w2, offs)))
    r["grouped_fwd_bwd_s"] = attempt("grouped backward", lambda: fwd_bwd(lambda: grouped_mlp(x, w1, w2, offs), x,
                                                                         [x, w1, w2]))
    r["loop_forward_s"] = cuda_time(lambda: loop_mlp(x, w1, w2, counts))
    r["loop_fwd_bwd_s"] = fwd_bwd(lambda: loop_mlp(x, w1, w2, counts), x, [x, w1, w2])
    # the two GEMMs alone, grouped (forward), to split the MLP's time from its SwiGLU
    a1 = torch.randn(rows, ffn, device="cuda", dtype=dt)
    r["grouped_gemm_up_s"] = attempt("grouped up", lambda: cuda_time(
        lambda: torch._grouped_mm(x.detach(), w1.detach().transpose(-2, -1), offs=offs)))
    r["grouped_gemm_down_s"] = attempt("grouped down", lambda: cuda_time(
        lambda: torch._grouped_mm(a1, w2.detach().transpose(-2, -1), offs=offs)))
    # uneven routing, the same copies
    if local > 1:
        sk = []
        for ratio in (1.5, 3.0):
            c = skewed_counts(rows, local, ratio)
            o = offsets(c)
            sk.append({"max_over_mean": max(c) / (rows / local), "forward_s": attempt(
                "grouped skew", lambda: cuda_time(lambda: grouped_mlp(x, w1, w2, o))),
                "fwd_bwd_s": attempt("grouped skew backward", lambda: fwd_bwd(
                    lambda: grouped_mlp(x, w1, w2, o), x, [x, w1, w2]))})
        r["grouped_skewed"] = sk
    for key in ("dense", "grouped", "loop"):
        s = r["%s_forward_s" % key]
        if isinstance(s, float):
            r["%s_forward_tflops" % key] = flops / s / 1e12
        s = r["%s_fwd_bwd_s" % key]
        if isinstance(s, float):
            r["%s_fwd_bwd_tflops" % key] = 3 * flops / s / 1e12
    return r


def fp8_case(name, h, ffn, experts, k, ep, tokens):
    local = experts // ep
    rows = tokens * k
    per = rows // local
    out = {"name": name}
    if not hasattr(torch, "float8_e4m3fn"):
        return out
    f8 = torch.float8_e4m3fn
    one = torch.ones((), device="cuda")

    def scaled(m, kk, n):
        a = torch.randn(m, kk, device="cuda").to(f8)
        b = torch.randn(n, kk, device="cuda").to(f8).t()  # column-major, as cuBLASLt's fp8 needs
        s = cuda_time(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
        return {"m": m, "k": kk, "n": n, "s": s, "tflops": 2.0 * m * kk * n / s / 1e12}

    out["fp8_per_expert_up"] = attempt("fp8 up", lambda: scaled(per, h, 2 * ffn))
    out["fp8_per_expert_down"] = attempt("fp8 down", lambda: scaled(per, ffn, h))
    out["fp8_total_up"] = attempt("fp8 total up", lambda: scaled(rows, h, 2 * ffn))
    out["bf16_per_expert_up"] = attempt("bf16 up", lambda: gemm_rate(per, h, 2 * ffn))
    if hasattr(torch, "_scaled_grouped_mm"):
        def grouped8():
            a = torch.randn(rows, h, device="cuda").to(f8)
            b = torch.randn(local, 2 * ffn, h, device="cuda").to(f8).transpose(-2, -1)
            sa = torch.ones(rows, device="cuda")
            sb = torch.ones(local, 2 * ffn, device="cuda")
            o = offsets([per] * local)
            s = cuda_time(lambda: torch._scaled_grouped_mm(a, b, sa, sb, offs=o, out_dtype=torch.bfloat16))
            return {"s": s, "tflops": 2.0 * rows * h * 2 * ffn / s / 1e12}

        out["fp8_grouped_up"] = attempt("fp8 grouped", grouped8)
    return out


def gemm_rate(m, kk, n):
    a = torch.randn(m, kk, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(kk, n, device="cuda", dtype=torch.bfloat16)
    s = cuda_time(lambda: a @ b)
    return {"m": m, "k": kk, "n": n, "s": s, "tflops": 2.0 * m * kk * n / s / 1e12}


def permute_case(name, h, experts, k, tokens):
    """Sort the copies by expert and gather their rows; the inverse weights them and adds them back."""
    dt = torch.bfloat16
    x = torch.randn(tokens, h, device="cuda", dtype=dt, requires_grad=True)
    idx = torch.randint(0, experts, (tokens, k), device="cuda")
    w = torch.rand(tokens, k, device="cuda", dtype=torch.float32, requires_grad=True)

    def permute():
        order = torch.argsort(idx.view(-1), stable=True)
        return x.index_select(0, order // k), order

    def unpermute(y, order):
        wy = y * w.view(-1)[order].unsqueeze(-1).to(dt)
        out = torch.zeros(tokens, h, device="cuda", dtype=dt)
        return out.index_add(0, order // k, wy)

    r = {"name": name, "hidden": h, "experts": experts, "top_k": k, "tokens": tokens,
         "row_bytes_moved": 2.0 * tokens * k * h * 2}  # a permutation reads and writes each copy's row
    r["sort_s"] = cuda_time(lambda: torch.argsort(idx.view(-1), stable=True))
    r["permute_s"] = cuda_time(lambda: permute())
    y, order = permute()
    y = y.detach().requires_grad_(True)
    r["unpermute_s"] = cuda_time(lambda: unpermute(y, order))
    dz = torch.randn(tokens, h, device="cuda", dtype=dt)

    def both():
        x.grad = None
        w.grad = None
        yy, o = permute()
        unpermute(yy, o).backward(dz)

    r["permute_unpermute_fwd_bwd_s"] = cuda_time(both)
    return r


def router_case(name, h, experts, k, tokens):
    x = torch.randn(tokens, h, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    wr = (torch.randn(experts, h, device="cuda") * 0.02).requires_grad_(True)

    def route():
        logits = x.float() @ wr.t()
        p = logits.softmax(-1)
        top, ids = p.topk(k, -1)
        top = top / top.sum(-1, keepdim=True)
        return top, ids, p

    def both():
        x.grad = None
        wr.grad = None
        top, _, p = route()
        (top.sum() + p.mean(0).square().sum()).backward()

    return {"name": name, "hidden": h, "experts": experts, "top_k": k, "tokens": tokens,
            "forward_s": cuda_time(route), "fwd_bwd_s": cuda_time(both)}


class EagerMoe(torch.nn.Module):
    """A MoE block as torchtitan writes it (router, sort, grouped GEMM, weighted scatter-add), on one
    rank with every expert local; the expert counts are read to the host once a call, as a dispatcher
    that sizes an all-to-all does."""

    def __init__(self, h, ffn, experts, k, grouped=True):
        super().__init__()
        self.k, self.experts, self.grouped = k, experts, grouped
        self.router = torch.nn.Parameter(torch.randn(experts, h, device="cuda") * 0.02)
        self.w1 = torch.nn.Parameter(torch.randn(experts, 2 * ffn, h, device="cuda", dtype=torch.bfloat16) * 0.02)
        self.w2 = torch.nn.Parameter(torch.randn(experts, h, ffn, device="cuda", dtype=torch.bfloat16) * 0.02)

    def forward(self, x):
        t, h = x.shape
        p = (x.float() @ self.router.t()).softmax(-1)
        top, ids = p.topk(self.k, -1)
        top = top / top.sum(-1, keepdim=True)
        flat = ids.view(-1)
        order = torch.argsort(flat, stable=True)
        counts = torch.bincount(flat, minlength=self.experts)
        host_counts = counts.tolist()  # the device-to-host read
        rows = x.index_select(0, order // self.k)
        if self.grouped:
            y = grouped_mlp(rows, self.w1, self.w2, counts.cumsum(0, dtype=torch.int32))
        else:
            y = loop_mlp(rows, self.w1, self.w2, host_counts)
        y = y * top.view(-1)[order].unsqueeze(-1).to(y.dtype)
        return torch.zeros_like(x).index_add(0, order // self.k, y)


def host_case(name, h, ffn, experts, k, ep, tokens):
    local = experts // ep
    r = {"name": name, "local_experts": local, "tokens": tokens}
    for grouped in (True, False):
        key = "grouped" if grouped else "loop"

        def one():
            torch.manual_seed(0)
            m = EagerMoe(h, ffn, local, k, grouped)
            x = torch.randn(tokens, h, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            dy = torch.randn_like(x)

            def fb():
                for q in m.parameters():
                    q.grad = None
                m(x).backward(dy)

            return {"gpu_fwd_bwd_s": cuda_time(fb, iters=5, min_s=0), "wall_fwd_bwd_s": wall_time(fb, iters=5),
                    "gpu_forward_s": cuda_time(lambda: m(x), iters=5, min_s=0), "wall_forward_s": wall_time(lambda: m(x), iters=5)}

        r[key] = attempt("eager " + key, one)
    return r


def main():
    out, part = sys.argv[1], sys.argv[2]
    torch.backends.cuda.matmul.allow_tf32 = False
    p = torch.cuda.get_device_properties(0)
    res = {"device": p.name, "sms": p.multi_processor_count, "torch": torch.__version__, "cuda": torch.version.cuda,
           "has_grouped_mm": hasattr(torch, "_grouped_mm"), "has_scaled_grouped_mm": hasattr(torch, "_scaled_grouped_mm")}
    if part == "kernels":
        res["experts"], res["fp8"], res["permute"], res["router"] = [], [], [], []
        for c in CASES:
            name, h, ffn, experts, k, ep, tokens = c
            print("case", name, flush=True)
            res["experts"].append(attempt("experts " + name, lambda: experts_case(*c)))
            res["fp8"].append(attempt("fp8 " + name, lambda: fp8_case(*c)))
            res["permute"].append(attempt("permute " + name, lambda: permute_case(name, h, experts, k, tokens)))
            res["router"].append(attempt("router " + name, lambda: router_case(name, h, experts, k, tokens)))
            e = res["experts"][-1]
            if "dense_forward_s" in e:
                def ms(v):
                    return "%.3f" % (v * 1e3) if isinstance(v, float) else "-"
                print("  %d experts x %d rows: fwd+bwd dense %s ms, grouped %s ms, loop %s ms" % (
                    e["local_experts"], e["rows_per_expert"], ms(e["dense_fwd_bwd_s"]), ms(e["grouped_fwd_bwd_s"]),
                    ms(e["loop_fwd_bwd_s"])), flush=True)
            torch.cuda.empty_cache()
    else:
        res["eager_block"] = []
        for c in CASES:
            if c[0] in ("qwen3-30b-a3b_ep8_mb2", "qwen3-30b-a3b_ep1_mb1", "mixtral-8x7b_ep1_mb1", "deepseek-v3_ep8_mb1"):
                print("eager", c[0], flush=True)
                res["eager_block"].append(host_case(*c))
                print("  ", json.dumps(res["eager_block"][-1]), flush=True)
                torch.cuda.empty_cache()
    with open(out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
