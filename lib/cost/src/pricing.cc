#include "weft/cost/pricing.h"

#include <algorithm>

#include "weft/core/assert.h"

namespace weft {

Seconds AnalyticPricer::price(Collective k, Bytes bytes, const CommGroup& g) const {
  return collective_time(k, bytes, g, c_, o_);
}

namespace {

// sum(times * price(call)) of one repeat of t, the calls in order.
double calls_sum(const Transfer& t, const CollectivePricer& p) {
  double sum = 0;
  for (const CollectiveCall& c : t.calls) sum += c.times * p.price(c.kind, c.bytes, c.group).value();
  return sum;
}

double& exposed(AxisSeconds& a, CommAxis axis) {
  switch (axis) {
    case CommAxis::kUlysses: return a.ulysses;
    case CommAxis::kContext: return a.cp;
    case CommAxis::kExpert: return a.ep;
    default: return a.tp;
  }
}

}  // namespace

double price_transfer(const Transfer& t, const CollectivePricer& p) { return t.repeat * calls_sum(t, p); }

PricedTraffic price_traffic(const LayerTraffic& traffic, const CollectivePricer& p, double ring_hide_f,
                            double ring_hide_b) {
  PricedTraffic out;
  for (const Transfer& t : traffic.transfers) {
    const bool fwd = t.phase == Phase::kForward;
    if (t.axis == CommAxis::kPipeline) {
      out.p2p += price_transfer(t, p);
    } else if (t.overlap == Overlap::kBackward) {
      out.grad_sync += price_transfer(t, p);
    } else if (t.overlap == Overlap::kCompute) {
      WEFT_ASSERT(!t.calls.empty(), "a transfer without calls");
      const bool reduce = t.calls.front().kind == Collective::kReduceScatter;
      double& sum = reduce ? out.reduce_b : fwd ? out.gather_f : out.gather_b;
      sum += price_transfer(t, p);
    } else if (t.overlap == Overlap::kRingStep) {
      // One ring step, `repeat` times: each exposes what the attention in hand does not hide.
      const double hide = fwd ? ring_hide_f : ring_hide_b;
      exposed(fwd ? out.fwd : out.bwd, t.axis) += t.repeat * std::max(0.0, calls_sum(t, p) - hide);
    } else {
      exposed(fwd ? out.fwd : out.bwd, t.axis) += price_transfer(t, p);
    }
  }
  return out;
}

}  // namespace weft
