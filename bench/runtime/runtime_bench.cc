// Runtime throughput: a small GPT trained data-parallel on 1, 2 and 4 local ranks by the weft
// runtime (weft launch + weft train, Gloo on CPU), against the same model, batch and optimizer in
// PyTorch's Python DistributedDataParallel (bench/runtime/ddp_gpt.py on Debian's python3-torch).
//
//   weft_runtime_bench [--steps 12] [--warmup 2] [--worlds 1,2,4] [--no-ddp] [--python /usr/bin/python3]
//
// Prints, per world size: tokens/s and mean step time of both, and the step-time ratio weft / DDP
// (below 1: weft is faster). Per-rank batch 8 x 128 tokens (weak scaling); steps after the warm-up
// are timed. One intra-op thread per rank in both.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "weft/plan/plan.h"

namespace {

using namespace weft;

struct Config {
  int steps = 12, warmup = 2;
  std::vector<int> worlds{1, 2, 4};
  bool ddp = true;
  std::string python = "/usr/bin/python3";
};

// Must match ddp_gpt.py's defaults.
constexpr int kVocab = 2048, kHidden = 256, kLayers = 4, kHeads = 4, kFfn = 1024, kSeq = 128, kBatch = 8;

ModelSpec bench_model() {
  ModelSpec m;
  m.name = "bench-gpt";
  m.vocab = kVocab;
  m.hidden = kHidden;
  m.tied_embeddings = true;
  m.norm = NormKind::kLayerNorm;
  m.position = PositionKind::kLearned;
  m.max_seq = kSeq;
  LayerGroup g;
  g.name = "decoder";
  g.count = kLayers;
  g.shape = LayerShape{LayerKind::kDecoder, kHidden, kHeads, kHeads, kHidden / kHeads, kFfn, FfnKind::kGelu, true, {}};
  m.groups.push_back(g);
  return m;
}

Plan dp_plan(int world) {
  Plan p;
  p.model = bench_model();
  p.cluster.name = "cpu";
  p.cluster.gpus_per_node = world;
  p.cluster.gpu = GpuSpec{"cpu", 1, 0, 0, 0, 0, 16, 10};  // placeholders: the runtime reads only the size
  p.cluster.intra = LinkSpec{10, 10};
  p.train.seq = kSeq;
  p.train.global_batch = kBatch * world;
  p.train.micro_batches = 1;
  p.train.dtype = DType::kFp32;
  LayerStrategy s;
  s.dp = world;
  p.embedding = s;
  p.stages.push_back(Stage{0, std::vector<LayerStrategy>(kLayers, s), {}});
  return p;
}

std::string capture(const std::string& cmd, int* status) {
  std::string out;
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  if (!f) return out;
  char buf[4096];
  while (fgets(buf, sizeof buf, f)) out += buf;
  const int st = pclose(f);
  *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
  return out;
}

struct Figures {
  double step_s = 0, tokens_per_s = 0;
  bool ok = false;
};

Figures run_weft(const Config& c, int world, const std::string& dir) {
  const std::string plan = dir + "/plan" + std::to_string(world) + ".json";
  if (!write_plan_file(plan, dp_plan(world)).ok()) return {};
  std::string cmd;
  if (world > 1) cmd = std::string(WEFT_RT_DRIVER) + " launch -n " + std::to_string(world) + " -- ";
  cmd += std::string(WEFT_RT_DRIVER) + " train --plan " + plan + " --steps " + std::to_string(c.steps) +
         " --format json --lr 3e-4 --warmup 0";
  int st = 0;
  const std::string out = capture(cmd, &st);
  Figures f;
  double sum = 0;
  int n = 0;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("[0] ", 0) == 0) line = line.substr(4);
    if (line.empty() || line[0] != '{') continue;
    const Json j = Json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("step_time_s")) continue;
    if (j["step"].get<int>() > c.warmup) sum += j["step_time_s"].get<double>(), ++n;
  }
  if (st != 0 || n == 0) {
    std::fprintf(stderr, "weft run failed (%d):\n%s\n", st, out.c_str());
    return f;
  }
  f.step_s = sum / n;
  f.tokens_per_s = static_cast<double>(kBatch) * world * kSeq / f.step_s;
  f.ok = true;
  return f;
}

Figures run_ddp(const Config& c, int world) {
  const std::string script = std::string(WEFT_BENCH_DIR) + "/ddp_gpt.py";
  const std::string cmd = "OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 " + c.python + " " + script + " --world " +
                          std::to_string(world) + " --steps " + std::to_string(c.steps) + " --warmup " +
                          std::to_string(c.warmup);
  int st = 0;
  const std::string out = capture(cmd, &st);
  Figures f;
  const auto brace = out.rfind("{\"world\"");
  if (st != 0 || brace == std::string::npos) {
    std::fprintf(stderr, "DDP run failed (%d):\n%s\n", st, out.c_str());
    return f;
  }
  const Json j = Json::parse(out.substr(brace, out.find('\n', brace) - brace));
  f.step_s = j["mean_step_time_s"].get<double>();
  f.tokens_per_s = j["tokens_per_s"].get<double>();
  f.ok = true;
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--steps") c.steps = std::stoi(next());
    else if (a == "--warmup") c.warmup = std::stoi(next());
    else if (a == "--no-ddp") c.ddp = false;
    else if (a == "--python") c.python = next();
    else if (a == "--worlds") {
      c.worlds.clear();
      std::stringstream ss(next());
      std::string w;
      while (std::getline(ss, w, ',')) c.worlds.push_back(std::stoi(w));
    } else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (c.steps <= c.warmup) {
    std::fprintf(stderr, "--steps must exceed --warmup\n");
    return 2;
  }
  const std::string dir = (std::filesystem::temp_directory_path() / "weft_runtime_bench").string();
  std::filesystem::create_directories(dir);
  std::printf("model: GPT %d layers, hidden %d, %d heads, ffn %d, vocab %d; %d x %d tokens per rank per step; "
              "%d steps, first %d untimed\n",
              kLayers, kHidden, kHeads, kFfn, kVocab, kBatch, kSeq, c.steps, c.warmup);
  std::printf("%5s | %14s %10s | %14s %10s | %s\n", "ranks", "weft tokens/s", "weft s/step", "DDP tokens/s",
              "DDP s/step", "step time weft/DDP");
  int rc = 0;
  for (int w : c.worlds) {
    const Figures a = run_weft(c, w, dir);
    const Figures b = c.ddp ? run_ddp(c, w) : Figures{};
    if (!a.ok || (c.ddp && !b.ok)) rc = 1;
    char ratio[32] = "-";
    if (a.ok && b.ok) std::snprintf(ratio, sizeof ratio, "%.2f", a.step_s / b.step_s);
    std::printf("%5d | %14.0f %10.3f | %14.0f %10.3f | %s\n", w, a.tokens_per_s, a.step_s, b.tokens_per_s, b.step_s,
                ratio);
    std::fflush(stdout);
  }
  return rc;
}
