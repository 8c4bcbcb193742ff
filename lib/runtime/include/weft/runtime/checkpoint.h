// Sharded checkpoints on disk, torch-free (docs/runtime.md "Checkpoints and parameter files"):
//   <dir>/step-<N>/rank-<r>.bin  what rank r holds (weft-params format; weft/plan/checkpoint_layout.h
//                                names its entries: <unit>.params, .adam_m, .adam_v)
//   <dir>/step-<N>/plan.json     the plan the checkpoint was written under
//   <dir>/step-<N>/index.json    which slice of which full tensor every entry holds
//   <dir>/step-<N>/meta.json     written last: marks the step complete (step, world, plan hash,
//                                optimizer steps, format version 2)
//   <dir>/latest                 names the newest complete step
// A checkpoint loads under its own plan directly and under any other plan of the same model by
// re-sharding: each rank of the new plan reads the slices it needs from the files that hold them.
// The torch-side save and load (what goes into the entries) are lib/runtime/src/state.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "weft/core/error.h"
#include "weft/plan/checkpoint_layout.h"
#include "weft/plan/plan.h"
#include "weft/runtime/params_file.h"

namespace weft::runtime {

inline constexpr int kCheckpointVersion = 2;  // 1: no plan.json / index.json (loads only under its own plan)

struct CheckpointMeta {
  int version = kCheckpointVersion;
  int step = 0;
  int world = 0;
  std::string plan_hash;
  int64_t optimizer_steps = 0;
};

// "step-00000012".
std::string step_name(int step);

// A step directory of a checkpoint directory; complete once its meta.json exists.
struct CheckpointEntry {
  int step = 0;
  std::string path;
  bool complete = false;
};
std::vector<CheckpointEntry> list_checkpoints(const std::string& dir);
// The complete checkpoints beyond `keep` (never `newest`, never an incomplete directory).
std::vector<std::string> checkpoints_to_prune(const std::vector<CheckpointEntry>& all, int newest, int keep);

// The step directory `dir/latest` names (kIo naming the file when there is none), or, with
// step >= 0, that step's directory (kIo when it is missing or incomplete).
Result<std::string> checkpoint_step_dir(const std::string& dir, int step = -1);
Result<CheckpointMeta> read_checkpoint_meta(const std::string& step_dir);
// Writes plan.json and index.json of plan p into step_dir (rank 0, before meta.json).
Status write_checkpoint_layout(const std::string& step_dir, const Plan& p);
Status write_checkpoint_meta(const std::string& step_dir, const CheckpointMeta& meta);
// Names step `step` in dir/latest (after its meta.json is written).
Status write_latest(const std::string& dir, int step);
// The plan and index of a version-2 checkpoint; kBadInput for a version-1 checkpoint (it cannot be
// re-sharded: it names no layout).
Result<Plan> read_checkpoint_plan(const std::string& step_dir);
Result<CheckpointIndex> read_checkpoint_index(const std::string& step_dir);

// Rank `rank`'s state under plan `next` from the checkpoint in step_dir: its own file when the
// checkpoint was written under the same plan (hash `next_hash`) and world size; otherwise the file
// re-sharded from the files that hold each slice (only those are read). `resharded` (optional) says
// which it was. Errors name the file, the entry and the numbers.
Result<ParamsFile> rank_state(const std::string& step_dir, const CheckpointMeta& meta, const Plan& next,
                              const std::string& next_hash, int rank, bool* resharded = nullptr);

// `weft checkpoint convert`: writes the checkpoint of src (its latest step, or `step`) as a complete
// checkpoint of plan `next` in out_dir (the same step; out_dir/latest names it). `progress(rank)` is
// called before each rank's file. out_dir must not hold that step already.
Status convert_checkpoint(const std::string& src_dir, int step, const Plan& next, const std::string& out_dir,
                          const std::function<void(int)>& progress = {});

// `weft checkpoint inspect`: what a checkpoint holds, as text: step, world, optimizer steps, the
// plan's layout, each rank file's entries and size, each tensor's shape and the ranks holding it,
// and whether every tensor is held whole (an error if a rank file is missing or does not match
// the index).
Result<std::string> inspect_checkpoint(const std::string& dir, int step = -1);

}  // namespace weft::runtime
