// The simulated step as a Chrome trace-event file (JSON object format: {"traceEvents": [...]}),
// which Perfetto (ui.perfetto.dev) and chrome://tracing open. Layout (docs/report.md, "Trace"):
//  - one process "weft step"; per device group g a compute track "stage g (ranks a-b)" and a
//    communication track "stage g dp comm" for its gradient synchronisation;
//  - complete events ("ph":"X", microseconds) for every forward, recompute, backward, p2p send,
//    optimizer update, and "bubble" events for the idle time of a compute track, so the top-level
//    events of every compute track tile [0, span] exactly (span = the simulated step time);
//  - nested "detail" events inside each forward / backward: compute and each kind of collective,
//    from the stage's per-micro-batch breakdown (forward: a third of the compute, half of each
//    collective), scaled to the block;
//  - a "step" track with one event [0, span] and a global instant event at the cost model's
//    predicted step time.
#pragma once

#include <string>
#include <vector>

#include "weft/core/error.h"
#include "weft/core/json.h"
#include "weft/cost/schedule.h"

namespace weft {

struct TraceInfo {
  std::string title;                 // e.g. the model and cluster names
  double predicted_step_s = 0;       // the cost model's step time (0 = not shown)
  int devices_per_stage = 0;         // for the rank ranges in the track names (0 = not shown)
};

Json chrome_trace(const Simulation& sim, const std::vector<StageTiming>& stages, const TraceInfo& info);
Status write_chrome_trace(const std::string& path, const Simulation& sim, const std::vector<StageTiming>& stages,
                          const TraceInfo& info);

}  // namespace weft
