// Terminal (80 columns) and JSON summaries of a simulated step, for `weft simulate` and
// `weft report`.
#pragma once

#include <string>

#include "weft/core/json.h"
#include "weft/cost/schedule.h"

namespace weft {

// A few lines: the simulated and predicted step times, then one line per stage with its busy time,
// bubble and the end of its last backward. Lines stay within 80 columns.
std::string simulation_text(const Simulation& sim, double predicted_step_s, int devices_per_stage);

// {"schedule", "pp", "vp", "micro_batches", "simulated_step_s", "predicted_step_s",
//  "difference" (relative), "events", "stages": [{"stage", "busy_s", "bubble_s", "bubble_fraction",
//  "compute_end_s"}]}.
Json simulation_json(const Simulation& sim, double predicted_step_s);

}  // namespace weft
