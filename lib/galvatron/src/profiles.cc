// Readers for Galvatron's profile files. Key grammar and units: SEARCH_AND_COST_MODEL.md §3.
#include "weft/galvatron/profiles.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <regex>
#include <set>

#include "weft/core/format.h"

namespace weft::galvatron {

namespace fs = std::filesystem;

namespace {

std::string join_ints(const std::set<int>& xs) {
  std::string out;
  for (int x : xs) out += (out.empty() ? "" : ", ") + S(x);
  return out;
}

double number_at(const Json& j, const std::string& where) {
  if (!j.is_number()) throw InputError(where + ": expected a number, got " + j.dump());
  return j.get<double>();
}

const Json& key_at(const Json& j, const std::string& key, const std::string& where) {
  if (!j.is_object()) throw InputError(where + ": expected an object, got " + j.dump().substr(0, 40));
  auto it = j.find(key);
  // `where` is "file:" at the top level ("file: key: ...") or "file: a.b" inside ("file: a.b.key: ...").
  const std::string field = where.back() == ':' ? where + " " + key : where + "." + key;
  if (it == j.end()) throw InputError(field + ": missing required field");
  return *it;
}

int to_int(const std::string& s) { return std::stoi(s); }

}  // namespace

// ---------------------------------------------------------------------------------------------
// Curves and tables

double TimeCurve::at(double batch) const {
  if (ms_per_sample.empty()) return 0;
  auto hi = ms_per_sample.lower_bound(static_cast<int>(std::ceil(batch)));
  if (hi == ms_per_sample.begin()) return hi->second;
  if (hi == ms_per_sample.end()) return std::prev(hi)->second;
  if (hi->first == batch) return hi->second;
  auto lo = std::prev(hi);
  const double w = (batch - lo->first) / (hi->first - lo->first);
  return lo->second + w * (hi->second - lo->second);
}

double LayerMemory::act(int tp_sp, const std::string& path) const {
  auto it = act_per_sample_mb.find(tp_sp);
  if (it == act_per_sample_mb.end())
    throw InputError(path + ": tp_activation_per_bsz_dict has no entry for degree " + S(tp_sp));
  return it->second;
}

double OtherMemory::states(int tp, const std::string& path) const {
  auto it = model_states_mb.find(tp);
  if (it == model_states_mb.end()) throw InputError(path + ": other model_states has no entry for tp " + S(tp));
  return it->second;
}

double OtherMemory::act(int tp_sp, const std::string& path) const {
  auto it = activation_mb.find(tp_sp);
  if (it == activation_mb.end()) throw InputError(path + ": other activation has no entry for degree " + S(tp_sp));
  return it->second;
}

double CollectiveTable::time_ms(double mb) const {
  auto it = ms_by_mb.find(mb);
  if (it != ms_by_mb.end()) return it->second;
  return slope * mb + intercept;
}

double HardwareTables::busbw(int group, bool consecutive) const {
  auto it = allreduce_busbw.find({group, consecutive});
  return it == allreduce_busbw.end() ? 0.0 : it->second;
}

// ---------------------------------------------------------------------------------------------
// Computation profile

Result<ComputationProfile> computation_profile_from_json(const Json& j, const std::string& path, int seq) {
  return catch_errors([&]() -> ComputationProfile {
    if (!j.is_object()) throw InputError(path + ": expected an object of \"layertype_*\" keys");
    static const std::regex derived(R"(layertype_(\d+|other)_bsz(\d+)_seq(\d+))");
    static const std::regex raw(R"(layernum\[(\d+)\]_bsz(\d+)_seq(\d+))");
    std::set<int> seqs;
    for (auto it = j.begin(); it != j.end(); ++it) {
      std::smatch m;
      if (std::regex_match(it.key(), m, derived) || std::regex_match(it.key(), m, raw)) seqs.insert(to_int(m[3]));
    }
    if (seqs.empty()) throw InputError(path + ": no \"layertype_{i}_bsz{b}_seq{s}\" or \"layernum[n]_bsz{b}_seq{s}\" keys");
    if (seq == 0) {
      if (seqs.size() != 1)
        throw InputError(path + ": profiles for several sequence lengths (" + join_ints(seqs) +
                         "); give the sequence length");
      seq = *seqs.begin();
    } else if (!seqs.count(seq)) {
      throw InputError(path + ": no entry for sequence length " + S(seq) + " (the file has " + join_ints(seqs) + ")");
    }
    ComputationProfile cp;
    cp.path = path;
    cp.seq = seq;
    std::map<int, TimeCurve> types;
    // raw: layer count -> batch -> total forward ms of a model with that many layers
    std::map<int, std::map<int, double>> raw_ms;
    for (auto it = j.begin(); it != j.end(); ++it) {
      std::smatch m;
      const std::string key = it.key();
      if (std::regex_match(key, m, derived)) {
        if (to_int(m[3]) != seq) continue;
        const int b = to_int(m[2]);
        const double v = number_at(*it, path + ": " + key);
        if (!(v > 0)) throw InputError(path + ": " + key + ": forward time must be positive, got " + it->dump());
        TimeCurve& c = (m[1] == "other") ? cp.other : types[to_int(m[1])];
        if (c.ms_per_sample.empty()) c.first_batch = b;
        c.ms_per_sample[b] = v;
      } else if (std::regex_match(key, m, raw)) {
        if (to_int(m[3]) != seq) continue;
        raw_ms[to_int(m[1])][to_int(m[2])] = number_at(*it, path + ": " + key);
      }
    }
    if (types.empty() && raw_ms.size() >= 2) {
      // Galvatron's derivation from two layer counts a < b: per layer = (T_b - T_a) / batch / (b - a),
      // other = (T_a - a * batch * per_layer) / batch.
      const int a = raw_ms.begin()->first, bl = std::next(raw_ms.begin())->first;
      TimeCurve& c = types[0];
      for (const auto& [batch, ta] : raw_ms[a]) {
        auto tb = raw_ms[bl].find(batch);
        if (tb == raw_ms[bl].end()) continue;
        const double per = (tb->second - ta) / batch / (bl - a);
        if (c.ms_per_sample.empty()) c.first_batch = batch;
        if (cp.other.ms_per_sample.empty()) cp.other.first_batch = batch;
        c.ms_per_sample[batch] = per;
        cp.other.ms_per_sample[batch] = (ta - a * batch * per) / batch;
      }
    }
    if (types.empty())
      throw InputError(path + ": layertype_0_bsz{b}_seq" + S(seq) + ": missing required field (no per-layer time)");
    for (int i = 0; i < static_cast<int>(types.size()); ++i) {
      if (!types.count(i))
        throw InputError(path + ": layertype_" + S(i) + "_bsz{b}_seq" + S(seq) + ": missing required field");
      cp.layer_types.push_back(types[i]);
    }
    if (cp.other.ms_per_sample.empty())
      throw InputError(path + ": layertype_other_bsz{b}_seq" + S(seq) + ": missing required field");
    return cp;
  });
}

Result<ComputationProfile> read_computation_profile(const std::string& path, int seq) {
  auto j = catch_errors([&] { return read_json_file(path); });
  if (!j.ok()) return j.error();
  return computation_profile_from_json(*j, path, seq);
}

// ---------------------------------------------------------------------------------------------
// Memory profile

namespace {

std::map<int, double> degree_map(const Json& j, const std::string& where, double* checkpoint) {
  if (!j.is_object()) throw InputError(where + ": expected an object keyed by degree");
  std::map<int, double> out;
  static const std::regex deg(R"(\d+)");
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "checkpoint" && checkpoint) {
      *checkpoint = number_at(*it, where + ".checkpoint");
      continue;
    }
    if (!std::regex_match(it.key(), deg)) throw InputError(where + "." + it.key() + ": expected a degree key");
    out[to_int(it.key())] = number_at(*it, where + "." + it.key());
  }
  if (out.empty()) throw InputError(where + ": no degrees listed");
  return out;
}

