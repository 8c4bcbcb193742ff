// Model profile: JSON round trip, interpolation in micro-batch and sequence length with the
// documented rule outside the measured range, matching layer shapes, and clear errors.
#include "weft/calibration/model_profile.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "profile_fixtures.h"
#include "tiny_specs.h"

namespace weft {
namespace {

using testing::phase_sample;

// The tiny model of tiny_specs.h: 2 layers, up to seq 128.
ModelSpec tiny_model() { return testing::tiny_model(2, 128); }

// forward: 1, 2 at seq 64 (mb 1, 2); 3, 5 at seq 128. backward twice forward; memory 1000x.
std::vector<PhaseSample> grid() {
  return {phase_sample(1, Recompute::kNone, 1, 64, 1, 2, 1000), phase_sample(1, Recompute::kNone, 2, 64, 2, 4, 2000),
          phase_sample(1, Recompute::kNone, 1, 128, 3, 6, 3000),
          phase_sample(1, Recompute::kNone, 2, 128, 5, 10, 5000)};
}

ModelProfile sample_profile() {
  ModelProfile p;
  p.model = tiny_model();
  p.device = "cpu";
  p.device_name = "test cpu";
  p.hostname = "box";
  p.threads = 1;
  p.created = "2026-11-22T00:00:00Z";
  p.runtime.optimizer_s_per_param = 2e-9;
  p.runtime.state_bytes_per_param = 24;
  LayerProfile l;
  l.group = "decoder";
  l.shape = p.model.groups[0].shape;
  l.samples = grid();
  l.samples.push_back(phase_sample(2, Recompute::kFull, 1, 64, 0.6, 1.9, 100));
  p.layers.push_back(l);
  p.embedding = {phase_sample(1, Recompute::kNone, 1, 64, 0.1, 0.2, 10)};
  p.head = {phase_sample(1, Recompute::kNone, 1, 64, 0.3, 0.4, 30)};
  p.skipped = {"tp 2, micro-batch 2, seq 128, recompute none: needs 3.1 GiB, 2.0 GiB free"};
  return p;
}

TEST(ModelProfile, RoundTripsThroughJsonAndFile) {
  const ModelProfile p = sample_profile();
  auto back = model_profile_from_json(to_json(p));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back.value(), p);
  const std::string path = (std::filesystem::temp_directory_path() / "weft_calibration_layers.json").string();
  ASSERT_TRUE(write_model_profile(path, p).ok());
  auto read = read_model_profile(path);
  ASSERT_TRUE(read.ok()) << read.error().message;
  EXPECT_EQ(read.value(), p);
  std::filesystem::remove(path);
}

TEST(ModelProfile, InterpolatesInsideTheGrid) {
  const auto g = grid();
  auto c = interpolate(g, 1, Recompute::kNone, 2, 64);  // a measured point
  ASSERT_TRUE(c);
  EXPECT_DOUBLE_EQ(c->forward_s, 2);
  EXPECT_FALSE(c->extrapolated);
  // micro-batch 1.5: 1.5 at seq 64 and 4 at seq 128; seq 96 is halfway: 2.75.
  c = interpolate(g, 1, Recompute::kNone, 1.5, 96);
  ASSERT_TRUE(c);
  EXPECT_DOUBLE_EQ(c->forward_s, 2.75);
  EXPECT_DOUBLE_EQ(c->backward_s, 5.5);
  EXPECT_DOUBLE_EQ(c->activation_bytes, 2750);
  EXPECT_FALSE(c->extrapolated);
}

TEST(ModelProfile, ExtrapolatesProportionallyOutside) {
  const auto g = grid();
  auto c = interpolate(g, 1, Recompute::kNone, 4, 64);  // twice the largest micro-batch
  ASSERT_TRUE(c);
  EXPECT_DOUBLE_EQ(c->forward_s, 4);
  EXPECT_TRUE(c->extrapolated);
  c = interpolate(g, 1, Recompute::kNone, 1, 256);  // twice the longest sequence
  EXPECT_DOUBLE_EQ(c->forward_s, 6);
  EXPECT_DOUBLE_EQ(c->activation_bytes, 6000);
  c = interpolate(g, 1, Recompute::kNone, 0.5, 32);  // half of the smallest in both
  EXPECT_DOUBLE_EQ(c->forward_s, 0.25);
  EXPECT_TRUE(c->extrapolated);
}

TEST(ModelProfile, MissingDegreeOrRecomputeIsNotCovered) {
  const auto g = grid();
  EXPECT_FALSE(interpolate(g, 2, Recompute::kNone, 1, 64));
  EXPECT_FALSE(interpolate(g, 1, Recompute::kFull, 1, 64));
}

TEST(ModelProfile, IrregularGridsStillInterpolate) {
  // seq 64 measured at mb 1 and 4, seq 128 only at mb 2 (the others did not fit).
  std::vector<PhaseSample> g = {phase_sample(1, Recompute::kNone, 1, 64, 1, 1, 0),
                                phase_sample(1, Recompute::kNone, 4, 64, 4, 4, 0),
                                phase_sample(1, Recompute::kNone, 2, 128, 5, 5, 0)};
  auto c = interpolate(g, 1, Recompute::kNone, 2, 96);
  ASSERT_TRUE(c);
  EXPECT_DOUBLE_EQ(c->forward_s, 3.5);  // 2 at seq 64, 5 at seq 128
}

TEST(ModelProfile, FindsLayersByShapeAndModelKinds) {
  const ModelProfile p = sample_profile();
  ModelSpec m = tiny_model();
  EXPECT_NE(p.find(m.groups[0].shape, m), nullptr);
  EXPECT_TRUE(p.covers_edges(m));
  ModelSpec rms = m;
  rms.norm = NormKind::kRmsNorm;
  EXPECT_EQ(p.find(m.groups[0].shape, rms), nullptr);
  ModelSpec wider = m;
  wider.groups[0].shape.ffn = 64;
  EXPECT_EQ(p.find(wider.groups[0].shape, wider), nullptr);
  ModelSpec vocab = m;
  vocab.vocab = 32;
  EXPECT_FALSE(p.covers_edges(vocab));
}

TEST(ModelProfile, BadFieldsNameTheKey) {
  auto expect_error = [](Json j, const std::string& needle) {
    auto r = model_profile_from_json(j, "layers.json");
    ASSERT_FALSE(r.ok()) << "expected an error containing " << needle;
    EXPECT_NE(r.error().message.find(needle), std::string::npos) << r.error().message;
    EXPECT_EQ(r.error().message.rfind("layers.json: ", 0), 0u) << r.error().message;
  };
  const Json good = to_json(sample_profile());
  Json j = good;
  j["layers"][0]["group"] = "encoder";
  expect_error(j, "layers[0].group: no layer group \"encoder\"");
  j = good;
  j["layers"][0]["samples"][1]["forward_s"] = -1.0;
  expect_error(j, "layers[0].samples[1].forward_s: must be positive, got -1");
  j = good;
  j["layers"][0]["samples"][1]["micro_batch"] = 1;
  expect_error(j, "layers[0].samples[1]: a second sample for tp 1, recompute none, zero 0, micro_batch 1, seq 64");
  j = good;
  j["layers"][0]["samples"][1]["zero"] = 2;
  expect_error(j, "layers[0].samples[1].zero: must be 0 or 3, got 2");
  j = good;
  j["layers"][0]["samples"][0]["recompute"] = "some";
  expect_error(j, "layers[0].samples[0].recompute");
  j = good;
  j["head"][0].erase("backward_s");
  expect_error(j, "head[0].backward_s: missing required field");
  j = good;
  j["embedding"][0]["recompute"] = "none";
  expect_error(j, "embedding[0].recompute: unknown field");
  j = good;
  j["model"]["hidden"] = "eight";
  expect_error(j, "model.hidden");
}

TEST(ModelProfile, TruncatedFileNamesTheFile) {
  const std::string path = (std::filesystem::temp_directory_path() / "weft_calibration_cut.json").string();
  const std::string text = to_json(sample_profile()).dump(2);
  {
    std::ofstream out(path);
    out << text.substr(0, text.size() * 2 / 3);
  }
  auto r = read_model_profile(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find(path), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("malformed JSON"), std::string::npos);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace weft
