// Spindle's operator-level allocator (ASPLOS'25): levels by dependency depth, a continuous bound per
// level found by bisection (Spindle §3, Theorem 1), discretisation onto the two neighbouring valid
// counts, and a greedy wavefront that packs the pieces into waves of at most N GPUs (or, where it is
// shorter, the level's operators one after another on all N).
#include "weft/multitask/allocator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "weft/core/format.h"

namespace weft::multitask {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// Bisection stops at this relative width of [low, high] or after kMaxIterations. 1e-12 rather than
// 1e-9: the returned C is the feasible end, so it may lie that much above the true bound, and the
// bound must stay below a makespan that packs exactly (to within 1e-9 seconds).
constexpr double kRelWidth = 1e-12;
constexpr int kMaxIterations = 200;
// A real GPU count this close (relative) to a valid count is taken as that count.
constexpr double kSnap = 1e-9;

Error bad(const std::string& m) { return Error{ErrorKind::kBadInput, m}; }

std::string op_label(const std::vector<Op>& ops, int i) {
  return "operator '" + ops[static_cast<size_t>(i)].name + "' (index " + S(i) + ")";
}

// The curve's valid counts <= gpus, ascending.
std::vector<int> counts_up_to(const Curve& c, int gpus) {
  std::vector<int> out;
  for (int n : c.n)
    if (n <= gpus) out.push_back(n);
  return out;
}

// The largest valid count <= gpus, or 0 when there is none.
int largest_count_up_to(const Curve& c, int gpus) {
  int best = 0;
  for (int n : c.n)
    if (n <= gpus) best = n;
  return best;
}

// n_m(C) of Spindle §3: the smallest real x in (0, gpus] with at(x) x layers <= c, or +inf if none.
// Between consecutive breakpoints (the valid counts <= gpus, and gpus itself) at() is linear in
// u = 1/x, hence monotone, so each segment is inverted exactly; the first segment (0, min(n0, gpus)]
// is the perfect-scaling extension t0 n0 / x. A non-monotone curve is handled by taking the first
// segment, in ascending x, where the time fits.
double min_gpus(const Curve& curve, int layers, double c, int gpus) {
  const double y = c / layers;  // the per-layer time that fits
  const double n0 = std::min<double>(curve.n.front(), gpus);
  if (curve.at(n0) <= y) return std::min(n0, curve.t.front() * curve.n.front() / y);
  std::vector<double> points{n0};
  for (int n : curve.n)
    if (n > n0 && n < gpus) points.push_back(n);
  if (gpus > n0) points.push_back(gpus);
  for (size_t i = 0; i + 1 < points.size(); ++i) {
    const double a = points[i], b = points[i + 1];
    const double ta = curve.at(a), tb = curve.at(b);
    if (ta <= y) return a;
    if (tb > y) continue;
    // ta > y >= tb: solve ta + (tb - ta) (u - ua) / (ub - ua) = y for u = 1/x.
    const double ua = 1 / a, ub = 1 / b;
    const double u = ua + (y - ta) * (ub - ua) / (tb - ta);
    return std::clamp(1 / u, a, b);
  }
  return kInf;
}

// The least per-layer time the curve reaches on (0, gpus]: at a breakpoint, at() being monotone
// between them (and decreasing below the first count).
double min_time(const Curve& curve, int gpus) {
  double best = curve.at(std::min<double>(curve.n.front(), gpus));
  for (int n : curve.n)
    if (n <= gpus) best = std::min(best, curve.at(n));
  return std::min(best, curve.at(gpus));
}

// Sum of n_m(c) over the level (+inf if an operator cannot make c); fills `gpus_out`.
double gpus_needed(const std::vector<Op>& ops, const std::vector<int>& level, double c, int gpus,
                   std::vector<double>* gpus_out) {
  gpus_out->assign(level.size(), 0);
  double sum = 0;
  for (size_t k = 0; k < level.size(); ++k) {
    const Op& op = ops[static_cast<size_t>(level[k])];
    (*gpus_out)[k] = min_gpus(op.curve, op.layers, c, gpus);
    sum += (*gpus_out)[k];
  }
  return sum;
}

// An operator's pieces after discretisation: (gpus, layers), the hi piece first.
struct Split {
  int lo = 0, hi = 0;
  int layers_lo = 0, layers_hi = 0;
};

// Spindle §3 discretisation: the two valid counts around the real n_m, and the layers split between
// them so that T(hi) l_hi + T(lo) l_lo is as close to C as whole layers allow.
Result<Split> discretise(const std::vector<Op>& ops, int i, double real_gpus, double c, int gpus) {
  const Op& op = ops[static_cast<size_t>(i)];
  const std::vector<int> valid = counts_up_to(op.curve, gpus);
  if (valid.empty())
    return bad(op_label(ops, i) + ": its smallest valid count, " + S(op.curve.n.front()) + " GPUs, is above the " +
               S(gpus) + " GPUs given");
  Split s;
  s.lo = valid.front();
  s.hi = valid.back();
  for (int v : valid) {
    if (std::abs(v - real_gpus) <= kSnap * v) {  // on a valid count: one piece
      s.lo = s.hi = v;
      break;
    }
    if (v <= real_gpus) s.lo = v;
  }
  if (s.lo != s.hi)
    for (int v : valid)
      if (v >= real_gpus) {
        s.hi = v;
        break;
      }
  // Below the first valid count: lo == hi == the first; above the last: both the last.
  if (s.hi < s.lo) s.hi = s.lo;
  const int L = op.layers;
  const double t_lo = op.curve.at(s.lo), t_hi = op.curve.at(s.hi);
  if (s.lo == s.hi || t_hi == t_lo) {
    // One count (or two that take the same time: the fewer GPUs).
    s.layers_lo = L;
    return s;
  }
  // T(hi) l + T(lo) (L - l) = C at l = (C - T(lo) L) / (T(hi) - T(lo)); try its floor and ceiling.
  const double exact = (c - t_lo * L) / (t_hi - t_lo);
  int best = -1;
  double best_gap = kInf, best_total = kInf;
  for (double cand : {std::floor(exact), std::ceil(exact)}) {
    const int l = static_cast<int>(std::clamp(cand, 0.0, static_cast<double>(L)));
    const double total = t_hi * l + t_lo * (L - l);
    const double gap = std::abs(total - c);
    // Closest to C; on a tie the split that finishes sooner.
    if (gap < best_gap || (gap == best_gap && total < best_total)) {
      best = l;
      best_gap = gap;
      best_total = total;
    }
  }
  s.layers_hi = best;
  s.layers_lo = L - best;
  return s;
}

// Whole layers of `per_layer` seconds within `time` (a layer that ends within 1e-9 relative counts).
int layers_within(double time, double per_layer) {
  return static_cast<int>(std::floor(time / per_layer * (1 + 1e-9)));
}

// An operator of a level while its waves are built: its two counts and the layers left on each.
struct Pending {
  int op = 0;                // index into ops
  int lo = 0, hi = 0;        // discretise's counts
  int left_lo = 0, left_hi = 0;
  double t_lo = 0, t_hi = 0;  // per-layer times there
  [[nodiscard]] int left() const { return left_lo + left_hi; }
  // The time its planned pieces still take.
  [[nodiscard]] double planned_s() const { return left_lo * t_lo + left_hi * t_hi; }
};

// The greedy wavefront of one level (Spindle §3 "waves"). Each wave gives every operator it admits
// one piece on one count:
//   1. operators by planned time left, longest first (index on a tie), each admitted on the smaller
//      count it still has layers for (lo before hi: the lo counts of a level add up to at most N
//      whenever every n_m is at least its first count, so every operator can start at once, as the
//      continuous bound has them), while the GPUs add up to <= N;
//   2. in the same order, an admitted operator on lo with hi layers left moves to hi if the GPUs
//      left allow;
//   3. GPUs still idle widen admitted operators, same order, to the largest valid count that fits
//      and runs a layer faster (an idle GPU helps nobody; this is what lets the level's tail, the
//      last operators, use all N).
// A piece may run the layers planned for its count (all that are left, once widened). The wave lasts
// as long as its shortest piece, S, but every admitted operator runs at least one layer, so it really
// lasts W = max_m min(planned_m, max(1, floor(S / t_m))) t_m; each operator then runs the whole
// layers of its piece that fit in W. Appends the waves from `start_s` and returns the level's end.
double wavefront(const std::vector<Op>& ops, std::vector<Pending> level, int gpus, double start_s,
                 std::vector<Wave>* waves) {
  double now = start_s;
  for (;;) {
    std::vector<size_t> order;
    for (size_t k = 0; k < level.size(); ++k)
      if (level[k].left() > 0) order.push_back(k);
    if (order.empty()) break;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return level[a].planned_s() > level[b].planned_s(); });
    struct Slot {
      size_t k;
      int gpus;
      int planned;  // layers this piece may run
      double per_layer;
      bool widened = false;
    };
    std::vector<Slot> slots;
    int spare = gpus;
    for (size_t k : order) {  // 1. admit on the smaller count still needed
      const Pending& p = level[k];
      const bool on_lo = p.left_lo > 0;
      const int g = on_lo ? p.lo : p.hi;
      if (g > spare) continue;
      slots.push_back({k, g, on_lo ? p.left_lo : p.left_hi, on_lo ? p.t_lo : p.t_hi, false});
      spare -= g;
    }
    // The first operator's count is <= N (discretise), so the wave is never empty.
    for (Slot& s : slots) {  // 2. lo -> hi where hi layers are left
      const Pending& p = level[s.k];
      if (s.gpus == p.lo && p.hi > p.lo && p.left_hi > 0 && p.hi - p.lo <= spare) {
        spare -= p.hi - p.lo;
        s = {s.k, p.hi, p.left_hi, p.t_hi, false};
      }
    }
    for (Slot& s : slots) {  // 3. widen into idle GPUs
      if (spare == 0) break;
      const Curve& c = ops[static_cast<size_t>(level[s.k].op)].curve;
      const int wide = largest_count_up_to(c, s.gpus + spare);
      if (wide > s.gpus && c.at(wide) < s.per_layer) {
        spare -= wide - s.gpus;
        s = {s.k, wide, level[s.k].left(), c.at(wide), true};
      }
    }
    double shortest = kInf;
    for (const Slot& s : slots) shortest = std::min(shortest, s.planned * s.per_layer);
    double target = 0;
    for (const Slot& s : slots)
      target = std::max(target, std::min(s.planned, std::max(1, layers_within(shortest, s.per_layer))) * s.per_layer);
    Wave w;
    w.start_s = now;
    // In level order, so that the same input gives the same wave, piece for piece.
    std::sort(slots.begin(), slots.end(), [](const Slot& a, const Slot& b) { return a.k < b.k; });
    for (const Slot& s : slots) {
      Pending& p = level[s.k];
      const int run = std::clamp(layers_within(target, s.per_layer), 1, s.planned);
      // Layers come off the count they were planned for; a widened piece takes the slower lo ones first.
      const int from_lo = s.widened ? std::min(run, p.left_lo) : s.gpus == p.lo ? run : 0;
      p.left_lo -= from_lo;
      p.left_hi -= run - from_lo;
      Piece piece;
      piece.op = p.op;
      piece.gpus = s.gpus;
      piece.layers = run;
      piece.time_s = run * s.per_layer;
      w.time_s = std::max(w.time_s, piece.time_s);
      w.pieces.push_back(piece);
    }
    now += w.time_s;
    waves->push_back(std::move(w));
  }
  return now;
}

