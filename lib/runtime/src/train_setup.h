// What train() does before anything connects (docs/runtime.md "Checks before anything connects"):
// the options, the plan, the token source and the device of one rank. Every error is an Error value
// naming the flag or field (kBadInput; kIo for files that cannot be read), and nothing here opens a
// connection, so a bad job fails on every rank at once.
#pragma once

#include <c10/core/Device.h>

#include <memory>
#include <string>

#include "weft/core/error.h"
#include "weft/plan/plan.h"
#include "weft/runtime/data.h"
#include "weft/runtime/support.h"
#include "weft/runtime/train.h"

namespace weft::runtime {

// The values and combinations of flags (ranges, enumerations, --resume without a directory).
Status check_options(const TrainOptions& o);

// The plan file (--plan, whose model must be --model's when both are given), or else
// data_parallel_plan() of --model or the built-in model over env.world ranks; then what the runtime
// cannot run (check_supported) and a world size other than the plan's are refused.
Result<Plan> load_plan(const TrainOptions& o, const DistEnv& env);

// The token source of --data / --data-format (synthetic tokens without --data), for samples of
// plan.train.seq + 1 tokens of the plan's vocabulary.
Result<std::unique_ptr<TokenSource>> open_data(const TrainOptions& o, const Plan& plan);

// weft train --varlen (docs/varlen.md "Running a step"): the documents of the token file, the
// batches of each step and the allowed group sizes, checked against the plan (one stage, tp 1,
// Ulysses 1, a batch planner given).
struct VarlenSetup {
  std::shared_ptr<const DocumentBatches> batches;
  int min_group = 1, max_group = 1;
};
Result<VarlenSetup> setup_varlen(const TrainOptions& o, const Plan& plan, const TokenSource& data, int world);

// --device and --backend: cpu; cuda:LOCAL_RANK under NCCL, cuda:(LOCAL_RANK mod GPUs) under Gloo;
// auto: cuda when a GPU is usable (and, with more than one rank, the libtorch has NCCL), else cpu.
// A request that cannot be met is an error naming why and what to do, before any process group.
struct DeviceChoice {
  at::Device device = at::kCPU;
  bool nccl = false;  // CUDA tensors between ranks through NCCL (else Gloo, staged through host memory)
};
Result<DeviceChoice> pick_device(const std::string& want, const std::string& backend, const DistEnv& env);

}  // namespace weft::runtime
