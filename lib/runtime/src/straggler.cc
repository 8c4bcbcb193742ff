#include "weft/runtime/straggler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "weft/core/stats.h"

namespace weft::runtime {

Result<SlowRank> parse_slow(const std::string& s, int world) {
  SlowRank r;
  if (s.empty()) return r;
  auto bad = [&](const std::string& why) {
    return Error{ErrorKind::kBadInput, "--slow \"" + s + "\": " + why + " (expected RANK:FACTOR[:FROM_STEP[:TO_STEP]])"};
  };
  std::vector<std::string> parts;
  for (size_t at = 0;;) {
    const size_t c = s.find(':', at);
    parts.push_back(s.substr(at, c == std::string::npos ? std::string::npos : c - at));
    if (c == std::string::npos) break;
    at = c + 1;
  }
  if (parts.size() < 2 || parts.size() > 4) return bad("two to four fields");
  char* end = nullptr;
  const long rank = std::strtol(parts[0].c_str(), &end, 10);
  if (parts[0].empty() || *end != '\0') return bad("RANK is not an integer");
  if (rank < 0 || rank >= world)
    return bad("rank " + std::to_string(rank) + " is outside the job's " + std::to_string(world) + " ranks");
  r.rank = static_cast<int>(rank);
  r.factor = std::strtod(parts[1].c_str(), &end);
  if (parts[1].empty() || *end != '\0') return bad("FACTOR is not a number");
  if (!(r.factor >= 1)) return bad("FACTOR " + parts[1] + " must be at least 1");
  if (parts.size() >= 3) {
    const long from = std::strtol(parts[2].c_str(), &end, 10);
    if (parts[2].empty() || *end != '\0' || from < 1) return bad("FROM_STEP must be a step number, 1 or more");
    r.from_step = static_cast<int>(from);
  }
  if (parts.size() == 4) {
    const long to = std::strtol(parts[3].c_str(), &end, 10);
    if (parts[3].empty() || *end != '\0' || to < r.from_step)
      return bad("TO_STEP must be a step number, FROM_STEP (" + std::to_string(r.from_step) + ") or more");
    r.to_step = static_cast<int>(to);
  }
  return r;
}

std::vector<std::string> StragglerDetector::update(int step, const std::vector<double>& compute_s) {
  std::vector<std::string> out;
  const size_t n = compute_s.size();
  if (n < 2) return out;
  slow_run_.resize(n, 0), fast_run_.resize(n, 0);
  const double mid = median(compute_s);
  for (size_t r = 0; r < n; ++r) {
    const bool slow = mid > 0 && compute_s[r] > o_.margin * mid;
    slow_run_[r] = slow ? slow_run_[r] + 1 : 0;
    fast_run_[r] = slow ? 0 : fast_run_[r] + 1;
    char b[256];
    const int rank = static_cast<int>(r);
    if (slow && slow_run_[r] == o_.steps && !stragglers_.count(rank)) {
      stragglers_.insert(rank);
      std::snprintf(b, sizeof b,
                    "weft: rank %d is a straggler: %.3f s of compute in step %d against the ranks' median %.3f s "
                    "(%.2fx; slower than %.2fx for %d steps in a row)",
                    rank, compute_s[r], step, mid, compute_s[r] / mid, o_.margin, o_.steps);
      out.emplace_back(b);
    } else if (!slow && fast_run_[r] == o_.steps && stragglers_.count(rank)) {
      stragglers_.erase(rank);
      std::snprintf(b, sizeof b, "weft: rank %d is no longer a straggler: %.3f s of compute in step %d, median %.3f s",
                    rank, compute_s[r], step, mid);
      out.emplace_back(b);
    }
  }
  return out;
}

std::vector<double> measured_slowdown(const std::vector<double>& compute_s, const std::vector<double>& expected_s) {
  const size_t n = compute_s.size();
  std::vector<double> ratio(n, 1.0);
  if (expected_s.size() != n) return ratio;
  std::vector<double> sorted;
  for (size_t r = 0; r < n; ++r) {
    ratio[r] = expected_s[r] > 0 ? compute_s[r] / expected_s[r] : 0;
    if (ratio[r] > 0) sorted.push_back(ratio[r]);
  }
  if (sorted.empty()) return std::vector<double>(n, 1.0);
  // Full speed: the lower quartile of the ratios (interpolated), not the least one, so one rank that
  // happened to run fast in a noisy step does not make every other rank look slow.
  std::sort(sorted.begin(), sorted.end());
  const double at = 0.25 * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(at);
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double base = sorted[lo] + (at - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
  for (double& x : ratio) x = base > 0 && x > 0 ? std::max(1.0, x / base) : 1.0;
  return ratio;
}

std::optional<std::vector<double>> Adapter::update(const std::vector<double>& compute_s,
                                                   const std::vector<double>& expected_s,
                                                   const std::vector<double>& probe_s) {
  const size_t n = compute_s.size();
  if (n != assumed_.size() || expected_s.size() != n) return std::nullopt;
  if (!calibrating_.empty() || calib_.empty()) {
    std::vector<double> ratio(n, 1.0);
    for (size_t r = 0; r < n; ++r) {
      const double e = expected_s[r] * assumed_[r];
      ratio[r] = e > 0 && compute_s[r] > 0 ? compute_s[r] / e : 1.0;
    }
    calibrating_.push_back(ratio);
    if (static_cast<int>(calibrating_.size()) < o_.steps) return std::nullopt;
    calib_.assign(n, 1.0);
    for (size_t r = 0; r < n; ++r) {
      std::vector<double> v;
      for (const auto& c : calibrating_) v.push_back(c[r]);
      calib_[r] = median(v);
    }
    calibrating_.clear();
    return std::nullopt;
  }
  std::vector<double> expected(n);
  for (size_t r = 0; r < n; ++r) expected[r] = expected_s[r] * calib_[r];
  std::vector<double> slowdown = measured_slowdown(compute_s, expected);
  // A rank the plan gives no work (a suspended replica) cannot be measured by its compute: its
  // probe against the working ranks' probes, or (no probes) as assumed, so its near-zero compute
  // does not read as a recovery.
  std::vector<double> working;
  if (probe_s.size() == n)
    for (size_t r = 0; r < n; ++r)
      if (expected_s[r] > 0 && probe_s[r] > 0) working.push_back(probe_s[r]);
  const double probe_ref = working.empty() ? 0.0 : median(working);
  for (size_t r = 0; r < n; ++r)
    if (!(expected_s[r] > 0))
      slowdown[r] = probe_ref > 0 && probe_s[r] > 0 ? std::max(1.0, probe_s[r] / probe_ref) : assumed_[r];
  bool differs = false;
  for (size_t r = 0; r < n; ++r) {
    const double q = slowdown[r] / assumed_[r];
    differs = differs || q > o_.margin || q < 1.0 / o_.margin;
  }
  if (!differs) {
    window_.clear();
    return std::nullopt;
  }
  window_.push_back(slowdown);
  if (static_cast<int>(window_.size()) < o_.steps) return std::nullopt;
  // Only what moved beyond the margin is news: a rank whose median stays within it keeps the
  // slowdown assumed for it, so a healthy rank measured at 1.05 in a noisy window does not take
  // work from the others.
  std::vector<double> out(n);
  for (size_t r = 0; r < n; ++r) {
    std::vector<double> v;
    for (const auto& w : window_) v.push_back(w[r]);
    const double m = median(v), q = m / assumed_[r];
    out[r] = q > o_.margin || q < 1.0 / o_.margin ? std::max(1.0, std::round(m * 20) / 20) : assumed_[r];
  }
  window_.clear();
  return out;
}

void Adapter::switched(std::vector<double> s) {
  assumed_ = std::move(s);
  window_.clear();
  calibrating_.clear();
  calib_.clear();  // empty: calibrating from the next update
}

void Adapter::assume(std::vector<double> s) {
  assumed_ = std::move(s);
  window_.clear();
}

}  // namespace weft::runtime
