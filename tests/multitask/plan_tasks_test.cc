// Task files planned on clusters: curves from weft's search, Spindle's waves, the baselines, the
// JSON weft plan --tasks prints, and the errors of a module that fits nowhere.
#include <gtest/gtest.h>

#include <iostream>
#include <map>

#include "weft/cost/analytic.h"
#include "weft/multitask/plan_tasks.h"
#include "weft/spec/presets.h"

namespace weft::multitask {
namespace {

const std::string kTasks = std::string(WEFT_DATA_DIR) + "/tasks/";

ClusterSpec cluster(const std::string& preset, int gpus) {
  ClusterOverrides o;
  o.gpus = gpus;
  return apply_overrides(load_cluster(preset).value(), o).value();
}

Result<TasksPlan> plan(const std::string& file, const ClusterSpec& c, CurveCache* cache = nullptr) {
  const TaskSpec t = load_tasks(kTasks + file).value();
  return plan_tasks(t, c, AnalyticCostModel(), SearchOptions{}, cache);
}

// The plan's invariants: GPUs per wave within the cluster, every operator's layers run once in
// all, pieces of an operator in later and later waves, dependencies finished first, the bound below
// the plan's run and the plan below running the tasks one after another on the whole cluster.
void expect_valid(const TasksPlan& p, int gpus) {
  const Allocation& a = p.allocation;
  std::map<int, int> layers, last_wave;
  std::map<int, double> end;
  for (size_t w = 0; w < a.waves.size(); ++w) {
    int used = 0;
    for (const Piece& pc : a.waves[w].pieces) {
      used += pc.gpus;
      layers[pc.op] += pc.layers;
      if (last_wave.count(pc.op)) EXPECT_LT(last_wave[pc.op], static_cast<int>(w)) << p.ops[pc.op].name;
      last_wave[pc.op] = static_cast<int>(w);
      for (int d : p.ops[pc.op].deps) EXPECT_LE(end[d], a.waves[w].start_s + 1e-12) << p.ops[pc.op].name;
    }
    for (const Piece& pc : a.waves[w].pieces) end[pc.op] = a.waves[w].start_s + a.waves[w].time_s;
    EXPECT_LE(used, gpus) << "wave " << w;
  }
  for (size_t o = 0; o < p.ops.size(); ++o) EXPECT_EQ(layers[static_cast<int>(o)], p.ops[o].layers) << p.ops[o].name;
  EXPECT_LE(a.bound_s, a.makespan_s * (1 + 1e-9));
  // The run, without barriers: above the bound, within the waves one after another and every
  // crossing in series, and (on these workloads) faster than the tasks in turn.
  EXPECT_LE(a.bound_s, p.compute_s * (1 + 1e-9));
  EXPECT_LE(p.compute_s, (a.makespan_s + p.traffic.time_s) * (1 + 1e-9));
  EXPECT_LE(p.step_time_s(), p.sequential_s * (1 + 1e-9));
  EXPECT_LE(a.bound_s, p.task_greedy_s * (1 + 1e-9));
}

// Multitask-CLIP with 4 tasks on 16 H100: eight operators (two encoders a task), ViT-H's layer
// faster on 16 GPUs than on one. Spindle's waves beat both baselines; the vision encoder, which all
// four tasks run, runs on groups on both nodes, and its gradients are summed over them.
TEST(PlanTasks, ClipFourTasksOnSixteenGpus) {
  const ClusterSpec c = cluster("h100-80gb", 16);
  Result<TasksPlan> p = plan("clip-4-tasks.json", c);
  ASSERT_TRUE(p.ok()) << p.error().message;
  ASSERT_EQ(p->ops.size(), 8u);
  for (const Op& op : p->ops) {
    ASSERT_FALSE(op.curve.n.empty()) << op.name;
    if (op.name == "vision-text/vision") {
      EXPECT_EQ(op.curve.n.front(), 1);
      EXPECT_EQ(op.curve.n.back(), 16);
      EXPECT_GT(op.curve.t.front(), 4 * op.curve.t.back()) << "ViT-H, 256 samples: 1 GPU against 16";
    }
  }
  expect_valid(*p, 16);
  EXPECT_FALSE(p->in_turn);
  EXPECT_LT(p->step_time_s(), p->sequential_s);
  EXPECT_LT(p->step_time_s(), p->task_greedy_s);
  EXPECT_GT(p->shared_sync.groups, 0);
  // Whole tasks side by side pay a wider reduction of the vision encoder too.
  EXPECT_GT(p->task_greedy_shared_s, 0);
  const Json j = to_json(*p);
  EXPECT_EQ(j.at("allocation").get<std::string>(), "waves");
  for (const char* k : {"sequential_s", "task_greedy_s", "bound_s"}) EXPECT_TRUE(j["baselines"].contains(k)) << k;
  EXPECT_TRUE(j.contains("plan_ms"));
}

// The same on a network of 1 GB/s a GPU: the waves' crossings between nodes and the vision
// encoder's wider reduction cost more than the waves gain, and the operators run in turn.
TEST(PlanTasks, ClipFourTasksOnASlowNetworkRunInTurn) {
  ClusterSpec c = cluster("h100-80gb", 16);
  c.inter.gbps = 1;
  Result<TasksPlan> p = plan("clip-4-tasks.json", c);
  ASSERT_TRUE(p.ok()) << p.error().message;
  expect_valid(*p, 16);
  EXPECT_TRUE(p->in_turn);
  EXPECT_LT(p->waves_makespan_s, p->sequential_s);  // the waves' compute alone would gain
  EXPECT_GT(p->waves_step_s, p->step_time_s());
  EXPECT_LE(p->step_time_s(), p->sequential_s);
  EXPECT_EQ(to_json(*p).at("allocation").get<std::string>(), "in_turn");
}

// The same on 64 GPUs, where the waves gain more than they cost: traffic between waves (operators
// change their GPUs), the vision encoder's layers reduced over the groups that ran them, the plan
// read back as the runtime reads it.
TEST(PlanTasks, ClipFourTasksOnSixtyFourGpusRunsWaves) {
  const ClusterSpec c = cluster("h100-80gb", 64);
  Result<TasksPlan> p = plan("clip-4-tasks.json", c);
  ASSERT_TRUE(p.ok()) << p.error().message;
  expect_valid(*p, 64);
  EXPECT_FALSE(p->in_turn);
  EXPECT_LT(p->step_time_s(), p->sequential_s);
  EXPECT_LT(p->step_time_s(), p->task_greedy_s);
  EXPECT_GT(p->traffic.crossings, 0);
  EXPECT_GT(p->traffic.time_s, 0);
  EXPECT_GT(p->shared_sync.groups, 0);
  EXPECT_GT(p->shared_sync.time_s, 0);
  const Json j = to_json(*p);
  EXPECT_DOUBLE_EQ(j.at("step_time_s").get<double>(), p->compute_s + p->shared_sync.time_s);
  // Without barriers between waves the ranks run ahead: no longer than the waves one after
  // another with every crossing in series, and no shorter than the longest piece.
  EXPECT_LE(p->compute_s, p->allocation.makespan_s + p->traffic.time_s + 1e-12);
  double longest = 0;
  for (const Wave& w : p->allocation.waves)
    for (const Piece& pc : w.pieces) longest = std::max(longest, pc.time_s);
  EXPECT_GE(p->compute_s, longest);
  Result<WavePlan> back = wave_plan_from_json(j);
  ASSERT_TRUE(back.ok()) << back.error().message;
  Result<TaskSpec> t = load_tasks(std::string(WEFT_DATA_DIR) + "/tasks/clip-4-tasks.json");
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(validate(*back, *t).ok()) << validate(*back, *t).error().message;
  EXPECT_EQ(back->world, 64);
  ASSERT_FALSE(j.at("waves").empty());
  for (const char* k : {"name", "gpus", "layers", "time_s"}) EXPECT_TRUE(j["waves"][0]["modules"][0].contains(k)) << k;
  for (const char* k : {"sequential_s", "task_greedy_s", "bound_s"}) EXPECT_TRUE(j["baselines"].contains(k)) << k;
  EXPECT_TRUE(j.contains("plan_ms"));
}

// Multitask-CLIP with 7 tasks on 32 H100, where the waves of the greedy wavefront ran 16 % above
// the bound: packed groups (each group's pieces back to back, operators wrapped from one group to
// the next, a group's remainder cut into smaller ones) run within Spindle's 7 %, and the plan kept
// is one the runtime accepts.
TEST(PlanTasks, ClipSevenTasksOnThirtyTwoGpusRunsNearTheBound) {
  const ClusterSpec c = cluster("h100-80gb", 32);
  Result<TasksPlan> p = plan("clip-7-tasks.json", c);
  ASSERT_TRUE(p.ok()) << p.error().message;
  expect_valid(*p, 32);
  EXPECT_LE(p->compute_s / p->allocation.bound_s, 1.07);
  Result<Allocation> wavefront = allocate(p->ops, 32, {}, AllocateMode::kWavefront);
  ASSERT_TRUE(wavefront.ok());
  EXPECT_LT(p->compute_s, wavefront->makespan_s);
  Result<TaskSpec> t = load_tasks(std::string(WEFT_DATA_DIR) + "/tasks/clip-7-tasks.json");
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(validate(p->placement, *t).ok()) << validate(p->placement, *t).error().message;
  std::cout << "[ info ] clip-7 on 32: run/bound " << p->compute_s / p->allocation.bound_s << ", wavefront waves/bound "
            << wavefront->makespan_s / p->allocation.bound_s << "\n";
}

// Qwen-VL / Qwen-Audio on 32 H100: each task's LLM starts after its encoders have finished.
TEST(PlanTasks, QwenValEncodersBeforeTheLlm) {
  Result<TasksPlan> p = plan("qwen-val-3-tasks.json", cluster("h100-80gb", 32));
  ASSERT_TRUE(p.ok()) << p.error().message;
  ASSERT_EQ(p->ops.size(), 7u);
  int with_deps = 0;
  for (const Op& op : p->ops) with_deps += !op.deps.empty();
  EXPECT_EQ(with_deps, 3);  // the three tasks' LLM operators
  expect_valid(*p, 32);
}

// Traffic between waves by hand: ViT-3B + GPT-11B on 8 A100 runs the ViT, then the GPT, each on
// all 8 GPUs in one piece, placed on the same ranks: the ViT's output flows into the GPT on the
// rank that holds each sample, and nothing crosses.
TEST(PlanTasks, TrafficOfAFlowByHand) {
  const ClusterSpec c = cluster("a100-80gb", 8);
  Result<TasksPlan> p = plan("vit-3b-gpt-11b.json", c);
  ASSERT_TRUE(p.ok()) << p.error().message;
  ASSERT_EQ(p->ops.size(), 2u);
  for (const Wave& w : p->allocation.waves) ASSERT_EQ(w.pieces.size(), 1u);
  ASSERT_EQ(p->allocation.waves.size(), 2u);
  ASSERT_EQ(p->allocation.waves[0].pieces[0].gpus, 8);
  ASSERT_EQ(p->allocation.waves[1].pieces[0].gpus, 8);
  EXPECT_EQ(p->placement.waves[0][0].first_rank, 0);
  EXPECT_EQ(p->placement.waves[1][0].first_rank, 0);
  EXPECT_EQ(p->traffic.crossings, 0);
  EXPECT_EQ(p->traffic.bytes, 0);
  EXPECT_EQ(p->traffic.time_s, 0);
  EXPECT_EQ(p->shared_sync.groups, 0);
  EXPECT_DOUBLE_EQ(p->step_time_s(), p->allocation.makespan_s);
}

// The curves are searched once per (module, batch): planned again with the cache, the same plan
// with no search.
TEST(PlanTasks, CurvesAreCachedAcrossCalls) {
  CurveCache cache;
  const ClusterSpec c = cluster("h100-80gb", 8);
  Result<TasksPlan> a = plan("clip-7-tasks.json", c, &cache);
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_EQ(cache.size(), 6u);  // six encoders, one batch
  Result<TasksPlan> b = plan("clip-7-tasks.json", c, &cache);
  ASSERT_TRUE(b.ok());
  Json ja = to_json(*a), jb = to_json(*b);
  for (Json* j : {&ja, &jb}) j->erase("plan_ms"), j->erase("curve_ms");
  EXPECT_EQ(ja.dump(), jb.dump());
}

// A placed plan run without barriers, by hand: two tasks sharing a backbone on 4 ranks (the
// encoders side by side, a's backbone on all four, b's in two pieces on ranks 0-1 and 1-3).
TEST(PlanTasks, WavesRunWithoutBarriersByHand) {
  Result<TaskSpec> t = tasks_from_json(Json::parse(R"({"name": "two",
    "modules": [
      {"name": "enc_a", "tokens": 4, "layers": 2, "hidden": 8, "heads": 2},
      {"name": "enc_b", "tokens": 4, "layers": 1, "hidden": 4, "heads": 1},
      {"name": "backbone", "kind": "decoder", "tokens": 6, "layers": 2, "hidden": 8, "heads": 2}],
    "flows": [{"from": "enc_a", "to": "backbone"}, {"from": "enc_b", "to": "backbone"}],
    "tasks": [{"name": "a", "modules": ["enc_a", "backbone"], "batch": 8},
              {"name": "b", "modules": ["enc_b", "backbone"], "batch": 8}]})"));
  ASSERT_TRUE(t.ok()) << t.error().message;
  auto piece = [](const char* task, const char* module, int first, int gpus, int layer0, int layers, double time) {
    WavePiece p;
    p.task = task, p.module = module, p.first_rank = first, p.gpus = gpus, p.first_layer = layer0, p.layers = layers;
    p.time_s = time;
    return p;
  };
  WavePlan p;
  p.world = 4;
  p.waves = {{piece("a", "enc_a", 0, 2, 0, 2, 3), piece("b", "enc_b", 2, 2, 0, 1, 6)},
             {piece("a", "backbone", 0, 4, 0, 2, 3)},
             {piece("b", "backbone", 0, 2, 0, 1, 3)},
             {piece("b", "backbone", 1, 3, 1, 1, 3)}};
  ASSERT_TRUE(validate(p, *t).ok());
  // Forwards (a third): enc_a 0-1, enc_b 0-2; a's backbone waits for ranks 2-3: 2-3; b's first
  // piece 3-4, its second 4-5. Backwards (two thirds), waves reversed: b's second 5-7, its first
  // (after it) 7-9, a's backbone (ranks 0-1 free at 9) 9-11, enc_a after it 11-13, enc_b after
  // b's first piece but on ranks 2-3 free at 11: 11-15.
  WavesRun r = run_waves(*t, p);
  EXPECT_DOUBLE_EQ(r.fwd_end[1][0], 3);
  EXPECT_DOUBLE_EQ(r.fwd_end[3][0], 5);
  EXPECT_DOUBLE_EQ(r.bwd_end[2][0], 9);
  EXPECT_DOUBLE_EQ(r.bwd_end[1][0], 11);
  EXPECT_DOUBLE_EQ(r.bwd_end[0][0], 13);
  EXPECT_DOUBLE_EQ(r.bwd_end[0][1], 15);
  EXPECT_DOUBLE_EQ(r.end_s, 15);
  // A crossing of 1 s into b's second piece delays it both ways: forward 5-6, backward 6-8, b's
  // first piece from 9 (8 + 1) to 11, a's backbone 11-13, enc_a 13-15, enc_b 13-17.
  r = run_waves(*t, p, {{{3, "b", "backbone", "backbone"}, 1.0}});
  EXPECT_DOUBLE_EQ(r.bwd_end[2][0], 11);
  EXPECT_DOUBLE_EQ(r.end_s, 17);
}

// ViT-22B + GPT-175B does not fit on 8 A100-40GB at any count: the error names the task, the
// module, the counts and the batch.
TEST(PlanTasks, AModuleThatFitsNowhereIsNamed) {
  ClusterSpec c = cluster("a100-40gb", 8);
  Result<TasksPlan> p = plan("vit-3b-gpt-11b.json", c);
  ASSERT_TRUE(p.ok()) << p.error().message;
  Result<TasksPlan> q = plan("vit-22b-gpt-175b.json", c);
  ASSERT_FALSE(q.ok());
  EXPECT_NE(q.error().message.find("task \"image-text\": module \""), std::string::npos) << q.error().message;
  EXPECT_NE(q.error().message.find("fits on no group of 1 to 8 GPUs of A100"), std::string::npos)
      << q.error().message;
  EXPECT_NE(q.error().message.find("batch of 1536: on 1 GPU nothing fits in 40 GiB (the least needs "),
            std::string::npos)
      << q.error().message;
  EXPECT_NE(q.error().message.find("; on 8 GPUs nothing fits in 40 GiB"), std::string::npos) << q.error().message;
}

}  // namespace
}  // namespace weft::multitask
