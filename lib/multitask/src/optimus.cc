#include "weft/multitask/optimus.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "weft/core/format.h"
#include "weft/cost/estimate.h"
#include "weft/multitask/module_search.h"

namespace weft::multitask {

const char* to_string(Granularity g) { return g == Granularity::kCoarse ? "coarse" : "fine"; }

const char* to_string(OptimusEventKind k) {
  switch (k) {
    case OptimusEventKind::kLlm: return "llm";
    case OptimusEventKind::kEncoderFwd: return "encoder-fwd";
    case OptimusEventKind::kEncoderBwd: return "encoder-bwd";
    case OptimusEventKind::kEncoderOptimizer: return "encoder-optimizer";
  }
  return "?";
}

namespace {

constexpr double kFar = 1e30;   // "no bound": the idle time before the LLM starts and after it ends
constexpr double kEps = 1e-12;  // seconds: lengths below this are empty

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// An idle interval of one device's compute, in the LLM's time frame. `bubble`: inside the LLM's own
// step [0, makespan] (the LLM idles there anyway); outside it, work lengthens the step.
struct Slot {
  double a = 0, b = 0;
  bool bubble = false;
};

// Where one chunk went.
struct Placed {
  double start = 0, end = 0;
  bool bubble = false;
};

// The idle intervals of one device (one lane of one device group), sorted and disjoint.
class FreeTime {
 public:
  explicit FreeTime(std::vector<Slot> s) : s_(std::move(s)) {}
  // The latest interval that holds d whole before `deadline`; placed at its latest.
  Placed latest(double d, double deadline) {
    size_t i = static_cast<size_t>(std::upper_bound(s_.begin(), s_.end(), deadline,
                                                    [](double t, const Slot& x) { return t < x.a; }) -
                                   s_.begin());
    while (i-- > 0) {
      const double end = std::min(s_[i].b, deadline);
      if (end - s_[i].a >= d - kEps) return take(i, std::max(s_[i].a, end - d), end);
    }
    return {deadline - d, deadline, false};  // unreachable: the first slot starts at -kFar
  }
  // The earliest interval that holds d whole from `ready` on; placed at its earliest.
  Placed earliest(double d, double ready) {
    size_t i = static_cast<size_t>(std::upper_bound(s_.begin(), s_.end(), ready,
                                                    [](double t, const Slot& x) { return t < x.b; }) -
                                   s_.begin());
    for (; i < s_.size(); ++i) {
      const double start = std::max(s_[i].a, ready);
      if (s_[i].b - start >= d - kEps) return take(i, start, std::min(s_[i].b, start + d));
    }
    return {ready, ready + d, false};  // unreachable: the last slot ends at kFar
  }

