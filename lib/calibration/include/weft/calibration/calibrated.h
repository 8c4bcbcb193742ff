// CalibratedCostModel: weft's analytic cost model with measured figures put in where a profile
// covers the case (docs/profiles.md "How the cost model uses profiles"):
//   - compute of a layer, of the embedding and of the LM head: the model profile, interpolated in
//     micro-batch and sequence length, times the hardware profile's compute-sharing slow-down for
//     the ranks of one node;
//   - saved activation memory of those: the model profile;
//   - every collective (tensor-parallel, Ulysses, data-parallel / ZeRO, pipeline send/recv,
//     re-distribution) with the hardware profile's table for that kind, group size and placement;
//   - the optimizer step: the model profile's measured cost per parameter;
//   - overlap slow-down and runtime memory overhead: the hardware profile;
//   - everything else (context parallelism, MoE experts, a tp degree or recompute mode the model
//     profile lacks, a group size the hardware profile lacks): the analytic model.
// The communication priced is the analytic model's description of a layer's traffic
// (weft/cost/traffic.h) with the options of weft's runtime (runtime_traffic: the schedule the
// profiles measured), priced by the profile's tables (ProfilePricer, weft/calibration/profile_pricer.h).
//
// Pure: every method is a function of its arguments; thread-safe for concurrent reads.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "weft/calibration/hardware_profile.h"
#include "weft/calibration/model_profile.h"
#include "weft/calibration/profile_pricer.h"
#include "weft/cost/analytic.h"
#include "weft/cost/cost_model.h"

namespace weft {

class CalibratedCostModel : public CostModel {
 public:
  // Either profile may be absent. `model` and `cluster` are what plans will be costed for: they set
  // source() (below). `base` configures the analytic model underneath; the hardware profile
  // replaces its overlap slow-down and runtime overhead, the model profile its grad-sync overlap.
  CalibratedCostModel(std::optional<HardwareProfile> hw, std::optional<ModelProfile> mp, const ModelSpec& model,
                      const ClusterSpec& cluster, AnalyticOptions base = {});

  std::string name() const override { return "weft"; }
  // "measured": both profiles are given, the model profile holds every layer group of the model
  // and its embedding and head, and the hardware profile has all-reduce tables; "analytic": no
  // profile applies; "mixed" otherwise. Terms outside a profile's grid fall back per call (see
  // coverage()).
  std::string source() const override { return source_; }

  LayerCost layer(const LayerContext& ctx, const LayerStrategy& s) const override;
  LayerCost stage_extra(const StageContext& ctx, const LayerStrategy& emb) const override;
  Seconds transition(const LayerContext& ctx, const LayerStrategy& a, const LayerStrategy& b) const override;
  Seconds p2p(const StageContext& ctx, const LayerStrategy& s) const override;
  StepCost step(const TrainSettings& train, const std::vector<StageSums>& stages) const override;
  Bytes memory_budget(const ClusterSpec& c) const override;
  // The analytic model's (its overlap slow-down from the hardware profile): step() runs its schedule.
  ScheduleTraits schedule_traits() const override { return analytic_.schedule_traits(); }

  // Which figures of plan p come from measurements: one line per term that fell back to the
  // analytic model ("layer 3 (tp4 dp1): compute analytic: no tp=4 samples for group decoder").
  // Empty when every term of the plan is measured.
  std::vector<std::string> coverage(const Plan& p) const;

  const std::optional<HardwareProfile>& hardware() const { return hw_; }
  const std::optional<ModelProfile>& model_profile() const { return mp_; }
  const AnalyticCostModel& analytic() const { return analytic_; }

  // One collective of kind k with per-rank buffer `bytes` on group g: the profile's table for
  // (k, g.size, placement) when there is one, else the analytic time. `measured` tells which.
  Seconds collective(Collective k, Bytes bytes, const CommGroup& g, const ClusterSpec& c, bool* measured = nullptr) const;

 private:
  struct Compute {
    double fwd = 0, bwd = 0, act = 0;  // seconds, seconds, bytes per micro-batch
    double weight_grad_state = 0;      // bytes per micro-batch whose W waits (analytic: not profiled)
    double recompute = 0;              // part of bwd that re-runs forward work (when known)
    bool measured = false;
    std::string why;                   // why not measured, or a caveat (extrapolated)
  };
  Compute measured_compute(const LayerContext& ctx, const LayerStrategy& s) const;
  double sharing(const ClusterSpec& c) const;
  // Element type of activations, gradients and messages: the model profile's runtime dtype when
  // there is a profile, else the plan's.
  DType wire_dtype(const TrainSettings& tr) const;
  // The profile's collective tables on cluster c, writing fall-backs into notes_.
  ProfilePricer pricer(const ClusterSpec& c) const;
  void note(const std::string& line) const;

  std::optional<HardwareProfile> hw_;
  std::optional<ModelProfile> mp_;
  AnalyticCostModel analytic_;
  ClusterSpec cluster_;  // the cluster plans are costed for (the world of the per-step all-reduce)
  std::string source_;
  // Where fall-backs are written: null, except in the copy coverage() costs a plan with.
  std::vector<std::string>* notes_ = nullptr;
};

// Reads the profiles (either path may be empty) and builds the calibrated model for `model` on
// `cluster`: what `weft plan` / `weft estimate` run with --hardware-profile / --model-profile.
// Errors name the file and the key.
Result<std::unique_ptr<CostModel>> make_calibrated_cost_model(const std::string& hardware_profile_path,
                                                              const std::string& model_profile_path,
                                                              const ModelSpec& model, const ClusterSpec& cluster);

// The cluster a hardware profile file measured (cluster_from_hardware_profile), for planning with
// --hardware-profile and no --cluster.
Result<ClusterSpec> read_profile_cluster(const std::string& hardware_profile_path);

}  // namespace weft
