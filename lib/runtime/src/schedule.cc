#include "weft/runtime/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "weft/core/assert.h"

namespace weft::runtime {

double LrSchedule::at(int step) const {
  if (warmup > 0 && step <= warmup) return peak * step / warmup;
  const int decay = total - warmup;
  if (decay <= 0) return peak;
  const double progress = std::clamp(static_cast<double>(step - warmup) / decay, 0.0, 1.0);
  return min + 0.5 * (peak - min) * (1.0 + std::cos(std::numbers::pi * progress));
}

}  // namespace weft::runtime
