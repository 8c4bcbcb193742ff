#!/usr/bin/env python3
"""Remakes the MPT model files and the llm-foundry rows of ../published_runs.json.

    extract.py LLM_FOUNDRY_CHECKOUT REVISION

Reads, with `git show REVISION:path` (no network, no imports beyond the standard library):
  scripts/train/yamls/pretrain/mpt-<size>.yaml   d_model, n_heads, n_layers, expansion_ratio,
                                                 vocab_size of each MPT size -> mpt-<size>.json here
  scripts/train/benchmarking/README.md           the tables "H100 80GB BF16" and "A100 80GB with
                                                 1600 Gbps node-node interconnect (RoCE)" -> the
                                                 sets llm-foundry-h100 and llm-foundry-a100 of
                                                 ../published_runs.json (other sets are kept)

The MPT files hold what configuration_mpt.py's defaults give the yamls: tied embeddings, learned
positions (max_seq_len: 2048 in the yamls; the benchmark sets it to each run's sequence, so every
row carries "max_seq"), LayerNorm, GELU FFN of expansion_ratio * d_model, multi-head attention.
They say "bias": false although the benchmarked layers have biases (no_bias defaults to False and
the yamls do not set it); README.md here says why.
"""
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RUNS = os.path.join(HERE, "..", "published_runs.json")
SIZES = ["125m", "350m", "760m", "1b", "3b", "7b", "13b", "30b", "70b"]
TABLES = {
    "H100 80GB BF16": ("llm-foundry-h100", "h100-80gb"),
    "A100 80GB with 1600 Gbps node-node interconnect (RoCE)": ("llm-foundry-a100", "a100-80gb"),
}
BENCHMARK_README = "scripts/train/benchmarking/README.md"


def git(repo, *args):
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True, text=True).stdout


def model_block(yaml_text):
    """The `key: value` lines of the top-level `model:` block of a yaml (two-space indent)."""
    out, inside = {}, False
    for line in yaml_text.splitlines():
        if re.match(r"^model:\s*$", line):
            inside = True
            continue
        if inside:
            if line and not line.startswith(" "):
                break
            m = re.match(r"^  (\w+):\s*([^#]*?)\s*(#.*)?$", line)
            if m and m.group(2):
                out[m.group(1)] = m.group(2)
    return out


def mpt_model(size, yaml_text):
    m = model_block(yaml_text)
    d, heads, layers = int(m["d_model"]), int(m["n_heads"]), int(m["n_layers"])
    ratio = float(m.get("expansion_ratio", 4))
    return {
        "name": "mpt-" + size,
        "vocab": int(m.get("vocab_size", 50368)),
        "hidden": d,
        "tied_embeddings": True,
        "norm": "layernorm",
        "position": "learned",
        "max_seq": 2048,
        "groups": [{
            "name": "decoder",
            "count": layers,
            "kind": "decoder",
            "hidden": d,
            "heads": heads,
            "kv_heads": heads,
            "head_dim": d // heads,
            "ffn": int(ratio * d),
            "ffn_kind": "gelu",
            "bias": False,
        }],
    }


def tables(text):
    """{section title: [row cells]} of the README's markdown tables."""
    out, cur, header = {}, None, None
    for line in text.splitlines():
        if line.startswith("## "):
            cur, header = line[3:].strip(), None
            out[cur] = []
        elif cur and line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if header is None:
                header = cells
            elif not cells[0].startswith("---"):
                out[cur].append(dict(zip(header, cells)))
    return out


def seq_text(s):
    return str(s) if s < 1024 else "%dK" % (s // 1024)


def run_row(set_name, cluster, r):
    size = r["Model"]
    seq, gpus = int(r["SeqLen (T)"]), int(r["# GPUs"])
    mb, ga, gb = int(r["MicroBatchSize"]), int(r["GradAccum"]), int(r["GlobalBatchSize"])
    if mb * ga * gpus != gb:
        raise SystemExit("%s %s seq %d: micro-batch %d x accumulation %d x %d GPUs != global batch %d" %
                         (set_name, size, seq, mb, ga, gpus, gb))
    if r["Sharding Strategy"] != "FULL_SHARD" or r["Activation CPUOffload"] != "False":
        raise SystemExit("%s %s seq %d: not FULL_SHARD without offload" % (set_name, size, seq))
    ac = r["Activation Checkpointing"] == "True"
    pure = r["MP Mode"] == "PURE"
    label = "MPT-%s, seq %s, %d GPUs, mb %d x %d%s%s" % (size.upper(), seq_text(seq), gpus, mb, ga,
                                                        ", full AC" if ac else "", ", PURE" if pure else "")
    return {
        "set": set_name,
        "label": label,
        "framework": "torchtitan",
        "model": "llm-foundry/mpt-%s.json" % size,
        "cluster": cluster,
        "gpus": gpus,
        "seq": seq,
        "max_seq": seq,
        "global_batch": gb,
        "micro_batch": mb,
        "tp": 1,
        "pp": 1,
        "cp": 1,
        "vp": 1,
        "zero": 3,
        "sp": False,
        "recompute": "full" if ac else "none",
        "dtype": "bf16",
        "fused_loss": True,  # loss_fn: fused_crossentropy, ComposerMPTCausalLM's default
        "attention_kernel": "triton",  # submit_benchmarks.py: --attn_impl defaults to triton
        "measured_tokens_per_s_per_gpu": int(r["Throughput (T/s/GPU)"]),
        "published_mfu": float(r["MFU"]),
        "published_hfu": float(r["HFU"]),
        "published_num_params": int(r["NumParams"]),
    }


def main():
    repo, rev = sys.argv[1], sys.argv[2]
    for size in SIZES:
        model = mpt_model(size, git(repo, "show", "%s:scripts/train/yamls/pretrain/mpt-%s.yaml" % (rev, size)))
        with open(os.path.join(HERE, "mpt-%s.json" % size), "w") as f:
            f.write(json.dumps(model, indent=2) + "\n")
    found = tables(git(repo, "show", "%s:%s" % (rev, BENCHMARK_README)))
    rows = []
    for title, (set_name, cluster) in TABLES.items():
        for r in found[title]:
            if r["Precision"] not in ("amp_bf16", "bf16"):
                continue
            rows.append(run_row(set_name, cluster, r))
    labels = [(r["set"], r["label"]) for r in rows]
    if len(set(labels)) != len(labels):
        raise SystemExit("duplicate labels")
    with open(RUNS) as f:
        doc = json.load(f)
    doc["runs"] = [r for r in doc["runs"] if not r["set"].startswith("llm-foundry-")] + rows
    with open(RUNS, "w") as f:
        f.write(json.dumps(doc, indent=1, ensure_ascii=False))
    print("%d runs: %s" % (len(rows), ", ".join("%s %d" % (s, sum(r["set"] == s for r in rows))
                                                 for s, _ in TABLES.values())))


if __name__ == "__main__":
    main()
