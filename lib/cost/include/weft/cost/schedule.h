// An event-level simulator of one training step through the pipeline: every forward, backward,
// recompute, point-to-point transfer, gradient synchronisation and optimizer update of every stage
// and micro-batch laid out in time with its dependencies. The analytic cost model's step time is
// its makespan (docs/cost-model.md §7); the HTML timeline and the Perfetto trace are drawn from its
// events (docs/report.md, "Schedule simulator").
//
// Model of one step (all durations from the cost model, per stage):
//  - device group g (0..pp-1) runs virtual stages g, g+pp, ..., g+(vp-1)*pp (under ZB-V g and
//    2pp-1-g: virtual_stage(), weft/plan/pipeline_order.h), one operation at a time, in the order
//    the schedule prescribes, the order the runtime executes
//    (weft/plan/pipeline_order.h: GPipe: all forwards then all backwards; 1F1B:
//    pp-g-1 warm-up forwards, then one forward / one backward, then the cool-down backwards;
//    interleaved 1F1B: Megatron-LM's order over groups of pp micro-batches and the vp chunks;
//    ZB-H1: 1F1B's order with each backward split into B and W, the W of group g lagging its B by
//    g micro-batches; ZB-V: torch.distributed.pipelining's ScheduleZBVZeroBubble order over the
//    two chunks of the V, each B followed by its W in the steady state);
//  - a forward op is F (fwd) then a send block of p2p/2; a backward op is the recomputed forward
//    (recompute), the rest of the backward (bwd - recompute), then a send block of p2p/2. Transfers
//    are blocking: they occupy the device, as StageSums::p2p is busy time of the stage (the
//    interleaved schedule and ZB-V overlap them: ScheduleSpec::overlap_p2p). Under ZB-H1 and ZB-V
//    the backward op B is bwd - wgrad (recompute first) and its send; W (wgrad) sends nothing; ZB-V's
//    hand-off at the turn (virtual stages pp-1 and pp, both on group pp-1) sends nothing either;
//  - F(s, j) waits for F(s-1, j) including its send; B(s, j) waits for B(s+1, j) including its send,
//    the last stage's B(s, j) for its own F(s, j);
//  - a stage's gradient synchronisation runs on the device's communication stream. With overlap it
//    starts when the stage's last backward starts (its gradients are final during that backward;
//    under ZB-H1 and ZB-V when its last W starts);
//    without, when the device's last backward ends. Syncs of one device run one after another.
//    The backward compute that hides a sync runs slower (AnalyticOptions::overlap_slowdown, the
//    cost model's overlap coefficient): the device's update is delayed by (slowdown - 1) times
//    the hidden part, as the analytic model counts it;
//  - the optimizer update runs once per device after its compute and all its syncs.
// The makespan is the end of the last optimizer update. For equal stages it equals the textbook
// (m + pp - 1) * (fwd + bwd + p2p) of GPipe and 1F1B plus the exposed sync and the update; ZB-H1's
// compute ends at m * (fwd + bwd) + (pp - 1) * (fwd + bwd - 2 * wgrad) without p2p, i.e. the
// (p - 1)(T_F + T_B - T_W) bubble of the ZB paper with T_B = bwd - wgrad, T_W = wgrad. ZB-V with
// equal chunks, F = B = W = 1 and m >= 2pp - 1 runs every group without a gap from its first forward
// (at g) to its last W: 6m + pp - 1 (tests ScheduleZbV.*).
#pragma once

#include <string>
#include <vector>

#include "weft/core/error.h"
#include "weft/core/json.h"
#include "weft/core/units.h"
#include "weft/cost/breakdown.h"
#include "weft/cost/cost_model.h"
#include "weft/plan/plan.h"

