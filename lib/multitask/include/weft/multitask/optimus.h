// Optimus's bubble scheduling for an encoder feeding an LLM (docs/multitask.md, "Optimus: encoder
// work in the LLM's bubbles"; Feng et al., USENIX ATC'25): the LLM keeps its best plan, the encoder
// gets its own (dp, pp, tp) on the same GPUs with pp and tp dividing the LLM's, and its forward and
// backward work is packed into the idle time of the LLM's simulated step under the data
// dependencies, beside Megatron-LM's way of placing the encoder's layers in the first pipeline
// stage. Torch-free.
//
// The packing (pack_encoder) is a pure function of plain inputs, so tests build them by hand:
//  - the LLM's step laid out by weft's schedule simulator (weft/cost/schedule.h), in its own time
//    frame (its first operation at 0);
//  - its idle time on each device group: before the group's first operation (pipeline warm-up),
//    between operations (the steady state's gaps), after its last backward (the exposed gradient
//    synchronisation, the update, and the wait for the slowest group); with `kFine` also the
//    blocking pipeline transfers and the exposed communication inside each forward and backward
//    (tensor-parallel collectives and the like: `comm_gaps` equal gaps at the ends of equal parts
//    of the operation);
//  - the encoder as pp_e stages; the stages of encoder pipeline (block k, lane l) lie on LLM device
//    groups k pp_e .. k pp_e + pp_e - 1, `lanes` pipelines side by side on each block's GPUs (the
//    LLM's tensor-parallel width over the encoder's). A micro-batch of the LLM runs whole on one
//    encoder pipeline; each pipeline takes at most ceil(m / pipelines) of them.
// Forward work is packed as late as it can go (micro-batches last to first, stages last to first,
// each chunk in the latest idle interval that holds it whole and ends before its deadline): the
// encoder's last stage finishes micro-batch i `flow_s` before the LLM's first stage starts its
// forward of i, each stage `p2p_s` before the next starts it. A micro-batch goes to the pipeline
// where its forward can start latest. Backward work is packed as early as it can go, micro-batches
// in the order the LLM's first stage finishes their backward: the encoder's last stage starts
// micro-batch i `flow_s` after that, each stage `p2p_s` after the one after it finishes. Work that
// lands before the LLM's start delays it (the step grows by that much); work after the LLM's end
// extends the step. Then each group's encoder gradient synchronisation (on the communication
// stream, after the LLM's) and its update (as a chunk on the compute stream).
// `kCoarse` chunks are whole layers packed only into the idle time before a group's first and after
// its last compute operation (Optimus's coarse schedule); `kFine` chunks are the layers' kernels
// (`kernel_shares` of a layer's time) packed into every idle interval, each whole into one
// interval: a kernel is never split (Optimus's fine schedule, without its kernel-level reordering
// of the encoder's own communication).
#pragma once

#include <string>
#include <vector>

#include "weft/core/error.h"
#include "weft/core/json.h"
#include "weft/cost/cost_model.h"
#include "weft/cost/schedule.h"
#include "weft/plan/plan.h"
#include "weft/search/search_options.h"
#include "weft/spec/cluster.h"
#include "weft/spec/tasks.h"

