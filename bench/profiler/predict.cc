// weft_profile_predict PLAN HW LAYERS: the calibrated cost model's prediction for a plan, as one
// JSON object (step_time_s, peak_memory_gib, per-stage memory, source, and the terms that fell back
// to the analytic model). The closed-loop bench uses it next to `weft estimate`, for the coverage
// lines that the estimate command does not print.
#include <cstdio>

#include "weft/calibration/calibrated.h"
#include "weft/cost/estimate.h"

int main(int argc, char** argv) {
  using namespace weft;
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s PLAN HARDWARE_PROFILE MODEL_PROFILE\n", argv[0]);
    return 2;
  }
  auto plan = read_plan_file(argv[1]);
  if (!plan.ok()) {
    std::fprintf(stderr, "error: %s\n", plan.error().message.c_str());
    return exit_code(plan.error().kind);
  }
  auto cm = make_calibrated_cost_model(argv[2], argv[3], plan->model, plan->cluster);
  if (!cm.ok()) {
    std::fprintf(stderr, "error: %s\n", cm.error().message.c_str());
    return exit_code(cm.error().kind);
  }
  const auto& model = dynamic_cast<const CalibratedCostModel&>(*cm.value());
  const Estimate e = estimate(plan.value(), model);
  Json j = to_json(e);
  j["source"] = model.source();
  j["fallbacks"] = model.coverage(plan.value());
  std::printf("%s\n", j.dump().c_str());
  return 0;
}
