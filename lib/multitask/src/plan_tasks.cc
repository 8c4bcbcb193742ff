#include "weft/multitask/plan_tasks.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <set>
#include <thread>
#include <tuple>

#include "weft/cost/collectives.h"
#include "weft/multitask/module_search.h"
#include "weft/search/search.h"
#include "weft/spec/counts.h"

namespace weft::multitask {

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The counts a module is searched at: powers of two up to max_gpus, and max_gpus itself.
std::vector<int> counts_up_to(int max_gpus) {
  std::vector<int> n;
  for (int x = 1; x <= max_gpus; x *= 2) n.push_back(x);
  if (n.back() != max_gpus) n.push_back(max_gpus);
  return n;
}

// One layer's share of the best step time of module m on n GPUs (<= 0: nothing fits or divides;
// `why` then says which, with the numbers).
Result<double> layer_time(const Module& m, int batch, const ClusterSpec& cluster, int n, const CostModel& cm,
                          const SearchOptions& base, std::string* why) {
  Result<SearchResult> r = search_module(m, batch, cluster, n, cm, base);
  if (!r.ok()) {
    if (r.error().kind != ErrorKind::kBadInput) return r.error();
    // No configuration divides this batch on n GPUs: not a valid count.
    *why = "no configuration on " + std::to_string(n) + " GPU" + (n == 1 ? "" : "s") + " divides the batch of " +
           std::to_string(batch);
    return -1.0;
  }
  if (r->top.empty()) {
    char b[160];
    std::snprintf(b, sizeof b, "on %d GPU%s nothing fits in %.0f GiB (%s)", n, n == 1 ? "" : "s", cluster.gpu.memory_gib,
                  r->min_memory_gib > 0 ? ("the least needs " + std::to_string(static_cast<int>(std::ceil(r->min_memory_gib))) +
                                           " GiB").c_str()
                                        : "no device size would do");
    *why = b;
    return -1.0;
  }
  return r->top.front().predicted.step_time_s / m.model.num_layers();
}

}  // namespace

namespace {

// One count of one module's curve to search: its layer time (<= 0: not a valid count, `why` says
// why) or the search's error.
struct CountSearch {
  const Module* m = nullptr;
  int batch = 0, n = 0;
  Result<double> t = -1.0;
  std::string why;
};

// The searches side by side, one thread each up to the machine's cores (each search is
// single-threaded and only reads the cost model).
void search_counts(std::vector<CountSearch>& jobs, const ClusterSpec& cluster, const CostModel& cm,
                   const SearchOptions& base) {
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < jobs.size(); i = next++)
      jobs[i].t = layer_time(*jobs[i].m, jobs[i].batch, cluster, jobs[i].n, cm, base, &jobs[i].why);
  };
  const size_t threads = std::min<size_t>(jobs.size(), std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (size_t k = 1; k < threads; ++k) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
}

// The counts of m still to search.
void add_counts(const Module& m, int batch, int max_gpus, const std::map<int, double>& known,
                std::vector<CountSearch>* jobs) {
  for (int n : counts_up_to(max_gpus))
    if (!known.count(n)) jobs->push_back({&m, batch, n, -1.0, {}});
}

// The curve from the searched counts; `why` holds the reasons of the counts left out that were
// searched in this call (an error lists them when no count is valid).
Result<Curve> assemble(const Module& m, int batch, const ClusterSpec& cluster, int max_gpus,
                       const std::map<int, double>& times, const std::vector<std::string>& why) {
  Curve c;
  for (int n : counts_up_to(max_gpus)) {
    const double t = times.at(n);
    if (t > 0) c.n.push_back(n), c.t.push_back(t);
  }
  if (c.n.empty()) {
    std::string reasons;
    for (const std::string& w : why) reasons += (reasons.empty() ? ": " : "; ") + w;
    return Error{ErrorKind::kBadInput, "module \"" + m.name + "\" fits on no group of 1 to " + std::to_string(max_gpus) +
                                           " GPUs of " + cluster.gpu.name + " with a batch of " +
                                           std::to_string(batch) + reasons};
  }
  return c;
}

}  // namespace

