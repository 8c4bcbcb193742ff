// Saving and restoring training state.
//   Consolidated parameters: every parameter at full size gathered to rank 0 (weft-params file).
//   Sharded checkpoints: <dir>/step-<N>/rank-<r>.bin holds what rank r owns (its parameters, or
//   its ZeRO-3 shard, and its AdamW moments); <dir>/step-<N>/meta.json, written by rank 0 after
//   every rank has renamed its file into place, marks the checkpoint complete; <dir>/latest names
//   the newest complete one. Every file is written to a temporary name and renamed, so a kill at
//   any moment leaves the previous checkpoint intact.
#pragma once

#include <string>

#include "weft/runtime/model.h"
#include "weft/runtime/optim.h"
#include "weft/runtime/params_file.h"

namespace weft::runtime {

// Collective over the world. Rank 0 gets every parameter in model order; other ranks get an empty
// file.
ParamsFile consolidate(Model& m, GroupSet& g, int step);

// Collective over the world. Saves step `step`; returns an error (kIo) naming the path on failure.
Status save_checkpoint(const std::string& dir, int step, Model& m, Optimizer& o, GroupSet& g,
                       const std::string& plan_hash, int keep);

// Loads the latest complete checkpoint in dir into m and o; returns its step. Errors: no complete
// checkpoint (kIo), a checkpoint of another plan or world size (kBadInput), a damaged file (kIo).
Result<int> load_checkpoint(const std::string& dir, Model& m, Optimizer& o, int rank, int world,
                            const std::string& plan_hash);

}  // namespace weft::runtime
