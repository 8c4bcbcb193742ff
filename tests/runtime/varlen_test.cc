// weft train --varlen (docs/varlen.md "Running a step"): documents of a token file packed per
// micro-batch into sequence-parallel groups of the sizes the batch planner picks for each step.
// Every grouping (2 and 4 ranks, groups of different sizes in one micro-batch, groups forced
// larger by a token cap, ZeRO-1 and ZeRO-3 over every rank, recompute) equals the single-process
// run of the same documents: losses within 1e-5 and final parameters within 1e-5.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <random>
#include <set>

#include "megatron_dataset.h"
#include "rt_util.h"

namespace weft::rttest {
namespace {

constexpr int kSteps = 4;
constexpr int kDocs = 12;  // documents per step (a plan's batch: a multiple of its dp)
constexpr int kSeq = 64;   // the longest document

ModelSpec gpt() {
  ModelSpec m = tiny_gpt(2);
  m.max_seq = kSeq;
  return m;
}

// Documents of 2 to 64 tokens, each ending with token 0; most short, a few long (a long tail).
std::string write_docs(const std::string& dir) {
  std::mt19937 rng(5);
  const int lens[] = {2, 3, 5, 6, 8, 9, 12, 16, 20, 31, 40, 64};
  std::vector<uint16_t> toks;
  for (int d = 0; d < 120; ++d) {
    const int n = lens[rng() % 12];
    for (int i = 0; i + 1 < n; ++i) toks.push_back(static_cast<uint16_t>(1 + rng() % 63));
    toks.push_back(0);
  }
  const std::string path = dir + "/docs.bin";
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(toks.data()),
                                              static_cast<std::streamsize>(toks.size() * 2));
  return path;
}

Plan varlen_plan(const ModelSpec& m, int world, const LayerStrategy& s) {
  std::vector<std::vector<LayerStrategy>> stages{std::vector<LayerStrategy>(m.num_layers(), s)};
  LayerStrategy e = s;
  e.recompute = Recompute::kNone;
  return make_plan(m, world, 1, Schedule::k1F1B, e, stages, kDocs, 1, kSeq);
}

struct VarlenRun {
  RunResult r;
  runtime::ParamsFile params;
  std::vector<std::vector<std::vector<int>>> sizes;  // per step, per micro-batch: group sizes
  std::vector<std::vector<std::int64_t>> lengths;    // per step: its documents
};

// `p` with --varlen unless the plan says train.varlen itself.
VarlenRun train_varlen(const Plan& p, const std::string& dir, const std::string& name, const std::string& data,
                       const std::string& extra = "", const std::string& eos = " --eos 0") {
  VarlenRun v;
  v.r = train_plan(p, dir, name, kSteps, (p.train.varlen ? "" : " --varlen") + (" --data " + data + eos) + extra);
  v.params = read_params(dir + "/" + name + ".params");
  std::istringstream in(v.r.output);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("[0] ", 0) == 0) line = line.substr(4);
    if (line.empty() || line[0] != '{' || line.find("\"micro_batches\"") == std::string::npos) continue;
    const Json j = Json::parse(line);
    std::vector<std::vector<int>> step;
    for (const Json& mb : j.at("micro_batches")) {
      std::vector<int> s;
      for (const Json& g : mb) s.push_back(g.at("size").get<int>());
      step.push_back(s);
    }
    v.sizes.push_back(step);
    v.lengths.push_back(j.at("lengths").get<std::vector<std::int64_t>>());
  }
  return v;
}