WavePlan place_waves(const TaskSpec& t, const TasksPlan& p, int gpus, int gpus_per_node) {
  WavePlan out;
  out.world = gpus;
  const int gpn = std::max(1, gpus_per_node);
  struct Range {
    int first = 0, gpus = 0;
  };
  std::vector<Range> last(p.ops.size(), Range{-1, 0});  // each operator's latest placed piece
  std::vector<int> layers_done(p.ops.size(), 0);
  auto batch_of = [&](int op) { return t.task(p.op_of[static_cast<size_t>(op)].task)->batch; };
  // Samples of a batch that change rank between two placements.
  auto moved = [](int batch, const Range& a, const Range& b) {
    WavePiece from, to;
    from.first_rank = a.first, from.gpus = a.gpus, to.first_rank = b.first, to.gpus = b.gpus;
    long long n = 0;
    for (const SampleBlock& x : sample_blocks(batch, from, to))
      if (x.src != x.dst) n += x.n;
    return n;
  };
  for (const Wave& w : p.allocation.waves) {
    // The anchors of each piece: (range, samples x elements weight) it should stay near.
    struct Want {
      size_t piece;
      std::vector<std::pair<Range, double>> anchors;
      double weight = 0;
    };
    std::vector<Want> wants;
    for (size_t k = 0; k < w.pieces.size(); ++k) {
      const Piece& pc = w.pieces[k];
      const size_t o = static_cast<size_t>(pc.op);
      Want want{k, {}, 0};
      // Elements a sample carries out of operator o: its module's tokens x hidden.
      auto per_sample = [&](size_t op) {
        const Module& m = t.module(p.op_of[op].module);
        return static_cast<double>(m.tokens) * static_cast<double>(m.model.hidden);
      };
      if (last[o].gpus > 0) {
        want.anchors.push_back({last[o], per_sample(o)});
      } else {
        for (int d : p.ops[o].deps) want.anchors.push_back({last[static_cast<size_t>(d)], per_sample(static_cast<size_t>(d))});
      }
      for (const auto& a : want.anchors) want.weight += a.second * batch_of(pc.op);
      wants.push_back(std::move(want));
    }
    std::stable_sort(wants.begin(), wants.end(), [&](const Want& a, const Want& b) {
      if ((a.weight > 0) != (b.weight > 0)) return a.weight > 0;
      if (a.weight != b.weight) return a.weight > b.weight;
      return w.pieces[a.piece].gpus > w.pieces[b.piece].gpus;
    });
    std::vector<char> used(static_cast<size_t>(gpus), 0);
    std::vector<Range> at(w.pieces.size());
    bool packed = true;
    // Pieces whose ranks the allocation fixed (packed groups) keep them.
    for (size_t k = 0; k < w.pieces.size(); ++k) {
      const Piece& pc = w.pieces[k];
      if (pc.first_rank < 0) continue;
      WEFT_ASSERT(pc.first_rank + pc.gpus <= gpus, "a packed group beyond the GPUs");
      at[k] = {pc.first_rank, pc.gpus};
      for (int r = pc.first_rank; r < pc.first_rank + pc.gpus; ++r) used[static_cast<size_t>(r)] = 1;
    }
    for (const Want& want : wants) {
      if (w.pieces[want.piece].first_rank >= 0) continue;
      const int g = w.pieces[want.piece].gpus;
      const int batch = batch_of(w.pieces[want.piece].op);
      std::vector<int> starts;
      for (int s = 0; s + g <= gpus; s += g) starts.push_back(s);
      for (const auto& a : want.anchors) starts.push_back(a.first.first);
      for (const Range& r : at)
        if (r.gpus > 0) starts.push_back(r.first + r.gpus), starts.push_back(r.first - g);
      std::sort(starts.begin(), starts.end());
      starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
      bool found = false;
      std::tuple<int, double, int> best{0, 0.0, 0};
      for (int s : starts) {
        if (s < 0 || s + g > gpus) continue;
        bool free = true;
        for (int r = s; r < s + g && free; ++r) free = !used[static_cast<size_t>(r)];
        if (!free) continue;
        // A range that fits in a node stays in one; a wider one starts at a node's first rank.
        const bool straddles = g <= gpn ? s / gpn != (s + g - 1) / gpn : s % gpn != 0;
        double cost = 0;
        for (const auto& a : want.anchors)
          if (a.first.gpus > 0) cost += a.second * static_cast<double>(moved(batch, a.first, Range{s, g}));
        const std::tuple<int, double, int> key{straddles ? 1 : 0, cost, s};
        if (!found || key < best) best = key, found = true;
      }
      if (!found) {
        packed = false;
        break;
      }
      const int s = std::get<2>(best);
      at[want.piece] = {s, g};
      for (int r = s; r < s + g; ++r) used[static_cast<size_t>(r)] = 1;
    }
    if (!packed) {
      // Largest first from rank 0: always fits, the pieces' GPUs adding up to at most N.
      std::vector<size_t> order(w.pieces.size());
      for (size_t k = 0; k < order.size(); ++k) order[k] = k;
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return w.pieces[a].gpus > w.pieces[b].gpus; });
      int next = 0;
      for (size_t k : order) at[k] = {next, w.pieces[k].gpus}, next += w.pieces[k].gpus;
    }
    std::vector<WavePiece> placed;
    for (size_t k = 0; k < w.pieces.size(); ++k) {
      const Piece& pc = w.pieces[k];
      const size_t o = static_cast<size_t>(pc.op);
      WavePiece wp;
      wp.task = p.op_of[o].task;
      wp.module = p.op_of[o].module;
      wp.first_rank = at[k].first;
      wp.gpus = at[k].gpus;
      wp.first_layer = layers_done[o];
      wp.layers = pc.layers;
      wp.time_s = pc.time_s;
      layers_done[o] += pc.layers;
      last[o] = at[k];
      placed.push_back(std::move(wp));
    }
    out.waves.push_back(std::move(placed));
  }
  return out;
}

