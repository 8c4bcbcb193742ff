// The closed forms that pipeline schedules are checked against, over per-stage timings. Each
// stage's send is split evenly between its forward and its backward: F_s = fwd + p2p / 2,
// B_s = bwd + p2p / 2.
#pragma once

#include <algorithm>
#include <vector>

#include "weft/cost/schedule.h"

namespace weft::testing {

struct StageTotals {
  double sum = 0;        // sum_s (F_s + B_s)
  double max_fwd = 0;    // max_s F_s
  double max_bwd = 0;    // max_s B_s
  double max_stage = 0;  // max_s (F_s + B_s)

  // GPipe with m micro-batches as two flow lines of identical jobs: sum + (m - 1)(max F + max B).
  double gpipe(int m) const { return sum + (m - 1) * (max_fwd + max_bwd); }
  // The bottleneck formula of the analytic cost model: (m - 1) max (F + B) + sum.
  double bottleneck(int m) const { return (m - 1) * max_stage + sum; }
};

inline StageTotals stage_totals(const std::vector<StageTiming>& stages) {
  StageTotals t;
  for (const StageTiming& s : stages) {
    const double f = (s.fwd + s.p2p * 0.5).value(), b = (s.bwd + s.p2p * 0.5).value();
    t.sum += f + b;
    t.max_fwd = std::max(t.max_fwd, f);
    t.max_bwd = std::max(t.max_bwd, b);
    t.max_stage = std::max(t.max_stage, f + b);
  }
  return t;
}

}  // namespace weft::testing
