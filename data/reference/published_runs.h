// A reader of the published training runs beside it (published_runs.json) as weft plans: each row
// becomes the uniform plan it describes and the analytic model's options for its framework. Header
// only, over the cost and search libraries; the reference test (tests/cost/reference_test.cc) and the
// bench that prints the comparison (bench/cost/published_runs.cc) both read the file through it.
//
// Optional fields of a row: published_mfu and published_hfu (percent, counted as the source counts
// them), published_num_params (the source's parameter count), max_seq (the learned-position table
// the run trained with: llm-foundry sets MPT's max_seq_len to each run's sequence, so the table, and
// the parameter count, grow with it; it replaces the model file's max_seq), fused_loss (the loss
// is one fused in-place kernel on the logits: the options' vocab_parallel_loss), measured_memory_gib
// (the source's peak memory reading, GiB), attention_kernel (flash1 or flash2: the fused
// attention the run used, where it is not its framework's), ep and etp (a MoE run's expert degree
// and expert tensor degree; etp absent: as tp), exp_avg_dtype and exp_avg_sq_dtype (Megatron-LM's
// precision-aware optimizer: Adam's moments in bf16), moe_dispatcher (alltoall, deepep, hybridep)
// and moe_a2a_overlap (Megatron-Core's expert all-to-all overlap). A model given as a
// relative .json path is read relative to the directory of the runs file (llm-foundry/mpt-7b.json).
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "weft/core/json.h"
#include "weft/cost/analytic.h"
#include "weft/cost/estimate.h"
#include "weft/search/uniform.h"
#include "weft/spec/counts.h"
#include "weft/spec/presets.h"

