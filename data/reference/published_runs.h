// A reader of the published training runs beside it (published_runs.json) as weft plans: each row
// becomes the uniform plan it describes and the analytic model's options for its framework. Header
// only, over the cost and search libraries; the reference test (tests/cost/reference_test.cc) and the
// bench that prints the comparison (bench/cost/published_runs.cc) both read the file through it.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "weft/core/json.h"
#include "weft/cost/analytic.h"
#include "weft/cost/estimate.h"
#include "weft/search/uniform.h"
#include "weft/spec/presets.h"

namespace weft::published {

struct Run {
  std::string set, label, framework;
  double measured = 0;  // tokens per second per GPU
  Plan plan;
  AnalyticOptions options;
};

// Tokens per second per GPU of run r under estimate e (what the published figures count).
inline double tokens_per_gpu(const Run& r, const Estimate& e) {
  return r.plan.train.global_batch * static_cast<double>(r.plan.train.seq) / e.step_time.value() /
         r.plan.cluster.total_gpus();
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
      const std::string where = path + ": run \"" + r.label + "\"";
      auto model = load_model(row.at("model").get<std::string>());
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
      auto plan = make_uniform_plan(*model, c, t, s, embedding_for(s));
      if (!plan.ok()) return plan.error().with_context(where);
      r.plan = std::move(plan).value();
      auto opt = framework_options(r.framework);
      if (!opt.ok()) return opt.error().with_context(where);
      r.options = *opt;
      out.push_back(std::move(r));
    }
    return out;
  });
}

}  // namespace weft::published
