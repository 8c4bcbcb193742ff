#include "weft/plan/strategy.h"

namespace weft {

const char* to_string(Recompute r) {
  switch (r) {
    case Recompute::kNone: return "none";
    case Recompute::kSelective: return "selective";
    case Recompute::kFull: return "full";
  }
  return "?";
}

const char* to_string(Schedule s) {
  switch (s) {
    case Schedule::kGpipe: return "gpipe";
    case Schedule::k1F1B: return "1f1b";
    case Schedule::kInterleaved: return "interleaved";
  }
  return "?";
}

Result<Recompute> recompute_from_string(const std::string& s) {
  if (s == "none") return Recompute::kNone;
  if (s == "selective") return Recompute::kSelective;
  if (s == "full") return Recompute::kFull;
  return Error{ErrorKind::kBadInput, "recompute: unknown value \"" + s + "\" (expected none, selective or full)"};
}

Result<Schedule> schedule_from_string(const std::string& s) {
  if (s == "gpipe") return Schedule::kGpipe;
  if (s == "1f1b") return Schedule::k1F1B;
  if (s == "interleaved") return Schedule::kInterleaved;
  return Error{ErrorKind::kBadInput, "schedule: unknown value \"" + s + "\" (expected gpipe, 1f1b or interleaved)"};
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
  if (s.recompute == Recompute::kSelective) add("rc=sel");
  if (s.recompute == Recompute::kFull) add("rc=full");
  return out;
}

Json to_json(const LayerStrategy& s) {
  return Json{{"tp", s.tp},   {"sp", s.sp},     {"ulysses", s.ulysses},
              {"cp", s.cp},   {"dp", s.dp},     {"zero", s.zero},
              {"recompute", to_string(s.recompute)}, {"ep", s.ep}};
}

LayerStrategy strategy_from_json(const JsonObj& o) {
  o.reject_unknown({"tp", "sp", "ulysses", "cp", "dp", "zero", "recompute", "ep"});
  LayerStrategy s;
  s.tp = static_cast<int>(o.integer_or("tp", 1));
  s.sp = o.boolean_or("sp", false);
  s.ulysses = static_cast<int>(o.integer_or("ulysses", 1));
  s.cp = static_cast<int>(o.integer_or("cp", 1));
  s.dp = static_cast<int>(o.integer_or("dp", 1));
  s.zero = static_cast<int>(o.integer_or("zero", 0));
  s.ep = static_cast<int>(o.integer_or("ep", 1));
  if (o.has("recompute")) {
    auto r = recompute_from_string(o.str("recompute"));
    if (!r.ok()) o.fail("recompute", r.error().message);
    s.recompute = r.value();
  }
  for (auto [key, v] : {std::pair{"tp", s.tp}, {"ulysses", s.ulysses}, {"cp", s.cp}, {"dp", s.dp}, {"ep", s.ep}})
    if (v < 1) o.fail(key, "must be >= 1, got " + std::to_string(v));
  if (s.zero < 0 || s.zero > 3) o.fail("zero", "must be 0, 1, 2 or 3, got " + std::to_string(s.zero));
  return s;
}

}  // namespace weft
