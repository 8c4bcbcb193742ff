// The per-stage dynamic program over layers with memory as state (docs/search.md, "Layer DP").
//
//   f_n[k][v] = least time of the first n layers of a run such that layer n has activation layout k
//               and the layers' memory totals at most v steps.
//   f_1[k][v] = min { t(o) : o an option of layer 1 with layout k, mem(o) <= v }
//   f_n[k][v] = min { t(o) + h_{n-1}[k][v - mem(o)] : o an option of layer n with layout k }
//   h_{n-1}[k][w] = min_{k'} f_{n-1}[k'][w] + T[k'][k]      (T[k][k] = 0; T = 0 after a stage end)
//
// Every f_n[k][.] is non-increasing in v, so the best n-layer stage under a budget of V steps is
// min_k f_n[k][V]. Work per layer: O(K^2 * M + options * M), all in contiguous float rows.
// Not thread-safe; one instance per search thread.
#pragma once

#include <cstddef>
#include <limits>
#include <memory>
#include <vector>

namespace weft::planner {

inline constexpr float kInfTime = std::numeric_limits<float>::infinity();

// One candidate of one layer at one stage position, as the DP sees it.
struct DpOption {
  float time = 0;  // search objective per micro-batch (docs/search.md)
  int mem = 0;     // memory in steps (rounded up)
  int layout = 0;  // 0 .. K-1
  int index = 0;   // the caller's candidate index, returned by backtrack()
};

class LayerDp {
 public:
  // `layouts` K >= 1, `max_mem` M >= 0 (states 0..M).
  LayerDp(int layouts, int max_mem);

  // Starts an empty run. With history, every table is kept so backtrack() can recover assignments.
  void start(bool history = false);
  // Appends a layer with `n` options. `trans` is the K*K row-major matrix [from * K + to] of
  // transition times from the previous layer, or nullptr after a stage end (the previous layer's
  // layout does not matter: no transition). The arrays must outlive the run when history is kept.
  void push(const DpOption* opts, int n, const float* trans);
  // Adds offset[k] to every finite entry of layout k (e.g. the p2p after a stage that ends in k).
  void add_offsets(const std::vector<float>& offset);

  int layouts() const { return K_; }
  int max_mem() const { return M_; }
  int layers() const { return n_; }
  // f_n[k][v]; kInfTime when unreachable.
  float at(int k, int v) const { return live_[k] ? f_[static_cast<size_t>(k) * W_ + v] : kInfTime; }
  // min_k f_n[k][v].
  float best(int v) const;
  // The candidate indices (DpOption::index) of each layer, in order, of an assignment reaching
  // f_n[k][v] (which must be finite). Needs history.
  std::vector<int> backtrack(int k, int v) const;

 private:
  // A step's inputs and, from the second layer on, the table it read (after offsets): its live
  // rows from their first reachable state (hist_[layer]; the rest is +inf and not stored). The
  // steps and the tables keep their storage from run to run.
  struct Step {
    const DpOption* opts = nullptr;
    int n = 0;
    const float* trans = nullptr;
    std::vector<char> before_live;
    std::vector<int> before_first;
  };
  int K_, M_, W_;
  int n_ = 0;
  bool history_ = false;
  std::vector<float> f_, h_, g_, row_;
  std::vector<char> live_, next_live_;
  std::vector<int> first_, next_first_;  // first reachable memory state of each row
  std::vector<Step> steps_;              // the first n_ are this run's
  std::vector<std::unique_ptr<float[]>> hist_;  // per layer, K * W, left uninitialised
};

}  // namespace weft::planner
