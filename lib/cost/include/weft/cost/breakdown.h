// Time and memory breakdowns returned by every estimate.
#pragma once

#include "weft/core/json.h"
#include "weft/core/units.h"

namespace weft {

// Where the time goes. Per-micro-batch in a LayerCost; per step in an Estimate.
struct TimeBreakdown {
  Seconds compute;         // forward + backward GEMMs and attention
  Seconds recompute;       // recomputed forward inside backward
  Seconds tp_comm;         // Megatron TP all-reduce (or AG/RS with sequence parallel)
  Seconds ulysses_comm;    // Ulysses all-to-all
  Seconds cp_comm;         // ring / context parallel K,V exchange (exposed part)
  Seconds ep_comm;         // MoE token dispatch / combine all-to-all
  Seconds dp_comm;         // gradient reduction (all-reduce / reduce-scatter + all-gather), total
  Seconds dp_exposed;      // part of dp_comm not hidden behind backward compute (step only)
  Seconds zero3_gather;    // ZeRO-3 parameter all-gathers (forward and backward)
  Seconds p2p;             // pipeline send/recv of activations and gradients
  Seconds redistribution;  // activation re-layout between layers with different strategies
  Seconds embedding;       // embedding, LM head and loss compute
  Seconds bubble;          // pipeline fill and drain (step only)
  Seconds optimizer;       // Adam step over the local parameter shard (step only)

  TimeBreakdown& operator+=(const TimeBreakdown& o);
  TimeBreakdown scaled(double k) const;
};

// What a device holds at its peak.
struct MemoryBreakdown {
  Bytes weights;           // compute-dtype (and fp32 master) parameters
  Bytes grads;
  Bytes optimizer;         // Adam moments (+ master weights where counted there)
  Bytes activations;       // saved activations of all micro-batches in flight
  Bytes other;             // communication buffers, allocator reserve, runtime overhead
  // The largest short-lived peak on top of the rest: the loss's logits at the end of the forward,
  // a recomputed layer's activations inside its backward. They never coexist, so += keeps the
  // larger (docs/cost-model.md §5.4); JSON and plan files count it under other.
  Bytes transient;

  Bytes total() const { return weights + grads + optimizer + activations + other + transient; }
  MemoryBreakdown& operator+=(const MemoryBreakdown& o);
};

Json to_json(const TimeBreakdown& t);   // seconds, keys as the field names with "_s"
Json to_json(const MemoryBreakdown& m); // GiB, keys as the field names with "_gib"

}  // namespace weft
