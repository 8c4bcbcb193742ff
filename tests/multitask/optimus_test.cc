// Optimus's bubble schedule: the packing on hand-made LLM steps (dependencies, exact shares of
// hand-computed cases, coarse against fine, a free encoder), the first-stage baseline, the plan for
// ViT-3B + GPT-11B, and the errors of a task file without an encoder feeding an LLM and of layouts
// that do not divide the LLM's.
#include <gtest/gtest.h>

#include <map>

#include "weft/cost/analytic.h"
#include "weft/multitask/optimus.h"
#include "weft/spec/presets.h"

namespace weft::multitask {
namespace {

const std::string kTasks = std::string(WEFT_DATA_DIR) + "/tasks/";

// pp equal stages of forward f and backward b under 1F1B, m micro-batches, no transfers.
Simulation llm_step(int pp, int m, double f, double b, double grad_sync = 0, Schedule sched = Schedule::k1F1B) {
  ScheduleSpec sp;
  sp.schedule = sched;
  sp.pp = pp;
  sp.micro_batches = m;
  StageTiming st;
  st.fwd = Seconds(f);
  st.bwd = Seconds(b);
  st.grad_sync = Seconds(grad_sync);
  return simulate_schedule(sp, std::vector<StageTiming>(static_cast<size_t>(pp), st)).value();
}

BubbleProblem problem(const Simulation& sim, std::vector<EncoderStage> enc, int lanes = 1) {
  BubbleProblem p;
  p.llm = sim;
  const size_t stages = static_cast<size_t>(sim.spec.pp * sim.spec.vp);
  p.fwd_comm_share.assign(stages, 0);
  p.bwd_comm_share.assign(stages, 0);
  p.comm_gaps.assign(stages, 1);
  p.encoder = std::move(enc);
  p.lanes = lanes;
  return p;
}

EncoderStage stage(double f, double b, int layers = 1) {
  EncoderStage e;
  e.fwd_s = f;
  e.bwd_s = b;
  e.layers = layers;
  return e;
}

// Every encoder forward of micro-batch i ends `flow` before the LLM's first stage starts i; every
// backward starts `flow` after that stage's backward of i ends; no encoder work overlaps the LLM's
// compute on its group (checked without exposed-communication gaps) or other encoder work.
void expect_dependencies(const BubbleProblem& p, const BubbleSchedule& s, bool check_overlap) {
  std::map<int, double> need, back;
  for (const ScheduleEvent& e : p.llm.events)
    if (e.stage == 0 && e.micro_batch >= 0) {
      if (e.kind == EventKind::kForward) need[e.micro_batch] = e.start_s + s.delay_s;
      if (e.kind == EventKind::kBackward) back[e.micro_batch] = e.end_s + s.delay_s;
    }
  std::map<int, std::vector<std::pair<double, double>>> busy;
  for (const OptimusEvent& e : s.events) {
    EXPECT_LE(e.start_s, e.end_s + 1e-12);
    EXPECT_GE(e.start_s, -1e-12);
    EXPECT_LE(e.end_s, s.step_time_s + 1e-9);
    if (e.kind == OptimusEventKind::kEncoderFwd) EXPECT_LE(e.end_s, need[e.micro_batch] - p.flow_s + 1e-9) << e.micro_batch;
    if (e.kind == OptimusEventKind::kEncoderBwd) EXPECT_GE(e.start_s, back[e.micro_batch] + p.flow_s - 1e-9) << e.micro_batch;
    if (e.kind != OptimusEventKind::kLlm || e.llm_kind != EventKind::kP2p) busy[e.device_group].emplace_back(e.start_s, e.end_s);
  }
  if (!check_overlap) return;
  for (auto& [g, v] : busy) {
    std::sort(v.begin(), v.end());
    for (size_t k = 1; k < v.size(); ++k) EXPECT_LE(v[k - 1].second, v[k].first + 1e-9) << "group " << g;
  }
}

// 1F1B, pp 2, m 2, f 1, b 2: group 0 runs F0 [0,1] F1 [1,2] B0 [4,6] B1 [7,9], group 1 F0 [1,2] B0
// [2,4] F1 [4,5] B1 [5,7]; each idles (pp - 1)(f + b) = 3. The encoder (one stage, fwd 0.5, bwd 1)
// has a pipeline on each group, a micro-batch each. Micro-batch 1's forward goes to group 1's
// warm-up [0.5, 1] (a bubble), micro-batch 0's before the LLM starts (the step is delayed 0.5). The
// backwards: micro-batch 0 (ready at 6, group 0) into group 0's gap [6, 7] only when fine; micro-batch
// 1 (ready at 9, group 1) after the LLM's end. Coarse: 0.5 of 3 in bubbles; fine: 1.5 of 3.
TEST(OptimusPack, HandComputedOneF1BShares) {
  const Simulation sim = llm_step(2, 2, 1, 2);
  ASSERT_DOUBLE_EQ(sim.makespan_s, 9);
  const BubbleProblem p = problem(sim, {stage(0.5, 1)});
  const BubbleSchedule coarse = pack_encoder(p, Granularity::kCoarse).value();
  const BubbleSchedule fine = pack_encoder(p, Granularity::kFine).value();
  EXPECT_DOUBLE_EQ(coarse.encoder_s, 3);
  EXPECT_NEAR(coarse.eff(), 0.5 / 3, 1e-12);
  EXPECT_NEAR(fine.eff(), 1.5 / 3, 1e-12);
  EXPECT_NEAR(coarse.delay_s, 0.5, 1e-12);
  EXPECT_NEAR(fine.delay_s, 0.5, 1e-12);
  EXPECT_NEAR(coarse.step_time_s, 10.5, 1e-12);  // 0.5 before, 9, micro-batch 1's backward after
  EXPECT_NEAR(fine.step_time_s, 10.5, 1e-12);
  expect_dependencies(p, coarse, true);
  expect_dependencies(p, fine, true);
}

// One stage (pp 1), m 2, f 1, b 2, a fifth of each forward and a tenth of each backward exposed
// communication in two gaps: 0.1 s gaps at the ends of the halves of every operation. The encoder's
// forward (0.2 s: two kernels of 0.1) of micro-batch 1 fits in the gaps of B0 before F1 starts at 3;
// its backward kernels (0.2 each) fit no gap. Fine: 0.2 of 1.2 in bubbles, delay 0.2, step 7.0;
// coarse: nothing in bubbles, both forwards before the start, step 7.2.
TEST(OptimusPack, TensorParallelGapsTakeWholeKernels) {
  const Simulation sim = llm_step(1, 2, 1, 2);
  BubbleProblem p = problem(sim, {stage(0.2, 0.4)});
  p.encoder[0].kernel_shares = {0.5, 0.5};
  p.fwd_comm_share = {0.2};
  p.bwd_comm_share = {0.1};
  p.comm_gaps = {2};
  const BubbleSchedule fine = pack_encoder(p, Granularity::kFine).value();
  const BubbleSchedule coarse = pack_encoder(p, Granularity::kCoarse).value();
  EXPECT_NEAR(fine.eff(), 0.2 / 1.2, 1e-12);
  EXPECT_NEAR(fine.delay_s, 0.2, 1e-12);
  EXPECT_NEAR(fine.step_time_s, 7.0, 1e-12);
  EXPECT_NEAR(coarse.eff(), 0, 1e-12);
  EXPECT_NEAR(coarse.step_time_s, 7.2, 1e-12);
  expect_dependencies(p, fine, false);
  expect_dependencies(p, coarse, true);
}

// A free encoder leaves the LLM's step as it was, whatever the layout.
TEST(OptimusPack, FreeEncoderGivesTheLlmStep) {
  const Simulation sim = llm_step(4, 8, 1, 2, 1.5);
  for (int pe : {1, 2, 4})
    for (int lanes : {1, 2}) {
      const BubbleProblem p = problem(sim, std::vector<EncoderStage>(static_cast<size_t>(pe), stage(0, 0, 3)), lanes);
      for (Granularity g : {Granularity::kCoarse, Granularity::kFine}) {
        const BubbleSchedule s = pack_encoder(p, g).value();
        EXPECT_EQ(s.step_time_s, sim.makespan_s) << pe << " " << lanes;
        EXPECT_EQ(s.delay_s, 0);
        EXPECT_EQ(s.eff(), 1);
      }
    }
}

// A longer pipeline with an exposed gradient sync: a small encoder fits its bubbles, so the step
// beats the encoder in the first stage; fine never packs less than coarse; Eff in [0, 1]; the
// dependencies hold for every layout.
TEST(OptimusPack, SmallEncoderBeatsTheFirstStage) {
  const Simulation sim = llm_step(4, 8, 1, 2, 5);
  StageTiming first;
  first.fwd = Seconds(0.25);
  first.bwd = Seconds(0.5);
  ScheduleSpec sp = sim.spec;
  StageTiming llm_stage;
  llm_stage.fwd = Seconds(1);
  llm_stage.bwd = Seconds(2);
  llm_stage.grad_sync = Seconds(5);
  const Simulation base = first_stage_schedule(sp, std::vector<StageTiming>(4, llm_stage), first).value();
  EXPECT_GT(base.makespan_s, sim.makespan_s + 3);
  for (int pe : {1, 2, 4}) {
    std::vector<EncoderStage> enc;
    for (int j = 0; j < pe; ++j) enc.push_back(stage(0.25 / pe, 0.5 / pe, 2));
    enc.back().p2p_s = 0;
    for (EncoderStage& e : enc) e.kernel_shares = {0.3, 0.2, 0.5};
    const BubbleProblem p = problem(sim, enc);
    const BubbleSchedule c = pack_encoder(p, Granularity::kCoarse).value();
    const BubbleSchedule f = pack_encoder(p, Granularity::kFine).value();
    for (const BubbleSchedule* s : {&c, &f}) {
      EXPECT_GE(s->eff(), 0);
      EXPECT_LE(s->eff(), 1);
      EXPECT_GE(s->step_time_s, sim.makespan_s);
      EXPECT_LT(s->step_time_s, base.makespan_s) << pe;
      expect_dependencies(p, *s, true);
    }
    EXPECT_GE(f.eff(), c.eff() - 1e-12) << pe;
    EXPECT_LE(f.step_time_s, c.step_time_s + 1e-12) << pe;
  }
}

TEST(OptimusPack, BadInputNamesTheField) {
  const Simulation sim = llm_step(4, 4, 1, 2);
  BubbleProblem p = problem(sim, std::vector<EncoderStage>(3, stage(1, 2)));
  Result<BubbleSchedule> r = pack_encoder(p, Granularity::kFine);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("pp 3 does not divide the LLM's pp 4"), std::string::npos) << r.error().message;
  p = problem(sim, {stage(-1, 2)});
  r = pack_encoder(p, Granularity::kFine);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("encoder stage 0"), std::string::npos) << r.error().message;
  p = problem(sim, {stage(1, 2)});
  p.fwd_comm_share.pop_back();
  r = pack_encoder(p, Granularity::kFine);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("one per LLM stage (4)"), std::string::npos) << r.error().message;
}

