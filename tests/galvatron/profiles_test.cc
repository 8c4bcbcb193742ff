#include <gtest/gtest.h>

#include "test_util.h"

namespace weft::galvatron {
namespace {

using testing::ok;

// A tiny, self-consistent profile folder for model "toy".
std::string toy_dir(const std::string& name) {
  const std::string d = testing::temp_dir(name);
  // Raw forward times of a 2- and 4-layer model at batch 1 and 2; per layer = (T4-T2)/b/2,
  // other = (T2 - 2*b*per)/b.
  testing::write(d + "/computation_profiling_bf16_toy_all.json",
                 R"({"layernum[2]_bsz1_seq128": 10.0, "layernum[4]_bsz1_seq128": 16.0,
                     "layernum[2]_bsz2_seq128": 18.0, "layernum[4]_bsz2_seq128": 28.0})");
  testing::write(d + "/memory_profiling_bf16_toy_all.json", R"({
    "layertype_0_sp": {"128": {"parameter_size": 10.0,
        "tp_activation_per_bsz_dict": {"1": 8.0, "2": 4.0, "checkpoint": 1.0}}},
    "other_memory_pp_off_sp": {"128": {"model_states": {"1": 40.0, "2": 20.0}, "activation": {"1": 6.0, "2": 3.0}}},
    "other_memory_pp_on_first_sp": {"128": {"model_states": {"1": 20.0, "2": 10.0}, "activation": {"1": 2.0, "2": 1.0}}},
    "other_memory_pp_on_last_sp": {"128": {"model_states": {"1": 20.0, "2": 10.0}, "activation": {"1": 4.0, "2": 2.0}}}})");
  testing::write(d + "/allreduce_bandwidth_1nodes_2gpus_per_node.json",
                 R"({"allreduce_size_2_consec_1": 100.0, "allreduce_size_2_consec_0": 50.0})");
  testing::write(d + "/p2p_bandwidth_1nodes_2gpus_per_node.json", R"({"pp_size_2": 80.0})");
  testing::write(d + "/overlap_coefficient.json", R"({"overlap_coe": 1.2})");
  // An exact line: t = 0.01 * MB + 0.05.
  testing::write(d + "/sp_time_1nodes_2gpus_per_node.json",
                 R"({"allreduce_size_2_1MB_time": 0.06, "allreduce_size_2_2MB_time": 0.07,
                     "allreduce_size_2_4MB_time": 0.09, "all2all_size_2_1MB_time": 0.5,
                     "all2all_size_2_3MB_time": 0.5})");
  return d;
}

TEST(GalvatronProfiles, DerivesPerLayerTimesFromLayerCounts) {
  const std::string d = toy_dir("derive");
  const auto cp = ok(read_computation_profile(d + "/computation_profiling_bf16_toy_all.json", 0));
  EXPECT_EQ(cp.seq, 128);
  ASSERT_EQ(cp.layer_types.size(), 1u);
  EXPECT_DOUBLE_EQ(cp.layer_types[0].ms_per_sample.at(1), 3.0);  // (16-10)/1/2
  EXPECT_DOUBLE_EQ(cp.layer_types[0].ms_per_sample.at(2), 2.5);  // (28-18)/2/2
  EXPECT_DOUBLE_EQ(cp.other.ms_per_sample.at(1), 4.0);           // (10-2*1*3)/1
  EXPECT_DOUBLE_EQ(cp.other.ms_per_sample.at(2), 4.0);           // (18-2*2*2.5)/2
  EXPECT_DOUBLE_EQ(cp.layer_types[0].first(), 3.0);
  EXPECT_DOUBLE_EQ(cp.layer_types[0].at(1.5), 2.75);  // linear between the points
  EXPECT_DOUBLE_EQ(cp.layer_types[0].at(9), 2.5);     // clamped
}

TEST(GalvatronProfiles, ReadsPublishedComputationProfile) {
  const auto cp = ok(read_computation_profile(
      testing::reference_dir() + "/computation_profiling_bf16_llama2-7b_all.json", 2048));
  // Static mode takes the first key in file order: batch 1.
  EXPECT_EQ(cp.layer_types[0].first_batch, 1);
  EXPECT_NEAR(cp.layer_types[0].first(), 4.396252679824831, 1e-12);
  EXPECT_NEAR(cp.layer_types[0].ms_per_sample.at(12), 3.9181755065917976, 1e-12);
  EXPECT_NEAR(cp.other.first(), 6.286115455627439, 1e-12);
}