 private:
  Placed take(size_t i, double start, double end) {
    const Slot s = s_[i];
    std::vector<Slot> rest;
    if (start - s.a > kEps) rest.push_back({s.a, start, s.bubble});
    if (s.b - end > kEps) rest.push_back({end, s.b, s.bubble});
    s_.erase(s_.begin() + static_cast<long>(i));
    s_.insert(s_.begin() + static_cast<long>(i), rest.begin(), rest.end());
    return {start, end, s.bubble};
  }
  std::vector<Slot> s_;
};

bool compute_kind(EventKind k) {
  return k == EventKind::kForward || k == EventKind::kBackward || k == EventKind::kRecompute ||
         k == EventKind::kWeightGrad || k == EventKind::kOptimizer;
}

// The idle intervals of device group g (module comment in optimus.h), split at 0 and the makespan.
std::vector<Slot> idle_slots(const BubbleProblem& p, int g, Granularity gran) {
  const Simulation& sim = p.llm;
  const bool fine = gran == Granularity::kFine;
  std::vector<std::pair<double, double>> busy;
  double first = kFar, last_compute = -kFar;
  for (const ScheduleEvent& e : sim.events) {
    if (e.device_group != g) continue;
    const bool blocking_p2p = e.kind == EventKind::kP2p && !sim.spec.overlap_p2p;
    if (!compute_kind(e.kind) && !blocking_p2p) continue;
    first = std::min(first, e.start_s);
    if (e.kind != EventKind::kOptimizer) last_compute = std::max(last_compute, e.end_s);
    if (blocking_p2p && fine) continue;  // a blocking transfer leaves the compute idle
    busy.emplace_back(e.start_s, e.end_s);
  }
  std::sort(busy.begin(), busy.end());
  std::vector<std::pair<double, double>> free;
  double t = -kFar;
  for (const auto& [a, b] : busy) {
    if (a - t > kEps) free.emplace_back(t, a);
    t = std::max(t, b);
  }
  free.emplace_back(t, kFar);
  if (!fine) {
    // Only before the group's first operation and after its last compute.
    std::vector<std::pair<double, double>> edge;
    for (const auto& f : free)
      if (f.second <= first + kEps || f.first >= last_compute - kEps) edge.push_back(f);
    free = std::move(edge);
  } else {
    // The exposed communication inside each forward, backward and recompute: equal gaps at the
    // ends of equal parts of the event.
    for (const ScheduleEvent& e : sim.events) {
      if (e.device_group != g) continue;
      const size_t s = static_cast<size_t>(e.stage);
      double share = 0;
      if (e.kind == EventKind::kForward) share = p.fwd_comm_share[s];
      else if (e.kind == EventKind::kBackward || e.kind == EventKind::kRecompute) share = p.bwd_comm_share[s];
      const int n = p.comm_gaps[s];
      const double dur = e.duration();
      if (share <= 0 || n <= 0 || dur <= 0) continue;
      const double part = dur / n, gap = share * dur / n;
      for (int k = 0; k < n; ++k) {
        const double end = e.start_s + (k + 1) * part;
        if (gap > kEps) free.emplace_back(end - gap, end);
      }
    }
    std::sort(free.begin(), free.end());
  }
  std::vector<Slot> out;
  const double cuts[] = {0.0, sim.makespan_s};
  for (const auto& [a0, b0] : free) {
    double a = a0;
    for (double c : cuts)
      if (a < c && c < b0) {
        if (c - a > kEps) out.push_back({a, c, a >= 0 && c <= sim.makespan_s + kEps});
        a = c;
      }
    if (b0 - a > kEps) out.push_back({a, b0, a >= -kEps && b0 <= sim.makespan_s + kEps});
  }
  return out;
}

Status check_problem(const BubbleProblem& p) {
  auto bad = [](const std::string& m) -> Status { return Error{ErrorKind::kBadInput, "optimus: " + m}; };
  const int pp = p.llm.spec.pp, stages = pp * p.llm.spec.vp;
  const int pe = static_cast<int>(p.encoder.size());
  if (pe < 1) return bad("encoder: no stage");
  if (pp % pe != 0) return bad("encoder: pp " + S(pe) + " does not divide the LLM's pp " + S(pp));
  if (p.lanes < 1) return bad("lanes: must be >= 1, got " + S(p.lanes));
  if (p.flow_s < 0) return bad("flow_s: must be >= 0, got " + printf_str("%g", p.flow_s));
  if (static_cast<int>(p.fwd_comm_share.size()) != stages || static_cast<int>(p.bwd_comm_share.size()) != stages ||
      static_cast<int>(p.comm_gaps.size()) != stages)
    return bad("comm shares: one per LLM stage (" + S(stages) + "), got " +
               S(static_cast<long long>(p.fwd_comm_share.size())) +
               " / " + S(static_cast<long long>(p.bwd_comm_share.size())) + " / " +
               S(static_cast<long long>(p.comm_gaps.size())));
  for (int s = 0; s < stages; ++s) {
    const double f = p.fwd_comm_share[static_cast<size_t>(s)], b = p.bwd_comm_share[static_cast<size_t>(s)];
    if (f < 0 || f > 1 || b < 0 || b > 1)
      return bad("comm shares of stage " + S(s) + ": must be in [0, 1], got " + printf_str("%g", f) + " / " +
                 printf_str("%g", b));
  }
  for (int j = 0; j < pe; ++j) {
    const EncoderStage& e = p.encoder[static_cast<size_t>(j)];
    if (e.fwd_s < 0 || e.bwd_s < 0 || e.p2p_s < 0 || e.grad_sync_s < 0 || e.optimizer_s < 0 || e.layers < 1)
      return bad("encoder stage " + S(j) + ": negative time or fewer than 1 layer (fwd " + printf_str("%g", e.fwd_s) +
                 " s, bwd " + printf_str("%g", e.bwd_s) + " s, layers " + S(e.layers) + ")");
    double sum = 0;
    for (double k : e.kernel_shares) {
      if (k < 0) return bad("encoder stage " + S(j) + ": a negative kernel share");
      sum += k;
    }
    if (!e.kernel_shares.empty() && std::abs(sum - 1) > 1e-6)
      return bad("encoder stage " + S(j) + ": kernel shares sum to " + printf_str("%g", sum) + ", not 1");
  }
  if (p.llm.events.empty()) return bad("the LLM's simulation has no events (record_events off)");
  return Status{};
}

}  // namespace

Result<BubbleSchedule> pack_encoder(const BubbleProblem& p, Granularity gran) {
  if (Status s = check_problem(p); !s.ok()) return s.error();
  const Simulation& sim = p.llm;
  const int pp = sim.spec.pp, m = sim.spec.micro_batches, pe = static_cast<int>(p.encoder.size());
  const int blocks = pp / pe, lanes = p.lanes, pipelines = blocks * lanes;
  const int cap = (m + pipelines - 1) / pipelines;
  // When the LLM's first stage needs micro-batch i (its forward starts) and returns its gradient.
  std::vector<double> need(static_cast<size_t>(m), -1), back(static_cast<size_t>(m), -1);
  for (const ScheduleEvent& e : sim.events) {
    if (e.stage != 0 || e.micro_batch < 0 || e.micro_batch >= m) continue;
    if (e.kind == EventKind::kForward) need[static_cast<size_t>(e.micro_batch)] = e.start_s;
    if (e.kind == EventKind::kBackward) back[static_cast<size_t>(e.micro_batch)] = e.end_s;
  }
  for (int i = 0; i < m; ++i)
    if (need[static_cast<size_t>(i)] < 0 || back[static_cast<size_t>(i)] < 0)
      return Error{ErrorKind::kBadInput, "optimus: the LLM's simulation lacks the first stage's forward or backward of "
                                         "micro-batch " + S(i)};
  // One FreeTime per (block, lane, encoder stage): device group block * pe + stage.
  std::vector<std::vector<Slot>> group_slots(static_cast<size_t>(pp));
  for (int g = 0; g < pp; ++g) group_slots[static_cast<size_t>(g)] = idle_slots(p, g, gran);
  auto index = [&](int block, int lane, int j) { return static_cast<size_t>((block * lanes + lane) * pe + j); };
  std::vector<FreeTime> free;
  for (int k = 0; k < blocks; ++k)
    for (int l = 0; l < lanes; ++l)
      for (int j = 0; j < pe; ++j) free.emplace_back(group_slots[static_cast<size_t>(k * pe + j)]);
  // A stage's chunks for one micro-batch, in execution order.
  auto chunks = [&](int j, bool fwd) {
    const EncoderStage& e = p.encoder[static_cast<size_t>(j)];
    const double layer = (fwd ? e.fwd_s : e.bwd_s) / e.layers;
    std::vector<double> c;
    for (int l = 0; l < e.layers; ++l) {
      if (gran == Granularity::kFine && !e.kernel_shares.empty()) {
        for (double k : e.kernel_shares)
          if (k * layer > 0) c.push_back(k * layer);
      } else if (layer > 0) {
        c.push_back(layer);
      }
    }
    return c;
  };
  std::vector<std::vector<double>> fchunks, bchunks;
  for (int j = 0; j < pe; ++j) fchunks.push_back(chunks(j, true)), bchunks.push_back(chunks(j, false));

  BubbleSchedule out;
  out.granularity = gran;
  out.llm_step_s = sim.makespan_s;
  struct Work {
    int group, lane, mb;
    OptimusEventKind kind;
    Placed at;
  };
  std::vector<Work> work;
  // Forward of micro-batch i on pipeline (block, lane), stages last to first, each chunk as late as
  // it can go; returns the earliest start.
  auto place_forward = [&](int i, int block, int lane, std::vector<Work>* record) {
    double deadline = need[static_cast<size_t>(i)] - p.flow_s, start = deadline;
    for (int j = pe - 1; j >= 0; --j) {
      FreeTime& ft = free[index(block, lane, j)];
      const std::vector<double>& c = fchunks[static_cast<size_t>(j)];
      for (size_t k = c.size(); k-- > 0;) {
        const Placed at = ft.latest(c[k], deadline);
        if (record) record->push_back({block * pe + j, lane, i, OptimusEventKind::kEncoderFwd, at});
        deadline = at.start;
      }
      start = deadline;
      if (j > 0) deadline -= p.encoder[static_cast<size_t>(j - 1)].p2p_s;
    }
    return start;
  };
  std::vector<int> load(static_cast<size_t>(pipelines), 0), pipe_of(static_cast<size_t>(m), -1);
  std::vector<int> order(static_cast<size_t>(m));
  for (int i = 0; i < m; ++i) order[static_cast<size_t>(i)] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return need[static_cast<size_t>(a)] > need[static_cast<size_t>(b)]; });
  for (int i : order) {
    int best_block = -1, best_lane = -1;
    double best = -kFar * 2;
    for (int k = 0; k < blocks; ++k) {
      int lane = -1;
      for (int l = 0; l < lanes; ++l)
        if (load[static_cast<size_t>(k * lanes + l)] < cap &&
            (lane < 0 || load[static_cast<size_t>(k * lanes + l)] < load[static_cast<size_t>(k * lanes + lane)]))
          lane = l;
      if (lane < 0) continue;
      std::vector<FreeTime> saved(free.begin() + static_cast<long>(index(k, lane, 0)),
                                  free.begin() + static_cast<long>(index(k, lane, 0)) + pe);
      const double start = place_forward(i, k, lane, nullptr);
      std::copy(saved.begin(), saved.end(), free.begin() + static_cast<long>(index(k, lane, 0)));
      if (start > best + kEps) best = start, best_block = k, best_lane = lane;
    }
    place_forward(i, best_block, best_lane, &work);
    ++load[static_cast<size_t>(best_block * lanes + best_lane)];
    pipe_of[static_cast<size_t>(i)] = best_block * lanes + best_lane;
  }
  // Backward, in the order the LLM returns the gradients, stages last to first, as early as can be.
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return back[static_cast<size_t>(a)] < back[static_cast<size_t>(b)]; });
  // Per lane and stage: when its gradients are final (its last backward starts: the reduction
  // overlaps it, as the simulator lets the LLM's) or, without overlap, when that backward ends.
  std::vector<double> last_bwd(free.size(), -kFar), last_end(free.size(), -kFar);
  for (int i : order) {
    const int block = pipe_of[static_cast<size_t>(i)] / lanes, lane = pipe_of[static_cast<size_t>(i)] % lanes;
    double ready = back[static_cast<size_t>(i)] + p.flow_s;
    for (int j = pe - 1; j >= 0; --j) {
      FreeTime& ft = free[index(block, lane, j)];
      double first_start = ready;
      for (size_t k = 0; k < bchunks[static_cast<size_t>(j)].size(); ++k) {
        const Placed at = ft.earliest(bchunks[static_cast<size_t>(j)][k], ready);
        work.push_back({block * pe + j, lane, i, OptimusEventKind::kEncoderBwd, at});
        if (k == 0) first_start = at.start;
        ready = at.end;
      }
      last_bwd[index(block, lane, j)] =
          std::max(last_bwd[index(block, lane, j)], sim.spec.overlap_grad_sync ? first_start : ready);
      last_end[index(block, lane, j)] = std::max(last_end[index(block, lane, j)], ready);
      if (j > 0) ready += p.encoder[static_cast<size_t>(j - 1)].p2p_s;
    }
  }
  // Each lane's gradient synchronisation on the communication stream after the LLM's on its group
  // (and after its last backward: whole when it starts, done when it ends), then its update.
  std::vector<double> llm_sync_end(static_cast<size_t>(pp), 0);
  for (const ScheduleEvent& e : sim.events)
    if (e.kind == EventKind::kGradSync)
      llm_sync_end[static_cast<size_t>(e.device_group)] =
          std::max(llm_sync_end[static_cast<size_t>(e.device_group)], e.end_s);
  double end = sim.makespan_s, earliest = 0;
  for (int k = 0; k < blocks; ++k)
    for (int l = 0; l < lanes; ++l)
      for (int j = 0; j < pe; ++j) {
        const int g = k * pe + j;
        const EncoderStage& e = p.encoder[static_cast<size_t>(j)];
        double sync_end = std::max(last_bwd[index(k, l, j)], llm_sync_end[static_cast<size_t>(g)]) + e.grad_sync_s;
        sync_end = std::max(sync_end, last_end[index(k, l, j)]);
        end = std::max(end, sync_end);
        if (e.optimizer_s > 0) {
          const Placed at = free[index(k, l, j)].earliest(e.optimizer_s, sync_end);
          work.push_back({g, l, -1, OptimusEventKind::kEncoderOptimizer, at});
        }
      }
  for (const Work& w : work) {
    end = std::max(end, w.at.end);
    earliest = std::min(earliest, w.at.start);
    if (w.kind == OptimusEventKind::kEncoderOptimizer) continue;
    out.encoder_s += w.at.end - w.at.start;
    if (w.at.bubble) out.in_bubble_s += w.at.end - w.at.start;
  }
  out.delay_s = -earliest;
  out.step_time_s = out.delay_s + end;
  // Events in the step's frame: the LLM's compute on every group, the encoder's of lane 0 (each
  // micro-batch's consecutive chunks on a group merged).
  for (const ScheduleEvent& e : sim.events) {
    if (!compute_kind(e.kind) && !(e.kind == EventKind::kP2p && !sim.spec.overlap_p2p)) continue;
    OptimusEvent o;
    o.kind = OptimusEventKind::kLlm;
    o.device_group = e.device_group;
    o.micro_batch = e.micro_batch;
    o.start_s = e.start_s + out.delay_s;
    o.end_s = e.end_s + out.delay_s;
    o.llm_kind = e.kind;
    out.events.push_back(o);
  }
  std::stable_sort(work.begin(), work.end(), [](const Work& a, const Work& b) {
    return std::tie(a.group, a.lane, a.at.start) < std::tie(b.group, b.lane, b.at.start);
  });
  for (const Work& w : work) {
    if (w.lane != 0) continue;
    OptimusEvent o;
    o.kind = w.kind;
    o.device_group = w.group;
    o.lane = w.lane;
    o.micro_batch = w.mb;
    o.start_s = w.at.start + out.delay_s;
    o.end_s = w.at.end + out.delay_s;
    o.in_bubble = w.at.bubble;
    OptimusEvent* prev = out.events.empty() ? nullptr : &out.events.back();
    if (prev && prev->kind == o.kind && prev->device_group == o.device_group && prev->micro_batch == o.micro_batch &&
        prev->in_bubble == o.in_bubble && std::abs(prev->end_s - o.start_s) < 1e-9)
      prev->end_s = o.end_s;
    else
      out.events.push_back(o);
  }
  return out;
}

