#include "state.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>

#include "weft/core/durable_file.h"
#include "weft/core/json.h"
#include "weft/runtime/checkpoint.h"

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

std::string step_dir(const std::string& dir, int step) { return (fs::path(dir) / step_name(step)).string(); }

}  // namespace

ParamsFile rank_entries(Model& m) {
  ParamsFile f;
  for (Unit& u : m.units()) {
    at::Tensor params = u.spec.zero == 3 ? u.shard_leaf.detach() : u.flat.narrow(0, 0, u.spec.numel);
    f.params.push_back({u.spec.name + ".params", {params.numel()}, to_vec(params)});
    f.params.push_back({u.spec.name + ".adam_m", {u.m.numel()}, to_vec(u.m)});
    f.params.push_back({u.spec.name + ".adam_v", {u.v.numel()}, to_vec(u.v)});
  }
  return f;
}

void load_state(Model& m, const ParamsFile& f, const std::string& where) {
  std::map<std::string, const NamedParam*> by;
  for (const auto& p : f.params) by[p.name] = &p;
  auto get = [&](const std::string& n, int64_t numel) {
    auto it = by.find(n);
    if (it == by.end()) throw InputError(where + ": lacks " + n, ErrorKind::kIo);
    if (static_cast<int64_t>(it->second->data.size()) != numel)
      throw InputError(where + ": " + n + " has " + std::to_string(it->second->data.size()) + " values, expected " +
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
}

ParamsFile exchange_state(Model& m, const Plan& next, GroupSet& g) {
  const int me = g.rank(), world = g.world_size();
  if (next.world_size() != world)
    throw InputError("re-shard in place: the new plan has " + std::to_string(next.world_size()) + " ranks, the job " +
                     std::to_string(world));
  const CheckpointIndex idx = checkpoint_index(m.plan());
  const ParamsFile mine = rank_entries(m);
  // What every rank fills under the new plan (a pure function of the two plans, so every rank
  // computes the same), each taking what it holds from itself.
  std::vector<std::vector<EntryFill>> fills(static_cast<size_t>(world));
  const Resharder rs(idx);
  for (int r = 0; r < world; ++r) {
    auto f = rs.rank(next, r, r);
    if (!f.ok()) throw InputError("re-shard in place: " + f.error().message, f.error().kind);
    fills[static_cast<size_t>(r)] = std::move(f).value();
  }
  constexpr int kTag = 9100;
  Comm& w = g.world();
  // One message per pair of ranks: the sender's values for every copy the receiver takes from it,
  // in the receiver's fill order. Sends are posted first, so no receive waits on a blocked send.
  std::vector<Pending> sends;
  for (int dst = 0; dst < world; ++dst) {
    if (dst == me) continue;
    std::vector<float> out;
    for (const EntryFill& f : fills[static_cast<size_t>(dst)])
      for (const EntryCopy& c : f.copies)
        if (c.src_rank == me) {
          const auto& v = mine.params[static_cast<size_t>(c.src_entry)].data;
          out.insert(out.end(), v.begin() + c.src_offset, v.begin() + c.src_offset + c.count);
        }
    if (!out.empty()) sends.push_back(w.send(from_vec(out), dst, kTag));
  }
  std::vector<std::vector<float>> got(static_cast<size_t>(world));
  std::vector<size_t> pos(static_cast<size_t>(world), 0);
  for (int src = 0; src < world; ++src) {
    if (src == me) continue;
    int64_t n = 0;
    for (const EntryFill& f : fills[static_cast<size_t>(me)])
      for (const EntryCopy& c : f.copies)
        if (c.src_rank == src) n += c.count;
    if (n == 0) continue;
    at::Tensor t = at::empty({n}, at::kFloat);
    w.recv(t, src, kTag);
    got[static_cast<size_t>(src)] = to_vec(t);
  }
  ParamsFile out;
  for (const EntryFill& f : fills[static_cast<size_t>(me)]) {
    std::vector<float> v(static_cast<size_t>(f.numel), 0.0f);
    for (const EntryCopy& c : f.copies) {
      const float* from = c.src_rank == me ? mine.params[static_cast<size_t>(c.src_entry)].data.data() + c.src_offset
                                           : got[static_cast<size_t>(c.src_rank)].data() + pos[static_cast<size_t>(c.src_rank)];
      if (c.src_rank != me) pos[static_cast<size_t>(c.src_rank)] += static_cast<size_t>(c.count);
      std::copy_n(from, c.count, v.begin() + c.dst_offset);
    }
    out.params.push_back({f.name, {f.numel}, std::move(v)});
  }
  for (auto& p : sends) p.wait();
  return out;
}

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
    for (const ParamSpec& s : model_params(p)) out.params.push_back({s.name, s.full_shape, to_vec(full.at(s.name))});
  }
  for (auto& s : sends) s.wait();
  world.barrier();
  return out;
}

