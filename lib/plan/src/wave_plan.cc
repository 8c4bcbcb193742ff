#include "weft/plan/wave_plan.h"

#include <algorithm>
#include <map>

namespace weft {

using multitask::Flow;
using multitask::Module;
using multitask::Task;
using multitask::TaskSpec;

Result<WavePlan> wave_plan_from_json(const Json& j, const std::string& path) {
  return catch_errors([&]() -> Result<WavePlan> {
    JsonObj o(j, path);
    if (!o.has("kind") || o.str("kind") != "tasks")
      o.fail("kind", o.has("format_version") && !o.has("kind")
                         ? "missing: this is the plan of one model (weft plan --out), not of a multi-task model "
                           "(weft plan --tasks FILE --format json)"
                         : "expected \"tasks\" (the plan of a multi-task model, weft plan --tasks FILE --format json)");
    const long long version = o.integer("format_version");
    if (version != kWavePlanFormatVersion)
      o.fail("format_version", "unsupported version " + std::to_string(version) + " (this weft reads " +
                                   std::to_string(kWavePlanFormatVersion) + ")");
    WavePlan p;
    p.world = static_cast<int>(o.integer("world"));
    const std::vector<JsonObj> waves = o.array_of_obj("waves");
    for (const JsonObj& w : waves) {
      std::vector<WavePiece> pieces;
      for (const JsonObj& m : w.array_of_obj("modules")) {
        WavePiece pc;
        pc.task = m.str("task");
        pc.module = m.str("module");
        pc.first_rank = static_cast<int>(m.integer("first_rank"));
        pc.gpus = static_cast<int>(m.integer("gpus"));
        pc.first_layer = static_cast<int>(m.integer("first_layer"));
        pc.layers = static_cast<int>(m.integer("layers"));
        pc.time_s = m.number_or("time_s", 0);
        pieces.push_back(std::move(pc));
      }
      p.waves.push_back(std::move(pieces));
    }
    return p;
  });
}

Result<WavePlan> load_wave_plan(const std::string& path) {
  return catch_errors([&]() -> Result<WavePlan> { return wave_plan_from_json(read_json_file(path), path); });
}

Status validate(const WavePlan& p, const TaskSpec& t) {
  auto fail = [](const std::string& msg) -> Status { return Error{ErrorKind::kBadInput, "plan: " + msg}; };
  if (p.world < 1) return fail("world must be at least 1, got " + std::to_string(p.world));
  if (p.waves.empty()) return fail("waves: none given");
  // Per operator (task, module): the wave of its last piece so far and the layers it has run.
  struct Seen {
    int first_wave = -1, last_wave = -1, layers = 0;
  };
  std::map<std::pair<std::string, std::string>, Seen> ops;
  for (size_t w = 0; w < p.waves.size(); ++w) {
    const std::string where = "wave " + std::to_string(w);
    if (p.waves[w].empty()) return fail(where + ": no pieces");
    std::vector<int> owner(static_cast<size_t>(p.world), -1);
    for (size_t k = 0; k < p.waves[w].size(); ++k) {
      const WavePiece& pc = p.waves[w][k];
      const std::string piece = where + ", " + pc.task + "/" + pc.module;
      const Task* task = t.task(pc.task);
      if (!task) return fail(piece + ": task \"" + pc.task + "\" is not in the task file");
      if (!task->runs(pc.module))
        return fail(piece + ": task \"" + pc.task + "\" does not run module \"" + pc.module + "\"");
      const Module& m = t.module(pc.module);
      if (pc.gpus < 1 || pc.first_rank < 0 || pc.first_rank + pc.gpus > p.world)
        return fail(piece + ": ranks [" + std::to_string(pc.first_rank) + ", " + std::to_string(pc.first_rank + pc.gpus) +
                    ") are not within the " + std::to_string(p.world) + " ranks of the plan");
      for (int r = pc.first_rank; r < pc.first_rank + pc.gpus; ++r) {
        if (owner[static_cast<size_t>(r)] >= 0) {
          const WavePiece& other = p.waves[w][static_cast<size_t>(owner[static_cast<size_t>(r)])];
          return fail(piece + ": rank " + std::to_string(r) + " also runs " + other.task + "/" + other.module +
                      " in this wave");
        }
        owner[static_cast<size_t>(r)] = static_cast<int>(k);
      }
      Seen& s = ops[{pc.task, pc.module}];
      if (s.last_wave == static_cast<int>(w)) return fail(piece + ": two pieces of one operator in a wave");
      const int L = m.model.num_layers();
      if (pc.layers < 1 || pc.first_layer != s.layers || pc.first_layer + pc.layers > L)
        return fail(piece + ": layers [" + std::to_string(pc.first_layer) + ", " +
                    std::to_string(pc.first_layer + pc.layers) + ") do not continue the operator's layers [0, " +
                    std::to_string(s.layers) + ") of " + std::to_string(L));
      if (s.first_wave < 0) {
        s.first_wave = static_cast<int>(w);
        for (const Flow& f : t.flows) {
          if (f.to != pc.module || !task->runs(f.from)) continue;
          auto it = ops.find({pc.task, f.from});
          const Module& src = t.module(f.from);
          if (it == ops.end() || it->second.layers < src.model.num_layers() || it->second.last_wave >= static_cast<int>(w))
            return fail(piece + ": starts before " + pc.task + "/" + f.from + ", which flows into it, has finished");
        }
      }
      s.last_wave = static_cast<int>(w);
      s.layers += pc.layers;
    }
  }
  for (const Task& task : t.tasks)
    for (const std::string& name : task.modules) {
      const int L = t.module(name).model.num_layers();
      auto it = ops.find({task.name, name});
      const int ran = it == ops.end() ? 0 : it->second.layers;
      if (ran != L)
        return fail(task.name + "/" + name + ": the plan runs " + std::to_string(ran) + " of its " + std::to_string(L) +
                    " layers");
    }
  return {};
}

WavePlan sequential_wave_plan(const TaskSpec& t, int world) {
  WavePlan p;
  p.world = world;
  for (const Task& task : t.tasks)
    for (int mi : multitask::task_order(t, task)) {
      const Module& m = t.modules[static_cast<size_t>(mi)];
      WavePiece pc;
      pc.task = task.name;
      pc.module = m.name;
      pc.first_rank = 0;
      pc.gpus = world;
      pc.layers = m.model.num_layers();
      p.waves.push_back({pc});
    }
  return p;
}

namespace {

// The first sample of share i (0 <= i <= gpus; share gpus starts at the batch's end): shares of
// batch / gpus, the first batch % gpus one more.
int share_start(int gpus, int batch, int i) {
  const int q = batch / gpus, rem = batch % gpus;
  return i < rem ? i * (q + 1) : rem * (q + 1) + (i - rem) * q;
}

}  // namespace

int rank_of_sample(int first_rank, int gpus, int batch, int s) {
  const int q = batch / gpus, rem = batch % gpus;
  const int big = rem * (q + 1);
  return first_rank + (s < big ? s / (q + 1) : rem + (q > 0 ? (s - big) / q : 0));
}

std::pair<int, int> samples_of_rank(int first_rank, int gpus, int batch, int rank) {
  const int i = rank - first_rank;
  if (i < 0 || i >= gpus) return {0, 0};
  const int first = share_start(gpus, batch, i);
  return {first, share_start(gpus, batch, i + 1) - first};
}

std::vector<SampleBlock> sample_blocks(int batch, const WavePiece& a, const WavePiece& b) {
  std::vector<SampleBlock> out;
  int s = 0;
  while (s < batch) {
    const int ra = rank_of_sample(a.first_rank, a.gpus, batch, s), rb = rank_of_sample(b.first_rank, b.gpus, batch, s);
    const int e = std::min(share_start(a.gpus, batch, ra - a.first_rank + 1),
                           share_start(b.gpus, batch, rb - b.first_rank + 1));
    out.push_back({ra, rb, s, e - s});
    s = e;
  }
  return out;
}

std::vector<WaveTransfer> wave_transfers(const WavePlan& p, const TaskSpec& t) {
  std::vector<WaveTransfer> out;
  struct Placed {
    int wave;
    const WavePiece* pc;
  };
  std::map<std::pair<std::string, std::string>, std::vector<Placed>> pieces;
  for (size_t w = 0; w < p.waves.size(); ++w)
    for (const WavePiece& pc : p.waves[w]) pieces[{pc.task, pc.module}].push_back({static_cast<int>(w), &pc});
  auto cross = [&](const Task& task, const Module& src, const Placed& a, const Placed& b, const std::string& to) {
    const std::int64_t per_sample = static_cast<std::int64_t>(src.tokens) * src.model.hidden;
    for (const SampleBlock& x : sample_blocks(task.batch, *a.pc, *b.pc))
      if (x.src != x.dst) out.push_back({b.wave, task.name, src.name, to, x.src, x.dst, x.first, x.n, x.n * per_sample});
  };
  for (const Task& task : t.tasks)
    for (int mi : multitask::task_order(t, task)) {
      const Module& m = t.modules[static_cast<size_t>(mi)];
      const std::vector<Placed>& own = pieces.at({task.name, m.name});
      for (size_t k = 1; k < own.size(); ++k) cross(task, m, own[k - 1], own[k], m.name);
      for (const Flow& f : t.flows) {
        if (f.from != m.name) continue;
        auto it = pieces.find({task.name, f.to});
        if (it == pieces.end()) continue;  // the task does not run the target
        cross(task, m, own.back(), it->second.front(), f.to);
      }
    }
  std::stable_sort(out.begin(), out.end(), [](const WaveTransfer& a, const WaveTransfer& b) { return a.wave < b.wave; });
  return out;
}

}  // namespace weft
