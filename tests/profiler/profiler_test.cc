// The profiler end to end on tiny sizes: what `weft profile model` and `weft profile hardware`
// write reads back, holds the points asked for, and behaves as the measured quantities must
// (recompute keeps less, a tp shard keeps less, collectives take longer for larger messages);
// memory limits skip points instead of failing; bad flags are refused naming the flag.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "weft/calibration/hardware_profile.h"
#include "weft/calibration/model_profile.h"

namespace weft {
namespace {

namespace fs = std::filesystem;

struct Outcome {
  int code = -1;
  std::string output;
};

Outcome run(const std::string& args) {
  const std::string cmd = std::string(WEFT_PROF_DRIVER) + " " + args + " 2>&1";
  Outcome r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) r.output.append(buf, n);
  const int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

fs::path work_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("weft_profiler_test_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// A one-group GPT-2-style model small enough to profile in a second.
std::string tiny_model(const fs::path& dir) {
  const fs::path p = dir / "tiny.json";
  std::ofstream(p) << R"({"name": "tiny", "vocab": 64, "hidden": 32, "tied_embeddings": false,
    "norm": "layernorm", "position": "learned", "max_seq": 32,
    "groups": [{"name": "decoder", "count": 2, "kind": "decoder", "hidden": 32, "heads": 4,
                "kv_heads": 4, "head_dim": 8, "ffn": 64, "ffn_kind": "gelu", "bias": true}]})";
  return p.string();
}

const PhaseSample* find(const std::vector<PhaseSample>& v, int tp, Recompute rc, int mb, int seq) {
  for (const auto& s : v)
    if (s.tp == tp && s.recompute == rc && s.micro_batch == mb && s.seq == seq) return &s;
  return nullptr;
}

TEST(ProfileModel, WritesEveryPointAndTheMeasuresBehave) {
  const fs::path dir = work_dir("model");
  const std::string out = (dir / "layers.json").string();
  const Outcome r = run("profile model --model " + tiny_model(dir) +
                    " --tp 1,2 --seq 16,32 --micro-batch 1,4 --recompute none,full --time-per-point 0.02"
                    " --progress off --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  auto p = read_model_profile(out);
  ASSERT_TRUE(p.ok()) << p.error().message;
  ASSERT_EQ(p->layers.size(), 1u);
  EXPECT_EQ(p->layers[0].group, "decoder");
  // 2 tp x (recompute none, full, and ZeRO-3 without recompute) x 2 seq x 2 micro-batch
  EXPECT_EQ(p->layers[0].samples.size(), 24u);
  EXPECT_EQ(p->embedding.size(), 16u);  // 2 tp x (zero 0, 3) x 2 seq x 2 micro-batch
  EXPECT_EQ(p->head.size(), 16u);
  int zero3 = 0;
  for (const auto& s : p->layers[0].samples) zero3 += s.zero == 3 ? 1 : 0;
  EXPECT_EQ(zero3, 8);
  EXPECT_TRUE(p->skipped.empty());
  for (int tp : {1, 2}) {
    const PhaseSample* none = find(p->layers[0].samples, tp, Recompute::kNone, 4, 32);
    const PhaseSample* full = find(p->layers[0].samples, tp, Recompute::kFull, 4, 32);
    ASSERT_TRUE(none && full);
    // Full recompute keeps only the layer's output; without it attention scores, MLP activations...
    EXPECT_LT(full->activation_bytes * 3, none->activation_bytes);
    // The layer output alone: 4 x 32 x 32 fp32 = 16 KiB.
    EXPECT_GE(full->activation_bytes, 4 * 32 * 32 * 4);
  }
  // The tp=2 shard holds half the heads and half the FFN: less saved than tp=1.
  EXPECT_LT(find(p->layers[0].samples, 2, Recompute::kNone, 4, 32)->activation_bytes,
            find(p->layers[0].samples, 1, Recompute::kNone, 4, 32)->activation_bytes);
  // Four times the samples keep (about) four times the activations.
  const double a1 = find(p->layers[0].samples, 1, Recompute::kNone, 1, 32)->activation_bytes;
  const double a4 = find(p->layers[0].samples, 1, Recompute::kNone, 4, 32)->activation_bytes;
  EXPECT_GT(a4, 3 * a1);
  EXPECT_LT(a4, 5 * a1);
  EXPECT_GT(p->runtime.optimizer_s_per_param, 0);
  EXPECT_GT(p->runtime.state_bytes_per_param, 16);  // weights, grads, two moments, masks: fp32
  EXPECT_TRUE(p->runtime.grad_sync_overlaps_backward);  // the runtime's bucketed reduction
}

TEST(ProfileModel, SkipsPointsThatDoNotFitAndRecordsThem) {
  const fs::path dir = work_dir("nofit");
  const std::string out = (dir / "layers.json").string();
  const Outcome r = run("profile model --model " + tiny_model(dir) +
                    " --seq 16 --micro-batch 1 --recompute none --memory-fraction 1e-12 --progress off --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  auto p = read_model_profile(out);
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_TRUE(p->layers[0].samples.empty());
  ASSERT_FALSE(p->skipped.empty());
  EXPECT_NE(p->skipped[0].find("available"), std::string::npos) << p->skipped[0];
}

// A MoE layer is timed whole on one rank (router, dispatch, every expert local); a tp-way shard of
// it alone has no expert grid, so tp 2 is skipped with the reason recorded.
TEST(ProfileModel, TimesAMoeLayerWholeAtTpOneAndSkipsTpTwo) {
  const fs::path dir = work_dir("moe");
  const fs::path model = dir / "tiny-moe.json";
  std::ofstream(model) << R"({"name": "tiny-moe", "vocab": 64, "hidden": 32, "tied_embeddings": false,
    "norm": "rmsnorm", "position": "rope", "max_seq": 32,
    "groups": [{"name": "decoder", "count": 2, "kind": "decoder", "hidden": 32, "heads": 4,
                "kv_heads": 2, "head_dim": 8, "ffn": 0, "ffn_kind": "swiglu", "bias": false,
                "moe": {"experts": 4, "top_k": 2, "expert_ffn": 16, "shared_experts": 0}}]})";
  const std::string out = (dir / "layers.json").string();
  const Outcome r = run("profile model --model " + model.string() +
                        " --tp 1,2 --seq 32 --micro-batch 1,4 --recompute none --time-per-point 0.02 --progress off"
                        " --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  auto p = read_model_profile(out);
  ASSERT_TRUE(p.ok()) << p.error().message;
  ASSERT_EQ(p->layers.size(), 1u);
  EXPECT_EQ(p->layers[0].samples.size(), 4u);  // tp 1 x (none, ZeRO-3) x 2 micro-batches
  for (const auto& s : p->layers[0].samples) {
    EXPECT_EQ(s.tp, 1);
    EXPECT_GT(s.forward_s, 0);
    EXPECT_GT(s.backward_s, 0);
  }
  // Four times the tokens keep more than twice the activations (the tiny layer's index tensors and
  // routing figures are a fixed part of them).
  const PhaseSample* one = find(p->layers[0].samples, 1, Recompute::kNone, 1, 32);
  const PhaseSample* four = find(p->layers[0].samples, 1, Recompute::kNone, 4, 32);
  ASSERT_TRUE(one && four);
  EXPECT_GT(four->activation_bytes, 2 * one->activation_bytes);
  ASSERT_FALSE(p->skipped.empty());
  EXPECT_NE(p->skipped[0].find("tp 2"), std::string::npos) << p->skipped[0];
  EXPECT_NE(p->skipped[0].find("MoE layers are profiled at tp 1"), std::string::npos) << p->skipped[0];
}

TEST(ProfileModel, BadFlagsNameTheFlag) {
  const fs::path dir = work_dir("badflags");
  Outcome r = run("profile model --model " + tiny_model(dir) + " --tp 0 --out " + (dir / "x.json").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--tp: values must be >= 1, got 0"), std::string::npos) << r.output;
  r = run("profile model --model " + tiny_model(dir) + " --seq 64 --out " + (dir / "x.json").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--seq: 64 exceeds the model's learned position table of 32"), std::string::npos)
      << r.output;
  r = run("profile model --model " + tiny_model(dir) + " --recompute some --out " + (dir / "x.json").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--recompute"), std::string::npos) << r.output;
  r = run("profile model --model " + tiny_model(dir) + " --seq 16 --dtype fp16 --out " + (dir / "x.json").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--dtype: expected fp32 or bf16, got \"fp16\""), std::string::npos) << r.output;
  r = run("profile model --model " + tiny_model(dir) + " --seq 16 --dtype bf16 --out " + (dir / "x.json").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--dtype bf16: needs --device cuda"), std::string::npos) << r.output;
  r = run("profile model --model " + tiny_model(dir) + " --seq 16 --device tpu --out " + (dir / "x.json").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--device: expected cpu or cuda, got \"tpu\""), std::string::npos) << r.output;
  // This build's libtorch has no CUDA: the error names the build (a CUDA build names the device count).
  r = run("profile model --model " + tiny_model(dir) + " --seq 16 --device cuda --out " + (dir / "x.json").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--device cuda: "), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "x.json"));
}

TEST(ProfileHardware, TwoRanksWriteAReadableProfile) {
  const fs::path dir = work_dir("hw");
  const std::string out = (dir / "hw.json").string(), cluster = (dir / "cluster.json").string();
  const Outcome r = run(std::string("launch -n 2 -- ") + WEFT_PROF_DRIVER +
                    " profile hardware --max-bytes 262144 --time-per-size 0.02 --progress off --out " + out +
                    " --cluster-out " + cluster);
  ASSERT_EQ(r.code, 0) << r.output;
  auto p = read_hardware_profile(out);
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->machine.world_size, 2);
  EXPECT_EQ(p->machine.ranks_per_node, 2);
  for (Collective k : {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                       Collective::kAllToAll, Collective::kSendRecv}) {
    const CollectiveEntry* e = p->find(k, 2, Placement::kIntraNode);
    ASSERT_NE(e, nullptr) << profile_name(k);
    ASSERT_EQ(e->samples.size(), 4u) << profile_name(k);  // 4, 16, 64, 256 KiB
    EXPECT_EQ(e->samples.front().bytes, 4096);
    for (const auto& s : e->samples) EXPECT_GT(s.seconds, 0);
  }
  EXPECT_EQ(p->find(Collective::kAllReduce, 2, Placement::kInterNode), nullptr);
  EXPECT_GT(p->machine.matmul_tflops, 0);
  EXPECT_GT(p->machine.memory_gbps, 0);
  // Two healthy ranks: within measurement noise of each other (a few percent on a quiet machine,
  // more with other tests computing beside it).
  ASSERT_EQ(p->machine.rank_slowdown.size(), 2u);
  for (double f : p->machine.rank_slowdown) EXPECT_LT(f, 1.3);
  EXPECT_GT(p->machine.runtime_overhead_gib, 0);
  EXPECT_GE(p->overlap.compute_slowdown, 1.0);
  ASSERT_EQ(p->sharing.size(), 1u);  // 2 ranks of the one node at once
  EXPECT_EQ(p->sharing[0].ranks, 2);
  EXPECT_TRUE(fs::exists(cluster));
}

// Per-rank speed: every rank runs the same GEMMs in turn (timed in CPU time, each round's times
// compared within the round, the median ratio kept); `--slow 1:2` (the test hook) counts rank 1's time twice, and the profile
// says so against the healthy rank.
TEST(ProfileHardware, MeasuresEachRanksSpeedAndNamesASlowOne) {
  const fs::path dir = work_dir("hw_slow");
  const std::string out = (dir / "hw.json").string();
  const Outcome r = run(std::string("launch -n 2 -- ") + WEFT_PROF_DRIVER +
                    " profile hardware --max-bytes 16384 --time-per-size 0.02 --progress off --slow 1:2 --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  auto p = read_hardware_profile(out);
  ASSERT_TRUE(p.ok()) << p.error().message;
  ASSERT_EQ(p->machine.rank_slowdown.size(), 2u);
  EXPECT_DOUBLE_EQ(p->machine.rank_slowdown[0], 1.0);  // the healthy reference
  // Named as slow, well past kMeasuredStraggler (1.1) and an unslowed rank's ~1.0, and short of
  // the factor applied twice (4). How close it lands to 2 depends on what else the machine runs
  // (1.56 to 2.95 seen with other tests beside it when each rank timed one turn per round; 1.96
  // to 2.32 with the fastest of three turns, on a quiet and on a loaded machine), so the bounds
  // check the naming, not the precision.
  EXPECT_GT(p->machine.rank_slowdown[1], 1.4);
  EXPECT_LT(p->machine.rank_slowdown[1], 3.3);
  const Outcome bad = run(std::string("launch -n 2 -- ") + WEFT_PROF_DRIVER +
                          " profile hardware --progress off --slow 2:2 --out " + out);
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.output.find("--slow"), std::string::npos) << bad.output;
}

TEST(ProfileHardware, VirtualNodesGiveSpanningTables) {
  const fs::path dir = work_dir("hw_nodes");
  const std::string out = (dir / "hw.json").string();
  const Outcome r = run(std::string("launch -n 2 -- ") + WEFT_PROF_DRIVER +
                    " profile hardware --gpus-per-node 1 --max-bytes 16384 --time-per-size 0.02 --progress off"
                    " --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  auto p = read_hardware_profile(out);
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->machine.nodes, 2);
  const CollectiveEntry* e = p->find(Collective::kAllReduce, 2, Placement::kInterNode);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->ranks_per_node, 1);
  EXPECT_NE(p->find(Collective::kSendRecv, 2, Placement::kInterNode), nullptr);
  EXPECT_EQ(p->find(Collective::kAllReduce, 2, Placement::kIntraNode), nullptr);
  ASSERT_FALSE(p->sharing.empty());
  EXPECT_EQ(p->sharing[0].ranks, 1);  // measured: the other virtual node computes at the same time
}

TEST(ProfileHardware, RefusesANodeSizeThatDoesNotDivideTheJob) {
  const fs::path dir = work_dir("hw_bad");
  const Outcome r = run(std::string("launch -n 2 -- ") + WEFT_PROF_DRIVER + " profile hardware --gpus-per-node 3 --out " +
                    (dir / "hw.json").string());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("--gpus-per-node: 3 does not divide the 2 ranks"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace weft