namespace weft::published {

struct Run {
  std::string set, label, framework;
  double measured = 0;  // tokens per second per GPU
  std::optional<double> published_mfu, published_hfu;  // percent, the source's own count
  std::optional<double> measured_memory_gib;            // the source's peak memory reading
  std::optional<double> published_num_params;
  Plan plan;
  AnalyticOptions options;
};

// A model named by a relative .json path is read from beside the runs file.
inline std::string model_path(const std::string& runs_file, const std::string& model) {
  const bool file = model.size() > 5 && model.compare(model.size() - 5, 5, ".json") == 0;
  if (!file || model.front() == '/') return model;
  const size_t slash = runs_file.find_last_of('/');
  return slash == std::string::npos ? model : runs_file.substr(0, slash + 1) + model;
}

// Tokens per second per GPU of run r under estimate e (what the published figures count).
inline double tokens_per_gpu(const Run& r, const Estimate& e) {
  return r.plan.train.global_batch * static_cast<double>(r.plan.train.seq) / e.step_time.value() /
         r.plan.cluster.total_gpus();
}

// MFU of run r's measured throughput, in percent, counted as weft counts model FLOPs (Estimate::mfu:
// model_step_flops, the attention matmuls in full, LM head included, no recompute) at the peak of
// the run's GPU and dtype; the same count as the predicted MFU, so the two compare directly.
inline double measured_mfu(const Run& r) {
  const TrainSettings& t = r.plan.train;
  const double per_token = model_step_flops(r.plan.model, t.global_batch, t.seq) / (t.global_batch * double(t.seq));
  return 100 * r.measured * per_token / r.plan.cluster.gpu.peak(t.dtype).value();
}

// Every run of the file; the error names the row and the field.
inline Result<std::vector<Run>> load_runs(const std::string& path) {
  return catch_errors([&]() -> Result<std::vector<Run>> {
    const Json doc = read_json_file(path);
    std::vector<Run> out;
    for (const Json& row : doc.at("runs")) {
      Run r;
      r.set = row.at("set").get<std::string>();
      r.label = row.at("label").get<std::string>();
      r.framework = row.at("framework").get<std::string>();
      r.measured = row.at("measured_tokens_per_s_per_gpu").get<double>();
      if (row.contains("published_mfu")) r.published_mfu = row.at("published_mfu").get<double>();
      if (row.contains("measured_memory_gib")) r.measured_memory_gib = row.at("measured_memory_gib").get<double>();
      if (row.contains("published_hfu")) r.published_hfu = row.at("published_hfu").get<double>();
      if (row.contains("published_num_params")) r.published_num_params = row.at("published_num_params").get<double>();
      const std::string where = path + ": run \"" + r.label + "\"";
      auto model = load_model(model_path(path, row.at("model").get<std::string>()));
      auto cluster = load_cluster(row.at("cluster").get<std::string>());
      if (!model.ok()) return model.error().with_context(where);
      if (!cluster.ok()) return cluster.error().with_context(where);
      const int gpus = row.at("gpus").get<int>();
      ClusterSpec c = *cluster;
      c.nodes = std::max(1, gpus / c.gpus_per_node);
      LayerStrategy s;
      s.tp = row.at("tp").get<int>();
      s.cp = row.at("cp").get<int>();
      s.sp = row.at("sp").get<bool>();
      s.zero = row.at("zero").get<int>();
      const int pp = row.at("pp").get<int>();
      s.dp = gpus / (s.tp * pp * s.cp);
      auto rc = recompute_from_string(row.at("recompute").get<std::string>());
      if (!rc.ok()) return rc.error().with_context(where);
      s.recompute = *rc;
      s.ep = row.value("ep", 1);
      s.etp = row.value("etp", 0);
      TrainSettings t;
      t.seq = row.at("seq").get<int>();
      t.global_batch = row.at("global_batch").get<int>();
      t.micro_batches = t.global_batch / (s.dp * row.at("micro_batch").get<int>());
      t.pp = pp;
      t.vp = row.at("vp").get<int>();
      t.schedule = t.vp > 1 ? Schedule::kInterleaved : Schedule::k1F1B;
      auto dt = dtype_from_string(row.at("dtype").get<std::string>());
      if (!dt.ok()) return dt.error().with_context(where);
      t.dtype = *dt;
      for (const auto& [key, moment] : {std::pair<const char*, DType*>{"exp_avg_dtype", &t.optimizer.exp_avg},
                                        {"exp_avg_sq_dtype", &t.optimizer.exp_avg_sq}}) {
        if (!row.contains(key)) continue;
        auto md = dtype_from_string(row.at(key).get<std::string>());
        if (!md.ok()) return md.error().with_context(where + ": " + key);
        *moment = *md;
      }
      if (row.contains("moe_dispatcher")) {
        auto md = moe_dispatcher_from_string(row.at("moe_dispatcher").get<std::string>());
        if (!md.ok()) return md.error().with_context(where + ": moe_dispatcher");
        t.moe_dispatcher = *md;
      }
      t.moe_a2a_overlap = row.value("moe_a2a_overlap", false);
      ModelSpec m = *model;
      if (row.contains("max_seq")) m.max_seq = row.at("max_seq").get<int>();
      auto plan = make_uniform_plan(m, c, t, s, embedding_for(s));
      if (!plan.ok()) return plan.error().with_context(where);
      r.plan = std::move(plan).value();
      auto opt = framework_options(r.framework);
      if (!opt.ok()) return opt.error().with_context(where);
      r.options = *opt;
      // fused_loss: the loss runs as one fused kernel on the logits (flash-attn's CrossEntropyLoss,
      // llm-foundry's default loss_fn): costed as Megatron's in-place loss (docs/cost-model.md §5.3).
      if (row.value("fused_loss", false)) r.options.vocab_parallel_loss = true;
      // attention_kernel: the fused attention kernel the run used where it is not its framework's
      // (flash-attn 1.x in training code of 2022-23: "flash1").
      if (row.contains("attention_kernel")) {
        const std::string k = row.at("attention_kernel").get<std::string>();
        if (k == "flash1") r.options.attention_kernel = AttentionKernel::kFlash1;
        else if (k == "triton") r.options.attention_kernel = AttentionKernel::kTritonFlash;
        else if (k == "flash2") r.options.attention_kernel = AttentionKernel::kFlash2;
        else return Error{ErrorKind::kBadInput, where + ": attention_kernel \"" + k + "\" is not one of flash1, triton, flash2"};
      }
      out.push_back(std::move(r));
    }
    return out;
  });
}

}  // namespace weft::published
