#include "weft/galvatron/setup.h"

#include "weft/galvatron/cost_model.h"
#include "weft/galvatron/calibrate.h"

namespace weft::galvatron {

Result<std::string> precision_name(DType d) {
  switch (d) {
    case DType::kBf16: return std::string("bf16");
    case DType::kFp16: return std::string("fp16");
    case DType::kFp32: return std::string("fp32");
    default: break;
  }
  return Error{ErrorKind::kBadInput,
               std::string("dtype: Galvatron profiles exist for bf16, fp16 and fp32, not ") + to_string(d)};
}

Result<Profiles> load_profiles_for(const std::string& dir, const std::string& model_name, const ClusterSpec& cluster,
                                   DType dtype, int seq) {
  auto prec = precision_name(dtype);
  if (!prec.ok()) return prec.error();
  ProfileQuery q;
  q.model_name = model_name;
  q.precision = *prec;
  q.nodes = cluster.nodes;
  q.gpus_per_node = cluster.gpus_per_node;
  q.seq = seq;
  return load_profiles(dir, q);
}

Result<ProfileCostModel> make_profile_cost_model(const std::string& kind, const std::string& dir,
                                                 const std::string& model_yaml, const ModelSpec& model,
                                                 const ClusterSpec& cluster) {
  if (dir.empty())
    return Error{ErrorKind::kBadInput, "--galvatron-profiles: required with --cost-model " + kind};
  std::string name = model.name;
  long long hidden = model.hidden;
  if (!model_yaml.empty()) {
    auto mc = read_model_yaml(model_yaml);
    if (!mc.ok()) return mc.error();
    name = mc->model_size;
    hidden = mc->hidden_size;
  }
  auto prof = load_profiles_for(dir, name, cluster);
  if (!prof.ok()) return prof.error();
  ProfileCostModel out;
  out.notes = prof->notes;
  if (kind == "galvatron") {
    out.cost = std::make_unique<GalvatronCostModel>(std::move(prof).value(), hidden);
    out.cluster = cluster;
    return out;
  }
  if (kind == "weft") {
    auto cal = make_calibrated_model(*prof, model, cluster);
    if (!cal.ok()) return cal.error();
    out.cost = std::move(cal->model);
    out.cluster = cal->cluster;
    return out;
  }
  return Error{ErrorKind::kBadInput, "--cost-model: expected weft or galvatron, got \"" + kind + "\""};
}

const GalvatronCostModel* as_galvatron(const CostModel& cm) {
  return dynamic_cast<const GalvatronCostModel*>(&cm);
}

Result<Json> galvatron_estimate_json(const GalvatronCostModel& cm, const Plan& p) {
  auto g = cm.estimate_plan(p);
  if (!g.ok()) return g.error();
  auto e = cm.estimate(p);
  if (!e.ok()) return e.error();
  Json j = to_json(*e);
  for (size_t s = 0; s < j["stages"].size() && s < g->stages.size(); ++s) {
    j["stages"][s]["memory_mb"] = g->stages[s].galvatron_mb;
    j["stages"][s]["used_mb"] = g->stages[s].used_mb;
  }
  j["galvatron"] = to_json(*g);
  return j;
}

}  // namespace weft::galvatron