ClusterSpec cluster(const std::string& preset, int gpus) {
  ClusterOverrides o;
  o.gpus = gpus;
  if (gpus < 8) o.gpus_per_node = gpus;
  return apply_overrides(load_cluster(preset).value(), o).value();
}

// ViT-3B + GPT-11B on 8 GPUs (Optimus's small model): a layout dividing the LLM's, within the
// device's memory, and figures that hold together.
TEST(OptimusPlan, Vit3bGpt11bOnEightGpus) {
  const TaskSpec t = load_tasks(kTasks + "vit-3b-gpt-11b.json").value();
  for (int pp : {0, 4}) {
    SearchOptions opt;
    opt.top_k = 1;
    if (pp > 0) opt.pp_degrees = {pp};  // a pipelined LLM too, whose bubbles hold the encoder
    const OptimusPlan p = plan_optimus(t, cluster("h100-80gb", 8), AnalyticCostModel(), opt).value();
    EXPECT_EQ(p.encoder, "vit");
    EXPECT_EQ(p.llm, "gpt");
    EXPECT_EQ(p.batch, 16);
    const int llm_pp = p.llm_plan.train.pp;
    if (pp > 0) EXPECT_EQ(llm_pp, pp);
    EXPECT_EQ(llm_pp % p.layout.pp, 0);
    EXPECT_EQ(p.llm_mp % p.layout.tp, 0);
    EXPECT_EQ(p.layout.dp * p.layout.pp * p.layout.tp, 8);
    EXPECT_LE(p.llm_memory_gib + p.encoder_memory_gib, p.memory_budget_gib + 1e-9);
    for (const BubbleSchedule* s : {&p.coarse, &p.fine}) {
      EXPECT_GE(s->eff(), 0);
      EXPECT_LE(s->eff(), 1);
      EXPECT_GE(s->step_time_s, s->llm_step_s);
      EXPECT_GT(s->encoder_s, 0);
    }
    EXPECT_GE(p.fine.eff(), p.coarse.eff() - 1e-9);
    EXPECT_GT(p.first_stage_s, p.fine.llm_step_s);
    if (pp == 4) EXPECT_LT(p.step_time_s(), p.first_stage_s);
    const Json j = to_json(p);
    for (const char* k : {"step_time_s", "first_stage_s", "eff_coarse", "eff_fine", "encoder", "llm", "memory"})
      EXPECT_TRUE(j.contains(k)) << k;
    EXPECT_EQ(j["encoder"]["pp"].get<int>(), p.layout.pp);
  }
}

