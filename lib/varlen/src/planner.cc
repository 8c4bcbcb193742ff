#include "weft/varlen/planner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>
#include <queue>
#include <set>

namespace weft::varlen {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// Exact searches tried for each move between micro-batches (planner.h exact_budget is for one).
constexpr double kMoveExactBudget = 1e5;

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / (1024.0 * 1024 * 1024));
  return buf;
}

// The allowed group sizes, smallest first: powers of two from min_group to max_group (or every GPU).
std::vector<int> allowed_sizes(const SeqCost& cost, const PlannerOptions& o) {
  const int n = cost.gpus();
  const int hi = o.max_group > 0 ? std::min(o.max_group, n) : n;
  std::vector<int> out;
  for (int d = 1; d <= hi; d *= 2)
    if (d >= o.min_group && n % d == 0) out.push_back(d);
  return out;
}

// What the planner knows of one batch: lengths longest first, each document's time on every allowed
// size (+inf where it does not fit), its smallest size, and a GPU-seconds estimate.
struct Table {
  std::vector<int> sizes;                 // allowed, smallest first
  std::vector<std::int64_t> len;          // by document index of the batch
  std::vector<std::vector<double>> t;     // [doc][size index]
  std::vector<int> min_size_index;        // [doc]
  std::vector<double> work;               // [doc]: least size x time over its sizes (GPU-seconds)
  std::vector<int> order;                 // documents, longest first
  double cap = 0;                         // tokens per GPU
  int gpus = 0;
  std::vector<double> overhead;           // [size index]
};

Result<Table> make_table(const std::vector<std::int64_t>& lengths, const SeqCost& cost, const PlannerOptions& o) {
  Table tb;
  tb.sizes = allowed_sizes(cost, o);
  tb.gpus = cost.gpus();
  tb.cap = cost.capacity_tokens();
  if (lengths.empty()) return Error{ErrorKind::kBadInput, "an empty batch: no documents to plan"};
  if (tb.sizes.empty())
    return Error{ErrorKind::kBadInput, "no group size between " + std::to_string(o.min_group) + " and " +
                                           std::to_string(o.max_group) + " divides " + std::to_string(tb.gpus) +
                                           " GPUs"};
  if (tb.cap < 1)
    return Error{ErrorKind::kNoFit, "the model states leave no memory for activations on " + std::to_string(tb.gpus) +
                                        " GPUs (" + gib(cost.activation_budget_bytes()) +
                                        " left): plan more GPUs or a larger memory limit"};
  tb.len = lengths;
  const size_t n = lengths.size(), k = tb.sizes.size();
  tb.t.assign(n, std::vector<double>(k, kInf));
  tb.min_size_index.assign(n, -1);
  tb.work.assign(n, kInf);
  for (size_t j = 0; j < k; ++j) tb.overhead.push_back(cost.group_overhead(tb.sizes[j]));
  for (size_t i = 0; i < n; ++i) {
    const std::int64_t s = lengths[i];
    if (s <= 0)
      return Error{ErrorKind::kBadInput, "document " + std::to_string(i) + ": length " + std::to_string(s) +
                                             " is not positive"};
    for (size_t j = 0; j < k; ++j) {
      const int d = tb.sizes[j];
      if (static_cast<double>(s) > d * tb.cap) continue;
      tb.t[i][j] = cost.seq_time(static_cast<double>(s), d);
      if (tb.min_size_index[i] < 0) tb.min_size_index[i] = static_cast<int>(j);
      tb.work[i] = std::min(tb.work[i], d * tb.t[i][j]);
    }
    if (tb.min_size_index[i] < 0) {
      const int d = tb.sizes.back();
      return Error{ErrorKind::kNoFit,
                   "document " + std::to_string(i) + " of the batch (" + std::to_string(s) +
                       " tokens) fits no group: on the largest, " + std::to_string(d) + " GPUs, it needs " +
                       std::to_string((s + d - 1) / d) + " tokens (" +
                       gib(cost.bytes_per_token() * static_cast<double>(s) / d) + ") of activations per GPU, " +
                       "where a GPU holds " + std::to_string(static_cast<std::int64_t>(cost.capacity_tokens())) +
                       " (" + gib(cost.activation_budget_bytes()) +
                       ") beside its model states (shorten the documents, or allow larger groups)"};
    }
  }
  tb.order.resize(n);
  std::iota(tb.order.begin(), tb.order.end(), 0);
  std::stable_sort(tb.order.begin(), tb.order.end(), [&](int a, int b) { return tb.len[a] > tb.len[b]; });
  return tb;
}

// One candidate multiset: count per size index.
using Counts = std::vector<int>;

struct GroupState {
  int size_index = 0;
  double load = 0;
  std::int64_t tokens = 0;
};

// Greedy assignment of `docs` (longest first) to the groups of `counts`: each document to the
// group it would finish earliest on, among those with memory for it. Returns the makespan, or
// +inf when a document fits nowhere or the makespan reaches `bound` (the caller's incumbent).
constexpr double kNoRoom = -1;  // assign(): a document found no group with memory for it

