#include "machine.h"

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>
#include <thread>

namespace weft::profiler {

namespace {

// Value of "Key:" in a /proc file, in the unit the file uses (kB for meminfo and status).
double proc_field(const char* file, const std::string& key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) {
      std::istringstream s(line.substr(key.size() + 1));
      double v = 0;
      s >> v;
      return v;
    }
  }
  return 0;
}

}  // namespace

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) {
        std::string v = line.substr(colon + 1);
        while (!v.empty() && v.front() == ' ') v.erase(v.begin());
        return v;
      }
    }
  }
  return "cpu";
}

int cpu_cores() { return static_cast<int>(std::thread::hardware_concurrency()); }
double memory_total_bytes() { return proc_field("/proc/meminfo", "MemTotal") * 1024.0; }
double memory_available_bytes() { return proc_field("/proc/meminfo", "MemAvailable") * 1024.0; }
double resident_bytes() { return proc_field("/proc/self/status", "VmRSS") * 1024.0; }

double heap_in_use_bytes() {
  const struct mallinfo2 m = mallinfo2();
  return static_cast<double>(m.uordblks) + static_cast<double>(m.hblkhd);
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

Progress::Progress(const std::string& title, long total, const std::string& mode, bool active)
    : title_(title), total_(total > 0 ? total : 1), active_(active), start_(std::chrono::steady_clock::now()) {
  bar_ = active_ && (mode == "on" || (mode == "auto" && isatty(STDERR_FILENO)));
}

Progress::~Progress() { finish(); }

void Progress::draw() {
  if (!bar_) return;
  constexpr int kWidth = 30;
  const double f = static_cast<double>(done_) / static_cast<double>(total_);
  const int fill = static_cast<int>(f * kWidth);
  const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::string bar(fill, '#');
  bar += std::string(kWidth - fill, '.');
  std::string what = what_.size() > 40 ? what_.substr(0, 40) : what_;
  std::fprintf(stderr, "\r\033[K%s [%s] %3d%% %5.0fs %s", title_.c_str(), bar.c_str(), static_cast<int>(f * 100), el,
               what.c_str());
  std::fflush(stderr);
}

void Progress::tick(const std::string& what) {
  if (!active_) return;
  ++done_;
  what_ = what;
  draw();
}

void Progress::note(const std::string& line) {
  if (!active_) return;
  if (bar_) std::fprintf(stderr, "\r\033[K%s\n", line.c_str());
  else std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
  draw();
}

void Progress::finish() {
  if (finished_ || !active_) return;
  finished_ = true;
  if (bar_) {
    done_ = total_;
    what_ = "done";
    draw();
    std::fprintf(stderr, "\n");
  }
}

Plan single_process_plan(const ModelSpec& m, int samples, int seq, const LayerStrategy& layer,
                         const std::string& name) {
  Plan p;
  p.model = m;
  p.cluster.name = name;
  p.cluster.nodes = 1;
  p.cluster.gpus_per_node = 1;
  p.cluster.gpu.name = "cpu";
  p.cluster.gpu.tflops_fp32 = 1;
  p.cluster.gpu.memory_gib = std::max(1.0, memory_total_bytes() / 1073741824.0);
  p.cluster.gpu.hbm_gbps = 1;
  p.cluster.intra.gbps = 1;
  p.cluster.inter.gbps = 1;
  p.train.seq = seq;
  p.train.global_batch = samples;
  p.train.micro_batches = 1;
  p.train.pp = 1;
  p.train.dtype = DType::kFp32;
  Stage st;
  st.first_layer = 0;
  st.layers.assign(m.num_layers(), layer);
  p.stages = {st};
  p.embedding.zero = layer.zero;
  return p;
}

}  // namespace weft::profiler
