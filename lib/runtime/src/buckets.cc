#include "weft/runtime/buckets.h"

#include <algorithm>
#include <string>

#include "weft/core/assert.h"

namespace weft::runtime {

std::vector<BucketRange> bucket_ranges(const std::vector<int64_t>& numels, int64_t padded, int64_t cap) {
  WEFT_ASSERT(cap > 0, "bucket_ranges: cap must be positive, got " + std::to_string(cap));
  std::vector<int64_t> offset(numels.size() + 1, 0);
  for (size_t i = 0; i < numels.size(); ++i) offset[i + 1] = offset[i] + numels[i];
  WEFT_ASSERT(padded >= offset.back(), "bucket_ranges: padded size " + std::to_string(padded) + " below the " +
                                           std::to_string(offset.back()) + " elements of the parameters");
  std::vector<BucketRange> out;
  if (numels.empty()) {
    if (padded > 0) out.push_back({0, padded, 0, -1});
    return out;
  }
  int last = static_cast<int>(numels.size()) - 1;
  while (last >= 0) {
    int first = last;
    while (first > 0 && offset[last + 1] - offset[first - 1] <= cap) --first;
    BucketRange b;
    b.first_param = first;
    b.last_param = last;
    b.begin = offset[first];
    b.end = out.empty() ? padded : offset[last + 1];
    out.push_back(b);
    last = first - 1;
  }
  return out;
}

std::vector<int64_t> shard_pieces(int64_t begin, int64_t end, int64_t shard, int parts) {
  std::vector<int64_t> out(parts, 0);
  for (int i = 0; i < parts; ++i) {
    const int64_t lo = std::max(begin, i * shard), hi = std::min(end, (i + 1) * shard);
    out[i] = std::max<int64_t>(0, hi - lo);
  }
  return out;
}

}  // namespace weft::runtime