double assign(const Table& tb, const std::vector<int>& docs, const Counts& counts, double bound,
              std::vector<GroupState>* groups_out, std::vector<int>* group_of, bool room_first = false) {
  // Groups of one size are interchangeable: keep each size's groups in a min-heap by load.
  const size_t k = counts.size();
  std::vector<GroupState> groups;
  using Entry = std::pair<double, int>;  // load, group
  std::vector<std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>>> heaps(k);
  for (size_t j = k; j-- > 0;)
    for (int c = 0; c < counts[j]; ++c) {
      groups.push_back({static_cast<int>(j), tb.overhead[j], 0});
      heaps[j].push({tb.overhead[j], static_cast<int>(groups.size()) - 1});
    }
  double makespan = 0;
  for (const GroupState& g : groups) makespan = std::max(makespan, g.load);
  if (makespan >= bound) return kInf;
  if (group_of) group_of->assign(docs.size(), -1);
  std::vector<Entry> held;
  for (size_t di = 0; di < docs.size(); ++di) {
    const int i = docs[di];
    const std::int64_t s = tb.len[i];
    double best = kInf, best_key = kInf;
    int best_g = -1;
    for (size_t j = static_cast<size_t>(tb.min_size_index[i]); j < k; ++j) {
      if (counts[j] == 0) continue;
      // The least-loaded group of this size with room for the document.
      held.clear();
      int g = -1;
      while (!heaps[j].empty()) {
        const Entry e = heaps[j].top();
        const GroupState& st = groups[e.second];
        if (static_cast<double>(st.tokens + s) <= tb.sizes[j] * tb.cap) {
          g = e.second;
          break;
        }
        held.push_back(e);
        heaps[j].pop();
      }
      for (const Entry& e : held) heaps[j].push(e);
      if (g < 0) continue;
      const double c = groups[g].load + tb.t[i][j];
      // Room first: the group (of the sizes that hold the document) with the most free memory,
      // for batches whose tokens nearly fill the GPUs; otherwise the earliest finish.
      const double key = room_first ? -(tb.sizes[j] * tb.cap - static_cast<double>(groups[g].tokens)) : c;
      if (key < best_key) {
        best = c;
        best_key = key;
        best_g = g;
      }
    }
    if (best_g < 0) return kNoRoom;
    if (best >= bound) return kInf;
    GroupState& st = groups[best_g];
    const size_t j = static_cast<size_t>(st.size_index);
    // Pop best_g from its heap (it is the least-loaded one with room, found above).
    held.clear();
    while (!heaps[j].empty()) {
      const Entry e = heaps[j].top();
      heaps[j].pop();
      if (e.second == best_g) break;
      held.push_back(e);
    }
    for (const Entry& e : held) heaps[j].push(e);
    st.load = best;
    st.tokens += s;
    heaps[j].push({st.load, best_g});
    makespan = std::max(makespan, best);
    if (group_of) (*group_of)[di] = best_g;
  }
  if (groups_out) *groups_out = std::move(groups);
  return makespan;
}

// Per size index: whether a group may have that size (every allowed size when `only` is empty).
std::vector<char> usable_sizes(const Table& tb, const std::vector<int>& only) {
  std::vector<char> usable(tb.sizes.size(), only.empty() ? 1 : 0);
  for (int d : only)
    for (size_t j = 0; j < tb.sizes.size(); ++j)
      if (tb.sizes[j] == d) usable[j] = 1;
  return usable;
}

// How many sizes a multiset uses.
int distinct_sizes(const Counts& c) {
  return static_cast<int>(std::count_if(c.begin(), c.end(), [](int x) { return x > 0; }));
}

// Every multiset of allowed sizes that sums to the GPU count, with at most `distinct` sizes and
// at least one group of size index >= `need`; calls f(counts).
template <class F>
void for_each_multiset(const Table& tb, int need, int distinct, const std::vector<int>& only, F&& f,
                       const bool* stop = nullptr) {
  const int k = static_cast<int>(tb.sizes.size());
  Counts counts(k, 0);
  const std::vector<char> usable = usable_sizes(tb, only);
  // Sizes from the largest down; `left` GPUs to place.
  auto rec = [&](auto&& self, int j, int left, int used, bool has_need) -> void {
    if (stop && *stop) return;
    if (left == 0) {
      if (has_need) f(counts);
      return;
    }
    if (j < 0) return;
    if (!usable[j] || tb.sizes[j] > left) {
      self(self, j - 1, left, used, has_need);
      return;
    }
    const int most = left / tb.sizes[j];
    if (used == distinct) {
      // No new size may start: this size must not be used.
      self(self, j - 1, left, used, has_need);
      return;
    }
    for (int c = most; c >= 1; --c) {
      counts[j] = c;
      self(self, j - 1, left - c * tb.sizes[j], used + 1, has_need || j >= need);
    }
    counts[j] = 0;
    self(self, j - 1, left, used, has_need);
  };
  rec(rec, k - 1, tb.gpus, 0, false);
}

