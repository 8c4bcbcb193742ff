// Presets: the required ones exist, each is a complete file (the shipped JSON is exactly what
// to_json writes), and each round-trips through JSON and through a file on disk.
#include "weft/spec/presets.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

namespace weft {
namespace {

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TEST(Presets, RequiredModelsExist) {
  const auto names = model_preset_names();
  for (const char* n : {"gpt3-1.3b", "gpt3-2.7b", "gpt3-6.7b", "gpt3-13b", "gpt3-175b", "llama-2-7b", "llama-2-13b",
                        "llama-2-70b", "llama-3-8b", "llama-3-70b", "llama-3-405b", "mixtral-8x7b", "bert-large",
                        "t5-large", "mistral-7b", "qwen2-7b"})
    EXPECT_TRUE(contains(names, n)) << n;
}

TEST(Presets, RequiredClustersExist) {
  const auto names = cluster_preset_names();
  for (const char* n : {"a100-40gb", "a100-80gb", "h100-80gb", "h200", "b200", "v100-32gb"})
    EXPECT_TRUE(contains(names, n)) << n;
}

TEST(Presets, ModelsAreCompleteFilesAndRoundTrip) {
  for (const auto& name : model_preset_names()) {
    SCOPED_TRACE(name);
    const Json shipped = model_preset_json(name).value();
    Result<ModelSpec> m = load_model(name);
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_EQ(m->name, name);  // the file name is the preset name
    const Json written = to_json(*m);
    EXPECT_EQ(written, shipped);  // every field present, same order: the file is editable as is
    Result<ModelSpec> back = model_from_json(Json::parse(written.dump(2)), name);
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_TRUE(*back == *m);
  }
}

TEST(Presets, ClustersAreCompleteFilesAndRoundTrip) {
  for (const auto& name : cluster_preset_names()) {
    SCOPED_TRACE(name);
    const Json shipped = cluster_preset_json(name).value();
    Result<ClusterSpec> c = load_cluster(name);
    ASSERT_TRUE(c.ok()) << c.error().message;
    EXPECT_EQ(c->name, name);
    EXPECT_EQ(to_json(*c), shipped);
    Result<ClusterSpec> back = cluster_from_json(Json::parse(to_json(*c).dump(2)), name);
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_TRUE(*back == *c);
  }
}

TEST(Presets, LoadFromFileRoundTrip) {
  const std::string dir = WEFT_BINARY_DIR;
  const std::string mpath = dir + "/presets_test_model.json";
  const std::string cpath = dir + "/presets_test_cluster.json";
  const ModelSpec m = load_model("mixtral-8x7b").value();
  write_json_file(mpath, to_json(m));
  Result<ModelSpec> m2 = load_model(mpath);
  ASSERT_TRUE(m2.ok()) << m2.error().message;
  EXPECT_TRUE(*m2 == m);
  const ClusterSpec c = load_cluster("h100-80gb").value();
  write_json_file(cpath, to_json(c));
  Result<ClusterSpec> c2 = load_cluster(cpath);
  ASSERT_TRUE(c2.ok()) << c2.error().message;
  EXPECT_TRUE(*c2 == c);
  std::remove(mpath.c_str());
  std::remove(cpath.c_str());
}

TEST(Presets, HfConfigFileIsDetected) {
  Result<ModelSpec> m = load_model(std::string(WEFT_SPEC_TEST_DATA) + "/llama-2-7b.config.json");
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->groups[0].shape.ffn, 11008);
}

// Vendor datasheet figures (docs/cluster-spec.md lists the documents). Datasheets quote Hopper and
// Blackwell tensor throughput with 2:4 sparsity; the dense peak is half.
struct Datasheet {
  const char* preset;
  double bf16_or_fp16_dense, hbm_gbps, nvlink_bidir_gbps, nic_gbit_per_gpu, smi_mib;
};
const Datasheet kSheets[] = {
    {"v100-32gb", 125, 900, 300, 50, 32768},  // DGX-1: 4 x 100 Gb/s EDR for 8 GPUs
    {"a100-40gb", 312, 1555, 600, 200, 40960},
    {"a100-80gb", 312, 2039, 600, 200, 81920},
    {"h100-80gb", 1979.0 / 2, 3350, 900, 400, 81559},
    {"h200", 1979.0 / 2, 4800, 900, 400, 143771},
    {"b200", 4500.0 / 2, 7700, 1800, 400, 183359},
};

TEST(Presets, ClusterFiguresFollowDatasheets) {
  for (const auto& d : kSheets) {
    SCOPED_TRACE(d.preset);
    const ClusterSpec c = load_cluster(d.preset).value();
    EXPECT_EQ(c.gpus_per_node, 8);
    EXPECT_DOUBLE_EQ(c.gpu.tflops_fp16, d.bf16_or_fp16_dense);
    EXPECT_DOUBLE_EQ(c.gpu.hbm_gbps, d.hbm_gbps);
    EXPECT_DOUBLE_EQ(c.intra.gbps, d.nvlink_bidir_gbps / 2);    // per direction
    EXPECT_DOUBLE_EQ(c.inter.gbps, d.nic_gbit_per_gpu / 8.0);   // Gb/s -> GB/s
    EXPECT_NEAR(c.gpu.memory_gib, d.smi_mib / 1024.0, 0.01);    // nvidia-smi total, MiB -> GiB
    EXPECT_GT(c.intra.latency_us, 0);
    EXPECT_GT(c.inter.latency_us, 0);
  }
  // V100 has no bf16 tensor cores; everything else has bf16 == fp16.
  EXPECT_EQ(load_cluster("v100-32gb")->gpu.tflops_bf16, 0.0);
  EXPECT_EQ(load_cluster("h100-80gb")->gpu.tflops_bf16, load_cluster("h100-80gb")->gpu.tflops_fp16);
}

TEST(Presets, EachGpuRunsTheDtypesItsDatasheetGives) {
  const GpuSpec v100 = load_cluster("v100-32gb")->gpu, a100 = load_cluster("a100-80gb")->gpu;
  const GpuSpec h100 = load_cluster("h100-80gb")->gpu;
  EXPECT_EQ(v100.dtypes(), "fp32, fp16");
  EXPECT_EQ(a100.dtypes(), "fp32, tf32, bf16, fp16");
  EXPECT_TRUE(h100.runs(DType::kFp8));
  EXPECT_TRUE(check_dtype(v100, DType::kFp16, "--dtype").ok());
  const Status bf16 = check_dtype(v100, DType::kBf16, "--dtype");
  ASSERT_FALSE(bf16.ok());
  EXPECT_EQ(bf16.error().kind, ErrorKind::kBadInput);
  EXPECT_EQ(bf16.error().message, "--dtype: " + v100.name + " has no bf16 (it runs fp32, fp16)");
  EXPECT_EQ(check_dtype(a100, DType::kFp8, "train.dtype").error().message,
            "train.dtype: " + a100.name + " has no fp8 (it runs fp32, tf32, bf16, fp16)");
}

// torchtitan's H100s (96 GB HBM2e at 2.4 TB/s, 500 W; docs/cluster-spec.md): the tensor rate lies
// between the NVL's (835.5 dense bf16 at 400 W) and the SXM's (989.4 at 700 W), linear in the power
// limit; every dtype's rate scales by the same clock ratio.
TEST(Presets, PowerLimitedH100LiesBetweenNvlAndSxm) {
  const GpuSpec sxm = load_cluster("h100-80gb")->gpu, g = load_cluster("h100-500w")->gpu;
  const double bf16 = 835.5 + (989.4 - 835.5) * (500 - 400) / (700 - 400.0);
  EXPECT_NEAR(g.tflops_bf16, bf16, 0.05);
  EXPECT_NEAR(g.tflops_fp8 / sxm.tflops_fp8, bf16 / 989.4, 1e-3);
  EXPECT_NEAR(g.tflops_fp32 / sxm.tflops_fp32, bf16 / 989.4, 2e-3);
  EXPECT_DOUBLE_EQ(g.hbm_gbps, 2400);
  EXPECT_NEAR(g.memory_gib, 96 * 81559.0 / 81920, 0.01);
}

}  // namespace
}  // namespace weft