TEST(GalvatronProfiles, ReadsMemoryAndHardware) {
  const std::string d = toy_dir("hw");
  const auto mp = ok(read_memory_profile(d + "/memory_profiling_bf16_toy_all.json", 128));
  EXPECT_TRUE(mp.sequence_parallel_keys);
  EXPECT_DOUBLE_EQ(mp.layer_types[0].parameter_mb, 10.0);
  EXPECT_DOUBLE_EQ(mp.layer_types[0].checkpoint_mb, 1.0);
  EXPECT_DOUBLE_EQ(mp.layer_types[0].act(2, mp.path), 4.0);
  EXPECT_DOUBLE_EQ(mp.pp_last.act(1, mp.path), 4.0);
  EXPECT_THROW(mp.layer_types[0].act(8, mp.path), InputError);

  const auto hw = ok(read_hardware_tables(d + "/allreduce_bandwidth_1nodes_2gpus_per_node.json",
                                           d + "/p2p_bandwidth_1nodes_2gpus_per_node.json",
                                           d + "/overlap_coefficient.json",
                                           d + "/sp_time_1nodes_2gpus_per_node.json"));
  EXPECT_DOUBLE_EQ(hw.busbw(2, true), 100.0);
  EXPECT_DOUBLE_EQ(hw.busbw(2, false), 50.0);
  EXPECT_DOUBLE_EQ(hw.busbw(4, true), 0.0);
  EXPECT_DOUBLE_EQ(hw.p2p_bw.at(2), 80.0);
  EXPECT_DOUBLE_EQ(hw.overlap_coe, 1.2);
  const auto& ar = hw.allreduce_ms.at(2);
  EXPECT_NEAR(ar.slope, 0.01, 1e-12);
  EXPECT_NEAR(ar.intercept, 0.05, 1e-12);
  EXPECT_DOUBLE_EQ(ar.time_ms(2), 0.07);         // exact entry
  EXPECT_NEAR(ar.time_ms(10), 0.15, 1e-12);      // fitted line
  EXPECT_NEAR(hw.all2all_ms.at(2).slope, 0.0, 1e-12);
}

TEST(GalvatronProfiles, LoadsAFolderByGalvatronsFileNames) {
  const std::string d = toy_dir("load");
  ProfileQuery q;
  q.model_name = "toy";
  q.nodes = 1;
  q.gpus_per_node = 2;
  const Profiles p = ok(load_profiles(d, q));
  EXPECT_EQ(p.compute.seq, 128);
  EXPECT_TRUE(p.hardware.has_sp_time);
  EXPECT_TRUE(p.notes.empty());
  EXPECT_TRUE(p.mixed_precision());
}

TEST(GalvatronProfiles, TwoNodesFallBackToTheOneNodeSpTimeTable) {
  ProfileQuery q;
  q.model_name = "llama2-7b";
  q.nodes = 2;
  q.gpus_per_node = 8;
  const Profiles p = ok(load_profiles(testing::reference_dir(), q));
  EXPECT_TRUE(p.hardware.has_sp_time);
  ASSERT_EQ(p.notes.size(), 1u);
  EXPECT_NE(p.notes[0].find("sp_time_1nodes_8gpus_per_node.json"), std::string::npos);
  EXPECT_DOUBLE_EQ(p.hardware.busbw(16, true), 44.682);
  EXPECT_DOUBLE_EQ(p.hardware.busbw(8, false), 20.7724);
}

TEST(GalvatronProfiles, ErrorsNameFileAndKey) {
  const std::string d = toy_dir("errors");
  ProfileQuery q;
  q.model_name = "other";
  q.gpus_per_node = 2;
  auto missing = load_profiles(d, q);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().kind, ErrorKind::kIo);
  EXPECT_NE(missing.error().message.find("computation_profiling_bf16_other_all.json"), std::string::npos);
  EXPECT_NE(missing.error().message.find(d), std::string::npos);

  q.model_name = "toy";
  q.gpus_per_node = 4;
  auto hw = load_profiles(d, q);
  ASSERT_FALSE(hw.ok());
  EXPECT_NE(hw.error().message.find("allreduce_bandwidth_1nodes_4gpus_per_node.json"), std::string::npos);

  auto seq = read_computation_profile(d + "/computation_profiling_bf16_toy_all.json", 4096);
  ASSERT_FALSE(seq.ok());
  EXPECT_NE(seq.error().message.find("no entry for sequence length 4096 (the file has 128)"), std::string::npos)
      << seq.error().message;

  const Json no_param = Json::parse(R"({"layertype_0_sp": {"128": {"tp_activation_per_bsz_dict": {"1": 1, "checkpoint": 1}}}})");
  auto mem = memory_profile_from_json(no_param, "mem.json", 128);
  ASSERT_FALSE(mem.ok());
  EXPECT_NE(mem.error().message.find("mem.json: layertype_0_sp.128.parameter_size: missing required field"),
            std::string::npos)
      << mem.error().message;

  const Json no_other = Json::parse(
      R"({"layertype_0_sp": {"128": {"parameter_size": 1, "tp_activation_per_bsz_dict": {"1": 1, "checkpoint": 1}}}})");
  auto other = memory_profile_from_json(no_other, "mem.json", 128);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.error().message.find("mem.json: other_memory_pp_off_sp: missing required field"), std::string::npos)
      << other.error().message;

  const Json bad_time = Json::parse(R"({"layertype_0_bsz1_seq128": "fast", "layertype_other_bsz1_seq128": 1})");
  auto t = computation_profile_from_json(bad_time, "comp.json", 0);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message.find("comp.json: layertype_0_bsz1_seq128: expected a number"), std::string::npos)
      << t.error().message;

  testing::write(d + "/ov.json", R"({"overlap": 1.1})");
  auto ov = read_hardware_tables(d + "/allreduce_bandwidth_1nodes_2gpus_per_node.json",
                                  d + "/p2p_bandwidth_1nodes_2gpus_per_node.json", d + "/ov.json", "");
  ASSERT_FALSE(ov.ok());
  EXPECT_NE(ov.error().message.find("ov.json: overlap_coe: missing required field"), std::string::npos)
      << ov.error().message;
}

}  // namespace
}  // namespace weft::galvatron
