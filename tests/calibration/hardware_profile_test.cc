// Hardware profile: JSON round trip, the alpha-beta fit, interpolation and extrapolation of a
// collective table, the compute-sharing curve, the derived cluster, and errors that name the file
// and the key (docs/profiles.md).
#include "weft/calibration/hardware_profile.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <tuple>

#include "profile_fixtures.h"

namespace weft {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("weft_calibration_" + name)).string();
}

// All-reduce over 2 ranks inside a node measured at 1000 B -> 200 us and 5000 B -> 600 us: the line
// through them is t = 100 us + S / (10^7 B/s) (bus factor 2(n-1)/n = 1 for n = 2).
CollectiveEntry two_point_allreduce() { return testing::two_point_table(Collective::kAllReduce); }

HardwareProfile sample_profile() {
  HardwareProfile p = testing::one_node_profile(4);
  p.machine.ranks_per_node = 2;  // two nodes of two
  p.machine.nodes = 2;
  CollectiveEntry span;
  span.kind = Collective::kAllGather;
  span.group_size = 4;
  span.placement = Placement::kInterNode;
  span.ranks_per_node = 2;
  span.concurrent_groups = 1;
  span.samples = {{4096, 3e-4}, {65536, 9e-4}, {1048576, 1.2e-2}};
  span.fit = fit_alpha_beta(span.kind, span.group_size, span.samples);
  p.collectives.push_back(span);
  p.overlap = {1.3, 1.1, 4194304, 2};
  p.sharing = {{2, 1.8}, {4, 3.4}};
  p.skipped = {"p2p over 2 ranks (inter_node): not measured"};
  return p;
}

TEST(HardwareProfile, RoundTripsThroughJsonAndFile) {
  const HardwareProfile p = sample_profile();
  auto back = hardware_profile_from_json(to_json(p));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back.value(), p);

  const std::string path = temp_path("roundtrip_hw.json");
  ASSERT_TRUE(write_hardware_profile(path, p).ok());
  auto read = read_hardware_profile(path);
  ASSERT_TRUE(read.ok()) << read.error().message;
  EXPECT_EQ(read.value(), p);
  std::filesystem::remove(path);
}

// Measured per-rank speeds (weft profile hardware's Malleus-style GEMMs) round-trip; a list of the
// wrong length or a factor <= 0 is refused naming the field and the numbers.
TEST(HardwareProfile, RankSlowdownRoundTripsAndIsChecked) {
  HardwareProfile p = sample_profile();
  p.machine.rank_slowdown = {1.0, 2.05, 0.98, 1.01};
  auto back = hardware_profile_from_json(to_json(p));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->machine.rank_slowdown, p.machine.rank_slowdown);
  // Absent when not measured.
  EXPECT_FALSE(to_json(sample_profile())["machine"].contains("rank_slowdown"));

  Json j = to_json(p);
  j["machine"]["rank_slowdown"] = {1.0, 2.0};
  auto wrong_size = hardware_profile_from_json(j);
  ASSERT_FALSE(wrong_size.ok());
  EXPECT_NE(wrong_size.error().message.find("machine.rank_slowdown: 2 factors for world_size 4"), std::string::npos)
      << wrong_size.error().message;
  j["machine"]["rank_slowdown"] = {1.0, 0.0, 1.0, 1.0};
  auto zero = hardware_profile_from_json(j);
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.error().message.find("machine.rank_slowdown[1]: must be a positive factor, got 0"), std::string::npos)
      << zero.error().message;
  j["machine"]["rank_slowdown"] = "slow";
  EXPECT_FALSE(hardware_profile_from_json(j).ok());
}

