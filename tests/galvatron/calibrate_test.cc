// Galvatron's profiles in weft's own profile formats: the measurements land where they belong.
#include <gtest/gtest.h>

#include <cmath>

#include "test_util.h"
#include "weft/galvatron/calibrate.h"
#include "weft/galvatron/setup.h"

namespace weft::galvatron {
namespace {

using testing::ok;

const CollectiveSample* at_size(const CollectiveEntry& e, double bytes) {
  for (const auto& s : e.samples)
    if (s.bytes == bytes) return &s;
  return nullptr;
}

TEST(GalvatronCalibration, HardwareTablesAndBandwidths) {
  const ModelSpec model = ok(to_model_spec(ok(read_model_yaml(testing::reference_dir() + "/llama2-7b.yaml"))));
  const ClusterSpec two = testing::cluster(2, 36);
  const Profiles p = ok(load_profiles_for(testing::reference_dir(), "llama2-7b", two));
  const weft::HardwareProfile hw = ok(to_hardware_profile(p, two));
  EXPECT_TRUE(validate(hw).ok());
  // The sp_time all-reduce table of 8 ranks inside a node: 1024 MB in 8.1409 ms.
  const CollectiveEntry* ar8 = hw.find(Collective::kAllReduce, 8, Placement::kIntraNode);
  ASSERT_NE(ar8, nullptr);
  const CollectiveSample* s = at_size(*ar8, 1024.0 * 1048576);
  ASSERT_NE(s, nullptr);
  EXPECT_NEAR(s->seconds, 8.1409e-3, 1e-12);
  // All-gather at half the all-reduce time.
  const CollectiveEntry* ag8 = hw.find(Collective::kAllGather, 8, Placement::kIntraNode);
  ASSERT_NE(ag8, nullptr);
  EXPECT_NEAR(at_size(*ag8, 1024.0 * 1048576)->seconds, 8.1409e-3 / 2, 1e-12);
  // "allreduce_size_8_consec_0" on 2 x 8: ranks strided by 2, four per node, 20.7724 MB/ms bus
  // bandwidth: 1 GiB takes 2*7/8 * 1024 MB / 20.7724 MB/ms.
  const CollectiveEntry* x8 = hw.find(Collective::kAllReduce, 8, Placement::kInterNode, 4);
  ASSERT_NE(x8, nullptr);
  EXPECT_EQ(x8->ranks_per_node, 4);
  EXPECT_NEAR(at_size(*x8, 1024.0 * 1048576)->seconds, 2.0 * 7 / 8 * 1024 / 20.7724 * 1e-3, 1e-12);
  // The whole machine: 16 ranks, 8 per node, 44.682 MB/ms.
  const CollectiveEntry* x16 = hw.find(Collective::kAllReduce, 16, Placement::kInterNode, 8);
  ASSERT_NE(x16, nullptr);
  EXPECT_NEAR(at_size(*x16, 64.0 * 1048576)->seconds, 2.0 * 15 / 16 * 64 / 44.682 * 1e-3, 1e-12);
  // Two nodes: the pipeline send/recv crosses them at pp_size_2 = 7.65998 MB/ms.
  const CollectiveEntry* p2p = hw.find(Collective::kSendRecv, 2, Placement::kInterNode);
  ASSERT_NE(p2p, nullptr);
  EXPECT_NEAR(at_size(*p2p, 256.0 * 1048576)->seconds, 256 / 7.65998 * 1e-3, 1e-12);
  EXPECT_NEAR(hw.overlap.compute_slowdown, 1.125552573612729, 1e-12);
  (void)model;
}

TEST(GalvatronCalibration, ModelProfileFromMeasurements) {
  const ModelSpec model = ok(to_model_spec(ok(read_model_yaml(testing::reference_dir() + "/llama2-7b.yaml"))));
  const ClusterSpec one = testing::cluster(1, 80);
  const Profiles p = ok(load_profiles_for(testing::reference_dir(), "llama2-7b", one));
  const ModelProfile mp = ok(to_model_profile(p, model, one));
  EXPECT_TRUE(validate(mp).ok());
  ASSERT_EQ(mp.layers.size(), 1u);
  const auto& samples = mp.layers[0].samples;
  auto find = [&](int tp, Recompute rc, int b) -> const PhaseSample* {
    for (const auto& s : samples)
      if (s.tp == tp && s.recompute == rc && s.micro_batch == b) return &s;
    return nullptr;
  };
  // tp 1, batch 8: 8 x 3.93697 ms forward, twice that backward, 8 x 514.56 MB of activations.
  const PhaseSample* s = find(1, Recompute::kNone, 8);
  ASSERT_NE(s, nullptr);
  EXPECT_NEAR(s->forward_s, 8 * 3.9369729995727534e-3, 1e-12);
  EXPECT_NEAR(s->backward_s, 2 * s->forward_s, 1e-15);
  EXPECT_NEAR(s->activation_bytes, 8 * 514.5634765625 * 1048576, 1e-3);
  EXPECT_EQ(s->seq, 2048);
  // tp 2: the measured activation, and a forward faster than tp 1 but not more than 2x.
  const PhaseSample* s2 = find(2, Recompute::kNone, 8);
  ASSERT_NE(s2, nullptr);
  EXPECT_NEAR(s2->activation_bytes, 8 * 273.28173828125 * 1048576, 1e-3);
  EXPECT_LT(s2->forward_s, s->forward_s);
  EXPECT_GE(s2->forward_s, s->forward_s / 2 * 0.999);
  // Full recompute keeps the 32 MB/sample checkpoint, split over tp, and re-runs the forward.
  const PhaseSample* f2 = find(2, Recompute::kFull, 4);
  ASSERT_NE(f2, nullptr);
  EXPECT_NEAR(f2->activation_bytes, 4 * 32.0 * 1048576 / 2, 1e-3);
  EXPECT_NEAR(f2->backward_s, 3 * f2->forward_s, 1e-15);
  // Embedding + head share the measured "other" time.
  ASSERT_FALSE(mp.embedding.empty());
  ASSERT_EQ(mp.embedding.size(), mp.head.size());
  for (size_t i = 0; i < mp.head.size(); ++i) {
    if (mp.head[i].tp != 1 || mp.head[i].micro_batch != 1) continue;
    EXPECT_NEAR(mp.embedding[i].forward_s + mp.head[i].forward_s, 6.286115455627439e-3, 1e-12);
    EXPECT_NEAR(mp.head[i].activation_bytes, 717.560302734375 * 1048576, 1e-3);
  }
}

TEST(GalvatronCalibration, BuildsWeftsCalibratedModel) {
  const ModelSpec model = ok(to_model_spec(ok(read_model_yaml(testing::reference_dir() + "/llama2-7b.yaml"))));
  const ClusterSpec one = testing::cluster(1, 36);
  const Profiles p = ok(load_profiles_for(testing::reference_dir(), "llama2-7b", one));
  const CalibratedFromGalvatron c = ok(make_calibrated_model(p, model, one));
  EXPECT_EQ(c.model->name(), "weft");
  EXPECT_NE(c.model->source(), "analytic");
  EXPECT_EQ(c.cluster.total_gpus(), 8);
  EXPECT_DOUBLE_EQ(c.cluster.gpu.memory_gib, 36);
}

}  // namespace
}  // namespace weft::galvatron
