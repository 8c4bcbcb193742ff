#!/usr/bin/env bash
# One GPU session's measurements (data/reference/h100/README.md): builds weft against the machine's
# PyTorch 2.x, checks one CUDA rank against the CPU, profiles Llama-2-7B and GPT-3 2.7B layers in bf16
# and measures the GPU through PyTorch. Results go to $OUT (default ./gpu-out) as h100.tgz and steps.log.
# Arguments: the steps to run, of measure parity multi profile loop mixed hardware profilebf16 loopbf16
# moe moeparity moeprofile (default the first five: the fp32 session; the next four measure mixed
# precision and the hardware, the last three mixture-of-experts layers).
# Needs: PyTorch with CUDA (python3 -c 'import torch'), CMake, a C++20 compiler; nlohmann-json and
# CLI11 from CMAKE_PREFIX_PATH or from .dev/prefix (headers and CMake configs copied there).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
R=$ROOT/gpu-results
mkdir -p "$OUT" "$R"
cd "$ROOT"
export PATH=/usr/local/cuda/bin:$PATH
# Parameter files stay behind (tens of MB); the logs and profiles come back.
pack() { tar czf "$OUT/h100.tgz.part" --exclude='*.params' -C "$ROOT" gpu-results && mv "$OUT/h100.tgz.part" "$OUT/h100.tgz"; }
log() { pack 2>/dev/null; echo "[$(date -u +%T)] $*" | tee -a "$OUT/steps.log"; }
trap pack EXIT
STEPS=" ${*:-measure parity multi profile loop} "
want() { [[ "$STEPS" == *" $1 "* ]]; }

log "environment"
{ nvidia-smi; python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
  "cudnn", torch.backends.cudnn.version(), torch.cuda.get_device_name(0))'; nvcc --version; cmake --version;
  c++ --version; nproc; uname -a; } > "$R/env.txt" 2>&1
TP=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
TINC=$(dirname "$(dirname "$TP")")/include
EXTRA=()
if [ ! -f "$TINC/gloo/algorithm.h" ] && [ -d .dev/gloo ]; then
  log "PyTorch ships no gloo headers: using .dev/gloo"
  EXTRA+=("-DCMAKE_CXX_FLAGS=-isystem $ROOT/.dev/gloo")
fi
GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)

# GPU-bound PyTorch measurements (CUDA-event timed) run beside the build, one after the other.
MEASURE=
if want measure || want moe; then
  (
    if want measure; then
      log "python kernel measurements (GEMM, attention, bandwidth)"
      timeout 200 python3 scripts/gpu/measure.py "$R/torch_kernels.json" kernels > "$R/measure_kernels.log" 2>&1 \
        || log "kernel measurements failed: $(tail -3 "$R/measure_kernels.log")"
    fi
    if want moe; then
      log "python MoE kernel measurements (grouped GEMM, fp8, permutation, router)"
      timeout 240 python3 scripts/gpu/moe.py "$R/moe_kernels.json" kernels > "$R/moe_kernels.log" 2>&1 \
        || log "MoE kernel measurements failed: $(tail -3 "$R/moe_kernels.log")"
    fi
  ) &
  MEASURE=$!
fi

if [ "$STEPS" = " measure " ]; then  # the PyTorch measurements alone, on an idle CPU: no build
  wait
  timeout 120 python3 scripts/gpu/measure.py "$R/torch_host.json" host > "$R/measure_host.log" 2>&1 \
    || log "host measurements failed: $(tail -3 "$R/measure_host.log")"
  log "done"
  exit 0
fi
log "configure"
cmake -S . -B build-gpu "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DWEFT_BUILD_TESTS=OFF -DWEFT_BUILD_BENCH=OFF \
  -DCMAKE_PREFIX_PATH="$TP;$ROOT/.dev/prefix" "${EXTRA[@]}" > "$R/configure.log" 2>&1 \
  || { log "configure failed"; tail -30 "$R/configure.log"; exit 1; }
