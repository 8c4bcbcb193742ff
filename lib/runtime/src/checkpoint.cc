#include "weft/runtime/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

#include "weft/core/durable_file.h"
#include "weft/core/format.h"
#include "weft/core/json.h"

namespace weft::runtime {

namespace fs = std::filesystem;

namespace {

std::string rank_file(const std::string& step_dir, int r) {
  return (fs::path(step_dir) / ("rank-" + std::to_string(r) + ".bin")).string();
}

// Source rank files, read once each, checked against the index (entry names and sizes).
class SourceFiles {
 public:
  SourceFiles(std::string step_dir, const CheckpointIndex& idx) : dir_(std::move(step_dir)), idx_(idx) {}

  Result<const std::vector<float>*> entry(int r, int e) {
    auto it = files_.find(r);
    if (it == files_.end()) {
      auto f = read_params_file(rank_file(dir_, r));
      if (!f.ok()) return f.error();
      const auto& want = idx_.ranks[static_cast<size_t>(r)];
      if (f->params.size() != want.size())
        return Error{ErrorKind::kIo, rank_file(dir_, r) + ": " + std::to_string(f->params.size()) +
                                         " entries, the checkpoint's index.json lists " + std::to_string(want.size())};
      for (size_t i = 0; i < want.size(); ++i) {
        if (f->params[i].name != want[i].name)
          return Error{ErrorKind::kIo, rank_file(dir_, r) + ": entry " + std::to_string(i) + " is " + f->params[i].name +
                                           ", the checkpoint's index.json says " + want[i].name};
        if (static_cast<int64_t>(f->params[i].data.size()) != want[i].numel)
          return Error{ErrorKind::kIo, rank_file(dir_, r) + ": " + want[i].name + " holds " +
                                           std::to_string(f->params[i].data.size()) + " values, the index says " +
                                           std::to_string(want[i].numel)};
      }
      it = files_.emplace(r, std::move(f).value()).first;
    }
    return &it->second.params[static_cast<size_t>(e)].data;
  }

 private:
  std::string dir_;
  const CheckpointIndex& idx_;
  std::map<int, ParamsFile> files_;
};

Result<ParamsFile> reshard(const CheckpointIndex& idx, const Resharder& rs, SourceFiles& src, const Plan& next, int rank,
                           int step) {
  auto fills = rs.rank(next, rank);
  if (!fills.ok()) return fills.error();
  ParamsFile out;
  out.step = step;
  for (const EntryFill& f : *fills) {
    auto v = fill_entry(idx, f, [&](int r, int e) { return src.entry(r, e); });
    if (!v.ok()) return v.error();
    out.params.push_back({f.name, {f.numel}, std::move(v).value()});
  }
  return out;
}

// "0-3,6,8-9".
std::string rank_list(const std::set<int>& ranks) {
  std::string out;
  for (auto it = ranks.begin(); it != ranks.end();) {
    int a = *it, b = a;
    ++it;
    while (it != ranks.end() && *it == b + 1) b = *it++;
    if (!out.empty()) out += ",";
    out += b == a ? std::to_string(a) : std::to_string(a) + "-" + std::to_string(b);
  }
  return out;
}

// A write that throws InputError (kIo, naming the path: weft/core/json.h) as a Status.
template <class F>
Status written(F write) {
  auto r = catch_errors([&]() -> Result<int> {
    write();
    return 0;
  });
  if (!r.ok()) return r.error();
  return {};
}

// Each stage's ranks and its runs of layers with one strategy.
std::string layout_lines(const Plan& p) {
  std::string out;
  const int S = p.devices_per_stage();
  for (int g = 0; g < static_cast<int>(p.stages.size()); ++g) {
    const Stage& st = p.stages[static_cast<size_t>(g)];
    const int grp = stage_group(p, g);
    out += "    stage " + std::to_string(g) +
           (S == 1 ? " (rank " + std::to_string(grp) + "):"
                   : " (ranks " + std::to_string(grp * S) + "-" + std::to_string(grp * S + S - 1) + "):");
    if (g == 0) out += " embedding " + label(p.embedding) + ";";
    for (int i = 0; i < st.num_layers();) {
      int j = i;
      while (j + 1 < st.num_layers() && st.layers[static_cast<size_t>(j + 1)] == st.layers[static_cast<size_t>(i)]) ++j;
      const int a = st.first_layer + i, b = st.first_layer + j;
      out += " layers " + (a == b ? std::to_string(a) : std::to_string(a) + "-" + std::to_string(b)) + " " +
             label(st.layers[static_cast<size_t>(i)]) + ";";
      i = j + 1;
    }
    if (g + 1 == static_cast<int>(p.stages.size())) out += " head " + label(p.embedding) + ";";
    out.pop_back();
    out += "\n";
  }
  return out;
}

}  // namespace

std::string step_name(int step) {
  char b[32];
  std::snprintf(b, sizeof b, "step-%08d", step);
  return b;
}

std::vector<CheckpointEntry> list_checkpoints(const std::string& dir) {
  std::vector<CheckpointEntry> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    int step = 0;
    char tail = 0;
    if (!e.is_directory() || std::sscanf(name.c_str(), "step-%d%c", &step, &tail) != 1 || name != step_name(step))
      continue;
    out.push_back({step, e.path().string(), fs::exists(e.path() / "meta.json")});
  }
  std::sort(out.begin(), out.end(), [](const CheckpointEntry& a, const CheckpointEntry& b) { return a.step < b.step; });
  return out;
}

