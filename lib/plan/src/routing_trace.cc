#include "weft/plan/routing_trace.h"

#include <algorithm>

#include "weft/core/format.h"

namespace weft {

namespace {

constexpr const char* kTraceFormat = "weft-routing-trace";
constexpr const char* kPlacementFormat = "weft-sample-placement";

// counts[l][i][e] from a JSON array of arrays of arrays, each level named in errors.
std::vector<std::vector<std::vector<int64_t>>> read_counts(const JsonObj& o, const std::string& key) {
  const Json& a = o.json().at(key);
  if (!a.is_array()) o.fail(key, "expected an array (one per traced layer)");
  std::vector<std::vector<std::vector<int64_t>>> out;
  for (size_t l = 0; l < a.size(); ++l) {
    const std::string ln = key + "[" + S(static_cast<long long>(l)) + "]";
    if (!a[l].is_array()) o.fail(ln, "expected an array (one per sample)");
    std::vector<std::vector<int64_t>> layer;
    for (size_t i = 0; i < a[l].size(); ++i) {
      const std::string sn = ln + "[" + S(static_cast<long long>(i)) + "]";
      const Json& row = a[l][i];
      if (!row.is_array()) o.fail(sn, "expected an array of integers (one per expert)");
      std::vector<int64_t> r;
      for (size_t e = 0; e < row.size(); ++e) {
        if (!row[e].is_number_integer() && !row[e].is_number_unsigned())
          o.fail(sn + "[" + S(static_cast<long long>(e)) + "]", "expected an integer, got " + row[e].dump());
        const long long x = row[e].get<long long>();
        if (x < 0) o.fail(sn + "[" + S(static_cast<long long>(e)) + "]", "must be >= 0, got " + S(x));
        r.push_back(x);
      }
      layer.push_back(std::move(r));
    }
    out.push_back(std::move(layer));
  }
  return out;
}

// Reads a JSON file and parses it with `from` (errors naming the file); writes one whole or not at all.
template <class T, class From>
Result<T> read_file(const std::string& path, From from) {
  return catch_errors([&]() -> Result<T> {
    const Json j = read_json_file(path);
    return from(j, path);
  });
}
Status write_file(const std::string& path, const Json& j) {
  auto r = catch_errors([&]() -> Result<int> {
    write_json_file(path, j);
    return 0;
  });
  if (!r.ok()) return r.error();
  return {};
}

void require_format(const JsonObj& o, const char* want) {
  const std::string f = o.str_or("format", "");
  if (f != want) o.fail("format", std::string("expected \"") + want + "\", got \"" + f + "\"");
}

}  // namespace

Json to_json(const RoutingTrace& t) {
  Json steps = Json::array();
  for (const RoutingStep& s : t.steps) steps.push_back(Json{{"step", s.step}, {"layers", s.layers}, {"counts", s.counts}});
  return Json{{"format", kTraceFormat}, {"model", t.model},        {"experts", t.experts},
              {"top_k", t.top_k},       {"seq", t.seq},            {"global_batch", t.global_batch},
              {"steps", std::move(steps)}};
}

Result<RoutingTrace> routing_trace_from_json(const Json& j, const std::string& where) {
  return catch_errors([&]() -> Result<RoutingTrace> {
    if (!j.is_object()) throw InputError(where + ": expected a JSON object");
    const JsonObj o(j, where);
    o.reject_unknown({"format", "model", "experts", "top_k", "seq", "global_batch", "steps"});
    require_format(o, kTraceFormat);
    RoutingTrace t;
    t.model = o.str_or("model", "");
    t.experts = static_cast<int>(o.integer("experts"));
    t.top_k = static_cast<int>(o.integer("top_k"));
    t.seq = o.integer("seq");
    t.global_batch = static_cast<int>(o.integer("global_batch"));
    if (t.experts < 1) o.fail("experts", "must be >= 1, got " + S(t.experts));
    if (t.top_k < 1 || t.top_k > t.experts) o.fail("top_k", "must be in 1.." + S(t.experts) + ", got " + S(t.top_k));
    if (t.seq < 1) o.fail("seq", "must be >= 1, got " + S(static_cast<long long>(t.seq)));
    if (t.global_batch < 1) o.fail("global_batch", "must be >= 1, got " + S(t.global_batch));
    const std::vector<JsonObj> steps = o.array_of_obj("steps");
    for (const JsonObj& so : steps) {
      so.reject_unknown({"step", "layers", "counts"});
      RoutingStep s;
      s.step = static_cast<int>(so.integer("step"));
      for (long long l : so.array_of_int("layers")) s.layers.push_back(static_cast<int>(l));
      s.counts = read_counts(so, "counts");
      if (s.counts.size() != s.layers.size())
        so.fail("counts", S(static_cast<long long>(s.counts.size())) + " layers of counts for " +
                              S(static_cast<long long>(s.layers.size())) + " layers");
      for (size_t l = 0; l < s.counts.size(); ++l) {
        const std::string ln = "counts[" + S(static_cast<long long>(l)) + "]";
        if (static_cast<int>(s.counts[l].size()) != t.global_batch)
          so.fail(ln, S(static_cast<long long>(s.counts[l].size())) + " samples, the global batch is " + S(t.global_batch));
        for (size_t i = 0; i < s.counts[l].size(); ++i) {
          const std::string sn = ln + "[" + S(static_cast<long long>(i)) + "]";
          if (static_cast<int>(s.counts[l][i].size()) != t.experts)
            so.fail(sn, S(static_cast<long long>(s.counts[l][i].size())) + " experts, the trace has " + S(t.experts));
          int64_t sum = 0;
          for (int64_t c : s.counts[l][i]) sum += c;
          if (sum != t.seq * t.top_k)
            so.fail(sn, "the sample's copies sum to " + S(static_cast<long long>(sum)) + ", not seq * top_k = " +
                            S(static_cast<long long>(t.seq)) + " * " + S(t.top_k));
        }
      }
      for (size_t l = 1; l < s.layers.size(); ++l)
        if (s.layers[l] <= s.layers[l - 1]) so.fail("layers", "must be ascending");
      t.steps.push_back(std::move(s));
    }
    return t;
  });
}

Result<RoutingTrace> read_routing_trace(const std::string& path) {
  return read_file<RoutingTrace>(path, [](const Json& j, const std::string& w) { return routing_trace_from_json(j, w); });
}

Status write_routing_trace(const std::string& path, const RoutingTrace& t) { return write_file(path, to_json(t)); }

Status check_trace(const RoutingTrace& t, const Plan& p) {
  auto bad = [](const std::string& m) { return Status(Error{ErrorKind::kBadInput, m}); };
  if (t.seq != p.train.seq)
    return bad("trace.seq: " + S(static_cast<long long>(t.seq)) + " tokens per sample, the plan's sequence is " +
               S(p.train.seq));
  if (t.global_batch != p.train.global_batch)
    return bad("trace.global_batch: " + S(t.global_batch) + " samples, the plan's global batch is " +
               S(p.train.global_batch));
  for (size_t k = 0; k < t.steps.size(); ++k)
    for (int l : t.steps[k].layers) {
      const std::string where = "trace.steps[" + S(static_cast<long long>(k)) + "].layers: layer " + S(l);
      if (l < 0 || l >= p.model.num_layers())
        return bad(where + " is outside the model's " + S(p.model.num_layers()) + " layers");
      const MoeSpec& moe = p.model.layer(l).moe;
      if (!moe.enabled()) return bad(where + " is not a MoE layer of " + p.model.name);
      if (moe.experts != t.experts || moe.top_k != t.top_k)
        return bad(where + " has " + S(moe.experts) + " experts, top " + S(moe.top_k) + "; the trace " +
                   S(t.experts) + ", top " + S(t.top_k));
    }
  return {};
}

const std::vector<int>* SamplePlacement::for_step(int step) const {
  for (const PlacedStep& s : steps)
    if (s.step == step) return &s.samples;
  return nullptr;
}

Json to_json(const SamplePlacement& s) {
  Json steps = Json::array();
  for (const PlacedStep& p : s.steps) steps.push_back(Json{{"step", p.step}, {"samples", p.samples}});
  return Json{{"format", kPlacementFormat},
              {"global_batch", s.global_batch},
              {"micro_batches", s.micro_batches},
              {"steps", std::move(steps)}};
}

Result<SamplePlacement> sample_placement_from_json(const Json& j, const std::string& where) {
  return catch_errors([&]() -> Result<SamplePlacement> {
    if (!j.is_object()) throw InputError(where + ": expected a JSON object");
    const JsonObj o(j, where);
    o.reject_unknown({"format", "global_batch", "micro_batches", "steps"});
    require_format(o, kPlacementFormat);
    SamplePlacement s;
    s.global_batch = static_cast<int>(o.integer("global_batch"));
    s.micro_batches = static_cast<int>(o.integer("micro_batches"));
    if (s.global_batch < 1) o.fail("global_batch", "must be >= 1, got " + S(s.global_batch));
    if (s.micro_batches < 1 || s.global_batch % s.micro_batches != 0)
      o.fail("micro_batches", S(s.micro_batches) + " does not divide the global batch of " + S(s.global_batch));
    const int per = s.global_batch / s.micro_batches;
    const std::vector<JsonObj> steps = o.array_of_obj("steps");
    for (size_t k = 0; k < steps.size(); ++k) {
      const JsonObj& so = steps[k];
      so.reject_unknown({"step", "samples"});
      PlacedStep p;
      p.step = static_cast<int>(so.integer("step"));
      for (long long x : so.array_of_int("samples")) p.samples.push_back(static_cast<int>(x));
      if (static_cast<int>(p.samples.size()) != s.global_batch)
        so.fail("samples", S(static_cast<long long>(p.samples.size())) + " positions, the global batch is " +
                               S(s.global_batch));
      std::vector<bool> seen(static_cast<size_t>(s.global_batch), false);
      for (int i = 0; i < s.global_batch; ++i) {
        const int x = p.samples[i];
        if (x < 0 || x >= s.global_batch || seen[x])
          so.fail("samples", "position " + S(i) + " holds sample " + S(x) +
                                 ": not a permutation of the global batch's samples 0.." + S(s.global_batch - 1));
        if (x / per != i / per)
          so.fail("samples", "position " + S(i) + " (micro-batch " + S(i / per) + ") holds sample " + S(x) +
                                 " of micro-batch " + S(x / per) + "; samples move only inside their micro-batch");
        seen[x] = true;
      }
      for (const PlacedStep& q : s.steps)
        if (q.step == p.step) so.fail("step", "step " + S(p.step) + " is placed twice");
      s.steps.push_back(std::move(p));
    }
    return s;
  });
}

Result<SamplePlacement> read_sample_placement(const std::string& path) {
  return read_file<SamplePlacement>(path,
                                    [](const Json& j, const std::string& w) { return sample_placement_from_json(j, w); });
}

Status write_sample_placement(const std::string& path, const SamplePlacement& s) { return write_file(path, to_json(s)); }

Status check_placement(const SamplePlacement& s, const Plan& p) {
  if (s.global_batch != p.train.global_batch || s.micro_batches != p.train.micro_batches)
    return Error{ErrorKind::kBadInput, "placement: global batch " + S(s.global_batch) + " in " + S(s.micro_batches) +
                                           " micro-batches, the plan's is " + S(p.train.global_batch) + " in " +
                                           S(p.train.micro_batches)};
  if (!p.train.dp_micro_batches.empty() || p.train.varlen)
    return Error{ErrorKind::kBadInput, "placement: the plan's micro-batches differ by replica (dp_micro_batches) or "
                                       "by step (varlen); sample placements need even micro-batches"};
  return {};
}

}  // namespace weft