Result<Simulation> first_stage_schedule(const ScheduleSpec& spec, std::vector<StageTiming> stages,
                                        const StageTiming& encoder) {
  if (stages.empty()) return Error{ErrorKind::kBadInput, "optimus: the LLM has no stage"};
  StageTiming& s = stages.front();
  s.fwd += encoder.fwd;
  s.bwd += encoder.bwd;
  s.recompute += encoder.recompute;
  s.wgrad += encoder.wgrad;
  s.grad_sync += encoder.grad_sync;
  s.optimizer += encoder.optimizer;
  s.detail += encoder.detail;
  return simulate_schedule(spec, stages);
}

Result<EncoderLlm> find_encoder_llm(const TaskSpec& t) {
  auto kind = [&](int mi) { return t.modules[static_cast<size_t>(mi)].model.layer(0).kind; };
  for (size_t ti = 0; ti < t.tasks.size(); ++ti) {
    const Task& task = t.tasks[ti];
    for (const Flow& f : t.flows) {
      const int a = t.module_index(f.from), b = t.module_index(f.to);
      if (a < 0 || b < 0) continue;
      const bool runs_a = std::count(task.modules.begin(), task.modules.end(), f.from) > 0;
      const bool runs_b = std::count(task.modules.begin(), task.modules.end(), f.to) > 0;
      if (!runs_a || !runs_b || kind(a) != LayerKind::kEncoder || kind(b) != LayerKind::kDecoder) continue;
      if (task.modules.size() != 2)
        return Error{ErrorKind::kBadInput, t.name + ": task \"" + task.name + "\" runs " +
                                               S(static_cast<long long>(task.modules.size())) +
                                               " modules; Optimus's schedule here takes one encoder and one LLM"};
      return EncoderLlm{static_cast<int>(ti), a, b};
    }
  }
  return Error{ErrorKind::kBadInput, t.name + ": no task runs an encoder module flowing into a decoder module "
                                              "(Optimus's schedule needs a flow from a module of \"kind\": \"encoder\" "
                                              "into one of \"kind\": \"decoder\" within one task)"};
}

