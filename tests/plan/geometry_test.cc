// Plan geometry without torch: activation layouts, the process groups and gradient groups a plan
// needs, and the parameter slices each rank holds.
#include "weft/plan/geometry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "test_plans.h"
#include "weft/spec/counts.h"

namespace weft {
namespace {

using Groups = std::set<std::vector<int>>;

Groups distinct(const std::vector<std::vector<int>>& v) { return {v.begin(), v.end()}; }

TEST(Geometry, LayoutSplitsBatchByDpAndSequenceByUlyssesThenTp) {
  // S = 8: tp 2 (sp), ulysses 2, dp 2. Rank 5 = tp 1, ulysses 0, dp 1; rank 3 = tp 1, ulysses 1, dp 0.
  const LayerStrategy s{.tp = 2, .sp = true, .ulysses = 2, .dp = 2};
  const ActivationLayout l = layout_of(s, 8);
  EXPECT_EQ(l.batch_parts, 2);
  EXPECT_EQ(l.seq_parts, 4);
  EXPECT_EQ(l.batch_idx, (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(l.seq_idx, (std::vector<int>{0, 1, 2, 3, 0, 1, 2, 3}));
  // Without sequence parallelism the two tp ranks hold copies of one sequence block.
  LayerStrategy no_sp = s;
  no_sp.sp = false;
  const ActivationLayout c = layout_of(no_sp, 8);
  EXPECT_EQ(c.seq_parts, 2);
  EXPECT_EQ(c.seq_idx, (std::vector<int>{0, 0, 1, 1, 0, 0, 1, 1}));
  EXPECT_FALSE(c.replicated());
  EXPECT_TRUE(layout_of(LayerStrategy{.tp = 8}, 8).replicated());
}

// Context parallelism cuts the sequence into 2 cp chunks and gives cp rank c chunks c and
// 2 cp - 1 - c (Megatron-LM's and torchtitan's load balancing of causal attention); ulysses and
// Megatron-SP cut that share again, in order.
TEST(Geometry, ContextParallelHoldsMirroredChunks) {
  // T 16, cp 2: chunks of 4; cp rank 0 holds [0, 4) and [12, 16), rank 1 [4, 8) and [8, 12).
  EXPECT_EQ(seq_runs(16, 2, 0, 8), (std::vector<SeqRun>{{0, 4}, {12, 4}}));
  EXPECT_EQ(seq_runs(16, 2, 8, 8), (std::vector<SeqRun>{{4, 8}}));  // chunks 1 and 2 are adjacent
  EXPECT_EQ(seq_runs(16, 1, 4, 6), (std::vector<SeqRun>{{4, 6}}));
  // A piece that straddles the two chunks of a share (ulysses 3 of cp 2, T 24: pieces of 4 of
  // the share [0, 6) + [18, 24)).
  EXPECT_EQ(seq_runs(24, 2, 4, 4), (std::vector<SeqRun>{{4, 2}, {18, 2}}));
  // Every position exactly once over the blocks of a layout: S 8 = tp 2 (sp) x cp 2 x dp 2.
  const LayerStrategy s{.tp = 2, .sp = true, .cp = 2, .dp = 2};
  const ActivationLayout l = layout_of(s, 8);
  EXPECT_EQ(l.cp, 2);
  EXPECT_EQ(l.seq_parts, 4);
  EXPECT_EQ(l.seq_idx, (std::vector<int>{0, 1, 2, 3, 0, 1, 2, 3}));  // rank 2 = tp 0 of cp rank 1
  EXPECT_EQ(block_runs(l, 0, 32), (std::vector<SeqRun>{{0, 8}}));  // chunk 0 of 4 chunks of 8
  std::vector<int> seen(32, 0);
  for (int r = 0; r < 4; ++r)
    for (const SeqRun& run : block_runs(l, r, 32))
      for (int64_t i = run.start; i < run.start + run.len; ++i) ++seen[i];
  EXPECT_EQ(seen, std::vector<int>(32, 1));
  EXPECT_EQ(block_runs(l, 1, 32), (std::vector<SeqRun>{{24, 8}}));  // the mirrored chunk of cp rank 0
  EXPECT_NE(layout_of(s, 8), layout_of(LayerStrategy{.tp = 2, .sp = true, .ulysses = 2, .dp = 2}, 8))
      << "cp and ulysses cut the sequence in different orders";
}

TEST(Geometry, TheLayoutDependsOnlyOnTheLayoutKey) {
  std::vector<LayerStrategy> all;
  for (int tp : {1, 2, 4})
    for (int u : {1, 2})
      for (bool sp : {false, true})
        for (int zero : {0, 3})
          for (Recompute rc : {Recompute::kNone, Recompute::kFull}) {
            if (sp && tp == 1) continue;
            all.push_back(LayerStrategy{.tp = tp, .sp = sp, .ulysses = u, .dp = 8 / (tp * u), .zero = zero,
                                        .recompute = rc});
          }
  for (const auto& a : all) {
    EXPECT_EQ(layout_of(representative(layout_key(a)), 8), layout_of(a, 8)) << label(a);
    for (const auto& b : all)
      if (layout_key(a) == layout_key(b)) EXPECT_EQ(layout_of(a, 8), layout_of(b, 8)) << label(a) << " " << label(b);
  }
  const LayerStrategy r = representative(layout_key(LayerStrategy{.tp = 2, .dp = 4, .zero = 3}));
  EXPECT_EQ(r.zero, 0);
  EXPECT_EQ(r.tp, 2);
  EXPECT_EQ(r.dp, 4);
}

TEST(Geometry, KvReplicaGroupsWhenTpExceedsKvHeads) {
  const LayerStrategy s{.tp = 4, .dp = 2};
  // 2 kv heads on tp 4: each head lives on two consecutive tp ranks.
  EXPECT_EQ(kv_replica_group(1, 8, 1, s, 2), (std::vector<int>{0, 1}));
  EXPECT_EQ(kv_replica_group(6, 8, 1, s, 2), (std::vector<int>{6, 7}));
  EXPECT_EQ(kv_replica_group(6, 8, 1, s, 1), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(kv_replica_group(6, 8, 1, s, 4), (std::vector<int>{6}));
}

TEST(Geometry, ProcessGroupsOfAUniformPlan) {
  // pp 2 x (tp 2, dp 2): 8 ranks, 4 per stage; 4 kv heads, so no kv-replica groups beyond singletons.
  const Plan p = testing::uniform_plan(LayerStrategy{.tp = 2, .dp = 2}, 2);
  const Groups want = {{0, 1, 2, 3, 4, 5, 6, 7},            // world
                       {0, 1, 2, 3}, {4, 5, 6, 7},          // stages
                       {0, 1}, {2, 3}, {4, 5}, {6, 7},      // tp
                       {0, 2}, {1, 3}, {4, 6}, {5, 7},      // shard (dp)
                       {0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};  // ulysses 1, kv replicas
  EXPECT_EQ(distinct(process_groups(p)), want);
  EXPECT_EQ(process_groups(p).front(), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(distinct(grad_groups(p)), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
}

TEST(Geometry, MixedLayersAndTiedEmbeddingsAddTheirGroups) {
  Plan p = testing::uniform_plan(LayerStrategy{.dp = 4}, 2);
  p.model.tied_embeddings = true;
  p.stages[1].layers[2] = LayerStrategy{.tp = 2, .dp = 2};
  p.stages[1].layers[3] = LayerStrategy{.ulysses = 2, .dp = 2, .zero = 3};
  p.stages[0].layers[0] = LayerStrategy{.tp = 4};
  const Groups g = distinct(process_groups(p));
  EXPECT_TRUE(g.count({4, 5}) && g.count({6, 7})) << "ulysses groups of the last layer";
  EXPECT_TRUE(g.count({4, 6}) && g.count({5, 7})) << "dp 2 shard groups of the other stage-1 layers";
  EXPECT_TRUE(g.count({4, 5, 6, 7})) << "the ulysses x dp shard group of the last layer";
  EXPECT_TRUE(g.count({0, 1, 2, 3})) << "tp 4 of the first layer and the first stage";
  for (int j = 0; j < 4; ++j) EXPECT_TRUE(g.count({j, 4 + j})) << "tied pair " << j;
  // The zero-3 layer has no gradient-channel group of its own; the others do (tp 4: every rank
  // alone; tp 2 dp 2: its dp pairs; dp 4: the stage).
  EXPECT_EQ(distinct(grad_groups(p)), (Groups{{0}, {1}, {2}, {3}, {0, 1, 2, 3}, {4, 6}, {5, 7}, {4, 5, 6, 7}}));
  p.embedding.zero = 3;
  for (auto& st : p.stages)
    for (auto& s : st.layers) s.zero = 3;
  EXPECT_TRUE(grad_groups(p).empty());
}

// Every parameter element is counted exactly once in the job: summed over all ranks, the counted
// elements of the first member of each shard group equal the model's parameter count.
double counted_elements(const Plan& p) {
  double n = 0;
  for (int r = 0; r < p.world_size(); ++r)
    for (const UnitSpec& u : unit_specs(p, r)) {
      if (u.sync_ranks.front() != r) continue;
      for (const ParamSpec& ps : u.params)
        if (ps.counted) n += static_cast<double>(ps.numel());
    }
  return n;
}

TEST(Geometry, UnitSpecsCountEveryParameterOnce) {
  for (int pp : {1, 2}) {
    const int S = 8 / pp;
    for (const LayerStrategy& s : {LayerStrategy{.dp = S}, LayerStrategy{.tp = 2, .dp = S / 2, .zero = 1},
                                   LayerStrategy{.tp = S}, LayerStrategy{.tp = S / 2, .ulysses = 2, .zero = 3}}) {
      const Plan p = testing::uniform_plan(s, pp);
      EXPECT_DOUBLE_EQ(counted_elements(p), total_params(p.model)) << label(s) << " pp " << pp;
    }
  }
  // GPT-2 style: learned positions, LayerNorm with biases, biases, a table tied across stages.
  Plan p = testing::uniform_plan(LayerStrategy{.tp = 2, .dp = 2}, 2);
  p.model.tied_embeddings = true;
  p.model.position = PositionKind::kLearned;
  p.model.max_seq = 1024;
  p.model.norm = NormKind::kLayerNorm;
  p.model.groups[0].shape.bias = true;
  p.model.groups[0].shape.ffn_kind = FfnKind::kGelu;
  EXPECT_DOUBLE_EQ(counted_elements(p), total_params(p.model));
}

// MoE layers: a router and shared experts in the layer's unit, the routed experts in a unit of
// their own on the experts' grid (E / ep experts per rank, split over etp, summed and sharded over
// the expert data-parallel group); every parameter counted once and listed once.
TEST(Geometry, MoeExpertsLiveOnTheExpertsGrid) {
  for (const auto& [s, pp] : std::vector<std::pair<LayerStrategy, int>>{
           {LayerStrategy{.dp = 8, .ep = 4}, 1},
           {LayerStrategy{.dp = 8, .zero = 3, .ep = 2}, 1},
           {LayerStrategy{.tp = 2, .sp = true, .dp = 4, .ep = 4, .etp = 1}, 1},
           {LayerStrategy{.tp = 2, .sp = true, .dp = 2, .zero = 1, .ep = 2}, 2},
           {LayerStrategy{.tp = 2, .dp = 2, .ep = 1}, 2}}) {
    Plan p = testing::uniform_plan(s, pp);
    p.model.groups[0].shape.moe = MoeSpec{8, 2, 256, 1};
    ASSERT_TRUE(validate(p).ok()) << validate(p).error().message;
    EXPECT_DOUBLE_EQ(counted_elements(p), total_params(p.model)) << label(s) << " pp " << pp;
    const int S = p.devices_per_stage();
    const int ep = s.ep, et = s.expert_tp();
    for (int r = 0; r < p.world_size(); ++r) {
      for (const UnitSpec& u : unit_specs(p, r)) {
        if (u.name.find(".experts") == std::string::npos) continue;
        EXPECT_EQ(u.sync_ranks, group_of(r, S, pp, s, Axis::kEdp)) << u.name;
        EXPECT_EQ(static_cast<int>(u.sync_ranks.size()), S / (ep * et));
        ASSERT_EQ(u.params.size(), 3u * (8 / ep)) << u.name;  // gate, up, down per expert
        const int first = (r % S) % (ep * et) / et * (8 / ep);
        const std::string pre = u.name.substr(0, u.name.size() - 8);  // "layers.N"
        EXPECT_EQ(u.params[0].name, pre + ".experts." + std::to_string(first) + ".gate");
        EXPECT_EQ(u.params[0].local_shape, (std::vector<int64_t>{256 / et, 1024}));
        EXPECT_EQ(u.params[0].shard_start, (r % S) % et * (256 / et));
      }
    }
    // Every expert of every layer listed once, in order.
    int experts = 0;
    std::set<std::string> names;
    for (const ParamSpec& ps : model_params(p)) {
      EXPECT_TRUE(names.insert(ps.name).second) << ps.name;
      if (ps.name.find(".experts.") != std::string::npos && ps.name.find(".gate") != std::string::npos) ++experts;
    }
    EXPECT_EQ(experts, 8 * p.model.num_layers());
    EXPECT_TRUE(names.count("layers.0.mlp.router"));
    EXPECT_TRUE(names.count("layers.0.mlp.shared.down"));
    EXPECT_TRUE(names.count("layers.7.experts.7.down"));
    const Groups groups = distinct(process_groups(p));
    for (int r = 0; r < p.world_size(); ++r)
      for (Axis a : {Axis::kEp, Axis::kEtp, Axis::kEdp}) EXPECT_TRUE(groups.count(group_of(r, S, pp, s, a)));
    if (s.zero < 3) {
      const Groups grads = distinct(grad_groups(p));
      for (int r = 0; r < p.world_size(); ++r) EXPECT_TRUE(grads.count(group_of(r, S, pp, s, Axis::kEdp)));
    }
  }
}

TEST(Geometry, UnitSpecsSliceTensorParallelWeightsAndPadToTheShardGroup) {
  const Plan p = testing::uniform_plan(LayerStrategy{.tp = 8}, 1);  // 16 heads, 4 kv heads, ffn 2816
  const std::vector<UnitSpec> units = unit_specs(p, 5);
  ASSERT_EQ(units.size(), 10u);  // wte, 8 layers, head
  EXPECT_EQ(units.front().name, "wte");
  EXPECT_EQ(units.back().name, "head");
  const UnitSpec& l0 = units[1];
  EXPECT_EQ(l0.name, "layers.0");
  std::map<std::string, ParamSpec> by;
  for (const auto& ps : l0.params) by[ps.name] = ps;
  const ParamSpec& wq = by.at("layers.0.attn.wq");
  EXPECT_EQ(wq.local_shape, (std::vector<int64_t>{128, 1024}));  // 2 of 16 heads of 64
  EXPECT_EQ(wq.shard_start, 5 * 128);
  const ParamSpec& wk = by.at("layers.0.attn.wk");  // kv head 2 of 4, held by tp ranks 4 and 5
  EXPECT_EQ(wk.local_shape, (std::vector<int64_t>{64, 1024}));
  EXPECT_EQ(wk.shard_start, 2 * 64);
  EXPECT_FALSE(wk.counted) << "rank 5 holds the second copy of kv head 2";
  EXPECT_TRUE(unit_specs(p, 4)[1].params[2].counted);
  const ParamSpec& down = by.at("layers.0.mlp.down");
  EXPECT_EQ(down.shard_dim, 1);
  EXPECT_EQ(down.local_shape, (std::vector<int64_t>{1024, 352}));
  EXPECT_FALSE(by.at("layers.0.ln1.weight").counted) << "replicated norms count on tp rank 0";
  int64_t offset = 0;
  for (const auto& ps : l0.params) {
    EXPECT_EQ(ps.offset, offset) << ps.name;
    offset += ps.numel();
  }
  EXPECT_EQ(l0.numel, offset);
  EXPECT_EQ(l0.sync_ranks, (std::vector<int>{5}));

  const Plan q = testing::uniform_plan(LayerStrategy{.tp = 2, .ulysses = 2, .dp = 2, .zero = 3}, 1);
  for (const UnitSpec& u : unit_specs(q, 3)) {
    EXPECT_EQ(u.sync_ranks, (std::vector<int>{1, 3, 5, 7})) << u.name;
    EXPECT_EQ(u.padded % 4, 0) << u.name;
    EXPECT_GE(u.padded, u.numel);
    EXPECT_LT(u.padded - u.numel, 4);
    EXPECT_EQ(u.zero, u.name == "wte" || u.name == "head" ? q.embedding.zero : 3);
  }
}

}  // namespace
}  // namespace weft
