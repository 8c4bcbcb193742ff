// Every export is checked against its target's own names at the release it is written for
// (data/reference/<framework>-args, each with its source in a README): a Megatron-LM flag, a
// DeepSpeed key, a Megatron-DeepSpeed flag or a torchtitan TOML key that the release does not
// know, a switch given a value, or a value outside the listed ones fails. So do the start-up
// checks of those releases that an export can break (the READMEs list them with where they are).
// The plans: hand-built ones for each branch of the exports, and the best plans of a search kept
// to each framework for dense and MoE presets.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "report_test_util.h"
#include "weft/cost/analytic.h"
#include "weft/report/export.h"
#include "weft/search/search.h"
#include "weft/spec/hf_config.h"
#include "weft/spec/presets.h"

namespace weft {
namespace {

using namespace report_test;

const std::string kRef = std::string(WEFT_DATA_DIR) + "/reference/";

std::vector<std::string> words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) out.push_back(l);
  return out;
}

// A name from a reference list: switch or value (flags), its type (torchtitan keys), the listed values.
struct Name {
  std::string kind;
  std::set<std::string> values;
};
using Names = std::map<std::string, Name>;

Names load_names(const std::vector<std::string>& files) {
  Names out;
  for (const auto& f : files) {
    for (const auto& l : lines_of(kRef + f)) {
      auto w = words(l);
      Name n;
      if (w.size() > 1) n.kind = w[1];
      n.values.insert(w.begin() + std::min<size_t>(2, w.size()), w.end());
      out[w[0]] = n;
    }
  }
  return out;
}

const Names& megatron_flags() {
  static const Names n = load_names({"megatron-args/arguments.txt"});
  return n;
}
const Names& megatron_deepspeed_flags() {
  static const Names n = load_names({"megatron-deepspeed-args/arguments.txt", "deepspeed-args/arguments.txt"});
  return n;
}
const Names& deepspeed_keys() {
  static const Names n = load_names({"deepspeed-args/config_keys.txt"});
  return n;
}
const Names& torchtitan_keys() {
  static const Names n = load_names({"torchtitan-args/job_config.txt"});
  return n;
}

// Command-line flags as the target's argparse reads them: flag -> values.
using Flags = std::map<std::string, std::vector<std::string>>;

// Parses `--a 1 --b --c x y` against `names`; a problem for each unknown flag, switch with a
// value, flag without one, value not listed or flag given twice.
Flags parse_flags(const std::vector<std::string>& tokens, const Names& names, std::vector<std::string>& problems) {
  Flags out;
  std::string cur;
  for (const auto& t : tokens) {
    if (t.rfind("--", 0) == 0) {
      cur = t;
      if (!names.count(t)) problems.push_back(t + ": not a flag of the release");
      if (out.count(t)) problems.push_back(t + ": given twice");
      out[t];
      continue;
    }
    if (cur.empty()) {
      problems.push_back("\"" + t + "\" before any flag");
      continue;
    }
    out[cur].push_back(t);
  }
  for (const auto& [f, vals] : out) {
    auto it = names.find(f);
    if (it == names.end()) continue;
    if (it->second.kind == "switch" && !vals.empty()) problems.push_back(f + ": a switch, given a value");
    if (it->second.kind == "value" && vals.empty()) problems.push_back(f + ": needs a value");
    for (const auto& v : vals)
      if (!it->second.values.empty() && !it->second.values.count(v))
        problems.push_back(f + " " + v + ": not one of its values");
  }
  return out;
}

long long num(const Flags& f, const std::string& k, long long dflt) {
  auto it = f.find(k);
  return it == f.end() || it->second.empty() ? dflt : std::atoll(it->second[0].c_str());
}
bool has(const Flags& f, const std::string& k) { return f.count(k) > 0; }
std::string val(const Flags& f, const std::string& k) {
  auto it = f.find(k);
  return it == f.end() || it->second.empty() ? "" : it->second[0];
}
bool any_note(const std::vector<std::string>& notes, const std::string& x) {
  for (const auto& n : notes)
    if (n.find(x) != std::string::npos) return true;
  return false;
}