TEST(OptimusPlan, ErrorsNameTheModuleAndNumbers) {
  const ClusterSpec c = cluster("h100-80gb", 8);
  const AnalyticCostModel cm;
  SearchOptions opt;
  opt.top_k = 1;
  // Encoders only (contrastive pairs): no encoder feeds an LLM.
  const TaskSpec clip = load_tasks(kTasks + "clip-4-tasks.json").value();
  Result<OptimusPlan> r = plan_optimus(clip, c, cm, opt);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("no task runs an encoder module flowing into a decoder module"), std::string::npos)
      << r.error().message;
  const TaskSpec t = load_tasks(kTasks + "vit-3b-gpt-11b.json").value();
  opt.pp_degrees = {4};
  OptimusOptions o;
  o.encoder_pp = 3;
  r = plan_optimus(t, c, cm, opt, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("encoder \"vit\": pp 3 does not divide the LLM \"gpt\"'s pp 4"), std::string::npos)
      << r.error().message;
  o = {};
  o.encoder_tp = 4;  // wider than the LLM's layers on its 2-GPU stages
  r = plan_optimus(t, c, cm, opt, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("encoder \"vit\": tp 4 does not divide the LLM \"gpt\"'s tp "), std::string::npos)
      << r.error().message;
}

// A task of three modules with an encoder feeding an LLM: Optimus's schedule here takes two.
TEST(OptimusPlan, OneEncoderAndOneLlmPerTask) {
  const Json j = Json::parse(R"({"name": "three", "modules": [
      {"name": "vit", "kind": "encoder", "tokens": 16, "layers": 2, "hidden": 64, "heads": 4},
      {"name": "audio", "kind": "encoder", "tokens": 16, "layers": 2, "hidden": 64, "heads": 4},
      {"name": "lm", "kind": "decoder", "tokens": 32, "layers": 2, "hidden": 64, "heads": 4, "vocab": 128}],
    "flows": [{"from": "vit", "to": "lm"}, {"from": "audio", "to": "lm"}],
    "tasks": [{"name": "av", "modules": ["vit", "audio", "lm"], "batch": 8}]})");
  const TaskSpec t = tasks_from_json(j).value();
  const Result<EncoderLlm> r = find_encoder_llm(t);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("task \"av\" runs 3 modules"), std::string::npos) << r.error().message;
}

}  // namespace
}  // namespace weft::multitask