namespace {

// One module layer run on ranks [first_rank, first_rank + gpus), its gradient final at ready_s.
struct LayerRun {
  std::string module;
  int layer = 0;
  int first_rank = 0, gpus = 0;
  double ready_s = 0;
};

// The wider reductions of layers run on more than one set of ranks (SharedSync): per layer of a
// parameter holder, a ring over the union of its sets less the largest set's own ring, from when
// its last run made it final, one after another on the communication stream; what runs past end_s.
SharedSync shared_reduction(const TaskSpec& t, const std::vector<LayerRun>& runs, double end_s,
                            const ClusterSpec& cluster) {
  const int gpn = std::max(1, cluster.gpus_per_node);
  // An all-reduce over a set of ranks as the cost model prices one (weft/cost/collectives.h): a ring
  // whose node-crossing hops share the adapters of the fewest members any of its nodes holds.
  auto ring_s = [&](const std::vector<int>& ranks, double b) {
    if (ranks.size() < 2) return 0.0;
    std::map<int, int> per_node;
    for (int r : ranks) ++per_node[r / gpn];
    CommGroup g;
    g.size = static_cast<int>(ranks.size());
    g.ranks_per_node = g.size;
    for (const auto& [node, k] : per_node) g.ranks_per_node = std::min(g.ranks_per_node, per_node.size() > 1 ? k : g.size);
    return collective_time(Collective::kAllReduce, Bytes(b), g, cluster).value();
  };
  struct Layer {
    std::set<std::vector<int>> sets;
    double ready_s = 0;
  };
  std::map<std::pair<std::string, int>, Layer> layers;  // (holder, layer)
  for (const LayerRun& r : runs) {
    Layer& L = layers[{t.module(r.module).holder(), r.layer}];
    std::vector<int> ranks;
    for (int x = r.first_rank; x < r.first_rank + r.gpus; ++x) ranks.push_back(x);
    L.sets.insert(std::move(ranks));
    L.ready_s = std::max(L.ready_s, r.ready_s);
  }
  SharedSync out;
  struct Item {
    double ready_s, time_s;
    std::vector<int> ranks;
  };
  std::vector<Item> items;
  std::set<std::vector<int>> unions;
  for (const auto& [key, L] : layers) {
    if (L.sets.size() < 2) continue;
    std::set<int> u;
    for (const std::vector<int>& r : L.sets) u.insert(r.begin(), r.end());
    std::vector<int> ranks(u.begin(), u.end());
    const double b = 4.0 * layer_params(t.module(key.first).model.layer(key.second)).total();
    double own = 0;
    for (const std::vector<int>& r : L.sets) own = std::max(own, ring_s(r, b));
    unions.insert(ranks);
    out.bytes += b;
    const double time_s = std::max(0.0, ring_s(ranks, b) - own);
    items.push_back({L.ready_s, time_s, std::move(ranks)});
  }
  // Each rank's communication stream runs its reductions one after another, in the order their
  // gradients are final; a reduction starts when its gradient is and every rank of its union is free.
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.ready_s < b.ready_s; });
  std::map<int, double> free_at;
  double end = 0;
  for (const Item& it : items) {
    double start = it.ready_s;
    for (int r : it.ranks) start = std::max(start, free_at[r]);
    for (int r : it.ranks) free_at[r] = start + it.time_s;
    end = std::max(end, start + it.time_s);
  }
  out.groups = static_cast<int>(unions.size());
  out.time_s = std::max(0.0, end - end_s);
  return out;
}

}  // namespace

