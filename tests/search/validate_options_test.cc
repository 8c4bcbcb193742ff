// validate(SearchOptions, ModelSpec, ClusterSpec) (weft/search/search_options.h): each check returns
// kBadInput naming the field and the numbers, in the documented order; the defaults pass.
#include <gtest/gtest.h>

#include <string>

#include "weft/cost/analytic.h"
#include "weft/search/search.h"
#include "weft/spec/presets.h"

namespace weft {
namespace {

struct Specs {
  ModelSpec model = *load_model("llama-2-7b");     // 32 layers, rotary positions
  ClusterSpec cluster = *load_cluster("a100-80gb");  // 1 node of 8 GPUs
};

std::string error_of(const SearchOptions& o, const ModelSpec& m, const ClusterSpec& c) {
  const Status st = validate(o, m, c);
  if (st.ok()) return "";
  EXPECT_EQ(st.error().kind, ErrorKind::kBadInput);
  return st.error().message;
}

TEST(ValidateSearchOptions, DefaultsAndGivenDegreesPass) {
  const Specs s;
  SearchOptions o;
  EXPECT_EQ(error_of(o, s.model, s.cluster), "");
  o.pp_degrees = {1, 2, 4, 8};
  o.micro_batches = {1, 8, 512};
  o.max_tp = 4;
  EXPECT_EQ(error_of(o, s.model, s.cluster), "");
}

TEST(ValidateSearchOptions, PipelineDegreesDivideTheGpusAndFitTheLayers) {
  Specs s;
  SearchOptions o;
  o.pp_degrees = {2, 3};
  EXPECT_EQ(error_of(o, s.model, s.cluster), "--pp: 3 does not divide the 8 GPUs");
  o.pp_degrees = {0};
  EXPECT_EQ(error_of(o, s.model, s.cluster), "--pp: 0 does not divide the 8 GPUs");
  s.cluster.nodes = 8;  // 64 GPUs, 32 layers
  o.pp_degrees = {64};
  EXPECT_EQ(error_of(o, s.model, s.cluster), "--pp: 64 stages for 32 layers");
}

TEST(ValidateSearchOptions, TheGpuRunsTheDtype) {
  Specs s;
  SearchOptions o;
  o.dtype = DType::kFp8;
  EXPECT_EQ(error_of(o, s.model, s.cluster), "--dtype: " + s.cluster.gpu.name + " has no fp8 (it runs fp32, tf32, bf16, fp16)");
  s.cluster = *load_cluster("v100-32gb");
  o.dtype = DType::kBf16;
  EXPECT_EQ(error_of(o, s.model, s.cluster), "--dtype: " + s.cluster.gpu.name + " has no bf16 (it runs fp32, fp16)");
  o.dtype = DType::kFp16;
  EXPECT_EQ(error_of(o, s.model, s.cluster), "");
}

TEST(ValidateSearchOptions, EachFieldNamesItsValue) {
  const Specs s;
  auto with = [](auto set) {
    SearchOptions o;
    set(o);
    return o;
  };
  EXPECT_EQ(error_of(with([](SearchOptions& o) { o.max_tp = -2; }), s.model, s.cluster),
            "--max-tp: must be >= 1, got -2");
  EXPECT_EQ(error_of(with([](SearchOptions& o) { o.seq = 0; }), s.model, s.cluster), "seq: must be positive, got 0");
  EXPECT_EQ(error_of(with([](SearchOptions& o) { o.global_batch = -4; }), s.model, s.cluster),
            "global_batch: must be positive, got -4");
  EXPECT_EQ(error_of(with([](SearchOptions& o) { o.top_k = 0; }), s.model, s.cluster), "top: must be >= 1, got 0");
  EXPECT_EQ(error_of(with([](SearchOptions& o) { o.memory_step_mib = 0; }), s.model, s.cluster),
            "memory_step_mib: must be positive");
  EXPECT_EQ(error_of(with([](SearchOptions& o) { o.micro_batches = {5}; }), s.model, s.cluster),
            "micro_batches: 5 does not divide global batch 512");
}

TEST(ValidateSearchOptions, LearnedPositionsBoundTheSequence) {
  const Specs s;
  const ModelSpec gpt = *load_model("gpt3-1.3b");
  SearchOptions o;
  o.seq = gpt.max_seq;
  EXPECT_EQ(error_of(o, gpt, s.cluster), "");
  o.seq = gpt.max_seq + 1;
  EXPECT_EQ(error_of(o, gpt, s.cluster), "seq: " + std::to_string(gpt.max_seq + 1) +
                                             " exceeds the model's learned position table of " +
                                             std::to_string(gpt.max_seq));
  EXPECT_EQ(error_of(o, s.model, s.cluster), "");  // rotary positions: no table
}

TEST(ValidateSearchOptions, TheFirstFailingCheckIsReported) {
  const Specs s;
  SearchOptions o;
  o.pp_degrees = {3};
  o.seq = 0;
  o.top_k = 0;
  EXPECT_EQ(error_of(o, s.model, s.cluster), "--pp: 3 does not divide the 8 GPUs");
  o.pp_degrees.clear();
  EXPECT_EQ(error_of(o, s.model, s.cluster), "seq: must be positive, got 0");
}

TEST(ValidateSearchOptions, SearchRunsTheSameChecks) {
  const Specs s;
  SearchOptions o;
  o.max_tp = -2;
  auto r = search(s.model, s.cluster, AnalyticCostModel(), o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::kBadInput);
  EXPECT_EQ(r.error().message, "--max-tp: must be >= 1, got -2");
}

}  // namespace
}  // namespace weft