// Waves re-planned on what is left: before each wave the continuous bound of the level's remaining
// layers gives every operator left a real count; each takes the largest valid count at or below it
// (at least its first), the operators with the most time left first while the GPUs last; GPUs left
// over go, one valid count at a time, to the operator whose remaining time falls most per GPU. The
// wave lasts until one of its operators finishes (the one whose end leaves the GPUs least idle),
// the others running the whole layers that fit (at least one), so every wave ends an operator. Appends the waves from `start_s` and returns the
// level's end (+inf if a bound cannot be found, which check_ops rules out).
double replanned_waves(const std::vector<Op>& ops, const std::vector<int>& level, int gpus, double start_s,
                       std::vector<Wave>* waves) {
  std::vector<int> left(level.size());
  for (size_t k = 0; k < level.size(); ++k) left[k] = ops[static_cast<size_t>(level[k])].layers;
  double now = start_s;
  for (;;) {
    std::vector<Op> rest;
    std::vector<size_t> at;  // position in `level` of each operator of `rest`
    for (size_t k = 0; k < level.size(); ++k) {
      if (left[k] == 0) continue;
      Op o = ops[static_cast<size_t>(level[k])];
      o.layers = left[k];
      o.deps.clear();
      rest.push_back(std::move(o));
      at.push_back(k);
    }
    if (rest.empty()) break;
    std::vector<int> all(rest.size());
    for (size_t i = 0; i < rest.size(); ++i) all[i] = static_cast<int>(i);
    auto b = continuous_bound(rest, all, gpus);
    if (!b.ok()) return kInf;
    auto remaining = [&](size_t i, int n) { return rest[i].layers * rest[i].curve.at(n); };
    std::vector<size_t> order(rest.size());
    for (size_t i = 0; i < rest.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
      return rest[x].layers * rest[x].curve.at(b->gpus[x]) > rest[y].layers * rest[y].curve.at(b->gpus[y]);
    });
    std::vector<int> g(rest.size(), 0);
    int spare = gpus;
    for (size_t i : order) {
      const Curve& c = rest[i].curve;
      int n = largest_count_up_to(c, static_cast<int>(std::floor(b->gpus[i] * (1 + 1e-9))));
      if (n == 0) n = c.n.front();
      if (n <= spare) g[i] = n, spare -= n;
    }
    for (;;) {  // spare GPUs by the largest fall in remaining time per GPU
      int best = -1, best_n = 0;
      double best_gain = 0;
      for (size_t i : order) {
        if (g[i] == 0) continue;
        for (int n : rest[i].curve.n) {
          if (n <= g[i] || n - g[i] > spare) continue;
          const double gain = (remaining(i, g[i]) - remaining(i, n)) / (n - g[i]);
          if (gain > best_gain) best = static_cast<int>(i), best_n = n, best_gain = gain;
        }
      }
      if (best < 0) break;
      spare -= best_n - g[static_cast<size_t>(best)];
      g[static_cast<size_t>(best)] = best_n;
    }
    // The wave's length: the end of one of its operators, the one whose end leaves the fewest
    // GPU-seconds idle per GPU-second of the wave (whole layers leave the others short of it), the
    // earliest on a tie.
    auto runs = [&](size_t i, double len) {
      return std::clamp(layers_within(len, rest[i].curve.at(g[i])), 1, rest[i].layers);
    };
    double length = kInf, best_use = -1;
    std::vector<double> ends;
    for (size_t i = 0; i < rest.size(); ++i)
      if (g[i] > 0) ends.push_back(remaining(i, g[i]));
    std::sort(ends.begin(), ends.end());
    for (double end : ends) {
      double busy = 0, span = 0;
      for (size_t i = 0; i < rest.size(); ++i) {
        if (g[i] == 0) continue;
        const double piece = runs(i, end) * rest[i].curve.at(g[i]);
        busy += g[i] * piece;
        span = std::max(span, piece);
      }
      const double use = busy / (gpus * span);
      if (use > best_use * (1 + 1e-9)) best_use = use, length = end;
    }
    Wave w;
    w.start_s = now;
    for (size_t i = 0; i < rest.size(); ++i) {
      if (g[i] == 0) continue;
      const double t = rest[i].curve.at(g[i]);
      const int run = runs(i, length);
      left[at[i]] -= run;
      w.pieces.push_back({level[at[i]], g[i], run, run * t});
      w.time_s = std::max(w.time_s, run * t);
    }
    now += w.time_s;
    waves->push_back(std::move(w));
  }
  return now;
}

