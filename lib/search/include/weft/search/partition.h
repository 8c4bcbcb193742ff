// Stage partition (docs/search.md, "Stage partition"): split layers [0, L) into P contiguous stages
// of at least one layer each, minimising the search objective
//
//   J = sum_s c_s + w * max_s c_s,     w = m - 1 for m micro-batches,
//   c_s = cost(s, a_s, n_s, q_s) + p2p[s][q_s] (s < P-1) + p2p[s-1][q_{s-1}] (s > 0),
//
// where stage s covers [a_s, a_s + n_s) and q_s is the p2p class of its last layer (the boundary's
// p2p is paid by both neighbours, as estimate() charges it). The dynamic program runs over
// (stage, layers placed, class) and keeps, per state, the Pareto front of (max c, sum c) of the
// stages so far, so J is minimised exactly (a bottleneck-only DP is not exact for J).
#pragma once

#include <functional>
#include <limits>
#include <vector>

namespace weft::planner {

struct PartitionProblem {
  int layers = 0;
  int stages = 1;
  double weight_max = 0;  // w
  // p2p[s][q], s = 0 .. P-2: time of boundary s (after stage s) when stage s ends in class q.
  std::vector<std::vector<double>> p2p;
  // Stage s over [a, a+n) ending in class q (q = 0 for the last stage), p2p excluded;
  // +infinity if it does not fit.
  std::function<double(int s, int a, int n, int q)> cost;
  // True when cost(s, a, n, q) does not depend on a (every layer has the same shape): each
  // (s, n, q) is then asked once.
  bool shift_invariant = false;
  // Optional bounds on stage sizes (empty, or one entry per stage; 0 = no bound).
  std::vector<int> n_min, n_max;
  // Partial solutions whose J reaches this are dropped.
  double upper_bound = std::numeric_limits<double>::infinity();
};

struct PartitionResult {
  bool feasible = false;
  double objective = std::numeric_limits<double>::infinity();
  std::vector<int> sizes;          // layers per stage
  std::vector<int> classes;        // class of each stage's last layer (0 for the last stage)
  std::vector<double> stage_cost;  // c_s, p2p included
};

PartitionResult solve_partition(const PartitionProblem& p);

}  // namespace weft::planner