log "build"
KEEP=(-k 0); [ ${#GEN[@]} -eq 0 ] && KEEP=(-k)
cmake --build build-gpu -j16 --target weft -- "${KEEP[@]}" > "$R/build.log" 2>&1
BUILD=$?
[ -n "$MEASURE" ] && wait $MEASURE
[ $BUILD -eq 0 ] || { log "build failed"; grep -m30 -A4 "error:" "$R/build.log"; exit 1; }
if want measure; then
  log "python host measurements (launch overhead, eager Llama-2-7B layer)"
  timeout 120 python3 scripts/gpu/measure.py "$R/torch_host.json" host > "$R/measure_host.log" 2>&1 \
    || log "host measurements failed: $(tail -3 "$R/measure_host.log")"
fi
if want moe; then
  log "python MoE block measurements (GPU against wall time)"
  timeout 150 python3 scripts/gpu/moe.py "$R/moe_host.json" host > "$R/moe_host.log" 2>&1 \
    || log "MoE block measurements failed: $(tail -3 "$R/moe_host.log")"
fi
W=build-gpu/bin/weft
log "built: $($W --version)"

if want parity; then
  log "parity: one rank, cpu vs cuda, fp32"
  for dev in cpu cuda; do
    $W train --steps 20 --seed 7 --format json --device $dev --progress off --save-params "$R/gpt_$dev.params" \
      > "$R/parity_gpt_$dev.jsonl" 2> "$R/parity_gpt_$dev.err" || log "train gpt $dev failed: $(tail -2 "$R/parity_gpt_$dev.err")"
    $W train --model scripts/gpu/small-llama.json --seq 128 --global-batch 8 --micro-batches 2 --lr 3e-3 --steps 20 \
      --seed 7 --format json --device $dev --progress off --save-params "$R/llama_$dev.params" \
      > "$R/parity_llama_$dev.jsonl" 2> "$R/parity_llama_$dev.err" || log "train llama $dev failed: $(tail -2 "$R/parity_llama_$dev.err")"
  done
fi

# Several ranks on the one GPU, CUDA tensors through Gloo (NCCL refuses two ranks on one device):
# each plan of scripts/gpu/plans (small-llama, 2 or 4 ranks) against one rank with the same batch.
if want multi; then
  log "parity: several ranks on one GPU (--backend gloo)"
  for m in 1 2 4; do
    $W train --model scripts/gpu/small-llama.json --seq 128 --global-batch 8 --micro-batches $m --lr 3e-3 --steps 10 \
      --seed 7 --format json --device cuda --progress off > "$R/multi_ref_m$m.jsonl" 2> "$R/multi_ref_m$m.err" || log "reference m $m failed: $(tail -2 "$R/multi_ref_m$m.err")"
  done
  for p in dp2 dp2z3 tp2sp pp2 ulysses2 dp2tp2z1; do
    n=$(python3 -c "import json; c=json.load(open('data/reference/h100/plans/parity_$p.json'))['cluster']; print(c['nodes'] * c['gpus_per_node'])")
    timeout 120 $W launch -n "$n" -- $W train --plan data/reference/h100/plans/parity_$p.json --lr 3e-3 --steps 10 --seed 7 \
      --format json --device cuda --backend gloo --progress off > "$R/multi_$p.jsonl" 2> "$R/multi_$p.err" || log "plan $p failed: $(tail -3 "$R/multi_$p.err")"
  done
fi

# profile NAME TIMEOUT ARGS...: one `weft profile model` run into $R/NAME.json.
profile() {
  local name=$1 limit=$2; shift 2
  log "profile model: $name"
  timeout "$limit" $W profile model "$@" --threads 8 --time-per-point 0.5 --progress off --out "$R/$name.json" \
    > "$R/profile_$name.log" 2>&1 || log "profile $name failed: $(tail -3 "$R/profile_$name.log")"
}
if want profile; then
  profile llama-2-7b_bf16 170 --model llama-2-7b --device cuda --dtype bf16 --seq 4096 --micro-batch 1 2 --recompute none full
  profile gpt3-2.7b_bf16 150 --model gpt3-2.7b --device cuda --dtype bf16 --seq 2048 --micro-batch 1 2 3 4 --recompute none
  # The closed loop's model, as it trains (fp32).
  profile gpt3-1.3b_fp32 100 --model gpt3-1.3b --device cuda --dtype fp32 --seq 1024 --micro-batch 2 4 8 --recompute none
fi

if want loop; then
  log "closed loop: gpt3-1.3b, fp32, one GPU"
  for cfg in "8 1" "8 2" "16 4"; do
    set -- $cfg
    timeout 90 $W train --model gpt3-1.3b --seq 1024 --global-batch $1 --micro-batches $2 --steps 6 --seed 7 \
      --format json --device cuda --progress off > "$R/loop_gb$1_mb$2.jsonl" 2> "$R/loop_gb$1_mb$2.err" \
      || log "loop gb $1 mb $2 failed: $(tail -2 "$R/loop_gb$1_mb$2.err")"
  done
  for p in loop_gb16_m1_full loop_gb8_m1_selective; do  # recompute full and selective
    timeout 90 $W train --plan data/reference/h100/plans/$p.json --steps 6 --seed 7 --format json --device cuda --progress off \
      > "$R/$p.jsonl" 2> "$R/$p.err" || log "loop $p failed: $(tail -2 "$R/$p.err")"
  done
fi

# Mixed precision (--precision bf16) on CUDA: one rank against fp32, several ranks on the GPU against
# one bf16 rank.
if want mixed; then
  log "mixed precision: one rank, fp32 vs bf16 on cuda"
  for pr in fp32 bf16; do
    $W train --steps 20 --seed 7 --format json --device cuda --precision $pr --progress off \
      > "$R/mixed_gpt_$pr.jsonl" 2> "$R/mixed_gpt_$pr.err" || log "train gpt $pr failed: $(tail -2 "$R/mixed_gpt_$pr.err")"
    $W train --model scripts/gpu/small-llama.json --seq 128 --global-batch 8 --micro-batches 2 --lr 3e-3 --steps 20 \
      --seed 7 --format json --device cuda --precision $pr --progress off \
      > "$R/mixed_llama_$pr.jsonl" 2> "$R/mixed_llama_$pr.err" || log "train llama $pr failed: $(tail -2 "$R/mixed_llama_$pr.err")"
  done
  for m in 1 2 4; do
    $W train --model scripts/gpu/small-llama.json --seq 128 --global-batch 8 --micro-batches $m --lr 3e-3 --steps 10 \
      --seed 7 --format json --device cuda --precision bf16 --progress off > "$R/mixed_ref_m$m.jsonl" 2> "$R/mixed_ref_m$m.err" \
      || log "bf16 reference m $m failed: $(tail -2 "$R/mixed_ref_m$m.err")"
  done
  for p in dp2 dp2z3 tp2sp pp2 ulysses2 dp2tp2z1; do
    n=$(python3 -c "import json; c=json.load(open('data/reference/h100/plans/parity_$p.json'))['cluster']; print(c['nodes'] * c['gpus_per_node'])")
    timeout 120 $W launch -n "$n" -- $W train --plan data/reference/h100/plans/parity_$p.json --lr 3e-3 --steps 10 --seed 7 \
      --format json --device cuda --backend gloo --precision bf16 --progress off > "$R/mixed_$p.jsonl" 2> "$R/mixed_$p.err" \
      || log "bf16 plan $p failed: $(tail -3 "$R/mixed_$p.err")"
  done
fi

if want hardware; then
  log "profile hardware: one GPU"
  timeout 60 $W profile hardware --device cuda --progress off --out "$R/hardware.json" > "$R/hardware.log" 2>&1 \
    || log "profile hardware failed: $(tail -3 "$R/hardware.log")"
fi

# The closed loop in mixed precision: the fp32 loop's five plans with train.dtype bf16.
if want loopbf16; then
  log "closed loop: gpt3-1.3b, bf16 mixed precision, one GPU"
  for p in loop_bf16_gb8_m1 loop_bf16_gb8_m2 loop_bf16_gb16_m4 loop_bf16_gb16_m1_full loop_bf16_gb8_m1_selective; do
    timeout 90 $W train --plan data/reference/h100/plans/$p.json --steps 6 --seed 7 --format json --device cuda --progress off \
      > "$R/$p.jsonl" 2> "$R/$p.err" || log "loop $p failed: $(tail -2 "$R/$p.err")"
  done
fi

# The Llama-2-7B and GPT-3 2.7B layers, embedding and head as --precision bf16 trains them.
if want profilebf16; then
  profile llama-2-7b_bf16 200 --model llama-2-7b --device cuda --dtype bf16 --seq 4096 --micro-batch 1 2 --recompute none full
  profile gpt3-2.7b_bf16 150 --model gpt3-2.7b --device cuda --dtype bf16 --seq 2048 --micro-batch 1 2 3 4 --recompute none
fi
# MoE in weft's runtime on CUDA: one rank against the CPU (fp32), expert-parallel plans of 2 and 4
# ranks sharing the GPU through Gloo against one CUDA rank, and the layers of Qwen3-30B-A3B (every
# expert local; and 16 experts of top 8, one rank's share under expert degree 8) and Mixtral 8x7B.
if want moeparity; then
  log "MoE parity: one rank cpu vs cuda, expert-parallel plans on the GPU"
  for dev in cpu cuda; do
    $W train --model scripts/gpu/small-moe.json --seq 128 --global-batch 8 --micro-batches 1 --lr 3e-3 --steps 20 \
      --seed 7 --format json --device $dev --progress off > "$R/moe_parity_$dev.jsonl" 2> "$R/moe_parity_$dev.err" \
      || log "train moe $dev failed: $(tail -2 "$R/moe_parity_$dev.err")"
  done
  $W train --model scripts/gpu/small-moe.json --seq 128 --global-batch 8 --micro-batches 1 --lr 3e-3 --steps 10 \
    --seed 7 --format json --device cuda --progress off > "$R/moe_ref_m1.jsonl" 2> "$R/moe_ref_m1.err" \
    || log "moe reference failed: $(tail -2 "$R/moe_ref_m1.err")"
  for p in parity_moe_ep2 parity_moe_tp2sp_ep4; do
    n=$(python3 -c "import json; c=json.load(open('data/reference/h100/plans/$p.json'))['cluster']; print(c['nodes'] * c['gpus_per_node'])")
    timeout 120 $W launch -n "$n" -- $W train --plan data/reference/h100/plans/$p.json --lr 3e-3 --steps 10 --seed 7 \
      --format json --device cuda --backend gloo --progress off > "$R/multi_$p.jsonl" 2> "$R/multi_$p.err" || log "plan $p failed: $(tail -3 "$R/multi_$p.err")"
  done
fi
if want moeprofile; then
  profile qwen3-30b-a3b_bf16 150 --model tests/spec/data/qwen3-30b-a3b.config.json --device cuda --dtype bf16 --seq 4096 \
    --micro-batch 1 2 --recompute none
  profile qwen3-30b-a3b-ep8-local_bf16 120 --model scripts/gpu/qwen3-moe-ep8-local.json --device cuda --dtype bf16 --seq 4096 \
    --micro-batch 1 2 --recompute none
  profile mixtral-8x7b_bf16 120 --model mixtral-8x7b --device cuda --dtype bf16 --seq 4096 --micro-batch 1 --recompute none
fi
log "done"