// Moves and swaps of documents out of the slowest group while they shorten the makespan.
void improve(const Table& tb, const std::vector<int>& docs, std::vector<GroupState>& groups, std::vector<int>& group_of,
             int rounds) {
  const int ng = static_cast<int>(groups.size());
  std::vector<std::vector<int>> members(ng);  // positions in docs
  for (size_t a = 0; a < docs.size(); ++a) members[group_of[a]].push_back(static_cast<int>(a));
  auto room = [&](int g, std::int64_t extra) {
    return static_cast<double>(groups[g].tokens + extra) <= tb.sizes[groups[g].size_index] * tb.cap;
  };
  auto move = [&](int a, int from, int to) {
    std::vector<int>& m = members[from];
    m.erase(std::find(m.begin(), m.end(), a));
    members[to].push_back(a);
    group_of[a] = to;
  };
  // The groups a document may go to: every one in small micro-batches; in large ones the 16
  // least-loaded (where the slowest group's work can go), so a round costs O(groups), not
  // O(groups x documents).
  constexpr int kAllGroups = 32, kTargets = 16;
  std::vector<int> targets;
  for (int r = 0; r < rounds; ++r) {
    int worst = 0;
    for (int g = 1; g < ng; ++g)
      if (groups[g].load > groups[worst].load) worst = g;
    const double top = groups[worst].load;
    const int jw = groups[worst].size_index;
    targets.clear();
    for (int g = 0; g < ng; ++g)
      if (g != worst) targets.push_back(g);
    if (ng > kAllGroups) {
      std::nth_element(targets.begin(), targets.begin() + kTargets, targets.end(),
                       [&](int a, int b) { return groups[a].load < groups[b].load; });
      targets.resize(kTargets);
    }
    bool done = false;
    for (size_t wa = 0; wa < members[worst].size() && !done; ++wa) {
      const int a = members[worst][wa];
      const int i = docs[a];
      for (size_t th = 0; th < targets.size() && !done; ++th) {
        const int h = targets[th];
        const int jh = groups[h].size_index;
        if (jh < tb.min_size_index[i]) continue;
        // Move a to h.
        if (room(h, tb.len[i])) {
          const double nw = groups[worst].load - tb.t[i][jw], nh = groups[h].load + tb.t[i][jh];
          if (std::max(nw, nh) < top * (1 - 1e-9)) {
            groups[worst].load = nw, groups[worst].tokens -= tb.len[i];
            groups[h].load = nh, groups[h].tokens += tb.len[i];
            move(a, worst, h);
            done = true;
            break;
          }
        }
        // Swap a with a shorter document b of h (between groups of many documents, moves alone are
        // fine-grained enough, and pairwise swaps would cost |worst| x |h| per target).
        if (members[worst].size() * members[h].size() > 4096) continue;
        for (size_t hb = 0; hb < members[h].size(); ++hb) {
          const int b = members[h][hb];
          const int i2 = docs[b];
          if (tb.len[i2] >= tb.len[i] || jw < tb.min_size_index[i2]) continue;
          const std::int64_t dt = tb.len[i] - tb.len[i2];
          if (!room(h, dt)) continue;
          const double nw = groups[worst].load - tb.t[i][jw] + tb.t[i2][jw];
          const double nh = groups[h].load - tb.t[i2][jh] + tb.t[i][jh];
          if (std::max(nw, nh) < top * (1 - 1e-9)) {
            groups[worst].load = nw, groups[worst].tokens -= dt;
            groups[h].load = nh, groups[h].tokens += dt;
            move(a, worst, h);
            move(b, h, worst);
            done = true;
            break;
          }
        }
      }
    }
    // Pairs out of a small slowest group: two of its documents moved to another group, or swapped
    // for one of that group's.
    if (!done && members[worst].size() <= 12) {
      const std::vector<int> mw = members[worst];
      for (size_t p = 0; p < mw.size() && !done; ++p)
        for (size_t q = p + 1; q < mw.size() && !done; ++q) {
          const int a1 = mw[p], a2 = mw[q], i1 = docs[a1], i2 = docs[a2];
          const std::int64_t pair = tb.len[i1] + tb.len[i2];
          const double out = tb.t[i1][jw] + tb.t[i2][jw];
          for (size_t th = 0; th < targets.size() && !done; ++th) {
            const int h = targets[th];
            const int jh = groups[h].size_index;
            if (jh < tb.min_size_index[i1] || jh < tb.min_size_index[i2]) continue;
            const double in = tb.t[i1][jh] + tb.t[i2][jh];
            if (room(h, pair) && std::max(groups[worst].load - out, groups[h].load + in) < top * (1 - 1e-9)) {
              groups[worst].load -= out, groups[worst].tokens -= pair;
              groups[h].load += in, groups[h].tokens += pair;
              move(a1, worst, h), move(a2, worst, h);
              done = true;
              break;
            }
            for (size_t hb = 0; hb < members[h].size(); ++hb) {
              const int b = members[h][hb], ib = docs[b];
              if (jw < tb.min_size_index[ib]) continue;
              const std::int64_t dt = pair - tb.len[ib];
              if (!room(h, dt) || !room(worst, -dt)) continue;
              const double nw = groups[worst].load - out + tb.t[ib][jw];
              const double nh = groups[h].load - tb.t[ib][jh] + in;
              if (std::max(nw, nh) < top * (1 - 1e-9)) {
                groups[worst].load = nw, groups[worst].tokens -= dt;
                groups[h].load = nh, groups[h].tokens += dt;
                move(a1, worst, h), move(a2, worst, h), move(b, h, worst);
                done = true;
                break;
              }
            }
          }
        }
    }
    if (!done) return;
  }
}

