// Stragglers (docs/runtime.md "Stragglers"): every rank's compute time per step is gathered with
// the step's loss; a rank slower than the others' median by a margin for several steps in a row is
// named in the log, and named again when it is back. `--slow RANK:FACTOR[:FROM_STEP]` makes a rank
// slow on purpose (its forward and backward take FACTOR times as long, by sleeping for the extra
// time after each backward pass), to test this and what builds on it. Torch-free.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "weft/core/error.h"

namespace weft::runtime {

struct SlowRank {
  int rank = -1;         // -1: none
  double factor = 1;     // >= 1
  int from_step = 1;
  bool applies(int r, int step) const { return r == rank && step >= from_step; }
};

// "" gives none. Errors (kBadInput) name --slow and the numbers: a rank outside [0, world), a
// factor below 1 or not a number, a step below 1.
Result<SlowRank> parse_slow(const std::string& s, int world);

struct StragglerOptions {
  double margin = 1.25;  // slower than margin x the median of the ranks' compute times
  int steps = 3;         // for this many steps in a row
};

class StragglerDetector {
 public:
  explicit StragglerDetector(StragglerOptions o = {}) : o_(o) {}
  // One step's compute seconds per rank. Returns the lines to log: a rank that has just become a
  // straggler (slower than the margin for `steps` steps in a row), or one that has just recovered
  // (back within the margin for `steps` steps).
  std::vector<std::string> update(int step, const std::vector<double>& compute_s);
  const std::set<int>& stragglers() const { return stragglers_; }

 private:
  StragglerOptions o_;
  std::vector<int> slow_run_, fast_run_;  // consecutive steps over / within the margin, per rank
  std::set<int> stragglers_;
};

}  // namespace weft::runtime
