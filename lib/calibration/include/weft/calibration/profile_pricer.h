// The hardware profile's collective tables as a CollectivePricer (weft/cost/pricing.h), for the
// calibrated cost model: a call whose kind, group size and placement the profile measured is read
// from its table (docs/profiles.md "Interpolation of a collective table"); any other falls back to
// the analytic formula of weft/cost/collectives.h and, given a notes sink, says so in one line.
//
// Pure when built without a notes sink (then safe to share between threads); with one, price()
// appends to it and the caller owns the synchronisation.
#pragma once

#include <string>
#include <vector>

#include "weft/calibration/hardware_profile.h"
#include "weft/cost/pricing.h"

namespace weft {

class ProfilePricer final : public CollectivePricer {
 public:
  // hw may be null (no hardware profile: every call analytic, on cluster c with options o). hw, c
  // and o are kept by reference and must outlive the pricer; so must `notes` when not null.
  ProfilePricer(const HardwareProfile* hw, const ClusterSpec& c, const CollectiveOptions& o,
                std::vector<std::string>* notes = nullptr)
      : hw_(hw), c_(c), o_(o), notes_(notes) {}

  Seconds price(Collective k, Bytes bytes, const CommGroup& g) const override { return price(k, bytes, g, nullptr); }
  // The same; `measured` (if not null) tells whether a table priced it (true when there is nothing
  // to price: an empty buffer, or a group of one rank).
  Seconds price(Collective k, Bytes bytes, const CommGroup& g, bool* measured) const;

  // Appends `line` to the notes sink, if there is one.
  void note(const std::string& line) const {
    if (notes_) notes_->push_back(line);
  }

 private:
  const HardwareProfile* hw_;
  const ClusterSpec& c_;
  const CollectiveOptions& o_;
  std::vector<std::string>* notes_;
};

}  // namespace weft