std::vector<std::string> checkpoints_to_prune(const std::vector<CheckpointEntry>& all, int newest, int keep) {
  std::vector<std::string> out;
  if (keep <= 0) return out;
  int kept = 1;  // `newest` itself, which `latest` names
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (!it->complete || it->step == newest) continue;
    if (kept < keep) ++kept;
    else out.push_back(it->path);
  }
  return out;
}

Result<std::string> checkpoint_step_dir(const std::string& dir, int step) {
  return catch_errors([&]() -> Result<std::string> {
    if (step >= 0) {
      const std::string sd = (fs::path(dir) / step_name(step)).string();
      if (!fs::exists(fs::path(sd) / "meta.json"))
        return Error{ErrorKind::kIo, dir + ": no complete checkpoint of step " + std::to_string(step) + " (no " + sd +
                                         "/meta.json)"};
      return sd;
    }
    const std::string latest = dir + "/latest";
    if (!fs::exists(latest)) return Error{ErrorKind::kIo, "no checkpoint in " + dir + " (no " + latest + ")"};
    std::string name = read_text_file(latest);
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    return dir + "/" + name;
  });
}

Result<CheckpointMeta> read_checkpoint_meta(const std::string& step_dir) {
  return catch_errors([&]() -> Result<CheckpointMeta> {
    const std::string path = step_dir + "/meta.json";
    const Json j = read_json_file(path);
    JsonObj o(j, path);
    if (o.str("format") != "weft-checkpoint") o.fail("format", "expected \"weft-checkpoint\", got \"" + o.str("format") + "\"");
    CheckpointMeta m;
    m.version = static_cast<int>(o.integer("version"));
    if (m.version < 1 || m.version > kCheckpointVersion)
      o.fail("version", "unsupported version " + std::to_string(m.version) + " (this weft reads 1 to " +
                            std::to_string(kCheckpointVersion) + ")");
    m.step = static_cast<int>(o.integer("step"));
    m.world = static_cast<int>(o.integer("world"));
    if (m.world < 1) o.fail("world", "expected at least 1 rank, got " + std::to_string(m.world));
    m.plan_hash = o.str("plan_hash");
    m.optimizer_steps = o.integer("optimizer_steps");
    return m;
  });
}

Status write_checkpoint_layout(const std::string& step_dir, const Plan& p) {
  Status s = write_plan_file(step_dir + "/plan.json", p);
  if (s.ok()) s = written([&] { write_json_file(step_dir + "/index.json", to_json(checkpoint_index(p))); });
  return s;
}

