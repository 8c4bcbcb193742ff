// What the CLI needs to plan from Galvatron's files: the model from its YAML, the profiles for a
// cluster, and the cost model for `--cost-model galvatron|weft --galvatron-profiles DIR`.
#pragma once

#include <memory>
#include <string>

#include "weft/cost/cost_model.h"
#include "weft/cost/estimate.h"
#include "weft/galvatron/cost_model.h"
#include "weft/galvatron/model_config.h"
#include "weft/galvatron/profiles.h"

namespace weft::galvatron {

// Galvatron's spelling of a precision in its file names: bf16, fp16, fp32 (fp8 and tf32: an error).
Result<std::string> precision_name(DType d);

// The profiles of `dir` for model `model_name` on `cluster` (its nodes and GPUs per node), `seq` 0
// meaning the only sequence length the computation profile holds.
Result<Profiles> load_profiles_for(const std::string& dir, const std::string& model_name, const ClusterSpec& cluster,
                                   DType dtype = DType::kBf16, int seq = 0);

struct ProfileCostModel {
  std::unique_ptr<CostModel> cost;
  ClusterSpec cluster;  // the cluster to plan on (weft's model: link figures from the measurements)
  std::vector<std::string> notes;  // loader fall-backs, for the user
};

// kind "galvatron": the Galvatron-compatible model (kAuto task); kind "weft": weft's calibrated
// model. model_yaml may be empty: the profile files are then looked up by model.name.
Result<ProfileCostModel> make_profile_cost_model(const std::string& kind, const std::string& dir,
                                                 const std::string& model_yaml, const ModelSpec& model,
                                                 const ClusterSpec& cluster);

// The Galvatron-compatible model behind `cm`, or nullptr. `weft estimate` uses it to report
// Galvatron's exact accounting (galvatron_estimate_json) instead of weft::estimate's composition.
const GalvatronCostModel* as_galvatron(const CostModel& cm);

// `weft estimate --format json` under the Galvatron-compatible model: the usual keys of
// to_json(Estimate) (step_time_s = Galvatron's iteration time; stage memory without the reserve),
// each stages[i] with "memory_mb" as Galvatron counts it (with the reserve) and "used_mb", and
// "galvatron": to_json(GalvatronEstimate).
Result<Json> galvatron_estimate_json(const GalvatronCostModel& cm, const Plan& p);

}  // namespace weft::galvatron
