// The HTML report: one self-contained file (no network, no external scripts, fonts or images)
// with inline SVG pictures of a plan (docs/report.md, "HTML report"):
//   #timeline        the simulated pipeline step, one row per device group, blocks per micro-batch,
//                    bubbles hatched, the predicted and simulated step times marked;
//   #memory          memory per device of each stage as stacked bars against the device limit;
//   #strategy-map    tp, sequence parallelism, dp, ZeRO, recompute (and ep) of every layer;
//   #time-breakdown  where the step time goes, for the plan and each alternative;
//   #alternatives    a table of the plan, the top-k alternatives and the uniform baseline.
// A short inline script only checks the page (sets data-check="ok" on <body> when every picture
// is present, records script errors in data-errors) and highlights a micro-batch on hover.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "weft/core/error.h"
#include "weft/cost/cost_model.h"
#include "weft/plan/plan.h"

namespace weft {

struct ReportInput {
  Plan best;
  std::vector<Plan> alternatives;     // the other candidates, best first (not including `best`)
  std::optional<Plan> uniform;        // the best single-strategy plan, for comparison
  const CostModel* cost = nullptr;    // required; every figure is recomputed with it
  std::string title;                  // default: "<model> on <cluster> (<N> GPUs)"
};

// From a search result's fields: make_report_input(r.top, r.best_uniform, cm) takes top[0] as the
// plan and the rest as alternatives. Error (kBadInput) if `top` is empty.
Result<ReportInput> make_report_input(const std::vector<Plan>& top, const std::optional<Plan>& uniform,
                                      const CostModel& cm);

// The report's HTML text. Errors: no cost model, or a plan that fails validate() (naming which).
Result<std::string> render_html_report(const ReportInput& in);
// render_html_report + an atomic write to `path` (kIo if it cannot be written).
Status write_html_report(const std::string& path, const ReportInput& in);

// The element ids of the pictures, in page order (used by the report's own check and by tests).
const std::vector<std::string>& report_picture_ids();

}  // namespace weft