OtherMemory other_memory(const Json& root, const std::string& key, const std::string& seq, const std::string& path) {
  const Json& k = key_at(root, key, path + ":");
  const Json& s = key_at(k, seq, path + ": " + key);
  const std::string where = path + ": " + key + "." + seq;
  OtherMemory o;
  o.model_states_mb = degree_map(key_at(s, "model_states", where), where + ".model_states", nullptr);
  o.activation_mb = degree_map(key_at(s, "activation", where), where + ".activation", nullptr);
  return o;
}

}  // namespace

Result<MemoryProfile> memory_profile_from_json(const Json& j, const std::string& path, int seq) {
  return catch_errors([&]() -> MemoryProfile {
    if (!j.is_object()) throw InputError(path + ": expected an object");
    MemoryProfile mp;
    mp.path = path;
    mp.sequence_parallel_keys = j.contains("layertype_0_sp");
    const std::string suffix = mp.sequence_parallel_keys ? "_sp" : "";
    if (!j.contains("layertype_0" + suffix))
      throw InputError(path + ": layertype_0_sp: missing required field (nor layertype_0)");
    // Sequence lengths the file holds.
    std::set<int> seqs;
    for (auto it = j["layertype_0" + suffix].begin(); it != j["layertype_0" + suffix].end(); ++it)
      seqs.insert(to_int(it.key()));
    if (seq == 0) {
      if (seqs.size() != 1)
        throw InputError(path + ": layertype_0" + suffix + ": several sequence lengths (" + join_ints(seqs) +
                         "); give the sequence length");
      seq = *seqs.begin();
    }
    if (!seqs.count(seq))
      throw InputError(path + ": layertype_0" + suffix + ": no entry for sequence length " + S(seq) +
                       " (the file has " + join_ints(seqs) + ")");
    mp.seq = seq;
    const std::string sk = S(seq);
    for (int i = 0;; ++i) {
      const std::string key = "layertype_" + S(i) + suffix;
      if (!j.contains(key)) break;
      const std::string where = path + ": " + key + "." + sk;
      const Json& e = key_at(j[key], sk, path + ": " + key);
      LayerMemory lm;
      lm.parameter_mb = number_at(key_at(e, "parameter_size", where), where + ".parameter_size");
      double ck = -1;
      lm.act_per_sample_mb = degree_map(key_at(e, "tp_activation_per_bsz_dict", where),
                                        where + ".tp_activation_per_bsz_dict", &ck);
      if (ck < 0) throw InputError(where + ".tp_activation_per_bsz_dict.checkpoint: missing required field");
      lm.checkpoint_mb = ck;
      if (!(lm.parameter_mb > 0)) throw InputError(where + ".parameter_size: must be positive");
      mp.layer_types.push_back(std::move(lm));
    }
    mp.pp_off = other_memory(j, "other_memory_pp_off" + suffix, sk, path);
    mp.pp_first = other_memory(j, "other_memory_pp_on_first" + suffix, sk, path);
    mp.pp_last = other_memory(j, "other_memory_pp_on_last" + suffix, sk, path);
    return mp;
  });
}

