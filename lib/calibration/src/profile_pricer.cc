#include "weft/calibration/profile_pricer.h"

namespace weft {

Seconds ProfilePricer::price(Collective k, Bytes bytes, const CommGroup& g, bool* measured) const {
  if (measured) *measured = false;
  if (bytes.value() <= 0 || (k != Collective::kSendRecv && g.size <= 1)) {
    if (measured) *measured = true;  // nothing to price
    return Seconds(0);
  }
  const Placement pl = g.spans_nodes() ? Placement::kInterNode : Placement::kIntraNode;
  const int size = k == Collective::kSendRecv ? 2 : g.size;
  // A node-deduplicating MoE dispatch is not NCCL's all-to-all the tables measured.
  const bool deduplicated = k == Collective::kAllToAll && g.spans_nodes() && g.copies_per_crossing > 1;
  if (hw_ && !deduplicated) {
    if (const CollectiveEntry* e = hw_->find(k, size, pl, k == Collective::kSendRecv ? 0 : g.ranks_per_node)) {
      if (measured) *measured = true;
      return e->time(bytes);
    }
  }
  note(std::string(profile_name(k)) + " over " + std::to_string(size) + " ranks (" + to_string(pl) +
       "): analytic, " + (deduplicated ? "a node-deduplicating MoE dispatch"
                                       : hw_ ? "not in the hardware profile" : "no hardware profile"));
  return collective_time(k, bytes, g, c_, o_);
}

}  // namespace weft
