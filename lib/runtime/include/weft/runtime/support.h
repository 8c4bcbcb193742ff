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
Status check_supported(const Plan& p);

// Settings the runtime adjusts rather than refuses (the dtype on a CPU build), one line each.
std::vector<std::string> plan_warnings(const Plan& p);

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
