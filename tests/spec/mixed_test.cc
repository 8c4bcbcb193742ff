// MixedCluster: node groups of several GPU kinds and stragglers (weft/spec/mixed.h): the list form,
// the file form, the one-kind view, and every bad input with the field and numbers it names.
#include <gtest/gtest.h>

#include "weft/spec/mixed.h"
#include "weft/spec/presets.h"

namespace weft {
namespace {

TEST(MixedCluster, PresetListGivesNodesPerPreset) {
  auto m = load_mixed_cluster("a100-80gb:2,h100-80gb:1");
  ASSERT_TRUE(m.ok()) << m.error().message;
  ASSERT_EQ(m->groups.size(), 2u);
  EXPECT_EQ(m->groups[0].nodes, 2);
  EXPECT_EQ(m->groups[1].nodes, 1);
  EXPECT_EQ(m->total_gpus(), 24);
  EXPECT_EQ(m->group_of(15), 0);
  EXPECT_EQ(m->group_of(16), 1);
  EXPECT_EQ(m->first_gpu(1), 16);
  EXPECT_TRUE(m->heterogeneous());
  // Between groups: the slower inter-node link (A100 nodes: 25 GB/s per GPU, H100 nodes: 50).
  EXPECT_DOUBLE_EQ(m->between.gbps, 25.0);
  // The one-kind view: every GPU, the slower kind, the least memory.
  const ClusterSpec u = m->as_uniform();
  EXPECT_EQ(u.total_gpus(), 24);
  EXPECT_EQ(u.gpu.name, m->groups[0].gpu.name);
  EXPECT_DOUBLE_EQ(u.gpu.memory_gib, std::min(m->groups[0].gpu.memory_gib, m->groups[1].gpu.memory_gib));
  EXPECT_TRUE(validate(u).ok());
}

TEST(MixedCluster, OnePresetIsOneGroupWithoutDifferences) {
  auto m = load_mixed_cluster("h100-80gb");
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->groups.size(), 1u);
  EXPECT_FALSE(m->heterogeneous());
  EXPECT_EQ(m->as_uniform(), *load_cluster("h100-80gb"));
}

TEST(MixedCluster, FileWithGroupsRoundTrips) {
  const Json j = Json::parse(R"({
    "name": "lab",
    "groups": [ {"preset": "a100-40gb", "nodes": 1},
                {"name": "t4", "nodes": 2, "gpus_per_node": 4,
                 "gpu": {"name": "T4", "tflops": {"fp32": 8.1, "fp16": 65}, "memory_gib": 15, "hbm_gbps": 320},
                 "intra_node": {"gbps": 16, "latency_us": 5}, "inter_node": {"gbps": 3, "latency_us": 20}} ],
    "between_groups": {"gbps": 2.5, "latency_us": 30},
    "slowdown": [1, 1, 1, 1, 1, 1, 1, 1, 1, 1.5, 1, 1, 1, 1, 1, 1]
  })");
  auto m = mixed_cluster_from_json(j, "lab.json");
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->total_gpus(), 16);
  EXPECT_DOUBLE_EQ(m->between.gbps, 2.5);
  EXPECT_DOUBLE_EQ(m->slowdown_of(9), 1.5);
  EXPECT_EQ(m->groups[1].gpu.name, "T4");
  auto back = mixed_cluster_from_json(to_json(*m), "again");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, *m);
  // The one-kind view takes the slower GPU (a T4 computes less than an A100) and the least memory.
  EXPECT_EQ(m->as_uniform().gpu.name, "T4");
  EXPECT_DOUBLE_EQ(m->as_uniform().gpu.memory_gib, 15.0);
}

TEST(MixedCluster, BadListsNameThePresetAndTheNodes) {
  auto unknown = load_mixed_cluster("a100-80gb:2,z900:1");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("unknown preset \"z900\""), std::string::npos) << unknown.error().message;
  EXPECT_NE(unknown.error().message.find("h100-80gb"), std::string::npos) << "lists the known presets";
  for (const char* bad : {"a100-80gb:0,h100-80gb:1", "a100-80gb:x,h100-80gb:1", "a100-80gb:-2,h100-80gb:1"}) {
    auto r = load_mixed_cluster(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().kind, ErrorKind::kBadInput);
    EXPECT_NE(r.error().message.find("nodes must be a positive integer"), std::string::npos) << r.error().message;
  }
  auto empty = load_mixed_cluster("a100-80gb:1,,h100-80gb:1");
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.error().message.find("empty preset"), std::string::npos) << empty.error().message;
}

TEST(MixedCluster, BadFilesNameTheField) {
  auto unknown_key = mixed_cluster_from_json(Json::parse(R"({"groups": [{"preset": "a100-80gb"}], "speed": 2})"), "f");
  ASSERT_FALSE(unknown_key.ok());
  EXPECT_NE(unknown_key.error().message.find("speed"), std::string::npos) << unknown_key.error().message;
  auto slow = mixed_cluster_from_json(
      Json::parse(R"({"groups": [{"preset": "a100-80gb"}], "slowdown": [1, 1, 1, 0, 1, 1, 1, 1]})"), "f");
  ASSERT_FALSE(slow.ok());
  EXPECT_NE(slow.error().message.find("slowdown[3]"), std::string::npos) << slow.error().message;
  auto count = mixed_cluster_from_json(Json::parse(R"({"groups": [{"preset": "a100-80gb"}], "slowdown": [1, 2]})"), "f");
  ASSERT_FALSE(count.ok());
  EXPECT_NE(count.error().message.find("2 factors for 8 GPUs"), std::string::npos) << count.error().message;
  auto preset = mixed_cluster_from_json(Json::parse(R"({"groups": [{"preset": "nope", "nodes": 1}]})"), "f");
  ASSERT_FALSE(preset.ok());
  EXPECT_NE(preset.error().message.find("nope"), std::string::npos) << preset.error().message;
  auto none = mixed_cluster_from_json(Json::parse(R"({"groups": []})"), "f");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().message.find("groups"), std::string::npos) << none.error().message;
}

TEST(MixedCluster, StragglersAreCheckedAndSet) {
  MixedCluster m = mixed_of(*load_cluster("h100-80gb"));
  ASSERT_TRUE(add_straggler(m, "1:2.0").ok());
  EXPECT_DOUBLE_EQ(m.slowdown_of(1), 2.0);
  EXPECT_DOUBLE_EQ(m.slowdown_of(0), 1.0);
  EXPECT_TRUE(m.heterogeneous());
  auto msg = [&](const std::string& arg) {
    Status st = add_straggler(m, arg);
    EXPECT_FALSE(st.ok()) << arg;
    return st.ok() ? std::string() : st.error().message;
  };
  EXPECT_NE(msg("8:2").find("GPU 8 is out of range (the cluster has GPUs 0-7)"), std::string::npos) << msg("8:2");
  EXPECT_NE(msg("-1:2").find("out of range"), std::string::npos);
  EXPECT_NE(msg("2:0").find("the factor must be > 0, got 0"), std::string::npos) << msg("2:0");
  EXPECT_NE(msg("2:-1.5").find("must be > 0"), std::string::npos);
  EXPECT_NE(msg("2").find("is not GPU:FACTOR"), std::string::npos);
  EXPECT_NE(msg("a:2").find("is not an integer"), std::string::npos);
  EXPECT_NE(msg("2:fast").find("is not a number"), std::string::npos);
}

}  // namespace
}  // namespace weft
