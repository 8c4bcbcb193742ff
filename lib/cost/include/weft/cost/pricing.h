// Pricing a layer's traffic (weft/cost/traffic.h): a CollectivePricer gives the time of one
// collective call; price_traffic sums a traffic list into the terms a cost model assembles. The
// analytic pricer below uses the formulas of collectives.h; the calibrated model's
// (weft/calibration/profile_pricer.h) uses the tables of a measured hardware profile.
//
// Pure functions; a pricer is immutable once built and safe to share between threads unless its
// own header says otherwise.
#pragma once

#include "weft/cost/collectives.h"
#include "weft/cost/traffic.h"

namespace weft {

class CollectivePricer {
 public:
  virtual ~CollectivePricer() = default;
  // Time of one call of collective k with per-rank buffer `bytes` on group g (0 for an empty
  // buffer, and for a group of one rank except send/recv).
  virtual Seconds price(Collective k, Bytes bytes, const CommGroup& g) const = 0;
};

// collective_time() on cluster c with options o. Keeps references: c and o must outlive it.
class AnalyticPricer final : public CollectivePricer {
 public:
  AnalyticPricer(const ClusterSpec& c, const CollectiveOptions& o) : c_(c), o_(o) {}
  Seconds price(Collective k, Bytes bytes, const CommGroup& g) const override;

 private:
  const ClusterSpec& c_;
  const CollectiveOptions& o_;
};

// Seconds per micro-batch by parallelism.
struct AxisSeconds {
  double tp = 0, ulysses = 0, cp = 0, ep = 0;
};

// A traffic list priced. Every field is a sum over the transfers it takes, in list order.
struct PricedTraffic {
  AxisSeconds fwd, bwd;   // exposed (Overlap::kNone, and kRingStep beyond the attention it hides behind)
  double gather_f = 0;    // Overlap::kCompute all-gathers in forward (ZeRO-3)
  double gather_b = 0;    // Overlap::kCompute all-gathers in backward (ZeRO-3)
  double reduce_b = 0;    // Overlap::kCompute reduce-scatters in backward (ZeRO-2, ZeRO-3)
  double grad_sync = 0;   // per step (Overlap::kBackward)
  double p2p = 0;         // CommAxis::kPipeline, forward + backward
};

// repeat * sum(times * price(call)) of one transfer, in seconds.
double price_transfer(const Transfer& t, const CollectivePricer& p);

// Prices every transfer of `traffic` with p. A context-parallel ring step (Overlap::kRingStep)
// exposes max(0, its time - ring_hide_f) in forward and max(0, its time - ring_hide_b) in backward:
// the attention of one block on one ring step.
PricedTraffic price_traffic(const LayerTraffic& traffic, const CollectivePricer& p, double ring_hide_f = 0,
                            double ring_hide_b = 0);

}  // namespace weft
