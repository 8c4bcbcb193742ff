// The failure watchdog of one rank (docs/runtime.md "Failures"): heartbeats through the job's
// store. A thread bumps weft/hb/<rank> every `interval` (timeout / 5, between 0.1 and 1 s) and
// watches everyone else's; a rank whose heartbeat has not moved for `timeout` is declared dead: the
// watchdog prints the message, writes it to the store key weft/failed (which every other rank's
// watchdog reads, exiting with the same message) and ends the process with exit code 5. Losing the
// store means rank 0 (which hosts it) is gone, and ends the process the same way. Thread-safe: the
// main thread calls set_step(), diagnose(), publish() and stop() while the thread runs.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "weft/runtime/comm.h"

namespace weft::runtime {

// The first line of a message (c10::Error's what() carries a backtrace after it).
std::string first_line(const std::string& s);

class Watchdog {
 public:
  // Opens a store connection of its own and starts the thread. The GroupSet must have a store
  // (world > 1).
  Watchdog(GroupSet& g, double timeout_s);
  ~Watchdog();  // stop()
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // This rank has entered step s (published with the next heartbeat; diagnose() names a rank that
  // stays behind).
  void set_step(int64_t s) { step_.store(s); }
  // After a failed collective, from the main thread: waits a few heartbeats and names the ranks that
  // stopped responding, else those still before the newest step, else says no peer was identified.
  std::string diagnose();
  // After a failure, from the main thread: tells the other ranks `message` (through weft/failed, on
  // a store connection of its own; store errors are ignored) and, on rank 0, keeps the store up a
  // few heartbeats for them to read it.
  void publish(GroupSet& g, const std::string& message);
  // Ends the thread (idempotent). No rank is declared dead afterwards.
  void stop();

  static constexpr const char* kFailedKey = "weft/failed";

 private:
  using Clock = std::chrono::steady_clock;
  void run();
  // Prints, tells the other ranks when `tell` and exits with code 5 (rank 0 lingers first).
  [[noreturn]] void fatal(const std::string& m, bool tell = true);

  int rank_, world_;
  double timeout_, interval_;
  std::string host_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false, store_lost_ = false;
  std::atomic<int64_t> step_{0};
  std::vector<int64_t> last_seen_;
  std::vector<Clock::time_point> last_change_;
  std::vector<int64_t> progress_;
};

}  // namespace weft::runtime
