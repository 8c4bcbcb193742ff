#include "weft/calibration/model_profile.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "profile_file.h"
#include "weft/core/format.h"

namespace weft {

namespace {

constexpr const char* kFormat = "weft-model-profile";

using Triple = std::array<double, 3>;  // forward_s, backward_s, activation_bytes

// One-dimensional rule of docs/profiles.md: linear between neighbours inside the measured range,
// proportional to the nearest end outside it. `pts` ascending in x, distinct x.
Triple along(const std::vector<std::pair<double, Triple>>& pts, double x, bool& extrapolated) {
  const auto& lo = pts.front();
  const auto& hi = pts.back();
  auto scaled = [&](const std::pair<double, Triple>& p) {
    extrapolated = true;
    Triple t = p.second;
    for (double& v : t) v *= x / p.first;
    return t;
  };
  if (x < lo.first) return scaled(lo);
  if (x > hi.first) return scaled(hi);
  for (size_t i = 0; i + 1 < pts.size(); ++i) {
    const auto& a = pts[i];
    const auto& b = pts[i + 1];
    if (x >= a.first && x <= b.first) {
      const double u = (x - a.first) / (b.first - a.first);
      Triple t;
      for (int k = 0; k < 3; ++k) t[k] = a.second[k] + u * (b.second[k] - a.second[k]);
      return t;
    }
  }
  return lo.second;  // a single point with x equal to it
}

Triple triple(const PhaseSample& s) { return {s.forward_s, s.backward_s, s.activation_bytes}; }

Json sample_json(const PhaseSample& s, bool with_recompute) {
  Json j{{"tp", s.tp}};
  if (with_recompute) j["recompute"] = to_string(s.recompute);
  j["zero"] = s.zero;
  j["micro_batch"] = s.micro_batch;
  j["seq"] = s.seq;
  j["forward_s"] = s.forward_s;
  j["backward_s"] = s.backward_s;
  j["activation_bytes"] = s.activation_bytes;
  return j;
}

PhaseSample sample_from(const JsonObj& o, bool with_recompute) {
  if (with_recompute) {
    o.reject_unknown({"tp", "recompute", "zero", "micro_batch", "seq", "forward_s", "backward_s", "activation_bytes"});
  } else {
    o.reject_unknown({"tp", "zero", "micro_batch", "seq", "forward_s", "backward_s", "activation_bytes"});
  }
  PhaseSample s;
  s.tp = static_cast<int>(o.integer("tp"));
  if (with_recompute) {
    auto r = recompute_from_string(o.str("recompute"));
    if (!r.ok()) o.fail("recompute", r.error().message);
    s.recompute = r.value();
  }
  s.zero = static_cast<int>(o.integer_or("zero", 0));
  s.micro_batch = static_cast<int>(o.integer("micro_batch"));
  s.seq = static_cast<int>(o.integer("seq"));
  s.forward_s = o.number("forward_s");
  s.backward_s = o.number("backward_s");
  s.activation_bytes = o.number("activation_bytes");
  return s;
}

Status check_samples(const std::vector<PhaseSample>& v, const std::string& at) {
  auto fail = [](const std::string& m) { return Status(Error{ErrorKind::kBadInput, m}); };
  std::set<std::tuple<int, int, int, int, int>> seen;
  for (size_t i = 0; i < v.size(); ++i) {
    const PhaseSample& s = v[i];
    const std::string p = at + "[" + std::to_string(i) + "]";
    if (s.tp < 1) return fail(p + ".tp: must be >= 1, got " + std::to_string(s.tp));
    if (s.zero != 0 && s.zero != 3) return fail(p + ".zero: must be 0 or 3, got " + std::to_string(s.zero));
    if (s.micro_batch < 1) return fail(p + ".micro_batch: must be >= 1, got " + std::to_string(s.micro_batch));
    if (s.seq < 1) return fail(p + ".seq: must be >= 1, got " + std::to_string(s.seq));
    if (!(s.forward_s > 0) || !std::isfinite(s.forward_s))
      return fail(p + ".forward_s: must be positive, got " + num(s.forward_s));
    if (!(s.backward_s > 0) || !std::isfinite(s.backward_s))
      return fail(p + ".backward_s: must be positive, got " + num(s.backward_s));
    if (!(s.activation_bytes >= 0) || !std::isfinite(s.activation_bytes))
      return fail(p + ".activation_bytes: must be >= 0, got " + num(s.activation_bytes));
    if (!seen.insert({s.tp, static_cast<int>(s.recompute), s.zero, s.micro_batch, s.seq}).second)
      return fail(p + ": a second sample for tp " + std::to_string(s.tp) + ", recompute " + to_string(s.recompute) +
                  ", zero " + std::to_string(s.zero) + ", micro_batch " + std::to_string(s.micro_batch) + ", seq " +
                  std::to_string(s.seq));
  }
  return {};
}

}  // namespace

std::optional<PhaseCost> interpolate(const std::vector<PhaseSample>& samples, int tp, Recompute rc, double micro_batch,
                                     double seq, int zero) {
  std::map<int, std::vector<std::pair<double, Triple>>> by_seq;
  for (const auto& s : samples) {
    if (s.tp != tp || s.recompute != rc || s.zero != zero) continue;
    by_seq[s.seq].push_back({static_cast<double>(s.micro_batch), triple(s)});
  }
  if (by_seq.empty()) return std::nullopt;
  bool extrapolated = false;
  std::vector<std::pair<double, Triple>> along_seq;
  for (auto& [sq, pts] : by_seq) {
    std::sort(pts.begin(), pts.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    along_seq.push_back({static_cast<double>(sq), along(pts, micro_batch, extrapolated)});
  }
  const Triple t = along(along_seq, seq, extrapolated);
  PhaseCost c;
  c.forward_s = t[0];
  c.backward_s = t[1];
  c.activation_bytes = t[2];
  c.extrapolated = extrapolated;
  return c;
}

const LayerProfile* ModelProfile::find(const LayerShape& shape, const ModelSpec& m) const {
  if (m.norm != model.norm || m.position != model.position) return nullptr;
  for (const auto& l : layers)
    if (l.shape == shape) return &l;
  return nullptr;
}

bool ModelProfile::covers_edges(const ModelSpec& m) const {
  return m.vocab == model.vocab && m.hidden == model.hidden && m.norm == model.norm &&
         m.position == model.position && m.tied_embeddings == model.tied_embeddings;
}

Status validate(const ModelProfile& p) {
  auto fail = [](const std::string& m) { return Status(Error{ErrorKind::kBadInput, m}); };
  if (p.format_version != kModelProfileVersion)
    return fail("format_version: expected " + std::to_string(kModelProfileVersion) + ", got " +
                std::to_string(p.format_version));
  if (p.threads < 1) return fail("threads: must be >= 1, got " + std::to_string(p.threads));
  if (!(p.runtime.optimizer_s_per_param >= 0))
    return fail("runtime.optimizer_s_per_param: must be >= 0, got " + num(p.runtime.optimizer_s_per_param));
  if (!(p.runtime.state_bytes_per_param >= 0))
    return fail("runtime.state_bytes_per_param: must be >= 0, got " + num(p.runtime.state_bytes_per_param));
  for (size_t i = 0; i < p.layers.size(); ++i) {
    Status s = check_samples(p.layers[i].samples, "layers[" + std::to_string(i) + "].samples");
    if (!s.ok()) return s;
  }
  if (Status s = check_samples(p.embedding, "embedding"); !s.ok()) return s;
  if (Status s = check_samples(p.head, "head"); !s.ok()) return s;
  return {};
}

Json to_json(const ModelProfile& p) {
  Json j;
  j["format"] = kFormat;
  j["format_version"] = p.format_version;
  j["device"] = p.device;
  j["device_name"] = p.device_name;
  j["hostname"] = p.hostname;
  j["threads"] = p.threads;
  j["created"] = p.created;
  j["model"] = to_json(p.model);
  j["runtime"] = Json{{"grad_sync_overlaps_backward", p.runtime.grad_sync_overlaps_backward},
                      {"optimizer_s_per_param", p.runtime.optimizer_s_per_param},
                      {"state_bytes_per_param", p.runtime.state_bytes_per_param},
                      {"dtype", p.runtime.dtype}};
  Json layers = Json::array();
  for (const auto& l : p.layers) {
    Json s = Json::array();
    for (const auto& x : l.samples) s.push_back(sample_json(x, true));
    layers.push_back(Json{{"group", l.group}, {"samples", s}});
  }
  j["layers"] = layers;
  Json e = Json::array(), h = Json::array();
  for (const auto& x : p.embedding) e.push_back(sample_json(x, false));
  for (const auto& x : p.head) h.push_back(sample_json(x, false));
  j["embedding"] = e;
  j["head"] = h;
  j["skipped"] = p.skipped;
  return j;
}

Result<ModelProfile> model_profile_from_json(const Json& j, const std::string& path) {
  return parse_profile<ModelProfile>(path, [&]() -> Result<ModelProfile> {
    JsonObj o(j, "");
    o.reject_unknown({"format", "format_version", "device", "device_name", "hostname", "threads", "created", "model",
                      "runtime", "layers", "embedding", "head", "skipped"});
    const std::string fmt = o.str("format");
    if (fmt != kFormat) o.fail("format", "expected \"" + std::string(kFormat) + "\", got \"" + fmt + "\"");
    ModelProfile p;
    p.format_version = static_cast<int>(o.integer("format_version"));
    if (p.format_version != kModelProfileVersion)
      o.fail("format_version", "this weft reads version " + std::to_string(kModelProfileVersion) + ", got " +
                                   std::to_string(p.format_version));
    p.device = o.str("device");
    p.device_name = o.str_or("device_name", "");
    p.hostname = o.str_or("hostname", "");
    p.threads = static_cast<int>(o.integer_or("threads", 1));
    p.created = o.str_or("created", "");
    {
      (void)o.obj("model");  // type check with the field's name
      auto m = model_from_json(j.at("model"), "model");
      if (!m.ok()) return m.error();
      p.model = std::move(m).value();
    }
    if (o.has("runtime")) {
      JsonObj ro = o.obj("runtime");
      ro.reject_unknown({"grad_sync_overlaps_backward", "optimizer_s_per_param", "state_bytes_per_param", "dtype"});
      p.runtime.grad_sync_overlaps_backward = ro.boolean_or("grad_sync_overlaps_backward", false);
      p.runtime.optimizer_s_per_param = ro.number_or("optimizer_s_per_param", 0);
      p.runtime.state_bytes_per_param = ro.number_or("state_bytes_per_param", 0);
      p.runtime.dtype = ro.str_or("dtype", "fp32");
    }
    for (const JsonObj& lo : o.array_of_obj("layers")) {
      lo.reject_unknown({"group", "samples"});
      LayerProfile l;
      l.group = lo.str("group");
      bool found = false;
      std::string names;
      for (const auto& g : p.model.groups) {
        names += (names.empty() ? "" : ", ") + g.name;
        if (g.name == l.group) l.shape = g.shape, found = true;
      }
      if (!found) lo.fail("group", "no layer group \"" + l.group + "\" in the profile's model (groups: " + names + ")");
      for (const JsonObj& so : lo.array_of_obj("samples")) l.samples.push_back(sample_from(so, true));
      p.layers.push_back(std::move(l));
    }
    for (const JsonObj& so : o.array_of_obj("embedding")) p.embedding.push_back(sample_from(so, false));
    for (const JsonObj& so : o.array_of_obj("head")) p.head.push_back(sample_from(so, false));
    if (o.has("skipped")) p.skipped = o.array_of_str("skipped");
    return p;
  });
}

Result<ModelProfile> read_model_profile(const std::string& path) {
  return read_profile_file<ModelProfile>(path, model_profile_from_json);
}

Status write_model_profile(const std::string& path, const ModelProfile& p) { return write_validated_profile(path, p); }

}  // namespace weft
