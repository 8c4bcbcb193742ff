// The data-parallel gradient reduction, overlapped with the backward pass (as PyTorch DDP's
// reducer). Each unit with zero < 3 is cut into buckets of whole parameters (weft/runtime/buckets.h),
// ordered from the last unit to the first and, inside a unit, from the last parameter to the first:
// the order in which backward finishes them. A post hook on every parameter's gradient
// accumulator (the AccumulateGrad node) counts the parameters whose gradient has arrived; when a
// bucket is complete and every bucket before it has been launched, its collective is launched on
// the unit's gradient channel (Channel::kGrad) and runs on the process group's own thread while
// backward goes on:
//   zero 0: all-reduce of the bucket's range of the unit's gradient buffer, in place;
//   zero 1: reduce-scatter of the range onto the owned shard (uneven pieces where the bucket
//           straddles shard boundaries);
//   zero 2: the hook copies each gradient into a staging buffer of its bucket and drops it (the
//           unit keeps no full-size gradient); the staging buffer is reduce-scattered and the
//           owned piece added into the shard accumulator.
// Zero 0 and 1 reduce during the last micro-batch's backward only (earlier ones just accumulate in
// the buffer); zero 2 reduces on every micro-batch. Launching in one fixed order keeps every member
// of a group issuing the same collectives in the same order. Whatever the hooks have not launched
// when backward returns (a parameter that received no gradient, or overlap turned off) is launched
// then, in the same order. Zero 3 units are not bucketed: gather_shard's backward reduce-scatters.
// Internal API of the runtime (needs libtorch): used by lib/runtime and lib/profiler, not torch-free code.
#pragma once

#include <torch/csrc/autograd/function.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "weft/runtime/model.h"

namespace weft::runtime {

struct GradSyncOptions {
  int64_t bucket_bytes = 25LL << 20;  // cap of a bucket (fp32 gradients); DDP's default 25 MiB
  bool overlap = true;                // launch from the hooks during backward; false: after it
};

// What the last step's final backward did (rank-local).
struct GradSyncStats {
  int buckets = 0;               // buckets reduced in the last micro-batch
  int launched_in_backward = 0;  // of those, launched before the backward pass returned
  int done_in_backward = 0;      // of those, already completed by the transport by then
  double wait_s = 0;             // time finish() waited for reductions after the last backward
};

class GradSync {
 public:
  // Registers the hooks on every parameter of m's units with zero < 3. m must outlive this object.
  GradSync(Model& m, GradSyncOptions o);
  ~GradSync();
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  // Before each micro-batch's backward of model chunk `chunk` (-1: of every unit); `last`: the
  // step's last backward of that chunk on this stage. Only the buckets of the chunk's units take
  // part (under the interleaved schedule a backward reaches one chunk).
  void begin_backward(bool last, int chunk = -1);
  // After each backward returned: launches the buckets the hooks did not, in order. After an
  // earlier micro-batch it also waits for zero-2 reductions of the micro-batch before it (at most
  // two micro-batches' staging buffers are alive).
  void end_backward();
  // After the last micro-batch: waits for every reduction (each unit's owned gradient is final).
  void finish();

  const GradSyncStats& stats() const { return stats_; }
  int num_buckets() const { return static_cast<int>(buckets_.size()); }

 private:
  struct Bucket {
    Unit* unit = nullptr;
    int unit_index = 0;
    int64_t begin = 0, end = 0;       // range of the unit's padded buffer
    int first_param = 0, last_param = 0;
    std::vector<int64_t> pieces;      // per shard of the sync group (zero 1, 2)
    bool active = false;              // reduced in the current backward
    int arrived = 0;                  // distinct parameters whose gradient arrived
    bool launched = false;
    at::Tensor staging;               // zero 2: this micro-batch's gradient of the range
    std::vector<Pending> pending;     // launched, not yet waited (oldest first)
  };
  void on_grad(int bucket, int unit, int param);
  void launch_ready();
  void launch(Bucket& b);

  Model& model_;
  GradSyncOptions opt_;
  std::vector<Bucket> buckets_;                   // in reduction order
  std::vector<std::vector<char>> arrived_;        // [unit][param] in the current backward
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // kept alive: they hold the hooks
  std::vector<uintptr_t> hook_keys_;
  std::vector<int> order_;                        // active buckets, in reduction order
  size_t next_ = 0;                               // next entry of order_ to launch
  bool in_backward_ = false, last_ = false;
  GradSyncStats stats_;
};

}  // namespace weft::runtime