// Groups packed by wrap-around (McNaughton's rule, on whole layers and GPU groups): the GPUs are cut
// into groups of valid counts, each running its pieces one after another within a length C. An
// operator that does not fit in what is left of the open slot runs its last k layers at the end of
// it and its first layers at the start of the next slot (a sub-slot, below, or a new group from
// time 0): with s_A, s_B the two slots' free times and r the first layers' time, s_B + r <= C and
// max(s_A, s_B + r) + k t_A <= C keep the two apart and within C. An operator of a smaller count
// that runs whole in what is left of the open slot cuts that remainder into sub-slots of its count
// (a group of 16 GPUs running a large operator, then four of 4 running small ones), as a buddy
// allocator halves a block; where its own count does not run it whole there, the fewest GPUs above
// it that do. C is bisected from the level's continuous bound; the run
// (plan_tasks.h run_waves) has no barrier between waves, so a slot's pieces follow one another as
// packed here.

// `gpus` GPUs of group `group` from its `offset`-th, free from `end`.
struct Slot {
  int group = -1, offset = 0, gpus = 0;
  double end = 0;
};
// A piece in a slot.
struct Placed {
  Piece piece;  // op, gpus, layers, time_s
  double start_s = 0;
  int group = 0, offset = 0;
};
struct Packing {
  std::vector<int> groups;     // each group's GPUs
  std::vector<Placed> pieces;  // an operator's pieces in the order of its layers
  double end_s = 0;
};

