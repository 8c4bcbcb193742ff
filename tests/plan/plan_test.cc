#include <gtest/gtest.h>

#include <filesystem>

#include "test_plans.h"

namespace weft {
namespace {

using testing::message_of;
using testing::uniform_plan;

TEST(PlanJson, RoundTripsExactly) {
  LayerStrategy s{.tp = 2, .sp = true, .ulysses = 1, .cp = 1, .dp = 2, .zero = 1, .recompute = Recompute::kSelective};
  Plan p = uniform_plan(s, 2);
  p.stages[1].layers[2].recompute = Recompute::kFull;  // layer-wise difference
  p.predicted.step_time_s = 1.25;
  p.predicted.cost_model = "weft";
  p.stages[0].predicted.memory_gib = 30.5;
  ASSERT_TRUE(validate(p).ok()) << validate(p).error().message;
  auto back = plan_from_json(to_json(p));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back.value(), p);
  EXPECT_FALSE(back->uniform());
  EXPECT_EQ(back->layer_strategy(6).recompute, Recompute::kFull);
}

// A uniform plan puts its expert degree on the MoE layers only: dense layers with ep = 1 beside MoE
// layers with ep = 4 are one strategy (carrying ep 4); MoE layers with different degrees are not.
TEST(Plan, UniformStrategyCarriesTheMoeExpertDegree) {
  Plan p = uniform_plan(LayerStrategy{.dp = 8}, 1);
  EXPECT_EQ(p.uniform_strategy(), LayerStrategy{.dp = 8});
  p.model.groups[0].count = 2;  // two dense layers, then six MoE layers
  LayerGroup moe = p.model.groups[0];
  moe.count = 6;
  moe.shape.moe = MoeSpec{8, 2, 1408, 0};
  p.model.groups.push_back(moe);
  for (int i = 2; i < 8; ++i) p.stages[0].layers[i].ep = 4;
  ASSERT_TRUE(p.uniform());
  EXPECT_EQ(p.uniform_strategy()->ep, 4);
  EXPECT_EQ(p.uniform_strategy()->dp, 8);
  p.stages[0].layers[7].ep = 2;
  EXPECT_FALSE(p.uniform());
  p.stages[0].layers[7].ep = 4;
  p.stages[0].layers[0].zero = 1;
  EXPECT_FALSE(p.uniform());
}

TEST(PlanJson, FileRoundTrip) {
  Plan p = uniform_plan(LayerStrategy{.dp = 8}, 1);
  const std::string path = (std::filesystem::temp_directory_path() / "weft_plan_test.json").string();
  ASSERT_TRUE(write_plan_file(path, p).ok());
  auto back = read_plan_file(path);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back.value(), p);
  EXPECT_TRUE(back->uniform());
  std::filesystem::remove(path);
}

TEST(PlanJson, WritesHashesAndStageDevices) {
  Plan p = uniform_plan(LayerStrategy{.tp = 2, .dp = 2}, 2);
  Json j = to_json(p);
  EXPECT_EQ(j["format_version"], 1);
  EXPECT_EQ(j["model_hash"], json_hash(to_json(p.model)));
  EXPECT_EQ(j["stages"][1]["first_rank"], 4);
  EXPECT_EQ(j["stages"][1]["num_ranks"], 4);
  EXPECT_EQ(j["stages"][1]["first_layer"], 4);
}

TEST(PlanJson, RejectsOtherVersion) {
  Json j = to_json(uniform_plan(LayerStrategy{.dp = 8}, 1));
  j["format_version"] = 2;
  auto r = plan_from_json(j);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("format_version: unsupported version 2"), std::string::npos);
}

TEST(PlanJson, RejectsBadEnumAndUnknownKey) {
  Json j = to_json(uniform_plan(LayerStrategy{.dp = 8}, 1));
  j["stages"][0]["layers"][3]["recompute"] = "some";
  auto r = plan_from_json(j);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("plan.stages[0].layers[3].recompute"), std::string::npos) << r.error().message;
  Json k = to_json(uniform_plan(LayerStrategy{.dp = 8}, 1));
  k["train"]["micro_batch"] = 4;
  auto r2 = plan_from_json(k);
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.error().message.find("plan.train.micro_batch: unknown field"), std::string::npos);
}