// A forward is kForwardShare of a piece's time, its backward kBackwardShare.
WavesRun run_waves(const TaskSpec& t, const WavePlan& p, const CrossingTimes& x) {
  const std::vector<std::vector<WavePiece>>& W = p.waves;
  const int N = p.world;
  std::map<std::pair<std::string, std::string>, std::vector<std::pair<size_t, size_t>>> pieces_of;
  for (size_t w = 0; w < W.size(); ++w)
    for (size_t k = 0; k < W[w].size(); ++k) pieces_of[{W[w][k].task, W[w][k].module}].push_back({w, k});
  WavesRun out;
  std::vector<std::vector<double>>& fwd_end = out.fwd_end;
  std::vector<std::vector<double>>& bwd_end = out.bwd_end;
  fwd_end.resize(W.size());
  bwd_end.resize(W.size());
  for (size_t w = 0; w < W.size(); ++w) fwd_end[w].assign(W[w].size(), 0.0), bwd_end[w].assign(W[w].size(), 0.0);
  std::vector<double> free_at(static_cast<size_t>(N), 0.0);
  auto cross = [&](size_t to_wave, const std::string& task, const std::string& from, const std::string& to) {
    auto it = x.find({static_cast<int>(to_wave), task, from, to});
    return it == x.end() ? 0.0 : it->second;
  };
  auto run = [&](const WavePiece& pc, double ready, double len) {
    double start = ready;
    for (int r = pc.first_rank; r < pc.first_rank + pc.gpus; ++r) start = std::max(start, free_at[static_cast<size_t>(r)]);
    for (int r = pc.first_rank; r < pc.first_rank + pc.gpus; ++r) free_at[static_cast<size_t>(r)] = start + len;
    return start + len;
  };
  for (size_t w = 0; w < W.size(); ++w)
    for (size_t k = 0; k < W[w].size(); ++k) {
      const WavePiece& pc = W[w][k];
      const Task& task = *t.task(pc.task);
      double ready = 0;
      const auto& mine = pieces_of.at({pc.task, pc.module});
      const size_t at = static_cast<size_t>(std::find(mine.begin(), mine.end(), std::make_pair(w, k)) - mine.begin());
      if (at > 0) {
        ready = fwd_end[mine[at - 1].first][mine[at - 1].second] + cross(w, pc.task, pc.module, pc.module);
      } else {
        for (const Flow& f : t.flows)
          if (f.to == pc.module && task.runs(f.from)) {
            const auto& src = pieces_of.at({pc.task, f.from}).back();
            ready = std::max(ready, fwd_end[src.first][src.second] + cross(w, pc.task, f.from, pc.module));
          }
      }
      fwd_end[w][k] = run(pc, ready, pc.time_s * kForwardShare);
    }
  for (size_t w = W.size(); w-- > 0;)
    for (size_t k = 0; k < W[w].size(); ++k) {
      const WavePiece& pc = W[w][k];
      const Task& task = *t.task(pc.task);
      double ready = fwd_end[w][k];
      const auto& mine = pieces_of.at({pc.task, pc.module});
      const size_t at = static_cast<size_t>(std::find(mine.begin(), mine.end(), std::make_pair(w, k)) - mine.begin());
      if (at + 1 < mine.size()) {
        const auto& nx = mine[at + 1];
        ready = std::max(ready, bwd_end[nx.first][nx.second] + cross(nx.first, pc.task, pc.module, pc.module));
      } else {
        for (const Flow& f : t.flows)
          if (f.from == pc.module && task.runs(f.to)) {
            const auto& dst = pieces_of.at({pc.task, f.to}).front();
            ready = std::max(ready, bwd_end[dst.first][dst.second] + cross(dst.first, pc.task, pc.module, f.to));
          }
      }
      bwd_end[w][k] = run(pc, ready, pc.time_s * kBackwardShare);
    }
  out.end_s = 0;
  for (double f : free_at) out.end_s = std::max(out.end_s, f);
  return out;
}

