#include "weft/runtime/straggler.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace weft::runtime {

Result<SlowRank> parse_slow(const std::string& s, int world) {
  SlowRank r;
  if (s.empty()) return r;
  auto bad = [&](const std::string& why) {
    return Error{ErrorKind::kBadInput, "--slow \"" + s + "\": " + why + " (expected RANK:FACTOR[:FROM_STEP])"};
  };
  std::vector<std::string> parts;
  for (size_t at = 0;;) {
    const size_t c = s.find(':', at);
    parts.push_back(s.substr(at, c == std::string::npos ? std::string::npos : c - at));
    if (c == std::string::npos) break;
    at = c + 1;
  }
  if (parts.size() < 2 || parts.size() > 3) return bad("two or three fields");
  char* end = nullptr;
  const long rank = std::strtol(parts[0].c_str(), &end, 10);
  if (parts[0].empty() || *end != '\0') return bad("RANK is not an integer");
  if (rank < 0 || rank >= world)
    return bad("rank " + std::to_string(rank) + " is outside the job's " + std::to_string(world) + " ranks");
  r.rank = static_cast<int>(rank);
  r.factor = std::strtod(parts[1].c_str(), &end);
  if (parts[1].empty() || *end != '\0') return bad("FACTOR is not a number");
  if (!(r.factor >= 1)) return bad("FACTOR " + parts[1] + " must be at least 1");
  if (parts.size() == 3) {
    const long from = std::strtol(parts[2].c_str(), &end, 10);
    if (parts[2].empty() || *end != '\0' || from < 1) return bad("FROM_STEP must be a step number, 1 or more");
    r.from_step = static_cast<int>(from);
  }
  return r;
}

std::vector<std::string> StragglerDetector::update(int step, const std::vector<double>& compute_s) {
  std::vector<std::string> out;
  const size_t n = compute_s.size();
  if (n < 2) return out;
  slow_run_.resize(n, 0), fast_run_.resize(n, 0);
  std::vector<double> sorted = compute_s;
  std::sort(sorted.begin(), sorted.end());
  const double median = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  for (size_t r = 0; r < n; ++r) {
    const bool slow = median > 0 && compute_s[r] > o_.margin * median;
    slow_run_[r] = slow ? slow_run_[r] + 1 : 0;
    fast_run_[r] = slow ? 0 : fast_run_[r] + 1;
    char b[256];
    const int rank = static_cast<int>(r);
    if (slow && slow_run_[r] == o_.steps && !stragglers_.count(rank)) {
      stragglers_.insert(rank);
      std::snprintf(b, sizeof b,
                    "weft: rank %d is a straggler: %.3f s of compute in step %d against the ranks' median %.3f s "
                    "(%.2fx; slower than %.2fx for %d steps in a row)",
                    rank, compute_s[r], step, median, compute_s[r] / median, o_.margin, o_.steps);
      out.emplace_back(b);
    } else if (!slow && fast_run_[r] == o_.steps && stragglers_.count(rank)) {
      stragglers_.erase(rank);
      std::snprintf(b, sizeof b, "weft: rank %d is no longer a straggler: %.3f s of compute in step %d, median %.3f s",
                    rank, compute_s[r], step, median);
      out.emplace_back(b);
    }
  }
  return out;
}

}  // namespace weft::runtime
