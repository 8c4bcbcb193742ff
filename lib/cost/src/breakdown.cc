#include "weft/cost/breakdown.h"

#include <algorithm>
#include <utility>

namespace weft {

namespace {
// Every TimeBreakdown field with its JSON key, in declaration order.
constexpr std::pair<Seconds TimeBreakdown::*, const char*> kTimeFields[] = {
    {&TimeBreakdown::compute, "compute_s"},
    {&TimeBreakdown::recompute, "recompute_s"},
    {&TimeBreakdown::tp_comm, "tp_comm_s"},
    {&TimeBreakdown::ulysses_comm, "ulysses_comm_s"},
    {&TimeBreakdown::cp_comm, "cp_comm_s"},
    {&TimeBreakdown::ep_comm, "ep_comm_s"},
    {&TimeBreakdown::dp_comm, "dp_comm_s"},
    {&TimeBreakdown::dp_exposed, "dp_exposed_s"},
    {&TimeBreakdown::zero3_gather, "zero3_gather_s"},
    {&TimeBreakdown::p2p, "p2p_s"},
    {&TimeBreakdown::redistribution, "redistribution_s"},
    {&TimeBreakdown::embedding, "embedding_s"},
    {&TimeBreakdown::bubble, "bubble_s"},
    {&TimeBreakdown::optimizer, "optimizer_s"},
};
}  // namespace

TimeBreakdown& TimeBreakdown::operator+=(const TimeBreakdown& o) {
  for (auto [field, name] : kTimeFields) this->*field += o.*field;
  return *this;
}

TimeBreakdown TimeBreakdown::scaled(double k) const {
  TimeBreakdown out = *this;
  for (auto [field, name] : kTimeFields) out.*field *= k;
  return out;
}

MemoryBreakdown& MemoryBreakdown::operator+=(const MemoryBreakdown& o) {
  weights += o.weights;
  grads += o.grads;
  optimizer += o.optimizer;
  activations += o.activations;
  other += o.other;
  transient = std::max(transient, o.transient);
  return *this;
}

Json to_json(const TimeBreakdown& t) {
  Json j;
  for (auto [field, name] : kTimeFields) j[name] = (t.*field).value();
  return j;
}

Json to_json(const MemoryBreakdown& m) {
  return Json{{"weights_gib", to_gib(m.weights)},     {"grads_gib", to_gib(m.grads)},
              {"optimizer_gib", to_gib(m.optimizer)}, {"activations_gib", to_gib(m.activations)},
              {"other_gib", to_gib(m.other + m.transient)},         {"total_gib", to_gib(m.total())}};
}

}  // namespace weft