namespace weft {

// Durations of one (virtual) stage, per micro-batch unless noted.
struct StageTiming {
  Seconds fwd;             // forward, exposed communication included
  Seconds bwd;             // backward, recompute included
  Seconds recompute;       // the recomputed-forward part of bwd (0 <= recompute <= bwd)
  Seconds wgrad;           // the weight-gradient part of bwd a zero-bubble schedule defers
                           // (0 <= wgrad <= bwd - recompute); ignored by the other schedules
  Seconds p2p;             // send+recv at this stage's boundaries, forward + backward
  Seconds grad_sync;       // per step: gradient reduction of this stage's parameters
  Seconds optimizer;       // per step: update of this stage's parameter shard
  TimeBreakdown detail;    // per micro-batch mix of fwd+bwd (only used to label sub-events)
};

struct ScheduleSpec {
  Schedule schedule = Schedule::k1F1B;
  int pp = 1;
  int vp = 1;                      // > 1 only with the interleaved schedule, 2 with zb-v
  int micro_batches = 1;
  bool overlap_grad_sync = true;
  double overlap_slowdown = 1.0;   // >= 1: compute slowed by the gradient sync it hides
  // Sends run asynchronously beside the next computation (Megatron-LM's interleaved schedule
  // overlaps its point-to-point communication by default): the receiver waits for the transfer,
  // the sender does not. false: every send blocks its device (1F1B's batched send/recv).
  bool overlap_p2p = false;
  bool record_events = true;       // false: times only (busy, ends, makespan), for the step cost
};

enum class EventKind {
  kForward,
  kBackward,
  kRecompute,
  kWeightGrad, // ZB-H1's W: the deferred weight-gradient part of a backward
  kP2p,        // send of activations (after a forward) or gradients (after a backward); blocking
               // unless ScheduleSpec::overlap_p2p
  kGradSync,   // on the device's communication stream
  kOptimizer,
};
const char* to_string(EventKind k);

struct ScheduleEvent {
  EventKind kind = EventKind::kForward;
  int device_group = 0;    // 0..pp-1: the row it is drawn on
  int stage = 0;           // virtual stage 0..pp*vp-1
  int micro_batch = -1;    // -1 for per-step events (grad sync, optimizer)
  double start_s = 0;
  double end_s = 0;
  double duration() const { return end_s - start_s; }
};

struct Simulation {
  ScheduleSpec spec;
  std::vector<ScheduleEvent> events;   // sorted by (device_group, start); empty without record_events
  double makespan_s = 0;               // end of the last event: the simulated step time
  // Per device group: busy time on the compute stream (compute + recompute + p2p + optimizer), the
  // end of its last backward, and the idle time before that end (the pipeline bubble).
  std::vector<double> busy_s, compute_end_s, bubble_s;
  // Per device group: when its optimizer update starts (after its compute and gradient syncs).
  std::vector<double> optimizer_start_s;
};

// Lays out one step. Errors (kBadInput) name the field: stage count != pp*vp, m < 1, negative or
// inconsistent durations (recompute > bwd, wgrad > bwd - recompute), vp > 1 without the
// interleaved or the zb-v schedule, zb-v with vp other than 2.
Result<Simulation> simulate_schedule(const ScheduleSpec& spec, const std::vector<StageTiming>& stages);

// One stage's sums as simulator timings, the recompute part taken from its breakdown.
StageTiming stage_timing(const StageSums& s);
// Stage timings of a plan under a cost model: weft::stage_sums (the sums estimate() uses).
std::vector<StageTiming> stage_timings(const Plan& p, const CostModel& cm);
// The schedule of `stages` (virtual) stages trained under `train`: pp = min(train.pp, stages), or
// one stage per device group when that does not divide them; vp = stages / pp (interleaved when
// > 1; zb-v stays zb-v with vp = 2, and sends overlap under both). overlap_grad_sync and overlap_slowdown are cm.schedule_traits() (the slow-down at least 1).
ScheduleSpec schedule_spec(const TrainSettings& train, int stages, const CostModel& cm);
// The same for a plan's own stages.
ScheduleSpec schedule_spec(const Plan& p, const CostModel& cm);
// stage_timings + schedule_spec + simulate_schedule. The plan must pass validate().
Result<Simulation> simulate_plan(const Plan& p, const CostModel& cm);

}  // namespace weft
