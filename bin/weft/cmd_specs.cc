// `weft models` and `weft clusters`: list the built-in presets, or print one as a table or as a
// complete JSON file that `--model FILE` / `--cluster FILE` loads back unchanged.
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include "commands.h"
#include "weft/core/format.h"
#include "weft/spec/counts.h"
#include "weft/spec/mixed.h"
#include "weft/spec/presets.h"

namespace weft::cli {

namespace {

struct SpecFlags {
  std::string show;
  std::string format = "table";
};


std::string fixed(double x, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

// "24", "24+24" for encoder-decoder stacks, "1+23" for a dense layer before MoE layers; the
// total beyond three groups (GPT-OSS alternates two layer kinds: 36 groups of one).
std::string layers_text(const ModelSpec& m) {
  if (m.groups.size() > 3) return std::to_string(m.num_layers());
  std::string s;
  for (const auto& g : m.groups) s += (s.empty() ? "" : "+") + std::to_string(g.count);
  return s;
}

// The group that best describes the model in one row: the first MoE group if any, else the first.
const LayerShape& main_shape(const ModelSpec& m) {
  for (const auto& g : m.groups)
    if (g.shape.moe.enabled()) return g.shape;
  return m.groups.front().shape;
}

std::string ffn_text(const LayerShape& s) {
  if (!s.moe.enabled()) return std::to_string(s.ffn);
  std::string t = std::to_string(s.moe.experts) + "x" + std::to_string(s.moe.expert_ffn);
  if (s.moe.shared_experts > 0) t += "+" + std::to_string(s.moe.shared_experts);
  return t;
}

void print_model_table() {
  std::printf("%-14s %7s %6s %8s %10s %7s %8s %8s\n", "NAME", "LAYERS", "HIDDEN", "HEADS/KV", "FFN", "VOCAB",
              "PARAMS", "ACTIVE");
  for (const auto& name : model_preset_names()) {
    const ModelSpec m = unwrap(load_model(name));
    const LayerShape& s = main_shape(m);
    const std::string heads = std::to_string(s.heads) + "/" + std::to_string(s.kv_heads);
    const std::string active = m.has_moe() ? fixed(active_params(m) / 1e9, 2) + "B" : "-";
    std::printf("%-14s %7s %6lld %8s %10s %7lld %8s %8s\n", name.c_str(), layers_text(m).c_str(),
                static_cast<long long>(m.hidden), heads.c_str(), ffn_text(s).c_str(),
                static_cast<long long>(m.vocab), (fixed(total_params(m) / 1e9, 2) + "B").c_str(), active.c_str());
  }
  std::printf("\nPARAMS in billions. MoE rows: FFN = experts x expert FFN (+ shared experts),\n"
              "ACTIVE = parameters one token uses. `weft models --show NAME [--format json]`\n"
              "prints one preset.\n");
}

Json model_summary(const std::string& name, const ModelSpec& m) {
  const LayerShape& s = main_shape(m);
  Json j;
  j["name"] = name;
  j["layers"] = m.num_layers();
  j["hidden"] = m.hidden;
  j["heads"] = s.heads;
  j["kv_heads"] = s.kv_heads;
  j["ffn"] = s.moe.enabled() ? s.moe.expert_ffn : s.ffn;
  j["experts"] = s.moe.experts;
  j["vocab"] = m.vocab;
  j["params"] = total_params(m);
  j["active_params"] = active_params(m);
  return j;
}

void print_model_detail(const ModelSpec& m) {
  std::printf("%s\n", m.name.c_str());
  std::printf("  vocab %lld, hidden %lld, %s, %s positions, max_seq %d, %s embeddings\n",
              static_cast<long long>(m.vocab), static_cast<long long>(m.hidden), to_string(m.norm),
              to_string(m.position), m.max_seq, m.tied_embeddings ? "tied" : "untied");
  for (const auto& g : m.groups) {
    const LayerShape& s = g.shape;
    std::printf("  %s: %d x %s, heads %d, kv_heads %d, head_dim %d, %s\n", g.name.c_str(), g.count,
                to_string(s.kind), s.heads, s.kv_heads, s.head_dim, s.bias ? "biases" : "no biases");
    if (s.moe.enabled())
      std::printf("    ffn: %d experts of %lld (%s), top-%d, %d shared\n", s.moe.experts,
                  static_cast<long long>(s.moe.expert_ffn), to_string(s.ffn_kind), s.moe.top_k, s.moe.shared_experts);
    else
      std::printf("    ffn: %lld (%s)\n", static_cast<long long>(s.ffn), to_string(s.ffn_kind));
    std::printf("    parameters per layer: %s M (attention %s M, ffn %s M)\n",
                fixed(layer_params(s).total() / 1e6, 2).c_str(), fixed(layer_params(s).attention / 1e6, 2).c_str(),
                fixed(layer_params(s).ffn / 1e6, 2).c_str());
  }
  std::printf("  parameters: %s B total", fixed(total_params(m) / 1e9, 3).c_str());
  if (m.has_moe()) std::printf(", %s B active per token", fixed(active_params(m) / 1e9, 3).c_str());
  std::printf("\n    embedding %s M, LM head %s M%s\n", fixed(embedding_params(m) / 1e6, 2).c_str(),
              fixed(lm_head_params(m) / 1e6, 2).c_str(), m.tied_embeddings ? " (tied)" : "");
}

void run_models(const SpecFlags& f) {
  if (!f.show.empty()) {
    const ModelSpec m = unwrap(load_model(f.show));
    if (f.format == "json") std::cout << to_json(m).dump(2) << "\n";
    else print_model_detail(m);
    return;
  }
  if (f.format == "json") {
    Json all = Json::array();
    for (const auto& name : model_preset_names()) all.push_back(model_summary(name, unwrap(load_model(name))));
    std::cout << all.dump(2) << "\n";
    return;
  }
  print_model_table();
}

void print_cluster_table() {
  std::printf("%-10s %-15s %4s %7s %7s %7s %8s %6s %6s\n", "NAME", "GPU", "GPUS", "MEM GiB", "BF16", "FP8",
              "HBM GB/s", "INTRA", "INTER");
  for (const auto& name : cluster_preset_names()) {
    const ClusterSpec c = unwrap(load_cluster(name));
    auto tf = [](double x) { return x > 0 ? num(x) : std::string("-"); };
    std::printf("%-10s %-15s %4d %7s %7s %7s %8s %6s %6s\n", name.c_str(), c.gpu.name.c_str(), c.gpus_per_node,
                num(c.gpu.memory_gib).c_str(), tf(c.gpu.tflops_bf16).c_str(), tf(c.gpu.tflops_fp8).c_str(),
                num(c.gpu.hbm_gbps).c_str(), num(c.intra.gbps).c_str(), num(c.inter.gbps).c_str());
  }
  std::printf("\nGPUS per node. BF16, FP8: peak dense TFLOP/s (- = not supported). INTRA, INTER:\n"
              "GB/s per GPU per direction inside / between nodes.\n"
              "`weft clusters --show NAME [--format json]` prints one preset, and\n"
              "`--show a100-80gb:2,h100-80gb:2` a mixed cluster of node groups.\n");
}

Json cluster_summary(const std::string& name, const ClusterSpec& c) {
  Json j;
  j["name"] = name;
  j["gpu"] = c.gpu.name;
  j["gpus_per_node"] = c.gpus_per_node;
  j["memory_gib"] = c.gpu.memory_gib;
  j["tflops_bf16"] = c.gpu.tflops_bf16;
  j["tflops_fp8"] = c.gpu.tflops_fp8;
  j["hbm_gbps"] = c.gpu.hbm_gbps;
  j["intra_node_gbps"] = c.intra.gbps;
  j["inter_node_gbps"] = c.inter.gbps;
  return j;
}

void print_cluster_detail(const ClusterSpec& c) {
  std::printf("%s: %d node(s) x %d GPUs (%s)\n", c.name.c_str(), c.nodes, c.gpus_per_node, c.gpu.name.c_str());
  std::printf("  peak dense TFLOP/s: fp32 %s, tf32 %s, bf16 %s, fp16 %s, fp8 %s\n", num(c.gpu.tflops_fp32).c_str(),
              num(c.gpu.tflops_tf32).c_str(), num(c.gpu.tflops_bf16).c_str(), num(c.gpu.tflops_fp16).c_str(),
              num(c.gpu.tflops_fp8).c_str());
  std::printf("  memory %s GiB, HBM %s GB/s\n", num(c.gpu.memory_gib).c_str(), num(c.gpu.hbm_gbps).c_str());
  std::printf("  intra-node: %s GB/s per GPU per direction, %s us per hop\n", num(c.intra.gbps).c_str(),
              num(c.intra.latency_us).c_str());
  std::printf("  inter-node: %s GB/s per GPU per direction, %s us per hop\n", num(c.inter.gbps).c_str(),
              num(c.inter.latency_us).c_str());
}

// A mixed cluster (weft/spec/mixed.h): its groups in GPU order, the link between them, stragglers.
void print_mixed_detail(const MixedCluster& m) {
  std::printf("%s: %d GPUs in %zu node groups\n", m.name.c_str(), m.total_gpus(), m.groups.size());
  for (size_t g = 0; g < m.groups.size(); ++g) {
    const int first = m.first_gpu(static_cast<int>(g));
    std::printf("\ngroup %zu, GPUs %d-%d: ", g, first, first + m.groups[g].total_gpus() - 1);
    print_cluster_detail(m.groups[g]);
  }
  std::printf("\nbetween groups: %s GB/s per GPU per direction, %s us per hop\n", num(m.between.gbps).c_str(),
              num(m.between.latency_us).c_str());
  for (int g = 0; g < m.total_gpus(); ++g)
    if (m.slowdown_of(g) != 1.0) std::printf("straggler: GPU %d computes %sx slower\n", g, num(m.slowdown_of(g)).c_str());
}

void run_clusters(const SpecFlags& f) {
  if (!f.show.empty()) {
    const MixedCluster m = unwrap(load_mixed_cluster(f.show));
    if (m.groups.size() > 1 || !m.slowdown.empty()) {
      if (f.format == "json") std::cout << to_json(m).dump(2) << "\n";
      else print_mixed_detail(m);
      return;
    }
    const ClusterSpec& c = m.groups[0];
    if (f.format == "json") std::cout << to_json(c).dump(2) << "\n";
    else print_cluster_detail(c);
    return;
  }
  if (f.format == "json") {
    Json all = Json::array();
    for (const auto& name : cluster_preset_names()) all.push_back(cluster_summary(name, unwrap(load_cluster(name))));
    std::cout << all.dump(2) << "\n";
    return;
  }
  print_cluster_table();
}

void add_flags(CLI::App* cmd, SpecFlags& f, const std::string& what) {
  cmd->add_option("--show", f.show, "Print one " + what + ": a preset name or a file");
  cmd->add_option("--format", f.format, "table (default) or json")->check(CLI::IsMember({"table", "json"}));
}

}  // namespace

void register_spec_commands(CLI::App& app) {
  auto models = std::make_shared<SpecFlags>();
  CLI::App* m = app.add_subcommand("models", "List the built-in model presets, or print one");
  add_flags(m, *models, "model");
  m->callback([models] { run_models(*models); });

  auto clusters = std::make_shared<SpecFlags>();
  CLI::App* c = app.add_subcommand("clusters", "List the built-in cluster presets, or print one");
  add_flags(c, *clusters, "cluster");
  c->callback([clusters] { run_clusters(*clusters); });
}

}  // namespace weft::cli
