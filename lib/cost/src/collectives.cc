#include "weft/cost/collectives.h"

#include <algorithm>
#include <cmath>

namespace weft {

const char* to_string(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "all-reduce";
    case Collective::kAllGather: return "all-gather";
    case Collective::kReduceScatter: return "reduce-scatter";
    case Collective::kAllToAll: return "all-to-all";
    case Collective::kSendRecv: return "send/recv";
  }
  return "?";
}

CommGroup place_group(const ClusterSpec& c, int size, int stride) {
  CommGroup g;
  g.size = std::max(1, size);
  stride = std::max(1, stride);
  const int per_node = std::max(1, c.gpus_per_node);
  if (static_cast<long long>(g.size) * stride <= per_node) {
    g.ranks_per_node = g.size;
  } else {
    g.ranks_per_node = std::max(1, std::min(g.size, per_node / stride));
  }
  return g;
}

double bus_factor(Collective k, int n) {
  if (k == Collective::kSendRecv) return 1.0;
  if (n <= 1) return 0.0;
  const double f = static_cast<double>(n - 1) / n;
  return k == Collective::kAllReduce ? 2.0 * f : f;
}

BytesPerSecond group_bandwidth(const CommGroup& g, const ClusterSpec& c, const CollectiveOptions& o) {
  const double intra = c.intra.gbps * o.intra_efficiency;
  if (!g.spans_nodes()) return GBps(intra);
  const double inter = c.inter.gbps * o.inter_efficiency * g.ranks_per_node;
  return GBps(std::min(intra, inter));
}

namespace {

// Sequential intra-node ring steps of collective k over a group with `r` ranks on each node: a ring
// all-reduce is a reduce-scatter and an all-gather of r - 1 steps each; all-gather and
// reduce-scatter take r - 1 steps; an all-to-all exchanges with all peers at once (one step).
double ring_steps(Collective k, int r) {
  if (r <= 1) return 1;
  switch (k) {
    case Collective::kAllReduce: return 2.0 * (r - 1);
    case Collective::kAllGather:
    case Collective::kReduceScatter: return r - 1.0;
    default: return 1;
  }
}

// Latency of one call of collective k on group g: the fixed call cost, the intra-node hop latency
// once per sequential ring step (or once, with per_step_latency off), and a tree of inter-node hops
// when the group spans nodes.
Seconds latency(Collective k, const CommGroup& g, const ClusterSpec& c, const CollectiveOptions& o) {
  const double steps = o.per_step_latency ? ring_steps(k, g.ranks_per_node) : 1.0;
  double t = o.call_latency_us + steps * c.intra.latency_us;
  if (g.spans_nodes()) t += std::ceil(std::log2(static_cast<double>(g.nodes()))) * c.inter.latency_us;
  return us(t);
}

}  // namespace

Seconds collective_time(Collective k, Bytes buffer, const CommGroup& g, const ClusterSpec& c,
                        const CollectiveOptions& o) {
  if (k == Collective::kSendRecv) return p2p_time(buffer, g.spans_nodes(), c, o);
  if (g.size <= 1 || buffer.value() <= 0) return Seconds(0);
  const int n = g.size;
  if (k == Collective::kAllToAll && g.spans_nodes()) {
    // Every rank sends S/n to each peer: (k-1)/n of S stays on the node over NVLink, (n-k)/n leaves
    // it through the rank's own network adapter; both proceed at once. A node-deduplicating
    // dispatcher (copies_per_crossing c > 1) sends a c-th of the leaving bytes, and the receiving
    // node forwards the copies bound for its other k-1 ranks over NVLink.
    const double s = buffer.value();
    const int k_node = g.ranks_per_node;
    const double c_cross = std::max(1.0, g.copies_per_crossing);
    const double leaving = s * (n - k_node) / n;
    const double forwarded = c_cross > 1 ? leaving * (k_node - 1) / k_node : 0.0;
    const double t_intra = (s * (k_node - 1) / n + forwarded) / (c.intra.gbps * o.intra_efficiency * 1e9);
    const double t_inter = leaving / c_cross / (c.inter.gbps * o.inter_efficiency * 1e9);
    return latency(k, g, c, o) + Seconds(std::max(t_intra, t_inter));
  }
  const BytesPerSecond bw = group_bandwidth(g, c, o);
  if (bw.value() <= 0) return Seconds(0);
  return latency(k, g, c, o) + (buffer * bus_factor(k, n)) / bw;
}

Seconds p2p_time(Bytes message, bool crosses_nodes, const ClusterSpec& c, const CollectiveOptions& o) {
  if (message.value() <= 0) return Seconds(0);
  const double gbps = crosses_nodes ? c.inter.gbps * o.inter_efficiency : c.intra.gbps * o.intra_efficiency;
  if (gbps <= 0) return Seconds(0);
  const double lat = o.call_latency_us + (crosses_nodes ? c.inter.latency_us : c.intra.latency_us);
  return us(lat) + message / GBps(gbps);
}

}  // namespace weft
