// What each training framework can run, as search restrictions and as a plan check
// (docs/search.md, "Frameworks"), and what weft's own runtime runs ("weft's runtime"; the
// framework named weft).
#include <string>
#include <utility>

#include "weft/plan/runtime_support.h"
#include "weft/search/search.h"

namespace weft {

namespace {

// Why framework `f` cannot run strategy s (empty: it can).
std::string refusal(Framework f, const LayerStrategy& s) {
  const auto S = [](int x) { return std::to_string(x); };
  switch (f) {
    // Megatron-LM core_v0.19 (TransformerConfig.__post_init__): "When using expert parallelism and
    // tensor parallelism, sequence parallelism must be used".
    case Framework::kMegatron:
      if (s.ep > 1 && s.tp > 1 && !s.sp) return "ep=" + S(s.ep) + " with tp=" + S(s.tp) + " without sequence parallelism";
      return "";
    case Framework::kMegatronDeepSpeed:
      if (s.cp > 1) return "cp=" + S(s.cp) + " (no ring context parallelism)";
      if (s.ep > 1) return "ep=" + S(s.ep) + " (DeepSpeed-MoE sets expert parallelism in the model code)";
      if (s.expert_tp() != s.tp) return "etp=" + S(s.expert_tp()) + " (DeepSpeed-MoE's experts follow tp)";
      if (s.ulysses > 1 && s.sp) return "ulysses=" + S(s.ulysses) + " with sequence parallelism";
      if (s.zero > 1) return "zero=" + S(s.zero) + " (it offers ZeRO 0, 1)";
      return "";
    case Framework::kTorchtitan:
    case Framework::kTorchtitanCompile:
      if (s.ulysses > 1) return "ulysses=" + S(s.ulysses) + " (no Ulysses)";
      if (s.zero < 2 && s.shard_group() > 1) return "zero=" + S(s.zero) + " (it offers ZeRO 2, 3: FSDP2)";
      if (s.tp > 1 && !s.sp) return "tp=" + S(s.tp) + " without sequence parallelism (its TP always shards the sequence)";
      // ParallelDims._validate (torchtitan/distributed/parallel_dims.py): etp is tp or 1, and ep
      // takes all of cp (and with etp 1 all of tp) and some of the data-parallel shards.
      if (s.expert_tp() != s.tp && s.expert_tp() != 1)
        return "etp=" + S(s.expert_tp()) + " (it offers expert tensor degree 1 or tp=" + S(s.tp) + ")";
      if (s.ep > 1 && s.ep % (s.cp * (s.expert_tp() == 1 ? s.tp : 1)) != 0)
        return "ep=" + S(s.ep) + " not a multiple of cp" + (s.expert_tp() == 1 ? "*tp" : "") + " (its expert degree "
               "spans them)";
      return "";
    // Not reached: restrict_to_framework and framework_runs hand weft to the runtime's own rules.
    case Framework::kWeft: return runtime_strategy_refusal(s);
  }
  return "";
}

// Why framework f has no ZB-H1 schedule (empty: it has; weft's runtime answers for itself).
//  - Megatron-LM: no zero-bubble schedule in mainline (it lives in the sail-sg fork);
//  - Megatron-DeepSpeed: 1F1B only (its PipelineEngine's TrainSchedule);
//  - torchtitan: torch.distributed.pipelining's ScheduleInterleavedZeroBubble is a
//    PipelineScheduleMulti (pytorch/pytorch torch/distributed/pipelining/schedules.py), and
//    torchtitan builds multi-stage schedules with at least 2 stages per rank ("Multi-stage schedule
//    requires at least 2 stages per rank", pytorch/torchtitan torchtitan/distributed/
//    pipeline_parallel.py, pipeline_llm, read at commit 02ef790c); ZB-H1 runs one stage per rank.
std::string zb_refusal(Framework f) {
  switch (f) {
    case Framework::kMegatron: return "Megatron-LM mainline has no zero-bubble schedule";
    case Framework::kMegatronDeepSpeed: return "Megatron-DeepSpeed runs 1F1B only";
    case Framework::kTorchtitan:
    case Framework::kTorchtitanCompile:
      return "torchtitan runs its zero-bubble schedule (ScheduleInterleavedZeroBubble) with at least 2 stages per "
             "rank, and zb-h1 has one";
    case Framework::kWeft: return "";
  }
  return "";
}

// Why framework f has no ZB-V schedule (empty: it has).
//  - Megatron-LM: no zero-bubble schedule in mainline (ZB-V lives in the sail-sg fork,
//    --zero-bubble-v-schedule);
//  - Megatron-DeepSpeed: 1F1B only;
//  - torchtitan runs it: pipeline_parallel_schedule "ZBVZeroBubble", torch.distributed.pipelining's
//    ScheduleZBVZeroBubble, built with exactly 2 stages per rank in a V ("v schedules assume 2
//    stages per rank", pytorch/torchtitan torchtitan/distributed/pipeline_parallel.py,
//    pipeline_module_split, at v0.2.2, commit 73a0e697);
//  - torchtitan-compile does not: ScheduleZBVZeroBubble refuses a torch.compile'd stage, whose
//    split backward it cannot run (_check_torch_compile_compatibility, pytorch/pytorch
//    torch/distributed/pipelining/schedules.py at commit 00722e64; pytorch/pytorch issue 161904).
std::string zbv_refusal(Framework f) {
  switch (f) {
    case Framework::kMegatron: return "Megatron-LM mainline has no zero-bubble schedule";
    case Framework::kMegatronDeepSpeed: return "Megatron-DeepSpeed runs 1F1B only";
    case Framework::kTorchtitan: return "";
    case Framework::kTorchtitanCompile:
      return "torch.distributed.pipelining's ScheduleZBVZeroBubble refuses torch.compile'd stages; plan for "
             "torchtitan without compile";
    case Framework::kWeft: return "";
  }
  return "";
}

}  // namespace

Status restrict_to_framework(SearchOptions& opt, Framework f) {
  if (f == Framework::kWeft) return restrict_to_runtime(opt);
  const bool titan = f == Framework::kTorchtitan || f == Framework::kTorchtitanCompile;
  for (Schedule s : opt.schedules) {
    if (s == Schedule::kZbH1)
      return Error{ErrorKind::kBadInput, std::string("--schedule: framework ") + to_string(f) +
                                             " has no zb-h1 schedule (" + zb_refusal(f) + ")"};
    if (s == Schedule::kZbV && !zbv_refusal(f).empty())
      return Error{ErrorKind::kBadInput, std::string("--schedule: framework ") + to_string(f) +
                                             " has no zb-v schedule (" + zbv_refusal(f) + ")"};
  }
  opt.layerwise = false;
  // Megatron splits the layers evenly over the stages (its exports allow no other split but a
  // different first or last stage); torchtitan takes any split points.
  if (!titan) opt.uneven_stages = false;
  if (f == Framework::kMegatronDeepSpeed) {
    for (Schedule s : opt.schedules)
      if (s != Schedule::k1F1B)
        return Error{ErrorKind::kBadInput,
                     std::string("--schedule: framework ") + to_string(f) + " has no " + to_string(s) + " schedule"};
    opt.schedules = {Schedule::k1F1B};
    opt.allow_cp = false;
  }
  // The default space less zb-h1, which no framework but weft runs, and zb-v where it lacks it.
  if (opt.schedules.empty()) {
    opt.schedules = {Schedule::kGpipe, Schedule::k1F1B, Schedule::kInterleaved};
    if (zbv_refusal(f).empty()) opt.schedules.push_back(Schedule::kZbV);
  }
  if (titan) opt.allow_ulysses = false;
  opt.accept = [f](const LayerStrategy& s, const LayerShape*) { return refusal(f, s).empty(); };
  return Status{};
}

Status restrict_to_framework(SearchOptions& opt, const std::string& name) {
  auto f = framework_from_string(name);
  if (!f.ok()) return f.error();
  return restrict_to_framework(opt, *f);
}

Status framework_runs(const Plan& p, Framework f) {
  if (f == Framework::kWeft) return runtime_supports(p);
  auto fail = [&](const std::string& what) {
    return Error{ErrorKind::kBadInput, what + ": framework " + to_string(f) + " cannot run it"};
  };
  if (f == Framework::kMegatronDeepSpeed && p.train.pp > 1 && p.train.schedule != Schedule::k1F1B)
    return fail(std::string("schedule ") + to_string(p.train.schedule));
  if (p.train.pp > 1 && p.train.schedule == Schedule::kZbH1)
    return fail("train.schedule zb-h1 (" + zb_refusal(f) + ")");
  if (p.train.schedule == Schedule::kZbV && !zbv_refusal(f).empty())
    return fail("train.schedule zb-v (" + zbv_refusal(f) + ")");
  const std::optional<LayerStrategy> one = p.uniform_strategy();
  if (!one) {
    // Name the first layer that differs from layer 0 (the expert degrees aside).
    for (int i = 1; i < p.model.num_layers(); ++i)
      if (!(without_experts(p.layer_strategy(i)) == without_experts(p.layer_strategy(0))))
        return fail("layer " + std::to_string(i) + ": a strategy other than layer 0's (one strategy for all layers)");
    return fail("the MoE layers' expert degrees differ (one strategy for all layers)");
  }
  // One strategy for all layers: a refusal holds from the first layer on.
  if (const std::string why = refusal(f, *one); !why.empty()) return fail("layer 0: " + why);
  if (const std::string why = refusal(f, p.embedding); !why.empty()) return fail("embedding: " + why);
  return Status{};
}

Status framework_runs(const Plan& p, const std::string& name) {
  auto f = framework_from_string(name);
  if (!f.ok()) return f.error();
  return framework_runs(p, *f);
}

Status restrict_to_runtime(SearchOptions& opt) {
  // The runtime runs every schedule and every strategy (weft/plan/runtime_support.h) but expert
  // parallelism, and context parallelism where its chunks cut the sequence evenly. A filter set
  // before (a framework's) still applies.
  if (opt.schedules.empty())
    opt.schedules = {Schedule::kGpipe, Schedule::k1F1B, Schedule::kInterleaved, Schedule::kZbH1, Schedule::kZbV};
  auto before = std::move(opt.accept);
  const int64_t seq = opt.seq;
  opt.accept = [before, seq](const LayerStrategy& s, const LayerShape* shape) {
    return runtime_runs_strategy(s) && runtime_sequence_refusal(s, seq).empty() && (!before || before(s, shape));
  };
  return Status{};
}

}  // namespace weft
