// The model profile ("weft-model-profile" v1, docs/profiles.md): what `weft profile model` measured
// of the runtime's own layers on one device. Per layer-group shape, forward and backward time and
// saved activation memory of one layer on one rank by (micro-batch, sequence length, tp degree,
// recompute); the embedding and the LM head (with the loss) separately; per-parameter costs of the
// optimizer step; facts about how the runtime schedules its work.
//
// Times are those of one rank computing alone (no other rank busy; see HardwareProfile::sharing for
// ranks that share a node's cores). A tp degree t is measured on the shard one rank of a t-way
// group holds (heads / t, kv heads / t, ffn / t, vocab / t) without its collectives, which the
// hardware profile prices.
//
// A plain value type with a JSON pair; readers return errors naming the file and the key.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "weft/core/error.h"
#include "weft/core/json.h"
#include "weft/plan/strategy.h"
#include "weft/spec/model.h"

namespace weft {

inline constexpr int kModelProfileVersion = 1;

// One measured point. micro_batch: samples on this rank; seq: tokens per sample on this rank.
struct PhaseSample {
  int tp = 1;
  Recompute recompute = Recompute::kNone;   // layers only; kNone for the embedding and head
  // 0, or 3: the parameters live as a ZeRO-3 shard and are gathered (on one rank: viewed) in
  // every forward, which adds the runtime's own work on views and their gradients, not the
  // collectives (those are priced from the hardware profile).
  int zero = 0;
  int micro_batch = 1;
  int seq = 1;
  double forward_s = 0;                     // one forward
  double backward_s = 0;                    // one backward (with the recomputed forward, if any)
  double activation_bytes = 0;              // held from the end of forward until backward
  bool operator==(const PhaseSample&) const = default;
};

// A measured figure at an arbitrary (micro-batch, seq), and whether it needed extrapolation.
struct PhaseCost {
  double forward_s = 0, backward_s = 0, activation_bytes = 0;
  bool extrapolated = false;
};

// Interpolates samples of one (tp, recompute) in micro-batch and sequence length
// (docs/profiles.md "Interpolation"): separable, first along the micro-batch at every measured
// sequence length, then along the sequence length.
//   inside the measured range: linear between the two neighbours;
//   outside: proportional to the nearest measured point (time and memory per sample, and per token,
//   held constant), flagged as extrapolated.
// Returns nullopt when no sample has this (tp, recompute, zero).
std::optional<PhaseCost> interpolate(const std::vector<PhaseSample>& samples, int tp, Recompute rc,
                                     double micro_batch, double seq, int zero = 0);

struct LayerProfile {
  std::string group;               // the model's group name when measured
  LayerShape shape;
  std::vector<PhaseSample> samples;
  bool operator==(const LayerProfile&) const = default;
};

// Facts about the runtime that ran the measurement (they shape how per-layer figures combine).
struct RuntimeFacts {
  // Data-parallel gradient reduction overlaps backward compute (weft's runtime: false, it reduces
  // after the last micro-batch's backward; ZeRO-2 reduce-scatters and ZeRO-3 gathers block too).
  bool grad_sync_overlaps_backward = false;
  // Per-step work per parameter a rank updates: gradient zeroing, the gradient-norm sum and the
  // AdamW update, measured on one layer's parameters (seconds per parameter; 0: not measured).
  double optimizer_s_per_param = 0;
  // Bytes per parameter the runtime keeps for weights, gradients and optimizer state without
  // ZeRO, measured with the allocator (0: not measured).
  double state_bytes_per_param = 0;
  std::string dtype = "fp32";      // element type the runtime computed in
  bool operator==(const RuntimeFacts&) const = default;
};

struct ModelProfile {
  int format_version = kModelProfileVersion;
  ModelSpec model;                 // the model measured (its layer groups name the shapes)
  std::string device = "cpu";
  std::string device_name;
  std::string hostname;
  int threads = 1;                 // intra-op threads of the measuring rank
  std::string created;             // UTC, ISO 8601
  RuntimeFacts runtime;
  std::vector<LayerProfile> layers;
  std::vector<PhaseSample> embedding;   // token (+ position) embedding
  std::vector<PhaseSample> head;        // final norm, LM head and cross-entropy loss
  std::vector<std::string> skipped;     // points not measured and why, one line each
  bool operator==(const ModelProfile&) const = default;

  // The layer profile for `shape` in a model with m's norm and position kinds (the layer code
  // depends on them); nullptr when none matches.
  const LayerProfile* find(const LayerShape& shape, const ModelSpec& m) const;
  // Whether the embedding / head figures apply to model m (same vocab, hidden, norm, position and
  // tying as the measured model).
  bool covers_edges(const ModelSpec& m) const;
};

Status validate(const ModelProfile& p);
Json to_json(const ModelProfile& p);
Result<ModelProfile> model_profile_from_json(const Json& j, const std::string& path = "model profile");
Result<ModelProfile> read_model_profile(const std::string& path);
Status write_model_profile(const std::string& path, const ModelProfile& p);

}  // namespace weft
