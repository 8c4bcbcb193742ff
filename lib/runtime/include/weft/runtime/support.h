// What the runtime can execute, checked before any process group exists, and the process
// environment it runs in (torchrun conventions). Torch-free.
#pragma once

#include <string>
#include <vector>

#include "weft/core/error.h"
#include "weft/plan/plan.h"

namespace weft::runtime {

// Runs validate(plan) and then refuses what this runtime cannot execute, naming it and where it
// appears: context parallelism (cp > 1), the interleaved schedule (vp > 1), MoE / expert
// parallelism, encoder and cross-attention layers, relative positions, and layers whose hidden
// size differs from the model's. An Ok result means every other combination of tp, sp, ulysses,
// dp, zero, recompute and pp (gpipe / 1f1b, uneven stages, layer-wise layouts) is executed.
// The rules and their messages are weft::runtime_supports() (weft/plan/runtime_support.h), which
// the search also keeps to when a plan is meant for this runtime.
Status check_supported(const Plan& p);

// The dtype the layers compute in (`weft train --precision`): fp32, or bf16 as mixed precision
// (bf16 weights cast from fp32 parameters, bf16 activations and tensor/sequence/pipeline traffic;
// fp32 gradients, gradient reduction, optimizer state and loss). `want`: "fp32", "bf16", or "auto":
// the plan's train.dtype on CUDA when it is bf16, otherwise fp32 (CPU bf16 matrix products in this
// libtorch are slower than fp32; fp16 needs loss scaling, which the runtime does not have). `want`
// is one of the three (check_options refuses anything else, before any process group).
DType run_precision(const Plan& p, const std::string& want, bool cuda);

// The one log line saying in which dtype the run computes and communicates, on `device` ("cpu",
// "cuda" with NCCL, or "cuda-gloo": CUDA tensors staged through Gloo), for the dtype `run` of
// run_precision(). When `run` differs from the plan's train.dtype the line starts with
// "train.dtype ..." and says why (a warning: the plan is adjusted, not refused).
std::string precision_note(const Plan& p, const std::string& device, DType run);

// The process's place in the job, read like torchrun: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
// MASTER_PORT; with fallbacks for mpirun (OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK) and srun
// (SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID). Nothing set means one process: rank 0 of 1.
struct DistEnv {
  int rank = 0;
  int world = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
};
// Errors (kBadInput) name the variable and its value when one is malformed or out of range.
Result<DistEnv> read_dist_env();

}  // namespace weft::runtime