Result<MemoryProfile> read_memory_profile(const std::string& path, int seq) {
  auto j = catch_errors([&] { return read_json_file(path); });
  if (!j.ok()) return j.error();
  return memory_profile_from_json(*j, path, seq);
}

// ---------------------------------------------------------------------------------------------
// Hardware profile

Result<HardwareTables> read_hardware_tables(const std::string& allreduce_path, const std::string& p2p_path,
                                              const std::string& overlap_path, const std::string& sp_time_path) {
  return catch_errors([&]() -> HardwareTables {
    HardwareTables hw;
    hw.allreduce_path = allreduce_path;
    hw.p2p_path = p2p_path;
    hw.overlap_path = overlap_path;
    hw.sp_time_path = sp_time_path;

    const Json ar = read_json_file(allreduce_path);
    if (!ar.is_object()) throw InputError(allreduce_path + ": expected an object");
    static const std::regex ark(R"(allreduce_size_(\d+)_consec_([01]))");
    for (auto it = ar.begin(); it != ar.end(); ++it) {
      std::smatch m;
      const std::string key = it.key();
      if (!std::regex_match(key, m, ark)) continue;
      const double bw = number_at(*it, allreduce_path + ": " + key);
      if (!(bw > 0)) throw InputError(allreduce_path + ": " + key + ": bandwidth must be positive, got " + it->dump());
      hw.allreduce_busbw[{to_int(m[1]), m[2] == "1"}] = bw;
    }
    if (hw.allreduce_busbw.empty())
      throw InputError(allreduce_path + ": allreduce_size_{g}_consec_{0|1}: missing required field (no entries)");

    const Json pp = read_json_file(p2p_path);
    if (!pp.is_object()) throw InputError(p2p_path + ": expected an object");
    static const std::regex ppk(R"(pp_size_(\d+))");
    for (auto it = pp.begin(); it != pp.end(); ++it) {
      std::smatch m;
      const std::string key = it.key();
      if (!std::regex_match(key, m, ppk)) continue;
      const double bw = number_at(*it, p2p_path + ": " + key);
      if (!(bw > 0)) throw InputError(p2p_path + ": " + key + ": bandwidth must be positive, got " + it->dump());
      hw.p2p_bw[to_int(m[1])] = bw;
    }
    if (hw.p2p_bw.empty()) throw InputError(p2p_path + ": pp_size_{k}: missing required field (no entries)");

    const Json ov = read_json_file(overlap_path);
    // Galvatron's profiler stores max(1, measured slow-down); a smaller value would mean overlap
    // speeds work up, so it is clamped the same way here.
    hw.overlap_coe = std::max(1.0, number_at(key_at(ov, "overlap_coe", overlap_path + ":"), overlap_path + ": overlap_coe"));

    if (!sp_time_path.empty()) {
      const Json sp = read_json_file(sp_time_path);
      if (!sp.is_object()) throw InputError(sp_time_path + ": expected an object");
      static const std::regex spk(R"((allreduce|all2all)_size_(\d+)_(\d+)MB_time)");
      for (auto it = sp.begin(); it != sp.end(); ++it) {
        std::smatch m;
        const std::string key = it.key();
        if (!std::regex_match(key, m, spk)) continue;
        auto& tables = m[1] == "allreduce" ? hw.allreduce_ms : hw.all2all_ms;
        tables[to_int(m[2])].ms_by_mb[to_int(m[3])] = number_at(*it, sp_time_path + ": " + key);
      }
      for (auto* tables : {&hw.allreduce_ms, &hw.all2all_ms}) {
        for (auto& [g, t] : *tables) {
          if (t.ms_by_mb.size() < 2)
            throw InputError(sp_time_path + ": group " + S(g) + " has " + S(t.ms_by_mb.size()) +
                             " message sizes; the linear fit needs at least 2");
          // Ordinary least squares of time on message size (what Galvatron's curve_fit of m*x+c gives).
          double n = 0, sx = 0, sy = 0;
          for (auto [x, y] : t.ms_by_mb) n += 1, sx += x, sy += y;
          const double mx = sx / n, my = sy / n;
          double sxy = 0, sxx = 0;
          for (auto [x, y] : t.ms_by_mb) sxy += (x - mx) * (y - my), sxx += (x - mx) * (x - mx);
          t.slope = sxy / sxx;
          t.intercept = my - t.slope * mx;
        }
      }
      if (hw.allreduce_ms.empty() && hw.all2all_ms.empty())
        throw InputError(sp_time_path + ": allreduce_size_{g}_{m}MB_time: missing required field (no entries)");
      hw.has_sp_time = true;
    }
    return hw;
  });
}

