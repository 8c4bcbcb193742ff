// What each training framework can run, as search restrictions and as a plan check
// (docs/search.md, "Frameworks").
#include <algorithm>
#include <string>
#include <vector>

#include "weft/search/search.h"

namespace weft {

namespace {

struct FrameworkSpace {
  bool ulysses = false, cp = true;
  std::vector<int> zero;
  std::vector<Schedule> schedules;  // empty: all
};

Result<FrameworkSpace> space_of(const std::string& fw) {
  if (fw == "megatron") return FrameworkSpace{false, true, {0, 1, 3}, {}};
  if (fw == "megatron-deepspeed") return FrameworkSpace{true, false, {0, 1}, {Schedule::k1F1B}};
  if (fw == "torchtitan" || fw == "torchtitan-compile") return FrameworkSpace{false, true, {0, 2, 3}, {}};
  return Error{ErrorKind::kBadInput, "--framework: unknown framework \"" + fw + "\""};
}

std::string list(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ", ") + std::to_string(x);
  return s;
}

}  // namespace

Status restrict_to_framework(SearchOptions& opt, const std::string& fw) {
  auto sp = space_of(fw);
  if (!sp.ok()) return sp.error();
  opt.layerwise = false;
  if (!sp->ulysses) opt.allow_ulysses = false;
  if (!sp->cp) opt.allow_cp = false;
  opt.zero_stages = sp->zero;
  if (!sp->schedules.empty()) {
    for (Schedule s : opt.schedules)
      if (std::find(sp->schedules.begin(), sp->schedules.end(), s) == sp->schedules.end())
        return Error{ErrorKind::kBadInput, "--schedule: framework " + fw + " has no " + to_string(s) + " schedule"};
    if (opt.schedules.empty()) opt.schedules = sp->schedules;
  }
  return Status{};
}

Status framework_runs(const Plan& p, const std::string& fw) {
  auto sp = space_of(fw);
  if (!sp.ok()) return sp.error();
  auto fail = [&](const std::string& what) {
    return Error{ErrorKind::kBadInput, what + ": framework " + fw + " cannot run it"};
  };
  if (!sp->schedules.empty() && p.train.pp > 1 &&
      std::find(sp->schedules.begin(), sp->schedules.end(), p.train.schedule) == sp->schedules.end())
    return fail(std::string("schedule ") + to_string(p.train.schedule));
  const LayerStrategy* first = nullptr;
  for (const Stage& st : p.stages) {
    for (size_t i = 0; i < st.layers.size(); ++i) {
      const LayerStrategy& s = st.layers[i];
      const std::string where = "layer " + std::to_string(st.first_layer + static_cast<int>(i));
      if (s.ulysses > 1 && !sp->ulysses) return fail(where + ": ulysses=" + std::to_string(s.ulysses));
      if (s.cp > 1 && !sp->cp) return fail(where + ": cp=" + std::to_string(s.cp));
      if (std::find(sp->zero.begin(), sp->zero.end(), s.zero) == sp->zero.end())
        return fail(where + ": zero=" + std::to_string(s.zero) + " (it offers ZeRO " + list(sp->zero) + ")");
      if (first && !(s == *first)) return fail(where + ": a strategy other than layer 0's (one strategy for all layers)");
      if (!first) first = &s;
    }
  }
  return Status{};
}

}  // namespace weft
