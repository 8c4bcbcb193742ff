// Stragglers (docs/runtime.md "Stragglers"): every rank's compute time per step is gathered with
// the step's loss; a rank slower than the others' median by a margin for several steps in a row is
// named in the log, and named again when it is back. `--slow RANK:FACTOR[:FROM_STEP]` makes a rank
// slow on purpose (its forward and backward take FACTOR times as long, by sleeping for the extra
// time after each backward pass), to test this and what builds on it. Torch-free.
#pragma once

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "weft/core/error.h"
#include "weft/plan/plan.h"

namespace weft::runtime {

struct SlowRank {
  int rank = -1;         // -1: none
  double factor = 1;     // >= 1
  int from_step = 1;
  int to_step = 0;       // the last step slowed (0: to the end)
  bool applies(int r, int step) const { return r == rank && step >= from_step && (to_step == 0 || step <= to_step); }
};

// "RANK:FACTOR[:FROM_STEP[:TO_STEP]]"; "" gives none. Errors (kBadInput) name --slow and the numbers:
// a rank outside [0, world), a factor below 1 or not a number, a step below 1, TO_STEP before FROM_STEP.
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

// --- weft train --adapt ----------------------------------------------------------------------
// What the planner side provides (the CLI fills it from weft/search/hetero.h; the runtime depends on
// nothing above lib/plan).
struct Replan {
  Plan plan;                   // the plan to run from the next step
  double predicted_s = 0;      // its predicted step time under the measured slowdowns (any unit)
  double current_s = 0;        // the running plan's, under the same slowdowns (the same unit)
  double plan_ms = 0;          // how long the re-plan took
  std::int64_t bytes_to_move = 0;  // parameter and optimizer state that would change ranks
  double move_s = 0;           // the time moving it would take (seconds), 0 when nothing moves
  std::string change;          // what changes, in words ("shares 5:1:5:5, 1 micro-batch", "stages
                               // 3:1:2:2 layers, even shares")
};
struct AdaptHooks {
  // Per rank: the work plan p gives it per step (any unit; only the ratios between ranks are used).
  std::function<std::vector<double>(const Plan& p)> expected;
  // The best plan for `slowdown` per rank (1 = as planned) that the running job can switch to: new
  // data-parallel shares, or a new structure on the same ranks (the job then moves its state
  // between ranks in place).
  std::function<Result<Replan>(const Plan& current, const std::vector<double>& slowdown)> replan;
};

struct AdaptOptions {
  double margin = 1.25;        // re-plan when a rank's slowdown differs from the plan's by this factor
  int steps = 3;               // for this many steps in a row
  double min_gain = 1.05;      // switch only when the new plan is predicted this much faster
};

// Per rank, its slowdown in one step: (measured / expected compute) over the ranks' lower quartile
// of that ratio, at least 1: ranks at full speed read about 1, a rank at half speed 2.
std::vector<double> measured_slowdown(const std::vector<double>& compute_s, const std::vector<double>& expected_s);

// Decides when to re-plan: each step's measured slowdowns (measured_slowdown of the compute against
// the plan's expectation) against the ones the running plan was made for (`assumed`); when some rank
// has differed by more than the margin for `steps` steps in a row, update() returns the slowdowns
// to re-plan for (per rank, the median over those steps, rounded to 0.05, at least 1, where it
// differs from the assumed slowdown by more than the margin; the assumed one where it does not).
//
// After a switch the expectation is calibrated on the running plan: for `steps` steps nothing is
// re-planned and each rank's compute is compared with what the cost model expects of it at the
// slowdown the plan was made for; their ratio (the model's error on this machine for that rank's
// work, e.g. fixed costs a small share does not shrink) then corrects the expectation, so only a
// change of speed (a further slowdown, a recovery) reads as one. A rank the plan gives no work (a
// replica the planner suspended: `weft plan --straggler` may) computes nothing to measure: its
// slowdown is its probe time (`probe_s`, every rank timing the same small matmul) over the median
// of the working ranks' probes, at least 1; without probes it keeps the slowdown assumed for it
// rather than reading its idle compute as a recovery.
class Adapter {
 public:
  Adapter(AdaptOptions o, int world) : o_(o), assumed_(world, 1.0), calib_(world, 1.0) {}
  std::optional<std::vector<double>> update(const std::vector<double>& compute_s,
                                            const std::vector<double>& expected_s,
                                            const std::vector<double>& probe_s = {});
  // A new plan made for slowdowns `s` runs from the next step (calibrates, as above).
  void switched(std::vector<double> s);
  // A re-plan for `s` that did not pay: the running plan stays, `s` is what it now runs under.
  void assume(std::vector<double> s);
  const std::vector<double>& assumed() const { return assumed_; }

 private:
  AdaptOptions o_;
  std::vector<double> assumed_, calib_;
  std::vector<std::vector<double>> window_;       // the last steps' slowdowns while they differ
  std::vector<std::vector<double>> calibrating_;  // per step after a switch: compute / (expected x assumed)
};

}  // namespace weft::runtime
