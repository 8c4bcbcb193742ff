// The cost model a planning command runs with, built from parsed inputs (make_cost_model), and
// what the CLI needs to plan from Galvatron's files: the profiles for a cluster and the search and
// estimate under whichever model was built. This is the top of the planner: it sees weft's analytic
// and calibrated models and Galvatron's, and is the one place that chooses between them.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "weft/calibration/hardware_profile.h"
#include "weft/calibration/model_profile.h"
#include "weft/cost/analytic.h"
#include "weft/cost/cost_model.h"
#include "weft/cost/estimate.h"
#include "weft/galvatron/cost_model.h"
#include "weft/galvatron/model_config.h"
#include "weft/galvatron/profiles.h"
#include "weft/search/search.h"

namespace weft::galvatron {

// Galvatron's spelling of a precision in its file names: bf16, fp16, fp32 (fp8 and tf32: an error).
Result<std::string> precision_name(DType d);

// The profiles of `dir` for model `model_name` on `cluster` (its nodes and GPUs per node), `seq` 0
// meaning the only sequence length the computation profile holds.
Result<Profiles> load_profiles_for(const std::string& dir, const std::string& model_name, const ClusterSpec& cluster,
                                   DType dtype = DType::kBf16, int seq = 0);

// --- the cost model from parsed inputs --------------------------------------------------------

// `--cost-model`: weft's own model, or the Galvatron-compatible one.
enum class CostModelKind { kWeft, kGalvatron };
const char* to_string(CostModelKind k);  // "weft", "galvatron"
// Error: `--cost-model: expected weft or galvatron, got "x"`.
Result<CostModelKind> cost_model_kind_from_string(const std::string& s);

// Everything a cost model is built from, already read from its files.
struct CostModelInputs {
  CostModelKind kind = CostModelKind::kWeft;
  AnalyticOptions analytic;                      // weft's model: framework traits and constants
  std::optional<HardwareProfile> hardware;       // `weft profile hardware` (read_hardware_profile)
  std::optional<ModelProfile> model_profile;     // `weft profile model` (read_model_profile)
  std::optional<Profiles> galvatron;             // Galvatron's profiles (load_profiles_for)
  // The hidden size Galvatron's formulas use (its model YAML's hidden_size); 0: the model's own.
  long long galvatron_hidden = 0;
};

struct CostModelSetup {
  std::unique_ptr<CostModel> cost;
  // `cost` itself when it is the Galvatron-compatible model, else null. search_with and
  // estimate_with below then use Galvatron's task loop and exact accounting.
  const GalvatronCostModel* galvatron = nullptr;
  // The cluster to plan on: the one given, except for weft's model calibrated from Galvatron's
  // profiles, whose link figures come from the measurements (make_calibrated_model).
  ClusterSpec cluster;
};

// The cost model for `model` on `cluster`:
//   kind galvatron            GalvatronCostModel over `galvatron` (required: an error
//                             "--galvatron-profiles: required with --cost-model galvatron");
//   kind weft with galvatron  weft's model calibrated from Galvatron's profiles (make_calibrated_model;
//                             the hardware and model profiles are not used);
//   kind weft with a hardware and/or model profile  CalibratedCostModel;
//   kind weft otherwise       AnalyticCostModel(analytic).
// weft's models are built on `analytic`. Errors: bad input, naming the profile field.
Result<CostModelSetup> make_cost_model(const CostModelInputs& in, const ModelSpec& model, const ClusterSpec& cluster);

// `weft plan`'s search: under Galvatron's model with `galvatron_space`, Galvatron's task loop
// (search_galvatron_space, as to_search_result gives it); otherwise weft's search() under
// setup.cost. `opt` as for search().
Result<SearchResult> search_with(const CostModelSetup& setup, const ModelSpec& model, const ClusterSpec& cluster,
                                 const SearchOptions& opt, bool galvatron_space);

// `weft estimate`'s estimate of plan p: under Galvatron's model its exact accounting
// (GalvatronCostModel::estimate; an error for plans outside its cost model), otherwise
// weft::estimate. A plan in a dtype its GPU does not run is an error (check_dtype, field
// train.dtype); the runtime, which trains any plan's dtype on the CPU in fp32, does not ask this.
Result<Estimate> estimate_with(const CostModelSetup& setup, const Plan& p);
// The JSON of `weft estimate --format json` for plan p and its estimate e (estimate_with):
// galvatron_estimate_json under Galvatron's model, to_json(e) otherwise.
Result<Json> estimate_json_with(const CostModelSetup& setup, const Plan& p, const Estimate& e);

// --- from a Galvatron profile folder ------------------------------------------------------------

struct ProfileCostModel {
  std::unique_ptr<CostModel> cost;
  ClusterSpec cluster;  // the cluster to plan on (weft's model: link figures from the measurements)
  std::vector<std::string> notes;  // loader fall-backs, for the user
};

// kind "galvatron": the Galvatron-compatible model (kAuto task); kind "weft": weft's calibrated
// model. model_yaml may be empty: the profile files are then looked up by model.name. Reads the
// YAML and the profiles, then make_cost_model.
Result<ProfileCostModel> make_profile_cost_model(const std::string& kind, const std::string& dir,
                                                 const std::string& model_yaml, const ModelSpec& model,
                                                 const ClusterSpec& cluster);

// `weft estimate --format json` under the Galvatron-compatible model: the usual keys of
// to_json(Estimate) (step_time_s = Galvatron's iteration time; stage memory without the reserve),
// each stages[i] with "memory_mb" as Galvatron counts it (with the reserve) and "used_mb", and
// "galvatron": to_json(GalvatronEstimate).
Result<Json> galvatron_estimate_json(const GalvatronCostModel& cm, const Plan& p);

}  // namespace weft::galvatron
