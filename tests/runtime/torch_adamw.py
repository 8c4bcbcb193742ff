#!/usr/bin/python3
"""Several optimizer steps of weft's single-process training, redone with PyTorch's own
torch.optim.AdamW and torch.nn.utils.clip_grad_norm_, for the runtime's optimizer test.

Reads a weft model JSON and a weft-params file of initial parameters; trains the decoder of
torch_reference.py (same directory) on the same synthetic batches as weft (the samples of step s,
1-based, are indices 0 .. global_batch-1 of (seed, s), micro-batch k holding the k-th contiguous
block); prints one JSON line per step, {"step":..,"loss":..,"grad_norm":..,"lr":..}, and writes the
final parameters as a weft-params file (--out).

Everything here follows PyTorch's conventions and the documented behaviour of `weft train`
(docs/runtime.md, "Optimizer"), not weft's code:
  - gradient accumulation: each micro-batch's mean token cross-entropy divided by the number of
    micro-batches, backward, gradients summed by autograd; the step's loss is the sum of those;
  - the gradient norm (reported before clipping) is the 2-norm of all gradients; with --clip > 0
    the gradients are clipped by torch.nn.utils.clip_grad_norm_;
  - weight decay (decoupled, AdamW's) on parameters with two or more dimensions (matrices and
    embedding tables), none on biases and norm gains: two parameter groups;
  - learning rate of step s: lr * s / warmup during the warm-up, then a half cosine from lr to
    min_lr over the remaining steps, reaching min_lr at the last step; set on every group before
    the step.
"""
import argparse
import json
import math

import torch
import torch.nn.functional as F

from torch_reference import logits, read_params, sample


def lr_at(step, a):
    if a.warmup > 0 and step <= a.warmup:
        return a.lr * step / a.warmup
    if a.steps <= a.warmup:
        return a.lr
    progress = (step - a.warmup) / (a.steps - a.warmup)
    return a.min_lr + (a.lr - a.min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


def write_params(path, P, step):
    header = {"format": "weft-params", "version": 1, "step": step,
              "params": [{"name": n, "shape": list(p.shape)} for n, p in P.items()]}
    with open(path, "wb") as f:
        f.write((json.dumps(header, separators=(",", ":")) + "\n").encode())
        for p in P.values():
            f.write(p.detach().contiguous().numpy().astype("<f4").tobytes())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="weft model JSON")
    ap.add_argument("--init", required=True, help="weft-params file of the initial parameters")
    ap.add_argument("--out", required=True, help="weft-params file for the final parameters")
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--global-batch", type=int, required=True)
    ap.add_argument("--micro-batches", type=int, default=1)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--min-lr", type=float, required=True)
    ap.add_argument("--warmup", type=int, required=True)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0, help="0 disables clipping")
    ap.add_argument("--seed", type=int, required=True)
    a = ap.parse_args()

    model = json.load(open(a.model))
    V = model["vocab"]
    P = read_params(a.init)
    if a.global_batch % a.micro_batches:
        raise SystemExit("--global-batch must be a multiple of --micro-batches")
    per_micro = a.global_batch // a.micro_batches

    decay = [p for p in P.values() if p.dim() >= 2]
    no_decay = [p for p in P.values() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps)
    params = list(P.values())
    for step in range(1, a.steps + 1):
        opt.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for k in range(a.micro_batches):
            data = torch.tensor([sample(a.seed, step, k * per_micro + j, a.seq + 1, V) for j in range(per_micro)])
            idx, tgt = data[:, :-1], data[:, 1:]
            loss = F.cross_entropy(logits(model, P, idx).reshape(-1, V), tgt.reshape(-1)) / a.micro_batches
            loss.backward()
            loss_sum += float(loss)
        norm = math.sqrt(sum(float(p.grad.double().pow(2).sum()) for p in params if p.grad is not None))
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(params, a.clip)
        lr = lr_at(step, a)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        print(json.dumps({"step": step, "loss": loss_sum, "grad_norm": norm, "lr": lr}), flush=True)
    write_params(a.out, P, a.steps)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
