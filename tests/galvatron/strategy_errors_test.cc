// Import errors and export refusals name the key or layer and the reason.
#include <gtest/gtest.h>

#include "test_util.h"
#include "weft/galvatron/strategy.h"

namespace weft::galvatron {
namespace {

using testing::ok;

// A 4-layer toy model on one node of 4 GPUs.
ModelSpec toy() {
  const std::string y = "model_size: toy\nhidden_size: 256\nnum_layers: 4\nnum_attention_heads: 8\n"
                        "ffn_hidden_size: 1024\nvocab_size: 1024\n";
  return ok(to_model_spec(ok(model_config_from_yaml(y, "toy.yaml"))));
}

ClusterSpec four() {
  auto c = ok(load_cluster("a100-80gb"));
  ClusterOverrides o;
  o.gpus = 4;
  o.gpus_per_node = 4;
  return ok(apply_overrides(c, o));
}

Json base() {
  return Json::parse(R"({"pp_deg": 2, "tp_sizes_enc": "2,2,1,1", "tp_consecutive_flags": "1,1,1,1",
    "dp_types_enc": "0,0,1,0", "use_sp": "0,0,0,0", "checkpoint": "0,1,0,0", "global_bsz": 8, "chunks": 4,
    "pp_division": "2,2", "pipeline_type": "pipedream_flush", "default_dp_type": "zero2", "vtp": 2, "vsp": 1,
    "embed_sdp": 0})");
}

std::string import_error(const Json& j) {
  auto r = import_strategy(j, toy(), four(), 128);
  return r.ok() ? std::string("(imported)") : r.error().message;
}

TEST(GalvatronStrategy, ImportsAndExportsAToyStrategy) {
  const Plan p = ok(import_strategy(base(), toy(), four(), 128));
  EXPECT_EQ(p.stages[0].layers[0].tp, 2);
  EXPECT_EQ(p.stages[0].layers[0].dp, 1);
  EXPECT_EQ(p.stages[0].layers[0].zero, 0);  // dp = 1: DDP whatever the default
  EXPECT_EQ(p.stages[0].layers[1].recompute, Recompute::kFull);
  EXPECT_EQ(p.stages[1].layers[0].zero, 3);
  EXPECT_EQ(p.stages[1].layers[1].zero, 2);
  EXPECT_EQ(p.embedding.ulysses, 2);
  const Json out = ok(export_strategy(p));
  Json expected = base();
  for (auto it = expected.begin(); it != expected.end(); ++it) EXPECT_EQ(out.at(it.key()), it.value()) << it.key();
  EXPECT_EQ(out.at("world_size"), 4);
  EXPECT_FALSE(out.contains("cp_sizes_enc"));
}

TEST(GalvatronStrategy, ContextParallelRoundTrips) {
  Json j = base();
  j["tp_sizes_enc"] = "1,1,1,1";
  j["cp_sizes_enc"] = "2,2,1,1";
  j["vcp"] = 1;
  const Plan p = ok(import_strategy(j, toy(), four(), 128));
  EXPECT_EQ(p.stages[0].layers[0].cp, 2);
  EXPECT_EQ(p.stages[0].layers[0].dp, 1);
  const Json out = ok(export_strategy(p));
  EXPECT_EQ(out.at("cp_sizes_enc"), "2,2,1,1");
  EXPECT_EQ(out.at("vcp"), 1);
}

TEST(GalvatronStrategy, ImportErrorsNameTheKey) {
  Json j = base();
  j["tp_sizes_enc"] = "2,2,1";
  EXPECT_NE(import_error(j).find("tp_sizes_enc: 3 entries but the model (4 layers) has 4"), std::string::npos)
      << import_error(j);
  j = base();
  j["tp_consecutive_flags"] = "1,0,1,1";
  EXPECT_NE(import_error(j).find("tp_consecutive_flags: layer 1 is 0"), std::string::npos) << import_error(j);
  j = base();
  j["world_size"] = 8;
  EXPECT_NE(import_error(j).find("world_size: 8 but the cluster has 4 GPUs"), std::string::npos) << import_error(j);
  j = base();
  j["pp_division"] = "3,2";
  EXPECT_NE(import_error(j).find("pp_division: covers 5 layers but the model has 4"), std::string::npos)
      << import_error(j);
  j = base();
  j["tp_sizes_enc"] = "2,x,1,1";
  EXPECT_NE(import_error(j).find("tp_sizes_enc: element 1 is \"x\""), std::string::npos) << import_error(j);
  j = base();
  j["tp_sizes_enc"] = "4,2,1,1";
  EXPECT_NE(import_error(j).find("layer 0: tp_sp=4 x cp=1 does not divide the 2 GPUs of a stage"), std::string::npos)
      << import_error(j);
  j = base();
  j["tp_size_enc"] = "1";
  EXPECT_NE(import_error(j).find("tp_size_enc"), std::string::npos) << import_error(j);
  j = base();
  j.erase("chunks");
  EXPECT_NE(import_error(j).find("chunks: missing required field"), std::string::npos) << import_error(j);
  j = base();
  j["pipeline_type"] = "zigzag";
  EXPECT_NE(import_error(j).find("pipeline_type"), std::string::npos);
  j = base();
  j["chunks"] = 3;  // plan validation: 3 does not divide the global batch of 8
  EXPECT_NE(import_error(j).find("galvatron strategy: train.micro_batches"), std::string::npos) << import_error(j);
}

std::string export_error(const Plan& p) {
  auto r = export_strategy(p);
  return r.ok() ? std::string("(exported)") : r.error().message;
}

TEST(GalvatronStrategy, RefusesWhatGalvatronCannotExpress) {
  const Plan good = ok(import_strategy(base(), toy(), four(), 128));
  Plan p = good;
  p.stages[1].layers[1].zero = 1;
  EXPECT_NE(export_error(p).find("layer 3: ZeRO-1"), std::string::npos) << export_error(p);
  p = good;
  p.stages[0].layers[0].recompute = Recompute::kSelective;
  EXPECT_NE(export_error(p).find("layer 0: selective recompute"), std::string::npos) << export_error(p);
  p = good;
  p.stages[0].layers[1].sp = false;  // layer 0 keeps Megatron-SP
  EXPECT_NE(export_error(p).find("layer 1: Megatron sequence parallelism is off here but on at layer 0"),
            std::string::npos)
      << export_error(p);
  p = good;
  p.stages[1].layers[0].zero = 2;  // ZeRO-2 on one dp=2 layer,
  p.stages[1].layers[1].zero = 0;  // DDP on the other
  EXPECT_NE(export_error(p).find("ZeRO-2 and others DDP"), std::string::npos) << export_error(p);
  p = good;
  p.train.schedule = Schedule::kInterleaved;
  p.train.vp = 2;
  EXPECT_NE(export_error(p).find("interleaved"), std::string::npos);
  p = good;
  p.train.schedule = Schedule::kZbH1;
  EXPECT_NE(export_error(p).find("train.schedule: zb-h1 (pp=" + std::to_string(p.train.pp) +
                                 ") has no Galvatron equivalent"),
            std::string::npos)
      << export_error(p);
  p = good;
  p.train.schedule = Schedule::kZbV;
  p.train.vp = 2;
  EXPECT_NE(export_error(p).find("train.schedule: zb-v (pp=" + std::to_string(p.train.pp) +
                                 ", two model chunks per device group in a V) has no Galvatron equivalent"),
            std::string::npos)
      << export_error(p);
  p = good;
  p.embedding.recompute = Recompute::kFull;
  EXPECT_NE(export_error(p).find("embedding"), std::string::npos);
  p = good;
  p.stages[0].layers[0] = LayerStrategy{};
  p.stages[0].layers[0].tp = 2;
  p.stages[0].layers[0].ulysses = 2;
  p.stages[0].layers[0].dp = 1;
  EXPECT_NE(export_error(p).find("layer 0: tp=2 and ulysses=2 in one layer"), std::string::npos) << export_error(p);
  // All dp > 1 layers DDP: exported with default_dp_type ddp.
  p = good;
  p.stages[1].layers[1].zero = 0;
  p.embedding.zero = 0;
  const Json ddp = ok(export_strategy(p));
  EXPECT_EQ(ddp.at("default_dp_type"), "ddp");
  // Uneven stages are kept.
  Json uneven = base();
  uneven["pp_division"] = "1,3";
  uneven["tp_sizes_enc"] = "2,1,1,1";
  const Plan u = ok(import_strategy(uneven, toy(), four(), 128));
  EXPECT_EQ(ok(export_strategy(u)).at("pp_division"), "1,3");
}

}  // namespace
}  // namespace weft::galvatron
