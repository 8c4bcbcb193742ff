// Shared helpers for the Galvatron tests: temporary files and the reference cases.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

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

}  // namespace weft::galvatron::testing