// A GPU's measurements (weft profile hardware --device cuda): the GEMM table and the launch
// overhead round-trip, the derived tflops is written for people and ignored on reading; a bad
// dtype, a zero dimension or a non-positive time is refused naming the entry.
TEST(HardwareProfile, GemmTableAndLaunchOverheadRoundTripAndAreChecked) {
  HardwareProfile p = sample_profile();
  p.machine.launch_overhead_us = 5.2;
  p.gemm = {{"bf16", 4096, 4096, 4096, 2.0e-4}, {"fp32", 2048, 2048, 2048, 3.5e-4}};
  const Json j = to_json(p);
  EXPECT_NEAR(j["gemm"][0]["tflops"].get<double>(), 2.0 * 4096 * 4096 * 4096 / 2.0e-4 / 1e12, 1e-9);
  auto back = hardware_profile_from_json(j);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back.value(), p);
  EXPECT_FALSE(to_json(sample_profile()).contains("gemm"));  // absent when not measured
  EXPECT_FALSE(to_json(sample_profile())["machine"].contains("launch_overhead_us"));
  for (const auto& [field, value, message] :
       {std::tuple<const char*, Json, const char*>{"dtype", "int8", "gemm[1].dtype: expected bf16, fp16, tf32 or fp32, got \"int8\""},
        {"k", 0, "gemm[1]: m, n and k must be >= 1, got 2048 x 2048 x 0"},
        {"seconds", -1.0, "gemm[1].seconds: must be > 0, got -1"}}) {
    Json bad = j;
    bad["gemm"][1][field] = value;
    auto r = hardware_profile_from_json(bad);
    ASSERT_FALSE(r.ok()) << field;
    EXPECT_NE(r.error().message.find(message), std::string::npos) << r.error().message;
  }
  Json neg = j;
  neg["machine"]["launch_overhead_us"] = -3;
  auto r = hardware_profile_from_json(neg);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("machine.launch_overhead_us: must be >= 0"), std::string::npos) << r.error().message;
}

TEST(HardwareProfile, FitRecoversAnExactLine) {
  // t = 30 us + (n-1)/n * S / 5 GB/s for an all-gather over 4 ranks.
  std::vector<CollectiveSample> s;
  for (double bytes = 1e3; bytes <= 1e8; bytes *= 10) s.push_back({bytes, 30e-6 + 0.75 * bytes / 5e9});
  const AlphaBeta f = fit_alpha_beta(Collective::kAllGather, 4, s);
  EXPECT_NEAR(f.latency_s, 30e-6, 1e-12);
  EXPECT_NEAR(f.bus_gbps, 5.0, 1e-6);

  const AlphaBeta two = two_point_allreduce().fit;
  EXPECT_NEAR(two.latency_s, 1e-4, 1e-15);
  EXPECT_NEAR(two.bus_gbps, 0.01, 1e-12);
}

TEST(HardwareProfile, FitClampsNegativeLatencyAndFlatTables) {
  // Through the origin: t = S / 1 GB/s for p2p, with one point pulled down so the free fit would
  // give a negative intercept.
  std::vector<CollectiveSample> s = {{1e6, 0.5e-3}, {2e6, 2e-3}, {4e6, 4e-3}};
  const AlphaBeta f = fit_alpha_beta(Collective::kSendRecv, 2, s);
  EXPECT_EQ(f.latency_s, 0.0);
  EXPECT_GT(f.bus_gbps, 0.0);
  // Time that does not grow with size: no bandwidth, latency = the mean.
  const AlphaBeta flat = fit_alpha_beta(Collective::kAllReduce, 2, {{1e3, 2e-4}, {1e6, 1e-4}});
  EXPECT_EQ(flat.bus_gbps, 0.0);
  EXPECT_NEAR(flat.latency_s, 1.5e-4, 1e-15);
}