namespace weft::multitask {

// One encoder stage's work, per micro-batch unless noted.
struct EncoderStage {
  double fwd_s = 0, bwd_s = 0;         // the stage's forward and backward (recompute included)
  int layers = 1;                      // the work splits into this many equal layer chunks
  std::vector<double> kernel_shares;   // kFine: a layer's chunks as shares of it (sum 1; empty: whole)
  double p2p_s = 0;                    // to the next stage, each direction (a delay, not compute)
  double grad_sync_s = 0;              // per step: its gradients' reduction over the encoder's dp
  double optimizer_s = 0;              // per step: its update
};

struct BubbleProblem {
  Simulation llm;                      // the LLM's step, events recorded
  // Per LLM (virtual) stage: the share of each forward and of each backward (and recompute) event
  // that is exposed communication, and the gaps it comes in per event (kFine only).
  std::vector<double> fwd_comm_share, bwd_comm_share;
  std::vector<int> comm_gaps;
  std::vector<EncoderStage> encoder;   // pp_e stages; pp_e divides the LLM's pp
  int lanes = 1;                       // encoder pipelines side by side on each block
  double flow_s = 0;                   // encoder output to the LLM's first stage (and the gradient back)
};

enum class Granularity { kCoarse, kFine };
const char* to_string(Granularity g);

enum class OptimusEventKind { kLlm, kEncoderFwd, kEncoderBwd, kEncoderOptimizer };
const char* to_string(OptimusEventKind k);

// An interval of a device group's compute in the final step (time 0: the step's start).
struct OptimusEvent {
  OptimusEventKind kind = OptimusEventKind::kLlm;
  int device_group = 0;
  int lane = 0;                        // encoder events: the lane of the group's block
  int micro_batch = -1;
  double start_s = 0, end_s = 0;
  bool in_bubble = false;              // encoder events: inside the LLM's own idle time
  EventKind llm_kind = EventKind::kForward;  // kLlm: the simulator's event kind
};

struct BubbleSchedule {
  Granularity granularity = Granularity::kFine;
  double step_time_s = 0;              // delay + the LLM's step, or the encoder's end if later
  double llm_step_s = 0;               // the LLM's step alone
  double delay_s = 0;                  // encoder forward before the LLM could start
  double encoder_s = 0;                // encoder forward + backward compute, one LLM replica's micro-batches
  double in_bubble_s = 0;              // the part of it inside the LLM's idle time
  double eff() const { return encoder_s > 0 ? in_bubble_s / encoder_s : 1.0; }
  std::vector<OptimusEvent> events;    // the LLM's compute (every group) and the encoder's (lane 0 drawn)
};

// Packs the encoder into the LLM's step. Errors (kBadInput) name the field: no encoder stage, pp_e
// not dividing the LLM's pp, lanes < 1, negative durations, shares of the wrong length, an LLM
// simulation without events or without a forward and backward of its first stage for every
// micro-batch.
Result<BubbleSchedule> pack_encoder(const BubbleProblem& p, Granularity g);

// The LLM's stage timings with the encoder's per-micro-batch work on its first stage (Megatron-LM's
// way): forward, backward, recompute, gradient sync and update of stage 0 grow by `encoder`'s
// (one stage: the encoder's whole work there), simulated under `spec`.
Result<Simulation> first_stage_schedule(const ScheduleSpec& spec, std::vector<StageTiming> stages,
                                        const StageTiming& encoder);

// The encoder's layout (weft's search picks it unless OptimusOptions fixes pp and tp).
struct EncoderLayout {
  int dp = 1, pp = 1, tp = 1;
  Recompute recompute = Recompute::kNone;
};

struct OptimusOptions {
  int encoder_pp = 0, encoder_tp = 0;  // > 0: this layout only (must divide the LLM's)
};

struct OptimusPlan {
  std::string task, encoder, llm;      // module names
  int gpus = 0, batch = 0;
  Plan llm_plan;                       // the LLM's best plan (searched with reserve_gib left free)
  int llm_mp = 1;                      // devices of an LLM stage one replica uses (tp x ulysses x cp)
  double reserve_gib = 0;              // device memory kept from the LLM's search for the encoder
  EncoderLayout layout;
  int candidates = 0;                  // encoder layouts costed (that fit)
  double memory_budget_gib = 0, llm_memory_gib = 0, encoder_memory_gib = 0;  // per device, worst group
  BubbleSchedule coarse, fine;
  double first_stage_s = 0;            // encoder in the LLM's first stage, same LLM plan
  double first_stage_memory_gib = 0;   // that stage's devices then
  double step_time_s() const { return fine.step_time_s; }
  double search_ms = 0;                // the LLM's searches
  double plan_ms = 0;                  // encoder layouts, packing and baseline
};

// The task and modules Optimus plans: the first task with a flow from a module of encoder layers
// into one of decoder layers, running no other module. Errors name the file and what it has.
struct EncoderLlm {
  int task = -1, encoder = -1, llm = -1;
};
Result<EncoderLlm> find_encoder_llm(const TaskSpec& t);

// Plans Optimus's schedule for `t` on `cluster`. The LLM's plan is search()'s best for it alone on
// all the GPUs with the task's batch; when no encoder layout fits beside it, the search runs again
// with that much less device memory (at most three times), then kNoFit naming the shortfall.
// Errors: find_encoder_llm's; fixed pp or tp not dividing the LLM's ("encoder \"vit\": pp 3 does
// not divide the LLM's pp 8"); an encoder tp not dividing its heads.
Result<OptimusPlan> plan_optimus(const TaskSpec& t, const ClusterSpec& cluster, const CostModel& cm,
                                 const SearchOptions& base, const OptimusOptions& opt = {});

// step_time_s, first_stage_s, speedup, eff_coarse, eff_fine, coarse_step_s, delay_s, llm_step_s,
// encoder {name, dp, pp, tp, recompute}, llm {name, pp, vp, tp, dp, micro_batches, schedule},
// memory {budget_gib, llm_gib, encoder_gib, first_stage_gib, reserve_gib}, plan_ms, search_ms.
Json to_json(const OptimusPlan& p);

}  // namespace weft::multitask
