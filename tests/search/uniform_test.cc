// make_uniform_plan: even stages (remainder on the last stages), ep on MoE layers only, errors that
// name the field and the numbers.
#include <gtest/gtest.h>

#include "test_util.h"

namespace weft {
namespace {

TEST(Uniform, EvenStageSizesPutTheRemainderLast) {
  EXPECT_EQ(even_stage_sizes(10, 4), (std::vector<int>{2, 2, 3, 3}));
  EXPECT_EQ(even_stage_sizes(32, 4), (std::vector<int>{8, 8, 8, 8}));
  EXPECT_EQ(even_stage_sizes(5, 5), (std::vector<int>{1, 1, 1, 1, 1}));
  EXPECT_EQ(even_stage_sizes(7, 1), (std::vector<int>{7}));
}

TEST(Uniform, EmbeddingFollowsTheLayer) {
  const LayerStrategy s{.tp = 4, .sp = true, .dp = 2, .zero = 2, .recompute = Recompute::kFull, .ep = 2};
  const LayerStrategy e = embedding_for(s);
  EXPECT_EQ(e.tp, 4);
  EXPECT_TRUE(e.sp);
  EXPECT_EQ(e.dp, 2);
  EXPECT_EQ(e.zero, 2);
  EXPECT_EQ(e.ep, 1);
  EXPECT_EQ(e.recompute, Recompute::kNone);
}

TEST(Uniform, BuildsAValidPlan) {
  const ModelSpec m = testing::small_model({{10, testing::dense_shape(2048, 16, 16)}});
  const ClusterSpec c = testing::small_cluster(16, 8);
  LayerStrategy s;
  s.tp = 2;
  s.sp = true;
  s.dp = 2;
  s.zero = 1;
  TrainSettings t{2048, 64, 8, 4, 1, Schedule::k1F1B, DType::kBf16};
  auto p = make_uniform_plan(m, c, t, s, embedding_for(s));
  ASSERT_TRUE(p.ok()) << p.error().message;
  ASSERT_EQ(p->stages.size(), 4u);
  EXPECT_EQ(p->stages[0].first_layer, 0);
  EXPECT_EQ(p->stages[2].first_layer, 4);
  EXPECT_EQ(p->stages[3].num_layers(), 3);
  EXPECT_TRUE(p->uniform());
  EXPECT_EQ(p->layer_strategy(9), s);
  // Interleaved: pp*vp stages.
  t.schedule = Schedule::kInterleaved;
  t.vp = 2;
  t.pp = 2;
  s.dp = 4;
  auto q = make_uniform_plan(m, c, t, s, embedding_for(s));
  ASSERT_TRUE(q.ok()) << q.error().message;
  EXPECT_EQ(q->stages.size(), 4u);
}

TEST(Uniform, ExpertDegreeAppliesToMoeLayersOnly) {
  LayerShape moe = testing::dense_shape(2048, 16, 16);
  moe.moe.experts = 8;
  moe.moe.top_k = 2;
  moe.moe.expert_ffn = 2048;
  const ModelSpec m = testing::small_model({{2, testing::dense_shape(2048, 16, 16)}, {2, moe}});
  LayerStrategy s;
  s.dp = 8;
  s.ep = 4;
  TrainSettings t{2048, 64, 8, 1, 1, Schedule::k1F1B, DType::kBf16};
  auto p = make_uniform_plan(m, testing::small_cluster(8, 8), t, s, embedding_for(s));
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->layer_strategy(0).ep, 1);
  EXPECT_EQ(p->layer_strategy(3).ep, 4);
}

TEST(Uniform, ErrorsNameTheFieldAndNumbers) {
  const ModelSpec m = testing::small_model({{4, testing::dense_shape(2048, 32, 32)}});
  const ClusterSpec c = testing::small_cluster(6, 6);
  LayerStrategy s;
  s.tp = 3;
  s.dp = 2;
  TrainSettings t{2048, 64, 8, 1, 1, Schedule::k1F1B, DType::kBf16};
  auto p = make_uniform_plan(m, c, t, s, embedding_for(s));
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().kind, ErrorKind::kBadInput);
  EXPECT_NE(p.error().message.find("3 does not divide 32 attention heads"), std::string::npos) << p.error().message;
  // More stages than layers.
  s.tp = 1;
  s.dp = 1;
  t.pp = 6;
  t.micro_batches = 8;
  auto q = make_uniform_plan(m, c, t, s, embedding_for(s));
  ASSERT_FALSE(q.ok());
  EXPECT_NE(q.error().message.find("6 pipeline stages for only 4 layers"), std::string::npos) << q.error().message;
  // Devices that do not multiply to the stage size.
  t.pp = 1;
  s.dp = 4;
  auto r = make_uniform_plan(m, c, t, s, embedding_for(s));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("= 4 but each pipeline stage has 6 devices"), std::string::npos)
      << r.error().message;
}

}  // namespace
}  // namespace weft
