// What the exports share (export.cc) and the per-framework builders (export_megatron.cc,
// export_deepspeed.cc, export_torchtitan.cc). Internal to lib/report. The builders throw
// InputError on a plan their target cannot run; export.cc turns that into a Result.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "weft/report/export.h"

namespace weft::export_detail {

LayerStrategy without_recompute(LayerStrategy s);

// "layer 3" or "layers 0-11".
std::string layer_range(int a, int b);

// Runs of consecutive layers whose strategies are equal under `key`.
struct Run {
  int first = 0, last = 0;
  LayerStrategy s;
};
std::vector<Run> runs(const Plan& p, const std::function<LayerStrategy(const LayerStrategy&)>& key);

// "layers 0-3: tp4+sp z1; layers 4-7: tp2 dp2 z1" (at most max_runs runs, then "... and N more runs").
std::string describe(const std::vector<Run>& rs, int max_runs);

std::vector<int> stage_layer_counts(const Plan& p);
std::string join_counts(const std::vector<int>& c);  // "2, 3, 3"

// A refusal, "<who>: <msg>": `who` is the framework (its name, weft/cost/framework.h) or the
// export target ("deepspeed").
[[noreturn]] void refuse(const std::string& who, const std::string& msg);
[[noreturn]] void refuse(Framework who, const std::string& msg);

// "; `weft plan --framework <f>` gives a plan this export takes": appended to the refusals of a
// plan's strategy that a search kept to framework f (restrict_to_framework) avoids.
std::string plan_hint(Framework f);
// refuse(f, msg + plan_hint(f)).
[[noreturn]] void refuse_plan(Framework f, const std::string& msg);

// The embedding must share the layers' tensor-parallel degree and ZeRO stage (`tp_why`,
// `zero_why` say why); refused for `who` otherwise, with plan_hint(searched).
void require_embedding_like_layers(const Plan& p, const LayerStrategy& s, Framework who, Framework searched,
                                   const std::string& tp_why, const std::string& zero_why);

// validate(p), as an InputError.
void require_valid(const Plan& p);

// The builders (rules in weft/report/export.h and docs/report.md).
MegatronArgs megatron_or_throw(const Plan& p);
DeepSpeedConfig deepspeed_or_throw(const Plan& p, DeepSpeedTarget target);
TorchtitanConfig torchtitan_or_throw(const Plan& p, bool compile);

}  // namespace weft::export_detail
