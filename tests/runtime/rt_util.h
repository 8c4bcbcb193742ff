// Helpers for the runtime tests: tiny models and plans, running the weft_rt driver (`weft train` /
// `weft launch`) and reading its JSON step lines and parameter files. Torch-free.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "weft/plan/plan.h"
#include "weft/runtime/params_file.h"

namespace weft::rttest {

inline const std::string& driver() {
  static const std::string d = WEFT_RT_DRIVER;
  return d;
}

// GPT-2 style: LayerNorm, learned positions, GELU, biases, tied embeddings.
inline ModelSpec tiny_gpt(int layers = 4) {
  ModelSpec m;
  m.name = "tiny-gpt";
  m.vocab = 64;
  m.hidden = 32;
  m.tied_embeddings = true;
  m.norm = NormKind::kLayerNorm;
  m.position = PositionKind::kLearned;
  m.max_seq = 16;
  LayerGroup g;
  g.name = "decoder";
  g.count = layers;
  g.shape = LayerShape{LayerKind::kDecoder, 32, 4, 4, 8, 64, FfnKind::kGelu, true, {}};
  m.groups.push_back(g);
  return m;
}

// Llama style: RMSNorm, RoPE, SwiGLU, GQA (kv_heads key/value heads), no biases, untied head.
inline ModelSpec tiny_llama(int layers = 4, int kv_heads = 2) {
  ModelSpec m;
  m.name = "tiny-llama";
  m.vocab = 64;
  m.hidden = 32;
  m.tied_embeddings = false;
  m.norm = NormKind::kRmsNorm;
  m.position = PositionKind::kRope;
  LayerGroup g;
  g.name = "decoder";
  g.count = layers;
  g.shape = LayerShape{LayerKind::kDecoder, 32, 4, kv_heads, 8, 64, FfnKind::kSwiglu, false, {}};
  m.groups.push_back(g);
  return m;
}

inline ClusterSpec cpu_cluster(int devices) {
  ClusterSpec c;
  c.name = "cpu";
  c.nodes = 1;
  c.gpus_per_node = devices;
  c.gpu = GpuSpec{"cpu", 1, 0, 0, 0, 0, 16, 10};  // placeholders: the runtime reads only the size
  c.intra = LinkSpec{10, 10};
  return c;
}

inline LayerStrategy strat(int tp, int dp, int ulysses = 1, bool sp = false, int zero = 0,
                           Recompute rc = Recompute::kNone) {
  LayerStrategy s;
  s.tp = tp;
  s.dp = dp;
  s.ulysses = ulysses;
  s.sp = sp;
  s.zero = zero;
  s.recompute = rc;
  return s;
}

// A plan with explicit stages: stages[k] lists the strategies of stage k's layers.
inline Plan make_plan(const ModelSpec& m, int world, int pp, Schedule sched, const LayerStrategy& emb,
                      const std::vector<std::vector<LayerStrategy>>& stages, int global_batch = 8, int micro = 2,
                      int seq = 16) {
  Plan p;
  p.model = m;
  p.cluster = cpu_cluster(world);
  p.train.seq = seq;
  p.train.global_batch = global_batch;
  p.train.micro_batches = micro;
  p.train.pp = pp;
  p.train.schedule = sched;
  if (sched == Schedule::kInterleaved || sched == Schedule::kZbV) p.train.vp = static_cast<int>(stages.size()) / pp;
  p.train.dtype = DType::kFp32;
  p.embedding = emb;
  int first = 0;
  for (const auto& layers : stages) {
    Stage st;
    st.first_layer = first;
    st.layers = layers;
    first += static_cast<int>(layers.size());
    p.stages.push_back(st);
  }
  return p;
}

// Every layer (and the embedding) with strategy s, split over pp stages as `sizes`.
inline Plan uniform(const ModelSpec& m, int world, int pp, const LayerStrategy& s, std::vector<int> sizes = {},
                    Schedule sched = Schedule::k1F1B, int global_batch = 8, int micro = 2) {
  if (sizes.empty()) sizes.assign(pp, m.num_layers() / pp);
  std::vector<std::vector<LayerStrategy>> stages;
  for (int n : sizes) stages.push_back(std::vector<LayerStrategy>(n, s));
  LayerStrategy e = s;
  e.recompute = Recompute::kNone;
  return make_plan(m, world, pp, sched, e, stages, global_batch, micro);
}

// The single-device plan with the same model and batch.
inline Plan reference_of(const Plan& p) {
  // (With train.dp_micro_batches the global batch need not divide by the micro-batches: then one.)
  const int m = p.train.global_batch % p.train.micro_batches == 0 ? p.train.micro_batches : 1;
  return uniform(p.model, 1, 1, LayerStrategy{}, {p.model.num_layers()}, Schedule::k1F1B, p.train.global_batch, m);
}

struct RunResult {
  int status = -1;           // exit code (128 + signal if killed)
  std::string output;        // stdout and stderr
  std::vector<double> losses, grad_norms, lrs;
  Json summary;              // rank 0's final summary object (null if none was printed)
  double seconds = 0;
};

inline std::string temp_dir(const std::string& name) {
  const auto d = std::filesystem::temp_directory_path() /
                 ("weft_rt_" + std::to_string(getpid()) + "_" + name);
  std::filesystem::create_directories(d);
  return d.string();
}

// Runs a shell command line, capturing stdout+stderr, and parses rank 0's JSON step lines.
inline RunResult run(const std::string& cmd) {
  RunResult r;
  const auto t0 = std::chrono::steady_clock::now();
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  if (!f) return r;
  char buf[4096];
  while (fgets(buf, sizeof buf, f)) r.output += buf;
  const int st = pclose(f);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  size_t pos = 0;
  while (pos < r.output.size()) {
    size_t nl = r.output.find('\n', pos);
    if (nl == std::string::npos) nl = r.output.size();
    std::string line = r.output.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.rfind("[0] ", 0) == 0) line = line.substr(4);
    if (line.empty() || line[0] != '{' || line.find("\"step") == std::string::npos) continue;
    try {
      const Json j = Json::parse(line);
      if (j.contains("summary")) {
        r.summary = j;
        continue;
      }
      r.losses.push_back(j.at("loss").get<double>());
      r.grad_norms.push_back(j.at("grad_norm").get<double>());
      r.lrs.push_back(j.at("lr").get<double>());
    } catch (...) {
    }
  }
  return r;
}

