// weft moe-placement: NetMoE's sample placement for a plan's MoE layers, from a routing trace
// (`weft train --moe-trace`) or a synthetic skewed one; prints the expert all-to-all before and
// after and the predicted step time, and writes the placement `weft train --moe-placement` runs.
#include <cstdio>
#include <memory>

#include "commands.h"
#include "weft/core/format.h"
#include "weft/cost/analytic.h"
#include "weft/cost/estimate.h"
#include "weft/plan/routing_trace.h"
#include "weft/search/moe_placement.h"

namespace weft::cli {

namespace {

struct MoeFlags {
  std::string plan, trace, trace_out, out;
  double synthetic = -1;  // --synthetic LOCALITY
  int steps = 1;
  unsigned long long seed = 1;
  std::string format = "table";
};

void run(const MoeFlags& f) {
  const Plan p = unwrap(read_plan_file(f.plan));
  if ((f.synthetic >= 0) == !f.trace.empty())
    fail(Error{ErrorKind::kBadInput, "moe-placement: give --trace FILE (from weft train --moe-trace) or --synthetic "
                                     "LOCALITY, one of them"});
  if (f.synthetic > 1)
    fail(Error{ErrorKind::kBadInput, "--synthetic: the locality is a probability in [0, 1], got " + S(f.synthetic)});
  if (f.steps < 1) fail(Error{ErrorKind::kBadInput, "--steps: must be >= 1, got " + S(f.steps)});
  RoutingTrace t = f.synthetic >= 0 ? synthetic_trace(p, f.steps, f.synthetic, f.seed) : unwrap(read_routing_trace(f.trace));
  if (t.steps.empty()) fail(Error{ErrorKind::kBadInput, "moe-placement: the plan's model has no MoE layers to trace"});
  if (!f.trace_out.empty()) check(write_routing_trace(f.trace_out, t));
  std::vector<PlacedStepReport> reports;
  const SamplePlacement placed = unwrap(place_trace(p, t, &reports));
  const AnalyticCostModel cm;
  const Estimate e = estimate(p, cm);
  const double step_s = e.step_time.value(), a2a_s = e.breakdown.ep_comm.value();
  // The estimate prices the all-to-all for even routing (its ep_comm); the trace says by how much
  // the placement shortens it, and the step loses that share of the estimate's all-to-all.
  auto placed_step = [&](const PlacedStepReport& r) {
    const double before = r.before.time.value(), after = r.after.time.value();
    return before > 0 ? step_s - a2a_s * (1 - after / before) : step_s;
  };
  if (!f.out.empty()) check(write_sample_placement(f.out, placed));
  if (f.format == "json") {
    Json steps = Json::array();
    for (const PlacedStepReport& r : reports)
      steps.push_back(Json{{"step", r.step},
                           {"inter_node_bytes_before", r.before.inter_bytes},
                           {"inter_node_bytes_after", r.after.inter_bytes},
                           {"intra_node_bytes_before", r.before.intra_bytes},
                           {"intra_node_bytes_after", r.after.intra_bytes},
                           {"all_to_all_s_before", r.before.time.value()},
                           {"all_to_all_s_after", r.after.time.value()},
                           {"estimate_all_to_all_s", a2a_s},
                           {"step_s_before", step_s},
                           {"step_s_after", placed_step(r)}});
    std::printf("%s\n", Json{{"plan", f.plan}, {"steps", steps}}.dump(2).c_str());
    return;
  }
  std::printf("sample placement for %s on %d GPUs (%d nodes of %d), %d MoE layers traced, %d micro-batches of %d\n",
              p.model.name.c_str(), p.world_size(), p.cluster.nodes, p.cluster.gpus_per_node,
              static_cast<int>(t.steps.front().layers.size()), p.train.micro_batches,
              p.train.global_batch / std::max(1, p.train.micro_batches));
  std::printf("%6s  %22s  %22s  %20s  %20s\n", "step", "inter-node GB", "intra-node GB", "all-to-all s", "step s");
  for (const PlacedStepReport& r : reports) {
    const double after_s = placed_step(r);
    std::printf("%6d  %9.3f -> %9.3f  %9.3f -> %9.3f  %8.4f -> %8.4f  %8.4f -> %8.4f\n", r.step,
                r.before.inter_bytes / 1e9, r.after.inter_bytes / 1e9, r.before.intra_bytes / 1e9,
                r.after.intra_bytes / 1e9, r.before.time.value(), r.after.time.value(), step_s, after_s);
  }
  std::printf("step s: weft's estimate of the plan (its all-to-all, %.3f s a step, priced for even routing) less the "
              "share of that all-to-all the placement saves on the trace\n",
              a2a_s);
  if (!f.out.empty()) std::printf("placement written to %s (weft train --moe-placement %s)\n", f.out.c_str(), f.out.c_str());
}

}  // namespace

void register_moe_commands(CLI::App& app) {
  auto f = std::make_shared<MoeFlags>();
  auto* cmd = app.add_subcommand("moe-placement",
                                 "Place each micro-batch's samples on the data-parallel replicas so that MoE tokens "
                                 "meet their experts with less inter-node all-to-all (NetMoE); prints the traffic before "
                                 "and after and the predicted step time");
  cmd->add_option("--plan", f->plan, "The plan (its MoE layers, expert degrees and cluster)")->required();
  cmd->add_option("--trace", f->trace, "Routing trace written by weft train --moe-trace");
  cmd->add_option("--synthetic", f->synthetic,
                  "Instead of --trace: a synthetic skewed trace, each sample's tokens choosing experts of one "
                  "preferred ep rank with this probability (0..1)");
  cmd->add_option("--steps", f->steps, "With --synthetic: steps to trace")->capture_default_str();
  cmd->add_option("--seed", f->seed, "With --synthetic: random seed")->capture_default_str();
  cmd->add_option("--trace-out", f->trace_out, "Also write the trace used to this file");
  cmd->add_option("--out", f->out, "Write the placement to this file (weft train --moe-placement)");
  cmd->add_option("--format", f->format, "Output on stdout: table or json")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  cmd->callback([f] { run(*f); });
}

}  // namespace weft::cli