Status save_checkpoint(const std::string& dir, int step, Model& m, Optimizer& o, GroupSet& g,
                       const std::string& plan_hash, int keep) {
  const std::string sd = step_dir(dir, step);
  Status s;
  std::error_code ec;
  fs::create_directories(sd, ec);
  if (ec) s = Error{ErrorKind::kIo, sd + ": cannot create: " + ec.message()};
  if (s.ok() && g.rank() == 0) {
    // A leftover of an earlier, interrupted save of this step must not vouch for the files
    // rewritten below; and the step directory's entry is made durable before `latest` names it.
    fs::remove(fs::path(sd) / "meta.json", ec);
    s = sync_directory(dir);
  }
  ParamsFile f = rank_entries(m);
  f.step = step;
  // Each rank's file is fsynced, renamed into place and its directory fsynced (durable_file.h).
  if (s.ok()) s = write_params_file(sd + "/rank-" + std::to_string(g.rank()) + ".bin", f);
  // Every rank reports; a failed write on any rank fails the save everywhere.
  at::Tensor ok = at::full({1}, s.ok() ? 0.0 : 1.0, at::kDouble);
  g.world().allreduce_sum(ok);
  if (!s.ok()) return s;
  if (ok.item<double>() > 0) return Error{ErrorKind::kIo, sd + ": another rank failed to write its checkpoint file"};
  if (g.rank() == 0) {
    // The plan and the index of what every rank file holds (for loading under another plan); then
    // meta.json, which marks the checkpoint complete only once every rank's file is durable;
    // `latest` moves to it only once meta.json is.
    s = write_checkpoint_layout(sd, m.plan());
    if (s.ok()) s = write_checkpoint_meta(sd, {kCheckpointVersion, step, g.world_size(), plan_hash, o.step_count()});
    if (s.ok()) s = write_latest(dir, step);
    if (s.ok()) {
      // Older complete checkpoints beyond `keep`; never the one just written, never an incomplete
      // directory (an interrupted save, which a later save of that step completes).
      for (const std::string& old : checkpoints_to_prune(list_checkpoints(dir), step, keep)) fs::remove_all(old, ec);
      (void)sync_directory(dir);  // pruning is best effort: a crash here leaves an extra old checkpoint
    }
  }
  g.world().barrier();
  return s;
}

Result<Resumed> load_checkpoint(const std::string& dir, Model& m, Optimizer& o, int rank, const std::string& plan_hash) {
  return catch_errors([&]() -> Result<Resumed> {
    auto sd = checkpoint_step_dir(dir);
    if (!sd.ok()) return sd.error().with_context("--resume");
    auto meta = read_checkpoint_meta(*sd);
    if (!meta.ok()) return meta.error();
    Resumed out;
    out.step = meta->step;
    out.from_world = meta->world;
    out.from_plan = meta->plan_hash;
    auto f = rank_state(*sd, *meta, m.plan(), plan_hash, rank, &out.resharded);
    if (!f.ok()) return f.error();
    load_state(m, *f, *sd + ": rank " + std::to_string(rank) + "'s state");
    o.set_step_count(meta->optimizer_steps);
    return out;
  });
}

}  // namespace weft::runtime