MicroBatch build(const Table& tb, const std::vector<int>& docs, const std::vector<GroupState>& groups,
                 const std::vector<int>& group_of) {
  MicroBatch mb;
  std::vector<int> index(groups.size());
  std::vector<int> by_size(groups.size());
  std::iota(by_size.begin(), by_size.end(), 0);
  std::stable_sort(by_size.begin(), by_size.end(), [&](int a, int b) {
    return groups[a].size_index != groups[b].size_index ? groups[a].size_index > groups[b].size_index
                                                        : groups[a].load > groups[b].load;
  });
  for (size_t p = 0; p < by_size.size(); ++p) {
    const GroupState& st = groups[by_size[p]];
    index[by_size[p]] = static_cast<int>(p);
    Group g;
    g.size = tb.sizes[st.size_index];
    g.tokens = st.tokens;
    g.time = st.load;
    mb.groups.push_back(std::move(g));
    mb.time = std::max(mb.time, st.load);
  }
  for (size_t a = 0; a < docs.size(); ++a) mb.groups[index[group_of[a]]].docs.push_back(docs[a]);
  return mb;
}

// The multisets a micro-batch may use, by the size index its longest document needs (computed
// once per step: they depend on nothing else), fewest distinct sizes first (which breaks ties in
// plan_mb's ranking by estimate).
struct Multisets {
  std::vector<std::vector<Counts>> by_need;
  std::vector<char> done;
  int distinct = 0;
};

const std::vector<Counts>& multisets(const Table& tb, int need, const PlannerOptions& o, const std::vector<int>& only,
                                     Multisets& cache) {
  if (cache.by_need.empty()) {
    cache.by_need.resize(tb.sizes.size()), cache.done.assign(tb.sizes.size(), 0);
    cache.distinct = o.max_distinct_sizes;
    if (cache.distinct <= 0) {
      cache.distinct = 2;
      for (int d = 3; d <= 4; ++d) {
        long n = 0;
        bool over = false;
        for_each_multiset(
            tb, 0, d, only, [&](const Counts&) { over = ++n > o.multiset_budget; }, &over);
        if (over) break;
        cache.distinct = d;
      }
    }
  }
  std::vector<Counts>& all = cache.by_need[need];
  if (!cache.done[need]) {
    cache.done[need] = 1;
    for_each_multiset(tb, need, cache.distinct, only, [&](const Counts& c) { all.push_back(c); });
    std::stable_sort(all.begin(), all.end(),
                     [](const Counts& a, const Counts& b) { return distinct_sizes(a) < distinct_sizes(b); });
  }
  return all;
}

// A lower bound of a micro-batch's time on the multiset `c` (every size present: on any): the
// longest document (docs longest first) on the fastest of the multiset's sizes that hold it, and
// every document's least work on the multiset's sizes spread over all GPUs, after the smallest
// overhead of the multiset.
double multiset_bound(const Table& tb, const std::vector<int>& docs, const Counts& c) {
  double least = kInf;
  for (size_t j = 0; j < c.size(); ++j)
    if (c[j] > 0) least = std::min(least, tb.overhead[j]);
  double fastest = kInf, work = 0;
  const int i0 = docs.front();
  for (size_t j = static_cast<size_t>(tb.min_size_index[i0]); j < c.size(); ++j)
    if (c[j] > 0) fastest = std::min(fastest, tb.t[i0][j]);
  for (int i : docs) {
    double w = kInf;
    for (size_t j = static_cast<size_t>(tb.min_size_index[i]); j < c.size(); ++j)
      if (c[j] > 0) w = std::min(w, tb.sizes[j] * tb.t[i][j]);
    work += w;
  }
  return least + std::max(fastest, work / tb.gpus);
}

