// What the exports share, the public entry points and framework_export (rules in
// weft/report/export.h and docs/report.md; the builders are in export_<framework>.cc).
#include "weft/report/export.h"

#include <algorithm>

#include "export_common.h"
#include "weft/core/format.h"

namespace weft {

namespace export_detail {

LayerStrategy without_recompute(LayerStrategy s) {
  s.recompute = Recompute::kNone;
  return s;
}

std::string layer_range(int a, int b) { return a == b ? "layer " + S(a) : "layers " + S(a) + "-" + S(b); }

std::vector<Run> runs(const Plan& p, const std::function<LayerStrategy(const LayerStrategy&)>& key) {
  std::vector<Run> out;
  const int L = p.model.num_layers();
  for (int i = 0; i < L; ++i) {
    LayerStrategy k = key(p.layer_strategy(i));
    if (!out.empty() && out.back().s == k) {
      out.back().last = i;
    } else {
      out.push_back({i, i, k});
    }
  }
  return out;
}

std::string describe(const std::vector<Run>& rs, int max_runs) {
  std::string out;
  const int n = static_cast<int>(rs.size());
  for (int i = 0; i < std::min(n, max_runs); ++i)
    out += (i ? "; " : "") + layer_range(rs[i].first, rs[i].last) + ": " + label(rs[i].s);
  if (n > max_runs) out += "; ... and " + S(n - max_runs) + " more runs";
  return out;
}

std::vector<int> stage_layer_counts(const Plan& p) {
  std::vector<int> c;
  for (const auto& st : p.stages) c.push_back(st.num_layers());
  return c;
}

std::string join_counts(const std::vector<int>& c) {
  std::string out;
  for (size_t i = 0; i < c.size(); ++i) out += (i ? ", " : "") + S(c[i]);
  return out;
}

void refuse(const std::string& who, const std::string& msg) { throw InputError(who + ": " + msg); }
void refuse(Framework who, const std::string& msg) { refuse(std::string(to_string(who)), msg); }

std::string plan_hint(Framework f) {
  return std::string("; `weft plan --framework ") + to_string(f) + "` gives a plan this export takes";
}

void refuse_plan(Framework f, const std::string& msg) { refuse(f, msg + plan_hint(f)); }

void require_embedding_like_layers(const Plan& p, const LayerStrategy& s, Framework who, Framework searched,
                                   const std::string& tp_why, const std::string& zero_why) {
  if (p.embedding.tp != s.tp)
    refuse(who, "embedding.tp=" + S(p.embedding.tp) + " but the layers use tp=" + S(s.tp) + "; " + tp_why +
                    plan_hint(searched));
  if (p.embedding.zero != s.zero)
    refuse(who, "embedding.zero=" + S(p.embedding.zero) + " but the layers use zero=" + S(s.zero) + "; " + zero_why +
                    plan_hint(searched));
}

void require_valid(const Plan& p) {
  Status v = validate(p);
  if (!v.ok()) throw InputError(v.error().message);
}

}  // namespace export_detail

std::string MegatronArgs::text() const {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

Result<MegatronArgs> megatron_args(const Plan& p) {
  return catch_errors([&]() -> Result<MegatronArgs> { return export_detail::megatron_or_throw(p); });
}

Result<DeepSpeedConfig> deepspeed_config(const Plan& p, DeepSpeedTarget target) {
  return catch_errors([&]() -> Result<DeepSpeedConfig> { return export_detail::deepspeed_or_throw(p, target); });
}

Result<TorchtitanConfig> torchtitan_config(const Plan& p) {
  return catch_errors([&]() -> Result<TorchtitanConfig> { return export_detail::torchtitan_or_throw(p, false); });
}

Result<FrameworkExport> framework_export(const Plan& p, Framework f) {
  switch (f) {
    case Framework::kMegatron: {
      auto a = megatron_args(p);
      if (!a.ok()) return a.error();
      return FrameworkExport{a->text(), a->notes};
    }
    case Framework::kMegatronDeepSpeed: {
      auto c = deepspeed_config(p, DeepSpeedTarget::kMegatronDeepSpeed);
      if (!c.ok()) return c.error();
      return FrameworkExport{c->config.dump(2) + "\n", c->notes};
    }
    case Framework::kTorchtitan:
    case Framework::kTorchtitanCompile: {
      auto c = catch_errors([&]() -> Result<TorchtitanConfig> {
        return export_detail::torchtitan_or_throw(p, f == Framework::kTorchtitanCompile);
      });
      if (!c.ok()) return c.error();
      return FrameworkExport{c->toml, c->notes};
    }
    default: break;  // weft's own runtime: `weft train` reads the plan file itself
  }
  return Error{ErrorKind::kBadInput, std::string("framework: ") + to_string(f) +
                                         " has no export; weft's own runtime (weft train) reads the plan file itself"};
}

std::string describe_layer_runs(const Plan& p, int max_runs) {
  using namespace export_detail;
  return describe(runs(p, [](const LayerStrategy& s) { return s; }), max_runs);
}

}  // namespace weft
