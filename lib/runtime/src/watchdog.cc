#include "watchdog.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace weft::runtime {

namespace {

std::string rank_list(const std::vector<int>& rs) {
  std::string s;
  for (size_t i = 0; i < rs.size(); ++i) s += (i ? ", " : "") + std::to_string(rs[i]);
  return s;
}

}  // namespace

std::string first_line(const std::string& s) {
  const auto nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

Watchdog::Watchdog(GroupSet& g, double timeout_s)
    : rank_(g.rank()), world_(g.world_size()), timeout_(timeout_s), interval_(std::clamp(timeout_s / 5.0, 0.1, 1.0)),
      host_(g.config().master_addr + ":" + std::to_string(g.config().master_port)) {
  store_ = g.new_store_client();
  last_seen_.assign(world_, -1);
  last_change_.assign(world_, Clock::now());
  progress_.assign(world_, 0);
  thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() { stop(); }

void Watchdog::publish(GroupSet& g, const std::string& m) {
  try {
    auto s = g.new_store_client();
    const std::string v = std::to_string(rank_) + "|" + m;
    if (s) s->set(kFailedKey, std::vector<uint8_t>(v.begin(), v.end()));
  } catch (const std::exception&) {
  }
  if (rank_ == 0) std::this_thread::sleep_for(std::chrono::duration<double>(3 * interval_));
}

void Watchdog::stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string Watchdog::diagnose() {
  std::this_thread::sleep_for(std::chrono::duration<double>(3 * interval_));
  std::lock_guard<std::mutex> l(mu_);
  std::vector<int> stale, behind;
  int64_t most = 0;
  for (int r = 0; r < world_; ++r) most = std::max(most, progress_[r]);
  for (int r = 0; r < world_; ++r) {
    if (r == rank_) continue;
    if (std::chrono::duration<double>(Clock::now() - last_change_[r]).count() > 2 * interval_) stale.push_back(r);
    else if (progress_[r] < most) behind.push_back(r);
  }
  if (store_lost_) return "the store on " + host_ + " is unreachable: rank 0 stopped";
  if (!stale.empty()) return "rank " + rank_list(stale) + " stopped responding";
  if (!behind.empty()) return "rank " + rank_list(behind) + " is behind (still before step " + std::to_string(most) + ")";
  return "no peer identified";
}

// Rank 0 hosts the store, so it lingers a few heartbeats for the others to read the message.
void Watchdog::fatal(const std::string& m, bool tell) {
  std::fprintf(stderr, "weft: error: rank %d: %s\n", rank_, m.c_str());
  std::fflush(stderr);
  if (tell) {
    try {
      const std::string v = std::to_string(rank_) + "|" + m;
      store_->set(kFailedKey, std::vector<uint8_t>(v.begin(), v.end()));
    } catch (const std::exception&) {
    }
  }
  if (rank_ == 0) std::this_thread::sleep_for(std::chrono::duration<double>(3 * interval_));
  std::_Exit(5);
}

void Watchdog::run() {
  const std::string me = std::to_string(rank_);
  int64_t published = 0;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    lock.unlock();
    try {
      if (store_->check({kFailedKey})) {
        const auto v = store_->get(kFailedKey);
        const std::string msg(v.begin(), v.end());
        const auto bar = msg.find('|');
        fatal(msg.substr(bar + 1) + " (detected by rank " + msg.substr(0, bar) + ")", false);
      }
      store_->add("weft/hb/" + me, 1);
      const int64_t s = step_.load();
      if (s != published) store_->add("weft/step/" + me, s - published), published = s;
      std::vector<int64_t> hb(world_), st(world_);
      for (int r = 0; r < world_; ++r) {
        hb[r] = store_->add("weft/hb/" + std::to_string(r), 0);
        st[r] = store_->add("weft/step/" + std::to_string(r), 0);
      }
      lock.lock();
      const auto now = Clock::now();
      for (int r = 0; r < world_; ++r) {
        progress_[r] = st[r];
        if (hb[r] != last_seen_[r]) last_seen_[r] = hb[r], last_change_[r] = now;
        else if (r != rank_ && std::chrono::duration<double>(now - last_change_[r]).count() > timeout_ && !stopping_)
          fatal("rank " + std::to_string(r) + " stopped responding (no heartbeat for " +
                std::to_string(static_cast<int>(timeout_)) + " s); stopping");
      }
    } catch (const std::exception& e) {
      if (!lock.owns_lock()) lock.lock();
      if (stopping_) break;
      store_lost_ = true;
      if (rank_ != 0)
        fatal("lost the job's store on " + host_ + " (rank 0 stopped or is unreachable): " + first_line(e.what()));
      fatal("the job's store failed: " + first_line(e.what()));
    }
    cv_.wait_for(lock, std::chrono::duration<double>(interval_), [this] { return stopping_; });
  }
}

}  // namespace weft::runtime