// A quick estimate of a multiset's makespan: the `head` longest documents placed as assign() places
// them, the rest poured over the groups as fluid work (each group takes work at its own size's
// rate) up to a common finishing time. Used to rank multisets; the best few are then assigned.
double estimate_makespan(const Table& tb, const std::vector<int>& docs, const Counts& counts, size_t head,
                         const std::vector<double>& rest) {
  const size_t k = counts.size();
  // Groups of a size are interchangeable: a size's unused groups all stand at its overhead, so a
  // document goes to an unused one while there is one, else to the least-loaded used one with room.
  std::vector<std::vector<std::pair<double, std::int64_t>>> used(k);  // per size: load, tokens
  const size_t h = std::min(head, docs.size());
  for (size_t a = 0; a < h; ++a) {
    const int i = docs[a];
    double best = kInf;
    size_t bj = k, bg = 0;
    for (size_t j = static_cast<size_t>(tb.min_size_index[i]); j < k; ++j) {
      if (counts[j] == 0) continue;
      const double room = tb.sizes[j] * tb.cap - static_cast<double>(tb.len[i]);
      if (static_cast<int>(used[j].size()) < counts[j]) {
        const double c = tb.overhead[j] + tb.t[i][j];
        if (c < best) best = c, bj = j, bg = used[j].size();
        continue;
      }
      for (size_t g = 0; g < used[j].size(); ++g) {
        if (static_cast<double>(used[j][g].second) > room) continue;
        const double c = used[j][g].first + tb.t[i][j];
        if (c < best) best = c, bj = j, bg = g;
      }
    }
    if (bj == k) return kInf;
    if (bg == used[bj].size()) used[bj].push_back({tb.overhead[bj], 0});
    used[bj][bg].first = best, used[bj][bg].second += tb.len[i];
  }
  double top = 0;
  for (size_t j = 0; j < k; ++j) {
    if (counts[j] == 0) continue;
    top = std::max(top, tb.overhead[j]);
    for (const auto& u : used[j]) top = std::max(top, u.first);
  }
  if (h == docs.size()) return top;
  // The rest poured up to a finishing time M where the groups' shares sum to one: a group of size j
  // standing at `load` takes (M - load) / rest[j] of it. Entries (load, share per second), unused
  // groups of a size together.
  std::vector<std::pair<double, double>> e;
  for (size_t j = 0; j < k; ++j) {
    if (counts[j] == 0 || !std::isfinite(rest[j]) || rest[j] <= 0) continue;
    for (const auto& u : used[j]) e.push_back({u.first, 1 / rest[j]});
    const int unused = counts[j] - static_cast<int>(used[j].size());
    if (unused > 0) e.push_back({tb.overhead[j], unused / rest[j]});
  }
  if (e.empty()) return kInf;
  std::sort(e.begin(), e.end());
  double sum_w = 0, sum_lw = 0;
  for (size_t q = 0; q < e.size(); ++q) {
    sum_w += e[q].second, sum_lw += e[q].first * e[q].second;
    const double m = (1 + sum_lw) / sum_w;
    if (q + 1 == e.size() || m <= e[q + 1].first) return std::max(top, m);
  }
  return kInf;
}

// The least makespan of `docs` (at most 30) over every multiset of the allowed sizes and every
// assignment, by a dynamic programme over subsets: best[mask][u] is the least makespan of the
// documents in `mask` on groups of u GPUs in all; the group holding mask's lowest document takes a
// subset S of mask on a group of size d, the rest is best[mask \ S][u - d]. Groups without
// documents stand at their overhead.
MicroBatch exact_mb(const Table& tb, const std::vector<int>& docs, const std::vector<int>& only) {
  const int n = static_cast<int>(docs.size()), gpus = tb.gpus, ns = static_cast<int>(tb.sizes.size());
  const int full = (1 << n) - 1;
  const std::vector<char> usable = usable_sizes(tb, only);
  std::vector<std::int64_t> tokens(full + 1, 0);
  for (int S = 1; S <= full; ++S) tokens[S] = tokens[S & (S - 1)] + tb.len[docs[__builtin_ctz(S)]];
  std::vector<double> c(static_cast<size_t>(full + 1) * ns, kInf);  // c[S * ns + k]
  for (int k = 0; k < ns; ++k) {
    if (!usable[k]) continue;
    c[k] = tb.overhead[k];
    for (int S = 1; S <= full; ++S) {
      const int i = docs[__builtin_ctz(S)];
      const double prev = c[static_cast<size_t>(S & (S - 1)) * ns + k];
      if (std::isfinite(prev) && std::isfinite(tb.t[i][k]) && static_cast<double>(tokens[S]) <= tb.sizes[k] * tb.cap)
        c[static_cast<size_t>(S) * ns + k] = prev + tb.t[i][k];
    }
  }
  const size_t w = static_cast<size_t>(gpus) + 1;
  std::vector<double> best(static_cast<size_t>(full + 1) * w, kInf);
  std::vector<std::pair<int, int>> choice(best.size(), {-1, -1});  // (S, k)
  best[0] = 0;
  for (int u = 1; u <= gpus; ++u)
    for (int k = 0; k < ns; ++k)
      if (usable[k] && tb.sizes[k] <= u) {
        const double v = std::max(c[k], best[u - tb.sizes[k]]);
        if (v < best[u]) best[u] = v, choice[u] = {0, k};
      }
  for (int mask = 1; mask <= full; ++mask) {
    const int low = mask & -mask, rest = mask ^ low;
    for (int T = rest;; T = (T - 1) & rest) {
      const int S = low | T, left = mask ^ S;
      for (int k = 0; k < ns; ++k) {
        const double cs = c[static_cast<size_t>(S) * ns + k];
        if (!std::isfinite(cs)) continue;
        for (int u = tb.sizes[k]; u <= gpus; ++u) {
          const double v = std::max(cs, best[static_cast<size_t>(left) * w + u - tb.sizes[k]]);
          double& b = best[static_cast<size_t>(mask) * w + u];
          if (v < b) b = v, choice[static_cast<size_t>(mask) * w + u] = {S, k};
        }
      }
      if (T == 0) break;
    }
  }
  MicroBatch none;
  none.time = kInf;
  if (!std::isfinite(best[static_cast<size_t>(full) * w + gpus])) return none;
  std::vector<GroupState> groups;
  std::vector<int> group_of(docs.size(), -1);
  for (int mask = full, u = gpus; u > 0;) {
    const auto [S, k] = choice[static_cast<size_t>(mask) * w + u];
    GroupState g{k, tb.overhead[k], 0};
    for (int b = 0; b < n; ++b)
      if ((S >> b) & 1) g.load += tb.t[docs[b]][k], g.tokens += tb.len[docs[b]], group_of[b] = static_cast<int>(groups.size());
    groups.push_back(g);
    mask ^= S, u -= tb.sizes[k];
  }
  return build(tb, docs, groups, group_of);
}

