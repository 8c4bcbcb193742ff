// `weft train` (one rank of a training job) and `weft launch` (N local ranks with the torchrun
// environment). Thin: flags into TrainOptions / LaunchOptions, then the runtime library.
#include <chrono>
#include <memory>

#include "commands.h"
#include "weft/runtime/launch.h"
#include "weft/runtime/train.h"
#include "weft/cost/analytic.h"
#include "weft/plan/checkpoint_layout.h"
#include "weft/search/hetero.h"
#include "weft/varlen/prefetch.h"
#include "weft/varlen/seq_cost.h"

namespace weft::cli {

namespace {

// weft train --varlen's batch planner: weft::varlen's planner on its own thread (PlanPrefetcher),
// costing with weft's analytic model of the plan's model and cluster (docs/varlen.md).
class PrefetchedPlanner final : public runtime::VarlenPlanner {
 public:
  PrefetchedPlanner(varlen::PlanPrefetcher::Source src, std::shared_ptr<const varlen::SeqCost> cost,
                    const varlen::PlannerOptions& po, int ahead)
      : pf_(std::move(src), std::move(cost), po, ahead) {}
  Result<runtime::VarlenStep> next() override {
    auto item = pf_.next();
    if (!item) return Error{ErrorKind::kRuntime, "the batch planner has no more batches"};
    if (!item->ok()) return item->error();
    const varlen::PlanPrefetcher::Item& it = item->value();
    runtime::VarlenStep s;
    for (const varlen::MicroBatch& mb : it.plan.micro_batches) {
      std::vector<runtime::VarlenGroup> gs;
      for (const varlen::Group& g : mb.groups) gs.push_back({g.size, g.docs});
      s.micro_batches.push_back(std::move(gs));
    }
    s.plan_ms = it.plan_ms;
    s.waited_s = it.waited_s;
    return s;
  }