namespace {

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int k = 1; k <= n; ++k)
    if (n % k == 0) d.push_back(k);
  return d;
}

// The compute of one encoder layer as its kernels' shares, by their FLOPs per token (Narayanan et
// al., SC'21, §5.1; the bidirectional attention over all `tokens`): the QKV projection, the
// attention scores and their product with V, the output projection, the two FFN matrices (three
// with SwiGLU). Norms and activations ride with their neighbours.
std::vector<double> kernel_shares(const LayerShape& s, int tokens) {
  const double h = static_cast<double>(s.hidden), hd = static_cast<double>(s.head_dim);
  const double q = s.heads * hd, kv = s.kv_heads * hd, f = static_cast<double>(s.ffn);
  std::vector<double> k = {2 * h * (q + 2 * kv), 4.0 * tokens * q, 2 * q * h};
  if (s.ffn_kind == FfnKind::kSwiglu)
    k.insert(k.end(), {4 * h * f, 2 * f * h});
  else
    k.insert(k.end(), {2 * h * f, 2 * f * h});
  double sum = 0;
  for (double x : k) sum += x;
  for (double& x : k) x /= sum;
  return k;
}

double gib(Bytes b) { return to_gib(b); }

// A layer strategy's exposed communication per micro-batch inside its stage's events (gaps for the
// fine schedule): what the breakdown counts as tensor-, sequence-, context-, expert-parallel and
// ZeRO-3 gather time.
double exposed_comm(const TimeBreakdown& t) {
  return (t.tp_comm + t.ulysses_comm + t.cp_comm + t.ep_comm + t.zero3_gather).value();
}