// Problems with Megatron-LM's flags for plan p: names, then the start-up checks of
// data/reference/megatron-args/README.md, then that the flags run the plan's batch.
std::vector<std::string> megatron_problems(const Plan& p, const MegatronArgs& a) {
  std::vector<std::string> bad;
  std::vector<std::string> tokens;
  for (const auto& l : a.lines)
    for (const auto& w : words(l)) tokens.push_back(w);
  const Flags f = parse_flags(tokens, megatron_flags(), bad);
  auto need = [&](bool ok, const std::string& why) {
    if (!ok) bad.push_back(why);
  };
  const long long tp = num(f, "--tensor-model-parallel-size", 1), pp = num(f, "--pipeline-model-parallel-size", 1);
  const long long cp = num(f, "--context-parallel-size", 1), world = p.world_size();
  need(world % (tp * pp * cp) == 0, "world size " + std::to_string(world) + " not divisible by tp*pp*cp");
  const long long dp = world / (tp * pp * cp), mbs = num(f, "--micro-batch-size", 1);
  const long long gbs = num(f, "--global-batch-size", 0);
  need(mbs > 0 && gbs % (mbs * dp) == 0, "global batch not divisible by micro batch x data parallel");
  need(mbs > 0 && gbs / (mbs * dp) == p.train.micro_batches, "the micro-batch count differs from the plan's");
  need(!has(f, "--sequence-parallel") || tp > 1, "--sequence-parallel with tp 1");
  const long long heads = num(f, "--num-attention-heads", 0), groups = num(f, "--num-query-groups", heads);
  need(heads % tp == 0, "attention heads not a multiple of tp");
  need(groups % tp == 0 || tp % groups == 0, "query groups neither a multiple nor a divisor of tp");
  const long long L = num(f, "--num-layers", 0);
  const bool first_last = has(f, "--decoder-first-pipeline-num-layers") || has(f, "--decoder-last-pipeline-num-layers");
  if (has(f, "--num-layers-per-virtual-pipeline-stage")) {
    const long long per = num(f, "--num-layers-per-virtual-pipeline-stage", 1);
    need(!first_last, "first/last-stage sizes with --num-layers-per-virtual-pipeline-stage");
    need(L % pp == 0 && (L / pp) % per == 0, "layers per stage not divisible by layers per virtual stage");
    need(pp > 1, "interleaving without a pipeline");
  } else if (!first_last) {
    need(L % pp == 0, "layers not divisible by the pipeline degree");
  }
  need(num(f, "--max-position-embeddings", 0) >= num(f, "--seq-length", 0), "max positions below the sequence");
  need(val(f, "--recompute-granularity") != "selective" || !has(f, "--recompute-method"),
       "selective recompute with a recompute method");
  if (has(f, "--cp-comm-type") && f.at("--cp-comm-type")[0] == "a2a+p2p") {
    long long prod = 1;
    for (const auto& v : f.count("--hierarchical-context-parallel-sizes") ? f.at("--hierarchical-context-parallel-sizes")
                                                                           : std::vector<std::string>{})
      prod *= std::atoll(v.c_str());
    need(has(f, "--hierarchical-context-parallel-sizes") && prod == cp, "a2a+p2p without matching hierarchical sizes");
  }
  const bool fsdp = has(f, "--use-megatron-fsdp");
  need(fsdp == (val(f, "--ckpt-format") == "fsdp_dtensor"), "Megatron-FSDP and --ckpt-format fsdp_dtensor go together");
  if (fsdp) need(!any_note(a.notes, "CUDA_DEVICE_MAX_CONNECTIONS=1 in"), "tells to set 1 under Megatron-FSDP");
  if (!fsdp && (tp > 1 || cp > 1))
    need(any_note(a.notes, "set CUDA_DEVICE_MAX_CONNECTIONS=1"), "tp or cp without the CUDA_DEVICE_MAX_CONNECTIONS note");
  need(!has(f, "--moe-grouped-gemm") || p.cluster.gpu.tflops_bf16 > 0, "grouped GEMM before compute capability 8.0");
  if (has(f, "--expert-model-parallel-size"))
    need(num(f, "--num-experts", 0) % num(f, "--expert-model-parallel-size", 1) == 0, "experts not divisible by ep");
  need(any_note(a.notes, kMegatronRelease), "no note naming the release");
  return bad;
}

