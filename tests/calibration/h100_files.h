// The H100 measurements of data/reference/h100 and the one-GPU cluster they were taken on, for the
// tests that hold weft's analytic model to them.
#pragma once

#include <string>

#include "weft/spec/cluster.h"
#include "weft/spec/presets.h"

namespace weft::testing {

inline std::string h100_file(const std::string& f) { return std::string(WEFT_DATA_DIR) + "/reference/h100/" + f; }

// The h100-80gb preset as one node of one GPU.
inline ClusterSpec one_h100() {
  ClusterSpec c = *load_cluster("h100-80gb");
  c.nodes = 1;
  c.gpus_per_node = 1;
  return c;
}

}  // namespace weft::testing