struct Candidate {
  EncoderLayout layout;
  BubbleProblem problem;
  double encoder_gib = 0, llm_gib = 0;
};

}  // namespace

Result<OptimusPlan> plan_optimus(const TaskSpec& t, const ClusterSpec& cluster, const CostModel& cm,
                                 const SearchOptions& base, const OptimusOptions& opt) {
  if (Status s = validate(t); !s.ok()) return s.error();
  Result<EncoderLlm> who = find_encoder_llm(t);
  if (!who.ok()) return who.error();
  const Task& task = t.tasks[static_cast<size_t>(who->task)];
  const Module& enc = t.modules[static_cast<size_t>(who->encoder)];
  const Module& llm = t.modules[static_cast<size_t>(who->llm)];
  const int N = cluster.total_gpus();
  OptimusPlan out;
  out.task = task.name;
  out.encoder = enc.name;
  out.llm = llm.name;
  out.gpus = N;
  out.batch = task.batch;
  out.memory_budget_gib = gib(cm.memory_budget(cluster));
  const LayerShape& es = enc.model.layer(0);
  const int enc_layers = enc.model.num_layers();
  double reserve = 0;
  std::string why;  // the last round's shortfall
  for (int round = 0; round < 4; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    ClusterSpec c = cluster;
    c.gpu.memory_gib = cluster.gpu.memory_gib - reserve;
    if (c.gpu.memory_gib <= 0) break;
    Result<SearchResult> r = search_module(llm, task.batch, c, N, cm, base);
    if (!r.ok()) return r.error().with_context("LLM \"" + llm.name + "\"");
    out.search_ms += ms_since(t0);
    if (r->top.empty())
      return Error{ErrorKind::kNoFit, "LLM \"" + llm.name + "\": no plan fits on " + S(N) + " x " + cluster.gpu.name +
                                          (reserve > 0 ? " with " + printf_str("%.1f", reserve) +
                                                             " GiB per device kept for the encoder \"" + enc.name + "\""
                                                       : std::string()) +
                                          (why.empty() ? std::string() : " (" + why + ")")};
    const auto t1 = std::chrono::steady_clock::now();
    Plan plan = r->top.front();
    plan.cluster = cluster;  // costed again below on the real device
    const int pp = plan.train.pp, stage_size = N / pp;
    const LayerStrategy s0 = plan.stages.front().layers.front();
    const int dp_llm = s0.dp, mp = stage_size / std::max(1, dp_llm);
    const int m = plan.train.micro_batches;
    const double b = static_cast<double>(plan.train.pipeline_micro_batch()) / dp_llm;
    if (opt.encoder_pp > 0 && pp % opt.encoder_pp != 0)
      return Error{ErrorKind::kBadInput, "encoder \"" + enc.name + "\": pp " + S(opt.encoder_pp) +
                                             " does not divide the LLM \"" + llm.name + "\"'s pp " + S(pp)};
    if (opt.encoder_tp > 0 && mp % opt.encoder_tp != 0)
      return Error{ErrorKind::kBadInput, "encoder \"" + enc.name + "\": tp " + S(opt.encoder_tp) +
                                             " does not divide the LLM \"" + llm.name + "\"'s tp " + S(mp) +
                                             " (its layers' tp x ulysses x cp)"};
    if (opt.encoder_tp > 0 && (es.heads % opt.encoder_tp != 0 || es.kv_heads % opt.encoder_tp != 0))
      return Error{ErrorKind::kBadInput, "encoder \"" + enc.name + "\": tp " + S(opt.encoder_tp) + " does not divide its " +
                                             S(es.heads) + " heads"};
    if (opt.encoder_pp > enc_layers)
      return Error{ErrorKind::kBadInput, "encoder \"" + enc.name + "\": pp " + S(opt.encoder_pp) + " stages for " +
                                             S(enc_layers) + " layers"};
    Result<Simulation> sim = simulate_plan(plan, cm);
    if (!sim.ok()) return sim.error().with_context("LLM \"" + llm.name + "\"");
    const std::vector<StageTiming> timings = stage_timings(plan, cm);
    BubbleProblem llm_side;
    llm_side.llm = *sim;
    for (size_t s = 0; s < timings.size(); ++s) {
      const StageTiming& st = timings[s];
      const double half = exposed_comm(st.detail) / 2;  // Megatron's conjugate collectives: as much back as forward
      llm_side.fwd_comm_share.push_back(st.fwd.value() > 0 ? std::min(1.0, half / st.fwd.value()) : 0);
      llm_side.bwd_comm_share.push_back(st.bwd.value() > 0 ? std::min(1.0, half / st.bwd.value()) : 0);
      int gaps = 0;
      for (const LayerStrategy& ls : plan.stages[s].layers) gaps += ls.sp ? 4 : 2;  // collectives per layer and pass
      llm_side.comm_gaps.push_back(std::max(1, gaps));
    }
    std::vector<double> llm_group_gib(static_cast<size_t>(pp), 0);
    for (size_t s = 0; s < plan.stages.size(); ++s)
      llm_group_gib[static_cast<size_t>(stage_group(plan, static_cast<int>(s)))] = plan.stages[s].predicted.memory_gib;
    // The encoder's output to the LLM's first stage: b samples x tokens x hidden, 16-bit, each of the
    // encoder stage's tp ranks sending its share, between nodes unless a stage fits in one.
    const LinkSpec& link = stage_size >= cluster.gpus_per_node ? cluster.inter : cluster.intra;
    auto flow_s = [&](int tp_e) {
      return b * enc.tokens * static_cast<double>(enc.model.hidden) * 2 / tp_e / (link.gbps * 1e9) + link.latency_us * 1e-6;
    };
    std::vector<Candidate> fit;
    double shortfall = kFar;
    for (int pe : divisors(pp)) {
      if (pe > enc_layers || (opt.encoder_pp > 0 && pe != opt.encoder_pp)) continue;
      for (int te : divisors(mp)) {
        if (opt.encoder_tp > 0 && te != opt.encoder_tp) continue;
        if (es.heads % te != 0 || es.kv_heads % te != 0 || es.ffn % te != 0) continue;
        const int dp_e = N / (pe * te), pipelines = (pp / pe) * (mp / te), k_e = (m + pipelines - 1) / pipelines;
        for (Recompute rc : {Recompute::kNone, Recompute::kFull}) {
          LayerStrategy ls;
          ls.tp = te;
          ls.sp = te > 1;
          ls.dp = dp_e;
          ls.zero = s0.zero;
          ls.recompute = rc;
          TrainSettings tr;
          tr.seq = enc.tokens;
          tr.micro_batches = k_e;
          tr.global_batch = static_cast<int>(std::lround(b * dp_e * k_e));
          tr.pp = pe;
          tr.schedule = Schedule::kGpipe;  // every micro-batch's activations held, as the packing may
          tr.dtype = plan.train.dtype;
          tr.optimizer = plan.train.optimizer;
          Candidate cand;
          cand.layout = {dp_e, pe, te, rc};
          cand.problem = llm_side;
          cand.problem.lanes = mp / te;
          cand.problem.flow_s = flow_s(te);
          double worst = 0, enc_worst = 0;
          int first = 0;
          for (int j = 0; j < pe; ++j) {
            const int layers = enc_layers / pe + (j < enc_layers % pe ? 1 : 0);
            LayerContext ctx;
            ctx.model = &enc.model;
            ctx.cluster = &cluster;
            ctx.train = tr;
            ctx.stage = j;
            ctx.num_stages = pe;
            ctx.stage_size = N / pe;
            ctx.layer = first;
            const LayerCost lc = cm.layer(ctx, ls);
            EncoderStage st;
            st.layers = layers;
            st.fwd_s = layers * lc.fwd.value();
            st.bwd_s = layers * lc.bwd.value();
            st.grad_sync_s = layers * lc.grad_sync.value();
            st.optimizer_s = layers * lc.optimizer.value();
            st.kernel_shares = kernel_shares(es, enc.tokens);
            if (j + 1 < pe) st.p2p_s = cm.p2p(ctx, ls).value() / 2;
            cand.problem.encoder.push_back(st);
            const double e_gib = layers * gib(lc.mem());
            enc_worst = std::max(enc_worst, e_gib);
            for (int k = 0; k < pp / pe; ++k)
              worst = std::max(worst, llm_group_gib[static_cast<size_t>(k * pe + j)] + e_gib);
            first += layers;
          }
          cand.encoder_gib = enc_worst;
          cand.llm_gib = worst - enc_worst;
          if (worst > out.memory_budget_gib) {
            shortfall = std::min(shortfall, worst - out.memory_budget_gib);
            continue;
          }
          fit.push_back(std::move(cand));
          break;  // recompute only where nothing fits without it
        }
      }
    }
    if (fit.empty()) {
      if (shortfall >= kFar)
        return Error{ErrorKind::kBadInput, "encoder \"" + enc.name + "\": no (pp, tp) divides the LLM's pp " + S(pp) +
                                               " and tp " + S(mp) + " and its " + S(es.heads) + " heads"};
      why = "the encoder's best layout then needs " + printf_str("%.1f", shortfall) + " GiB more per device";
      reserve += std::ceil(shortfall + 0.5);
      continue;
    }
    bool have = false;
    for (Candidate& cand : fit) {
      Result<BubbleSchedule> fine = pack_encoder(cand.problem, Granularity::kFine);
      if (!fine.ok()) return fine.error();
      if (have && fine->step_time_s >= out.fine.step_time_s - kEps) continue;
      Result<BubbleSchedule> coarse = pack_encoder(cand.problem, Granularity::kCoarse);
      if (!coarse.ok()) return coarse.error();
      out.fine = std::move(*fine);
      out.coarse = std::move(*coarse);
      out.layout = cand.layout;
      out.encoder_memory_gib = cand.encoder_gib;
      out.llm_memory_gib = cand.llm_gib;
      have = true;
    }
    out.candidates = static_cast<int>(fit.size());
    // Megatron-LM's way: the encoder's layers on the LLM's first stage, laid out as its first layer
    // (tp the largest divisor of that layer's tp the encoder's heads allow, the rest of the stage's
    // devices data parallel), the LLM's micro-batches.
    LayerStrategy fs = s0;
    fs.ulysses = 1;
    fs.cp = 1;
    fs.ep = 1;
    fs.etp = 0;
    while (es.heads % fs.tp != 0 || es.kv_heads % fs.tp != 0 || es.ffn % fs.tp != 0) --fs.tp;
    while (s0.tp % fs.tp != 0) --fs.tp;
    fs.sp = s0.sp && fs.tp > 1;
    fs.dp = stage_size / fs.tp;
    LayerContext ctx;
    ctx.model = &enc.model;
    ctx.cluster = &cluster;
    ctx.train = plan.train;
    ctx.train.seq = enc.tokens;
    ctx.stage = 0;
    ctx.num_stages = static_cast<int>(plan.stages.size());
    ctx.stage_size = stage_size;
    const LayerCost lc = cm.layer(ctx, fs);
    StageTiming e;
    e.fwd = lc.fwd * enc_layers;
    e.bwd = lc.bwd * enc_layers;
    e.recompute = std::clamp(lc.time.recompute, Seconds(0), lc.bwd) * enc_layers;
    e.wgrad = lc.wgrad * enc_layers;
    e.grad_sync = lc.grad_sync * enc_layers;
    e.optimizer = lc.optimizer * enc_layers;
    e.detail = lc.time.scaled(enc_layers);
    Result<Simulation> first = first_stage_schedule(schedule_spec(plan, cm), timings, e);
    if (!first.ok()) return first.error();
    out.first_stage_s = first->makespan_s;
    out.first_stage_memory_gib = llm_group_gib.front() + enc_layers * gib(lc.mem());
    out.llm_plan = std::move(plan);
    out.llm_mp = mp;
    out.reserve_gib = reserve;
    out.plan_ms += ms_since(t1);
    return out;
  }
  return Error{ErrorKind::kNoFit, "encoder \"" + enc.name + "\" beside the LLM \"" + llm.name + "\" on " + S(N) + " x " +
                                      cluster.gpu.name + ": no layout fits" + (why.empty() ? "" : " (" + why + ")")};
}

