#include "weft/galvatron/setup.h"

#include "weft/calibration/calibrated.h"
#include "weft/core/enum_names.h"
#include "weft/galvatron/calibrate.h"
#include "weft/galvatron/cost_model.h"
#include "weft/galvatron/search.h"

namespace weft::galvatron {

namespace {

constexpr EnumName<CostModelKind> kCostModelKindNames[] = {{CostModelKind::kWeft, "weft"},
                                                           {CostModelKind::kGalvatron, "galvatron"}};

}  // namespace

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

const char* to_string(CostModelKind k) { return enum_name(kCostModelKindNames, k); }

Result<CostModelKind> cost_model_kind_from_string(const std::string& s) {
  if (const std::optional<CostModelKind> k = enum_value(kCostModelKindNames, s)) return *k;
  return Error{ErrorKind::kBadInput, "--cost-model: expected weft or galvatron, got \"" + s + "\""};
}

Result<CostModelSetup> make_cost_model(const CostModelInputs& in, const ModelSpec& model, const ClusterSpec& cluster) {
  CostModelSetup out;
  out.cluster = cluster;
  switch (in.kind) {
    case CostModelKind::kGalvatron: {
      if (!in.galvatron)
        return Error{ErrorKind::kBadInput, "--galvatron-profiles: required with --cost-model galvatron"};
      auto g = std::make_unique<GalvatronCostModel>(*in.galvatron,
                                                    in.galvatron_hidden > 0 ? in.galvatron_hidden : model.hidden);
      out.galvatron = g.get();
      out.cost = std::move(g);
      return out;
    }
    case CostModelKind::kWeft:
      if (in.galvatron) {
        auto cal = make_calibrated_model(*in.galvatron, model, cluster, in.analytic);
        if (!cal.ok()) return cal.error();
        out.cost = std::move(cal->model);
        out.cluster = cal->cluster;
      } else if (in.hardware || in.model_profile) {
        out.cost = std::make_unique<CalibratedCostModel>(in.hardware, in.model_profile, model, cluster, in.analytic);
      } else {
        out.cost = std::make_unique<AnalyticCostModel>(in.analytic);
      }
      return out;
  }
  return Error{ErrorKind::kBadInput, "--cost-model: expected weft or galvatron"};
}

Result<SearchResult> search_with(const CostModelSetup& setup, const ModelSpec& model, const ClusterSpec& cluster,
                                 const SearchOptions& opt, bool galvatron_space) {
  if (setup.galvatron && galvatron_space) {
    auto r = search_galvatron_space(model, cluster, *setup.galvatron, opt);
    if (!r.ok()) return r.error();
    return to_search_result(*r);
  }
  return search(model, cluster, *setup.cost, opt);
}

Result<Estimate> estimate_with(const CostModelSetup& setup, const Plan& p) {
  if (Status d = check_dtype(p.cluster.gpu, p.train.dtype, "train.dtype"); !d.ok()) return d.error();
  if (setup.galvatron) return setup.galvatron->estimate(p);
  return estimate(p, *setup.cost);
}

Result<Json> estimate_json_with(const CostModelSetup& setup, const Plan& p, const Estimate& e) {
  if (setup.galvatron) return galvatron_estimate_json(*setup.galvatron, p);
  return to_json(e);
}

Result<ProfileCostModel> make_profile_cost_model(const std::string& kind, const std::string& dir,
                                                 const std::string& model_yaml, const ModelSpec& model,
                                                 const ClusterSpec& cluster) {
  if (dir.empty())
    return Error{ErrorKind::kBadInput, "--galvatron-profiles: required with --cost-model " + kind};
  CostModelInputs in;
  std::string name = model.name;
  if (!model_yaml.empty()) {
    auto mc = read_model_yaml(model_yaml);
    if (!mc.ok()) return mc.error();
    name = mc->model_size;
    in.galvatron_hidden = mc->hidden_size;
  }
  auto prof = load_profiles_for(dir, name, cluster);
  if (!prof.ok()) return prof.error();
  auto k = cost_model_kind_from_string(kind);
  if (!k.ok()) return k.error();
  in.kind = *k;
  ProfileCostModel out;
  out.notes = prof->notes;
  in.galvatron = std::move(prof).value();
  auto setup = make_cost_model(in, model, cluster);
  if (!setup.ok()) return setup.error();
  out.cost = std::move(setup->cost);
  out.cluster = setup->cluster;
  return out;
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