// ---------------------------------------------------------------------------------------------
// Folder loader

std::string computation_profile_name(const std::string& precision, const std::string& model) {
  return "computation_profiling_" + precision + "_" + model + "_all.json";
}
std::string memory_profile_name(const std::string& precision, const std::string& model) {
  return "memory_profiling_" + precision + "_" + model + "_all.json";
}
std::string allreduce_profile_name(int nodes, int gpus_per_node) {
  return "allreduce_bandwidth_" + S(nodes) + "nodes_" + S(gpus_per_node) + "gpus_per_node.json";
}
std::string p2p_profile_name(int nodes, int gpus_per_node) {
  return "p2p_bandwidth_" + S(nodes) + "nodes_" + S(gpus_per_node) + "gpus_per_node.json";
}
std::string sp_time_profile_name(int nodes, int gpus_per_node) {
  return "sp_time_" + S(nodes) + "nodes_" + S(gpus_per_node) + "gpus_per_node.json";
}

namespace {

// The path of `name` in dir, dir/configs or dir/hardware_configs; "" if none.
std::string find_in(const std::string& dir, const std::string& name) {
  for (const char* sub : {"", "configs", "hardware_configs"}) {
    fs::path p = fs::path(dir) / sub / name;
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  return "";
}

std::string require_file(const std::string& dir, const std::string& name, const std::string& what) {
  std::string p = find_in(dir, name);
  if (p.empty())
    throw InputError(name + ": " + what + " not found in " + dir + " (also looked in " + dir + "/configs and " + dir +
                         "/hardware_configs)",
                     ErrorKind::kIo);
  return p;
}

}  // namespace

Result<Profiles> load_profiles(const std::string& dir, const ProfileQuery& q) {
  return catch_errors([&]() -> Profiles {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) throw InputError(dir + ": profile folder does not exist", ErrorKind::kIo);
    require(!q.model_name.empty(), "galvatron profiles: the model name (model_size in the YAML) is empty");
    require(q.precision == "bf16" || q.precision == "fp16" || q.precision == "fp32",
            "galvatron profiles: precision must be bf16, fp16 or fp32, got \"" + q.precision + "\"");
    require(q.nodes >= 1 && q.gpus_per_node >= 1, "galvatron profiles: nodes and GPUs per node must be >= 1 (got " +
                                                      S(q.nodes) + " x " + S(q.gpus_per_node) + ")");
    Profiles p;
    p.dir = dir;
    p.model_name = q.model_name;
    p.precision = q.precision;

    auto unwrap = [](auto r) {
      if (!r.ok()) throw InputError(r.error().message, r.error().kind);
      return std::move(r).value();
    };
    const std::string comp =
        require_file(dir, computation_profile_name(q.precision, q.model_name), "computation profile");
    p.compute = unwrap(read_computation_profile(comp, q.seq));
    const std::string mem = require_file(dir, memory_profile_name(q.precision, q.model_name), "memory profile");
    p.memory = unwrap(read_memory_profile(mem, p.compute.seq));
    if (p.memory.layer_types.size() < p.compute.layer_types.size())
      throw InputError(mem + ": " + S(p.memory.layer_types.size()) + " layer types but " + comp + " has " +
                       S(p.compute.layer_types.size()));

    const std::string ar = require_file(dir, allreduce_profile_name(q.nodes, q.gpus_per_node), "all-reduce bandwidth profile");
    const std::string pp = require_file(dir, p2p_profile_name(q.nodes, q.gpus_per_node), "p2p bandwidth profile");
    const std::string ov = require_file(dir, "overlap_coefficient.json", "overlap coefficient");
    std::string sp = find_in(dir, sp_time_profile_name(q.nodes, q.gpus_per_node));
    if (sp.empty() && q.nodes > 1) {
      sp = find_in(dir, sp_time_profile_name(1, q.gpus_per_node));
      if (!sp.empty())
        p.notes.push_back("no " + sp_time_profile_name(q.nodes, q.gpus_per_node) + "; using " + sp +
                          " (tensor- and sequence-parallel groups stay inside one node)");
    }
    if (sp.empty())
      p.notes.push_back("no " + sp_time_profile_name(q.nodes, q.gpus_per_node) +
                        ": tensor- and sequence-parallel communication cannot be timed from measurements");
    p.hardware = unwrap(read_hardware_tables(ar, pp, ov, sp));
    p.hardware.nodes = q.nodes;
    p.hardware.gpus_per_node = q.gpus_per_node;
    return p;
  });
}

}  // namespace weft::galvatron
