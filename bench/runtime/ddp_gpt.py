#!/usr/bin/python3
"""The weft runtime benchmark's model, trained by PyTorch's own DistributedDataParallel (Gloo).

Same architecture, sizes, optimizer and per-rank batch as the weft run of bench/runtime/
runtime_bench.cc: GPT-2 style (LayerNorm, learned positions, tanh GELU, biases, tied embeddings,
separate q/k/v projections, explicit causal softmax attention), AdamW with global-norm clipping,
one intra-op thread per rank. Run with Debian's python3-torch: /usr/bin/python3 ddp_gpt.py --world 2

Prints one JSON line: {"world":..,"mean_step_time_s":..,"tokens_per_s":..,"steps_timed":..}.
"""
import argparse
import json
import math
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, h, heads, ffn):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(h)
        self.q = nn.Linear(h, h)
        self.k = nn.Linear(h, h)
        self.v = nn.Linear(h, h)
        self.o = nn.Linear(h, h)
        self.ln2 = nn.LayerNorm(h)
        self.fc1 = nn.Linear(h, ffn)
        self.fc2 = nn.Linear(ffn, h)

    def forward(self, x):
        b, t, h = x.shape
        d = h // self.heads
        y = self.ln1(x)
        q = self.q(y).view(b, t, self.heads, d).transpose(1, 2)
        k = self.k(y).view(b, t, self.heads, d).transpose(1, 2)
        v = self.v(y).view(b, t, self.heads, d).transpose(1, 2)
        s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        s = s.masked_fill(mask, float("-inf"))
        a = (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(b, t, h)
        x = x + self.o(a)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, h, layers, heads, ffn, seq):
        super().__init__()
        self.wte = nn.Embedding(vocab, h)
        self.wpe = nn.Embedding(seq, h)
        self.blocks = nn.ModuleList([Block(h, heads, ffn) for _ in range(layers)])
        self.lnf = nn.LayerNorm(h)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t))
        for blk in self.blocks:
            x = blk(x)
        logits = F.linear(self.lnf(x), self.wte.weight)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def worker(rank, a, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=a.world)
    torch.manual_seed(1234)
    model = GPT(a.vocab, a.hidden, a.layers, a.heads, a.ffn, a.seq)
    ddp = nn.parallel.DistributedDataParallel(model) if a.world > 1 else model
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    g = torch.Generator().manual_seed(rank)
    times = []
    for step in range(a.steps):
        x = torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=g)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = ddp(x[:, :-1], x[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if a.world > 1:
            dist.barrier()
        times.append(time.perf_counter() - t0)
    if rank == 0:
        timed = times[a.warmup:]
        mean = sum(timed) / len(timed)
        out.put({"world": a.world, "mean_step_time_s": mean,
                 "tokens_per_s": a.world * a.batch * a.seq / mean, "steps_timed": len(timed)})
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--world", type=int, default=1)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--ffn", type=int, default=1024)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=8, help="samples per rank per step")
    a = p.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    mp.spawn(worker, args=(a, out), nprocs=a.world, join=True)
    print(json.dumps(out.get()))


if __name__ == "__main__":
    main()