bool valid_count(const Curve& c, int n) { return std::find(c.n.begin(), c.n.end(), n) != c.n.end(); }

// The valid count <= N of least GPU-seconds per layer among those running the whole operator
// within c (fewer GPUs on a tie); 0 when none does.
int count_within(const Op& op, double c, int gpus) {
  int best = 0;
  for (int n : op.curve.n) {
    if (n > gpus || op.layers * op.curve.at(n) > c * (1 + 1e-9)) continue;
    if (best == 0 || n * op.curve.at(n) < best * op.curve.at(best) * (1 - 1e-12)) best = n;
  }
  return best;
}

// The order in which pack() takes the operators (by their counts, largest first or smallest, then
// by their time there, longest first or shortest) and the new group an operator's first layers
// open when no sub-slot is left (the fewest GPUs that can, or its own count). Order v of the
// kPackOrders: bit 2 smaller counts first, bit 0 shortest first, bit 1 own count.
struct PackOrder {
  bool smaller_counts_first = false, shortest_first = false, own_count_for_split = false;
};

// Packs the level within c in that order. Returns false when N GPUs do not hold the groups.
bool pack(const std::vector<Op>& ops, const std::vector<int>& level, int gpus, double c, const PackOrder& order,
          Packing* out) {
  const double cap = c * (1 + 1e-9);
  struct Item {
    int op, count;
    double time;
  };
  std::vector<Item> items;
  for (int i : level) {
    const Op& op = ops[static_cast<size_t>(i)];
    const int n = count_within(op, c, gpus);
    if (n == 0) return false;
    items.push_back({i, n, op.layers * op.curve.at(n)});
  }
  std::stable_sort(items.begin(), items.end(), [&](const Item& a, const Item& b) {
    if (a.count != b.count) return order.smaller_counts_first ? a.count < b.count : a.count > b.count;
    return order.shortest_first ? a.time < b.time : a.time > b.time;
  });
  Packing& p = *out;
  p = Packing{};
  std::vector<Slot> slots;  // slots[cur] is open; the sub-slots after it wait their turn
  size_t cur = 0;
  int used = 0;
  auto place = [&](int op, const Slot& s, int layers, double per_layer, double start) {
    Placed x;
    x.piece = {op, s.gpus, layers, layers * per_layer};
    x.start_s = start;
    x.group = s.group;
    x.offset = s.offset;
    p.pieces.push_back(x);
    p.end_s = std::max(p.end_s, start + x.piece.time_s);
    return start + x.piece.time_s;
  };
  auto fresh = [&](int n) {
    p.groups.push_back(n);
    used += n;
    slots.push_back({static_cast<int>(p.groups.size()) - 1, 0, n, 0.0});
  };
  for (const Item& it : items) {
    const Op& op = ops[static_cast<size_t>(it.op)];
    const int L = op.layers;
    bool done = false;
    while (!done && cur < slots.size()) {
      int sub = 0;  // the fewest GPUs, from its own count, that run it whole in what is left
      for (int n : op.curve.n)
        if (sub == 0 && n >= it.count && n < slots[cur].gpus && slots[cur].gpus % n == 0 &&
            slots[cur].end + L * op.curve.at(n) <= cap)
          sub = n;
      if (sub > 0) {
        const Slot parent = slots[cur];
        std::vector<Slot> subs;
        for (int j = 0; j < parent.gpus / sub; ++j) subs.push_back({parent.group, parent.offset + j * sub, sub, parent.end});
        slots.erase(slots.begin() + static_cast<long>(cur));
        slots.insert(slots.begin() + static_cast<long>(cur), subs.begin(), subs.end());
      }
      if (!valid_count(op.curve, slots[cur].gpus)) {
        ++cur;
        continue;
      }
      const double ta = op.curve.at(slots[cur].gpus);
      if (slots[cur].end + L * ta <= cap) {  // the whole operator in what is left of the slot
        slots[cur].end = place(it.op, slots[cur], L, ta, slots[cur].end);
        done = true;
        break;
      }
      std::vector<Slot> next;  // where its first layers may go
      if (cur + 1 < slots.size()) {
        next.push_back(slots[cur + 1]);
      } else {
        for (int nb : op.curve.n) {
          if (nb > it.count || used + nb > gpus) break;
          if (order.own_count_for_split && nb != it.count) continue;
          next.push_back({-1, 0, nb, 0.0});
        }
      }
      for (const Slot& b : next) {
        if (!valid_count(op.curve, b.gpus)) continue;
        const double tb = op.curve.at(b.gpus);
        int k = L - 1;
        for (; k >= 1; --k) {
          const double r = (L - k) * tb;
          if (b.end + r <= cap && std::max(slots[cur].end, b.end + r) + k * ta <= cap) break;
        }
        if (k < 1) continue;
        if (b.group < 0) fresh(b.gpus);  // at cur + 1: no sub-slot was waiting
        const double first_end = place(it.op, slots[cur + 1], L - k, tb, slots[cur + 1].end);
        slots[cur + 1].end = first_end;
        slots[cur].end = place(it.op, slots[cur], k, ta, std::max(slots[cur].end, first_end));
        ++cur;
        done = true;
        break;
      }
      if (!done) ++cur;  // what is left of this slot stays idle
    }
    if (done) continue;
    if (used + it.count > gpus) return false;
    fresh(it.count);
    cur = slots.size() - 1;
    slots[cur].end = place(it.op, slots[cur], L, op.curve.at(it.count), 0.0);
  }
  return true;
}

