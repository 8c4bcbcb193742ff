#include "weft/search/strategy_space.h"

#include <algorithm>

namespace weft::planner {

namespace {

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

bool contains(const std::vector<Schedule>& v, Schedule s) { return std::find(v.begin(), v.end(), s) != v.end(); }

// Removes the candidates SearchOptions::accept refuses (a layer of `shape`, or the embedding when
// null), each counted under the options rule.
void drop_unaccepted(std::vector<LayerStrategy>& out, const SearchOptions& opt, const LayerShape* shape, RuleLog& log) {
  if (!opt.accept) return;
  const size_t before = out.size();
  std::erase_if(out, [&](const LayerStrategy& s) { return !opt.accept(s, shape); });
  for (size_t i = out.size(); i < before; ++i) log.add(kRuleOptions);
}

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
                                     ? std::vector<Schedule>{Schedule::kGpipe, Schedule::k1F1B, Schedule::kInterleaved}
                                     : opt.schedules;
  std::vector<int> ms;
  for (int m : opt.micro_batches.empty() ? divisors(B) : opt.micro_batches)
    if (m >= 1 && m <= B && B % m == 0) ms.push_back(m);
  std::sort(ms.begin(), ms.end());
  ms.erase(std::unique(ms.begin(), ms.end()), ms.end());

