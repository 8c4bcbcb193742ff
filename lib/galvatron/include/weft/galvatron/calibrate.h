// weft's own cost model calibrated from Galvatron's profiles (`--cost-model weft
// --galvatron-profiles DIR`). Galvatron's files are converted into weft's own profile formats
// (weft/calibration: HardwareProfile, ModelProfile) and handed to weft's CalibratedCostModel, which
// puts measured figures into weft's analytic model wherever a measurement covers the term and keeps
// the analytic formula elsewhere. The conversion rules are in docs/galvatron.md ("weft's own model
// from Galvatron's profiles").
#pragma once

#include <memory>

#include "weft/calibration/calibrated.h"
#include "weft/calibration/hardware_profile.h"
#include "weft/calibration/model_profile.h"
#include "weft/galvatron/profiles.h"

namespace weft::galvatron {

// Collectives (all-reduce and all-to-all tables by group size and message size; all-reduce bus
// bandwidth by group size and placement; pipeline send/recv bandwidth), the overlap slow-down and
// the machine facts of `cluster`.
Result<weft::HardwareProfile> to_hardware_profile(const Profiles& p, const ClusterSpec& cluster);

// Per-layer forward (and 2x backward) time by micro-batch, activation memory by tp degree and with
// full recompute, and the embedding / LM-head figures, for `model` (whose layer groups are
// Galvatron's layer types, in order). `cluster` supplies the GPU for the analytic tp scaling.
Result<ModelProfile> to_model_profile(const Profiles& p, const ModelSpec& model, const ClusterSpec& cluster);

struct CalibratedFromGalvatron {
  std::unique_ptr<CostModel> model;  // a CalibratedCostModel
  ClusterSpec cluster;               // `cluster` with its link figures from the measured bandwidths
};

// The calibrated model and the cluster to plan on.
Result<CalibratedFromGalvatron> make_calibrated_model(const Profiles& p, const ModelSpec& model,
                                                      const ClusterSpec& cluster, AnalyticOptions base = {});

}  // namespace weft::galvatron
