// Comm: the small collective interface the parallel code uses, and GroupSet, the process groups
// of one rank built from the plan. Everything c10d-specific lives in comm.cc, so a libtorch with
// the ProcessGroup/Backend split (2.x) or native reduce_scatter needs changes there only.
// Internal API of the runtime (needs libtorch): used by lib/runtime and lib/profiler, not torch-free code.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace weft::runtime {

// A pending operation. wait() blocks until it completes (rethrowing its error), then runs the
// continuation (e.g. the local sum of a reduce-scatter). Keeps its buffers alive until then.
class Pending {
 public:
  Pending() = default;
  Pending(c10::intrusive_ptr<c10d::Work> w, std::vector<at::Tensor> keep, std::function<void()> then = {});
  Pending(Pending&&) noexcept;
  Pending& operator=(Pending&&) noexcept;
  ~Pending();
  void wait();
  // Runs f after the operation and the continuation so far, when it is waited on (at once for an
  // empty Pending: its operation has completed).
  void and_then(std::function<void()> f);
  bool done() const { return done_; }
  // Whether the operation has finished on the transport's side (wait() may still have to run the
  // continuation). True for an empty Pending.
  bool completed() const;

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::vector<at::Tensor> keep_;
  std::function<void()> then_;
  bool done_ = true;
};

// Waits for a transport operation, counting the time blocked in comm_blocked_s().
void wait_work(const c10::intrusive_ptr<c10d::Work>& w);
// --measure-memory counts what this thread allocates and frees (c10's memory reporting is per
// thread), but Gloo's worker thread drops its reference to a finished work a moment after waking
// the waiter, and when it drops the last one the tensors the work holds are freed there, unseen,
// which inflates the count by chance. With `on`, wait_work() then waits (at most 50 ms) until the
// caller holds the work alone. Off by default: a run that does not measure never waits for it.
void settle_work_on_wait(bool on);
// Seconds this process has spent blocked waiting for collectives and point-to-point operations
// (every wait of a Comm or a Pending), from its start; rises monotonically. The --slow test hook
// subtracts it from a pass's time to get the rank's own compute.
double comm_blocked_s();

// A group of ranks. Tensors are float32/float64/int64 CPU tensors, or CUDA tensors in a job built
// with CommConfig::cuda (then CUDA tensors go through NCCL, CPU ones through Gloo); inputs need not
// be contiguous. Every member must call the same collectives in the same order. A group of size 1
// performs no communication. All calls throw c10::Error (wrapped by the caller) on a transport failure or a
// timeout; after either the group is unusable and the job must stop.
class Comm {
 public:
  virtual ~Comm() = default;
  int rank() const { return rank_; }            // rank inside the group
  int size() const { return static_cast<int>(ranks_.size()); }
  const std::vector<int>& ranks() const { return ranks_; }  // global ranks, ascending
  const std::string& name() const { return name_; }

  // Sum over the group, in place.
  virtual void allreduce_sum(at::Tensor& t) = 0;
  virtual Pending allreduce_sum_async(at::Tensor t) = 0;
  // Maximum over the group, in place.
  virtual void allreduce_max(at::Tensor& t) = 0;
  // Concatenation of every member's tensor along a new leading dimension: [size, *t.shape].
  virtual at::Tensor allgather(const at::Tensor& t) = 0;
  // Gathers every member's flat shard into `out` ([size * shard.numel()] contiguous), in place.
  virtual Pending allgather_into_async(at::Tensor out, const at::Tensor& shard) = 0;
  // in: [size * n] (any shape, numel divisible by size); returns this member's n-element slice of
  // the elementwise sum over members, summed in rank order (bitwise equal to r0 + r1 + ...).
  virtual at::Tensor reduce_scatter(const at::Tensor& in) = 0;
  // As reduce_scatter; `then` receives the result when wait() runs.
  virtual Pending reduce_scatter_async(const at::Tensor& in, std::function<void(at::Tensor)> then) = 0;
  // Uneven reduce-scatter: `in` (flat, sum(counts) elements) is cut into size() consecutive pieces
  // of counts[i] elements; member i receives the rank-order sum over members of piece i (counts[i]
  // elements, possibly none), passed to `then` when wait() runs. Every member passes equal counts.
  virtual Pending reduce_scatter_v_async(const at::Tensor& in, std::vector<int64_t> counts,
                                         std::function<void(at::Tensor)> then) = 0;
  // Equal-split all-to-all over the leading dimension: in [size, ...] -> out [size, ...] where
  // out[j] on member i is in[i] of member j.
  virtual at::Tensor alltoall(const at::Tensor& in) = 0;
  // Uneven all-to-all over the leading dimension (MoE token dispatch): `in` holds send_rows[j] rows
  // for member j, in member order; returns recv_rows[j] rows from member j, in member order.
  // Member i's send_rows[j] must equal member j's recv_rows[i] (callers exchange the counts
  // first). Gloo and NCCL send exactly those rows; the base version (any Comm) pads every piece to
  // the group's largest through alltoall().
  virtual at::Tensor alltoall_v(const at::Tensor& in, const std::vector<int64_t>& send_rows,
                                const std::vector<int64_t>& recv_rows);
  // Point-to-point with a group rank. send does not block (keep the Pending until the peer has
  // received); recv blocks until the tensor arrived. On a group of one rank both are invariant
  // failures (WEFT_ASSERT: there is no peer).
  virtual Pending send(const at::Tensor& t, int peer, int tag) = 0;
  virtual void recv(at::Tensor& t, int peer, int tag) = 0;
  virtual void barrier() = 0;

