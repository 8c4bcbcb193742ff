// `weft train`: one process of a training job. Reads its place in the job from the environment
// (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, as torchrun sets them; see
// weft/runtime/support.h), checks the plan before any process group exists, builds the groups, and
// trains. Torch-free header: the CLI includes it without torch's include paths.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "weft/core/error.h"
#include "weft/plan/plan.h"
#include "weft/runtime/straggler.h"

namespace weft::runtime {

// Variable-length steps (`weft train --varlen`, docs/varlen.md "Running a step"): one step's
// documents in micro-batches, each micro-batch's ranks cut into sequence-parallel groups.
struct VarlenGroup {
  int size = 1;                // ranks; a power of two
  std::vector<int> docs;       // the documents it runs: indices into the step's batch
};
struct VarlenStep {
  // Per micro-batch its groups, the largest first; their sizes sum to the world size, so group j
  // holds the consecutive ranks after those of groups 0..j-1.
  std::vector<std::vector<VarlenGroup>> micro_batches;
  double plan_ms = 0;          // planning time of this batch
  double waited_s = 0;         // how long the step waited for its plan
};

// Plans the batches of a run's steps, in order, ahead of training (the CLI puts weft::varlen's
// batch planner on its own thread behind it; the runtime knows no cost model).
class VarlenPlanner {
 public:
  virtual ~VarlenPlanner() = default;
  // The next step's plan; an error for a batch that cannot be planned.
  virtual Result<VarlenStep> next() = 0;
};

// What a planner is made from: the plan (model and cluster to cost), the document lengths of each
// step (a pure function, callable from any thread), the steps to plan, and the group sizes and
// per-GPU token cap of the options.
struct VarlenPlannerInput {
  const Plan* plan = nullptr;
  std::function<std::vector<std::int64_t>(std::int64_t step)> lengths;
  int first_step = 1, last_step = 1;
  int min_group = 1, max_group = 1;
  std::int64_t max_tokens_per_gpu = 0;  // 0: what the cost model's memory allows
  int ahead = 2;                        // plans made ahead of the step that runs them
};
using VarlenPlannerFactory = std::function<Result<std::unique_ptr<VarlenPlanner>>(const VarlenPlannerInput&)>;

struct TrainOptions {
  std::string plan;            // plan file; empty: a plan of pure data parallelism over WORLD_SIZE
  // A multi-task model file (weft/spec/tasks.h): train its tasks by the waves of --plan (a
  // `weft plan --tasks --format json` file), or without --plan each task's modules one after
  // another on all ranks (train_tasks). Reads plan, steps, lr, seed, the AdamW settings, clip,
  // save_params, format, threads and the timeouts of these options.
  std::string tasks;
  std::string model;           // preset, weft model file or HF config.json; with --plan it must match
  std::string data;            // token file; empty: synthetic tokens
  std::string data_format = "auto";  // auto | uint16 | uint32 | text | synthetic
  int steps = 50;
  // Used only without a plan (0 = default): sequence length, samples per step, micro-batches.
  int seq = 0, global_batch = 0, micro_batches = 0;
  double lr = 0;               // peak learning rate; 0: 1e-2 for the built-in model, else 3e-4
  double min_lr = -1;          // end of the cosine; < 0: lr / 10
  int warmup = -1;             // warm-up steps; < 0: steps / 10
  double weight_decay = 0.1;   // AdamW decoupled decay on matrices and embeddings
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double clip = 1.0;           // global gradient-norm clip; <= 0 disables
  std::uint64_t seed = 1234;   // parameter initialisation and data order
  std::string checkpoint_dir;  // where checkpoints go; empty: none
  int checkpoint_every = 0;    // save every N steps (and after the last); 0: only after the last
  int keep_checkpoints = 2;    // older complete checkpoints are deleted
  bool resume = false;         // continue from the latest checkpoint in checkpoint_dir
  std::string format = "text"; // text | json (rank 0 prints one object per step and a summary)
  std::string progress = "auto";  // auto (a bar when stdout is a terminal) | on | off
  int log_every = 0;           // text format: a log line every N steps; 0: every step (no terminal)
  double timeout_s = 60;       // heartbeat: a peer silent this long is declared dead (also how long
                               // the store waits for every rank to join)
  double collective_timeout_s = 1800;  // one collective or pipeline transfer may take this long
                                       // (PyTorch's default process-group timeout, 30 min)
  std::string save_params;     // write the consolidated final parameters (weft-params file)
  // Hugging Face checkpoints (weft/runtime/hf_checkpoint.h): start from DIR's weights (with
  // --resume, only when checkpoint_dir holds no checkpoint yet; the model is DIR/config.json's
  // without --model or --plan), and write one at the end in save_hf_dtype (fp32, bf16, fp16).
  // Track what each rank's training thread allocates on the CPU (c10's memory-reporting hook, as
  // PyTorch's profiler does); the summary's ranks then carry step_peak_cpu_bytes: the most one
  // step's forward and backward allocated beyond what it began with (activations, temporaries).
  bool measure_memory = false;
  std::string hf_checkpoint;
  std::string save_hf;
  std::string save_hf_dtype = "fp32";
  int threads = 1;             // intra-op threads per rank (torch and OpenBLAS)
  std::string device = "auto"; // auto (cuda:LOCAL_RANK when CUDA and NCCL are usable, else cpu) | cpu |
                               // cuda (an error when CUDA is not available)
  // What carries CUDA tensors between ranks: nccl (one GPU per rank), gloo (copied through host
  // memory; ranks may share a GPU: rank r runs on cuda:(LOCAL_RANK mod GPUs)) or auto (nccl when
  // this libtorch has it, else gloo). CPU tensors always go through Gloo.
  std::string backend = "auto";
  // auto | fp32 | bf16 (mixed precision): weft/runtime/support.h run_precision().
  std::string precision = "auto";
  double bucket_mb = 25;       // data-parallel gradient bucket cap in MiB (PyTorch DDP's default)
  std::string grad_overlap = "on";  // on: reduce each bucket during backward as it completes; off:
                                    // after backward returns (same buckets, same results)
  std::string fault;           // testing: "RANK:STEP:MODE", MODE = exit | kill | hang | stop |
                               // sleep=SECONDS (the main thread pauses, its heartbeat goes on)
  // Variable-length steps: documents of --data split at --eos, --global-batch documents per step
  // (with --plan: the plan's), none longer than the sequence length (longer ones are left out and
  // counted), each step's grouping from `varlen_planner`.
  // Stragglers (weft/runtime/straggler.h): a rank slower than straggler_margin x the ranks' median
  // compute time for straggler_steps steps in a row is named; `slow` ("RANK:FACTOR[:FROM_STEP]",
  // testing) makes one rank slow on purpose.
  double straggler_margin = 1.25;
  int straggler_steps = 3;
  std::string slow;
  // --adapt: when the ranks' measured slowdowns (compute against adapt_hooks.expected) differ from
  // what the running plan assumes by straggler_margin for straggler_steps steps, re-plan
  // (adapt_hooks.replan) and switch in place when the new plan is predicted adapt_min_gain x faster;
  // the same when the straggler recovers. adapt_hooks.expected also puts the straggler check per
  // unit of planned work (a rank given fewer samples is not taken for fast).
  bool adapt = false;
  double adapt_min_gain = 1.05;
  AdaptHooks adapt_hooks;
  // MoE sample placement (NetMoE; weft/plan/routing_trace.h, docs/moe-placement.md): write each
  // step's routing trace (rank 0, at the end), and run the steps a placement file places.
  std::string moe_trace;
  std::string moe_placement;
  // An emulated slow inter-node link for the MoE all-to-all, in GB/s (0: off; CommConfig's
  // throttle_inter_node_Bps, nodes of the plan's cluster.gpus_per_node ranks): shows on one machine
  // the step time a placement saves.
  double throttle_inter_node_gbps = 0;
  bool varlen = false;
  std::int64_t eos = -1;
  int min_group = 1, max_group = 0;    // sequence-group sizes (max 0: the most the world and heads allow)
  std::int64_t max_tokens_per_gpu = 0; // planner's cap on one rank's tokens per micro-batch (0: none)
  int plan_ahead = 2;
  VarlenPlannerFactory varlen_planner;
};

// The plan `weft train` runs when no --plan is given: `model` on `world` ranks, pure data parallel
// (dp = world, zero 0, no recompute, pp 1), fp32. Errors name the numbers when the batch does not
// divide.
Result<Plan> data_parallel_plan(const ModelSpec& model, int world, int seq, int global_batch, int micro_batches);

// The small GPT-2-style model trained when neither --plan nor --model is given (vocab 256, so text
// files work as bytes; 2 layers, hidden 64; trains in seconds on one CPU core).
ModelSpec builtin_model();

// Intra-op threads of this process (--threads): torch's, and the own pool of OpenBLAS, which weft
// links in and which would otherwise oversubscribe the cores that the ranks already share.
void set_threads(int n);

// Runs one rank. Returns an Error whose kind is the exit code (2 bad input, 4 I/O, 5 a failure
// while training such as a dead peer). Fatal peer failures detected by the watchdog end the
// process directly with exit code 5 after printing a message naming the rank.
Status train(const TrainOptions& o);
// `weft train --tasks FILE [--plan P]` (docs/multitask.md, "Running the waves"): the waves of a
// multi-task plan, each piece data parallel over its ranks, activations and their gradients sent
// between pieces, each parameter held and reduced only on the ranks that use it. fp32 on the CPU;
// a constant learning rate (--lr, default 1e-3). Rank 0 prints each step's loss per task and, at
// the end, the bytes sent between pieces beside the plan's transfers (weft/plan/wave_plan.h).
Status train_tasks(const TrainOptions& o);

}  // namespace weft::runtime
