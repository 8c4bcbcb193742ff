// Plan validation: everything checked here is checked before any search result is written and
// before the runtime builds a process group. Messages name the field and the numbers.
#include <algorithm>
#include <cmath>
#include <string>

#include "weft/core/format.h"
#include "weft/plan/geometry.h"
#include "weft/plan/plan.h"

namespace weft {

namespace {

// Checks one layer's (or the embedding's) strategy against its shape and the stage size.
void check_strategy(const std::string& where, const LayerStrategy& s, const LayerShape* shape, const Plan& p,
                    int stage_size) {
  const int pmb = p.train.pipeline_micro_batch();
  require(s.tp >= 1 && s.ulysses >= 1 && s.cp >= 1 && s.dp >= 1 && s.ep >= 1,
          where + ": degrees must be >= 1 (tp=" + S(s.tp) + " ulysses=" + S(s.ulysses) + " cp=" + S(s.cp) +
              " dp=" + S(s.dp) + " ep=" + S(s.ep) + ")");
  require(s.devices() == stage_size, where + ": tp*ulysses*cp*dp = " + S(s.tp) + "*" + S(s.ulysses) + "*" + S(s.cp) +
                                         "*" + S(s.dp) + " = " + S(s.devices()) + " but each pipeline stage has " +
                                         S(stage_size) + " devices (" + S(p.world_size()) + " GPUs / pp=" +
                                         S(p.train.pp) + ")");
  require(s.etp >= 0, where + ".etp: must be >= 1, got " + S(s.etp));
  require(s.zero >= 0 && s.zero <= 3, where + ".zero: must be 0..3, got " + S(s.zero));
  require(!s.sp || s.tp > 1, where + ".sp: Megatron sequence parallelism needs tp > 1 (tp=1)");
  if (p.train.varlen) {
    require(s.ulysses == 1 && s.cp == 1, where + ": ulysses " + S(s.ulysses) + " and cp " + S(s.cp) +
                                             " in a variable-length plan (train.varlen), whose sequence groups "
                                             "replace them: both must be 1");
  } else if (!p.train.dp_shares.empty()) {
    require(static_cast<int>(p.train.dp_shares.size()) == s.dp,
            where + ".dp: " + S(s.dp) + " replicas but train.dp_shares lists " + S(p.train.dp_shares.size()) +
                " shares");
  } else if (!p.train.stage_dp_shares.empty()) {
    for (size_t g = 0; g < p.train.stage_dp_shares.size(); ++g)
      require(static_cast<int>(p.train.stage_dp_shares[g].size()) == s.dp,
              where + ".dp: " + S(s.dp) + " replicas but train.stage_dp_shares[" + S(g) + "] lists " +
                  S(p.train.stage_dp_shares[g].size()) + " shares");
  } else {
    require(pmb % s.dp == 0, where + ".dp: " + S(s.dp) + " does not divide the " + S(pmb) +
                                 " samples of a micro-batch (global batch " + S(p.train.global_batch) + " / " +
                                 S(p.train.micro_batches) + " micro-batches)");
  }
  const long long seq = p.train.seq;
  require(seq % (static_cast<long long>(s.ulysses) * s.cp) == 0,
          where + ": ulysses*cp = " + S(s.ulysses * s.cp) + " does not divide sequence length " + S(seq));
  if (s.sp) require(seq % s.tp == 0, where + ".tp: " + S(s.tp) + " does not divide sequence length " + S(seq) +
                                          " (needed by sequence parallelism)");
  if (!shape) return;
  const long long heads = shape->heads;
  require(heads % s.tp == 0, where + ".tp: " + S(s.tp) + " does not divide " + S(heads) + " attention heads");
  require(heads % (static_cast<long long>(s.tp) * s.ulysses) == 0,
          where + ": tp*ulysses = " + S(s.tp * s.ulysses) + " does not divide " + S(heads) + " attention heads");
  const int kv = shape->kv_heads;
  const int tu = s.tp * s.ulysses;
  require(kv % tu == 0 || tu % kv == 0, where + ": tp*ulysses = " + S(tu) + " and " + S(kv) +
                                            " key/value heads: one must divide the other (kv heads are split or "
                                            "replicated)");
  if (shape->moe.enabled()) {
    const int etp = s.expert_tp();
    require(shape->moe.expert_ffn % etp == 0,
            where + (s.etp > 0 ? ".etp: " : ".tp: ") + S(etp) + " does not divide expert FFN size " +
                S(shape->moe.expert_ffn));
    if (shape->moe.shared_experts > 0)
      require(shape->moe.shared_experts * shape->moe.expert_ffn % s.tp == 0,
              where + ".tp: " + S(s.tp) + " does not divide the shared experts' FFN size " +
                  S(shape->moe.shared_experts * shape->moe.expert_ffn));
    require(shape->moe.experts % s.ep == 0,
            where + ".ep: " + S(s.ep) + " does not divide " + S(shape->moe.experts) + " experts");
    require(s.devices() % (static_cast<long long>(s.ep) * etp) == 0,
            where + ".ep: ep*etp = " + S(s.ep) + "*" + S(etp) + " = " + S(s.ep * etp) + " does not divide the " +
                S(s.devices()) + " devices of the stage (tp*ulysses*cp*dp; the experts' grid is etp x ep x "
                                 "expert data parallel)");
  } else {
    require(s.ep == 1, where + ".ep: " + S(s.ep) + " on a dense layer (expert parallelism needs MoE)");
    require(s.expert_tp() == s.tp,
            where + ".etp: " + S(s.etp) + " on a dense layer (expert tensor parallelism needs MoE)");
    require(shape->ffn % s.tp == 0, where + ".tp: " + S(s.tp) + " does not divide FFN size " + S(shape->ffn));
  }
}

void validate_or_throw(const Plan& p) {
  require(p.format_version == kPlanFormatVersion, "format_version: unsupported version " + S(p.format_version));
  {
    Status m = validate(p.model);
    if (!m.ok()) throw InputError("model." + m.error().message);
    Status c = validate(p.cluster);
    if (!c.ok()) throw InputError("cluster." + c.error().message);
  }
  const auto& t = p.train;
  require(t.seq > 0, "train.seq: must be positive, got " + S(t.seq));
  require(t.rounds >= 1, "train.rounds: must be >= 1, got " + S(t.rounds));
  if (Status m = check_moe_imbalance(t.moe_imbalance, p.model, "train.moe_imbalance"); !m.ok())
    throw InputError(m.error().message);
  if (Status d = check_moe_dispatch(t.moe_dispatcher, t.moe_a2a_overlap, p.model, "train.moe_dispatcher",
                                    "train.moe_a2a_overlap");
      !d.ok())
    throw InputError(d.error().message);
  // Megatron-Core's combined 1F1B pairs micro-batches inside the interleaved schedule.
  require(!t.moe_a2a_overlap || t.pairs_micro_batches(),
          "train.moe_a2a_overlap: with pp " + S(t.pp) + " it needs an interleaved schedule (vp > 1, as Megatron-LM's "
          "--overlap-moe-expert-parallel-comm does), got vp " + S(t.vp));
  require(t.micro_batches % t.rounds == 0, "train.rounds: " + S(t.rounds) + " pipeline schedules do not divide the " +
                                               S(t.micro_batches) + " micro-batches of a step");
  if (t.optimizer.precision_aware())
    require(t.dtype != DType::kFp32 && t.dtype != DType::kTf32,
            std::string("train.optimizer: ") + to_string(t.optimizer.exp_avg) + " / " + to_string(t.optimizer.exp_avg_sq) +
                " moments and " + to_string(t.optimizer.main_grads) + " gradients under train.dtype " +
                to_string(t.dtype) + ": lower-precision optimizer states need a 16- or 8-bit compute dtype");
  require(p.model.position != PositionKind::kLearned || p.model.max_seq == 0 || t.seq <= p.model.max_seq,
          "train.seq: " + S(t.seq) + " exceeds the model's learned position table of " + S(p.model.max_seq));
  require(t.global_batch > 0, "train.global_batch: must be positive, got " + S(t.global_batch));
  require(t.micro_batches > 0, "train.micro_batches: must be positive, got " + S(t.micro_batches));
  if (t.varlen)
    require(t.micro_batches == 1, "train.micro_batches: " + S(t.micro_batches) +
                                      " in a variable-length plan, whose batch planner picks each step's micro-batches: "
                                      "must be 1");
  else if (t.dp_micro_batches.empty())
    require(t.global_batch % t.micro_batches == 0, "train.micro_batches: " + S(t.micro_batches) +
                                                       " does not divide global batch " + S(t.global_batch));
  require(t.pp >= 1, "train.pp: must be >= 1, got " + S(t.pp));
  const int world = p.world_size();
  require(world % t.pp == 0, "train.pp: " + S(t.pp) + " does not divide " + S(world) + " GPUs");
  require(t.vp >= 1, "train.vp: must be >= 1, got " + S(t.vp));
  if (t.schedule == Schedule::kInterleaved) {
    require(t.vp > 1, "train.vp: the interleaved schedule needs vp > 1 virtual stages per device group, got " + S(t.vp));
    require(t.pp > 1, "train.pp: the interleaved schedule needs pp > 1, got " + S(t.pp));
    require(t.micro_batches % t.pp == 0, "train.micro_batches: the interleaved schedule needs a multiple of pp=" +
                                             S(t.pp) + ", got " + S(t.micro_batches));
  } else if (t.schedule == Schedule::kZbV) {
    // ZB-V (Qi et al. 2024, section 6; torch.distributed.pipelining's ScheduleZBVZeroBubble): every
    // device group holds exactly two model chunks in a V, so stages = 2 pp.
    require(t.pp >= 2, "train.pp: the zb-v schedule needs pp >= 2 device groups (two model chunks each, in a V), "
                       "got " + S(t.pp));
    require(t.vp == 2, "train.vp: the zb-v schedule runs exactly 2 model chunks per device group (vp = 2), got " +
                           S(t.vp));
  } else {
    require(t.vp == 1, "train.vp: " + S(t.vp) + " virtual stages need schedule \"interleaved\" or \"zb-v\" "
                           "(schedule is " + to_string(t.schedule) + ")");
  }
  const int L = p.model.num_layers();
  if (t.varlen) {
    require(t.pp == 1 && t.vp == 1, "train.varlen: variable-length plans have one pipeline stage (pp " + S(t.pp) +
                                        ", vp " + S(t.vp) + ")");
    auto pow2 = [](int x) { return x > 0 && (x & (x - 1)) == 0; };
    require(pow2(t.min_group) && (t.max_group == 0 || (pow2(t.max_group) && t.max_group >= t.min_group)),
            "train.varlen: min_group " + S(t.min_group) + " and max_group " + S(t.max_group) +
                " must be powers of two, min_group <= max_group (max_group 0: as many as the heads allow)");
  }
  if (!t.dp_micro_batches.empty())
    require(!t.dp_shares.empty(), "train.dp_micro_batches: needs train.dp_shares (the samples of each replica's "
                                  "micro-batches)");
  if (!t.stage_dp_shares.empty()) {
    require(t.dp_shares.empty() && t.dp_micro_batches.empty(),
            "train.stage_dp_shares: replaces train.dp_shares and cannot go with train.dp_micro_batches: give one");
    require(!t.varlen, "train.stage_dp_shares: a variable-length plan (train.varlen) places its documents per step; "
                       "drop stage_dp_shares");
    require(t.pp > 1, "train.stage_dp_shares: per pipeline device group, but train.pp is " + S(t.pp) +
                          " (one group: use train.dp_shares)");
    require(static_cast<int>(t.stage_dp_shares.size()) == t.pp,
            "train.stage_dp_shares: " + S(t.stage_dp_shares.size()) + " lists for " + S(t.pp) +
                " pipeline device groups (train.pp)");
    for (size_t g = 0; g < t.stage_dp_shares.size(); ++g) {
      long long sum = 0;
      for (int x : t.stage_dp_shares[g]) sum += x;
      require(sum == t.pipeline_micro_batch(), "train.stage_dp_shares[" + S(g) + "]: sum to " + S(sum) +
                                                   " but a micro-batch holds " + S(t.pipeline_micro_batch()) +
                                                   " samples (global batch " + S(t.global_batch) + " / " +
                                                   S(t.micro_batches) + " micro-batches)");
    }
  }
  if (!t.dp_shares.empty()) {
    require(!t.varlen, "train.dp_shares: a variable-length plan (train.varlen) places its documents per step; "
                       "drop dp_shares");
    long long sum = 0;
    for (size_t i = 0; i < t.dp_shares.size(); ++i) {
      require(t.dp_shares[i] >= 0, "train.dp_shares[" + S(i) + "]: must be >= 0, got " + S(t.dp_shares[i]));
      sum += t.dp_shares[i];
    }
    if (t.dp_micro_batches.empty()) {
      require(sum == t.pipeline_micro_batch(), "train.dp_shares: sum to " + S(sum) + " but a micro-batch holds " +
                                                   S(t.pipeline_micro_batch()) + " samples (global batch " +
                                                   S(t.global_batch) + " / " + S(t.micro_batches) + " micro-batches)");
    } else {
      require(t.dp_micro_batches.size() == t.dp_shares.size(),
              "train.dp_micro_batches: " + S(t.dp_micro_batches.size()) + " counts for " + S(t.dp_shares.size()) +
                  " replicas (train.dp_shares)");
      long long samples = 0;
      int most = 0;
      for (size_t i = 0; i < t.dp_micro_batches.size(); ++i) {
        const int c = t.dp_micro_batches[i];
        require(c >= 0 && c <= t.micro_batches, "train.dp_micro_batches[" + S(i) + "]: must be 0.." +
                                                    S(t.micro_batches) + " (train.micro_batches), got " + S(c));
        samples += static_cast<long long>(c) * t.dp_shares[i];
        most = std::max(most, c);
      }
      require(most == t.micro_batches, "train.micro_batches: " + S(t.micro_batches) +
                                           " but the most any replica runs (train.dp_micro_batches) is " + S(most));
      require(samples == t.global_batch, "train.dp_micro_batches: shares x counts sum to " + S(samples) +
                                             " samples but the global batch is " + S(t.global_batch));
    }
  }
  if (!t.dp_shares.empty() || !t.stage_dp_shares.empty()) {
    const std::string field = t.dp_shares.empty() ? "train.stage_dp_shares" : "train.dp_shares";
    const int S0 = p.devices_per_stage();
    if (S0 > 0) {
      const ActivationLayout want = layout_of(p.embedding, S0);
      for (size_t st = 0; st < p.stages.size(); ++st)
        for (size_t i = 0; i < p.stages[st].layers.size(); ++i)
          require(layout_of(p.stages[st].layers[i], S0) == want,
                  "stages[" + S(st) + "].layers[" + S(i) + "]: with " + field + " every layer must lay out its "
                  "activations as the embedding does (the same tp, sp, ulysses, cp and dp)");
    }
  }
  if (p.devices) {
    const int n = p.devices->cluster.total_gpus();
    require(n == world, "devices: the node groups hold " + S(n) + " GPUs but the plan runs " + S(world) + " ranks");
    const auto& g = p.devices->gpu_of_rank;
    require(static_cast<int>(g.size()) == world,
            "devices.gpu_of_rank: " + S(g.size()) + " entries for " + S(world) + " ranks");
    std::vector<char> seen(world, 0);
    for (size_t r = 0; r < g.size(); ++r) {
      require(g[r] >= 0 && g[r] < world && !seen[g[r]],
              "devices.gpu_of_rank[" + S(r) + "]: " + S(g[r]) + " is out of range or repeated (a permutation of 0-" +
                  S(world - 1) + " is needed)");
      seen[g[r]] = 1;
    }
  }
  const int nstages = t.pp * t.vp;
  require(static_cast<int>(p.stages.size()) == nstages, "stages: " + S(p.stages.size()) + " stages listed but pp*vp = " +
                                                            S(t.pp) + "*" + S(t.vp) + " = " + S(nstages));
  require(L >= nstages, "train.pp: " + S(nstages) + " pipeline stages for only " + S(L) + " layers");
  const int stage_size = world / t.pp;
  int next = 0;
  for (int s = 0; s < nstages; ++s) {
    const auto& st = p.stages[s];
    const std::string where = "stages[" + S(s) + "]";
    require(st.num_layers() > 0, where + ".layers: a stage needs at least one layer");
    require(st.first_layer == next, where + ".first_layer: " + S(st.first_layer) + " but the previous stage ends at " +
                                        S(next) + " (stages must cover the layers in order)");
    for (int i = 0; i < st.num_layers(); ++i) {
      const int layer = st.first_layer + i;
      require(layer < L, where + ": layer " + S(layer) + " beyond the model's " + S(L) + " layers");
      check_strategy(where + ".layers[" + S(i) + "]", st.layers[i], &p.model.layer(layer), p, stage_size);
    }
    next += st.num_layers();
  }
  require(next == L, "stages: cover " + S(next) + " layers but the model has " + S(L));
  check_strategy("embedding", p.embedding, nullptr, p, stage_size);
}

}  // namespace

Status check_moe_imbalance(double factor, const ModelSpec& model, const std::string& field) {
  if (!(std::isfinite(factor) && factor >= 1.0))
    return Error{ErrorKind::kBadInput,
                 field + ": the busiest expert-parallel rank's routed copies over the mean, at least 1, got " + num(factor)};
  if (factor != 1.0 && !model.has_moe())
    return Error{ErrorKind::kBadInput,
                 field + ": " + num(factor) + " for a model without MoE layers (" + model.name + ")"};
  return {};
}

Status check_moe_dispatch(MoeDispatcher dispatcher, bool overlap, const ModelSpec& model,
                          const std::string& dispatcher_field, const std::string& overlap_field) {
  if (model.has_moe()) return {};
  if (dispatcher != MoeDispatcher::kAllToAll)
    return Error{ErrorKind::kBadInput, dispatcher_field + ": " + to_string(dispatcher) +
                                           " needs a mixture-of-experts model (" + model.name + " has none)"};
  if (overlap)
    return Error{ErrorKind::kBadInput, overlap_field + ": needs a mixture-of-experts model (" + model.name + " has none)"};
  return {};
}

Status validate(const Plan& p) {
  try {
    validate_or_throw(p);
  } catch (const InputError& e) {
    return Error{e.kind, e.what()};
  }
  return {};
}

}  // namespace weft