// train.optimizer (Megatron-LM's precision-aware optimizer): written only where a state is not
// fp32, read back exactly; refused with an fp32 compute dtype, an unknown dtype or fp8 gradients,
// naming the field; the runtime refuses it.
TEST(PlanJson, OptimizerStatePrecision) {
  Plan p = uniform_plan(LayerStrategy{.dp = 8, .zero = 1}, 1);
  EXPECT_FALSE(to_json(p).at("train").contains("optimizer"));
  p.train.optimizer.exp_avg = DType::kBf16;
  p.train.optimizer.exp_avg_sq = DType::kBf16;
  ASSERT_TRUE(validate(p).ok()) << validate(p).error().message;
  const Json j = to_json(p);
  EXPECT_EQ(j.at("train").at("optimizer"), (Json{{"exp_avg", "bf16"}, {"exp_avg_sq", "bf16"}, {"main_grads", "fp32"}}));
  auto back = plan_from_json(j);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back.value(), p);
  Json k = j;
  k["train"]["optimizer"]["main_grads"] = "fp8";
  auto r = plan_from_json(k);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("plan.train.optimizer.main_grads: \"fp8\": expected one of fp32, bf16"),
            std::string::npos)
      << r.error().message;
  k["train"]["optimizer"]["main_grads"] = "fp33";
  EXPECT_FALSE(plan_from_json(k).ok());
  Plan fp32 = p;
  fp32.train.dtype = DType::kFp32;
  EXPECT_NE(message_of(validate(fp32)).find("train.optimizer: bf16 / bf16 moments and fp32 gradients under train.dtype "
                                            "fp32"),
            std::string::npos)
      << message_of(validate(fp32));
}

// train.rounds: separate pipeline schedules per step, written only when more than one, dividing
// the micro-batches; the runtime refuses them.
TEST(PlanJson, PipelineRounds) {
  Plan p = uniform_plan(LayerStrategy{.dp = 4}, 2);
  EXPECT_FALSE(to_json(p).at("train").contains("rounds"));
  p.train.rounds = 4;
  ASSERT_TRUE(validate(p).ok()) << validate(p).error().message;
  EXPECT_EQ(p.train.schedule_micro_batches(), 2);
  const Json j = to_json(p);
  EXPECT_EQ(j.at("train").at("rounds"), 4);
  auto back = plan_from_json(j);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back.value(), p);
  p.train.rounds = 3;
  EXPECT_EQ(message_of(validate(p)), "train.rounds: 3 pipeline schedules do not divide the 8 micro-batches of a step");
}

// train.moe_imbalance: written only when not 1, read back exactly; at least 1, and only for a model
// with MoE layers; the busiest ep rank's share is capped at ep (every copy on one rank) and is 1
// at ep 1.
TEST(PlanJson, MoeImbalance) {
  Plan p = uniform_plan(LayerStrategy{.dp = 8}, 1);
  p.train.moe_imbalance = 1.5;
  EXPECT_EQ(message_of(validate(p)), "train.moe_imbalance: 1.5 for a model without MoE layers (" + p.model.name + ")");
  p.model.groups[0].count = 2;
  LayerGroup moe = p.model.groups[0];
  moe.count = 6;
  moe.shape.moe = MoeSpec{8, 2, 1408, 0};
  p.model.groups.push_back(moe);
  for (int i = 2; i < 8; ++i) p.stages[0].layers[i].ep = 4;
  ASSERT_TRUE(validate(p).ok()) << validate(p).error().message;
  const Json j = to_json(p);
  EXPECT_EQ(j.at("train").at("moe_imbalance"), 1.5);
  auto back = plan_from_json(j);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back.value(), p);
  EXPECT_EQ(p.train.busiest_expert_rank(4), 1.5);
  EXPECT_EQ(p.train.busiest_expert_rank(1), 1.0);
  p.train.moe_imbalance = 6;
  EXPECT_EQ(p.train.busiest_expert_rank(4), 4.0);
  p.train.moe_imbalance = 0.8;
  EXPECT_EQ(message_of(validate(p)),
            "train.moe_imbalance: the busiest expert-parallel rank's routed copies over the mean, at least 1, got 0.8");
  p.train.moe_imbalance = 1;
  EXPECT_FALSE(to_json(p).at("train").contains("moe_imbalance"));
}

