#include "weft/plan/pipeline_order.h"

#include <algorithm>
#include <string>

#include "weft/core/assert.h"

namespace weft {

std::vector<PipeAction> pipeline_actions(Schedule s, int stages, int stage, int m, int vp) {
  WEFT_ASSERT(stages >= 1 && stage >= 0 && stage < stages && m >= 1 && vp >= 1 &&
                  (vp == 1 || s == Schedule::kInterleaved || s == Schedule::kZbV),
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
    case Schedule::kZbV: {
      WEFT_ASSERT(vp == 2, "pipeline_actions: zb-v runs 2 chunks per stage, got " + std::to_string(vp));
      const int p = stages, g = stage, n = std::max(m, 2 * p - 1);
      int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
      auto add = [&](PipeAction::Kind k, int mb, int chunk) {
        if (mb < m) out.push_back({k, mb, chunk});
      };
      for (int i = 0; i < 2 * (p - g) - 1; ++i) add(PipeAction::kForward, f0++, 0);
      for (int i = 0; i < g; ++i) {
        add(PipeAction::kForward, f1++, 1);
        add(PipeAction::kForward, f0++, 0);
      }
      for (int i = 0; i < p - g; ++i) {
        add(PipeAction::kForward, f1++, 1);
        add(PipeAction::kInputGrad, b1, 1);
        add(PipeAction::kWeightGrad, b1++, 1);
      }
      while (f1 < f0 || f0 < n) {
        if (f0 < n) add(PipeAction::kForward, f0++, 0);
        add(PipeAction::kInputGrad, b0, 0);
        add(PipeAction::kWeightGrad, b0++, 0);
        add(PipeAction::kForward, f1++, 1);
        add(PipeAction::kInputGrad, b1, 1);
        add(PipeAction::kWeightGrad, b1++, 1);
      }
      int w0 = b0, w1 = b1;
      for (int i = 0; i < g; ++i) {
        add(PipeAction::kInputGrad, b0++, 0);
        add(PipeAction::kInputGrad, b1++, 1);
      }
      for (int i = 0; i < p - g; ++i) {
        add(PipeAction::kInputGrad, b0++, 0);
        add(PipeAction::kWeightGrad, w0++, 0);
      }
      while (w1 < b1) add(PipeAction::kWeightGrad, w1++, 1);
      while (w0 < b0) add(PipeAction::kWeightGrad, w0++, 0);
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

int virtual_stage(Schedule s, int stages, int stage, int chunk) {
  if (s == Schedule::kZbV && chunk == 1) return 2 * stages - 1 - stage;
  return stage + chunk * stages;
}

int stage_device_group(Schedule s, int stages, int vstage) {
  WEFT_ASSERT(stages >= 1 && vstage >= 0, "stage_device_group: virtual stage " + std::to_string(vstage) + " of " +
                                              std::to_string(stages) + " device groups");
  if (s == Schedule::kZbV && vstage >= stages) {
    WEFT_ASSERT(vstage < 2 * stages, "stage_device_group: zb-v has " + std::to_string(2 * stages) +
                                         " virtual stages, asked for " + std::to_string(vstage));
    return 2 * stages - 1 - vstage;
  }
  return vstage % stages;
}

int stage_chunk(Schedule s, int stages, int vstage) {
  WEFT_ASSERT(stages >= 1 && vstage >= 0, "stage_chunk: virtual stage " + std::to_string(vstage) + " of " +
                                              std::to_string(stages) + " device groups");
  if (s == Schedule::kZbV) return vstage >= stages ? 1 : 0;
  return vstage / stages;
}

}  // namespace weft