// Problems with a DeepSpeed config (and, for Megatron-DeepSpeed, the flags its note names).
std::vector<std::string> deepspeed_problems(const Plan& p, const DeepSpeedConfig& c, DeepSpeedTarget target) {
  std::vector<std::string> bad;
  const Names& keys = deepspeed_keys();
  for (const auto& [k, v] : c.config.items()) {
    if (!keys.count(k)) bad.push_back(k + ": not a top-level key of the release");
    if (v.is_object())
      for (const auto& [k2, v2] : v.items())
        if (!keys.count(k + "." + k2)) bad.push_back(k + "." + k2 + ": not a key of the release");
  }
  const Json& j = c.config;
  long long dp = p.world_size(), pp = 1;
  if (target == DeepSpeedTarget::kMegatronDeepSpeed) {
    std::vector<std::string> tokens;
    const std::string head = "Megatron-DeepSpeed flags for the parallel degrees: ";
    for (const auto& n : c.notes)
      if (n.rfind(head, 0) == 0)
        for (const auto& w : words(n.substr(head.size()))) tokens.push_back(w);
    if (tokens.empty()) bad.push_back("no Megatron-DeepSpeed flags");
    const Flags f = parse_flags(tokens, megatron_deepspeed_flags(), bad);
    pp = num(f, "--pipeline-model-parallel-size", 1);
    const long long mp = num(f, "--tensor-model-parallel-size", 1) * pp * num(f, "--ds-sequence-parallel-size", 1);
    if (dp % mp != 0) bad.push_back("world size not divisible by the model-parallel size");
    dp /= mp;
    if (has(f, "--no-pipeline-parallel") && pp != 1) bad.push_back("--no-pipeline-parallel with pp > 1");
    if (!has(f, "--deepspeed") || !has(f, "--deepspeed_config")) bad.push_back("the config is not passed");
    if (!any_note(c.notes, kMegatronDeepSpeedRelease)) bad.push_back("no note naming Megatron-DeepSpeed's release");
  }
  const long long tb = j.value("train_batch_size", 0), mb = j.value("train_micro_batch_size_per_gpu", 0);
  const long long ga = j.value("gradient_accumulation_steps", 0);
  if (tb != mb * ga * dp) bad.push_back("train_batch_size != micro batch x accumulation x data-parallel ranks");
  const int stage = j["zero_optimization"].value("stage", 0);
  if (pp > 1 && stage >= 2) bad.push_back("ZeRO-2/3 with pipeline parallelism");
  if (j.contains("bf16") && j.contains("fp16")) bad.push_back("bf16 and fp16 both set");
  if (!any_note(c.notes, kDeepSpeedRelease)) bad.push_back("no note naming DeepSpeed's release");
  return bad;
}