// train.moe_dispatcher and train.moe_a2a_overlap: written only when set, read back exactly; for a
// model with MoE layers only, the overlap with pp > 1 only interleaved (as Megatron-LM's combined
// 1F1B), an unknown dispatcher named with the ones there are.
TEST(PlanJson, MoeDispatcherAndAllToAllOverlap) {
  Plan p = uniform_plan(LayerStrategy{.dp = 8}, 1);
  p.train.moe_dispatcher = MoeDispatcher::kDeepEp;
  EXPECT_EQ(message_of(validate(p)),
            "train.moe_dispatcher: deepep needs a mixture-of-experts model (" + p.model.name + " has none)");
  p.train.moe_dispatcher = MoeDispatcher::kAllToAll;
  p.train.moe_a2a_overlap = true;
  EXPECT_EQ(message_of(validate(p)), "train.moe_a2a_overlap: needs a mixture-of-experts model (" + p.model.name + " has none)");
  p.model.groups[0].shape.moe = MoeSpec{8, 2, 1408, 0};
  for (auto& l : p.stages[0].layers) l.ep = 4;
  p.train.moe_dispatcher = MoeDispatcher::kHybridEp;
  ASSERT_TRUE(validate(p).ok()) << validate(p).error().message;
  Json j = to_json(p);
  EXPECT_EQ(j.at("train").at("moe_dispatcher"), "hybridep");
  EXPECT_EQ(j.at("train").at("moe_a2a_overlap"), true);
  auto back = plan_from_json(j);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back.value(), p);
  j["train"]["moe_dispatcher"] = "nccl";
  auto wrong = plan_from_json(j);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.error().message.find("train.moe_dispatcher"), std::string::npos) << wrong.error().message;
  EXPECT_NE(wrong.error().message.find("hybridep"), std::string::npos) << wrong.error().message;
  p.train.pp = 2;
  p.train.vp = 1;
  EXPECT_NE(message_of(validate(p)).find("train.moe_a2a_overlap: with pp 2 it needs an interleaved schedule (vp > 1"),
            std::string::npos)
      << message_of(validate(p));
  Plan plain = uniform_plan(LayerStrategy{.dp = 8}, 1);
  EXPECT_FALSE(to_json(plain).at("train").contains("moe_dispatcher"));
  EXPECT_FALSE(to_json(plain).at("train").contains("moe_a2a_overlap"));
}

// train.varlen: written only when on, read back exactly; a variable-length plan has one stage,
// Ulysses and cp 1 and power-of-two group sizes, and its batch (documents) need not divide by dp.
TEST(PlanJson, VariableLengthSettings) {
  Plan p = uniform_plan(LayerStrategy{.dp = 8, .zero = 3}, 1, 1);
  EXPECT_FALSE(to_json(p).at("train").contains("varlen"));
  p.train.varlen = true;
  p.train.min_group = 2;
  p.train.max_group = 8;
  p.train.global_batch = 13;
  ASSERT_TRUE(validate(p).ok()) << validate(p).error().message;
  const Json j = to_json(p);
  EXPECT_EQ(j.at("train").at("varlen"), (Json{{"min_group", 2}, {"max_group", 8}}));
  auto back = plan_from_json(j);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back.value(), p);
  Json k = j;
  k["train"]["varlen"]["groups"] = 3;
  EXPECT_FALSE(plan_from_json(k).ok());
  Plan bad = p;
  bad.train.max_group = 6;
  ASSERT_FALSE(validate(bad).ok());
  EXPECT_NE(validate(bad).error().message.find("max_group 6"), std::string::npos);
  bad = uniform_plan(LayerStrategy{.ulysses = 2, .dp = 4}, 1, 1);
  bad.train.varlen = true;
  ASSERT_FALSE(validate(bad).ok());
  EXPECT_NE(validate(bad).error().message.find("ulysses 2 and cp 1 in a variable-length plan"), std::string::npos)
      << validate(bad).error().message;
  bad = uniform_plan(LayerStrategy{.dp = 8}, 2, 2);
  bad.train.varlen = true;
  ASSERT_FALSE(validate(bad).ok());
  EXPECT_NE(validate(bad).error().message.find("must be 1"), std::string::npos) << validate(bad).error().message;
  bad.train.micro_batches = 1;
  ASSERT_FALSE(validate(bad).ok());
  EXPECT_NE(validate(bad).error().message.find("one pipeline stage"), std::string::npos) << validate(bad).error().message;
}

