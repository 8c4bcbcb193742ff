#include "weft/plan/pipeline_order.h"

#include <algorithm>
#include <string>

#include "weft/core/assert.h"

namespace weft {

std::vector<PipeAction> pipeline_actions(Schedule s, int stages, int stage, int m, int vp) {
  WEFT_ASSERT(stages >= 1 && stage >= 0 && stage < stages && m >= 1 && vp >= 1 &&
                  (vp == 1 || s == Schedule::kInterleaved),
              "pipeline_actions: bad stage " + std::to_string(stage) + " of " + std::to_string(stages) + " with " +
                  std::to_string(m) + " micro-batches");
  if (s == Schedule::kInterleaved && vp == 1) s = Schedule::k1F1B;  // one chunk: 1F1B's order
  std::vector<PipeAction> out;
  out.reserve(3 * m * vp);
  switch (s) {
    case Schedule::kGpipe:
      for (int i = 0; i < m; ++i) out.push_back({PipeAction::kForward, i});
      for (int i = 0; i < m; ++i) out.push_back({PipeAction::kBackward, i});
      return out;
    case Schedule::k1F1B: {
      const int warm = std::min(stages - stage - 1, m);
      int f = 0, b = 0;
      for (; f < warm; ++f) out.push_back({PipeAction::kForward, f});
      while (f < m) {
        out.push_back({PipeAction::kForward, f++});
        out.push_back({PipeAction::kBackward, b++});
      }
      while (b < m) out.push_back({PipeAction::kBackward, b++});
      return out;
    }
    case Schedule::kZbH1: {
      const int warm = std::min(stages - stage - 1, m);
      int f = 0, b = 0, w = 0;
      for (; f < warm; ++f) out.push_back({PipeAction::kForward, f});
      for (int i = 0; f < m; ++i) {
        out.push_back({PipeAction::kForward, f++});
        out.push_back({PipeAction::kInputGrad, b++});
        if (i >= stage) out.push_back({PipeAction::kWeightGrad, w++});
      }
      while (b < m) {
        out.push_back({PipeAction::kInputGrad, b++});
        out.push_back({PipeAction::kWeightGrad, w++});
      }
      while (w < m) out.push_back({PipeAction::kWeightGrad, w++});
      return out;
    }
    case Schedule::kInterleaved: {
      WEFT_ASSERT(vp >= 1 && m % stages == 0, "pipeline_actions: the interleaved schedule needs m (" +
                                                   std::to_string(m) + ") a multiple of the stages (" +
                                                   std::to_string(stages) + ")");
      const int total = m * vp;
      auto nth = [&](int k, bool fwd) {
        int chunk = (k / stages) % vp;
        if (!fwd) chunk = vp - 1 - chunk;
        return PipeAction{fwd ? PipeAction::kForward : PipeAction::kBackward, (k / (stages * vp)) * stages + k % stages,
                          chunk};
      };
      const int warm = m == stages ? total : std::min(total, (stages - stage - 1) * 2 + (vp - 1) * stages);
      for (int k = 0; k < warm; ++k) out.push_back(nth(k, true));
      for (int k = 0; k < total - warm; ++k) {
        out.push_back(nth(warm + k, true));
        out.push_back(nth(k, false));
      }
      for (int k = total - warm; k < total; ++k) out.push_back(nth(k, false));
      return out;
    }
  }
  return out;
}

int in_flight(const std::vector<PipeAction>& actions) {
  int now = 0, peak = 0;
  for (const auto& a : actions) {
    if (a.kind == PipeAction::kInputGrad) continue;
    now += a.kind == PipeAction::kForward ? 1 : -1;
    peak = std::max(peak, now);
  }
  return peak;
}

}  // namespace weft
