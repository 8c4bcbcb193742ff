#include "state.h"

#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

#include "weft/core/json.h"

namespace weft::runtime {

namespace fs = std::filesystem;

namespace {

std::vector<float> to_vec(const at::Tensor& t) {
  at::Tensor c = t.detach().to(at::kCPU, at::kFloat).contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

at::Tensor from_vec(const std::vector<float>& v) {
  return at::from_blob(const_cast<float*>(v.data()), {static_cast<int64_t>(v.size())}, at::kFloat).clone();
}

// This rank's local parameters in spec order (zero 3: all-gathered over the unit's sync group,
// collectively).
std::vector<at::Tensor> local_params(Unit& u) {
  at::NoGradGuard ng;
  std::vector<at::Tensor> out;
  if (u.spec.zero < 3) {
    for (auto& l : u.leaves) out.push_back(l.detach());
    return out;
  }
  at::Tensor full = at::empty({u.spec.padded}, u.shard_grad.options());
  u.sync->allgather_into_async(full, u.shard_leaf.detach()).wait();
  for (const auto& p : u.spec.params) out.push_back(full.narrow(0, p.offset, p.numel()).view(p.local_shape));
  return out;
}

std::string step_dir(const std::string& dir, int step) {
  char b[32];
  std::snprintf(b, sizeof b, "step-%08d", step);
  return (fs::path(dir) / b).string();
}

}  // namespace

ParamsFile consolidate(Model& m, GroupSet& g, int step) {
  const Plan& p = m.plan();
  const int rank = g.rank();
  Comm& world = g.world();
  std::vector<Pending> sends;
  std::map<std::string, at::Tensor> full;
  int tag = 0;
  for (Unit& u : m.units()) {
    std::vector<at::Tensor> ps = local_params(u);
    if (u.spec.sync_ranks.front() != rank) continue;
    for (size_t i = 0; i < ps.size(); ++i) {
      const ParamSpec& s = u.spec.params[i];
      if (!s.counted) continue;
      if (rank != 0) {
        sends.push_back(world.send(ps[i].contiguous(), 0, tag++));
      } else {
        at::Tensor& f = full[s.name];
        if (!f.defined()) f = at::zeros(s.full_shape, at::kFloat);
        (s.shard_dim >= 0 ? f.narrow(s.shard_dim, s.shard_start, s.shard_len) : f).copy_(ps[i]);
      }
    }
  }
  ParamsFile out;
  out.step = step;
  if (rank == 0) {
    for (int r = 1; r < g.world_size(); ++r) {
      int rtag = 0;
      for (const UnitSpec& u : unit_specs(p, r)) {
        if (u.sync_ranks.front() != r) continue;
        for (const ParamSpec& s : u.params) {
          if (!s.counted) continue;
          at::Tensor piece = at::empty(s.local_shape, at::kFloat);
          world.recv(piece, r, rtag++);
          at::Tensor& f = full[s.name];
          if (!f.defined()) f = at::zeros(s.full_shape, at::kFloat);
          (s.shard_dim >= 0 ? f.narrow(s.shard_dim, s.shard_start, s.shard_len) : f).copy_(piece);
        }
      }
    }
    std::set<std::string> seen;
    const int S = p.devices_per_stage();
    for (int st = 0; st < p.train.pp; ++st)
      for (const UnitSpec& u : unit_specs(p, st * S))
        for (const ParamSpec& s : u.params) {
          if (!seen.insert(s.name).second) continue;
          out.params.push_back({s.name, s.full_shape, to_vec(full.at(s.name))});
        }
  }
  for (auto& s : sends) s.wait();
  world.barrier();
  return out;
}

Status save_checkpoint(const std::string& dir, int step, Model& m, Optimizer& o, GroupSet& g,
                       const std::string& plan_hash, int keep) {
  const std::string sd = step_dir(dir, step);
  std::error_code ec;
  fs::create_directories(sd, ec);
  if (ec) return Error{ErrorKind::kIo, sd + ": cannot create: " + ec.message()};
  ParamsFile f;
  f.step = step;
  for (Unit& u : m.units()) {
    at::Tensor params = u.spec.zero == 3 ? u.shard_leaf.detach() : u.flat.narrow(0, 0, u.spec.numel);
    f.params.push_back({u.spec.name + ".params", {params.numel()}, to_vec(params)});
    f.params.push_back({u.spec.name + ".adam_m", {u.m.numel()}, to_vec(u.m)});
    f.params.push_back({u.spec.name + ".adam_v", {u.v.numel()}, to_vec(u.v)});
  }
  const std::string file = sd + "/rank-" + std::to_string(g.rank()) + ".bin";
  Status s = write_params_file(file, f);
  // Every rank reports; a failed write on any rank fails the save everywhere.
  at::Tensor ok = at::full({1}, s.ok() ? 0.0 : 1.0, at::kDouble);
  g.world().allreduce_sum(ok);
  if (!s.ok()) return s;
  if (ok.item<double>() > 0) return Error{ErrorKind::kIo, sd + ": another rank failed to write its checkpoint file"};
  if (g.rank() == 0) {
    try {
      Json meta{{"format", "weft-checkpoint"}, {"version", 1},           {"step", step},
                {"world", g.world_size()},   {"plan_hash", plan_hash}, {"optimizer_steps", o.step_count()}};
      write_json_file(sd + "/meta.json", meta);
      write_text_file(dir + "/latest", fs::path(sd).filename().string() + "\n");
      // Drop older complete checkpoints beyond `keep`.
      std::vector<std::string> steps;
      for (const auto& e : fs::directory_iterator(dir))
        if (e.is_directory() && e.path().filename().string().rfind("step-", 0) == 0)
          steps.push_back(e.path().filename().string());
      std::sort(steps.begin(), steps.end());
      for (size_t i = 0; keep > 0 && i + keep < steps.size(); ++i) fs::remove_all(fs::path(dir) / steps[i], ec);
    } catch (const InputError& e) {
      return Error{ErrorKind::kIo, e.what()};
    }
  }
  g.world().barrier();
  return {};
}

Result<int> load_checkpoint(const std::string& dir, Model& m, Optimizer& o, int rank, int world,
                            const std::string& plan_hash) {
  return catch_errors([&]() -> Result<int> {
    const std::string latest = dir + "/latest";
    if (!fs::exists(latest)) return Error{ErrorKind::kIo, "--resume: no checkpoint in " + dir + " (no " + latest + ")"};
    std::string name = read_text_file(latest);
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    const std::string sd = dir + "/" + name;
    const Json meta = read_json_file(sd + "/meta.json");
    JsonObj mo(meta, sd + "/meta.json");
    if (mo.integer("world") != world)
      return Error{ErrorKind::kBadInput, sd + ": checkpoint of " + std::to_string(mo.integer("world")) +
                                             " ranks, but this job has " + std::to_string(world)};
    if (mo.str("plan_hash") != plan_hash)
      return Error{ErrorKind::kBadInput, sd + ": checkpoint was written under a different plan (hash " +
                                             mo.str("plan_hash") + ", this plan " + plan_hash + ")"};
    auto f = read_params_file(sd + "/rank-" + std::to_string(rank) + ".bin");
    if (!f.ok()) return f.error();
    std::map<std::string, const NamedParam*> by;
    for (const auto& p : f->params) by[p.name] = &p;
    auto get = [&](const std::string& n, int64_t numel) {
      auto it = by.find(n);
      if (it == by.end()) throw InputError(sd + ": rank " + std::to_string(rank) + " file lacks " + n, ErrorKind::kIo);
      if (static_cast<int64_t>(it->second->data.size()) != numel)
        throw InputError(sd + ": " + n + " has " + std::to_string(it->second->data.size()) + " values, expected " +
                             std::to_string(numel),
                         ErrorKind::kIo);
      return from_vec(it->second->data);
    };
    at::NoGradGuard ng;
    for (Unit& u : m.units()) {
      if (u.spec.zero == 3) u.shard_leaf.detach().copy_(get(u.spec.name + ".params", u.shard_leaf.numel()));
      else u.flat.narrow(0, 0, u.spec.numel).copy_(get(u.spec.name + ".params", u.spec.numel));
      u.m.copy_(get(u.spec.name + ".adam_m", u.m.numel()));
      u.v.copy_(get(u.spec.name + ".adam_v", u.v.numel()));
    }
    o.set_step_count(mo.integer("optimizer_steps"));
    return static_cast<int>(mo.integer("step"));
  });
}

}  // namespace weft::runtime