class Varlen : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(temp_dir("varlen"));
    data_ = new std::string(write_docs(*dir_));
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
    delete data_;
  }
  // The single-process run of the same model and documents.
  const VarlenRun& reference(const ModelSpec& m) {
    static std::map<std::string, VarlenRun> cache;
    auto it = cache.find(m.name);
    if (it != cache.end()) return it->second;
    VarlenRun r = train_varlen(varlen_plan(m, 1, LayerStrategy{}), *dir_, "ref_" + m.name, *data_);
    EXPECT_EQ(r.r.status, 0) << r.r.output;
    return cache.emplace(m.name, std::move(r)).first->second;
  }
  // Runs `p` and compares it with the reference; returns the run.
  VarlenRun expect_parity(const Plan& p, const std::string& name, const std::string& extra = "") {
    const VarlenRun& ref = reference(p.model);
    VarlenRun got = train_varlen(p, *dir_, name, *data_, extra);
    EXPECT_EQ(got.r.status, 0) << got.r.output;
    EXPECT_EQ(got.r.losses.size(), static_cast<size_t>(kSteps)) << got.r.output;
    if (got.r.losses.size() != ref.r.losses.size()) return got;
    EXPECT_EQ(got.lengths, ref.lengths);  // the same documents
    double worst = 0;
    for (size_t i = 0; i < ref.r.losses.size(); ++i) {
      worst = std::max(worst, std::fabs(got.r.losses[i] - ref.r.losses[i]) / std::fabs(ref.r.losses[i]));
      EXPECT_NEAR(got.r.losses[i], ref.r.losses[i], 1e-5 * std::fabs(ref.r.losses[i])) << name << " step " << i + 1;
      EXPECT_NEAR(got.r.grad_norms[i], ref.r.grad_norms[i], 1e-4 * ref.r.grad_norms[i]) << name << " step " << i + 1;
    }
    EXPECT_GT(std::fabs(ref.r.losses.front() - ref.r.losses.back()), 1e-5);  // it trained
    auto d = runtime::compare_params(got.params, ref.params);
    EXPECT_TRUE(d.ok()) << (d.ok() ? "" : d.error().message);
    if (d.ok()) EXPECT_LE(d->max_abs, 1e-5) << name << ": worst parameter " << d->worst;
    std::printf("varlen %s: %d ranks, loss max rel diff %.2e, params max abs diff %.2e, groups", name.c_str(),
                p.world_size(), worst, d.ok() ? d->max_abs : -1.0);
    for (const auto& step : got.sizes) {
      std::printf(" |");
      for (const auto& mb : step) {
        std::printf(" [");
        for (int s : mb) std::printf("%d", s);
        std::printf("]");
      }
    }
    std::printf("\n");
    return got;
  }
  static std::string* dir_;
  static std::string* data_;
};
std::string* Varlen::dir_ = nullptr;
std::string* Varlen::data_ = nullptr;

bool mixed_in_one_micro_batch(const VarlenRun& v) {
  for (const auto& step : v.sizes)
    for (const auto& mb : step)
      if (std::set<int>(mb.begin(), mb.end()).size() > 1) return true;
  return false;
}

bool uses_size(const VarlenRun& v, int size) {
  for (const auto& step : v.sizes)
    for (const auto& mb : step)
      for (int s : mb)
        if (s == size) return true;
  return false;
}

TEST_F(Varlen, SingleProcessRunsEveryDocumentOnce) {
  const VarlenRun& ref = reference(gpt());
  ASSERT_EQ(ref.r.status, 0) << ref.r.output;
  ASSERT_EQ(ref.lengths.size(), static_cast<size_t>(kSteps));
  for (const auto& l : ref.lengths) {
    EXPECT_EQ(l.size(), static_cast<size_t>(kDocs));
    for (std::int64_t n : l) EXPECT_TRUE(n >= 2 && n <= kSeq) << n;
  }
  ASSERT_TRUE(ref.r.summary.is_object()) << ref.r.output;
  EXPECT_TRUE(ref.r.summary.contains("mean_plan_wait_s"));
}

// Without a cap the planner's cost model keeps these short documents on single ranks.
TEST_F(Varlen, TwoRanksEqualOneProcess) { expect_parity(varlen_plan(gpt(), 2, strat(1, 2)), "dp2"); }

// A cap of 24 tokens per rank puts every document over 24 tokens on a group of 2 or 4 ranks, while
// the short ones run on single ranks beside them.
TEST_F(Varlen, FourRanksWithMixedGroupsEqualOneProcess) {
  const VarlenRun v = expect_parity(varlen_plan(gpt(), 4, strat(1, 4)), "dp4_cap", " --max-tokens-per-gpu 24");
  EXPECT_TRUE(mixed_in_one_micro_batch(v)) << v.r.output;
}

