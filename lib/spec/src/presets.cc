// Presets compiled in from data/ (cmake/embed_presets.cmake) and the name-or-file loaders.
#include "weft/spec/presets.h"

#include <filesystem>
#include <map>

#include "weft/spec/hf_config.h"

namespace weft::detail {
const std::map<std::string, std::string>& models_presets();
const std::map<std::string, std::string>& clusters_presets();
}  // namespace weft::detail

namespace weft {

namespace {

std::vector<std::string> keys(const std::map<std::string, std::string>& m) {
  std::vector<std::string> out;
  out.reserve(m.size());
  for (const auto& [k, v] : m) out.push_back(k);
  return out;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

Result<Json> preset_json(const std::map<std::string, std::string>& table, const std::string& kind,
                         const std::string& name) {
  auto it = table.find(name);
  if (it == table.end())
    return Error{ErrorKind::kBadInput,
                 "unknown " + kind + " preset \"" + name + "\" (known: " + join(keys(table)) + ")"};
  try {
    return Json::parse(it->second);
  } catch (const std::exception& e) {
    return Error{ErrorKind::kBadInput, kind + " preset \"" + name + "\": malformed JSON: " + e.what()};
  }
}

// True when s names something on disk or is written like a path, so a failure to read it is
// reported as a file error rather than as an unknown preset.
bool looks_like_file(const std::string& s) {
  std::error_code ec;
  if (std::filesystem::exists(s, ec)) return true;
  return s.find('/') != std::string::npos ||
         (s.size() > 5 && s.compare(s.size() - 5, 5, ".json") == 0);
}

}  // namespace

std::vector<std::string> model_preset_names() { return keys(detail::models_presets()); }
std::vector<std::string> cluster_preset_names() { return keys(detail::clusters_presets()); }

Result<Json> model_preset_json(const std::string& name) {
  return preset_json(detail::models_presets(), "model", name);
}

Result<Json> cluster_preset_json(const std::string& name) {
  return preset_json(detail::clusters_presets(), "cluster", name);
}

Result<ModelSpec> load_model(const std::string& name_or_path) {
  const auto& table = detail::models_presets();
  if (table.count(name_or_path)) {
    Result<Json> j = model_preset_json(name_or_path);
    if (!j.ok()) return j.error();
    return model_from_json(*j, name_or_path);
  }
  if (!looks_like_file(name_or_path))
    return Error{ErrorKind::kBadInput, "unknown model preset \"" + name_or_path +
                                           "\", and no such file (known presets: " +
                                           join(keys(table)) + ")"};
  return catch_errors([&]() -> Result<ModelSpec> {
    const Json j = read_json_file(name_or_path);
    if (is_hf_config(j)) return model_from_hf_config(j, name_or_path);
    return model_from_json(j, name_or_path);
  });
}

Result<ClusterSpec> load_cluster(const std::string& name_or_path) {
  const auto& table = detail::clusters_presets();
  if (table.count(name_or_path)) {
    Result<Json> j = cluster_preset_json(name_or_path);
    if (!j.ok()) return j.error();
    return cluster_from_json(*j, name_or_path);
  }
  if (!looks_like_file(name_or_path))
    return Error{ErrorKind::kBadInput, "unknown cluster preset \"" + name_or_path +
                                           "\", and no such file (known presets: " +
                                           join(keys(table)) + ")"};
  return catch_errors([&]() -> Result<ClusterSpec> {
    const Json j = read_json_file(name_or_path);
    return cluster_from_json(j, name_or_path);
  });
}

}  // namespace weft
