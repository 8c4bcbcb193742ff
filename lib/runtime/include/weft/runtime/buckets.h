// Gradient buckets of the data-parallel reduction: how one unit's flat gradient buffer is cut into
// ranges that are reduced as soon as all their parameters' gradients are final, and how such a
// range falls onto the ZeRO shards of the buffer. Torch-free arithmetic, unit-tested alone.
#pragma once

#include <cstdint>
#include <vector>

namespace weft::runtime {

// PyTorch DDP's default bucket_cap_mb: 25 MiB per bucket.
inline constexpr double kDefaultBucketMiB = 25.0;

// A bucket: elements [begin, end) of a unit's padded flat buffer, holding parameters
// [first_param, last_param] (indices in buffer order).
struct BucketRange {
  int64_t begin = 0, end = 0;
  int first_param = 0, last_param = 0;
  bool operator==(const BucketRange&) const = default;
};

// Cuts a buffer whose parameters have `numels` elements each (laid out back to back in that order,
// the buffer padded to `padded` >= their sum) into buckets of whole parameters, in reduction order:
// from the last parameter to the first, as backward produces them. A bucket takes parameters
// while it stays within `cap` elements; a parameter larger than `cap` is a bucket of its own. The
// first bucket returned (the buffer's tail) also covers the padding, so the buckets tile
// [0, padded) exactly. Preconditions (WEFT_ASSERT): cap > 0 and padded >= the sum of `numels`. An
// empty `numels` gives one bucket [0, padded) when padded > 0 and none otherwise.
std::vector<BucketRange> bucket_ranges(const std::vector<int64_t>& numels, int64_t padded, int64_t cap);

// The buffer is sharded into `parts` consecutive shards of `shard` elements. Returns, for each shard
// i, how many elements of [begin, end) lie in it (pieces are consecutive, so they sum to
// end - begin). These are the split sizes of a reduce-scatter of the bucket.
std::vector<int64_t> shard_pieces(int64_t begin, int64_t end, int64_t shard, int parts);

}  // namespace weft::runtime
