// Saving and restoring training state.
//   Consolidated parameters: every parameter at full size gathered to rank 0 (weft-params file).
//   Sharded checkpoints (the files: weft/runtime/checkpoint.h): <dir>/step-<N>/rank-<r>.bin holds
//   what rank r owns (its parameters, or its ZeRO-3 shard, and its AdamW moments); plan.json and
//   index.json say what every file holds; meta.json, written by rank 0 after every rank has renamed
//   its file into place, marks the checkpoint complete; <dir>/latest names the newest complete one.
//   Every file is written to a temporary name and renamed, so a kill at any moment leaves the
//   previous checkpoint intact.
#pragma once

#include <string>

#include "weft/runtime/model.h"
#include "weft/runtime/optim.h"
#include "weft/runtime/params_file.h"

namespace weft::runtime {

// This rank's training state as checkpoint entries (weft/plan/checkpoint_layout.h): per unit its
// parameters (or ZeRO-3 shard) and AdamW moments, in unit order.
ParamsFile rank_entries(Model& m);
// Loads entries in that form into m's units (throws InputError naming `where` and the entry when
// one is missing or of another size).
void load_state(Model& m, const ParamsFile& f, const std::string& where);
// Collective over the world: this rank's state re-sharded for plan `next` on the same ranks,
// exchanged between the ranks in memory (each rank sends each other rank, in one message, what it
// takes from it; what a rank already holds it takes from itself). The running model is m.
ParamsFile exchange_state(Model& m, const Plan& next, GroupSet& g);

// Collective over the world. Rank 0 gets every parameter in model order; other ranks get an empty
// file.
ParamsFile consolidate(Model& m, GroupSet& g, int step);

// Collective over the world. Saves step `step`; returns an error (kIo) naming the path on failure.
Status save_checkpoint(const std::string& dir, int step, Model& m, Optimizer& o, GroupSet& g,
                       const std::string& plan_hash, int keep);

// What a resume loaded.
struct Resumed {
  int step = 0;
  bool resharded = false;  // written under another plan or world size, re-sharded for this one
  int from_world = 0;
  std::string from_plan;   // the hash of the plan that wrote it
};

// Loads the latest complete checkpoint in dir into m and o: this rank's own file when it was
// written under the same plan and world size, else re-sharded from the files that hold what this
// rank needs (weft/runtime/checkpoint.h). Errors: no complete checkpoint (kIo), a checkpoint of
// another model or of format 1 under another plan (kBadInput), a damaged file (kIo).
Result<Resumed> load_checkpoint(const std::string& dir, Model& m, Optimizer& o, int rank, const std::string& plan_hash);

}  // namespace weft::runtime