 private:
  varlen::PlanPrefetcher pf_;
};

Result<std::unique_ptr<runtime::VarlenPlanner>> make_varlen_planner(const runtime::VarlenPlannerInput& in) {
  const Plan& plan = *in.plan;
  varlen::AnalyticSeqOptions ao;
  ao.recompute = plan.stages.front().layers.front().recompute;
  ao.dtype = plan.train.dtype;
  ao.max_seq = plan.train.seq;
  ao.tp = plan.embedding.tp;
  // Plain data parallelism (ZeRO 0) reduces gradients once per step as ZeRO 1 and 2 do.
  ao.zero = std::max(1, plan.stages.front().layers.front().zero);
  auto cost = varlen::analytic_seq_cost(plan.model, plan.cluster, ao);
  if (!cost.ok()) return cost.error().with_context("--varlen: the batch planner's cost model");
  std::shared_ptr<const varlen::SeqCost> c = std::move(cost).value();
  if (in.max_tokens_per_gpu > 0) c = varlen::capped_seq_cost(c, static_cast<double>(in.max_tokens_per_gpu));
  varlen::PlannerOptions po;
  po.min_group = in.min_group;
  po.max_group = in.max_group;
  auto step = std::make_shared<std::int64_t>(in.first_step);
  varlen::PlanPrefetcher::Source src = [step, last = in.last_step,
                                        lengths = in.lengths]() -> std::optional<std::vector<std::int64_t>> {
    if (*step > last) return std::nullopt;
    return lengths((*step)++);
  };
  return std::unique_ptr<runtime::VarlenPlanner>(std::make_unique<PrefetchedPlanner>(src, c, po, in.ahead));
}

// weft train --adapt (weft/search/hetero.h): each rank's work under the plan, what its compute is
// compared with; re-balancing on measured speeds, with weft's analytic model checking memory.
runtime::AdaptHooks adapt_hooks() {
  auto cm = std::make_shared<AnalyticCostModel>();
  runtime::AdaptHooks h;
  h.expected = [](const Plan& p) { return rank_work(p); };
  h.replan = [cm](const Plan& p, const std::vector<double>& slowdown) -> Result<runtime::Replan> {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = replan(p, slowdown, *cm);
    if (!r.ok()) return r.error();
    runtime::Replan out;
    out.plan = r->plan;
    out.predicted_s = r->predicted_s;
    out.current_s = r->current_s;
    // New shares move nothing; new stage cuts move the layers that change ranks (parameters and
    // both AdamW moments, fp32), priced at the cluster's slowest link.
    auto moved = reshard_bytes_moved(p, r->plan);
    if (!moved.ok()) return moved.error();
    out.bytes_to_move = *moved;
    const LinkSpec& link = p.cluster.nodes > 1 ? p.cluster.inter : p.cluster.intra;
    out.move_s = out.bytes_to_move > 0 && link.gbps > 0 ? static_cast<double>(out.bytes_to_move) / (link.gbps * 1e9) : 0;
    out.plan_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const std::string shares = shares_label(out.plan.train);
    const int m = out.plan.train.micro_batches;
    out.change = (shares.empty() ? std::string("even shares") : "shares " + shares) + ", " + std::to_string(m) +
                 " micro-batch" + (m > 1 ? "es" : "");
    auto cut = [](const Plan& q) {
      std::string c;
      for (const Stage& st : q.stages) c += (c.empty() ? "" : ":") + std::to_string(st.num_layers());
      return c;
    };
    if (cut(out.plan) != cut(p)) out.change = "stages " + cut(out.plan) + " layers, " + out.change;
    // A new structure from the search: its pipeline and its first layer's strategy.
    auto shape = [](const Plan& q) {
      return "pp" + std::to_string(q.train.pp) + " " + to_string(q.train.schedule) + ", layers " +
             label(q.stages.front().layers.front()) + ", embedding " + label(q.embedding);
    };
    if (shape(out.plan) != shape(p)) out.change = shape(out.plan) + ", " + out.change;
    return out;
  };
  return h;
}

}  // namespace

void register_train_commands(CLI::App& app) {
  auto o = std::make_shared<runtime::TrainOptions>();
  CLI::App* t = app.add_subcommand(
      "train",
      "Train a model under a plan. One process is one rank: run it under `weft launch -n N`, torchrun, "
      "srun or mpirun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Without --plan: data parallel over "
      "WORLD_SIZE ranks (one process: a small built-in GPT in seconds).");
  t->add_option("--plan", o->plan, "Plan file (weft plan --out); its model, batch and layout are used");
  t->add_option("--model", o->model, "Model preset, weft model file or HF config.json (with --plan: must match)");
  t->add_option("--tasks", o->tasks,
                "A multi-task model file (docs/multitask.md): train its tasks by the waves of --plan (weft plan --tasks "
                "--format json), or each task's modules in turn on all ranks without it");
  t->add_option("--data", o->data,
                "Token file (uint16/uint32 ids), Megatron-LM indexed dataset (PREFIX of PREFIX.idx + PREFIX.bin) "
                "or text file (bytes); default synthetic tokens");
  t->add_option("--data-format", o->data_format, "auto, uint16, uint32, text, megatron or synthetic")
      ->capture_default_str();
  t->add_option("--steps", o->steps, "Optimizer steps")->capture_default_str();
  t->add_option("--seq", o->seq, "Sequence length (without --plan; default 64)");
  t->add_option("--global-batch", o->global_batch, "Samples per step (without --plan; default 8 per rank)");
  t->add_option("--micro-batches", o->micro_batches, "Gradient-accumulation micro-batches (without --plan)");
  t->add_option("--lr", o->lr, "Peak learning rate (default 1e-2 for the built-in model, else 3e-4)");
  t->add_option("--min-lr", o->min_lr, "Learning rate at the last step (default lr/10)");
  t->add_option("--warmup", o->warmup, "Linear warm-up steps (default steps/10)");
  t->add_option("--weight-decay", o->weight_decay, "AdamW weight decay on matrices and embeddings")
      ->capture_default_str();
  t->add_option("--beta1", o->beta1, "AdamW beta1")->capture_default_str();
  t->add_option("--beta2", o->beta2, "AdamW beta2")->capture_default_str();
  t->add_option("--eps", o->eps, "AdamW epsilon")->capture_default_str();
  t->add_option("--clip", o->clip, "Global gradient-norm clip (0 disables)")->capture_default_str();
  t->add_option("--seed", o->seed, "Seed of the initialisation and the data order")->capture_default_str();
  t->add_option("--checkpoint-dir", o->checkpoint_dir, "Directory for sharded checkpoints");
  t->add_option("--checkpoint-every", o->checkpoint_every, "Save every N steps (always after the last step)");
  t->add_option("--keep-checkpoints", o->keep_checkpoints, "Complete checkpoints kept")->capture_default_str();
  t->add_flag("--resume", o->resume, "Continue from the latest checkpoint in --checkpoint-dir");
  t->add_option("--format", o->format, "text or json (rank 0: one JSON object per step, then a summary)")
      ->capture_default_str();
  t->add_option("--progress", o->progress, "auto (a bar on a terminal), on or off")->capture_default_str();
  t->add_option("--log-every", o->log_every, "Text log line every N steps (default: every step, or ~10 lines "
                                             "with a progress bar)");
  t->add_option("--timeout", o->timeout_s,
                "Heartbeat: seconds after which a silent peer is declared dead (and the wait for all ranks to join)")
      ->capture_default_str();
  t->add_option("--collective-timeout", o->collective_timeout_s,
                "Seconds one collective or pipeline transfer may take before the job stops")
      ->capture_default_str();
  t->add_option("--save-params", o->save_params, "Write the final parameters, consolidated, to this file");
  t->add_option("--moe-trace", o->moe_trace,
                "MoE: write what the routers chose, per step, layer, sample and expert, to this file (weft "
                "moe-placement --trace)");
  t->add_option("--moe-placement", o->moe_placement,
                "MoE: compute each step's samples where this placement file (weft moe-placement --out) puts them; "
                "the losses are those of the unplaced run");
  t->add_option("--throttle-inter-node", o->throttle_inter_node_gbps,
                "MoE: emulate a slow link between nodes (the plan's cluster.gpus_per_node ranks a node): each expert "
                "all-to-all holds a rank for its bytes to or from other nodes at this many GB/s (0: off)")
      ->capture_default_str();
  t->add_flag("--measure-memory", o->measure_memory,
              "Track what each rank allocates on the CPU; the summary's ranks get step_peak_cpu_bytes (activations "
              "and temporaries of one step's forward and backward)");
  t->add_option("--hf-checkpoint", o->hf_checkpoint,
                "Start from a Hugging Face checkpoint (DIR with config.json and safetensors; llama, mistral, qwen2, "
                "qwen3, gpt2, mixtral, qwen2_moe, qwen3_moe, olmoe); its config.json is the model without --model or "
                "--plan; with --resume, only until --checkpoint-dir holds a checkpoint");
  t->add_option("--save-hf", o->save_hf,
                "Write the final model to DIR as a Hugging Face checkpoint (config.json, safetensors)");
  t->add_option("--save-hf-dtype", o->save_hf_dtype, "fp32, bf16 or fp16: the tensors --save-hf writes")
      ->capture_default_str();
  t->add_option("--threads", o->threads, "Intra-op threads per rank")->capture_default_str();
  t->add_option("--device", o->device,
                "auto (cuda:LOCAL_RANK when CUDA is available, else cpu), cpu or cuda (an error without CUDA)")
      ->capture_default_str();
  t->add_option("--backend", o->backend,
                "With --device cuda: nccl (one GPU per rank), gloo (CUDA tensors copied through host memory; ranks "
                "may share a GPU) or auto (nccl when this libtorch has it, else gloo)")
      ->capture_default_str();
  t->add_option("--precision", o->precision,
                "auto (the plan's train.dtype on CUDA when it is bf16, else fp32), fp32, or bf16: mixed precision (bf16 "
                "compute from fp32 parameters; fp32 gradients, reduction, optimizer and loss)")
      ->capture_default_str();
  t->add_option("--bucket-mb", o->bucket_mb, "Data-parallel gradient bucket cap in MiB (as DDP's bucket_cap_mb)")
      ->capture_default_str();
  t->add_option("--grad-overlap", o->grad_overlap,
                "on: reduce each gradient bucket during backward as soon as it is complete; off: after backward")
      ->capture_default_str();
  t->add_flag("--varlen", o->varlen,
              "Variable-length steps: --global-batch documents of --data (split at --eos) per step, packed per "
              "micro-batch into sequence-parallel groups of sizes chosen for each batch (docs/varlen.md)")
      ->group("Variable-length steps");
  t->add_option("--eos", o->eos, "End-of-document token id of --data (with --varlen; a Megatron dataset's index gives its documents)")->group("Variable-length steps");
  t->add_option("--min-group", o->min_group, "Smallest sequence-parallel group (ranks, a power of two)")
      ->capture_default_str()
      ->group("Variable-length steps");
  t->add_option("--max-group", o->max_group,
                "Largest sequence-parallel group (default: the most that the ranks and every layer's heads allow)")
      ->group("Variable-length steps");
  t->add_option("--max-tokens-per-gpu", o->max_tokens_per_gpu,
                "Most tokens one rank holds in a micro-batch (default: what the cost model's memory allows)")
      ->group("Variable-length steps");
  t->add_option("--plan-ahead", o->plan_ahead, "Steps the batch planner runs ahead of training")
      ->capture_default_str()
      ->group("Variable-length steps");
  o->varlen_planner = make_varlen_planner;
  o->adapt_hooks = adapt_hooks();
  t->add_option("--straggler-margin", o->straggler_margin,
                "A rank whose compute per step, per unit of the work its plan gives it, exceeds this times the "
                "ranks' median is a straggler")
      ->capture_default_str();
  t->add_option("--straggler-steps", o->straggler_steps, "...for this many steps in a row before it is named")
      ->capture_default_str();
  t->add_flag("--adapt", o->adapt,
              "When a rank's measured speed differs from the running plan's by --straggler-margin for "
              "--straggler-steps steps, re-plan with the measured speeds and switch in place when it pays (and "
              "back when the straggler recovers)");
  t->add_option("--adapt-min-gain", o->adapt_min_gain,
                "With --adapt: switch only when the new plan is predicted this many times faster")
      ->capture_default_str();
  t->add_option("--slow", o->slow,
                "Testing: RANK:FACTOR[:FROM_STEP[:TO_STEP]] makes that rank's compute take FACTOR times as long (from "
                "that step, to that step)")
      ->group("Testing");
  t->add_option("--fault", o->fault, "Testing: RANK:STEP:MODE makes that rank exit|kill|hang|stop|sleep=SECONDS at that step")
      ->group("Testing");
  t->callback([o] {
    const Status s = runtime::train(*o);
    if (!s.ok()) fail(s.error());
  });

  auto l = std::make_shared<runtime::LaunchOptions>();
  CLI::App* la = app.add_subcommand(
      "launch", "Start N local ranks of a command (usually `weft train ...`) with the torchrun environment; "
                "output lines are prefixed with the rank; if one rank fails the others are stopped.");
  la->add_option("-n,--nproc", l->nprocs, "Number of processes")->required();
  la->add_option("--master-addr", l->master_addr, "Address of rank 0's store")->capture_default_str();
  la->add_option("--master-port", l->master_port, "Port of rank 0's store (default: a free port)");
  la->add_option("--grace", l->grace_s, "Seconds between SIGTERM and SIGKILL when stopping ranks")
      ->capture_default_str();
  la->add_flag("!--no-prefix", l->prefix, "Do not prefix output lines with [rank]");
  la->add_option("command", l->command, "The command after --, e.g. -- weft train --plan plan.json")->required();
  la->callback([l] {
    const int rc = runtime::launch(*l);
    if (rc != 0) throw CliExit{rc};
  });
}

}  // namespace weft::cli