Result<TasksPlan> plan_tasks(const TaskSpec& t, const ClusterSpec& cluster, const CostModel& cm,
                             const SearchOptions& base, CurveCache* cache) {
  if (Status s = validate(t); !s.ok()) return s.error();
  const int N = cluster.total_gpus();
  TasksPlan p;
  const auto t0 = std::chrono::steady_clock::now();
  CurveCache local;
  CurveCache& cc = cache ? *cache : local;
  // Every count still to search, of every (module, batch), side by side; then each curve.
  std::map<std::pair<std::string, int>, const Task*> first_task;  // the first task with each key
  for (const Task& task : t.tasks)
    for (const std::string& name : task.modules) first_task.emplace(std::make_pair(name, task.batch), &task);
  std::vector<CountSearch> jobs;
  for (const auto& [key, task] : first_task) add_counts(t.module(key.first), key.second, N, cc[key], &jobs);
  search_counts(jobs, cluster, cm, base);
  std::map<std::pair<std::string, int>, std::vector<std::string>> why;
  for (const CountSearch& j : jobs) {
    const auto key = std::make_pair(j.m->name, j.batch);
    if (!j.t.ok()) return j.t.error().with_context("task \"" + first_task.at(key)->name + "\"");
    cc[key].emplace(j.n, *j.t);
    if (!j.why.empty()) why[key].push_back(j.why);
  }
  std::map<std::pair<std::string, int>, Curve> curves;
  for (const Task& task : t.tasks)
    for (const std::string& name : task.modules) {
      const auto key = std::make_pair(name, task.batch);
      if (curves.count(key)) continue;
      Result<Curve> c = assemble(t.module(name), task.batch, cluster, N, cc[key], why[key]);
      if (!c.ok()) return c.error().with_context("task \"" + task.name + "\"");
      curves[key] = std::move(*c);
    }
  p.curve_ms = ms_since(t0);
  const auto t1 = std::chrono::steady_clock::now();
  std::vector<TaskOps> tasks;
  struct OpShape {
    double batch = 0, tokens = 0, hidden = 0;
  };
  std::vector<OpShape> shape;
  for (const Task& task : t.tasks) {
    TaskOps to;
    to.name = task.name;
    std::map<int, int> op_of;  // module index -> operator
    for (int mi : task_order(t, task)) {
      const Module& m = t.modules[static_cast<size_t>(mi)];
      Op op;
      op.name = task.name + "/" + m.name;
      p.op_of.push_back({task.name, m.name});
      op.layers = m.model.num_layers();
      op.curve = curves.at({m.name, task.batch});
      for (const Flow& f : t.flows)
        if (f.to == m.name) {
          auto it = op_of.find(t.module_index(f.from));
          if (it != op_of.end()) op.deps.push_back(it->second);
        }
      shape.push_back({static_cast<double>(task.batch), static_cast<double>(m.tokens),
                       static_cast<double>(m.model.hidden)});
      op_of[mi] = static_cast<int>(p.ops.size());
      to.ops.push_back(static_cast<int>(p.ops.size()));
      p.ops.push_back(std::move(op));
    }
    tasks.push_back(std::move(to));
  }
  // Before placement (the allocator's choice of a level's plan): a re-shard between two groups, the
  // busiest rank's share of the batch's 16-bit activations over the smaller group, forward and
  // back, priced as the placed crossings are (p2p_time), across nodes when either group is wider
  // than a node.
  auto crossing_s = [&](const OpShape& s, int from_gpus, int to_gpus) {
    const double bytes = s.batch * s.tokens * s.hidden * 2.0 / std::min(from_gpus, to_gpus);
    const bool across = std::max(from_gpus, to_gpus) > cluster.gpus_per_node;
    return 2.0 * p2p_time(Bytes(bytes), across, cluster).value();
  };
  // The re-shards of a level's waves, for the allocator's choice between its plans.
  const WaveCost reshards = [&](const std::vector<Wave>& waves) {
    std::map<int, int> last;
    double t = 0;
    for (const Wave& w : waves)
      for (const Piece& pc : w.pieces) {
        auto it = last.find(pc.op);
        if (it != last.end() && it->second != pc.gpus) t += crossing_s(shape[static_cast<size_t>(pc.op)], it->second, pc.gpus);
        last[pc.op] = pc.gpus;
      }
    return t;
  };
  Result<Allocation> a = allocate(p.ops, N, reshards, AllocateMode::kBest);
  if (!a.ok()) return a.error();
  p.allocation = std::move(*a);
  // Places a plan's waves and prices what crosses between them and the wider reductions.
  auto price = [&](TasksPlan& q) {
    q.placement = place_waves(t, q, N, cluster.gpus_per_node);
    // Traffic between waves by crossing (one operator's move, or one flow), on the placed ranks.
    const int gpn = std::max(1, cluster.gpus_per_node);
    auto same_node = [&](int a, int b) { return a / gpn == b / gpn; };
    // One direction's time of each crossing, by (receiving wave, task, from, to).
    CrossingTimes crossing_s;
    {
      const std::vector<WaveTransfer> xs = wave_transfers(q.placement, t);
      size_t i = 0;
      while (i < xs.size()) {
        size_t j = i;
        // Bytes each rank sends and receives, inside its node and across nodes.
        std::map<int, std::pair<double, double>> sent, received;
        while (j < xs.size() && xs[j].wave == xs[i].wave && xs[j].task == xs[i].task && xs[j].from == xs[i].from &&
               xs[j].to == xs[i].to) {
          const WaveTransfer& x = xs[j];
          const bool local = same_node(x.src_rank, x.dst_rank);
          const double b = 2.0 * static_cast<double>(x.elements);  // 16-bit activations
          (local ? sent[x.src_rank].first : sent[x.src_rank].second) += b;
          (local ? received[x.dst_rank].first : received[x.dst_rank].second) += b;
          q.traffic.elements += static_cast<double>(x.elements);
          q.traffic.bytes += 2.0 * b;  // and the gradients back
          ++j;
        }
        // A rank's messages as the cost model prices point-to-point transfers (p2p_time), its
        // in-node and cross-node parts one after the other; the crossing lasts as long as the
        // busiest rank, sending or receiving.
        auto busy = [&](const std::pair<double, double>& b) {
          return (b.first > 0 ? p2p_time(Bytes(b.first), false, cluster).value() : 0.0) +
                 (b.second > 0 ? p2p_time(Bytes(b.second), true, cluster).value() : 0.0);
        };
        double worst = 0;
        for (const auto& [r, b] : sent) worst = std::max(worst, busy(b));
        for (const auto& [r, b] : received) worst = std::max(worst, busy(b));
        q.traffic.time_s += 2.0 * worst;
        ++q.traffic.crossings;
        crossing_s[{xs[i].wave, xs[i].task, xs[i].from, xs[i].to}] = worst;
        i = j;
      }
    }
    q.run = run_waves(t, q.placement, crossing_s);
    const WavesRun& ran = q.run;
    q.compute_s = ran.end_s;
    const std::vector<std::vector<WavePiece>>& W = q.placement.waves;
    const std::vector<std::vector<double>>& bwd_end = ran.bwd_end;
    // Layers that ran on more than one set of ranks (SharedSync): each final when the last backward
    // of a piece that ran it has ended.
    std::vector<LayerRun> runs;
    for (size_t w = 0; w < W.size(); ++w)
      for (size_t k = 0; k < W[w].size(); ++k) {
        const WavePiece& pc = W[w][k];
        for (int l = pc.first_layer; l < pc.first_layer + pc.layers; ++l)
          runs.push_back({pc.module, l, pc.first_rank, pc.gpus, bwd_end[w][k]});
      }
    q.shared_sync = shared_reduction(t, runs, q.compute_s, cluster);
  };
  price(p);
  // Another allocation of the same operators, placed and priced.
  auto priced = [&](AllocateMode mode, int pack_order = -1) -> Result<TasksPlan> {
    Result<Allocation> other = allocate(p.ops, N, reshards, mode, pack_order);
    if (!other.ok()) return other.error();
    TasksPlan q = p;
    q.allocation = std::move(*other);
    q.traffic = {};
    q.shared_sync = {};
    price(q);
    return q;
  };
  // The same plan on every level (the greedy wavefront, the re-planned waves), placed and priced
  // whole: the per-level choice counts each level's waves one after another, the run overlaps them.
  for (AllocateMode mode : {AllocateMode::kWavefront, AllocateMode::kReplanned}) {
    Result<TasksPlan> q = priced(mode);
    if (!q.ok()) return q.error();
    if (q->step_time_s() < p.step_time_s()) p = std::move(*q);
  }
  // Packed groups in every order and both directions, each priced: the order whose groups end
  // first may spread a shared module's layers over more ranks, whose wider reductions cost more.
  for (AllocateMode mode : {AllocateMode::kPacked, AllocateMode::kPackedReversed})
    for (int order = 0; order < kPackOrders; ++order) {
      Result<TasksPlan> q = priced(mode, order);
      if (!q.ok()) return q.error();
      if (q->step_time_s() < p.step_time_s()) p = std::move(*q);
    }
  // The operators one after another (each on its fastest count) on every level, placed and priced
  // alike: kept when the waves' traffic and wider reductions cost more than they gain.
  Result<TasksPlan> in_turn = priced(AllocateMode::kInTurn);
  if (!in_turn.ok()) return in_turn.error();
  const double waves_step = p.step_time_s(), waves_makespan = p.allocation.makespan_s, waves_compute = p.compute_s;
  if (in_turn->step_time_s() < waves_step) {
    p = std::move(*in_turn);
    p.in_turn = true;
  }
  p.waves_step_s = waves_step;
  p.waves_makespan_s = waves_makespan;
  p.waves_compute_s = waves_compute;
  // The baselines on the same curves, with the wider reductions their placements need too (a
  // module several tasks run on different GPU counts or side by side), each task's layers final at
  // the end of its run.
  auto baseline_shared = [&](const std::vector<TaskRun>& task_runs, double end_s) {
    std::vector<LayerRun> runs;
    for (size_t k = 0; k < tasks.size(); ++k) {
      const TaskRun& tr = task_runs[k];
      for (size_t i = 0; i < tasks[k].ops.size(); ++i) {
        const TasksPlan::OpOf& of = p.op_of[static_cast<size_t>(tasks[k].ops[i])];
        const int L = p.ops[static_cast<size_t>(tasks[k].ops[i])].layers;
        for (int l = 0; l < L; ++l) runs.push_back({of.module, l, tr.first_rank, tr.op_gpus[i], tr.start_s + tr.time_s});
      }
    }
    return shared_reduction(t, runs, end_s, cluster).time_s;
  };
  std::vector<TaskRun> task_runs;
  Result<double> seq = sequential_time(p.ops, tasks, N, &task_runs);
  if (!seq.ok()) return seq.error();
  p.sequential_shared_s = baseline_shared(task_runs, *seq);
  p.sequential_s = *seq + p.sequential_shared_s;
  Result<double> greedy = task_greedy_time(p.ops, tasks, N, &task_runs);
  if (!greedy.ok()) return greedy.error();
  p.task_greedy_shared_s = baseline_shared(task_runs, *greedy);
  p.task_greedy_s = *greedy + p.task_greedy_shared_s;
  p.plan_ms = ms_since(t1);
  return p;
}