inline std::string write_plan(const Plan& p, const std::string& dir, const std::string& name) {
  const std::string path = dir + "/" + name + ".json";
  Status s = write_plan_file(path, p);
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
  return path;
}

// `weft train` flags shared by the parity runs: a learning rate large enough that a wrong
// gradient shows, warm-up, clipping and weight decay all active.
inline std::string train_flags(int steps = 5) {
  return " train --steps " + std::to_string(steps) +
         " --lr 3e-3 --warmup 2 --clip 1.0 --weight-decay 0.1 --seed 7 --format json --timeout 60";
}

// Runs `plan` on its world size (through weft launch when > 1) and saves the final parameters.
inline RunResult train_plan(const Plan& p, const std::string& dir, const std::string& name, int steps = 5,
                            const std::string& extra = "") {
  const std::string plan = write_plan(p, dir, name);
  const std::string params = dir + "/" + name + ".params";
  std::string cmd;
  if (p.world_size() > 1) cmd = driver() + " launch -n " + std::to_string(p.world_size()) + " -- ";
  cmd += driver() + train_flags(steps) + " --plan " + plan + " --save-params " + params + extra;
  return run(cmd);
}

inline runtime::ParamsFile read_params(const std::string& path) {
  auto f = runtime::read_params_file(path);
  EXPECT_TRUE(f.ok()) << (f.ok() ? "" : f.error().message);
  return f.ok() ? f.value() : runtime::ParamsFile{};
}

}  // namespace weft::rttest