Json to_json(const OptimusPlan& p) {
  Json j;
  j["step_time_s"] = p.step_time_s();
  j["first_stage_s"] = p.first_stage_s;
  j["speedup"] = p.step_time_s() > 0 ? p.first_stage_s / p.step_time_s() : 0;
  j["eff_coarse"] = p.coarse.eff();
  j["eff_fine"] = p.fine.eff();
  j["coarse_step_s"] = p.coarse.step_time_s;
  j["delay_s"] = p.fine.delay_s;
  j["llm_step_s"] = p.fine.llm_step_s;
  j["encoder"] = {{"name", p.encoder},
                  {"dp", p.layout.dp},
                  {"pp", p.layout.pp},
                  {"tp", p.layout.tp},
                  {"recompute", to_string(p.layout.recompute)}};
  const LayerStrategy& s0 = p.llm_plan.stages.front().layers.front();
  j["llm"] = {{"name", p.llm},
              {"pp", p.llm_plan.train.pp},
              {"vp", p.llm_plan.train.vp},
              {"tp", p.llm_mp},
              {"dp", s0.dp},
              {"micro_batches", p.llm_plan.train.micro_batches},
              {"schedule", to_string(p.llm_plan.train.schedule)}};
  j["memory"] = {{"budget_gib", p.memory_budget_gib},
                 {"llm_gib", p.llm_memory_gib},
                 {"encoder_gib", p.encoder_memory_gib},
                 {"first_stage_gib", p.first_stage_memory_gib},
                 {"reserve_gib", p.reserve_gib}};
  j["candidates"] = p.candidates;
  j["plan_ms"] = p.plan_ms;
  j["search_ms"] = p.search_ms;
  return j;
}

}  // namespace weft::multitask