// Problems with torchtitan's tables: a small TOML reader (tables, `key = value` with strings,
// integers and booleans, comments) against the key list, then the start-up checks.
std::vector<std::string> torchtitan_problems(const Plan& p, const std::string& toml) {
  std::vector<std::string> bad;
  std::map<std::string, std::string> kv;  // "section.key" -> raw value
  std::set<std::string> sections;
  std::string section;
  std::istringstream in(toml);
  for (std::string l; std::getline(in, l);) {
    if (l.empty() || l[0] == '#') continue;
    if (l[0] == '[') {
      section = l.substr(1, l.find(']') - 1);
      if (!sections.insert(section).second) bad.push_back("[" + section + "] twice");
      continue;
    }
    const auto eq = l.find(" = ");
    if (eq == std::string::npos) {
      bad.push_back("not a key = value line: " + l);
      continue;
    }
    const std::string key = section + "." + l.substr(0, eq), v = l.substr(eq + 3);
    if (kv.count(key)) bad.push_back(key + " twice");
    kv[key] = v;
    auto it = torchtitan_keys().find(key);
    if (it == torchtitan_keys().end()) {
      bad.push_back(key + ": not a key of the release");
      continue;
    }
    const std::string& type = it->second.kind;
    const bool quoted = v.size() >= 2 && v.front() == '"' && v.back() == '"';
    const bool integer = !v.empty() && v.find_first_not_of("-0123456789") == std::string::npos;
    if ((type == "str" && !quoted) || (type == "int" && !integer) || (type == "bool" && v != "true" && v != "false"))
      bad.push_back(key + " = " + v + ": not a " + type);
    if (quoted && !it->second.values.empty() && !it->second.values.count(v.substr(1, v.size() - 2)))
      bad.push_back(key + " = " + v + ": not one of its values");
  }
  auto get = [&](const std::string& k, long long dflt) {
    auto it = kv.find(k);
    return it == kv.end() ? dflt : std::atoll(it->second.c_str());
  };
  const long long rep = get("parallelism.data_parallel_replicate_degree", 1);
  const long long shard = get("parallelism.data_parallel_shard_degree", -1);
  const long long cp = get("parallelism.context_parallel_degree", 1), tp = get("parallelism.tensor_parallel_degree", 1);
  const long long pp = get("parallelism.pipeline_parallel_degree", 1);
  if (rep * shard * cp * tp * pp != p.world_size()) bad.push_back("parallel degrees do not multiply to the world size");
  const long long local = get("training.local_batch_size", 8), global = get("training.global_batch_size", -1);
  const long long batch_degree = rep * shard;
  if (global % (local * batch_degree) != 0) bad.push_back("global batch not a multiple of local x data parallel");
  if (pp > 1) {
    const long long micro = get("parallelism.pipeline_parallel_microbatch_size", 1);
    if (local % micro != 0) bad.push_back("local batch not a multiple of the pipeline micro-batch");
    if (global / (local * batch_degree) * (local / micro) != p.train.micro_batches)
      bad.push_back("the micro-batch count differs from the plan's");
    if (kv.count("parallelism.pipeline_parallel_layers_per_stage")) {
      const long long per = get("parallelism.pipeline_parallel_layers_per_stage", 1);
      const long long extra = get("parallelism.pipeline_parallel_first_stage_less_layers", 1) +
                              get("parallelism.pipeline_parallel_last_stage_less_layers", 1);
      const long long stages = (p.model.num_layers() + extra + per - 1) / per;
      const bool multi = kv["parallelism.pipeline_parallel_schedule"] == "\"Interleaved1F1B\"";
      // ZBVZeroBubble builds its stages in the "v" style, which asserts exactly 2 per rank
      // (pipeline_module_split, _get_stage_indices).
      const bool v = kv["parallelism.pipeline_parallel_schedule"] == "\"ZBVZeroBubble\"";
      if (stages % pp != 0) bad.push_back("stage count not divisible by the pipeline degree");
      if (v ? stages / pp != 2 : multi ? stages / pp < 2 : stages / pp != 1)
        bad.push_back("stages per rank do not suit the schedule");
    }
  } else if (global / (local * batch_degree) != p.train.micro_batches) {
    bad.push_back("the accumulation steps differ from the plan's micro-batches");
  }
  if (toml.find(kTorchtitanRelease) == std::string::npos) bad.push_back("no comment naming the release");
  return bad;
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& x : v) out += "\n  " + x;
  return out;
}

// Exports p to every framework that takes it; the ones that refuse are skipped (their refusals
// are tested in export_test.cc). Returns how many exports were checked.
int check_all(const Plan& p, const std::string& what) {
  int n = 0;
  if (auto a = megatron_args(p); a.ok()) {
    ++n;
    EXPECT_TRUE(megatron_problems(p, *a).empty()) << what << " megatron:" << joined(megatron_problems(p, *a))
                                                  << "\n" << a->text();
  }
  for (auto t : {DeepSpeedTarget::kDeepSpeed, DeepSpeedTarget::kMegatronDeepSpeed}) {
    if (auto c = deepspeed_config(p, t); c.ok()) {
      ++n;
      EXPECT_TRUE(deepspeed_problems(p, *c, t).empty())
          << what << " deepspeed:" << joined(deepspeed_problems(p, *c, t)) << "\n" << c->config.dump(2);
    }
  }
  for (auto f : {Framework::kTorchtitan, Framework::kTorchtitanCompile}) {
    if (auto c = framework_export(p, f); c.ok()) {
      ++n;
      EXPECT_TRUE(torchtitan_problems(p, c->text).empty())
          << what << " " << to_string(f) << ":" << joined(torchtitan_problems(p, c->text)) << "\n" << c->text;
    }
  }
  return n;
}

