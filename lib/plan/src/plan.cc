#include "weft/plan/plan.h"

#include <algorithm>
#include <string>

#include "weft/core/assert.h"
#include "weft/plan/pipeline_order.h"

namespace weft {

int stage_group(const TrainSettings& t, int s) { return stage_device_group(t.schedule, std::max(1, t.pp), s); }
int group_stage(const TrainSettings& t, int g, int c) { return virtual_stage(t.schedule, std::max(1, t.pp), g, c); }

int TrainSettings::replica_rows(int replicas, int j, int k, int group) const {
  if (!stage_dp_shares.empty()) return stage_dp_shares.at(group).at(j);
  if (!dp_micro_batches.empty() && k >= dp_micro_batches[j]) return 0;
  if (!dp_shares.empty()) return dp_shares[j];
  return pipeline_micro_batch() / std::max(1, replicas);
}

int TrainSettings::micro_batch_rows(int replicas, int k) const {
  if (dp_micro_batches.empty() && dp_shares.empty()) return pipeline_micro_batch();
  int n = 0;
  for (int j = 0; j < replicas; ++j) n += replica_rows(replicas, j, k);
  return n;
}

int TrainSettings::micro_batch_offset(int replicas, int k) const {
  if (dp_micro_batches.empty()) return k * pipeline_micro_batch();
  int n = 0;
  for (int i = 0; i < k; ++i) n += micro_batch_rows(replicas, i);
  return n;
}

int TrainSettings::replica_samples(int replicas, int j, int group) const {
  if (dp_micro_batches.empty()) return replica_rows(replicas, j, 0, group) * micro_batches;
  return dp_micro_batches[j] * dp_shares[j];
}

std::string shares_label(const TrainSettings& t) {
  std::string out;
  for (size_t g = 0; g < t.stage_dp_shares.size(); ++g) {
    out += g ? " | " : "";
    for (size_t j = 0; j < t.stage_dp_shares[g].size(); ++j) out += (j ? ":" : "") + std::to_string(t.stage_dp_shares[g][j]);
  }
  for (int x : t.dp_shares) out += (out.empty() ? "" : ":") + std::to_string(x);
  if (!t.dp_micro_batches.empty()) {
    out += " x ";
    for (size_t j = 0; j < t.dp_micro_batches.size(); ++j) out += (j ? ":" : "") + std::to_string(t.dp_micro_batches[j]);
    out += " micro-batches";
  }
  return out;
}

const LayerStrategy& Plan::layer_strategy(int i) const {
  const Stage* in = nullptr;
  for (const auto& st : stages)
    if (i >= st.first_layer && i < st.first_layer + st.num_layers()) {
      in = &st;
      break;
    }
  WEFT_ASSERT(in != nullptr, "layer " + std::to_string(i) + " is not covered by any of the plan's " +
                                 std::to_string(stages.size()) + " stages");
  return in->layers[i - in->first_layer];
}

std::optional<LayerStrategy> Plan::uniform_strategy() const {
  std::optional<LayerStrategy> one;  // without expert degrees
  int moe_ep = 0, moe_etp = 0;        // the MoE layers' expert degrees, once one is seen
  for (const auto& st : stages)
    for (size_t j = 0; j < st.layers.size(); ++j) {
      LayerStrategy s = st.layers[j];
      const int i = st.first_layer + static_cast<int>(j);
      if (i >= 0 && i < model.num_layers() && model.layer(i).moe.enabled()) {
        if (moe_ep != 0 && (s.ep != moe_ep || s.etp != moe_etp)) return std::nullopt;
        moe_ep = s.ep;
        moe_etp = s.etp;
        s = without_experts(s);
      }
      if (one && !(s == *one)) return std::nullopt;
      one = s;
    }
  if (one && moe_ep != 0) one->ep = moe_ep, one->etp = moe_etp;
  return one;
}

namespace {

Json to_json(const StagePrediction& p) {
  return Json{{"time_s", p.time_s},           {"memory_gib", p.memory_gib},       {"weights_gib", p.weights_gib},
              {"grads_gib", p.grads_gib},     {"optimizer_gib", p.optimizer_gib}, {"activations_gib", p.activations_gib},
              {"other_gib", p.other_gib}};
}

StagePrediction stage_prediction_from_json(const JsonObj& o) {
  StagePrediction p;
  p.time_s = o.number_or("time_s", 0);
  p.memory_gib = o.number_or("memory_gib", 0);
  p.weights_gib = o.number_or("weights_gib", 0);
  p.grads_gib = o.number_or("grads_gib", 0);
  p.optimizer_gib = o.number_or("optimizer_gib", 0);
  p.activations_gib = o.number_or("activations_gib", 0);
  p.other_gib = o.number_or("other_gib", 0);
  return p;
}

}  // namespace

Json to_json(const Plan& p) {
  Json j;
  j["format_version"] = p.format_version;
  Json model = to_json(p.model);
  Json cluster = to_json(p.cluster);
  j["model_hash"] = json_hash(model);
  j["cluster_hash"] = json_hash(cluster);
  j["train"] = {{"seq", p.train.seq},
                {"global_batch", p.train.global_batch},
                {"micro_batches", p.train.micro_batches},
                {"pp", p.train.pp},
                {"vp", p.train.vp},
                {"schedule", to_string(p.train.schedule)},
                {"dtype", to_string(p.train.dtype)}};
  if (p.train.rounds != 1) j["train"]["rounds"] = p.train.rounds;
  if (p.train.moe_imbalance != 1.0) j["train"]["moe_imbalance"] = p.train.moe_imbalance;
  if (p.train.moe_dispatcher != MoeDispatcher::kAllToAll) j["train"]["moe_dispatcher"] = to_string(p.train.moe_dispatcher);
  if (p.train.moe_a2a_overlap) j["train"]["moe_a2a_overlap"] = true;
  if (p.train.varlen) j["train"]["varlen"] = {{"min_group", p.train.min_group}, {"max_group", p.train.max_group}};
  if (!p.train.dp_shares.empty()) j["train"]["dp_shares"] = p.train.dp_shares;
  if (!p.train.dp_micro_batches.empty()) j["train"]["dp_micro_batches"] = p.train.dp_micro_batches;
  if (!p.train.stage_dp_shares.empty()) j["train"]["stage_dp_shares"] = p.train.stage_dp_shares;
  if (p.train.optimizer.precision_aware())
    j["train"]["optimizer"] = {{"exp_avg", to_string(p.train.optimizer.exp_avg)},
                               {"exp_avg_sq", to_string(p.train.optimizer.exp_avg_sq)},
                               {"main_grads", to_string(p.train.optimizer.main_grads)}};
  j["embedding"] = to_json(p.embedding);
  Json stages = Json::array();
  const int S = p.devices_per_stage();
  for (size_t s = 0; s < p.stages.size(); ++s) {
    const auto& st = p.stages[s];
    const int group = p.train.pp > 0 ? stage_group(p, static_cast<int>(s)) : 0;
    Json layers = Json::array();
    for (const auto& l : st.layers) layers.push_back(to_json(l));
    stages.push_back(Json{{"index", s},
                          {"device_group", group},
                          {"first_rank", group * S},
                          {"num_ranks", S},
                          {"first_layer", st.first_layer},
                          {"num_layers", st.num_layers()},
                          {"layers", std::move(layers)},
                          {"predicted", to_json(st.predicted)}});
  }
  j["stages"] = std::move(stages);
  j["predicted"] = {{"step_time_s", p.predicted.step_time_s},
                    {"tokens_per_s", p.predicted.tokens_per_s},
                    {"mfu", p.predicted.mfu},
                    {"hfu", p.predicted.hfu},
                    {"peak_memory_gib", p.predicted.peak_memory_gib},
                    {"cost_model", p.predicted.cost_model},
                    {"source", p.predicted.source}};
  j["model"] = std::move(model);
  j["cluster"] = std::move(cluster);
  if (p.devices) {
    Json d = to_json(p.devices->cluster);
    d["gpu_of_rank"] = p.devices->gpu_of_rank;
    j["devices"] = std::move(d);
  }
  return j;
}

Result<Plan> plan_from_json(const Json& j, const std::string& path) {
  return catch_errors([&]() -> Result<Plan> {
    JsonObj o(j, path);
    o.reject_unknown({"format_version", "model", "model_hash", "cluster", "cluster_hash", "train", "embedding", "stages",
                      "predicted", "devices"});
    Plan p;
    p.format_version = static_cast<int>(o.integer("format_version"));
    if (p.format_version != kPlanFormatVersion)
      o.fail("format_version", "unsupported version " + std::to_string(p.format_version) + " (this weft reads " +
                                   std::to_string(kPlanFormatVersion) + ")");
    auto model = model_from_json(o.obj("model").json(), o.field("model"));
    if (!model.ok()) return model.error();
    p.model = std::move(model).value();
    auto cluster = cluster_from_json(o.obj("cluster").json(), o.field("cluster"));
    if (!cluster.ok()) return cluster.error();
    p.cluster = std::move(cluster).value();
    if (o.has("devices")) {
      Json d = o.json().at("devices");
      if (!d.is_object()) o.fail("devices", "must be an object");
      PlanDevices dev;
      if (d.contains("gpu_of_rank")) {
        for (long long x : JsonObj(d, o.field("devices")).array_of_int("gpu_of_rank"))
          dev.gpu_of_rank.push_back(static_cast<int>(x));
        d.erase("gpu_of_rank");
      }
      if (!d.contains("groups")) o.fail("devices", "missing groups (the node groups in rank order)");
      auto m = mixed_cluster_from_json(d, o.field("devices"));
      if (!m.ok()) return m.error();
      dev.cluster = std::move(m).value();
      p.devices = std::move(dev);
    }

    JsonObj t = o.obj("train");
    t.reject_unknown(
        {"seq", "global_batch", "micro_batches", "pp", "vp", "schedule", "dtype", "varlen", "dp_shares", "dp_micro_batches",
         "stage_dp_shares", "optimizer", "rounds", "moe_imbalance", "moe_dispatcher", "moe_a2a_overlap"});
    if (t.has("optimizer")) {
      JsonObj po = t.obj("optimizer");
      po.reject_unknown({"exp_avg", "exp_avg_sq", "main_grads"});
      auto read = [&](const char* key, std::initializer_list<DType> allowed, const char* names) {
        auto d = dtype_from_string(po.str_or(key, "fp32"));
        if (!d.ok()) po.fail(key, d.error().message);
        if (std::find(allowed.begin(), allowed.end(), d.value()) == allowed.end())
          po.fail(key, std::string("\"") + to_string(d.value()) + "\": expected one of " + names);
        return d.value();
      };
      const auto moments = {DType::kFp32, DType::kBf16, DType::kFp16, DType::kFp8};
      p.train.optimizer.exp_avg = read("exp_avg", moments, "fp32, bf16, fp16, fp8");
      p.train.optimizer.exp_avg_sq = read("exp_avg_sq", moments, "fp32, bf16, fp16, fp8");
      p.train.optimizer.main_grads = read("main_grads", {DType::kFp32, DType::kBf16}, "fp32, bf16");
    }
    if (t.has("dp_shares"))
      for (long long x : t.array_of_int("dp_shares")) p.train.dp_shares.push_back(static_cast<int>(x));
    if (t.has("dp_micro_batches"))
      for (long long x : t.array_of_int("dp_micro_batches")) p.train.dp_micro_batches.push_back(static_cast<int>(x));
    if (t.has("stage_dp_shares")) {
      const Json& a = t.json().at("stage_dp_shares");
      if (!a.is_array()) t.fail("stage_dp_shares", "expected an array of arrays (one per pipeline device group)");
      for (size_t g = 0; g < a.size(); ++g) {
        const std::string key = "stage_dp_shares[" + std::to_string(g) + "]";
        if (!a[g].is_array()) t.fail(key, "expected an array of integers (one per data-parallel replica)");
        std::vector<int> row;
        for (size_t j = 0; j < a[g].size(); ++j) {
          if (!a[g][j].is_number_integer() && !a[g][j].is_number_unsigned())
            t.fail(key + "[" + std::to_string(j) + "]", "expected an integer, got " + a[g][j].dump());
          const long long x = a[g][j].get<long long>();
          if (x < 0 || x > (1LL << 30)) t.fail(key + "[" + std::to_string(j) + "]", "must be >= 0, got " + std::to_string(x));
          row.push_back(static_cast<int>(x));
        }
        p.train.stage_dp_shares.push_back(std::move(row));
      }
    }
    if (t.has("varlen")) {
      JsonObj v = t.obj("varlen");
      v.reject_unknown({"min_group", "max_group"});
      p.train.varlen = true;
      p.train.min_group = static_cast<int>(v.integer_or("min_group", 1));
      p.train.max_group = static_cast<int>(v.integer_or("max_group", 0));
    }
    p.train.seq = static_cast<int>(t.integer("seq"));
    p.train.global_batch = static_cast<int>(t.integer("global_batch"));
    p.train.micro_batches = static_cast<int>(t.integer("micro_batches"));
    p.train.pp = static_cast<int>(t.integer("pp"));
    p.train.vp = static_cast<int>(t.integer_or("vp", 1));
    p.train.rounds = static_cast<int>(t.integer_or("rounds", 1));
    p.train.moe_imbalance = t.number_or("moe_imbalance", 1.0);
    if (t.has("moe_dispatcher")) {
      auto d = moe_dispatcher_from_string(t.str("moe_dispatcher"));
      if (!d.ok()) t.fail("moe_dispatcher", d.error().message);
      p.train.moe_dispatcher = d.value();
    }
    p.train.moe_a2a_overlap = t.boolean_or("moe_a2a_overlap", false);
    {
      auto s = schedule_from_string(t.str_or("schedule", "1f1b"));
      if (!s.ok()) t.fail("schedule", s.error().message);
      p.train.schedule = s.value();
      auto d = dtype_from_string(t.str_or("dtype", "bf16"));
      if (!d.ok()) t.fail("dtype", d.error().message);
      p.train.dtype = d.value();
    }
    p.embedding = strategy_from_json(o.obj("embedding"));
    for (const auto& so : o.array_of_obj("stages")) {
      so.reject_unknown({"index", "device_group", "first_rank", "num_ranks", "first_layer", "num_layers", "layers",
                         "predicted"});
      Stage st;
      st.first_layer = static_cast<int>(so.integer("first_layer"));
      for (const auto& lo : so.array_of_obj("layers")) st.layers.push_back(strategy_from_json(lo));
      if (so.has("num_layers") && so.integer("num_layers") != st.num_layers())
        so.fail("num_layers", std::to_string(so.integer("num_layers")) + " but " + std::to_string(st.num_layers()) +
                                  " layer strategies are listed");
      if (so.has("predicted")) st.predicted = stage_prediction_from_json(so.obj("predicted"));
      p.stages.push_back(std::move(st));
    }
    if (o.has("predicted")) {
      JsonObj pr = o.obj("predicted");
      p.predicted.step_time_s = pr.number_or("step_time_s", 0);
      p.predicted.tokens_per_s = pr.number_or("tokens_per_s", 0);
      p.predicted.mfu = pr.number_or("mfu", 0);
      p.predicted.hfu = pr.number_or("hfu", p.predicted.mfu);
      p.predicted.peak_memory_gib = pr.number_or("peak_memory_gib", 0);
      p.predicted.cost_model = pr.str_or("cost_model", "");
      p.predicted.source = pr.str_or("source", "");
    }
    Status st = validate(p);
    if (!st.ok()) return st.error().with_context(path);
    return p;
  });
}

Result<Plan> read_plan_file(const std::string& path) {
  return catch_errors([&]() -> Result<Plan> { return plan_from_json(read_json_file(path), path); });
}

Status write_plan_file(const std::string& path, const Plan& p) {
  auto r = catch_errors([&]() -> Result<int> {
    write_json_file(path, to_json(p));
    return 0;
  });
  if (!r.ok()) return r.error();
  return {};
}

}  // namespace weft