// Wrap-around packing of one level (above): in each order of PackOrder (or only `order`, when it is
// 0 to kPackOrders - 1) the least c that packs, by bisection; the order whose groups end first
// kept. The groups get ranks largest first (a group of a power-of-two count then starts at a
// multiple of it and stays inside a node when it fits in one). `reversed` runs the packing
// backwards in time (each piece at C - its end; an operator's pieces then in the other order, its
// first layers in the piece that now comes first), so that the operators packed first, of the
// largest counts, run their forwards last and their backwards first, and their gradients'
// reductions start early. The waves number the pieces by start: each after the pieces before it
// on its ranks and its operator's earlier piece. Appends the waves from `start_s` and returns the
// level's end, the waves one after another; +inf when no length packs.
double packed(const std::vector<Op>& ops, const std::vector<int>& level, int gpus, double bound_s, int order,
              bool reversed, double start_s, std::vector<Wave>* waves) {
  Packing best, trial;
  double best_end = kInf;
  for (int v = 0; v < kPackOrders; ++v) {
    if (order >= 0 && v != order) continue;
    const PackOrder o{(v & 4) != 0, (v & 1) != 0, (v & 2) != 0};
    // The least c that packs in this order, by bisection; the packing that ends first kept.
    Packing mine;
    double mine_end = kInf;
    auto tryc = [&](double c) {
      if (!pack(ops, level, gpus, c, o, &trial)) return false;
      if (trial.end_s < mine_end) mine_end = trial.end_s, mine = trial;
      return true;
    };
    double low = bound_s, high = bound_s;
    for (int i = 0; i < 64 && !tryc(high); ++i) high *= 1.25;
    if (!std::isfinite(mine_end)) continue;
    for (int it = 0; it < 40 && high - low > 1e-6 * high; ++it) {
      const double mid = 0.5 * (low + high);
      if (tryc(mid))
        high = mid;
      else
        low = mid;
    }
    if (mine_end < best_end) best_end = mine_end, best = std::move(mine);
  }
  if (!std::isfinite(best_end)) return kInf;
  // Ranks: groups largest first.
  std::vector<size_t> by_size(best.groups.size());
  for (size_t g = 0; g < by_size.size(); ++g) by_size[g] = g;
  std::stable_sort(by_size.begin(), by_size.end(),
                   [&](size_t a, size_t b) { return best.groups[a] > best.groups[b]; });
  std::vector<int> group_rank(best.groups.size());
  int next_rank = 0;
  for (size_t g : by_size) group_rank[g] = next_rank, next_rank += best.groups[g];
  struct Timed {
    double start;
    int first_rank;
    size_t at;
  };
  std::vector<Timed> timed;
  for (size_t i = 0; i < best.pieces.size(); ++i) {
    const Placed& x = best.pieces[i];
    const double start = reversed ? best.end_s - (x.start_s + x.piece.time_s) : x.start_s;
    timed.push_back({start, group_rank[static_cast<size_t>(x.group)] + x.offset, i});
  }
  std::stable_sort(timed.begin(), timed.end(), [](const Timed& a, const Timed& b) {
    return a.start != b.start ? a.start < b.start : a.first_rank < b.first_rank;
  });
  std::vector<int> rank_wave(static_cast<size_t>(gpus), -1);
  std::map<int, int> op_wave;
  std::vector<std::vector<Piece>> by_wave;
  for (const Timed& t : timed) {
    Piece pc = best.pieces[t.at].piece;
    pc.first_rank = t.first_rank;
    int w = 0;
    if (auto it = op_wave.find(pc.op); it != op_wave.end()) w = it->second + 1;
    for (int r = pc.first_rank; r < pc.first_rank + pc.gpus; ++r) w = std::max(w, rank_wave[static_cast<size_t>(r)] + 1);
    for (int r = pc.first_rank; r < pc.first_rank + pc.gpus; ++r) rank_wave[static_cast<size_t>(r)] = w;
    op_wave[pc.op] = w;
    if (by_wave.size() <= static_cast<size_t>(w)) by_wave.resize(static_cast<size_t>(w) + 1);
    by_wave[static_cast<size_t>(w)].push_back(pc);
  }
  double now = start_s;
  for (std::vector<Piece>& pieces : by_wave) {
    Wave w;
    w.start_s = now;
    std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) { return a.first_rank < b.first_rank; });
    for (const Piece& pc : pieces) w.time_s = std::max(w.time_s, pc.time_s);
    w.pieces = std::move(pieces);
    now += w.time_s;
    waves->push_back(std::move(w));
  }
  return now;
}