TEST(HardwareProfile, InterpolatesInsideAndExtendsOutside) {
  const CollectiveEntry e = two_point_allreduce();
  EXPECT_DOUBLE_EQ(e.time(Bytes(1000)).value(), 2e-4);               // a sample
  EXPECT_NEAR(e.time(Bytes(3000)).value(), 4e-4, 1e-15);             // halfway
  EXPECT_NEAR(e.time(Bytes(9000)).value(), 6e-4 + 4000 * 1e-7, 1e-15);  // beyond: the fitted slope
  EXPECT_NEAR(e.time(Bytes(16)).value(), 2e-4 - 984 * 1e-7, 1e-15);  // below: down the slope
  EXPECT_NEAR(e.time(Bytes(1)).value(), 2e-4 - 999 * 1e-7, 1e-15);
  EXPECT_EQ(e.time(Bytes(0)).value(), 0.0);
  // Below the smallest sample never under the fitted latency.
  CollectiveEntry steep = e;
  steep.fit.latency_s = 1.5e-4;
  EXPECT_NEAR(steep.time(Bytes(16)).value(), 1.5e-4, 1e-15);
}

TEST(HardwareProfile, FindsEntriesByKindSizeAndPlacement) {
  const HardwareProfile p = sample_profile();
  EXPECT_NE(p.find(Collective::kAllReduce, 2, Placement::kIntraNode), nullptr);
  EXPECT_EQ(p.find(Collective::kAllReduce, 2, Placement::kInterNode), nullptr);
  EXPECT_EQ(p.find(Collective::kAllReduce, 4, Placement::kIntraNode), nullptr);
  EXPECT_NE(p.find(Collective::kAllGather, 4, Placement::kInterNode, 2), nullptr);
}

TEST(HardwareProfile, ComputeSharingCurve) {
  const HardwareProfile p = sample_profile();
  EXPECT_EQ(p.sharing_slowdown(1), 1.0);
  EXPECT_DOUBLE_EQ(p.sharing_slowdown(2), 1.8);
  EXPECT_DOUBLE_EQ(p.sharing_slowdown(3), 2.6);
  EXPECT_DOUBLE_EQ(p.sharing_slowdown(4), 3.4);
  EXPECT_DOUBLE_EQ(p.sharing_slowdown(8), 6.8);  // the same per-rank share of the node
  HardwareProfile none;
  EXPECT_EQ(none.sharing_slowdown(16), 1.0);
  // Virtual nodes on one machine: one rank per node already shares the cores.
  HardwareProfile virt;
  virt.sharing = {{1, 1.2}, {2, 2.0}};
  EXPECT_DOUBLE_EQ(virt.sharing_slowdown(1), 1.2);
  EXPECT_DOUBLE_EQ(virt.sharing_slowdown(2), 2.0);
  EXPECT_DOUBLE_EQ(virt.sharing_slowdown(4), 4.0);
}

TEST(HardwareProfile, DerivedClusterReproducesTheMeasuredFit) {
  const HardwareProfile p = sample_profile();
  auto c = cluster_from_hardware_profile(p);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->nodes, 2);
  EXPECT_EQ(c->gpus_per_node, 2);
  EXPECT_EQ(c->gpu.memory_gib, 6);
  EXPECT_EQ(c->gpu.hbm_gbps, 8);
  EXPECT_DOUBLE_EQ(c->gpu.tflops_fp32, 0.05);
  // The analytic collective model on the derived cluster gives back the fitted line:
  // 100 us + S / 10^7 B/s for an all-reduce over two ranks of a node.
  const CommGroup g = place_group(*c, 2, 1);
  for (double s : {1e3, 1e5, 1e7})
    EXPECT_NEAR(collective_time(Collective::kAllReduce, Bytes(s), g, *c).value(), 1e-4 + s / 1e7, 1e-12 * (1 + s / 1e7));
}

TEST(HardwareProfile, DerivedClusterFromAFlatTable) {
  // Time that does not grow with size (no fitted bandwidth): latency = the fastest sample (3 ms),
  // bandwidth = the largest size over its time beyond that: 1 MB in 1 ms -> 1 GB/s bus (n = 2).
  HardwareProfile p = sample_profile();
  CollectiveEntry& e = p.collectives[0];
  e.samples = {{1e3, 3e-3}, {1e6, 4e-3}};
  e.fit = {3.5e-3, 0};
  auto c = cluster_from_hardware_profile(p);
  ASSERT_TRUE(c.ok()) << c.error().message;
  const CommGroup g = place_group(*c, 2, 1);
  EXPECT_NEAR(collective_time(Collective::kAllReduce, Bytes(1e6), g, *c).value(), 4e-3, 1e-12);
}

