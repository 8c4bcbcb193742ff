// Checkpoint layout: which slice of which full tensor every entry of a sharded checkpoint holds, and
// how to fill the entries of another plan's ranks from them (re-sharding). Torch-free and
// file-free: the runtime (lib/runtime/src/state.cc) and `weft checkpoint convert` read and write
// the files; this says what goes where (docs/runtime.md "Checkpoints that move between plans").
//
// A sharded checkpoint has one file per rank. Rank r's file holds, for every unit r holds under the
// plan (weft/plan/geometry.h unit_specs), in unit order, three entries:
//   <unit>.params  the parameters r keeps: the unit's flat buffer [0, numel), or under ZeRO-3 its
//                  shard [k * padded / n, (k + 1) * padded / n) (k: r's place in the unit's sync group
//                  of n ranks; the tail past numel is padding);
//   <unit>.adam_m, <unit>.adam_v  AdamW's moments of the range r updates: the whole buffer under
//                  ZeRO 0, r's shard under ZeRO 1-3.
// A unit's flat buffer is its parameters back to back, each the slice of a full tensor the rank
// holds (ParamSpec: along shard_dim, [shard_start, shard_start + shard_len); shard_dim -1 the whole
// tensor), row-major. So every element of an entry is one element of one full tensor; the index
// (checkpoint_index) lists, per entry, its pieces: runs of one slice, as plain numbers, so that a
// reader needs no plan to find a tensor. Replicas (data-parallel copies, tensor-parallel copies of
// a norm, the two copies of a tied embedding) hold equal values; any one serves.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "weft/core/error.h"
#include "weft/core/json.h"
#include "weft/plan/plan.h"

namespace weft {

// A tensor shape as messages print it: shape_label({64, 32}) == "[64,32]".
std::string shape_label(const std::vector<int64_t>& shape);

// What a checkpoint entry holds of the training state.
enum class StateKind { kParams, kAdamM, kAdamV };
const char* entry_suffix(StateKind k);  // "params", "adam_m", "adam_v"

// Elements [local_begin, local_begin + count) of one rank's slice of a full tensor (row-major within
// the slice), stored at [offset, offset + count) of the entry.
struct SavedPiece {
  std::string param;                 // full tensor name, e.g. "layers.3.attn.wq"
  std::vector<int64_t> full_shape;
  int shard_dim = -1;                // -1: the slice is the whole tensor
  int64_t shard_start = 0, shard_len = 0;
  int64_t local_begin = 0, count = 0;
  int64_t offset = 0;
  bool operator==(const SavedPiece&) const = default;
};

struct SavedEntry {
  std::string name;                  // "<unit>.<suffix>", as in the rank's file
  StateKind kind = StateKind::kParams;
  int64_t numel = 0;                 // values in the entry (ZeRO padding included)
  std::vector<SavedPiece> pieces;    // by offset; elements outside every piece are padding
  bool operator==(const SavedEntry&) const = default;
};

// The entries of rank `rank`'s file under plan p, in file order.
std::vector<SavedEntry> saved_entries(const Plan& p, int rank);

// Every rank's entries: what a checkpoint written under one plan holds.
struct CheckpointIndex {
  int world = 0;
  std::vector<std::vector<SavedEntry>> ranks;  // [rank] -> entries of "rank-<rank>.bin"
  bool operator==(const CheckpointIndex&) const = default;
};
CheckpointIndex checkpoint_index(const Plan& p);

// index.json: {"format": "weft-checkpoint-index", "version": 1, "world": N, "files": [{"rank": r,
// "file": "rank-<r>.bin", "entries": [{"name", "numel", "pieces": [{"param", "shape", "dim",
// "start", "len", "local_begin", "count", "offset"}]}]}]}. The reader checks every field and that
// pieces lie inside their entry and their slice (errors name the field and the numbers).
Json to_json(const CheckpointIndex& idx);
Result<CheckpointIndex> checkpoint_index_from_json(const Json& j, const std::string& path = "index");

// The tensors a checkpoint holds (name -> full shape) and, for each whose params or moments it does
// not hold whole, one line "embed.wte (adam_m): 1024 of 2048 elements missing"; no lines: complete.
struct IndexCoverage {
  std::vector<std::pair<std::string, std::vector<int64_t>>> tensors;  // by name
  std::vector<std::string> gaps;
};
IndexCoverage index_coverage(const CheckpointIndex& idx);

// One copy: `count` values from entry `src_entry` of rank `src_rank`'s file at `src_offset` to the
// filled entry at `dst_offset`.
struct EntryCopy {
  int src_rank = 0;
  int src_entry = 0;                 // index into the source rank's entries
  int64_t src_offset = 0, dst_offset = 0, count = 0;
  bool operator==(const EntryCopy&) const = default;
};
struct EntryFill {
  std::string name;
  int64_t numel = 0;                 // the entry's size under the new plan; uncopied values are 0
  std::vector<EntryCopy> copies;
};

// How to make rank `rank`'s file under plan `next` from a checkpoint with index `from`: every entry
// saved_entries(next, rank) lists, with the copies that fill it. Where replicas hold an element,
// rank `prefer`'s copy is taken when it holds one (a running job re-sharding in place takes what
// a rank already holds from itself), else the lowest rank's. Errors (kBadInput) when the two hold
// different models: a tensor of one that the other lacks, or of another shape (named with both
// shapes); kIo when the checkpoint lacks elements of a tensor (a damaged index).
Result<std::vector<EntryFill>> reshard_rank(const CheckpointIndex& from, const Plan& next, int rank, int prefer = -1);

// reshard_rank for many ranks of one checkpoint: the index's pieces are gathered by tensor once
// (reshard_rank gathers them on every call). Keeps a reference to `from`.
class Resharder {
 public:
  explicit Resharder(const CheckpointIndex& from);
  ~Resharder();
  Resharder(const Resharder&) = delete;
  Resharder& operator=(const Resharder&) = delete;
  Result<std::vector<EntryFill>> rank(const Plan& next, int rank, int prefer = -1) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Bytes of training state (fp32 parameters and both AdamW moments) that change ranks when a job
// running plan a switches to plan b on the same ranks (each rank taking what it holds from
// itself); kBadInput as reshard_rank when the models differ.
Result<int64_t> reshard_bytes_moved(const Plan& a, const Plan& b);

// An entry's values from the full tensors its pieces slice: `full(name)` returns the tensor's values
// (row-major, product(full_shape) of them) or an error, which is passed on; values outside every
// piece (ZeRO padding) are 0. kIo when a tensor has another number of values than the piece's shape.
// Loading weights from outside (a Hugging Face checkpoint) into any plan's ranks goes through it.
Result<std::vector<float>> entry_from_full(
    const SavedEntry& e, const std::function<Result<const std::vector<float>*>(const SavedPiece&)>& full);

// Runs the copies of one fill; `source(rank, entry)` returns that source entry's values (its size is
// checked against the index: kIo naming the rank and entry when they differ).
Result<std::vector<float>> fill_entry(const CheckpointIndex& from, const EntryFill& fill,
                                      const std::function<Result<const std::vector<float>*>(int, int)>& source);

}  // namespace weft