// The level's operators one after another, each alone in a wave on its fastest valid count <= N
// (the fewer GPUs on a tie). Appends the waves from `start_s` and returns the level's end.
double one_after_another(const std::vector<Op>& ops, const std::vector<int>& level, int gpus, double start_s,
                         std::vector<Wave>* waves) {
  double now = start_s;
  for (int i : level) {
    const Op& op = ops[static_cast<size_t>(i)];
    int best = 0;
    for (int n : op.curve.n)
      if (n <= gpus && (best == 0 || op.curve.at(n) < op.curve.at(best))) best = n;
    WEFT_ASSERT(best > 0, "an operator with no valid count <= N passed discretise");
    Wave w;
    w.start_s = now;
    w.time_s = op.layers * op.curve.at(best);
    w.pieces.push_back({i, best, op.layers, w.time_s});
    now += w.time_s;
    waves->push_back(std::move(w));
  }
  return now;
}

// Task checks shared by the baselines: operator indices in range, at least one operator.
Status check_tasks(const std::vector<Op>& ops, const std::vector<TaskOps>& tasks) {
  for (size_t j = 0; j < tasks.size(); ++j) {
    const TaskOps& task = tasks[j];
    if (task.ops.empty()) return bad("task '" + task.name + "' has no operators");
    for (int i : task.ops)
      if (i < 0 || static_cast<size_t>(i) >= ops.size())
        return bad("task '" + task.name + "': operator index " + S(i) + " is out of range (" + S(ops.size()) +
                   " operators)");
  }
  return Status::Ok();
}

// A task's time on n GPUs: its operators one after another, each on its largest valid count <= n.
// n is at least every operator's first count (task_greedy_time's candidates), so each has one.
double task_time(const std::vector<Op>& ops, const TaskOps& task, int n) {
  double t = 0;
  for (int i : task.ops) {
    const Op& op = ops[static_cast<size_t>(i)];
    const int c = largest_count_up_to(op.curve, n);
    WEFT_ASSERT(c > 0, "a task's count is below one of its operators' first count");
    t += op.curve.at(c) * op.layers;
  }
  return t;
}

}  // namespace

double Curve::at(double x) const {
  const size_t k = std::min(n.size(), t.size());
  if (k == 0 || !(x > 0)) return kInf;
  if (x <= n[0]) return t[0] * n[0] / x;  // perfect scaling below the first count
  if (x >= n[k - 1]) return t[k - 1];     // flat above the last
  // n[i] <= x < n[i + 1]
  const size_t i = static_cast<size_t>(std::upper_bound(n.begin(), n.begin() + static_cast<long>(k), x) - n.begin()) - 1;
  if (x == n[i]) return t[i];
  // Linear in 1/x: what dividing a fixed work w by x GPUs gives.
  const double u1 = 1.0 / n[i], u2 = 1.0 / n[i + 1];
  return t[i] + (t[i + 1] - t[i]) * (1 / x - u1) / (u2 - u1);
}

Status check_ops(const std::vector<Op>& ops, int gpus) {
  if (gpus < 1) return bad("gpus " + S(gpus) + " is not >= 1");
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    const std::string who = op_label(ops, static_cast<int>(i));
    if (op.layers < 1) return bad(who + ": layers " + S(op.layers) + " is not >= 1");
    const Curve& c = op.curve;
    if (c.n.empty()) return bad(who + ": the curve has no valid counts");
    if (c.n.size() != c.t.size())
      return bad(who + ": the curve has " + S(c.n.size()) + " counts but " + S(c.t.size()) + " times");
    for (size_t j = 0; j < c.n.size(); ++j) {
      if (c.n[j] < 1) return bad(who + ": count " + S(c.n[j]) + " is not >= 1");
      if (j > 0 && c.n[j] <= c.n[j - 1])
        return bad(who + ": counts " + S(c.n[j - 1]) + " then " + S(c.n[j]) + " are not ascending and distinct");
      if (!(c.t[j] > 0) || !std::isfinite(c.t[j]))
        return bad(who + ": time " + num(c.t[j]) + " s on " + S(c.n[j]) + " GPUs is not positive and finite");
    }
  }
  auto lv = levels(ops);  // dependencies in range, no cycle
  if (!lv.ok()) return lv.error();
  return Status::Ok();
}