TEST(ExportReference, ListsAreThere) {
  EXPECT_GT(megatron_flags().size(), 500u);
  EXPECT_EQ(megatron_flags().at("--ckpt-format").values.count("fsdp_dtensor"), 1u);
  EXPECT_EQ(megatron_flags().at("--moe-grouped-gemm").kind, "switch");
  EXPECT_GT(megatron_deepspeed_flags().count("--ds-sequence-parallel-size"), 0u);
  EXPECT_GT(deepspeed_keys().count("zero_optimization.stage"), 0u);
  EXPECT_EQ(torchtitan_keys().at("training.mixed_precision_param").values,
            (std::set<std::string>{"bfloat16", "float32"}));
}

// The checker itself fails on what the releases refuse.
TEST(ExportReference, CheckerCatchesWhatTheReleasesRefuse) {
  Plan z3 = plan(llama(8), cluster(1, 8), train(1, 4, 32), LayerStrategy{.dp = 8, .zero = 3});
  MegatronArgs a = megatron_args(z3).value();
  EXPECT_TRUE(megatron_problems(z3, a).empty()) << joined(megatron_problems(z3, a));
  MegatronArgs no_ckpt = a;
  std::erase(no_ckpt.lines, "--ckpt-format fsdp_dtensor");
  no_ckpt.lines.push_back("--use-custom-fsdp");  // a flag of older releases
  no_ckpt.lines.push_back("--moe-token-dispatcher-type all2all");
  const auto p1 = megatron_problems(z3, no_ckpt);
  EXPECT_EQ(p1.size(), 3u) << joined(p1);
  Plan tp2 = plan(llama(8), cluster(1, 8), train(1, 4, 32), LayerStrategy{.tp = 2, .sp = true, .dp = 4, .zero = 1});
  MegatronArgs b = megatron_args(tp2).value();
  std::erase_if(b.notes, [](const std::string& n) { return n.find("CUDA_DEVICE_MAX_CONNECTIONS") != std::string::npos; });
  EXPECT_EQ(megatron_problems(tp2, b).size(), 1u);

  std::string toml = torchtitan_config(z3)->toml;
  EXPECT_TRUE(torchtitan_problems(z3, toml).empty()) << joined(torchtitan_problems(z3, toml));
  EXPECT_FALSE(torchtitan_problems(z3, toml + "[training]\nsplit_points = 1\n").empty());
  DeepSpeedConfig c = deepspeed_config(z3).value();
  c.config["zero_optimization"]["stage3_prefetch"] = 1;
  EXPECT_EQ(deepspeed_problems(z3, c, DeepSpeedTarget::kDeepSpeed).size(), 1u);
}

