// The batch planner running ahead of training (docs/varlen.md, "Running ahead"): a thread plans the
// global batches a source yields, up to `ahead` plans before the step that will run them, so a step
// waits for its plan only when planning is slower than training. Each step's wait is measured.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "weft/core/error.h"
#include "weft/varlen/planner.h"

namespace weft::varlen {

class PlanPrefetcher {
 public:
  // The next global batch, or nothing when the run has no more. Called on the planning thread.
  using Source = std::function<std::optional<std::vector<std::int64_t>>()>;

  PlanPrefetcher(Source source, std::shared_ptr<const SeqCost> cost, PlannerOptions options = {}, int ahead = 2);
  ~PlanPrefetcher();  // stops the thread (a plan being made is finished first)
  PlanPrefetcher(const PlanPrefetcher&) = delete;
  PlanPrefetcher& operator=(const PlanPrefetcher&) = delete;

  struct Item {
    std::vector<std::int64_t> lengths;
    StepPlan plan;
    double plan_ms = 0;  // planning time of this batch on the planning thread
    double waited_s = 0; // how long next() waited for it
  };
  // The next batch and its plan, in the source's order; waits while it is being planned. Nothing
  // when the source is exhausted; the planner's error for a batch it cannot plan (then nothing more).
  std::optional<Result<Item>> next();

  double total_wait_s() const;

 private:
  void run();

  Source source_;
  std::shared_ptr<const SeqCost> cost_;
  PlannerOptions options_;
  int ahead_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Result<Item>> ready_;
  bool done_ = false, stop_ = false;
  double waited_ = 0;
  std::thread thread_;
};

}  // namespace weft::varlen
