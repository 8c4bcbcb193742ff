#include "weft/spec/mixed.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "weft/core/format.h"
#include "weft/spec/presets.h"

namespace weft {

namespace {

Error bad(const std::string& msg) { return Error{ErrorKind::kBadInput, msg}; }

// The slowest inter-node link of the groups: the default between two groups.
LinkSpec slowest_inter(const std::vector<ClusterSpec>& groups) {
  LinkSpec l;
  for (const ClusterSpec& g : groups) {
    const LinkSpec& x = g.nodes > 1 || g.inter.gbps > 0 ? g.inter : g.intra;
    if (l.gbps == 0 || (x.gbps > 0 && x.gbps < l.gbps)) l.gbps = x.gbps;
    l.latency_us = std::max(l.latency_us, x.latency_us);
  }
  return l;
}

}  // namespace

int MixedCluster::total_gpus() const {
  int n = 0;
  for (const ClusterSpec& g : groups) n += g.total_gpus();
  return n;
}

int MixedCluster::group_of(int gpu) const {
  int first = 0;
  for (size_t i = 0; i < groups.size(); ++i) {
    first += groups[i].total_gpus();
    if (gpu < first) return static_cast<int>(i);
  }
  return static_cast<int>(groups.size()) - 1;
}

int MixedCluster::first_gpu(int group) const {
  int first = 0;
  for (int i = 0; i < group && i < static_cast<int>(groups.size()); ++i) first += groups[i].total_gpus();
  return first;
}

double MixedCluster::slowdown_of(int gpu) const {
  return gpu >= 0 && gpu < static_cast<int>(slowdown.size()) ? slowdown[gpu] : 1.0;
}

bool MixedCluster::heterogeneous() const {
  if (groups.size() > 1) return true;
  return std::any_of(slowdown.begin(), slowdown.end(), [](double f) { return f != 1.0; });
}

ClusterSpec MixedCluster::as_uniform() const {
  if (groups.size() == 1) return groups[0];
  ClusterSpec c = groups[0];
  c.name = name;
  const int total = total_gpus();
  c.nodes = total % c.gpus_per_node == 0 ? total / c.gpus_per_node : 1;
  if (total % groups[0].gpus_per_node != 0) c.gpus_per_node = total;
  // The slowest kind (by its bf16, else fp16, else fp32 peak), with the least memory of any group.
  auto speed = [](const GpuSpec& g) {
    return g.tflops_bf16 > 0 ? g.tflops_bf16 : g.tflops_fp16 > 0 ? g.tflops_fp16 : g.tflops_fp32;
  };
  double least = c.gpu.memory_gib;
  for (const ClusterSpec& g : groups) {
    if (speed(g.gpu) < speed(c.gpu)) c.gpu = g.gpu;
    least = std::min(least, g.gpu.memory_gib);
  }
  c.gpu.memory_gib = least;
  if (between.gbps > 0 && (c.inter.gbps <= 0 || between.gbps < c.inter.gbps)) c.inter = between;
  return c;
}

MixedCluster mixed_of(const ClusterSpec& c) {
  MixedCluster m;
  m.name = c.name;
  m.groups = {c};
  m.between = c.inter;
  return m;
}

Status validate(const MixedCluster& m) {
  if (m.groups.empty()) return bad("groups: at least one node group is needed");
  for (size_t i = 0; i < m.groups.size(); ++i) {
    Status st = validate(m.groups[i]);
    if (!st.ok()) return st.error().with_context("groups[" + std::to_string(i) + "]");
  }
  if (m.groups.size() > 1 && m.between.gbps <= 0)
    return bad("between_groups.gbps: must be positive for " + std::to_string(m.groups.size()) + " groups, got " +
               num(m.between.gbps));
  if (!m.slowdown.empty() && static_cast<int>(m.slowdown.size()) != m.total_gpus())
    return bad("slowdown: " + std::to_string(m.slowdown.size()) + " factors for " + std::to_string(m.total_gpus()) +
               " GPUs");
  for (size_t i = 0; i < m.slowdown.size(); ++i)
    if (!(m.slowdown[i] > 0) || !std::isfinite(m.slowdown[i]))
      return bad("slowdown[" + std::to_string(i) + "]: must be a positive factor, got " + num(m.slowdown[i]));
  return {};
}

Json to_json(const MixedCluster& m) {
  Json j;
  j["name"] = m.name;
  Json groups = Json::array();
  for (const ClusterSpec& g : m.groups) groups.push_back(to_json(g));
  j["groups"] = std::move(groups);
  j["between_groups"] = {{"gbps", m.between.gbps}, {"latency_us", m.between.latency_us}};
  if (!m.slowdown.empty()) j["slowdown"] = m.slowdown;
  return j;
}

Result<MixedCluster> mixed_cluster_from_json(const Json& j, const std::string& path) {
  if (!j.is_object() || !j.contains("groups")) {
    auto c = cluster_from_json(j, path);
    if (!c.ok()) return c.error();
    return mixed_of(*c);
  }
  return catch_errors([&]() -> Result<MixedCluster> {
    JsonObj o(j, path);
    o.reject_unknown({"name", "groups", "between_groups", "slowdown"});
    MixedCluster m;
    m.name = o.str_or("name", "mixed");
    const std::vector<JsonObj> groups = o.array_of_obj("groups");
    if (groups.empty()) o.fail("groups", "at least one node group is needed");
    for (size_t i = 0; i < groups.size(); ++i) {
      const JsonObj& g = groups[i];
      if (g.has("preset")) {
        g.reject_unknown({"preset", "nodes"});
        auto c = load_cluster(g.str("preset"));
        if (!c.ok()) g.fail("preset", c.error().message);
        ClusterSpec cs = std::move(c).value();
        cs.nodes = static_cast<int>(g.integer_or("nodes", 1));
        if (cs.nodes <= 0) g.fail("nodes", "must be positive, got " + std::to_string(cs.nodes));
        m.groups.push_back(cs);
      } else {
        auto c = cluster_from_json(g.json(), g.path());
        if (!c.ok()) return c.error();
        m.groups.push_back(std::move(c).value());
      }
    }
    m.between = slowest_inter(m.groups);
    if (o.has("between_groups")) {
      JsonObj b = o.obj("between_groups");
      b.reject_unknown({"gbps", "latency_us"});
      m.between.gbps = b.number("gbps");
      m.between.latency_us = b.number_or("latency_us", m.between.latency_us);
    }
    if (o.has("slowdown")) m.slowdown = o.array_of_number("slowdown");
    Status st = validate(m);
    if (!st.ok()) return st.error().with_context(path);
    return m;
  });
}

Result<MixedCluster> load_mixed_cluster(const std::string& arg) {
  const bool list = arg.find(',') != std::string::npos ||
                    (arg.find(':') != std::string::npos && !std::filesystem::exists(arg));
  if (!list) {
    const auto names = cluster_preset_names();
    if (std::find(names.begin(), names.end(), arg) != names.end()) {
      auto c = load_cluster(arg);
      if (!c.ok()) return c.error();
      return mixed_of(*c);
    }
    auto j = catch_errors([&]() -> Result<Json> { return read_json_file(arg); });
    if (!j.ok()) {
      auto c = load_cluster(arg);  // its error names the known presets
      if (!c.ok()) return c.error();
      return mixed_of(*c);
    }
    return mixed_cluster_from_json(*j, arg);
  }
  // "preset:nodes,preset:nodes"
  MixedCluster m;
  m.name = arg;
  size_t start = 0;
  while (start <= arg.size()) {
    const size_t end = std::min(arg.find(',', start), arg.size());
    const std::string item = arg.substr(start, end - start);
    const size_t colon = item.find(':');
    const std::string preset = item.substr(0, colon);
    int nodes = 1;
    if (colon != std::string::npos) {
      const std::string n = item.substr(colon + 1);
      char* tail = nullptr;
      const long v = std::strtol(n.c_str(), &tail, 10);
      if (n.empty() || *tail != '\0' || v <= 0)
        return bad("--cluster: \"" + item + "\": nodes must be a positive integer, got \"" + n + "\"");
      nodes = static_cast<int>(v);
    }
    if (preset.empty()) return bad("--cluster: \"" + arg + "\": an empty preset name in the list");
    const auto names = cluster_preset_names();
    if (std::find(names.begin(), names.end(), preset) == names.end()) {
      std::string known;
      for (const auto& x : names) known += (known.empty() ? "" : ", ") + x;
      return bad("--cluster: unknown preset \"" + preset + "\" in \"" + arg + "\" (known presets: " + known + ")");
    }
    auto c = load_cluster(preset);
    if (!c.ok()) return c.error();
    ClusterSpec cs = std::move(c).value();
    cs.nodes = nodes;
    m.groups.push_back(cs);
    if (end == arg.size()) break;
    start = end + 1;
  }
  m.between = slowest_inter(m.groups);
  Status st = validate(m);
  if (!st.ok()) return st.error().with_context("--cluster");
  return m;
}

Status add_straggler(MixedCluster& m, const std::string& arg) {
  const size_t colon = arg.find(':');
  if (colon == std::string::npos)
    return bad("--straggler: \"" + arg + "\" is not GPU:FACTOR (e.g. 1:2.0, GPU 1 at half speed)");
  const std::string g = arg.substr(0, colon), f = arg.substr(colon + 1);
  char* tail = nullptr;
  const long gpu = std::strtol(g.c_str(), &tail, 10);
  if (g.empty() || *tail != '\0') return bad("--straggler: \"" + arg + "\": GPU \"" + g + "\" is not an integer");
  const double factor = std::strtod(f.c_str(), &tail);
  if (f.empty() || *tail != '\0') return bad("--straggler: \"" + arg + "\": factor \"" + f + "\" is not a number");
  const int n = m.total_gpus();
  if (gpu < 0 || gpu >= n)
    return bad("--straggler: GPU " + std::to_string(gpu) + " is out of range (the cluster has GPUs 0-" +
               std::to_string(n - 1) + ")");
  if (!(factor > 0) || !std::isfinite(factor))
    return bad("--straggler: GPU " + std::to_string(gpu) + ": the factor must be > 0, got " + f);
  if (m.slowdown.empty()) m.slowdown.assign(n, 1.0);
  m.slowdown[gpu] = factor;
  return {};
}

}  // namespace weft
