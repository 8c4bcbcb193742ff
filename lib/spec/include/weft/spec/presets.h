// Built-in presets, compiled into the binary from data/models/*.json and data/clusters/*.json.
#pragma once

#include <string>
#include <vector>

#include "weft/spec/cluster.h"
#include "weft/spec/model.h"

namespace weft {

std::vector<std::string> model_preset_names();
std::vector<std::string> cluster_preset_names();
// The preset's JSON text exactly as shipped; an error naming the known presets if unknown.
Result<Json> model_preset_json(const std::string& name);
Result<Json> cluster_preset_json(const std::string& name);

// Loads a model by preset name, weft model file, or Hugging Face config.json (detected by its
// "model_type" / "architectures" keys).
Result<ModelSpec> load_model(const std::string& name_or_path);
// Loads a cluster by preset name or file.
Result<ClusterSpec> load_cluster(const std::string& name_or_path);

}  // namespace weft