Status write_checkpoint_meta(const std::string& step_dir, const CheckpointMeta& meta) {
  return written([&] {
    write_json_file(step_dir + "/meta.json", Json{{"format", "weft-checkpoint"},
                                                  {"version", meta.version},
                                                  {"step", meta.step},
                                                  {"world", meta.world},
                                                  {"plan_hash", meta.plan_hash},
                                                  {"optimizer_steps", meta.optimizer_steps}});
  });
}

Status write_latest(const std::string& dir, int step) {
  return written([&] { write_text_file(dir + "/latest", step_name(step) + "\n"); });
}

Result<Plan> read_checkpoint_plan(const std::string& step_dir) {
  const std::string path = step_dir + "/plan.json";
  if (!fs::exists(path))
    return Error{ErrorKind::kBadInput, step_dir + ": written by an earlier weft (checkpoint format 1, no plan.json): "
                                                  "it loads only under the plan and world size that wrote it"};
  return read_plan_file(path);
}

Result<CheckpointIndex> read_checkpoint_index(const std::string& step_dir) {
  const std::string path = step_dir + "/index.json";
  if (!fs::exists(path))
    return Error{ErrorKind::kBadInput, step_dir + ": written by an earlier weft (checkpoint format 1, no index.json): "
                                                  "it loads only under the plan and world size that wrote it"};
  return catch_errors([&]() -> Result<CheckpointIndex> {
    const Json j = read_json_file(path);
    return checkpoint_index_from_json(j, path);
  });
}

Result<ParamsFile> rank_state(const std::string& step_dir, const CheckpointMeta& meta, const Plan& next,
                              const std::string& next_hash, int rank, bool* resharded) {
  const bool same = meta.world == next.world_size() && meta.plan_hash == next_hash;
  if (resharded) *resharded = !same;
  if (same) return read_params_file(rank_file(step_dir, rank));
  auto idx = read_checkpoint_index(step_dir);
  if (!idx.ok())
    return idx.error().with_context("checkpoint of " + std::to_string(meta.world) + " ranks under plan " +
                                    meta.plan_hash + ", this job has " + std::to_string(next.world_size()) +
                                    " ranks under plan " + next_hash);
  if (idx->world != meta.world)
    return Error{ErrorKind::kIo, step_dir + "/index.json: " + std::to_string(idx->world) + " ranks, meta.json says " +
                                     std::to_string(meta.world)};
  SourceFiles src(step_dir, *idx);
  auto f = reshard(*idx, Resharder(*idx), src, next, rank, meta.step);
  if (!f.ok()) return f.error().with_context(step_dir);
  return f;
}

Status convert_checkpoint(const std::string& src_dir, int step, const Plan& next, const std::string& out_dir,
                          const std::function<void(int)>& progress) {
  auto sd = checkpoint_step_dir(src_dir, step);
  if (!sd.ok()) return sd.error();
  auto meta = read_checkpoint_meta(*sd);
  if (!meta.ok()) return meta.error();
  auto idx = read_checkpoint_index(*sd);
  if (!idx.ok()) return idx.error();
  const std::string od = (fs::path(out_dir) / step_name(meta->step)).string();
  if (fs::exists(fs::path(od) / "meta.json"))
    return Error{ErrorKind::kIo, od + ": already holds a checkpoint of step " + std::to_string(meta->step)};
  std::error_code ec;
  const bool made = !fs::exists(od);
  fs::create_directories(od, ec);
  if (ec) return Error{ErrorKind::kIo, od + ": cannot create: " + ec.message()};
  // A failure leaves no step directory behind (one without meta.json would never be loaded, but
  // it would be clutter).
  auto failed = [&](Error e) {
    if (made) fs::remove_all(od, ec);
    return e;
  };
  SourceFiles src(*sd, *idx);
  const Resharder rs(*idx);
  for (int r = 0; r < next.world_size(); ++r) {
    if (progress) progress(r);
    auto f = reshard(*idx, rs, src, next, r, meta->step);
    if (!f.ok()) return failed(f.error().with_context(*sd));
    Status s = write_params_file(rank_file(od, r), *f);
    if (!s.ok()) return failed(s.error());
  }
  Status s = write_checkpoint_layout(od, next);
  if (!s.ok()) return failed(s.error());
  CheckpointMeta m = *meta;
  m.version = kCheckpointVersion;
  m.world = next.world_size();
  m.plan_hash = json_hash(to_json(next));
  s = write_checkpoint_meta(od, m);
  if (!s.ok()) return failed(s.error());
  return write_latest(out_dir, m.step);
}

