#include "weft/search/pruning.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace weft::planner {

void RuleLog::add(std::string_view rule, long long n) {
  if (n <= 0) return;
  for (auto& [name, c] : counts_)
    if (name == rule) {
      c += n;
      return;
    }
  counts_.emplace_back(std::string(rule), n);
}

long long RuleLog::count(std::string_view rule) const {
  for (const auto& [name, c] : counts_)
    if (name == rule) return c;
  return 0;
}

long long RuleLog::total() const {
  long long t = 0;
  for (const auto& kv : counts_) t += kv.second;
  return t;
}

std::vector<int> pareto_indices(const std::vector<double>& time, const std::vector<double>& memory) {
  const int n = static_cast<int>(time.size());
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  // Memory ascending, then time ascending, then index: a point is kept iff its time is below every
  // time seen before it (ties in both keep the first index only).
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    if (memory[a] != memory[b]) return memory[a] < memory[b];
    if (time[a] != time[b]) return time[a] < time[b];
    return a < b;
  });
  std::vector<int> keep;
  double best = std::numeric_limits<double>::infinity();
  for (int i : order) {
    if (time[i] < best) {
      keep.push_back(i);
      best = time[i];
    }
  }
  std::sort(keep.begin(), keep.end());
  return keep;
}

TimeMemoryHull::TimeMemoryHull(const std::vector<double>& memory, const std::vector<double>& time) {
  std::vector<std::pair<double, double>> p;
  for (size_t i = 0; i < memory.size(); ++i)
    if (std::isfinite(time[i]) && std::isfinite(memory[i])) p.emplace_back(memory[i], time[i]);
  std::sort(p.begin(), p.end());
  // Keep the staircase (time strictly decreasing as memory grows), then its lower convex hull.
  std::vector<std::pair<double, double>> stair;
  for (const auto& q : p)
    if (stair.empty() || q.second < stair.back().second) {
      if (!stair.empty() && stair.back().first == q.first) stair.back() = q;
      else stair.push_back(q);
    }
  for (const auto& q : stair) {
    while (pts_.size() >= 2) {
      const auto& a = pts_[pts_.size() - 2];
      const auto& b = pts_.back();
      // b is above (or on) the segment a-q: drop it.
      const double cross = (b.first - a.first) * (q.second - a.second) - (b.second - a.second) * (q.first - a.first);
      if (cross <= 0) pts_.pop_back();
      else break;
    }
    pts_.push_back(q);
  }
}

double TimeMemoryHull::operator()(double x) const {
  if (pts_.empty() || x < pts_.front().first) return std::numeric_limits<double>::infinity();
  if (x >= pts_.back().first) return pts_.back().second;
  auto it = std::upper_bound(pts_.begin(), pts_.end(), x,
                             [](double v, const std::pair<double, double>& p) { return v < p.first; });
  const auto& b = *it;
  const auto& a = *(it - 1);
  const double f = (x - a.first) / (b.first - a.first);
  return a.second + f * (b.second - a.second);
}

}  // namespace weft::planner