MicroBatch plan_mb(const Table& tb, std::vector<int> docs, const PlannerOptions& o, const std::vector<int>& only,
                   Multisets& cache, double bound = kInf) {
  std::stable_sort(docs.begin(), docs.end(), [&](int a, int b) { return tb.len[a] > tb.len[b]; });
  MicroBatch none;
  none.time = kInf;
  if (docs.empty()) return none;
  std::int64_t tokens = 0;
  int need = 0;
  for (int i : docs) tokens += tb.len[i], need = std::max(need, tb.min_size_index[i]);
  if (static_cast<double>(tokens) > tb.gpus * tb.cap) return none;
  if (docs.size() <= 30 &&
      std::pow(3.0, static_cast<double>(docs.size())) / 2 * tb.sizes.size() * (tb.gpus + 1) <= o.exact_budget) {
    MicroBatch mb = exact_mb(tb, docs, only);
    if (std::isfinite(mb.time) && mb.time < bound) return mb;
    return none;
  }
  double best = bound;
  Counts best_counts;
  // Multisets ranked by their estimated makespan; the best `o.assigned_multisets` are assigned.
  const std::vector<Counts>& all = multisets(tb, need, o, only, cache);
  // Per size, the seconds the documents after the head would take on one group of that size.
  const size_t head = static_cast<size_t>(std::max(0, o.estimate_head));
  std::vector<double> rest(tb.sizes.size(), 0);
  for (size_t a = std::min(head, docs.size()); a < docs.size(); ++a)
    for (size_t j = 0; j < rest.size(); ++j) rest[j] += tb.t[docs[a]][j];
  std::vector<std::pair<double, int>> ranked;
  ranked.reserve(all.size());
  for (size_t q = 0; q < all.size(); ++q) {
    const double e = estimate_makespan(tb, docs, all[q], head, rest);
    if (e < best) ranked.push_back({e, static_cast<int>(q)});
  }
  const size_t keep = std::min(ranked.size(), static_cast<size_t>(std::max(1, o.assigned_multisets)));
  std::partial_sort(ranked.begin(), ranked.begin() + keep, ranked.end());
  // The one-size multisets are always assigned too, so a plan is never slower than one group size
  // for the micro-batch (the adaptive baseline).
  {
    std::vector<std::pair<double, int>> chosen(ranked.begin(), ranked.begin() + keep);
    for (size_t q = keep; q < ranked.size(); ++q) {
      const Counts& c = all[ranked[q].second];
      if (distinct_sizes(c) == 1) chosen.push_back(ranked[q]);
    }
    ranked = std::move(chosen);
  }
  // Small micro-batches: every kept multiset is improved by local search before they are compared;
  // large ones: the best after the greedy assignment only.
  const bool improve_each = docs.size() <= 32;
  std::vector<GroupState> best_groups, groups;
  std::vector<int> best_of, group_of;
  auto makespan = [](const std::vector<GroupState>& gs) {
    double m = 0;
    for (const GroupState& g : gs) m = std::max(m, g.load);
    return m;
  };
  for (const auto& [est, q] : ranked) {
    const Counts& c = all[q];
    if (multiset_bound(tb, docs, c) >= best) continue;
    double m = assign(tb, docs, c, improve_each ? kInf : best, &groups, &group_of);
    if (m == kNoRoom) {
      // Memory is tight: place by free memory first, then let the local search balance the times.
      m = assign(tb, docs, c, kInf, &groups, &group_of, true);
      if (m == kNoRoom) continue;
      improve(tb, docs, groups, group_of, o.improve_rounds);
      m = makespan(groups);
    } else if (improve_each && std::isfinite(m)) {
      improve(tb, docs, groups, group_of, o.improve_rounds);
      m = makespan(groups);
    }
    if (m < best) {
      best = m;
      best_counts = c;
      best_groups = groups, best_of = group_of;
    }
  }
  if (best_counts.empty()) return none;
  if (!improve_each) improve(tb, docs, best_groups, best_of, o.improve_rounds);
  return build(tb, docs, best_groups, best_of);
}