TEST_F(Varlen, TwoRankGroupsOnlyEqualOneProcess) {
  const VarlenRun v = expect_parity(varlen_plan(gpt(), 4, strat(1, 4)), "dp4_min2", " --min-group 2");
  EXPECT_FALSE(uses_size(v, 1));
  EXPECT_TRUE(uses_size(v, 2) || uses_size(v, 4));
}

TEST_F(Varlen, Zero3OverEveryRankEqualsOneProcess) {
  const VarlenRun v = expect_parity(varlen_plan(gpt(), 4, strat(1, 4, 1, false, 3)), "dp4_zero3",
                                    " --max-tokens-per-gpu 24");
  EXPECT_TRUE(uses_size(v, 2) || uses_size(v, 4));
}

TEST_F(Varlen, Zero1WithFullRecomputeEqualsOneProcess) {
  expect_parity(varlen_plan(gpt(), 2, strat(1, 2, 1, false, 1, Recompute::kFull)), "dp2_zero1_full",
                " --max-tokens-per-gpu 32");
}

// Rotary positions restarting per document, grouped-query attention with fewer key/value heads
// than the group's ranks, selective recompute.
TEST_F(Varlen, LlamaWithSelectiveRecomputeEqualsOneProcess) {
  ModelSpec m = tiny_llama(2, 2);
  const VarlenRun v = expect_parity(varlen_plan(m, 4, strat(1, 4, 1, false, 2, Recompute::kSelective)),
                                    "llama_dp4", " --max-tokens-per-gpu 24");
  EXPECT_TRUE(uses_size(v, 4) || uses_size(v, 2));
}

// Tensor parallelism inside every sequence rank: 4 ranks as 2 units of tp 2, with and without
// Megatron-SP; a group of 2 units runs its all-to-alls between the ranks of one tp index.
TEST_F(Varlen, TensorParallelInsideTheGroupsEqualsOneProcess) {
  VarlenRun v = expect_parity(varlen_plan(gpt(), 4, strat(2, 2)), "tp2", " --max-tokens-per-gpu 32");
  EXPECT_TRUE(uses_size(v, 2)) << v.r.output;
  v = expect_parity(varlen_plan(tiny_llama(2, 2), 4, strat(2, 2, 1, true, 1)), "tp2_sp_llama",
                    " --max-tokens-per-gpu 32");
  EXPECT_TRUE(uses_size(v, 2)) << v.r.output;
}

// A plan with train.varlen (as `weft plan --lengths --out` writes) runs variable-length steps
// without the flag, with its group sizes (here at least 2 ranks).
TEST_F(Varlen, AVariableLengthPlanRunsWithoutTheFlag) {
  Plan p = varlen_plan(gpt(), 4, strat(1, 4, 1, false, 3));
  p.train.varlen = true;
  p.train.min_group = 2;
  const VarlenRun v = expect_parity(p, "plan_varlen");
  EXPECT_FALSE(uses_size(v, 1));
  EXPECT_FALSE(v.sizes.empty());
}

// A run killed after its step-2 checkpoint and resumed draws the same documents, makes the same plans
// and ends bit for bit where the uninterrupted run ends.
TEST_F(Varlen, ResumedRunEqualsTheUninterruptedOne) {
  const Plan p = varlen_plan(gpt(), 2, strat(1, 2, 1, false, 3));
  const std::string plan = write_plan(p, *dir_, "resume");
  const std::string launch = driver() + " launch -n 2 -- ";
  const std::string base = driver() + train_flags(kSteps) + " --plan " + plan + " --varlen --data " + *data_ +
                           " --eos 0 --max-tokens-per-gpu 32";
  const RunResult whole = run(launch + base + " --save-params " + *dir_ + "/whole.params");
  ASSERT_EQ(whole.status, 0) << whole.output;
  const std::string ck = *dir_ + "/ck";
  const RunResult killed = run(launch + base + " --checkpoint-dir " + ck + " --checkpoint-every 2 --fault 1:3:kill");
  EXPECT_NE(killed.status, 0) << killed.output;
  const RunResult resumed =
      run(launch + base + " --checkpoint-dir " + ck + " --resume --save-params " + *dir_ + "/resumed.params");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  ASSERT_EQ(resumed.losses.size(), 2u) << resumed.output;
  for (int i = 0; i < 2; ++i) EXPECT_EQ(resumed.losses[i], whole.losses[2 + i]) << "step " << 3 + i;
  auto d = runtime::compare_params(read_params(*dir_ + "/resumed.params"), read_params(*dir_ + "/whole.params"));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->max_abs, 0.0) << d->worst;
}

