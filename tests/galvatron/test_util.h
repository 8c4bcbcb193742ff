// Shared helpers for the Galvatron tests: temporary files, the reference cluster and the published
// cases.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "weft/core/json.h"
#include "weft/galvatron/cost_model.h"
#include "weft/galvatron/model_config.h"
#include "weft/galvatron/profiles.h"
#include "weft/spec/presets.h"

namespace weft::galvatron::testing {

inline std::string reference_dir() { return std::string(WEFT_DATA_DIR) + "/reference/galvatron"; }

// A fresh empty folder under the build tree.
inline std::string temp_dir(const std::string& name) {
  namespace fs = std::filesystem;
  fs::path p = fs::path(WEFT_BINARY_DIR) / "galvatron_test_tmp" / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

inline void write(const std::string& path, const std::string& text) { write_text_file(path, text); }

template <class T>
T ok(Result<T> r) {
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  if (!r.ok()) throw std::runtime_error(r.error().message);
  return std::move(r).value();
}

// An A100 cluster of nodes x 8 GPUs with Galvatron's memory_constraint in GB (x 1024 MB).
inline ClusterSpec cluster(int nodes, double memory_gb) {
  auto c = ok(load_cluster("a100-80gb"));
  ClusterOverrides o;
  o.gpus = nodes * 8;
  o.gpus_per_node = 8;
  o.memory_gb = memory_gb;
  return ok(apply_overrides(c, o));
}

// Galvatron's four published Llama-2-7B cases (SEARCH_AND_COST_MODEL.md §4, searched/README.md):
// A on one node, B on two, each at 36 GB and 80 GB of memory, seq 2048, global batch 64.
struct PublishedCase {
  const char* name;
  int nodes;
  double memory_gb;
  const char* file;                    // the strategy its search chose, under searched/
  double iteration_s;                  // Galvatron's prediction
  std::vector<long long> stage_mb;     // "memory used" per stage as Galvatron prints it
  TpSpMode mode;                       // the task its search chose (searched/README.md)
};

inline const std::vector<PublishedCase>& published_cases() {
  static const std::vector<PublishedCase> c{
      {"A36", 1, 36, "galvatron_config_llama2-7b_1nodes_8gpus_per_node_36GB_bf16.json", 3.871, {33837, 29645},
       TpSpMode::kTpWithSp},
      {"A80", 1, 80, "galvatron_config_llama2-7b_1nodes_8gpus_per_node_80GB_bf16.json", 3.527, {70639},
       TpSpMode::kTpOnly},
      {"B36", 2, 36, "galvatron_config_llama2-7b_2nodes_8gpus_per_node_36GB_bf16.json", 2.052, {36855, 35065},
       TpSpMode::kSpOnly},
      {"B80", 2, 80, "galvatron_config_llama2-7b_2nodes_8gpus_per_node_80GB_bf16.json", 1.809, {81800},
       TpSpMode::kTpOnly},
  };
  return c;
}

}  // namespace weft::galvatron::testing