Json to_json(const TasksPlan& p) {
  Json j;
  j["kind"] = "tasks";
  j["format_version"] = kWavePlanFormatVersion;
  j["step_time_s"] = p.step_time_s();
  j["waves_s"] = p.allocation.makespan_s;
  j["compute_s"] = p.compute_s;
  j["allocation"] = p.in_turn ? "in_turn" : "waves";
  j["waves_step_s"] = p.waves_step_s;
  j["world"] = p.placement.world;
  j["traffic"] = {{"elements", p.traffic.elements},
                  {"bytes", p.traffic.bytes},
                  {"time_s", p.traffic.time_s},
                  {"crossings", p.traffic.crossings}};
  j["shared_sync"] = {{"groups", p.shared_sync.groups}, {"bytes", p.shared_sync.bytes}, {"time_s", p.shared_sync.time_s}};
  j["waves"] = Json::array();
  for (size_t wi = 0; wi < p.allocation.waves.size(); ++wi) {
    const Wave& w = p.allocation.waves[wi];
    Json wj{{"start_s", w.start_s}, {"time_s", w.time_s}, {"modules", Json::array()}};
    for (size_t k = 0; k < w.pieces.size(); ++k) {
      const Piece& pc = w.pieces[k];
      const WavePiece& placed = p.placement.waves[wi][k];
      wj["modules"].push_back({{"name", p.ops[static_cast<size_t>(pc.op)].name},
                               {"task", placed.task},
                               {"module", placed.module},
                               {"gpus", pc.gpus},
                               {"first_rank", placed.first_rank},
                               {"first_layer", placed.first_layer},
                               {"layers", pc.layers},
                               {"time_s", pc.time_s}});
    }
    j["waves"].push_back(std::move(wj));
  }
  j["baselines"] = {{"sequential_s", p.sequential_s},
                    {"task_greedy_s", p.task_greedy_s},
                    {"sequential_shared_s", p.sequential_shared_s},
                    {"task_greedy_shared_s", p.task_greedy_shared_s},
                    {"waves_makespan_s", p.waves_makespan_s},
                    {"bound_s", p.allocation.bound_s}};
  j["plan_ms"] = p.plan_ms;
  j["curve_ms"] = p.curve_ms;
  j["curves"] = Json::array();
  for (const Op& op : p.ops) j["curves"].push_back({{"name", op.name}, {"gpus", op.curve.n}, {"layer_time_s", op.curve.t}});
  return j;
}

}  // namespace weft::multitask
