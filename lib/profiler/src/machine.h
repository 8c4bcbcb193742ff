// Facts about the machine and this process, read from the operating system, the progress
// display, and the one-process plan the profiler runs the runtime's code under. Torch-free.
#pragma once

#include <chrono>
#include <string>

#include "weft/plan/plan.h"

namespace weft::profiler {

std::string host_name();
std::string cpu_model();        // /proc/cpuinfo "model name", or "cpu"
int cpu_cores();                // hardware concurrency
double memory_total_bytes();    // /proc/meminfo MemTotal
double memory_available_bytes();// /proc/meminfo MemAvailable
double resident_bytes();        // this process's VmRSS
double heap_in_use_bytes();     // glibc allocator: bytes handed out (arena + mmapped chunks)
std::string utc_now();          // ISO 8601, seconds

// A plan that runs all of `m` in this one process (a 1 x 1 CPU "cluster" with this machine's
// memory): `samples` per step in one micro-batch of `seq` tokens, fp32, every layer under `layer`
// and the embedding / head under its ZeRO stage. `name` labels the cluster.
Plan single_process_plan(const ModelSpec& m, int samples, int seq, const LayerStrategy& layer,
                         const std::string& name);

// A progress display for `total` steps on stderr: a bar redrawn in place when `mode` is "on", or
// "auto" and stderr is a terminal; otherwise one line per `note()` call (none for tick()). Only
// the rank that owns it prints.
class Progress {
 public:
  Progress(const std::string& title, long total, const std::string& mode, bool active);
  ~Progress();
  void tick(const std::string& what);     // one step done (redraws the bar)
  void note(const std::string& line);     // a line worth keeping (printed above the bar)
  void finish();

 private:
  void draw();
  std::string title_, what_;
  long total_ = 1, done_ = 0;
  bool bar_ = false, active_ = false, finished_ = false;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace weft::profiler