TEST(HardwareProfile, DerivedClusterNeedsMeasuredFacts) {
  HardwareProfile p = sample_profile();
  p.machine.matmul_tflops = 0;
  auto c = cluster_from_hardware_profile(p);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("matmul_tflops"), std::string::npos) << c.error().message;
  // With a base cluster the missing figure comes from it.
  ClusterSpec base = cluster_from_hardware_profile(sample_profile()).value();
  base.gpu.tflops_fp32 = 7;
  auto with_base = cluster_from_hardware_profile(p, &base);
  ASSERT_TRUE(with_base.ok()) << with_base.error().message;
  EXPECT_EQ(with_base->gpu.tflops_fp32, 7);
}

TEST(HardwareProfile, TruncatedFileNamesTheFile) {
  const std::string path = temp_path("truncated_hw.json");
  const std::string text = to_json(sample_profile()).dump(2);
  {
    std::ofstream out(path);
    out << text.substr(0, text.size() / 2);
  }
  auto r = read_hardware_profile(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find(path), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("malformed JSON"), std::string::npos) << r.error().message;
  std::filesystem::remove(path);

  auto missing = read_hardware_profile(temp_path("does_not_exist.json"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().kind, ErrorKind::kIo);
}

TEST(HardwareProfile, BadFieldsNameTheKey) {
  auto expect_error = [](Json j, const std::string& needle) {
    auto r = hardware_profile_from_json(j, "hw.json");
    ASSERT_FALSE(r.ok()) << "expected an error containing " << needle;
    EXPECT_NE(r.error().message.find(needle), std::string::npos) << r.error().message;
    EXPECT_EQ(r.error().message.rfind("hw.json: ", 0), 0u) << r.error().message;
  };
  const Json good = to_json(sample_profile());
  Json j = good;
  j["collectives"][0].erase("samples");
  expect_error(j, "collectives[0].samples: missing required field");
  j = good;
  j["collectives"][1]["samples"][2]["seconds"] = "fast";
  expect_error(j, "collectives[1].samples[2].seconds: expected a number");
  j = good;
  j["collectives"][0]["kind"] = "broadcast";
  expect_error(j, "collectives[0].kind: expected all_reduce");
  j = good;
  j["collectives"][0]["samples"][1]["bytes"] = 10;
  expect_error(j, "collectives[0].samples[1].bytes: sizes must ascend");
  j = good;
  j["collectives"][0]["ranks_per_node"] = 1;
  expect_error(j, "collectives[0].ranks_per_node: an intra_node group");
  j = good;
  j["overlap"]["compute_slowdown"] = 0.5;
  expect_error(j, "overlap.compute_slowdown: must be >= 1, got 0.5");
  j = good;
  j["format_version"] = 2;
  expect_error(j, "format_version: this weft reads version 1, got 2");
  j = good;
  j["format"] = "weft-model-profile";
  expect_error(j, "format: expected \"weft-hardware-profile\"");
  j = good;
  j["machine"]["cpu_count"] = 2;
  expect_error(j, "machine.cpu_count: unknown field");
  j = good;
  j.erase("machine");
  expect_error(j, "machine: missing required field");
}

TEST(HardwareProfile, FitIsRecomputedWhenAbsent) {
  Json j = to_json(sample_profile());
  j["collectives"][0].erase("fit");
  auto r = hardware_profile_from_json(j);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_NEAR(r->collectives[0].fit.latency_s, 1e-4, 1e-15);
  EXPECT_NEAR(r->collectives[0].fit.bus_gbps, 0.01, 1e-12);
}

}  // namespace
}  // namespace weft
