// Variable-length steps on the runtime (docs/varlen.md "Running a step"): the same long-tailed
// documents trained by `weft train --varlen` on local ranks (Gloo on CPU), once with the batch
// planner's mixed groups and once with every micro-batch on one group of all ranks (`static`: the
// one degree that holds the longest document, given a per-rank token cap that makes the longest
// need every rank). Documents: FlexSP's Wikipedia lengths (data/reference/flexsp/) divided by
// --scale and kept between 2 tokens and the cap x ranks, random tokens, a small GPT.
//
//   weft_varlen_runtime_bench [--ranks 4] [--steps 8] [--docs 32] [--scale 16] [--repeat 3]
//
// Prints per configuration the median over --repeat rounds (their order alternating) of the mean
// step time and tokens/s (the first step untimed), the mean time a step waited for its plan, the
// ratio static / weft of the step times (above 1: weft's groups are faster) and whether both runs
// end at the same loss (they train on the same documents; only the grouping differs).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "weft/core/json.h"
#include "weft/plan/plan.h"

namespace {

using namespace weft;

struct Config {
  int ranks = 4, steps = 8, docs = 32, scale = 16, repeat = 3;
};

constexpr int kVocab = 512, kHidden = 128, kLayers = 2, kHeads = 4, kFfn = 512, kCap = 256;

struct Figures {
  double step_s = 0, tokens_per_s = 0, plan_wait_s = 0, final_loss = 0;
  bool ok = false;
};

Figures run(const std::string& plan, const std::string& data, const Config& c, const std::string& extra) {
  const std::string d = WEFT_RT_DRIVER;
  const std::string cmd = d + " launch -n " + std::to_string(c.ranks) + " -- " + d + " train --plan " + plan +
                          " --data " + data + " --eos 0 --steps " + std::to_string(c.steps) +
                          " --max-tokens-per-gpu " + std::to_string(kCap) + " --format json --progress off" + extra +
                          " 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  Figures r;
  if (!f) return r;
  std::string out;
  char buf[8192];
  while (fgets(buf, sizeof buf, f)) out += buf;
  const int st = pclose(f);
  const size_t at = out.find("{\"summary\"");
  if (st != 0 || at == std::string::npos) {
    std::fprintf(stderr, "run failed:\n%s\n", out.c_str());
    return r;
  }
  const Json j = Json::parse(out.substr(at, out.find('\n', at) - at));
  r.step_s = j.at("mean_step_time_s").get<double>();
  r.tokens_per_s = j.at("mean_tokens_per_s").get<double>();
  r.plan_wait_s = j.at("mean_plan_wait_s").get<double>();
  r.final_loss = j.at("final_loss").get<double>();
  r.ok = true;
  return r;
}

Figures median(std::vector<Figures> v) {
  for (const Figures& f : v)
    if (!f.ok) return {};
  std::sort(v.begin(), v.end(), [](const Figures& a, const Figures& b) { return a.step_s < b.step_s; });
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (a == "--ranks") c.ranks = v;
    else if (a == "--steps") c.steps = v;
    else if (a == "--docs") c.docs = v;
    else if (a == "--scale") c.scale = v;
    else if (a == "--repeat") c.repeat = v;
    else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  const std::string src = std::string(WEFT_DATA_DIR) + "/reference/flexsp/wikipedia_lengths.txt";
  std::ifstream in(src);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", src.c_str());
    return 1;
  }
  const int longest = kCap * c.ranks;
  const auto dir = std::filesystem::temp_directory_path() / ("weft_varlen_rt_bench_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string data = (dir / "docs.bin").string();
  std::vector<uint16_t> toks;
  std::mt19937 rng(3);
  long long n = 0, docs = 0, total = 0;
  const long long want = static_cast<long long>(c.docs) * (c.steps + 1) * 2;
  while (docs < want && in >> n) {
    const long long len = std::clamp<long long>(n / c.scale, 2, longest);
    for (long long i = 0; i + 1 < len; ++i) toks.push_back(static_cast<uint16_t>(1 + rng() % (kVocab - 1)));
    toks.push_back(0);
    ++docs, total += len;
  }
  std::ofstream(data, std::ios::binary)
      .write(reinterpret_cast<const char*>(toks.data()), static_cast<std::streamsize>(toks.size() * 2));

  Plan p;
  p.model.name = "bench-gpt";
  p.model.vocab = kVocab;
  p.model.hidden = kHidden;
  p.model.tied_embeddings = true;
  p.model.norm = NormKind::kLayerNorm;
  p.model.position = PositionKind::kLearned;
  p.model.max_seq = longest;
  LayerGroup g;
  g.name = "decoder";
  g.count = kLayers;
  g.shape = LayerShape{LayerKind::kDecoder, kHidden, kHeads, kHeads, kHidden / kHeads, kFfn, FfnKind::kGelu, true, {}};
  p.model.groups.push_back(g);
  p.cluster.name = "local";
  p.cluster.nodes = 1;
  p.cluster.gpus_per_node = c.ranks;
  p.cluster.gpu = GpuSpec{"cpu", 1, 0, 0, 0, 0, 16, 10};
  p.cluster.intra = LinkSpec{10, 10};
  p.train.seq = longest;
  p.train.global_batch = c.docs;
  p.train.micro_batches = 1;
  p.train.dtype = DType::kFp32;
  p.train.varlen = true;
  LayerStrategy s;
  s.dp = c.ranks;
  s.zero = 3;
  p.embedding = s;
  Stage stage;
  stage.layers.assign(kLayers, s);
  p.stages.push_back(stage);
  const std::string plan = (dir / "plan.json").string();
  if (Status w = write_plan_file(plan, p); !w.ok()) {
    std::fprintf(stderr, "%s\n", w.error().message.c_str());
    return 1;
  }
  std::printf("weft_varlen_runtime_bench: %d ranks (Gloo, CPU), %lld documents of 2-%d tokens (FlexSP's Wikipedia "
              "lengths / %d, mean %.0f), %d per step, %d steps (first untimed), at most %d tokens per rank; median "
              "of %d rounds\n",
              c.ranks, docs, longest, c.scale, static_cast<double>(total) / std::max(1LL, docs), c.docs, c.steps, kCap,
              c.repeat);
  std::vector<Figures> weft, stat;
  for (int r = 0; r < c.repeat; ++r) {
    const std::string all = " --min-group " + std::to_string(c.ranks);
    if (r % 2 == 0) weft.push_back(run(plan, data, c, "")), stat.push_back(run(plan, data, c, all));
    else stat.push_back(run(plan, data, c, all)), weft.push_back(run(plan, data, c, ""));
  }
  const Figures w = median(weft), st = median(stat);
  std::filesystem::remove_all(dir);
  if (!w.ok || !st.ok) return 1;
  std::printf("%-28s %12s %12s %14s %12s\n", "grouping", "step s", "tokens/s", "plan wait ms", "final loss");
  std::printf("%-28s %12.4f %12.0f %14.3f %12.6f\n", "weft (mixed groups)", w.step_s, w.tokens_per_s,
              w.plan_wait_s * 1e3, w.final_loss);
  std::printf("%-28s %12.4f %12.0f %14.3f %12.6f\n", ("static (groups of " + std::to_string(c.ranks) + ")").c_str(),
              st.step_s, st.tokens_per_s, st.plan_wait_s * 1e3, st.final_loss);
  std::printf("speedup over static: %.2fx; final losses %s (relative difference %.1e)\n", st.step_s / w.step_s,
              std::fabs(w.final_loss - st.final_loss) <= 1e-5 * std::fabs(st.final_loss) ? "equal" : "DIFFER",
              std::fabs(w.final_loss - st.final_loss) / std::fabs(st.final_loss));
  return 0;
}