Result<std::string> inspect_checkpoint(const std::string& dir, int step) {
  auto sd = checkpoint_step_dir(dir, step);
  if (!sd.ok()) return sd.error();
  auto meta = read_checkpoint_meta(*sd);
  if (!meta.ok()) return meta.error();
  std::string out = "checkpoint " + *sd + (step < 0 ? " (latest)" : "") + "\n";
  out += "  step " + std::to_string(meta->step) + ", optimizer steps " + std::to_string(meta->optimizer_steps) +
         ", written by " + std::to_string(meta->world) + (meta->world == 1 ? " rank" : " ranks") + ", format " +
         std::to_string(meta->version) + "\n";
  if (meta->version < 2) {
    out += "  format 1 names no layout (no plan.json, index.json): it loads only under the plan of hash " +
           meta->plan_hash + " on " + std::to_string(meta->world) + " ranks\n";
    return out;
  }
  auto plan = read_checkpoint_plan(*sd);
  if (!plan.ok()) return plan.error();
  auto idx = read_checkpoint_index(*sd);
  if (!idx.ok()) return idx.error();
  const Plan& p = *plan;
  out += "  plan " + meta->plan_hash + ": model " + p.model.name + ", pp " + std::to_string(p.train.pp) + " (" +
         to_string(p.train.schedule) + "), global batch " + std::to_string(p.train.global_batch) + " x seq " +
         std::to_string(p.train.seq) + ", " + std::to_string(p.train.micro_batches) +
         (p.train.micro_batches == 1 ? " micro-batch\n" : " micro-batches\n");
  out += layout_lines(p);
  out += "  files:\n";
  SourceFiles src(*sd, *idx);
  std::map<std::string, std::set<int>> holders;
  for (int r = 0; r < idx->world; ++r) {
    const auto& entries = idx->ranks[static_cast<size_t>(r)];
    int64_t values = 0;
    for (int e = 0; e < static_cast<int>(entries.size()); ++e) {
      auto v = src.entry(r, e);  // reads and checks the file against the index
      if (!v.ok()) return v.error();
      values += entries[static_cast<size_t>(e)].numel;
      for (const SavedPiece& pc : entries[static_cast<size_t>(e)].pieces) holders[pc.param].insert(r);
    }
    char line[160];
    std::snprintf(line, sizeof line, "    rank-%d.bin  %zu entries, %s values (%.1f MiB)\n", r, entries.size(),
                  grouped(static_cast<double>(values)).c_str(), static_cast<double>(values) * 4.0 / (1 << 20));
    out += line;
  }
  const IndexCoverage cov = index_coverage(*idx);
  int64_t params = 0;
  for (const auto& [name, shape] : cov.tensors) {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    params += n;
  }
  out += "  tensors: " + std::to_string(cov.tensors.size()) + ", " + grouped(static_cast<double>(params)) + " parameters";
  out += cov.gaps.empty() ? ", each held whole (parameters and both AdamW moments)\n" : ", NOT all held whole:\n";
  for (const std::string& g : cov.gaps) out += "    missing: " + g + "\n";
  for (const auto& [name, shape] : cov.tensors)
    out += "    " + name + " " + shape_label(shape) + (holders[name].size() == 1 ? "  rank " : "  ranks ") +
           rank_list(holders[name]) + "\n";
  if (!cov.gaps.empty()) return Error{ErrorKind::kIo, out + *sd + ": the checkpoint does not hold every tensor whole"};
  return out;
}

}  // namespace weft::runtime
