#include "weft/varlen/prefetch.h"

#include <chrono>

namespace weft::varlen {

PlanPrefetcher::PlanPrefetcher(Source source, std::shared_ptr<const SeqCost> cost, PlannerOptions options, int ahead)
    : source_(std::move(source)), cost_(std::move(cost)), options_(options), ahead_(ahead < 1 ? 1 : ahead) {
  thread_ = std::thread([this] { run(); });
}

PlanPrefetcher::~PlanPrefetcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void PlanPrefetcher::run() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || static_cast<int>(ready_.size()) < ahead_; });
      if (stop_) return;
    }
    std::optional<std::vector<std::int64_t>> batch = source_();
    if (!batch) break;
    const auto t0 = std::chrono::steady_clock::now();
    Result<StepPlan> plan = plan_step(*batch, *cost_, options_);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const bool failed = !plan.ok();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (failed) {
        ready_.push_back(plan.error());
      } else {
        Item item;
        item.lengths = std::move(*batch);
        item.plan = std::move(plan).value();
        item.plan_ms = ms;
        ready_.push_back(std::move(item));
      }
    }
    cv_.notify_all();
    if (failed) break;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
}

std::optional<Result<PlanPrefetcher::Item>> PlanPrefetcher::next() {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return !ready_.empty() || done_; });
  if (ready_.empty()) return std::nullopt;
  Result<Item> r = std::move(ready_.front());
  ready_.pop_front();
  const double w = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  waited_ += w;
  if (r.ok()) r.value().waited_s = w;
  lock.unlock();
  cv_.notify_all();
  return r;
}

double PlanPrefetcher::total_wait_s() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waited_;
}

}  // namespace weft::varlen