// The same documents as a Megatron-LM indexed dataset (each document in two sentences where it has
// four tokens or more, so the index's document ranges matter): their boundaries come from the
// index, no --eos, and two ranks train exactly as one process on the token file split at eos 0.
TEST_F(Varlen, MegatronDatasetDocumentsComeFromItsIndex) {
  std::ifstream in(*data_, std::ios::binary);
  std::vector<uint16_t> toks((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  toks.resize(toks.size() / 2);
  in.clear();
  in.seekg(0);
  in.read(reinterpret_cast<char*>(toks.data()), static_cast<std::streamsize>(toks.size() * 2));
  weft::testing::MegatronDataset ds;
  std::vector<std::int64_t> doc;
  for (uint16_t t : toks) {
    doc.push_back(t);
    if (t != 0) continue;
    const size_t half = doc.size() >= 4 ? doc.size() / 2 : doc.size();
    std::vector<std::vector<std::int64_t>> sentences{{doc.begin(), doc.begin() + half}};
    if (half < doc.size()) sentences.emplace_back(doc.begin() + half, doc.end());
    ds.documents.push_back(sentences);
    doc.clear();
  }
  ASSERT_TRUE(doc.empty());
  const std::string prefix = *dir_ + "/docs_text_document";
  weft::testing::write_megatron_dataset(prefix, ds);
  const VarlenRun& ref = reference(gpt());
  const VarlenRun got = train_varlen(varlen_plan(gpt(), 2, strat(1, 2)), *dir_, "megatron", prefix, "", "");
  ASSERT_EQ(got.r.status, 0) << got.r.output;
  ASSERT_EQ(got.r.losses.size(), ref.r.losses.size()) << got.r.output;
  EXPECT_EQ(got.lengths, ref.lengths);
  for (size_t i = 0; i < ref.r.losses.size(); ++i)
    EXPECT_NEAR(got.r.losses[i], ref.r.losses[i], 1e-5 * std::fabs(ref.r.losses[i])) << "step " << i + 1;
  // --eos beside a Megatron dataset: refused, naming both.
  const RunResult r = train_plan(varlen_plan(gpt(), 1, LayerStrategy{}), *dir_, "megatron_eos", 2,
                                 " --varlen --data " + prefix + " --eos 0");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--eos 0: the documents of --data " + prefix), std::string::npos) << r.output;
}

// Bad input stops every rank with a message naming what is wrong (exit code 2).
TEST_F(Varlen, BadInputNamesTheProblem) {
  const std::string plan = write_plan(varlen_plan(gpt(), 1, LayerStrategy{}), *dir_, "bad");
  const std::string base = driver() + train_flags(2) + " --plan " + plan + " --varlen";
  RunResult r = run(base + " --data " + *data_);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--eos"), std::string::npos) << r.output;
  r = run(base + " --eos 0");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--data"), std::string::npos) << r.output;
  r = run(base + " --data " + *data_ + " --eos 0 --max-group 8");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--max-group 8"), std::string::npos) << r.output;
  // Documents over 16 tokens cannot be held by one rank capped at 16 tokens (exit code 3: does not fit).
  r = run(base + " --data " + *data_ + " --eos 0 --max-tokens-per-gpu 16");
  EXPECT_EQ(r.status, 3) << r.output;
  EXPECT_NE(r.output.find("fits no group"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("where a GPU holds 16"), std::string::npos) << r.output;
  // Pipeline stages cannot run variable-length steps.
  const Plan pp = make_plan(gpt(), 2, 2, Schedule::k1F1B, LayerStrategy{}, {{LayerStrategy{}}, {LayerStrategy{}}},
                            kDocs, 1, kSeq);
  r = run(driver() + " launch -n 2 -- " + driver() + train_flags(2) + " --plan " + write_plan(pp, *dir_, "pp") +
          " --varlen --data " + *data_ + " --eos 0");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("pipeline stages"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace weft::rttest