// Hand-built plans through every branch of the exports.
TEST(ExportReference, HandBuiltPlans) {
  struct Case {
    const char* what;
    Plan p;
  };
  Plan fp16 = plan(gpt(8), cluster(1, 8), train(1, 2, 16), LayerStrategy{.dp = 8, .zero = 3, .recompute = Recompute::kFull});
  fp16.train.dtype = DType::kFp16;
  Plan fp8 = plan(llama(8), cluster(2, 8), train(2, 8, 64), LayerStrategy{.tp = 2, .sp = true, .dp = 4, .zero = 3});
  fp8.train.dtype = DType::kFp8;
  fp8.cluster.gpu.tflops_fp8 = 989;  // an H100-like GPU, which has fp8
  Plan uneven = plan(gpt(8), cluster(3, 2), train(3, 6, 12), LayerStrategy{.tp = 2});
  ModelSpec moe_model = llama(8);
  moe_model.groups[0].shape.moe = MoeSpec{8, 2, 1408, 0};
  Plan flex = plan(moe_model, cluster(2, 8), train(2, 8, 64, Schedule::kInterleaved, 2), LayerStrategy{.dp = 8, .ep = 8});
  flex.train.moe_dispatcher = MoeDispatcher::kDeepEp;
  flex.train.moe_a2a_overlap = true;
  const std::vector<Case> cases = {
      {"interleaved tp4+sp z1 selective",
       plan(gpt(8), cluster(2, 8), train(2, 8, 64, Schedule::kInterleaved, 2),
            LayerStrategy{.tp = 4, .sp = true, .dp = 2, .zero = 1, .recompute = Recompute::kSelective})},
      {"ulysses x ring, full recompute",
       plan(llama(8), cluster(4, 8), train(4, 32, 32, Schedule::k1F1B, 1, 4096),
            LayerStrategy{.tp = 2, .ulysses = 2, .cp = 2, .dp = 1, .recompute = Recompute::kFull})},
      {"ulysses", plan(llama(8), cluster(1, 8), train(1, 4, 32, Schedule::k1F1B, 1, 4096),
                       LayerStrategy{.ulysses = 2, .dp = 4, .zero = 1})},
      {"fsdp z2", plan(llama(8), cluster(1, 8), train(1, 4, 64), LayerStrategy{.dp = 8, .zero = 2})},
      {"fsdp z3 tp2", plan(llama(8), cluster(2, 8), train(2, 8, 64, Schedule::k1F1B, 1, 4096),
                           LayerStrategy{.tp = 2, .sp = true, .dp = 4, .zero = 3, .recompute = Recompute::kSelective})},
      {"gpipe", plan(gpt(8), cluster(2, 8), train(2, 8, 64, Schedule::kGpipe),
                     LayerStrategy{.tp = 2, .sp = true, .dp = 4, .zero = 3})},
      {"fp16 z3", fp16},
      {"fp8", fp8},
      {"uneven first stage", uneven},
      {"moe deepep dispatcher, all-to-all overlap, interleaved", flex},
      {"data parallel z0", plan(gpt(8), cluster(1, 8), train(1, 4, 128), LayerStrategy{.dp = 8})},
      {"zb-v fsdp z3 tp2", plan(llama(8), cluster(2, 8), train(2, 8, 64, Schedule::kZbV, 2, 4096),
                                LayerStrategy{.tp = 2, .sp = true, .dp = 4, .zero = 3})},
  };
  int checked = 0;
  for (const auto& c : cases) {
    ASSERT_TRUE(validate(c.p).ok()) << c.what << ": " << validate(c.p).error().message;
    checked += check_all(c.p, c.what);
  }
  EXPECT_GE(checked, 20);
}

// The best plans of searches kept to each framework: dense and MoE presets, one and several nodes.
TEST(ExportReference, PlansSearchedForEachFramework) {
  struct Setup {
    const char* model;
    const char* cluster;
    int nodes, seq, batch;
  };
  const std::vector<Setup> setups = {
      {"llama-3-8b", "h100-80gb", 1, 8192, 64},
      {"llama-2-7b", "a100-80gb", 2, 4096, 64},
      {"mixtral-8x7b", "h100-80gb", 4, 4096, 256},
  };
  int checked = 0;
  for (const auto& st : setups) {
    auto m = load_model(st.model);
    auto c = load_cluster(st.cluster);
    ASSERT_TRUE(m.ok() && c.ok());
    ClusterSpec cl = *c;
    cl.nodes = st.nodes;
    for (Framework fw : {Framework::kMegatron, Framework::kMegatronDeepSpeed, Framework::kTorchtitan}) {
      SearchOptions opt;
      opt.seq = st.seq;
      opt.global_batch = st.batch;
      opt.top_k = 5;
      ASSERT_TRUE(restrict_to_framework(opt, to_string(fw)).ok());
      auto traits = framework_options(to_string(fw));
      ASSERT_TRUE(traits.ok());
      auto r = search(*m, cl, AnalyticCostModel(*traits), opt);
      ASSERT_TRUE(r.ok()) << r.error().message;
      for (const Plan& p : r->top) {
        const std::string what = std::string(st.model) + " " + to_string(fw) + " " + describe_layer_runs(p, 2);
        auto e = framework_export(p, fw);
        ASSERT_TRUE(e.ok()) << what << ": " << e.error().message;
        checked += check_all(p, what);
      }
    }
  }
  EXPECT_GE(checked, 30);
}

}  // namespace
}  // namespace weft