Result<std::vector<std::vector<int>>> levels(const std::vector<Op>& ops) {
  const int m = static_cast<int>(ops.size());
  for (int i = 0; i < m; ++i)
    for (int d : ops[static_cast<size_t>(i)].deps)
      if (d < 0 || d >= m)
        return bad(op_label(ops, i) + ": dependency " + S(d) + " is out of range (" + S(m) + " operators)");
  // Kahn's algorithm: an operator's level is fixed once all its dependencies are.
  std::vector<int> missing(static_cast<size_t>(m), 0), level(static_cast<size_t>(m), 0);
  std::vector<std::vector<int>> users(static_cast<size_t>(m));
  for (int i = 0; i < m; ++i)
    for (int d : ops[static_cast<size_t>(i)].deps) {
      ++missing[static_cast<size_t>(i)];
      users[static_cast<size_t>(d)].push_back(i);
    }
  std::vector<int> ready;
  for (int i = 0; i < m; ++i)
    if (missing[static_cast<size_t>(i)] == 0) ready.push_back(i);
  int done = 0;
  while (!ready.empty()) {
    const int i = ready.back();
    ready.pop_back();
    ++done;
    for (int u : users[static_cast<size_t>(i)]) {
      level[static_cast<size_t>(u)] = std::max(level[static_cast<size_t>(u)], level[static_cast<size_t>(i)] + 1);
      if (--missing[static_cast<size_t>(u)] == 0) ready.push_back(u);
    }
  }
  if (done < m) {
    // Walk from the first unfinished operator through unfinished dependencies until one repeats:
    // that one lies on a cycle.
    int cur = 0;
    while (missing[static_cast<size_t>(cur)] == 0) ++cur;
    std::vector<int> path, seen_at(static_cast<size_t>(m), -1);
    while (seen_at[static_cast<size_t>(cur)] < 0) {
      seen_at[static_cast<size_t>(cur)] = static_cast<int>(path.size());
      path.push_back(cur);
      for (int d : ops[static_cast<size_t>(cur)].deps)
        if (missing[static_cast<size_t>(d)] > 0) {
          cur = d;
          break;
        }
    }
    std::string cycle;
    for (size_t k = static_cast<size_t>(seen_at[static_cast<size_t>(cur)]); k < path.size(); ++k)
      cycle += "'" + ops[static_cast<size_t>(path[k])].name + "' -> ";
    return bad(op_label(ops, cur) + " depends on itself through a cycle: " + cycle + "'" +
               ops[static_cast<size_t>(cur)].name + "'");
  }
  const int depth = m == 0 ? 0 : *std::max_element(level.begin(), level.end()) + 1;
  std::vector<std::vector<int>> out(static_cast<size_t>(depth));
  for (int i = 0; i < m; ++i) out[static_cast<size_t>(level[static_cast<size_t>(i)])].push_back(i);
  return out;
}

Result<Bound> continuous_bound(const std::vector<Op>& ops, const std::vector<int>& level, int gpus) {
  if (Status s = check_ops(ops, gpus); !s.ok()) return s.error();
  for (int i : level)
    if (i < 0 || static_cast<size_t>(i) >= ops.size())
      return bad("level: operator index " + S(i) + " is out of range (" + S(ops.size()) + " operators)");
  Bound b;
  if (level.empty()) return b;
  // Spindle Theorem 1: C* is the least C with sum n_m(C) <= N. Bracket: no operator finishes before
  // its fastest time on <= N GPUs (max T_m(N) L_m for a decreasing curve), and at sum T_m(1) L_m
  // every operator fits on a fraction of one GPU. n_m may be below 1 (perfect scaling below the
  // first count, i.e. time-sharing a GPU), so that a level of more operators than GPUs has a bound.
  double low = 0, high = 0;
  for (int i : level) {
    const Op& op = ops[static_cast<size_t>(i)];
    low = std::max(low, min_time(op.curve, gpus) * op.layers);
    high += op.curve.at(1) * op.layers;
  }
  const double n = gpus;
  const double slack = 1e-12 * n;  // rounding in the sum of real counts
  if (gpus_needed(ops, level, low, gpus, &b.gpus) <= n + slack) {
    b.c_s = low;
    return b;
  }
  for (int it = 0; it < kMaxIterations && high - low > kRelWidth * high; ++it) {
    const double mid = 0.5 * (low + high);
    std::vector<double> g;
    if (gpus_needed(ops, level, mid, gpus, &g) <= n + slack)
      high = mid;
    else
      low = mid;
  }
  b.c_s = high;
  (void)gpus_needed(ops, level, high, gpus, &b.gpus);
  return b;
}

Result<Allocation> allocate(const std::vector<Op>& ops, int gpus, const WaveCost& extra, AllocateMode mode,
                            int pack_order) {
  if (Status s = check_ops(ops, gpus); !s.ok()) return s.error();
  auto lv = levels(ops);
  if (!lv.ok()) return lv.error();
  Allocation a;
  double now = 0;
  for (const std::vector<int>& level : *lv) {
    auto bound = continuous_bound(ops, level, gpus);
    if (!bound.ok()) return bound.error();
    a.level_bound_s.push_back(bound->c_s);
    a.bound_s += bound->c_s;
    std::vector<Pending> pending;
    for (size_t k = 0; k < level.size(); ++k) {
      auto split = discretise(ops, level[k], bound->gpus[k], bound->c_s, gpus);
      if (!split.ok()) return split.error();
      const Curve& c = ops[static_cast<size_t>(level[k])].curve;
      pending.push_back({level[k], split->lo, split->hi, split->layers_lo, split->layers_hi, c.at(split->lo),
                         c.at(split->hi)});
    }
    // Spindle's waves, or the level's operators one after another on their fastest count <= N when
    // that is shorter (near-perfect scaling leaves the waves nothing to gain and whole layers cost
    // them some): a plan is never worse than running the level's tasks in turn.
    std::vector<Wave> waves;
    if (mode == AllocateMode::kPacked || mode == AllocateMode::kPackedReversed) {
      double end = packed(ops, level, gpus, bound->c_s, pack_order, mode == AllocateMode::kPackedReversed, now, &waves);
      if (!std::isfinite(end)) waves.clear(), end = one_after_another(ops, level, gpus, now, &waves);
      now = end;
      for (Wave& w : waves) a.waves.push_back(std::move(w));
      continue;
    }
    const double end = wavefront(ops, std::move(pending), gpus, now, &waves);
    std::vector<Wave> again;
    const double end_again = replanned_waves(ops, level, gpus, now, &again);
    std::vector<Wave> in_turn;
    const double end_in_turn = one_after_another(ops, level, gpus, now, &in_turn);
    auto cost = [&](double level_end, const std::vector<Wave>& w) { return level_end + (extra ? extra(w) : 0.0); };
    double best = cost(end, waves), best_end = end;
    if (mode == AllocateMode::kWavefront) {
    } else if (mode == AllocateMode::kReplanned) {
      waves = std::move(again), best_end = end_again;
    } else if (mode == AllocateMode::kInTurn) {
      waves = std::move(in_turn), best_end = end_in_turn;
    } else {
      if (const double c = cost(end_again, again); c < best) waves = std::move(again), best = c, best_end = end_again;
      if (const double c = cost(end_in_turn, in_turn); c < best) waves = std::move(in_turn), best = c, best_end = end_in_turn;
    }
    now = best_end;
    for (Wave& w : waves) a.waves.push_back(std::move(w));
  }
  // The sum of the waves' times, in wave order (the same sum `now` took).
  a.makespan_s = now;
  return a;
}

