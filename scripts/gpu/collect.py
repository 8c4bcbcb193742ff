#!/usr/bin/env python3
"""Turns the logs of scripts/gpu/h100.sh (its gpu-results folder) into the checked-in files
data/reference/h100/parity.json, closed_loop.json, mixed_precision.json, closed_loop_bf16.json and
moe_parity.json, each when its logs are there.
Usage: python3 scripts/gpu/collect.py GPU_RESULTS_DIR OUT_DIR
"""
import json
import os
import sys


def steps(path):
    """The step objects and the summary of a `weft train --format json` log (rank prefixes dropped)."""
    out, summary = [], None
    with open(path) as f:
        for line in f:
            if "{" not in line:
                continue
            j = json.loads(line[line.index("{"):])
            if j.get("summary"):
                summary = j
            elif "step" in j:
                out.append(j)
    return out, summary


def rel(a, b):
    return max(abs(x - y) / abs(y) for x, y in zip(a, b))


def one_rank(src, prefix, name, cmd, ref, got, grad_norm):
    """One rank's two runs of a model, PREFIX_NAME_REF.jsonl and PREFIX_NAME_GOT.jsonl, against each other."""
    a, _ = steps(os.path.join(src, "%s_%s_%s.jsonl" % (prefix, name, ref)))
    b, _ = steps(os.path.join(src, "%s_%s_%s.jsonl" % (prefix, name, got)))
    out = {"model": name, "command": cmd, ref + "_loss": [s["loss"] for s in a], got + "_loss": [s["loss"] for s in b],
           "max_rel_loss": rel([s["loss"] for s in b], [s["loss"] for s in a])}
    if grad_norm:
        out["max_rel_grad_norm"] = rel([s["grad_norm"] for s in b], [s["grad_norm"] for s in a])
    return out


def loop_run(src, log, plan, cmd):
    """One closed-loop run: its step times, mean step time and the allocator's peak."""
    st, summ = steps(os.path.join(src, log + ".jsonl"))
    return {"plan": "plans/%s.json" % plan, "command": cmd + " --steps 6 --seed 7 --device cuda",
            "step_time_s": [s["step_time_s"] for s in st], "mean_step_time_s": summ["mean_step_time_s"],
            "peak_device_bytes": summ["ranks"][0]["peak_device_bytes"]}


def ranks_on_one_gpu(src, prefix, flags):
    """The six parity plans run by 2 or 4 ranks sharing the GPU (logs PREFIX_PLAN.jsonl) against one rank
    with the same micro-batches (PREFIX_ref_mM.jsonl)."""
    out = []
    for plan in ("dp2", "dp2z3", "tp2sp", "pp2", "ulysses2", "dp2tp2z1"):
        with open(os.path.join("data/reference/h100/plans", "parity_" + plan + ".json")) as f:
            p = json.load(f)
        m = p["train"]["micro_batches"]
        got, _ = steps(os.path.join(src, "%s_%s.jsonl" % (prefix, plan)))
        ref, _ = steps(os.path.join(src, "%s_ref_m%d.jsonl" % (prefix, m)))
        out.append({
            "plan": "plans/parity_%s.json" % plan, "ranks": p["cluster"]["nodes"] * p["cluster"]["gpus_per_node"],
            "micro_batches": m,
            "command": "weft launch -n N -- weft train --plan P --lr 3e-3 --steps 10 --seed 7 --device cuda "
                       "--backend gloo" + flags,
            "loss": [s["loss"] for s in got], "reference_loss": [s["loss"] for s in ref],
            "max_rel_loss": rel([s["loss"] for s in got], [s["loss"] for s in ref]),
            "max_rel_grad_norm": rel([s["grad_norm"] for s in got], [s["grad_norm"] for s in ref])})
    return out


def mixed(src):
    """--precision bf16 on CUDA: one rank against fp32, several ranks on the GPU against one bf16 rank."""
    out = {"device": "NVIDIA H100 80GB HBM3", "one_rank": []}
    for name, cmd in (("gpt", "weft train --steps 20 --seed 7 --device cuda --precision fp32|bf16"),
                      ("llama", "weft train --model scripts/gpu/small-llama.json --seq 128 --global-batch 8 "
                                "--micro-batches 2 --lr 3e-3 --steps 20 --seed 7 --device cuda --precision fp32|bf16")):
        out["one_rank"].append(one_rank(src, "mixed", name, cmd, "fp32", "bf16", grad_norm=False))
    out["ranks_on_one_gpu"] = ranks_on_one_gpu(src, "mixed", " --precision bf16")
    return out