// train.dp_shares: uneven data-parallel shares, written only when given, checked against dp, the
// micro-batch and one activation layout for every layer.
TEST(PlanJson, UnevenDataParallelShares) {
  Plan p = uniform_plan(LayerStrategy{.dp = 8}, 1, 8, 128);  // 16 samples per micro-batch
  EXPECT_FALSE(to_json(p).at("train").contains("dp_shares"));
  p.train.dp_shares = {1, 1, 2, 2, 2, 2, 3, 3};
  ASSERT_TRUE(validate(p).ok()) << validate(p).error().message;
  auto back = plan_from_json(to_json(p));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back.value(), p);
  Json k = to_json(p);
  k["train"]["dp_shares"] = "uneven";
  EXPECT_FALSE(plan_from_json(k).ok());
  Plan bad = p;
  bad.train.dp_shares = {1, 1, 2, 2, 2, 2, 3, 4};
  EXPECT_NE(message_of(validate(bad)).find("train.dp_shares: sum to 17 but a micro-batch holds 16 samples"),
            std::string::npos)
      << message_of(validate(bad));
  bad.train.dp_shares = {2, 2, 2, 2, 2, 2, 4};
  EXPECT_NE(message_of(validate(bad)).find("8 replicas but train.dp_shares lists 7 shares"), std::string::npos)
      << message_of(validate(bad));
  bad.train.dp_shares = {-1, 2, 2, 2, 2, 2, 3, 4};
  EXPECT_NE(message_of(validate(bad)).find("train.dp_shares[0]: must be >= 0, got -1"), std::string::npos)
      << message_of(validate(bad));
  // A share of 0 suspends a replica (it computes nothing, still reduces gradients and steps).
  Plan suspended = p;
  suspended.train.dp_shares = {0, 2, 2, 2, 2, 2, 3, 3};
  EXPECT_TRUE(validate(suspended).ok()) << message_of(validate(suspended));
  bad = p;
  bad.stages[0].layers[1] = LayerStrategy{.tp = 2, .dp = 4};
  bad.train.dp_shares = {4, 4, 4, 4};
  EXPECT_NE(message_of(validate(bad)).find("every layer must lay out its activations as the embedding does"),
            std::string::npos)
      << message_of(validate(bad));
}

// train.dp_micro_batches: micro-batches per replica, written only when given, needing shares, and
// checked against the replicas, the plan's micro-batches and the global batch.
TEST(PlanJson, MicroBatchesPerReplica) {
  Plan p = uniform_plan(LayerStrategy{.dp = 8}, 1, 8, 64);  // one sample per replica per micro-batch
  EXPECT_FALSE(to_json(p).at("train").contains("dp_micro_batches"));
  p.train.dp_shares = {1, 1, 1, 1, 1, 1, 1, 1};
  p.train.dp_micro_batches = {9, 5, 9, 9, 8, 8, 8, 8};  // 64 samples; 9 micro-batches, which do not divide 64
  p.train.micro_batches = 9;
  ASSERT_TRUE(validate(p).ok()) << validate(p).error().message;
  auto back = plan_from_json(to_json(p));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back.value(), p);
  EXPECT_EQ(shares_label(p.train), "1:1:1:1:1:1:1:1 x 9:5:9:9:8:8:8:8 micro-batches");
  // Where each micro-batch's samples lie: replica 1 passes through micro-batches 5 to 8 empty.
  EXPECT_EQ(p.train.replica_rows(8, 1, 4), 1);
  EXPECT_EQ(p.train.replica_rows(8, 1, 5), 0);
  EXPECT_EQ(p.train.micro_batch_rows(8, 5), 7);
  EXPECT_EQ(p.train.micro_batch_rows(8, 8), 3);
  EXPECT_EQ(p.train.micro_batch_offset(8, 6), 5 * 8 + 7);
  EXPECT_EQ(p.train.replica_samples(8, 1), 5);
  auto msg = [](Plan q) { return message_of(validate(q)); };
  Plan bad = p;
  bad.train.dp_micro_batches = {9, 5, 9, 9, 8, 8, 8};
  EXPECT_NE(msg(bad).find("train.dp_micro_batches: 7 counts for 8 replicas"), std::string::npos) << msg(bad);
  bad.train.dp_micro_batches = {9, 5, 9, 9, 8, 8, 8, 7};
  EXPECT_NE(msg(bad).find("shares x counts sum to 63 samples but the global batch is 64"), std::string::npos)
      << msg(bad);
  bad.train.dp_micro_batches = {10, 4, 9, 9, 8, 8, 8, 8};
  EXPECT_NE(msg(bad).find("train.dp_micro_batches[0]: must be 0..9 (train.micro_batches), got 10"), std::string::npos)
      << msg(bad);
  bad = p;
  bad.train.micro_batches = 10;
  EXPECT_NE(msg(bad).find("train.micro_batches: 10 but the most any replica runs (train.dp_micro_batches) is 9"),
            std::string::npos)
      << msg(bad);
  bad = p;
  bad.train.dp_shares.clear();
  EXPECT_NE(msg(bad).find("train.dp_micro_batches: needs train.dp_shares"), std::string::npos) << msg(bad);
}

