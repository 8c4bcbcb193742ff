// MixedCluster: several node groups, each of one GPU kind (A100 nodes beside H100 nodes), the
// network between the groups, and a slowdown per GPU (a straggler computes FACTOR times slower).
// docs/cluster-spec.md ("Mixed clusters", "Stragglers"). A one-group cluster with no slowdown is an
// ordinary ClusterSpec; everything that plans for one kind of device reads as_uniform().
#pragma once

#include <string>
#include <vector>

#include "weft/core/error.h"
#include "weft/core/json.h"
#include "weft/spec/cluster.h"

namespace weft {

struct MixedCluster {
  std::string name;
  // In rank order: group 0's GPUs are GPUs 0 .. n0-1, group 1's the next n1, and so on. Each group
  // is a homogeneous ClusterSpec (its nodes, GPU and links inside and between its own nodes).
  std::vector<ClusterSpec> groups;
  // Between two groups, per GPU per direction (default: the slowest inter_node link of the groups).
  LinkSpec between;
  // Per GPU (global index), >= 1 slower means its compute takes that many times as long; empty or
  // 1.0 = full speed.
  std::vector<double> slowdown;

  int total_gpus() const;
  int group_of(int gpu) const;        // the group GPU `gpu` belongs to
  int first_gpu(int group) const;     // the global index of a group's first GPU
  double slowdown_of(int gpu) const;  // 1.0 unless set
  // More than one group, or any GPU slowed: plans must weigh devices differently.
  bool heterogeneous() const;
  // The one-kind view a search that ignores the differences plans for: all GPUs, nodes of group 0's
  // size, the slowest group's GPU with the least memory of any group, group 0's links (and the
  // slower of its inter-node link and `between`). Equals groups[0] for one group.
  ClusterSpec as_uniform() const;
  bool operator==(const MixedCluster&) const = default;
};

// One group, no slowdown.
MixedCluster mixed_of(const ClusterSpec& c);
// Groups >= 1, each valid, between.gbps > 0 when there are several groups, slowdown empty or one
// per GPU and each > 0.
Status validate(const MixedCluster& m);
// Always the groups form (docs/cluster-spec.md), one group included.
Json to_json(const MixedCluster& m);
// A cluster file: an ordinary cluster object (one group), or {"name", "groups": [...],
// "between_groups": {"gbps", "latency_us"}} where each group is a cluster object or
// {"preset": NAME, "nodes": N}.
Result<MixedCluster> mixed_cluster_from_json(const Json& j, const std::string& path = "cluster");
// `--cluster` as given: a preset name, a file, or a list of presets with nodes each,
// "a100-80gb:2,h100-80gb:2" (unknown presets and bad node counts are errors naming them).
Result<MixedCluster> load_mixed_cluster(const std::string& arg);
// `--straggler GPU:FACTOR` ("1:2.0": GPU 1 computes at half speed): sets m.slowdown[GPU]. Errors name
// the flag and the numbers (an index out of range, a factor <= 0, a malformed pair).
Status add_straggler(MixedCluster& m, const std::string& arg);

}  // namespace weft
