#include "weft/plan/strategy.h"

#include "weft/core/enum_names.h"

namespace weft {

namespace {

constexpr EnumName<Recompute> kRecomputeNames[] = {
    {Recompute::kNone, "none"}, {Recompute::kSelective, "selective"}, {Recompute::kFull, "full"}};
constexpr EnumName<Schedule> kScheduleNames[] = {
    {Schedule::kGpipe, "gpipe"}, {Schedule::k1F1B, "1f1b"}, {Schedule::kInterleaved, "interleaved"},
    {Schedule::kZbH1, "zb-h1"}, {Schedule::kZbV, "zb-v"}};

}  // namespace

const char* to_string(Recompute r) { return enum_name(kRecomputeNames, r); }
const char* to_string(Schedule s) { return enum_name(kScheduleNames, s); }

Result<Recompute> recompute_from_string(const std::string& s) {
  return enum_from_name(kRecomputeNames, s, "recompute");
}

Result<Schedule> schedule_from_string(const std::string& s) { return enum_from_name(kScheduleNames, s, "schedule"); }

namespace {
constexpr EnumName<MoeDispatcher> kDispatcherNames[] = {
    {MoeDispatcher::kAllToAll, "alltoall"}, {MoeDispatcher::kDeepEp, "deepep"}, {MoeDispatcher::kHybridEp, "hybridep"}};
}  // namespace

const char* to_string(MoeDispatcher d) { return enum_name(kDispatcherNames, d); }
Result<MoeDispatcher> moe_dispatcher_from_string(const std::string& s) {
  return enum_from_name(kDispatcherNames, s, "MoE dispatcher");
}

std::string label(const LayerStrategy& s) {
  std::string out;
  auto add = [&](const std::string& x) { out += (out.empty() ? "" : " ") + x; };
  if (s.tp > 1) add("tp" + std::to_string(s.tp) + (s.sp ? "+sp" : ""));
  if (s.ulysses > 1) add("uly" + std::to_string(s.ulysses));
  if (s.cp > 1) add("cp" + std::to_string(s.cp));
  if (s.dp > 1 || out.empty()) add("dp" + std::to_string(s.dp));
  if (s.zero > 0) add("z" + std::to_string(s.zero));
  if (s.ep > 1) add("ep" + std::to_string(s.ep));
  if (s.expert_tp() != s.tp) add("etp" + std::to_string(s.expert_tp()));
  if (s.recompute == Recompute::kSelective) add("rc=sel");
  if (s.recompute == Recompute::kFull) add("rc=full");
  return out;
}

Json to_json(const LayerStrategy& s) {
  Json j{{"tp", s.tp},   {"sp", s.sp},     {"ulysses", s.ulysses},
         {"cp", s.cp},   {"dp", s.dp},     {"zero", s.zero},
         {"recompute", to_string(s.recompute)}, {"ep", s.ep}};
  if (s.expert_tp() != s.tp) j["etp"] = s.expert_tp();  // absent: as tp
  return j;
}

LayerStrategy strategy_from_json(const JsonObj& o) {
  o.reject_unknown({"tp", "sp", "ulysses", "cp", "dp", "zero", "recompute", "ep", "etp"});
  LayerStrategy s;
  s.tp = static_cast<int>(o.integer_or("tp", 1));
  s.sp = o.boolean_or("sp", false);
  s.ulysses = static_cast<int>(o.integer_or("ulysses", 1));
  s.cp = static_cast<int>(o.integer_or("cp", 1));
  s.dp = static_cast<int>(o.integer_or("dp", 1));
  s.zero = static_cast<int>(o.integer_or("zero", 0));
  s.ep = static_cast<int>(o.integer_or("ep", 1));
  s.etp = static_cast<int>(o.integer_or("etp", s.tp));
  if (o.has("recompute")) {
    auto r = recompute_from_string(o.str("recompute"));
    if (!r.ok()) o.fail("recompute", r.error().message);
    s.recompute = r.value();
  }
  for (auto [key, v] :
       {std::pair{"tp", s.tp}, {"ulysses", s.ulysses}, {"cp", s.cp}, {"dp", s.dp}, {"ep", s.ep}, {"etp", s.etp}})
    if (v < 1) o.fail(key, "must be >= 1, got " + std::to_string(v));
  if (s.etp == s.tp) s.etp = 0;  // one spelling of "as tp", so that equal strategies compare equal
  if (s.zero < 0 || s.zero > 3) o.fail("zero", "must be 0, 1, 2 or 3, got " + std::to_string(s.zero));
  return s;
}

}  // namespace weft