// train.stage_dp_shares: shares per pipeline device group (Metis's split inside each stage),
// written only when given, one list per group, each summing to the micro-batch, alone (not with
// dp_shares or counts) and with one activation layout.
TEST(PlanJson, SharesPerPipelineGroup) {
  Plan p = uniform_plan(LayerStrategy{.dp = 4}, 2, 8, 128);  // 16 samples per micro-batch, 2 groups
  EXPECT_FALSE(to_json(p).at("train").contains("stage_dp_shares"));
  p.train.stage_dp_shares = {{2, 2, 6, 6}, {4, 4, 4, 4}};
  ASSERT_TRUE(validate(p).ok()) << validate(p).error().message;
  auto back = plan_from_json(to_json(p));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back.value(), p);
  EXPECT_EQ(shares_label(p.train), "2:2:6:6 | 4:4:4:4");
  EXPECT_EQ(p.train.replica_rows(4, 2, 3, 0), 6);
  EXPECT_EQ(p.train.replica_rows(4, 2, 3, 1), 4);
  EXPECT_EQ(p.train.replica_samples(4, 0, 0), 16);
  EXPECT_EQ(p.train.replica_samples(4, 0, 1), 32);
  auto jmsg = [](const Json& j) {
    auto r = plan_from_json(j);
    return r.ok() ? std::string("OK") : r.error().message;
  };
  Json k = to_json(p);
  k["train"]["stage_dp_shares"][1][2] = "four";
  EXPECT_NE(jmsg(k).find("train.stage_dp_shares[1][2]: expected an integer"), std::string::npos)
      << jmsg(k);
  k["train"]["stage_dp_shares"] = Json::array({4, 4, 4, 4});
  EXPECT_NE(jmsg(k).find("train.stage_dp_shares[0]: expected an array"), std::string::npos)
      << jmsg(k);
  auto msg = [](Plan q) { return message_of(validate(q)); };
  Plan bad = p;
  bad.train.stage_dp_shares = {{2, 2, 6, 6}, {4, 4, 4, 5}};
  EXPECT_NE(msg(bad).find("train.stage_dp_shares[1]: sum to 17 but a micro-batch holds 16 samples"), std::string::npos)
      << msg(bad);
  bad.train.stage_dp_shares = {{2, 2, 6, 6}};
  EXPECT_NE(msg(bad).find("train.stage_dp_shares: 1 lists for 2 pipeline device groups"), std::string::npos) << msg(bad);
  bad.train.stage_dp_shares = {{2, 2, 6, 6}, {8, 8}};
  EXPECT_NE(msg(bad).find("4 replicas but train.stage_dp_shares[1] lists 2 shares"), std::string::npos) << msg(bad);
  bad = p;
  bad.train.dp_shares = {4, 4, 4, 4};
  EXPECT_NE(msg(bad).find("train.stage_dp_shares: replaces train.dp_shares"), std::string::npos) << msg(bad);
  bad = p;
  bad.stages[1].layers[0] = LayerStrategy{.tp = 2, .dp = 2};
  EXPECT_NE(msg(bad).find("with train.stage_dp_shares every layer must lay out its activations as the embedding"),
            std::string::npos)
      << msg(bad);
  Plan one = uniform_plan(LayerStrategy{.dp = 8}, 1, 8, 128);
  one.train.stage_dp_shares = {{2, 2, 2, 2, 2, 2, 2, 2}};
  EXPECT_NE(msg(one).find("train.stage_dp_shares: per pipeline device group, but train.pp is 1"), std::string::npos)
      << msg(one);
}

TEST(Strategy, Labels) {
  EXPECT_EQ(label(LayerStrategy{.tp = 4, .sp = true, .dp = 2, .zero = 1}), "tp4+sp dp2 z1");
  EXPECT_EQ(label(LayerStrategy{.ulysses = 2, .cp = 2, .dp = 2, .recompute = Recompute::kFull}),
            "uly2 cp2 dp2 rc=full");
  EXPECT_EQ(label(LayerStrategy{}), "dp1");
}

}  // namespace
}  // namespace weft