 protected:
  Comm(std::vector<int> ranks, int rank, std::string name)
      : ranks_(std::move(ranks)), rank_(rank), name_(std::move(name)) {}
  std::vector<int> ranks_;
  int rank_ = 0;
  std::string name_;
};

struct CommConfig {
  int rank = 0;
  int world = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::chrono::milliseconds timeout{60000};  // the store: joining the job, store operations
  // One collective or point-to-point transfer of a Gloo or NCCL group (PyTorch's default 30 min).
  std::chrono::milliseconds collective_timeout{1800000};
  // CUDA tensors: with nccl, each group also gets a ProcessGroupNCCL for them (needs a libtorch with
  // NCCL: USE_C10D_NCCL, which callers check first with nccl_compiled(); GroupSet asserts it when
  // world > 1; the current CUDA device must already be set); without, they are copied to host
  // memory, through the group's Gloo, and back (ranks may then share a GPU).
  bool cuda = false;
  bool nccl = false;
  // An emulated slow network between nodes (weft train --throttle-inter-node; 0: off). Ranks r and
  // q are on one node when r / gpus_per_node == q / gpus_per_node. Every all-to-all of uneven rows
  // (alltoall_v: the MoE dispatch and combine, forward and backward) holds the calling rank, after
  // its transfer, for the larger of its bytes sent to and received from other nodes at this many
  // bytes/s, as a link of that rate would (NetMoE's all-to-all time of one rank; the group's next
  // collective waits for its slowest member). Other collectives and traffic inside a node run as
  // they are.
  double throttle_inter_node_Bps = 0;
  int gpus_per_node = 1;
};

// CUDA tensors through `gloo` (a group's Gloo Comm): each is copied to host memory, travels through
// Gloo and its results are copied back to its device; CPU tensors pass straight through, unless
// copy_cpu_tensors (tests: the same copies on the CPU). What GroupSet builds for CUDA without NCCL.
std::unique_ptr<Comm> host_staged(std::unique_ptr<Comm> gloo, bool copy_cpu_tensors = false);

// Whether this libtorch was built with ProcessGroupNCCL (USE_C10D_NCCL).
bool nccl_compiled();

// What one rank issued on one group of two or more ranks: calls and bytes per operation, bytes
// per call in the nccl-tests convention the cost model prices (weft/cost/collectives.h): all-reduce
// the reduced buffer, all-gather the gathered output, reduce-scatter the input, all-to-all the send
// buffer, send the message. allreduce_max counts as an all-reduce; recv and barrier are not counted.
enum class CollectiveOp { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kSend };
inline constexpr int kCollectiveOps = 5;
const char* to_string(CollectiveOp op);
struct CollectiveRecord {
  CollectiveOp op = CollectiveOp::kAllReduce;
  std::vector<int> ranks;  // the group's global ranks, ascending
  int64_t calls = 0, bytes = 0;
};

// A group of ranks can exist twice: the main channel carries every collective of the forward and
// backward passes and the optimizer; the gradient channel is a second process group over the same
// ranks for the bucketed gradient reduction alone, so the reductions launched during backward never
// queue behind (or interleave with) the synchronous collectives of the backward pass itself.
enum class Channel { kMain, kGrad };

// The process groups of one rank. build() creates, in one global order that every rank computes
// identically, every group in `groups` that this rank belongs to (groups it is not in are skipped;
// each sorted ascending; duplicates collapse). get() returns a built group (asking for one that
// was not built is an invariant failure, WEFT_ASSERT); singleton groups are local and free. No
// global state: the GroupSet is owned by the training run.
class GroupSet {
 public:
  explicit GroupSet(const CommConfig& cfg);  // connects the store (rank 0 hosts it) when world > 1
  ~GroupSet();
  void build(std::vector<std::vector<int>> groups, Channel ch = Channel::kMain);
  Comm& get(const std::vector<int>& ranks, Channel ch = Channel::kMain);
  bool has(const std::vector<int>& ranks, Channel ch = Channel::kMain) const;
  Comm& world() { return get(all_); }
  int rank() const { return cfg_.rank; }
  int world_size() const { return cfg_.world; }
  const CommConfig& config() const { return cfg_; }
  // The key-value store shared by the job (nullptr when world == 1).
  c10::intrusive_ptr<c10d::Store> store() const;
  // Opens a second client connection to the store (for a watchdog thread); nullptr when world == 1.
  c10::intrusive_ptr<c10d::Store> new_store_client() const;
  // Every collective this rank issued on its groups of two or more ranks since they were built,
  // per group (both channels added together) and operation; only entries with calls, ordered by
  // group then operation. Counting is always on (two atomic additions per call).
  std::vector<CollectiveRecord> collectives() const;

 private:
  struct Impl;
  CommConfig cfg_;
  std::vector<int> all_;
  std::unique_ptr<Impl> impl_;
  std::map<std::pair<Channel, std::vector<int>>, std::unique_ptr<Comm>> groups_;
};

}  // namespace weft::runtime
