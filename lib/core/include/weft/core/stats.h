// Small statistics over samples: the median, average ranks and Spearman's rank correlation. Used by
// the runtime's straggler checks, the profiler, and the benches and reference tests that compare
// weft's rankings with published ones. Pure; header only.
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace weft {

// The median (the mean of the two middle values of an even count). Precondition: v not empty.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Ranks from 1, ties sharing the mean of their positions: {30, 10, 10} -> {3, 1.5, 1.5}.
inline std::vector<double> average_ranks(const std::vector<double>& x) {
  std::vector<size_t> idx(x.size());
  std::iota(idx.begin(), idx.end(), size_t{0});
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return x[a] < x[b]; });
  std::vector<double> r(x.size());
  for (size_t i = 0; i < idx.size();) {
    size_t j = i;
    while (j + 1 < idx.size() && x[idx[j + 1]] == x[idx[i]]) ++j;
    for (size_t k = i; k <= j; ++k) r[idx[k]] = (i + j) / 2.0 + 1;
    i = j + 1;
  }
  return r;
}

// Spearman's rank correlation of a and b (Pearson's over their average ranks); NaN for fewer than
// two pairs or a side without spread.
inline double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() < 2 || a.size() != b.size()) return std::nan("");
  const std::vector<double> ra = average_ranks(a), rb = average_ranks(b);
  const double n = static_cast<double>(ra.size());
  const double ma = std::accumulate(ra.begin(), ra.end(), 0.0) / n, mb = std::accumulate(rb.begin(), rb.end(), 0.0) / n;
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < ra.size(); ++i) {
    sab += (ra[i] - ma) * (rb[i] - mb);
    saa += (ra[i] - ma) * (ra[i] - ma);
    sbb += (rb[i] - mb) * (rb[i] - mb);
  }
  return saa > 0 && sbb > 0 ? sab / std::sqrt(saa * sbb) : std::nan("");
}

}  // namespace weft
