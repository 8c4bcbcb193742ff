// The search space: pipeline configurations, and one walk over the factorisations of a stage that
// builds the candidates of a layer or of the embedding with the rules of pruning.h applied.
#include "weft/search/strategy_space.h"

#include <algorithm>
#include <array>

namespace weft::planner {

namespace {

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

template <class T>
bool contains(const std::vector<T>& v, const T& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}
// An option's list of allowed values: empty allows every value.
bool listed(const std::vector<int>& list, int d) { return list.empty() || contains(list, d); }

}  // namespace

std::vector<PipelineConfig> pipeline_configs(const ModelSpec& model, const ClusterSpec& cluster,
                                             const SearchOptions& opt, RuleLog& log) {
  const int L = model.num_layers();
  const int world = cluster.total_gpus();
  const int B = opt.global_batch;
  std::vector<int> pps;
  for (int pp : opt.pp_degrees.empty() ? divisors(world) : opt.pp_degrees)
    if (pp >= 1 && world % pp == 0 && pp <= L) pps.push_back(pp);
  std::vector<Schedule> scheds = opt.schedules.empty()
                                     ? std::vector<Schedule>{Schedule::kGpipe, Schedule::k1F1B, Schedule::kInterleaved,
                                                             Schedule::kZbH1, Schedule::kZbV}
                                     : opt.schedules;
  std::vector<int> ms;
  for (int m : opt.micro_batches.empty() ? divisors(B) : opt.micro_batches)
    if (m >= 1 && m <= B && B % m == 0) ms.push_back(m);
  std::sort(ms.begin(), ms.end());
  ms.erase(std::unique(ms.begin(), ms.end()), ms.end());

  std::vector<PipelineConfig> out;
  for (int pp : pps) {
    for (Schedule sched :
         {Schedule::kGpipe, Schedule::k1F1B, Schedule::kInterleaved, Schedule::kZbH1, Schedule::kZbV}) {
      if (!contains(scheds, sched)) continue;
      if (pp == 1 && sched == Schedule::kZbV) {  // two chunks on each of at least two groups (validate())
        log.add(kRuleNoPipeline, static_cast<long long>(ms.size()));
        continue;
      }
      if (pp == 1) {
        // No pipeline: one schedule. Keep 1F1B if searched, else the first non-interleaved one.
        const bool keep = sched == Schedule::k1F1B ||
                          (sched == Schedule::kGpipe && !contains(scheds, Schedule::k1F1B)) ||
                          (sched == Schedule::kZbH1 && !contains(scheds, Schedule::k1F1B) &&
                           !contains(scheds, Schedule::kGpipe));
        if (!keep) {
          log.add(kRuleNoPipeline, static_cast<long long>(ms.size()));
          continue;
        }
      }
      std::vector<int> vps{1};
      if (sched == Schedule::kInterleaved) {
        vps.clear();
        for (int v = 2; pp * v <= L; ++v) {
          if (L % (pp * v) != 0) continue;
          if (!opt.vp_degrees.empty()) {
            if (contains(opt.vp_degrees, v)) vps.push_back(v);
            continue;
          }
          if (v > opt.max_vp) {
            log.add(kRuleInterleaveDepth, static_cast<long long>(ms.size()));
            continue;
          }
          vps.push_back(v);
        }
      }
      // zb-v: exactly two equal chunks per device group, as the interleaved search lays them out.
      if (sched == Schedule::kZbV) vps = L % (2 * pp) == 0 ? std::vector<int>{2} : std::vector<int>{};
      for (int vp : vps)
        for (int m : ms) {
          if (pp > 1 && m < pp) {
            log.add(kRuleFillPipeline);
            continue;
          }
          if (sched == Schedule::kInterleaved && m % pp != 0) continue;  // invalid (validate())
          out.push_back(PipelineConfig{pp, vp, sched, m});
        }
    }
  }
  return out;
}

namespace {

// --- The factorisations of a stage ---------------------------------------------------------------

// What the walk builds candidates for: a layer of `shape`, or the embedding (shape null: no head or
// width constraint, no cp, no recompute, ep 1), on S devices whose micro-batch holds pmb samples.
struct Space {
  const LayerShape* shape = nullptr;
  const SearchOptions* opt = nullptr;
  int S = 1, pmb = 1;
  int gpn = 1;     // GPUs per node
  int tp_cap = 1;  // largest tp the options allow
};

bool kv_fits(const Space& sp, int d) {
  const int kv = std::max(1, sp.shape->kv_heads);
  return kv % d == 0 || d % kv == 0;
}

// tp (tensor x Ulysses degree `d` for the heads) divides what it shards.
bool heads_fit(const Space& sp, int d) {
  if (!sp.shape) return true;
  return sp.shape->heads % d == 0 && kv_fits(sp, d);
}

bool tp_fits(const Space& sp, int tp) {
  if (!sp.shape) return true;
  const long long ffn = sp.shape->moe.enabled() ? sp.shape->moe.expert_ffn : sp.shape->ffn;
  return heads_fit(sp, tp) && ffn % tp == 0;
}

bool ulysses_fits(const Space& sp, int tp, int u) {
  return sp.S % (tp * u) == 0 && heads_fit(sp, tp * u) && sp.opt->seq % u == 0;
}

// The Ulysses degree that rule ulysses-before-cp asks for before any cp: the largest valid one
// whose tensor x Ulysses group stays inside a node.
int ulysses_fill(const Space& sp, int tp) {
  int fill = 1;
  for (int u = 1; tp * u <= sp.S && tp * u <= sp.gpn; u *= 2)
    if (ulysses_fits(sp, tp, u)) fill = u;
  return fill;
}

// The (ep, etp) pairs of a MoE layer: experts split over ep (a power of two dividing the experts),
// each expert over etp, the two within the stage's devices (the experts' grid, weft/plan/
// strategy.h); etp as tp (0) or, under tp > 1, 1 (the two torchtitan offers; Megatron-LM's common
// layouts run tp 2-4 on attention with etp 1).
std::vector<std::pair<int, int>> expert_degrees(const Space& sp, const LayerStrategy& s) {
  if (!sp.shape || !sp.shape->moe.enabled()) return {{1, 0}};
  std::vector<std::pair<int, int>> out;
  for (int etp : {0, 1}) {
    if (etp == 1 && s.tp == 1) continue;
    const int et = etp > 0 ? etp : s.tp;
    if (sp.shape->moe.expert_ffn % et != 0) continue;
    for (int ep = 1; ep <= sp.shape->moe.experts; ep *= 2)
      if (sp.shape->moe.experts % ep == 0 && s.devices() % (ep * et) == 0) out.emplace_back(ep, etp);
  }
  return out;
}

// The strategies that set field `f` of `s` (the fields before it set) to each value a stage of
// `sp` admits: what validate() requires of the devices, heads, sequence and samples, no rule.
std::vector<LayerStrategy> extend(const Space& sp, StrategyField f, const LayerStrategy& s) {
  std::vector<LayerStrategy> out;
  auto add = [&](auto set) {
    LayerStrategy n = s;
    set(n);
    out.push_back(n);
  };
  switch (f) {
    case StrategyField::kTp:
      for (int tp = 1; tp <= sp.S && sp.S % tp == 0; tp *= 2)
        if (tp_fits(sp, tp)) add([&](LayerStrategy& n) { n.tp = tp; });
      break;
    case StrategyField::kSp:
      add([](LayerStrategy& n) { n.sp = false; });
      if (s.tp > 1 && sp.opt->seq % s.tp == 0) add([](LayerStrategy& n) { n.sp = true; });
      break;
    case StrategyField::kUlysses:
      for (int u = 1; s.tp * u <= sp.S; u *= 2) {
        if (!ulysses_fits(sp, s.tp, u)) continue;
        // The embedding has no cp: its dp is fixed here, and checked here.
        const int dp = sp.S / (s.tp * u);
        if (!sp.shape && sp.pmb % dp != 0) continue;
        add([&](LayerStrategy& n) { n.ulysses = u, n.dp = sp.shape ? n.dp : dp; });
      }
      break;
    case StrategyField::kCp:
      for (int cp = 1; s.tp * s.ulysses * cp <= sp.S && (cp == 1 || sp.shape); cp *= 2) {
        if (sp.S % (s.tp * s.ulysses * cp) != 0 || sp.opt->seq % (s.ulysses * cp) != 0) break;
        const int dp = sp.S / (s.tp * s.ulysses * cp);
        if (sp.pmb % dp == 0) add([&](LayerStrategy& n) { n.cp = cp, n.dp = dp; });
      }
      break;
    case StrategyField::kZero:
      for (int zero = 0; zero <= 3; ++zero) add([&](LayerStrategy& n) { n.zero = zero; });
      break;
    case StrategyField::kRecompute:
      for (Recompute rc : {Recompute::kNone, Recompute::kSelective, Recompute::kFull})
        if (sp.shape || rc == Recompute::kNone) add([&](LayerStrategy& n) { n.recompute = rc; });
      break;
    case StrategyField::kEp:
      for (auto [ep, etp] : expert_degrees(sp, s)) add([&](LayerStrategy& n) { n.ep = ep, n.etp = etp; });
      break;
  }
  return out;
}

// --- The candidate rules of pruning.h, each true where it removes ---------------------------------

bool tp_across_nodes(const Space& sp, const LayerStrategy& s) { return s.tp > sp.gpn; }
bool tp_above_max(const Space& sp, const LayerStrategy& s) { return s.tp > sp.tp_cap; }
bool ulysses_switched_off(const Space& sp, const LayerStrategy& s) {
  return s.ulysses > 1 && !sp.opt->allow_ulysses;
}
// --ulysses / --cp: the layers' degrees the user lists (the embedding's Ulysses degree stays free).
bool ulysses_not_listed(const Space& sp, const LayerStrategy& s) {
  return sp.shape && !listed(sp.opt->ulysses_degrees, s.ulysses);
}
bool cp_not_listed(const Space& sp, const LayerStrategy& s) { return sp.shape && !listed(sp.opt->cp_degrees, s.cp); }
bool short_sequence_across_nodes(const Space& sp, const LayerStrategy& s) {
  return sp.opt->seq < sp.opt->long_seq && s.tp * s.ulysses > sp.gpn;
}
bool cp_switched_off(const Space& sp, const LayerStrategy& s) { return s.cp > 1 && !sp.opt->allow_cp; }
bool cp_at_short_sequence(const Space& sp, const LayerStrategy& s) {
  return s.cp > 1 && sp.opt->seq < sp.opt->long_seq && sp.opt->cp_degrees.empty();
}
bool cp_before_ulysses_fills(const Space& sp, const LayerStrategy& s) {
  return s.cp > 1 && s.ulysses < ulysses_fill(sp, s.tp) && sp.opt->ulysses_degrees.empty() &&
         sp.opt->cp_degrees.empty();
}
bool zero_without_shards(const Space&, const LayerStrategy& s) { return s.zero > 0 && s.shard_group() == 1; }
bool zero3_switched_off(const Space& sp, const LayerStrategy& s) { return s.zero == 3 && !sp.opt->allow_zero3; }
bool etp_one_below_tp(const Space&, const LayerStrategy& s) {
  return s.tp > 1 && s.expert_tp() == 1 && s.ep % s.tp != 0;
}
bool etp_tp_with_experts_apart(const Space& sp, const LayerStrategy& s) {
  return sp.shape && s.tp > 1 && s.ep > 1 && s.expert_tp() == s.tp && sp.shape->moe.experts % (s.ep * s.tp) == 0;
}

struct Rule {
  const char* name;
  StrategyField field;
  bool (*removes)(const Space&, const LayerStrategy&);  // null: SearchOptions::restrictions of `field`
};

// Every rule in the order it is asked; a strategy is counted under the first that removes it.
constexpr std::array<Rule, 20> kRules{{
    {kRuleTpInNode, StrategyField::kTp, tp_across_nodes},
    {kRuleOptions, StrategyField::kTp, tp_above_max},
    {nullptr, StrategyField::kTp, nullptr},
    {nullptr, StrategyField::kSp, nullptr},
    {kRuleOptions, StrategyField::kUlysses, ulysses_switched_off},
    {kRuleOptions, StrategyField::kUlysses, ulysses_not_listed},
    {nullptr, StrategyField::kUlysses, nullptr},
    {kRuleSeqShardInNode, StrategyField::kUlysses, short_sequence_across_nodes},
    {kRuleOptions, StrategyField::kCp, cp_switched_off},
    {kRuleOptions, StrategyField::kCp, cp_not_listed},
    {nullptr, StrategyField::kCp, nullptr},
    {kRuleSeqShardInNode, StrategyField::kCp, cp_at_short_sequence},
    {kRuleUlyssesFirst, StrategyField::kCp, cp_before_ulysses_fills},
    {kRuleZeroNeedsShards, StrategyField::kZero, zero_without_shards},
    {kRuleOptions, StrategyField::kZero, zero3_switched_off},
    {nullptr, StrategyField::kZero, nullptr},
    {nullptr, StrategyField::kRecompute, nullptr},
    {kRuleEtpSpansTp, StrategyField::kEp, etp_one_below_tp},
    {kRuleEtpTpGathers, StrategyField::kEp, etp_tp_with_experts_apart},
    {nullptr, StrategyField::kEp, nullptr},
}};

// Whether a rule of field `f` removes s, counting it under that rule.
bool removed(const Space& sp, StrategyField f, const LayerStrategy& s, RuleLog& log) {
  for (const Rule& r : kRules) {
    if (r.field != f) continue;
    if (r.removes) {
      if (!r.removes(sp, s)) continue;
      log.add(r.name);
      return true;
    }
    for (const NamedRestriction& x : sp.opt->restrictions)
      if (x.field == f && x.refuses(s)) {
        log.add(x.name);
        return true;
      }
  }
  return false;
}

constexpr std::array<StrategyField, 7> kWalkOrder{StrategyField::kTp,   StrategyField::kSp,
                                                  StrategyField::kUlysses, StrategyField::kCp,
                                                  StrategyField::kZero, StrategyField::kRecompute,
                                                  StrategyField::kEp};

// Sets the fields one after another from `level` on, each rule asked as soon as its field is set,
// so that a rule counts once per partial strategy it removes (tp-inside-node once per tp).
void walk(const Space& sp, size_t level, const LayerStrategy& s, RuleLog& log, std::vector<LayerStrategy>& out) {
  if (level == kWalkOrder.size()) {
    out.push_back(s);
    return;
  }
  const StrategyField f = kWalkOrder[level];
  for (const LayerStrategy& next : extend(sp, f, s))
    if (!removed(sp, f, next, log)) walk(sp, level + 1, next, log, out);
}

std::vector<LayerStrategy> candidates(const LayerShape* shape, const ClusterSpec& cluster, const SearchOptions& opt,
                                      int S, int pmb, RuleLog& log) {
  std::vector<LayerStrategy> out;
  if (S < 1 || pmb < 1) return out;
  Space sp;
  sp.shape = shape;
  sp.opt = &opt;
  sp.S = S;
  sp.pmb = pmb;
  sp.gpn = std::max(1, cluster.gpus_per_node);
  sp.tp_cap = opt.max_tp > 0 ? std::min(opt.max_tp, sp.gpn) : sp.gpn;
  walk(sp, 0, LayerStrategy{}, log, out);
  // SearchOptions::accept last, each refused candidate counted under the options rule.
  if (opt.accept) {
    const size_t before = out.size();
    std::erase_if(out, [&](const LayerStrategy& s) { return !opt.accept(s, shape); });
    log.add(kRuleOptions, static_cast<long long>(before - out.size()));
  }
  return out;
}

}  // namespace

std::vector<LayerStrategy> layer_candidates(const LayerShape& shape, const ClusterSpec& cluster,
                                            const SearchOptions& opt, int S, int pmb, RuleLog& log) {
  return candidates(&shape, cluster, opt, S, pmb, log);
}

std::vector<LayerStrategy> embedding_candidates(const ModelSpec&, const ClusterSpec& cluster, const SearchOptions& opt,
                                                int S, int pmb, RuleLog& log) {
  return candidates(nullptr, cluster, opt, S, pmb, log);
}

}  // namespace weft::planner