// Splits of the batch (longest first) into `m` micro-batches that each fit in memory.
std::vector<std::vector<std::vector<int>>> splits(const Table& tb, int m) {
  std::vector<std::vector<std::vector<int>>> out;
  const std::vector<int>& order = tb.order;
  const double room = tb.gpus * tb.cap;
  // Contiguous runs (similar lengths together), the largest run as small as it can be, by tokens and
  // by estimated work.
  for (int by_work = 0; by_work < 2; ++by_work) {
    auto weight = [&](int i) { return by_work ? tb.work[i] : static_cast<double>(tb.len[i]); };
    double lo = 0, hi = 0;
    for (int i : order) lo = std::max(lo, weight(i)), hi += weight(i);
    lo = std::max(lo, hi / m);
    auto fill = [&](double cap, std::vector<std::vector<int>>* parts) {
      int count = 1;
      double w = 0, tok = 0;
      if (parts) parts->assign(1, {});
      for (int i : order) {
        if ((w + weight(i) > cap || tok + tb.len[i] > room) && w > 0) {
          ++count, w = 0, tok = 0;
          if (parts) parts->emplace_back();
        }
        w += weight(i), tok += tb.len[i];
        if (parts) parts->back().push_back(i);
      }
      return count;
    };
    for (int it = 0; it < 40; ++it) {
      const double mid = 0.5 * (lo + hi);
      if (fill(mid, nullptr) <= m) hi = mid;
      else lo = mid;
    }
    std::vector<std::vector<int>> parts;
    fill(hi, &parts);
    out.push_back(std::move(parts));
  }
  // Interleaved: each document to the micro-batch with the least work so far that has room.
  std::vector<std::vector<int>> parts(m);
  std::vector<double> w(m, 0), tok(m, 0);
  bool ok = true;
  for (int i : order) {
    int best = -1;
    for (int p = 0; p < m; ++p)
      if (tok[p] + tb.len[i] <= room && (best < 0 || w[p] < w[best])) best = p;
    if (best < 0) {
      ok = false;
      break;
    }
    parts[best].push_back(i), w[best] += tb.work[i], tok[best] += tb.len[i];
  }
  if (ok) {
    parts.erase(std::remove_if(parts.begin(), parts.end(), [](const std::vector<int>& p) { return p.empty(); }),
                parts.end());
    out.push_back(std::move(parts));
  }
  return out;
}

StepPlan plan_with(const Table& tb, const PlannerOptions& o, const std::vector<int>& only) {
  StepPlan best;
  best.time = kInf;
  std::int64_t total = 0;
  for (std::int64_t s : tb.len) total += s;
  const int m0 = std::max(1, static_cast<int>(std::ceil(static_cast<double>(total) / (tb.gpus * tb.cap) - 1e-9)));
  std::set<std::vector<std::vector<int>>> seen;
  Multisets cache;
  // Micro-batches already planned (documents sorted): the plan, or the bound it could not beat.
  std::map<std::vector<int>, std::pair<MicroBatch, double>> planned;
  for (int m = m0; m <= m0 + std::max(0, o.extra_micro_batches); ++m) {
    for (std::vector<std::vector<int>>& parts : splits(tb, m)) {
      if (!seen.insert(parts).second) continue;
      double lb = 0;
      const Counts every(tb.sizes.size(), 1);
      for (const std::vector<int>& p : parts) lb += multiset_bound(tb, p, every);
      if (lb >= best.time) continue;
      StepPlan plan;
      for (const std::vector<int>& p : parts) {
        const double left = best.time - plan.time;
        std::vector<int> key = p;
        std::sort(key.begin(), key.end());
        auto it = planned.find(key);
        MicroBatch mb;
        if (it != planned.end() && (std::isfinite(it->second.first.time) || it->second.second >= left)) {
          mb = it->second.first;
        } else {
          mb = plan_mb(tb, p, o, only, cache, left);
          planned[key] = {mb, left};
        }
        if (!std::isfinite(mb.time)) {
          plan.time = kInf;
          break;
        }
        plan.time += mb.time;
        plan.micro_batches.push_back(std::move(mb));
        if (plan.time >= best.time) break;
      }
      if (plan.time < best.time) best = std::move(plan);
    }
  }
  // Small batches: move single documents between micro-batches while that shortens the step (each
  // move re-plans the two micro-batches it touches, exactly only where that is cheap: a move is
  // tried thousands of times), then re-plan the micro-batches with the full exact budget.
  if (std::isfinite(best.time) && best.micro_batches.size() > 1 && tb.len.size() <= 32) {
    PlannerOptions om = o;
    om.exact_budget = std::min(o.exact_budget, kMoveExactBudget);
    auto docs_of = [](const MicroBatch& mb) {
      std::vector<int> d;
      for (const Group& g : mb.groups) d.insert(d.end(), g.docs.begin(), g.docs.end());
      return d;
    };
    for (int round = 0; round < 64; ++round) {
      bool moved = false;
      for (size_t a = 0; a < best.micro_batches.size() && !moved; ++a) {
        const std::vector<int> da = docs_of(best.micro_batches[a]);
        for (size_t b = 0; b < best.micro_batches.size() && !moved; ++b) {
          if (a == b) continue;
          const std::vector<int> db = docs_of(best.micro_batches[b]);
          const double before = best.micro_batches[a].time + best.micro_batches[b].time;
          for (int d : da) {
            std::vector<int> na, nb = db;
            for (int x : da)
              if (x != d) na.push_back(x);
            nb.push_back(d);
            MicroBatch mb_b = plan_mb(tb, nb, om, only, cache);
            if (!std::isfinite(mb_b.time)) continue;
            MicroBatch mb_a;
            if (!na.empty()) {
              mb_a = plan_mb(tb, na, om, only, cache);
              if (!std::isfinite(mb_a.time)) continue;
            }
            if (mb_a.time + mb_b.time < before * (1 - 1e-9)) {
              best.time += mb_a.time + mb_b.time - before;
              best.micro_batches[b] = std::move(mb_b);
              if (na.empty()) best.micro_batches.erase(best.micro_batches.begin() + static_cast<long>(a));
              else best.micro_batches[a] = std::move(mb_a);
              moved = true;
              break;
            }
          }
        }
      }
      if (!moved) break;
    }
    if (om.exact_budget < o.exact_budget)
      for (MicroBatch& mb : best.micro_batches) {
        MicroBatch again = plan_mb(tb, docs_of(mb), o, only, cache);
        if (again.time < mb.time) best.time += again.time - mb.time, mb = std::move(again);
      }
  }
  return best;
}

}  // namespace

