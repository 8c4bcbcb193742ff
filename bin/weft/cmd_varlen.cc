// weft varlen: plans concrete global batches of variable-length documents (docs/varlen.md): per
// step, the micro-batches, the sequence-parallel groups of each and the documents on each group,
// beside two baselines on the same batch (static: one group size for every document, the smallest
// that holds the run's longest; adaptive: the best single size for the batch).
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "weft/core/json.h"
#include "weft/cost/framework.h"
#include "weft/report/varlen_html.h"
#include "weft/spec/presets.h"
#include "weft/varlen/lengths.h"
#include "weft/varlen/planner.h"
#include "weft/varlen/seq_cost.h"

namespace weft::cli {
namespace {

struct VarlenFlags {
  std::string lengths, data, data_format = "auto";
  long long eos = -1;
  std::string model, cluster = "a100-80gb";
  ClusterOverrides overrides;
  std::string cost_model = "weft", framework, recompute = "selective";
  int zero = 3;
  int global_batch = 0, steps = 20, first_step = 0, min_group = 1, max_group = 0;
  long long max_seq = 0;
  unsigned long long seed = 0;
  std::string format = "table";
  std::string report;  // --report FILE
};

std::string group_text(const varlen::MicroBatch& mb) {
  std::map<int, int, std::greater<int>> count;
  for (const varlen::Group& g : mb.groups) ++count[g.size];
  std::string out;
  for (const auto& [size, n] : count) out += (out.empty() ? "" : " + ") + std::to_string(n) + "x" + std::to_string(size);
  return out;
}

void run(const VarlenFlags& f) {
  if (f.model.empty()) fail(Error{ErrorKind::kBadInput, "--model is required"});
  std::optional<varlen::FlexspConstants> flexsp;
  if (f.cost_model == "flexsp") flexsp = unwrap(varlen::flexsp_constants(f.model));
  const std::vector<std::int64_t> lengths = unwrap(varlen::load_documents(f.lengths, f.data, f.eos, f.data_format));
  if (f.global_batch <= 0)
    fail(Error{ErrorKind::kBadInput, "--global-batch " + std::to_string(f.global_batch) + ": must be positive"});
  const varlen::Batches batches = unwrap(varlen::draw_batches(lengths, f.global_batch, f.steps, f.first_step, f.max_seq, f.seed));

  ClusterSpec cluster = unwrap(apply_overrides(unwrap(load_cluster(f.cluster)), f.overrides));
  const int gpus = cluster.total_gpus();
  std::unique_ptr<varlen::SeqCost> cost;
  std::string model_name = f.model;
  if (flexsp) {
    cost = varlen::flexsp_seq_cost(*flexsp, gpus, cluster.gpu.memory_gib);
  } else {
    const ModelSpec m = unwrap(load_model(f.model));
    model_name = m.name;
    varlen::AnalyticSeqOptions o;
    if (!f.framework.empty()) o.model = unwrap(framework_options(f.framework));
    o.recompute = unwrap(recompute_from_string(f.recompute));
    o.zero = f.zero;
    o.max_seq = std::max<std::int64_t>(batches.longest, f.max_seq);
    cost = unwrap(varlen::analytic_seq_cost(m, cluster, o));
  }
  varlen::PlannerOptions po;
  po.min_group = f.min_group;
  po.max_group = f.max_group;
  const int degree = varlen::min_group_size(*cost, batches.longest, po);
  if (degree == 0)
    fail(Error{ErrorKind::kNoFit, "the longest document (" + std::to_string(batches.longest) +
                                      " tokens) fits no group of the " + std::to_string(gpus) +
                                      " GPUs: lower --max-seq or plan more GPUs"});

  std::vector<varlen::Comparison> rows;
  const bool table = f.format == "table";
  if (table) {
    std::printf("weft varlen: %s on %d GPUs (%d per node), cost model %s\n", model_name.c_str(), gpus,
                cluster.gpus_per_node, cost->name().c_str());
    std::printf("%d steps of %d documents from step %d; longest %lld tokens; %lld documents over --max-seq dropped\n",
                f.steps, f.global_batch, f.first_step, static_cast<long long>(batches.longest),
                static_cast<long long>(batches.dropped));
    std::printf("static: every group of %d GPUs (the smallest that holds the longest document); adaptive: the best "
                "single size per batch\n\n",
                degree);
    std::printf("%5s %9s %8s %4s  %-28s %9s %9s %10s %8s\n", "step", "tokens", "longest", "mbs", "groups per micro-batch",
                "weft s", "static s", "adaptive s", "plan ms");
  }
  double tw = 0, ts = 0, ta = 0;
  for (size_t k = 0; k < batches.steps.size(); ++k) {
    const std::vector<std::int64_t>& b = batches.steps[k];
    varlen::Comparison r = unwrap(varlen::compare_step(b, *cost, degree, po));
    tw += r.weft.time, ts += r.stat.time, ta += r.adaptive.time;
    if (table) {
      std::int64_t tokens = 0;
      for (std::int64_t s : b) tokens += s;
      std::string groups;
      for (const varlen::MicroBatch& mb : r.weft.micro_batches) groups += (groups.empty() ? "" : " | ") + group_text(mb);
      if (groups.size() > 28) groups = groups.substr(0, 25) + "...";
      std::printf("%5d %9lld %8lld %4zu  %-28s %9.2f %9.2f %10.2f %8.1f\n", f.first_step + static_cast<int>(k),
                  static_cast<long long>(tokens), static_cast<long long>(*std::max_element(b.begin(), b.end())),
                  r.weft.micro_batches.size(), groups.c_str(), r.weft.time, r.stat.time, r.adaptive.time, r.plan_ms);
    }
    rows.push_back(std::move(r));
  }
  std::vector<double> sorted;
  for (const varlen::Comparison& r : rows) sorted.push_back(r.plan_ms);
  std::sort(sorted.begin(), sorted.end());
  const double med = sorted[sorted.size() / 2], mx = sorted.back();
  if (!f.report.empty()) {
    VarlenReportInput in;
    in.title = model_name + " on " + std::to_string(gpus) + " GPUs, cost model " + cost->name();
    in.gpus = gpus;
    char line[256];
    std::snprintf(line, sizeof line,
                  "%d steps of %d documents; static: every group of %d GPUs; total: weft %.2f s, static %.2f s "
                  "(%.2fx), adaptive %.2f s (%.2fx)",
                  f.steps, f.global_batch, degree, tw, ts, ts / tw, ta, ta / tw);
    in.notes.push_back(line);
    for (size_t k = 0; k < rows.size(); ++k) {
      const varlen::Comparison& r = rows[k];
      VarlenPictureStep st;
      st.step = f.first_step + static_cast<int>(k);
      st.weft_s = r.weft.time, st.static_s = r.stat.time, st.adaptive_s = r.adaptive.time, st.plan_ms = r.plan_ms;
      for (const varlen::MicroBatch& mb : r.weft.micro_batches) {
        std::vector<VarlenPictureGroup> groups;
        for (const varlen::Group& g : mb.groups) {
          VarlenPictureGroup pg;
          pg.size = g.size;
          pg.overhead_s = cost->group_overhead(g.size);
          for (int i : g.docs) {
            const std::int64_t len = batches.steps[k][i];
            pg.lengths.push_back(len);
            pg.times_s.push_back(cost->seq_time(static_cast<double>(len), g.size));
          }
          groups.push_back(std::move(pg));
        }
        st.micro_batches.push_back(std::move(groups));
      }
      in.steps.push_back(std::move(st));
    }
    check(write_varlen_html(f.report, in));
    if (table) std::printf("report: %s\n", f.report.c_str());
  }
  if (table) {
    std::printf("\ntotal: weft %.2f s, static %.2f s (%.2fx), adaptive %.2f s (%.2fx); planning per step: median %.1f ms, "
                "max %.1f ms\n",
                tw, ts, ts / tw, ta, ta / tw, med, mx);
    return;
  }
  Json steps = Json::array();
  for (size_t k = 0; k < rows.size(); ++k) {
    const varlen::Comparison& r = rows[k];
    Json groups = Json::array();
    for (size_t m = 0; m < r.weft.micro_batches.size(); ++m)
      for (const varlen::Group& g : r.weft.micro_batches[m].groups) {
        Json l = Json::array();
        for (int i : g.docs) l.push_back(batches.steps[k][i]);
        groups.push_back({{"micro_batch", m}, {"size", g.size}, {"time_s", g.time}, {"lengths", l}});
      }
    steps.push_back({{"step", f.first_step + static_cast<int>(k)},
                     {"weft_s", r.weft.time},
                     {"static_s", r.stat.time},
                     {"adaptive_s", r.adaptive.time},
                     {"plan_ms", r.plan_ms},
                     {"micro_batches", r.weft.micro_batches.size()},
                     {"groups", groups}});
  }
  Json out = {{"model", model_name},
              {"cost_model", cost->name()},
              {"gpus", gpus},
              {"static_size", degree},
              {"steps", steps},
              {"summary",
               {{"weft_s", tw},
                {"static_s", ts},
                {"adaptive_s", ta},
                {"speedup_vs_static", ts / tw},
                {"speedup_vs_adaptive", ta / tw},
                {"plan_ms_median", med},
                {"plan_ms_max", mx},
                {"dropped", batches.dropped},
                {"longest", batches.longest}}}};
  std::printf("%s\n", out.dump(2).c_str());
}

}  // namespace

void register_varlen_commands(CLI::App& app) {
  auto f = std::make_shared<VarlenFlags>();
  auto* cmd = app.add_subcommand("varlen",
                                 "Plan global batches of variable-length documents: per step the micro-batches, the "
                                 "sequence-parallel groups of each and the documents on each, beside one group size "
                                 "for all (static) and the best single size per batch (adaptive)");
  cmd->add_option("--lengths", f->lengths, "Document lengths, one per line");
  cmd->add_option("--data", f->data,
                  "Token file (uint16 .bin/.u16 or uint32 .u32) split into documents at --eos, or a Megatron-LM "
                  "indexed dataset (PREFIX of PREFIX.idx + PREFIX.bin)");
  cmd->add_option("--eos", f->eos, "End-of-document token id of --data");
  cmd->add_option("--data-format", f->data_format,
                  "auto, uint16, uint32 or megatron (PREFIX.idx + PREFIX.bin: documents from the index, no --eos)")
      ->check(CLI::IsMember({"auto", "uint16", "uint32", "megatron"}));
  cmd->add_option("--model", f->model,
                  "Model: preset, weft model JSON or config.json (--cost-model weft); gpt-7b, gpt-13b or gpt-30b "
                  "(--cost-model flexsp)");
  cmd->add_option("--cluster", f->cluster, "Cluster: preset name or cluster JSON")->capture_default_str();
  cmd->add_option("--gpus", f->overrides.gpus, "Total GPUs (nodes = GPUs / GPUs per node)");
  cmd->add_option("--gpus-per-node", f->overrides.gpus_per_node, "GPUs per node (overrides the cluster)");
  cmd->add_option("--memory-gb", f->overrides.memory_gb,
                  "Memory per GPU in GB (2^30 bytes); with --cost-model flexsp the limit FlexSP plans for (its runs: "
                  "28-30)");
  cmd->add_option("--global-batch,--global-batch-size", f->global_batch, "Documents per step")->required();
  cmd->add_option("--max-seq", f->max_seq, "Documents longer than this are dropped (0: none)");
  cmd->add_option("--steps", f->steps, "Global batches to plan")->capture_default_str();
  cmd->add_option("--first-step", f->first_step, "Global batches skipped before the first planned")->capture_default_str();
  cmd->add_option("--seed", f->seed, "Shuffle the documents with this seed first (0: in file order)")->capture_default_str();
  cmd->add_option("--cost-model", f->cost_model, "weft (weft's analytic model) or flexsp (FlexSP's published model)")
      ->check(CLI::IsMember({"weft", "flexsp"}))
      ->capture_default_str();
  cmd->add_option("--framework", f->framework, "Framework traits of weft's model: " + framework_names());
  cmd->add_option("--zero", f->zero, "ZeRO stage over every GPU costed by weft's model (1, 2 or 3)")
      ->capture_default_str();
  cmd->add_option("--recompute", f->recompute, "Activation recompute costed by weft's model")
      ->check(CLI::IsMember({"none", "selective", "full"}))
      ->capture_default_str();
  cmd->add_option("--min-group", f->min_group, "Smallest sequence-parallel group (FlexSP: 2)")->capture_default_str();
  cmd->add_option("--max-group", f->max_group, "Largest sequence-parallel group (0: every GPU)")->capture_default_str();
  cmd->add_option("--format", f->format, "Output on stdout: table or json")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  cmd->add_option("--report", f->report, "Write an HTML page with a picture of every step's groups to this file");
  cmd->callback([f] { run(*f); });
}

}  // namespace weft::cli
