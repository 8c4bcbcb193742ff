// Runtime throughput: a small GPT trained data-parallel on 1, 2 and 4 local ranks by the weft
// runtime (weft launch + weft train, Gloo on CPU), against the same model, batch and optimizer in
// PyTorch's Python DistributedDataParallel (bench/runtime/ddp_gpt.py on Debian's python3-torch).
// weft runs twice per world size: with the gradient reduction overlapping backward (the default)
// and with it after backward (--grad-overlap off).
//
//   weft_runtime_bench [--steps 12] [--warmup 2] [--worlds 1,2,4] [--repeat 3] [--bucket-mb 25]
//                      [--no-ddp] [--python /usr/bin/python3]
//   weft_runtime_bench --pipeline 2 [--micro-batches 8] [--steps 12] [--warmup 2] [--repeat 3]
//   weft_runtime_bench --sequence 2 [--steps 12] [--warmup 2] [--repeat 3]
//
// --pipeline PP: instead, the pipeline schedules side by side on PP ranks (the layers split
// evenly): gpipe, 1f1b and zb-h1 (one stage per rank) and zb-v (two chunks per rank in a V, where
// PP * 2 divides the layers; weft/plan/pipeline_order.h) on the same model and batch
// (--micro-batches micro-batches of 2 sequences), with the step-time ratios zb-h1 / 1f1b and
// zb-v / 1f1b.
// --sequence N: instead, the ways of cutting each sequence over N ranks side by side on the same
// model and batch (8 sequences, one micro-batch): context parallelism (ring attention over mirrored
// chunks), Ulysses and tp + Megatron-SP, with the step-time ratio cp / Ulysses.
//
// Prints, per world size: tokens/s and step time of each configuration, the time rank 0 waited for
// the gradient reduction after backward ("sync wait": what overlap hides), and the step-time ratios
// weft / DDP with and without overlap (below 1: weft is faster). Per-rank batch 8 x 128 tokens
// (weak scaling); steps after the warm-up are timed and averaged per run. The three
// configurations run in rounds (their order rotating from round to round) and each figure is the
// median over the --repeat rounds: on a shared machine whose speed drifts, back-to-back single
// runs differ by tens of percent. One intra-op thread per rank in all runs.
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "weft/plan/plan.h"