def moe(src):
    """MoE layers on CUDA: one rank against the CPU; expert-parallel plans of 2 and 4 ranks sharing the
    GPU through Gloo against one rank with the same batch (a CUDA rank's log moe_ref_m1.jsonl, or the
    CPU's, moe_ref_cpu_m1.jsonl, made by the same command with --device cpu)."""
    cmd = ("weft train --model scripts/gpu/small-moe.json --seq 128 --global-batch 8 --micro-batches 1 --lr 3e-3 "
           "--seed 7")
    out = {"dtype": "fp32", "device": "NVIDIA H100 80GB HBM3",
           "one_rank": one_rank(src, "moe", "parity", cmd + " --steps 20 --device cpu|cuda", "cpu", "cuda", True),
           "ranks_on_one_gpu": []}
    ref_dev = "cuda" if os.path.exists(os.path.join(src, "moe_ref_m1.jsonl")) else "cpu"
    ref, _ = steps(os.path.join(src, "moe_ref_m1.jsonl" if ref_dev == "cuda" else "moe_ref_cpu_m1.jsonl"))
    for plan in ("moe_ep2", "moe_tp2sp_ep4"):
        with open(os.path.join("data/reference/h100/plans", "parity_" + plan + ".json")) as f:
            p = json.load(f)
        got, _ = steps(os.path.join(src, "multi_parity_%s.jsonl" % plan))
        out["ranks_on_one_gpu"].append({
            "plan": "plans/parity_%s.json" % plan, "ranks": p["cluster"]["nodes"] * p["cluster"]["gpus_per_node"],
            "command": "weft launch -n N -- weft train --plan P --lr 3e-3 --steps 10 --seed 7 --device cuda --backend gloo",
            "reference": cmd + " --steps 10 --device " + ref_dev,
            "loss": [s["loss"] for s in got], "reference_loss": [s["loss"] for s in ref],
            "max_rel_loss": rel([s["loss"] for s in got], [s["loss"] for s in ref]),
            "max_rel_grad_norm": rel([s["grad_norm"] for s in got], [s["grad_norm"] for s in ref]),
            "imbalance_first_step": [layer["imbalance"] for layer in got[0]["moe"]]})
    return out


def main():
    src, dst = sys.argv[1], sys.argv[2]
    outputs = []
    if os.path.exists(os.path.join(src, "parity_gpt_cpu.jsonl")):
        outputs += fp32_session(src)
    if os.path.exists(os.path.join(src, "mixed_gpt_bf16.jsonl")):
        outputs.append(("mixed_precision.json", mixed(src)))
    if os.path.exists(os.path.join(src, "loop_bf16_gb8_m1.jsonl")):
        outputs.append(("closed_loop_bf16.json", loop_bf16(src)))
    if os.path.exists(os.path.join(src, "moe_parity_cpu.jsonl")):
        outputs.append(("moe_parity.json", moe(src)))
    for name, obj in outputs:
        with open(os.path.join(dst, name), "w") as f:
            json.dump(obj, f, indent=1)
            f.write("\n")


def fp32_session(src):
    parity = {"dtype": "fp32", "device": "NVIDIA H100 80GB HBM3", "one_rank": [], "ranks_on_one_gpu": []}
    for name, cmd in (("gpt", "weft train --steps 20 --seed 7 --device cpu|cuda"),
                      ("llama", "weft train --model scripts/gpu/small-llama.json --seq 128 --global-batch 8 "
                                "--micro-batches 2 --lr 3e-3 --steps 20 --seed 7 --device cpu|cuda")):
        parity["one_rank"].append(one_rank(src, "parity", name, cmd, "cpu", "cuda", grad_norm=True))
    parity["ranks_on_one_gpu"] = ranks_on_one_gpu(src, "multi", "")
    loop = {"model": "gpt3-1.3b", "seq": 1024, "dtype": "fp32", "device": "NVIDIA H100 80GB HBM3",
            "note": LOOP_NOTE, "runs": []}
    runs = [("loop_gb8_mb1", "loop_gb8_m1", "weft train --model gpt3-1.3b --seq 1024 --global-batch 8 --micro-batches 1"),
            ("loop_gb8_mb2", "loop_gb8_m2", "weft train --model gpt3-1.3b --seq 1024 --global-batch 8 --micro-batches 2"),
            ("loop_gb16_mb4", "loop_gb16_m4", "weft train --model gpt3-1.3b --seq 1024 --global-batch 16 --micro-batches 4"),
            ("loop_gb16_m1_full", "loop_gb16_m1_full", "weft train --plan data/reference/h100/plans/loop_gb16_m1_full.json"),
            ("loop_gb8_m1_selective", "loop_gb8_m1_selective",
             "weft train --plan data/reference/h100/plans/loop_gb8_m1_selective.json")]
    loop["runs"] = [loop_run(src, log, plan, cmd) for log, plan, cmd in runs]
    return [("parity.json", parity), ("closed_loop.json", loop)]


LOOP_NOTE = ("mean_step_time_s leaves the first step out; peak_device_bytes is the CUDA caching allocator's "
             "peak of allocated bytes (torch.cuda.max_memory_allocated)")


def loop_bf16(src):
    return {"model": "gpt3-1.3b", "seq": 1024, "dtype": "bf16", "device": "NVIDIA H100 80GB HBM3", "note": LOOP_NOTE,
            "runs": [loop_run(src, plan, plan, "weft train --plan data/reference/h100/plans/%s.json" % plan)
                     for plan in ("loop_bf16_gb8_m1", "loop_bf16_gb8_m2", "loop_bf16_gb16_m4",
                                  "loop_bf16_gb16_m1_full", "loop_bf16_gb8_m1_selective")]}


if __name__ == "__main__":
    main()