  std::vector<PipelineConfig> out;
  for (int pp : pps) {
    for (Schedule sched : {Schedule::kGpipe, Schedule::k1F1B, Schedule::kInterleaved}) {
      if (!contains(scheds, sched)) continue;
      if (opt.galvatron_space && sched != Schedule::k1F1B) {
        log.add(kRuleGalvatronSpace, static_cast<long long>(ms.size()));
        continue;
      }
      if (pp == 1) {
        // No pipeline: one schedule. Keep 1F1B if searched, else the first non-interleaved one.
        const bool keep = sched == Schedule::k1F1B ||
                          (sched == Schedule::kGpipe && !contains(scheds, Schedule::k1F1B));
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
          if (v > opt.max_vp) {
            log.add(kRuleInterleaveDepth, static_cast<long long>(ms.size()));
            continue;
          }
          vps.push_back(v);
        }
      }
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

struct Limits {
  int gpn, tp_cap, seq;
  bool long_seq;
};

Limits limits(const ClusterSpec& cluster, const SearchOptions& opt) {
  Limits l;
  l.gpn = std::max(1, cluster.gpus_per_node);
  l.tp_cap = opt.max_tp > 0 ? std::min(opt.max_tp, l.gpn) : l.gpn;
  l.seq = opt.seq;
  l.long_seq = opt.seq >= opt.long_seq;
  return l;
}

}  // namespace

std::vector<LayerStrategy> layer_candidates(const LayerShape& shape, const ClusterSpec& cluster,
                                            const SearchOptions& opt, int S, int pmb, RuleLog& log) {
  std::vector<LayerStrategy> out;
  if (S < 1 || pmb < 1) return out;
  const Limits lim = limits(cluster, opt);
  const long long heads = shape.heads;
  const int kv = std::max(1, shape.kv_heads);
  const long long ffn = shape.moe.enabled() ? shape.moe.expert_ffn : shape.ffn;
  auto kv_ok = [&](int d) { return kv % d == 0 || d % kv == 0; };
  // Ulysses degree valid for tp (heads, kv heads, sequence, stage size), ignoring rules.
  auto ulysses_valid = [&](int tp, int u) {
    return S % (tp * u) == 0 && heads % (static_cast<long long>(tp) * u) == 0 && kv_ok(tp * u) && lim.seq % u == 0;
  };
  for (int tp = 1; tp <= S; tp *= 2) {
    if (S % tp != 0) break;
    if (heads % tp != 0 || ffn % tp != 0 || !kv_ok(tp)) continue;
    if (tp > lim.gpn) {
      log.add(kRuleTpInNode);
      continue;
    }
    if (tp > lim.tp_cap) {
      log.add(kRuleOptions);
      continue;
    }
    int u_fill = 1;  // the Ulysses degree that rule ulysses-before-cp asks for before any cp
    for (int u = 1; tp * u <= S && tp * u <= lim.gpn; u *= 2)
      if (ulysses_valid(tp, u)) u_fill = u;
    for (int spi = 0; spi < (tp > 1 ? 2 : 1); ++spi) {
      const bool sp = spi == 1;
      if (sp && lim.seq % tp != 0) continue;
      for (int u = 1; tp * u <= S; u *= 2) {
        if (!ulysses_valid(tp, u)) continue;
        if (u > 1 && !opt.allow_ulysses) {
          log.add(kRuleOptions);
          continue;
        }
        if (u > 1 && tp > 1 && opt.galvatron_space) {
          log.add(kRuleGalvatronSpace);
          continue;
        }
        if (!lim.long_seq && tp * u > lim.gpn) {
          log.add(kRuleSeqShardInNode);
          continue;
        }
        for (int cp = 1; tp * u * cp <= S; cp *= 2) {
          if (S % (tp * u * cp) != 0 || lim.seq % (u * cp) != 0) break;
          const int dp = S / (tp * u * cp);
          if (pmb % dp != 0) continue;
          if (cp > 1) {
            if (!opt.allow_cp) {
              log.add(kRuleOptions);
              continue;
            }
            if (opt.galvatron_space) {
              log.add(kRuleGalvatronSpace);
              continue;
            }
            if (!lim.long_seq) {
              log.add(kRuleSeqShardInNode);
              continue;
            }
            if (u < u_fill) {
              log.add(kRuleUlyssesFirst);
              continue;
            }
          }
          std::vector<int> eps{1};
          if (shape.moe.enabled()) {
            eps.clear();
            for (int ep = 1; ep <= shape.moe.experts; ep *= 2)
              if (shape.moe.experts % ep == 0 && (dp * cp) % ep == 0) eps.push_back(ep);
          }
          const int shards = dp * u * cp;
          for (int zero = 0; zero <= 3; ++zero) {
            if (zero > 0 && shards == 1) {
              log.add(kRuleZeroNeedsShards);
              continue;
            }
            if (zero == 3 && !opt.allow_zero3) {
              log.add(kRuleOptions);
              continue;
            }
            if (zero == 1 && opt.galvatron_space) {
              log.add(kRuleGalvatronSpace);
              continue;
            }
            for (Recompute rc : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
              if (rc == Recompute::kSelective && opt.galvatron_space) {
                log.add(kRuleGalvatronSpace);
                continue;
              }
              for (int ep : eps) {
                LayerStrategy s;
                s.tp = tp;
                s.sp = sp;
                s.ulysses = u;
                s.cp = cp;
                s.dp = dp;
                s.zero = zero;
                s.recompute = rc;
                s.ep = ep;
                out.push_back(s);
              }
            }
          }
        }
      }
    }
  }
  drop_unaccepted(out, opt, &shape, log);
  return out;
}

std::vector<LayerStrategy> embedding_candidates(const ModelSpec& model, const ClusterSpec& cluster,
                                                const SearchOptions& opt, int S, int pmb, RuleLog& log) {
  std::vector<LayerStrategy> out;
  if (S < 1 || pmb < 1) return out;
  const Limits lim = limits(cluster, opt);
  for (int tp = 1; tp <= S; tp *= 2) {
    if (S % tp != 0) break;
    if (tp > lim.gpn) {
      log.add(kRuleTpInNode);
      continue;
    }
    if (tp > lim.tp_cap) {
      log.add(kRuleOptions);
      continue;
    }
    for (int spi = 0; spi < (tp > 1 ? 2 : 1); ++spi) {
      const bool sp = spi == 1;
      if (sp && lim.seq % tp != 0) continue;
      for (int u = 1; tp * u <= S; u *= 2) {
        if (S % (tp * u) != 0) break;
        if (lim.seq % u != 0) break;
        const int dp = S / (tp * u);
        if (pmb % dp != 0) continue;
        if (u > 1 && !opt.allow_ulysses) {
          log.add(kRuleOptions);
          continue;
        }
        if (u > 1 && tp > 1 && opt.galvatron_space) {
          log.add(kRuleGalvatronSpace);
          continue;
        }
        if (!lim.long_seq && tp * u > lim.gpn) {
          log.add(kRuleSeqShardInNode);
          continue;
        }
        const int shards = dp * u;
        for (int zero = 0; zero <= 3; ++zero) {
          if (zero > 0 && shards == 1) {
            log.add(kRuleZeroNeedsShards);
            continue;
          }
          if (zero == 3 && !opt.allow_zero3) {
            log.add(kRuleOptions);
            continue;
          }
          if (zero == 1 && opt.galvatron_space) {
            log.add(kRuleGalvatronSpace);
            continue;
          }
          LayerStrategy s;
          s.tp = tp;
          s.sp = sp;
          s.ulysses = u;
          s.dp = dp;
          s.zero = zero;
          out.push_back(s);
        }
      }
    }
  }
  (void)model;
  drop_unaccepted(out, opt, nullptr, log);
  return out;
}

}  // namespace weft::planner
