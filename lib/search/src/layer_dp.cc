#include "weft/search/layer_dp.h"

#include <algorithm>

#include "weft/core/assert.h"

namespace weft::planner {

namespace {
// Entries per block of the pruned min-plus loops (a multiple of the SIMD width).
constexpr int kBlock = 64;
}  // namespace

LayerDp::LayerDp(int layouts, int max_mem)
    : K_(layouts), M_(max_mem), W_(((max_mem + 1) + 7) / 8 * 8) {
  WEFT_ASSERT(K_ >= 1 && M_ >= 0, "a layer DP needs candidates and a memory budget");
  f_.assign(static_cast<size_t>(K_) * W_, kInfTime);
  h_.assign(static_cast<size_t>(K_) * W_, kInfTime);
  g_.assign(W_, kInfTime);
  row_.assign(W_, kInfTime);
  live_.assign(K_, 0);
  next_live_.assign(K_, 0);
  first_.assign(K_, max_mem + 1);
  next_first_.assign(K_, max_mem + 1);
}

void LayerDp::start(bool history) {
  n_ = 0;
  history_ = history;
  std::fill(live_.begin(), live_.end(), 0);
}

float LayerDp::best(int v) const {
  float b = kInfTime;
  for (int k = 0; k < K_; ++k)
    if (live_[k]) b = std::min(b, f_[static_cast<size_t>(k) * W_ + v]);
  return b;
}

void LayerDp::add_offsets(const std::vector<float>& offset) {
  for (int k = 0; k < K_; ++k) {
    if (!live_[k] || offset[k] == 0.0f) continue;
    float* fk = &f_[static_cast<size_t>(k) * W_];
    const float o = offset[k];
    for (int v = first_[k]; v <= M_; ++v) fk[v] = fk[v] + o;
  }
}

void LayerDp::push(const DpOption* opts, int n, const float* trans) {
  const int W = W_, M = M_;
  if (history_) {
    if (steps_.size() <= static_cast<size_t>(n_)) steps_.resize(static_cast<size_t>(n_) + 1);
    Step& st = steps_[static_cast<size_t>(n_)];
    st.opts = opts;
    st.n = n;
    st.trans = trans;
    if (n_ > 0) {
      if (hist_.size() <= static_cast<size_t>(n_)) hist_.resize(static_cast<size_t>(n_) + 1);
      if (!hist_[static_cast<size_t>(n_)]) hist_[static_cast<size_t>(n_)].reset(new float[static_cast<size_t>(K_) * W]);
      float* before = hist_[static_cast<size_t>(n_)].get();
      for (int k = 0; k < K_; ++k)
        if (live_[k]) std::copy(&f_[static_cast<size_t>(k) * W + first_[k]], &f_[static_cast<size_t>(k) * W] + M + 1,
                                before + static_cast<size_t>(k) * W + first_[k]);
      st.before_live = live_;
      st.before_first = first_;
    }
  }
  std::fill(next_live_.begin(), next_live_.end(), 0);
  for (int i = 0; i < n; ++i)
    if (opts[i].mem <= M) next_live_[opts[i].layout] = 1;

  // Every row is +inf below its first_ entry and non-increasing from there.
  if (n_ == 0) {
    // First layer: f_1[k][v] = min over options of layout k with mem <= v.
    for (int k = 0; k < K_; ++k)
      if (next_live_[k]) {
        std::fill_n(&h_[static_cast<size_t>(k) * W], W, kInfTime);
        next_first_[k] = M + 1;
      }
    for (int i = 0; i < n; ++i) {
      const DpOption& o = opts[i];
      if (o.mem > M) continue;
      float* hk = &h_[static_cast<size_t>(o.layout) * W];
      const float t = o.time;
      for (int v = o.mem; v <= M; ++v) hk[v] = t < hk[v] ? t : hk[v];
      next_first_[o.layout] = std::min(next_first_[o.layout], o.mem);
    }
  } else {
    // h[k][w] = min_{k'} f[k'][w] + T[k'][k] (T == nullptr: min over k' at no cost).
    int g_first = M + 1;
    if (!trans) {
      std::fill_n(g_.data(), W, kInfTime);
      for (int k = 0; k < K_; ++k) {
        if (!live_[k]) continue;
        const float* fk = &f_[static_cast<size_t>(k) * W];
        float* g = g_.data();
        for (int v = first_[k]; v <= M; ++v) g[v] = fk[v] < g[v] ? fk[v] : g[v];
        g_first = std::min(g_first, first_[k]);
      }
    }
    // The new table goes to h_ (swapped in below); the transition row of layout k to row_.
    for (int k = 0; k < K_; ++k) {
      if (!next_live_[k]) continue;
      float* hk = row_.data();
      int h_first = M + 1;
      if (!trans) {
        std::copy_n(g_.data(), W, hk);
        h_first = g_first;
      } else {
        if (live_[k]) {
          std::copy_n(&f_[static_cast<size_t>(k) * W], W, hk);
          h_first = first_[k];
        } else {
          std::fill_n(hk, W, kInfTime);
        }
        for (int kp = 0; kp < K_; ++kp) {
          if (kp == k || !live_[kp]) continue;
          const float t = trans[static_cast<size_t>(kp) * K_ + k];
          if (!(t < kInfTime)) continue;
          const float* fk = &f_[static_cast<size_t>(kp) * W];
          const int from = first_[kp];
          // Both rows are non-increasing: a block where row kp's smallest entry plus t does not beat
          // hk's largest cannot improve hk (the whole row, if it starts no earlier than hk).
          if (from >= h_first && h_first <= M && fk[M] + t >= hk[h_first]) continue;
          for (int b0 = from; b0 <= M; b0 += kBlock) {
            const int b1 = std::min(M + 1, b0 + kBlock);
            if (fk[b1 - 1] + t >= hk[b0]) continue;
            for (int v = b0; v < b1; ++v) {
              const float c = fk[v] + t;
              hk[v] = c < hk[v] ? c : hk[v];
            }
          }
          h_first = std::min(h_first, from);
        }
      }
      // new[k][v] = min over options o of layout k: t(o) + hk[v - mem(o)].
      float* ok = &h_[static_cast<size_t>(k) * W];
      std::fill_n(ok, W, kInfTime);
      int first = M + 1;
      for (int i = 0; i < n; ++i) {
        const DpOption& o = opts[i];
        if (o.layout != k || o.mem > M) continue;
        const int len = M - o.mem - h_first + 1;
        if (len <= 0) continue;
        const float t = o.time;
        const float* src = hk + h_first;
        float* dst = ok + h_first + o.mem;
        // The new row is non-increasing too: skip blocks this option cannot improve.
        for (int b0 = 0; b0 < len; b0 += kBlock) {
          const int b1 = std::min(len, b0 + kBlock);
          if (t + src[b1 - 1] >= dst[b0]) continue;
          for (int v = b0; v < b1; ++v) {
            const float c = t + src[v];
            dst[v] = c < dst[v] ? c : dst[v];
          }
        }
        first = std::min(first, h_first + o.mem);
      }
      next_first_[k] = first;
    }
  }
  std::swap(f_, h_);
  live_ = next_live_;
  first_.swap(next_first_);
  for (int k = 0; k < K_; ++k)
    if (live_[k] && first_[k] > M) live_[k] = 0;  // nothing fits in this layout
  ++n_;
}

std::vector<int> LayerDp::backtrack(int k, int v) const {
  WEFT_ASSERT(history_ && static_cast<int>(steps_.size()) >= n_, "backtrack() needs the history of every step");
  std::vector<int> out(n_, -1);
  for (int layer = n_ - 1; layer >= 0; --layer) {
    const Step& st = steps_[layer];
    float best = kInfTime;
    int best_o = -1, best_k = -1;
    for (int i = 0; i < st.n; ++i) {
      const DpOption& o = st.opts[i];
      if (o.layout != k || o.mem > v) continue;
      if (layer == 0) {
        if (o.time < best) best = o.time, best_o = i, best_k = k;
        continue;
      }
      const int w = v - o.mem;
      for (int kp = 0; kp < K_; ++kp) {
        if (!st.before_live[kp] || w < st.before_first[kp]) continue;
        const float prev = hist_[static_cast<size_t>(layer)][static_cast<size_t>(kp) * W_ + w];
        float h;
        if (!st.trans) h = prev;
        else if (kp == k) h = prev;
        else h = prev + st.trans[static_cast<size_t>(kp) * K_ + k];
        const float c = o.time + h;
        if (c < best) best = c, best_o = i, best_k = kp;
      }
    }
    WEFT_ASSERT(best_o >= 0, "no option reaches the recorded state");
    if (best_o < 0) return {};
    out[layer] = st.opts[best_o].index;
    v -= st.opts[best_o].mem;
    k = best_k;
  }
  return out;
}

}  // namespace weft::planner
