// Cost-model contexts for tests: a stage or a layer of a model on a cluster, built from its parts
// or from a preset model and cluster.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "weft/cost/cost_model.h"
#include "weft/spec/presets.h"

namespace weft::testing {

// Stage `stage` of `stages`, each stage `stage_size` devices. The context points at model and
// cluster, which must outlive it.
inline StageContext make_stage_context(const ModelSpec& model, const ClusterSpec& cluster, const TrainSettings& train,
                                       int stage, int stages, int stage_size) {
  return StageContext{&model, &cluster, train, stage, stages, stage_size};
}

// Global layer `layer` in stage `stage` of `stages` (as make_stage_context()).
inline LayerContext make_layer_context(const ModelSpec& model, const ClusterSpec& cluster, const TrainSettings& train,
                                       int stage, int stages, int stage_size, int layer) {
  return LayerContext{make_stage_context(model, cluster, train, stage, stages, stage_size), layer};
}

// A preset model on `nodes` nodes of a preset cluster, trained at seq 4096 and global batch 8 in
// `micro_batches` micro-batches, bf16, one pipeline stage (tests change `train` for more). A preset
// that does not load fails the test.
struct PresetSetup {
  ModelSpec model;
  ClusterSpec cluster;
  TrainSettings train;

  PresetSetup(const std::string& model_name, const std::string& cluster_name, int nodes = 1, int micro_batches = 8) {
    auto m = load_model(model_name);
    auto c = load_cluster(cluster_name);
    EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message);
    EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().message);
    model = *m;
    cluster = *c;
    cluster.nodes = nodes;
    train = TrainSettings{
        .seq = 4096, .global_batch = 8, .micro_batches = micro_batches, .pp = 1, .dtype = DType::kBf16};
  }
  // Layer i in stage `stage` of `stages`, each stage the cluster's GPUs over train.pp.
  LayerContext layer(int i, int stage = 0, int stages = 1) const {
    return make_layer_context(model, cluster, train, stage, stages, cluster.total_gpus() / train.pp, i);
  }
  StageContext stage(int s, int stages) const { return layer(0, s, stages); }
};

}  // namespace weft::testing