Result<double> sequential_time(const std::vector<Op>& ops, const std::vector<TaskOps>& tasks, int gpus,
                               std::vector<TaskRun>* runs) {
  if (Status s = check_ops(ops, gpus); !s.ok()) return s.error();
  if (Status s = check_tasks(ops, tasks); !s.ok()) return s.error();
  double total = 0;
  if (runs) runs->clear();
  for (const TaskOps& task : tasks) {
    TaskRun run;
    run.gpus = gpus;
    run.start_s = total;
    for (int i : task.ops) {
      const Op& op = ops[static_cast<size_t>(i)];
      const int c = largest_count_up_to(op.curve, gpus);
      if (c == 0)
        return bad("task '" + task.name + "': " + op_label(ops, i) + " has no valid count <= " + S(gpus) +
                   " GPUs (its smallest is " + S(op.curve.n.front()) + ")");
      total += op.curve.at(c) * op.layers;
      run.op_gpus.push_back(c);
    }
    run.time_s = total - run.start_s;
    if (runs) runs->push_back(std::move(run));
  }
  return total;
}

Result<double> task_greedy_time(const std::vector<Op>& ops, const std::vector<TaskOps>& tasks, int gpus,
                                std::vector<TaskRun>* runs) {
  if (runs) runs->assign(tasks.size(), TaskRun{});
  if (Status s = check_ops(ops, gpus); !s.ok()) return s.error();
  if (Status s = check_tasks(ops, tasks); !s.ok()) return s.error();
  // A task's candidates: the union of its operators' valid counts <= N, from the least count on
  // which every one of its operators has a valid count (the header's "smallest valid count").
  std::vector<std::vector<int>> cands(tasks.size());
  for (size_t j = 0; j < tasks.size(); ++j) {
    int floor_count = 0;
    for (int i : tasks[j].ops) floor_count = std::max(floor_count, ops[static_cast<size_t>(i)].curve.n.front());
    for (int i : tasks[j].ops)
      for (int n : ops[static_cast<size_t>(i)].curve.n)
        if (n >= floor_count && n <= gpus) cands[j].push_back(n);
    std::sort(cands[j].begin(), cands[j].end());
    cands[j].erase(std::unique(cands[j].begin(), cands[j].end()), cands[j].end());
    if (cands[j].empty())
      return bad("task '" + tasks[j].name + "' needs " + S(floor_count) + " GPUs (the largest first count of its " +
                 "operators) but only " + S(gpus) + " are given");
  }
  // One round: the tasks of `round` side by side, GPUs moved by marginal gain.
  auto side_by_side = [&](const std::vector<size_t>& round, double start_s) {
    std::vector<size_t> at(tasks.size(), 0);
    std::vector<double> time(tasks.size(), 0.0);
    int used = 0;
    for (size_t j : round) used += cands[j][0], time[j] = task_time(ops, tasks[j], cands[j][0]);
    // Spindle-Optimus: the largest marginal gain (T(n) - T(n')) / (n' - n) moves first (lower task
    // index on a tie); a task moves only while its next count fits and makes it faster.
    for (;;) {
      int best = -1;
      double best_gain = 0, best_time = 0;
      for (size_t j : round) {
        if (at[j] + 1 >= cands[j].size()) continue;
        const int n = cands[j][at[j]], next = cands[j][at[j] + 1];
        if (used - n + next > gpus) continue;
        const double t_next = task_time(ops, tasks[j], next);
        const double gain = (time[j] - t_next) / (next - n);
        if (gain > best_gain) {
          best = static_cast<int>(j);
          best_gain = gain;
          best_time = t_next;
        }
      }
      if (best < 0) break;
      const size_t j = static_cast<size_t>(best);
      used += cands[j][at[j] + 1] - cands[j][at[j]];
      ++at[j];
      time[j] = best_time;
    }
    double slowest = 0;
    int first = 0;
    for (size_t j : round) {
      slowest = std::max(slowest, time[j]);
      if (!runs) continue;
      TaskRun& r = (*runs)[j];
      r.first_rank = first;
      r.gpus = cands[j][at[j]];
      r.start_s = start_s;
      r.time_s = time[j];
      for (int i : tasks[j].ops) r.op_gpus.push_back(largest_count_up_to(ops[static_cast<size_t>(i)].curve, r.gpus));
      first += r.gpus;
    }
    return slowest;
  };
  // More tasks than their smallest counts fit on N: rounds of tasks in order, each as many as fit,
  // one round after another (the task-level baseline cannot split a task's GPUs finer).
  double total = 0;
  std::vector<size_t> round;
  int used = 0;
  for (size_t j = 0; j < tasks.size(); ++j) {
    if (used + cands[j][0] > gpus) {
      total += side_by_side(round, total);
      round.clear();
      used = 0;
    }
    round.push_back(j);
    used += cands[j][0];
  }
  total += side_by_side(round, total);
  return total;
}

}  // namespace weft::multitask