namespace {

using namespace weft;

struct Config {
  int steps = 12, warmup = 2, repeat = 3;
  int pipeline = 0, micro_batches = 8;  // --pipeline PP: the schedules on PP stages
  int sequence = 0;                     // --sequence N: cp, Ulysses and tp + SP over N ranks
  double bucket_mb = 25;
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

// PP stages of kLayers / PP layers, one rank each (zb-v: 2 PP chunks of kLayers / (2 PP) layers,
// two per rank); micro-batches of 2 sequences.
Plan pp_plan(int pp, Schedule sched, int micro_batches) {
  Plan p = dp_plan(1);
  p.cluster.gpus_per_node = pp;
  p.train.pp = pp;
  p.train.schedule = sched;
  p.train.micro_batches = micro_batches;
  p.train.global_batch = 2 * micro_batches;
  const LayerStrategy s;
  p.stages.clear();
  const int stages = sched == Schedule::kZbV ? 2 * pp : pp;
  p.train.vp = stages / pp;
  for (int i = 0; i < stages; ++i)
    p.stages.push_back(Stage{i * (kLayers / stages), std::vector<LayerStrategy>(kLayers / stages, s), {}});
  return p;
}

// Every layer and the embedding cutting the sequence over n ranks: "cp", "ulysses" or "tp-sp".
Plan seq_plan(int n, const std::string& mode) {
  Plan p = dp_plan(1);
  p.cluster.gpus_per_node = n;
  p.train.global_batch = kBatch;
  LayerStrategy s;
  if (mode == "cp") s.cp = n;
  else if (mode == "ulysses") s.ulysses = n;
  else s.tp = n, s.sp = true;
  p.embedding = s;
  p.stages[0].layers.assign(kLayers, s);
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
  double sync_wait_s = 0;  // weft: rank 0's mean wait for the gradient reduction after backward
  bool ok = false;
};

Figures run_weft(const Config& c, int world, const std::string& dir, bool overlap, const Plan* given = nullptr) {
  const Plan plan_value = given ? *given : dp_plan(world);
  const std::string plan = dir + "/plan" + std::to_string(world) + (given ? to_string(given->train.schedule) : "") +
                           (given ? "_" + label(given->stages[0].layers[0]) : "") + ".json";
  if (!write_plan_file(plan, plan_value).ok()) return {};
  std::string cmd;
  if (world > 1) cmd = std::string(WEFT_RT_DRIVER) + " launch -n " + std::to_string(world) + " -- ";
  cmd += std::string(WEFT_RT_DRIVER) + " train --plan " + plan + " --steps " + std::to_string(c.steps) +
         " --format json --lr 3e-4 --warmup 0 --bucket-mb " + std::to_string(c.bucket_mb) +
         " --grad-overlap " + (overlap ? "on" : "off");
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
    if (!j.is_discarded() && j.contains("mean_grad_sync_wait_s")) f.sync_wait_s = j["mean_grad_sync_wait_s"].get<double>();
    if (j.is_discarded() || !j.contains("step_time_s")) continue;
    if (j["step"].get<int>() > c.warmup) sum += j["step_time_s"].get<double>(), ++n;
  }
  if (st != 0 || n == 0) {
    std::fprintf(stderr, "weft run failed (%d):\n%s\n", st, out.c_str());
    return f;
  }
  f.step_s = sum / n;
  f.tokens_per_s = static_cast<double>(plan_value.train.global_batch) * kSeq / f.step_s;
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

// The run with the median step time (any failed run fails the figure); tokens/s for `tokens` per step.
Figures median(std::vector<Figures> runs, double tokens) {
  for (const Figures& f : runs)
    if (!f.ok) return {};
  if (runs.empty()) return {};
  std::sort(runs.begin(), runs.end(), [](const Figures& x, const Figures& y) { return x.step_s < y.step_s; });
  Figures m = runs[runs.size() / 2];
  if (runs.size() % 2 == 0) m.step_s = (m.step_s + runs[runs.size() / 2 - 1].step_s) / 2;
  m.tokens_per_s = tokens / m.step_s;
  std::sort(runs.begin(), runs.end(), [](const Figures& x, const Figures& y) { return x.sync_wait_s < y.sync_wait_s; });
  m.sync_wait_s = runs[runs.size() / 2].sync_wait_s;
  if (runs.size() % 2 == 0) m.sync_wait_s = (m.sync_wait_s + runs[runs.size() / 2 - 1].sync_wait_s) / 2;
  return m;
}

// Plans on the same `world` ranks in rotating rounds; prints each one's median tokens/s and step
// time under `names` and the step-time ratios of plans ratios[i].first / ratios[i].second. 0, or 1
// if a run failed.
int side_by_side(const Config& c, const std::string& dir, int world, const std::vector<Plan>& plans, const char* what,
                 const std::vector<std::string>& names, double tokens, const std::vector<std::pair<int, int>>& ratios) {
  const size_t n = plans.size();
  std::vector<std::vector<Figures>> runs(n);
  for (int r = 0; r < c.repeat; ++r)
    for (size_t k = 0; k < n; ++k) {
      const size_t which = (k + static_cast<size_t>(r)) % n;
      runs[which].push_back(run_weft(c, world, dir, true, &plans[which]));
    }
  std::vector<Figures> f(n);
  int rc = 0;
  std::printf("%-8s | %9s %8s\n", what, "tokens/s", "s/step");
  for (size_t k = 0; k < n; ++k) {
    f[k] = median(runs[k], tokens);
    if (!f[k].ok) rc = 1;
    std::printf("%-8s | %9.0f %8.3f\n", names[k].c_str(), f[k].tokens_per_s, f[k].step_s);
  }
  for (const auto& [num, den] : ratios)
    if (f[num].ok && f[den].ok)
      std::printf("step time %s / %s: %.3f\n", names[num].c_str(), names[den].c_str(), f[num].step_s / f[den].step_s);
  return rc;
}

// --pipeline: gpipe, 1f1b, zb-h1 and (where 2 PP chunks divide the layers) zb-v on the same ranks.
int pipeline_schedules(const Config& c, const std::string& dir) {
  const int pp = c.pipeline, m = c.micro_batches;
  if (pp < 2 || kLayers % pp != 0 || m < pp) {
    std::fprintf(stderr, "--pipeline %d: needs 2 <= PP dividing %d layers and --micro-batches >= PP (got %d)\n", pp,
                 kLayers, m);
    return 2;
  }
  std::printf("model: GPT %d layers, hidden %d, %d heads, ffn %d, vocab %d; %d stages of %d layers, one rank each "
              "(zb-v: %d chunks, two per rank in a V, rank 0 holding the embedding and the head); %d micro-batches of "
              "2 x %d tokens; %d steps, first %d untimed; median of %d rounds\n",
              kLayers, kHidden, kHeads, kFfn, kVocab, pp, kLayers / pp, 2 * pp, m, kSeq, c.steps, c.warmup, c.repeat);
  std::vector<Plan> plans;
  std::vector<std::string> names;
  std::vector<std::pair<int, int>> ratios{{2, 1}};
  for (Schedule s : {Schedule::kGpipe, Schedule::k1F1B, Schedule::kZbH1, Schedule::kZbV}) {
    if (s == Schedule::kZbV && kLayers % (2 * pp) != 0) continue;
    plans.push_back(pp_plan(pp, s, m));
    names.push_back(to_string(s));
  }
  if (plans.size() == 4) ratios.emplace_back(3, 1);
  return side_by_side(c, dir, pp, plans, "schedule", names, 2.0 * m * kSeq, ratios);
}

// --sequence: cp, Ulysses and tp + SP over the same ranks.
int sequence_modes(const Config& c, const std::string& dir) {
  const int n = c.sequence;
  if (n < 2 || kHeads % n != 0 || kSeq % (2 * n) != 0) {
    std::fprintf(stderr, "--sequence %d: needs 2 <= N dividing %d heads and %d / 2 tokens\n", n, kHeads, kSeq);
    return 2;
  }
  std::printf("model: GPT %d layers, hidden %d, %d heads, ffn %d, vocab %d; %d x %d tokens per step, every sequence "
              "cut over %d ranks; %d steps, first %d untimed; median of %d rounds\n",
              kLayers, kHidden, kHeads, kFfn, kVocab, kBatch, kSeq, n, c.steps, c.warmup, c.repeat);
  const std::vector<std::string> names{"cp", "ulysses", "tp-sp"};
  const std::vector<Plan> plans{seq_plan(n, names[0]), seq_plan(n, names[1]), seq_plan(n, names[2])};
  return side_by_side(c, dir, n, plans, "mode", names, static_cast<double>(kBatch) * kSeq, {{0, 1}});
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
    else if (a == "--bucket-mb") c.bucket_mb = std::stod(next());
    else if (a == "--repeat") c.repeat = std::stoi(next());
    else if (a == "--python") c.python = next();
    else if (a == "--pipeline") c.pipeline = std::stoi(next());
    else if (a == "--micro-batches") c.micro_batches = std::stoi(next());
    else if (a == "--sequence") c.sequence = std::stoi(next());
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
  if (c.repeat < 1) {
    std::fprintf(stderr, "--repeat must be at least 1\n");
    return 2;
  }
  const std::string dir = (std::filesystem::temp_directory_path() / "weft_runtime_bench").string();
  std::filesystem::create_directories(dir);
  if (c.pipeline > 0) return pipeline_schedules(c, dir);
  if (c.sequence > 0) return sequence_modes(c, dir);
  std::printf("model: GPT %d layers, hidden %d, %d heads, ffn %d, vocab %d; %d x %d tokens per rank per step; "
              "%d steps, first %d untimed; gradient buckets of at most %g MiB; median of %d rounds\n",
              kLayers, kHidden, kHeads, kFfn, kVocab, kBatch, kSeq, c.steps, c.warmup, c.bucket_mb, c.repeat);
  std::printf("%5s | %13s %7s %9s | %13s %7s %9s | %12s %7s | %s\n", "ranks", "weft tokens/s", "s/step",
              "sync wait", "no-overlap", "s/step", "sync wait", "DDP tokens/s", "s/step",
              "step time weft/DDP (overlap, no overlap)");
  int rc = 0;
  for (int w : c.worlds) {
    std::vector<Figures> runs[3];  // overlap, no overlap, DDP
    for (int r = 0; r < c.repeat; ++r)
      for (int k = 0; k < 3; ++k) {
        const int which = (k + r) % 3;
        if (which == 2 && !c.ddp) continue;
        runs[which].push_back(which == 2 ? run_ddp(c, w) : run_weft(c, w, dir, which == 0));
      }
    const double tokens = static_cast<double>(kBatch) * w * kSeq;
    const Figures a = median(runs[0], tokens), n = median(runs[1], tokens), b = c.ddp ? median(runs[2], tokens) : Figures{};
    if (!a.ok || !n.ok || (c.ddp && !b.ok)) rc = 1;
    char ratio[64] = "-";
    if (a.ok && n.ok && b.ok) std::snprintf(ratio, sizeof ratio, "%.2f, %.2f", a.step_s / b.step_s, n.step_s / b.step_s);
    std::printf("%5d | %13.0f %7.3f %7.1fms | %13.0f %7.3f %7.1fms | %12.0f %7.3f | %s\n", w, a.tokens_per_s,
                a.step_s, 1e3 * a.sync_wait_s, n.tokens_per_s, n.step_s, 1e3 * n.sync_wait_s, b.tokens_per_s,
                b.step_s, ratio);
    std::fflush(stdout);
  }
  return rc;
}