int min_group_size(const SeqCost& cost, std::int64_t tokens, const PlannerOptions& o) {
  for (int d : allowed_sizes(cost, o))
    if (static_cast<double>(tokens) <= d * cost.capacity_tokens()) return d;
  return 0;
}

Result<StepPlan> plan_step(const std::vector<std::int64_t>& lengths, const SeqCost& cost, const PlannerOptions& o) {
  auto tb = make_table(lengths, cost, o);
  if (!tb.ok()) return tb.error();
  StepPlan p = plan_with(*tb, o, {});
  if (!std::isfinite(p.time))
    return Error{ErrorKind::kNoFit, "no grouping of the batch fits in memory"};
  p.time += cost.step_overhead();
  return p;
}

Result<StepPlan> plan_uniform(const std::vector<std::int64_t>& lengths, const SeqCost& cost, int degree,
                              const PlannerOptions& o) {
  auto tb = make_table(lengths, cost, o);
  if (!tb.ok()) return tb.error();
  if (std::find(tb->sizes.begin(), tb->sizes.end(), degree) == tb->sizes.end())
    return Error{ErrorKind::kBadInput, "group size " + std::to_string(degree) + " is not an allowed size for " +
                                           std::to_string(cost.gpus()) + " GPUs"};
  const std::int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  if (static_cast<double>(longest) > degree * cost.capacity_tokens())
    return Error{ErrorKind::kNoFit, "a document of " + std::to_string(longest) + " tokens does not fit a group of " +
                                        std::to_string(degree) + " GPUs"};
  PlannerOptions one = o;
  one.max_distinct_sizes = 1;
  StepPlan p = plan_with(*tb, one, {degree});
  if (!std::isfinite(p.time))
    return Error{ErrorKind::kNoFit, "no grouping of the batch into groups of " + std::to_string(degree) + " fits"};
  p.time += cost.step_overhead();
  return p;
}

Result<StepPlan> plan_adaptive(const std::vector<std::int64_t>& lengths, const SeqCost& cost, const PlannerOptions& o) {
  auto tb = make_table(lengths, cost, o);
  if (!tb.ok()) return tb.error();
  PlannerOptions one = o;
  one.max_distinct_sizes = 1;
  StepPlan best;
  best.time = kInf;
  for (int d : tb->sizes) {
    StepPlan p = plan_with(*tb, one, {d});
    if (p.time < best.time) best = std::move(p);
  }
  if (!std::isfinite(best.time)) return Error{ErrorKind::kNoFit, "no group size fits the batch"};
  best.time += cost.step_overhead();
  return best;
}

Result<Comparison> compare_step(const std::vector<std::int64_t>& lengths, const SeqCost& cost, int static_size,
                                const PlannerOptions& o) {
  Comparison c;
  const auto t0 = std::chrono::steady_clock::now();
  auto w = plan_step(lengths, cost, o);
  c.plan_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!w.ok()) return w.error();
  auto s = plan_uniform(lengths, cost, static_size, o);
  if (!s.ok()) return s.error();
  auto a = plan_adaptive(lengths, cost, o);
  if (!a.ok()) return a.error();
  c.weft = std::move(w).value(), c.stat = std::move(s).value(), c.adaptive = std::move(a).value();
  return c;
}

MicroBatch plan_micro_batch(const std::vector<std::int64_t>& lengths, const std::vector<int>& docs, const SeqCost& cost,
                            const PlannerOptions& o, const std::vector<int>& sizes) {
  auto tb = make_table(lengths, cost, o);
  if (!tb.ok()) {
    MicroBatch none;
    none.time = kInf;
    return none;
  }
  Multisets cache;
  return plan_mb(*tb, docs, o, sizes, cache);
}

double micro_batch_time(const std::vector<std::int64_t>& lengths, MicroBatch& mb, const SeqCost& cost) {
  const double cap = cost.capacity_tokens();
  int used = 0;
  mb.time = 0;
  for (Group& g : mb.groups) {
    used += g.size;
    g.time = cost.group_overhead(g.size);
    g.tokens = 0;
    for (int i : g.docs) {
      g.tokens += lengths[i];
      g.time += cost.seq_time(static_cast<double>(lengths[i]), g.size);
    }
    if (static_cast<double>(g.tokens) > g.size * cap) mb.time = kInf;
    if (std::isfinite(mb.time)) mb.time = std::max(mb.time, g.time);
  }
  if (used != cost.gpus()) mb.time = kInf;
  return mb.time;
}

}  // namespace weft::varlen
