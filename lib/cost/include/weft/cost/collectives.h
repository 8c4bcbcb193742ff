// Time of collective communication on a two-level cluster (docs/cost-model.md §3).
//
// Alpha-beta model: t = latency + bus_factor(n) * S / B, where S is the buffer size per rank in
// the nccl-tests convention (all-reduce: the reduced buffer; all-gather: the gathered output;
// reduce-scatter: the input; all-to-all: the send buffer; send/recv: the message) and B the bus
// bandwidth of the slowest level the group crosses.
//   all-reduce             bus factor 2(n-1)/n   (ring: reduce-scatter then all-gather)
//   all-gather, reduce-scatter (n-1)/n
//   all-to-all             (n-1)/n, the part leaving the node at the inter-node rate
//   send/recv              1
// A group inside one node runs at the intra-node link rate. A group spanning nodes with k ranks
// on each node is a ring whose intra-node hops run on NVLink and whose node-crossing hops share
// the k ranks' network adapters, so its bus bandwidth is min(B_intra, k * B_inter_per_gpu).
// Latency: one fixed cost per call (launch + synchronisation, measured) plus one intra-node hop per
// sequential ring step and, across nodes, ceil(log2(nodes)) inter-node hops (the tree NCCL uses where latency
// dominates; hierarchical for large groups).
//
// Pure functions; thread-safe.
#pragma once

#include "weft/core/units.h"
#include "weft/spec/cluster.h"

namespace weft {

enum class Collective { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kSendRecv };

const char* to_string(Collective c);

// Where a communication group sits. Ranks are numbered with tensor parallel fastest
// (weft/plan/rank_map.h), so a group of `size` ranks whose members are `stride` ranks apart
// occupies ranks r, r+stride, ..., r+(size-1)*stride.
struct CommGroup {
  int size = 1;             // ranks in the group
  int ranks_per_node = 1;   // members of the group on one node
  // An all-to-all of MoE token copies through a node-deduplicating dispatcher (DeepEP, HybridEP):
  // the copies bound for one remote node that cross to it as one (a token goes once to each node
  // holding any of its experts), each forwarded there over the node's links; 1: every copy crosses
  // on its own (NCCL's all-to-all). Measured collective tables do not apply when it is above 1.
  double copies_per_crossing = 1;
  int nodes() const { return ranks_per_node > 0 ? (size + ranks_per_node - 1) / ranks_per_node : 1; }
  bool spans_nodes() const { return ranks_per_node < size; }
};

// Placement of a group of `size` ranks with rank stride `stride` on cluster c: inside one node
// when size*stride <= gpus_per_node, else spread over nodes with gpus_per_node/stride members on
// each (at least one). size and stride below 1 are treated as 1.
CommGroup place_group(const ClusterSpec& c, int size, int stride);

struct CollectiveOptions {
  // Fixed cost of one collective call (kernel launch, channel set-up, the synchronisation of the
  // ranks), valid for messages of 1 MiB and more. Default: alpha of the alpha-beta fit of vTrain's
  // measured A100 all-reduce tables (reference/vtrain/allreduce_a100, 2-8 GPUs, 1 MiB-1 GiB):
  // 62 us; Galvatron's measured A100 all-reduce at 1 MB (reference/galvatron/sp_time_*) is 70-80 us.
  // With per_step_latency (default) the intra-node hop latency of the cluster spec is charged once
  // per sequential ring step (2(r-1) for an all-reduce over r ranks of a node, r-1 for all-gather
  // and reduce-scatter): the alphas of the same tables grow from 42 us (2 GPUs) to 85 us (8 GPUs),
  // 3.55 us per ring step, matching the A100 preset's 3.4 us NVLink hop; their common part is
  // 42.2 - 2 * 3.4 = 35 us. Without it (older behaviour) one hop is charged and 62 us fits all
  // group sizes on average.
  double call_latency_us = 35.0;
  bool per_step_latency = true;
  // Achieved NCCL bus bandwidth as a fraction of the link rate in ClusterSpec (which states the
  // vendor's per-direction figure). Intra-node: 218 GB/s fitted on the A100 tables above, over
  // NVLink3's 300 GB/s = 0.73 (nccl-tests issue #149 reports ~200 GB/s and NCCL issue #1048
  // 232 GB/s on 8 A100). Inter-node: NCCL all-reduce over 4x HDR InfiniBand (100 GB/s per node)
  // reaches 85-91 GB/s (nccl-tests issues #100, #119; NCCL issue #1048): 0.87.
  double intra_efficiency = 0.73;
  double inter_efficiency = 0.87;
};

// Bus-bandwidth factor of collective k on n ranks (0 for n <= 1, except send/recv = 1).
double bus_factor(Collective k, int n);

// Effective bus bandwidth of group g on cluster c.
BytesPerSecond group_bandwidth(const CommGroup& g, const ClusterSpec& c, const CollectiveOptions& o = {});

// Time of one collective of kind k with per-rank buffer `buffer` over group g. Zero for a group of
// one rank (send/recv: a message to a rank on another node when g spans nodes, else in the node).
Seconds collective_time(Collective k, Bytes buffer, const CommGroup& g, const ClusterSpec& c,
                        const CollectiveOptions& o = {});

// Point-to-point message between two ranks, inside a node or across nodes.
Seconds p2p_time(Bytes message, bool crosses_nodes, const ClusterSpec& c, const CollectiveOptions& o = {});

}  // namespace weft
