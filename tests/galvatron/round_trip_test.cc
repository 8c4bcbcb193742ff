// Galvatron strategy -> weft plan -> Galvatron strategy is identical for every strategy file
// Galvatron ships or produced on its profiles.
#include <gtest/gtest.h>

#include <filesystem>

#include "test_util.h"
#include "weft/galvatron/strategy.h"

namespace weft::galvatron {
namespace {

using testing::ok;

ModelSpec llama() { return ok(to_model_spec(ok(read_model_yaml(testing::reference_dir() + "/llama2-7b.yaml")))); }

std::vector<std::string> strategy_files() {
  std::vector<std::string> out{testing::reference_dir() + "/galvatron_config_llama2-7b_1nodes_8gpus_per_node_36GB_bf16.json"};
  for (const auto& e : std::filesystem::directory_iterator(testing::reference_dir() + "/searched"))
    if (e.path().extension() == ".json") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(GalvatronRoundTrip, EveryReferenceStrategy) {
  const auto files = strategy_files();
  ASSERT_EQ(files.size(), 6u);
  for (const std::string& f : files) {
    SCOPED_TRACE(f);
    const std::string text = read_text_file(f);
    const Json in = Json::parse(text);
    const int nodes = f.find("2nodes") != std::string::npos ? 2 : 1;
    const ClusterSpec c = testing::cluster(nodes, 36);
    const Plan p = ok(import_strategy(in, llama(), c, 2048));
    EXPECT_TRUE(validate(p).ok());
    const Json out = ok(export_strategy(p));
    // Every key of the input comes back with the same value; the export adds only world_size
    // (which the older shipped file leaves out).
    for (auto it = in.begin(); it != in.end(); ++it) EXPECT_EQ(out.at(it.key()), it.value()) << it.key();
    for (auto it = out.begin(); it != out.end(); ++it)
      if (!in.contains(it.key())) EXPECT_EQ(it.key(), "world_size");
    EXPECT_EQ(out.at("world_size"), nodes * 8);
    // Files that carry world_size come back byte for byte.
    if (in.contains("world_size")) EXPECT_EQ(dump_strategy(out), text);
    // And the plan survives the trip through its own JSON format.
    EXPECT_EQ(ok(plan_from_json(to_json(p))), p);
  }
}

TEST(GalvatronRoundTrip, ImportedPlansMeanWhatGalvatronMeans) {
  const ModelSpec m = llama();
  // A36: pp2 [16,16], tp2 Megatron-SP x dp2 ZeRO-2, 32 micro-batches; embedding Ulysses 2 x dp2.
  const Plan a36 = ok(import_strategy(
      read_json_file(testing::reference_dir() + "/searched/galvatron_config_llama2-7b_1nodes_8gpus_per_node_36GB_bf16.json"),
      m, testing::cluster(1, 36), 2048));
  EXPECT_EQ(a36.train.pp, 2);
  EXPECT_EQ(a36.train.micro_batches, 32);
  EXPECT_EQ(a36.train.global_batch, 64);
  EXPECT_EQ(a36.train.schedule, Schedule::k1F1B);
  EXPECT_EQ(a36.stages[1].first_layer, 16);
  const LayerStrategy& l = a36.stages[0].layers[5];
  EXPECT_EQ(l.tp, 2);
  EXPECT_TRUE(l.sp);
  EXPECT_EQ(l.dp, 2);
  EXPECT_EQ(l.zero, 2);
  EXPECT_EQ(a36.embedding.ulysses, 2);
  EXPECT_EQ(a36.embedding.tp, 1);
  EXPECT_EQ(a36.embedding.dp, 2);
  EXPECT_EQ(a36.embedding.zero, 2);
  // B36: layer 0 ZeRO-3 + checkpoint, layers 1-5 checkpoint; embedding ZeRO-3 over 8.
  const Plan b36 = ok(import_strategy(
      read_json_file(testing::reference_dir() + "/searched/galvatron_config_llama2-7b_2nodes_8gpus_per_node_36GB_bf16.json"),
      m, testing::cluster(2, 36), 2048));
  EXPECT_EQ(b36.stages[0].layers[0].zero, 3);
  EXPECT_EQ(b36.stages[0].layers[0].recompute, Recompute::kFull);
  EXPECT_EQ(b36.stages[0].layers[5].recompute, Recompute::kFull);
  EXPECT_EQ(b36.stages[0].layers[6].recompute, Recompute::kNone);
  EXPECT_EQ(b36.stages[0].layers[6].zero, 2);
  EXPECT_EQ(b36.embedding.zero, 3);
  EXPECT_EQ(b36.embedding.dp, 8);
}

}  // namespace
}  // namespace weft::galvatron
