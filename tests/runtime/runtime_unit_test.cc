// Torch-free parts of the runtime: pipeline schedules, the learning-rate schedule, gradient buckets, token sources,
// parameter files, the torchrun environment and the plan checks.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <fstream>
#include <set>

#include "megatron_dataset.h"
#include "rt_util.h"
#include "weft/runtime/buckets.h"
#include "weft/runtime/data.h"
#include "weft/runtime/safetensors.h"
#include "weft/runtime/schedule.h"
#include "weft/runtime/straggler.h"
#include "weft/runtime/support.h"
#include "weft/varlen/lengths.h"

namespace weft::runtime {
namespace {

TEST(GradBuckets, WholeParametersFromTheLastUpToTheCap) {
  // Parameters of 4, 10, 3, 3 and 6 elements at offsets 0, 4, 14, 17, 20; buffer padded to 28; cap 9.
  const auto b = bucket_ranges({4, 10, 3, 3, 6}, 28, 9);
  // From the back: 6 + 3 = 9 fits, + 3 more does not: parameters 3-4 (and the padding). Then 3 alone
  // (3 + 10 > 9), 10 alone (over the cap by itself), 4.
  const std::vector<BucketRange> want{{17, 28, 3, 4}, {14, 17, 2, 2}, {4, 14, 1, 1}, {0, 4, 0, 0}};
  EXPECT_EQ(b, want);
  // The buckets tile the padded buffer.
  int64_t covered = 0;
  for (const auto& r : b) covered += r.end - r.begin;
  EXPECT_EQ(covered, 28);
  // A cap above everything: one bucket, padding included.
  EXPECT_EQ(bucket_ranges({4, 10, 3}, 18, 1 << 20), (std::vector<BucketRange>{{0, 18, 0, 2}}));
  // A cap of one element: one bucket per parameter, last first.
  const auto each = bucket_ranges({2, 2, 2}, 6, 1);
  ASSERT_EQ(each.size(), 3u);
  EXPECT_EQ(each[0], (BucketRange{4, 6, 2, 2}));
  EXPECT_EQ(each[2], (BucketRange{0, 2, 0, 0}));
  EXPECT_DEATH(bucket_ranges({4}, 4, 0), "cap must be positive");
  EXPECT_DEATH(bucket_ranges({4, 4}, 6, 8), "padded size 6 below the 8 elements");
}

TEST(GradBuckets, ShardPiecesSplitABucketAtShardBoundaries) {
  // A buffer of 4 shards of 5 elements; bucket [3, 12) covers 2 of shard 0, 5 of shard 1, 2 of shard 2.
  EXPECT_EQ(shard_pieces(3, 12, 5, 4), (std::vector<int64_t>{2, 5, 2, 0}));
  EXPECT_EQ(shard_pieces(0, 20, 5, 4), (std::vector<int64_t>{5, 5, 5, 5}));
  EXPECT_EQ(shard_pieces(15, 20, 5, 4), (std::vector<int64_t>{0, 0, 0, 5}));
  EXPECT_EQ(shard_pieces(6, 7, 5, 4), (std::vector<int64_t>{0, 1, 0, 0}));
}

TEST(LrSchedule, LinearWarmupThenHalfCosineToMin) {
  LrSchedule s{1.0, 0.1, 4, 14};
  EXPECT_DOUBLE_EQ(s.at(1), 0.25);
  EXPECT_DOUBLE_EQ(s.at(4), 1.0);
  // Halfway through the 10 decay steps the cosine is at its midpoint (1 + 0.1) / 2.
  EXPECT_NEAR(s.at(9), 0.55, 1e-12);
  EXPECT_NEAR(s.at(14), 0.1, 1e-12);
  LrSchedule flat{0.5, 0.5, 0, 3};
  EXPECT_DOUBLE_EQ(flat.at(2), 0.5);
}

TEST(TokenSource, SyntheticIsAPureFunctionOfStepAndIndex) {
  auto a = synthetic_source(64, 9);
  auto b = synthetic_source(64, 9);
  std::vector<int64_t> x(17), y(17), z(17);
  a->sample(3, 5, 17, x.data());
  b->sample(3, 5, 17, y.data());
  a->sample(3, 6, 17, z.data());
  EXPECT_EQ(x, y);
  EXPECT_NE(x, z);
  for (auto t : x) EXPECT_TRUE(t >= 0 && t < 64);
  // An arithmetic progression modulo the vocabulary.
  for (int i = 2; i < 17; ++i) EXPECT_EQ((x[i] - x[i - 1] + 64) % 64, (x[1] - x[0] + 64) % 64);
}

TEST(TokenSource, Uint16FileSamplesAreWindowsOfTheFile) {
  const std::string dir = rttest::temp_dir("data_u16");
  const std::string path = dir + "/tokens.bin";
  {
    std::ofstream f(path, std::ios::binary);
    for (uint16_t i = 0; i < 1000; ++i) {
      const uint16_t v = static_cast<uint16_t>(i % 500);
      f.write(reinterpret_cast<const char*>(&v), 2);
    }
  }
  auto fmt = data_format_from_string("auto", path);
  ASSERT_TRUE(fmt.ok());
  EXPECT_EQ(fmt.value(), DataFormat::kUint16);
  auto src = file_source(path, DataFormat::kUint16, 500, 9, 1);
  ASSERT_TRUE(src.ok()) << src.error().message;
  std::vector<int64_t> t(9);
  (*src)->sample(2, 11, 9, t.data());
  for (int i = 1; i < 9; ++i) EXPECT_EQ(t[i], (t[i - 1] + 1) % 500);
  // A vocabulary too small for the file's ids is reported with the offending id.
  auto small = file_source(path, DataFormat::kUint16, 100, 9, 1);
  ASSERT_TRUE(small.ok());
  bool threw = false;
  for (int k = 0; k < 50 && !threw; ++k) {
    try {
      (*small)->sample(1, k, 9, t.data());
    } catch (const InputError& e) {
      threw = std::string(e.what()).find("vocabulary of 100") != std::string::npos;
    }
  }
  EXPECT_TRUE(threw);
  std::filesystem::remove_all(dir);
}

// weft train --varlen's documents: the same split as `weft varlen --data` (each ends with its eos;
// the tail after the last eos is one more), drawn per step as a pure function of the step.
TEST(Documents, SplitAtEosAndDrawnPerStepOncePerPass) {
  const std::string dir = rttest::temp_dir("docs");
  const std::string path = dir + "/docs.bin";
  const std::vector<uint16_t> toks = {5, 6, 0, 7, 0, 1, 2, 3, 4, 5, 6, 0, 9, 0, 8, 8, 8};  // 3, 2, 7, 2, 3 (no eos)
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(toks.data()), static_cast<std::streamsize>(toks.size() * 2));
  auto src = file_source(path, DataFormat::kUint16, 16, 2, 1);
  ASSERT_TRUE(src.ok());
  auto docs = split_documents(**src, 0);
  ASSERT_TRUE(docs.ok()) << docs.error().message;
  EXPECT_EQ(docs->length, (std::vector<int64_t>{3, 2, 7, 2, 3}));
  EXPECT_EQ(docs->start, (std::vector<int64_t>{0, 3, 5, 12, 14}));
  auto planner_view = varlen::document_lengths(path, 0, "uint16");
  ASSERT_TRUE(planner_view.ok());
  EXPECT_EQ(planner_view.value(), docs->length);
  std::vector<int64_t> t(7);
  (*src)->read(docs->start[2], 7, t.data());
  EXPECT_EQ(t, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 0}));

  // At most 3 tokens: the 7-token document is left out and counted; 2 documents per step.
  auto b = DocumentBatches::make(docs.value(), 2, 3, 42);
  ASSERT_TRUE(b.ok()) << b.error().message;
  const DocumentBatches& batches = *b.value();
  EXPECT_EQ(batches.kept(), 4);
  EXPECT_EQ(batches.dropped(), 1);
  // Steps 1-2 are the first pass over the 4 kept documents, 3-4 the second: each once per pass.
  for (int pass = 0; pass < 2; ++pass) {
    std::multiset<int64_t> seen;
    for (int s = 1; s <= 2; ++s)
      for (int64_t d : batches.batch(2 * pass + s)) seen.insert(d);
    EXPECT_EQ(seen, (std::multiset<int64_t>{0, 1, 3, 4})) << "pass " << pass;
  }
  for (int s = 1; s <= 6; ++s) {
    EXPECT_EQ(batches.batch(s), batches.batch(s));  // a pure function of the step
    for (int64_t l : batches.lengths(s)) EXPECT_LE(l, 3);
  }
  // Another seed, another order of the same documents.
  auto other = DocumentBatches::make(docs.value(), 4, 3, 7);
  ASSERT_TRUE(other.ok());
  bool differs = false;
  for (int s = 1; s <= 8 && !differs; ++s) differs = other.value()->batch(s) != (*b.value()).batch(2 * s - 1);
  EXPECT_TRUE(differs);

  // Errors: no document fits, no eos, a source without a file.
  auto none = DocumentBatches::make(docs.value(), 2, 1, 42);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().message.find("sequence length 1"), std::string::npos) << none.error().message;
  EXPECT_FALSE(split_documents(**src, -1).ok());
  auto synth = synthetic_source(16, 1);
  auto no_file = split_documents(*synth, 0);
  ASSERT_FALSE(no_file.ok());
  EXPECT_NE(no_file.error().message.find("--data"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// A Megatron-LM indexed dataset (written byte by byte from its documented layout): the .bin's tokens
// in the index's dtype, read like any token file, its documents from the index (no --eos), the
// same documents `weft varlen --data` plans; `auto` tells it from a nanoGPT .bin by the .idx beside.
TEST(TokenSource, MegatronDatasetReadsTokensAndDocumentsFromItsIndex) {
  const std::string dir = rttest::temp_dir("megatron");
  weft::testing::MegatronDataset d;
  d.dtype_code = 4;  // int32, as Megatron writes for vocabularies of 65,500 or more
  d.documents = {{{5, 6, 7, 2}}, {{9, 10}, {11, 12, 13, 2}}, {{1, 2}}, {}, {{3, 3, 3}}};  // one empty document
  weft::testing::write_megatron_dataset(dir + "/corpus_text_document", d);
  const std::string prefix = dir + "/corpus_text_document";
  for (const std::string& spelled : {prefix, prefix + ".bin"}) {
    auto fmt = data_format_from_string("auto", spelled);
    ASSERT_TRUE(fmt.ok());
    EXPECT_EQ(fmt.value(), DataFormat::kMegatron) << spelled;
  }
  auto src = file_source(prefix, DataFormat::kMegatron, 16, 4, 1);
  ASSERT_TRUE(src.ok()) << src.error().message;
  EXPECT_EQ((*src)->size(), 15);
  std::vector<int64_t> all(15);
  (*src)->read(0, 15, all.data());
  EXPECT_EQ(all, (std::vector<int64_t>{5, 6, 7, 2, 9, 10, 11, 12, 13, 2, 1, 2, 3, 3, 3}));
  auto docs = split_documents(**src, -1);  // the index's documents: no eos needed
  ASSERT_TRUE(docs.ok()) << docs.error().message;
  EXPECT_EQ(docs->length, (std::vector<int64_t>{4, 6, 2, 3}));
  EXPECT_EQ(docs->start, (std::vector<int64_t>{0, 4, 10, 12}));
  auto planner_view = varlen::load_documents("", prefix, -1, "auto");
  ASSERT_TRUE(planner_view.ok()) << planner_view.error().message;
  EXPECT_EQ(planner_view.value(), docs->length);
  auto with_eos = varlen::load_documents("", prefix, 2, "megatron");
  ASSERT_FALSE(with_eos.ok());
  EXPECT_NE(with_eos.error().message.find("drop --eos"), std::string::npos) << with_eos.error().message;
  // Samples are windows of the documents' tokens back to back, as for a plain token file.
  std::vector<int64_t> t(4);
  for (int k = 0; k < 20; ++k) {
    (*src)->sample(1, k, 4, t.data());
    bool found = false;
    for (int at = 0; at + 4 <= 15 && !found; ++at) found = std::equal(t.begin(), t.end(), all.begin() + at);
    EXPECT_TRUE(found);
  }
  // A negative id in a signed file, an id past the vocabulary: named with the offset.
  d.documents = {{{4, -3, 5, 6, 7}}};
  weft::testing::write_megatron_dataset(dir + "/neg", d);
  auto neg = file_source(dir + "/neg", DataFormat::kMegatron, 16, 4, 1);
  ASSERT_TRUE(neg.ok()) << neg.error().message;
  try {
    (*neg)->read(0, 5, all.data());
    ADD_FAILURE() << "a negative id was read";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("token id -3 at token offset 1 is negative"), std::string::npos) << e.what();
  }
  auto small = file_source(prefix, DataFormat::kMegatron, 8, 4, 1);
  ASSERT_TRUE(small.ok());
  EXPECT_THROW((*small)->read(0, 15, all.data()), InputError);
  // A damaged index: the reader's error behind --data, before anything is mapped.
  {
    std::ofstream f(prefix + ".bin", std::ios::binary | std::ios::app);
    f.write("xx", 2);
  }
  auto damaged = file_source(prefix, DataFormat::kMegatron, 16, 4, 1);
  ASSERT_FALSE(damaged.ok());
  EXPECT_NE(damaged.error().message.find("--data: " + prefix + ".idx"), std::string::npos) << damaged.error().message;
  EXPECT_EQ(data_format_from_string("megatron", "any").value(), DataFormat::kMegatron);
  std::filesystem::remove_all(dir);
}

// safetensors: a file written byte by byte from the format's layout (8-byte header length, JSON
// header, tensors) reads back; the float conversions round to nearest even; damage is named.
std::string safetensors_bytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

TEST(Safetensors, ReadsAHandWrittenFileAndConvertsFloats) {
  const std::string dir = rttest::temp_dir("safetensors");
  const float a[2] = {1.5f, -2.25f};
  const uint16_t b[2] = {0x3f80, 0xc040};  // bf16 1.0, -3.0
  const uint16_t c[1] = {0x3c00};          // f16 1.0
  std::string data(reinterpret_cast<const char*>(a), 8);
  data.append(reinterpret_cast<const char*>(b), 4).append(reinterpret_cast<const char*>(c), 2);
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"BF16","shape":[2,1],"data_offsets":[8,12]},)"
      R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"c":{"dtype":"F16","shape":[],"data_offsets":[12,14]}})";
  const std::string path = dir + "/w.safetensors";
  std::ofstream(path, std::ios::binary) << safetensors_bytes(header, data);
  auto f = runtime::SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ((*f)->entries().size(), 3u);
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
  EXPECT_EQ(*(*f)->read_float("a"), (std::vector<float>{1.5f, -2.25f}));
  EXPECT_EQ(*(*f)->read_float("b"), (std::vector<float>{1.0f, -3.0f}));
  EXPECT_EQ(*(*f)->read_float("c"), (std::vector<float>{1.0f}));
  EXPECT_EQ((*f)->find("b")->shape, (std::vector<int64_t>{2, 1}));

  // Rounding: ties to even in bf16 and f16; f16's largest finite, overflow, smallest subnormal.
  auto bits = [](uint32_t u) { float x; std::memcpy(&x, &u, 4); return x; };
  EXPECT_EQ(runtime::float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(runtime::float_to_bf16(bits(0x3f808000)), 0x3f80);  // tie, to even
  EXPECT_EQ(runtime::float_to_bf16(bits(0x3f818000)), 0x3f82);  // tie, to even
  EXPECT_EQ(runtime::float_to_bf16(bits(0x3f808001)), 0x3f81);
  EXPECT_EQ(runtime::float_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(runtime::float_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(runtime::float_to_f16(65520.0f), 0x7c00);
  EXPECT_EQ(runtime::float_to_f16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(runtime::float_to_f16(0.1f), 0x2e66);
  EXPECT_EQ(runtime::float_to_f16(-0.0f), 0x8000);
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;  // NaNs
    ASSERT_EQ(runtime::float_to_f16(runtime::f16_to_float(static_cast<uint16_t>(h))), h) << std::hex << h;
  }
  // What weft writes reads back: exactly in F32, rounded in BF16.
  const std::vector<float> v{0.1f, -7.0f, 3.14159f, 1e-3f, 2.5f, 0.0f};
  ASSERT_TRUE(runtime::write_safetensors(dir + "/o.safetensors", {{"x", {2, 3}, &v}}, runtime::SaveDType::kF32).ok());
  auto o = runtime::SafetensorsFile::open(dir + "/o.safetensors");
  ASSERT_TRUE(o.ok()) << o.error().message;
  EXPECT_EQ(*(*o)->read_float("x"), v);
  ASSERT_TRUE(runtime::write_safetensors(dir + "/h.safetensors", {{"x", {6}, &v}}, runtime::SaveDType::kBF16).ok());
  auto h = runtime::SafetensorsFile::open(dir + "/h.safetensors");
  ASSERT_TRUE(h.ok());
  for (size_t i = 0; i < v.size(); ++i)
    EXPECT_EQ((*(*h)->read_float("x"))[i], runtime::bf16_to_float(runtime::float_to_bf16(v[i])));
  std::filesystem::remove_all(dir);
}

TEST(Safetensors, RefusesDamagedFilesNamingTheTensorAndNumbers) {
  const std::string dir = rttest::temp_dir("safetensors_bad");
  const std::string eight(8, '\0');
  struct Case {
    const char* what;
    std::string bytes;
    std::string says;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<Case> cases = {
      {"truncated data", safetensors_bytes(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", eight),
       "need 16 bytes of data but the file has 8 (truncated)"},
      {"header past the end", std::string("\xff\x00\x00\x00\x00\x00\x00\x00", 8) + "{}", "(truncated)"},
      {"not JSON", safetensors_bytes("{nope", ""), "not JSON"},
      {"unknown dtype", safetensors_bytes(R"({"a":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", eight),
       "tensor a: unknown dtype \"Q7\""},
      {"span", safetensors_bytes(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight),
       "span 8 bytes, but F32 [3] needs 12"},
      {"overlap", safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight),
       "tensors overlap"},
      {"gap", safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight), "a gap before it"},
      {"trailing", safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", eight),
       "4 bytes after the last tensor"},
      {"no offsets", safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1]}})", ""), "needs dtype, shape and data_offsets"},
      // 4 x (2^62 + 1) elements wrap around 2^64 to 4, whose 16 bytes the offsets span.
      {"shape that wraps", safetensors_bytes(R"({"a":{"dtype":"F32","shape":[4,4611686018427387905],"data_offsets":[0,16]}})",
                                             std::string(16, '\0')),
       "has more elements than a file can hold"},
  };
  for (const Case& c : cases) {
    const std::string path = dir + "/bad.safetensors";
    std::ofstream(path, std::ios::binary | std::ios::trunc) << c.bytes;
    auto f = runtime::SafetensorsFile::open(path);
    ASSERT_FALSE(f.ok()) << c.what;
    EXPECT_NE(f.error().message.find(path), std::string::npos) << c.what << ": " << f.error().message;
    EXPECT_NE(f.error().message.find(c.says), std::string::npos) << c.what << ": " << f.error().message;
  }
  // A value that is not finite: named with its element.
  std::string data(8, '\0');
  std::memcpy(data.data() + 4, &nan, 4);
  std::ofstream(dir + "/nan.safetensors", std::ios::binary)
      << safetensors_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data);
  auto f = runtime::SafetensorsFile::open(dir + "/nan.safetensors");
  ASSERT_TRUE(f.ok());
  auto v = (*f)->read_float("w");
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.error().message.find("tensor w holds a value that is not finite at element 1"), std::string::npos)
      << v.error().message;
  std::filesystem::remove_all(dir);
}

TEST(Stragglers, SlowFlagParsesAndNamesWhatIsWrong) {
  auto none = parse_slow("", 4);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->applies(0, 1));
  auto a = parse_slow("1:2.5", 4);
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_EQ(a->rank, 1);
  EXPECT_DOUBLE_EQ(a->factor, 2.5);
  EXPECT_TRUE(a->applies(1, 1));
  EXPECT_FALSE(a->applies(2, 1));
  auto b = parse_slow("3:2:10", 4);
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE(b->applies(3, 9));
  EXPECT_TRUE(b->applies(3, 10));
  EXPECT_TRUE(b->applies(3, 1000));
  auto c = parse_slow("2:3:4:6", 4);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_FALSE(c->applies(2, 3));
  EXPECT_TRUE(c->applies(2, 4));
  EXPECT_TRUE(c->applies(2, 6));
  EXPECT_FALSE(c->applies(2, 7));
  for (const auto& [arg, want] : std::vector<std::pair<std::string, std::string>>{
           {"4:2", "rank 4 is outside the job's 4 ranks"},
           {"1:0.5", "FACTOR 0.5 must be at least 1"},
           {"1:x", "FACTOR is not a number"},
           {"1", "two to four fields"},
           {"1:2:3:4:5", "two to four fields"},
           {"1:2:5:4", "TO_STEP must be a step number, FROM_STEP (5) or more"},
           {"1:2:0", "FROM_STEP"}}) {
    auto r = parse_slow(arg, 4);
    ASSERT_FALSE(r.ok()) << arg;
    EXPECT_EQ(r.error().kind, ErrorKind::kBadInput);
    EXPECT_NE(r.error().message.find(want), std::string::npos) << r.error().message;
  }
}

// Named once after `steps` slow steps in a row against the median, again once recovered; a single
// slow step or a uniformly slower job names nobody.
TEST(Stragglers, NamedAfterStepsInARowAndWhenBack) {
  StragglerDetector d(StragglerOptions{1.25, 3});
  EXPECT_TRUE(d.update(1, {1.0, 2.0, 1.0, 1.0}).empty());
  EXPECT_TRUE(d.update(2, {1.0, 1.0, 1.0, 1.0}).empty());  // the run is broken
  EXPECT_TRUE(d.update(3, {1.0, 2.0, 1.0, 1.1}).empty());
  EXPECT_TRUE(d.update(4, {1.0, 2.0, 1.0, 1.1}).empty());
  auto named = d.update(5, {1.0, 2.0, 1.0, 1.1});
  ASSERT_EQ(named.size(), 1u);
  EXPECT_NE(named[0].find("rank 1 is a straggler"), std::string::npos) << named[0];
  EXPECT_EQ(d.stragglers(), std::set<int>{1});
  EXPECT_TRUE(d.update(6, {1.0, 2.0, 1.0, 1.0}).empty());  // named once
  EXPECT_TRUE(d.update(7, {3.0, 3.0, 3.0, 3.0}).empty());  // all slower: nobody stands out
  EXPECT_TRUE(d.update(8, {1.0, 1.1, 1.0, 1.0}).empty());
  auto back = d.update(9, {1.0, 1.1, 1.0, 1.0});
  ASSERT_EQ(back.size(), 1u);
  EXPECT_NE(back[0].find("rank 1 is no longer a straggler"), std::string::npos) << back[0];
  EXPECT_TRUE(d.stragglers().empty());
  StragglerDetector one;
  EXPECT_TRUE(one.update(1, {5.0}).empty());  // one rank has no peers to compare with
}

// Slowdowns are compute against the plan's expectation, over the ranks' lower quartile: a rank given
// half the work (expected half) that takes as long is 2x slow; the scale of either list does not
// matter; one rank that ran fast in a noisy step does not make the others slow.
TEST(Adapt, MeasuredSlowdownIsComputeAgainstThePlan) {
  const auto s = measured_slowdown({1.0, 1.0, 2.0, 1.0}, {1.0, 0.5, 1.0, 1.0});
  ASSERT_EQ(s.size(), 4u);
  EXPECT_DOUBLE_EQ(s[0], 1.0);
  EXPECT_DOUBLE_EQ(s[1], 2.0);
  EXPECT_DOUBLE_EQ(s[2], 2.0);
  EXPECT_DOUBLE_EQ(s[3], 1.0);
  const auto scaled = measured_slowdown({10.0, 10.0, 20.0, 10.0}, {3.0, 1.5, 3.0, 3.0});
  for (size_t r = 0; r < 4; ++r) EXPECT_DOUBLE_EQ(scaled[r], s[r]);
  const auto noisy = measured_slowdown({0.5, 1.0, 1.05, 2.0}, {1.0, 1.0, 1.0, 1.0});
  EXPECT_NEAR(noisy[1], 1.0 / (0.25 * 0.5 + 0.75 * 1.0), 1e-12);  // the quartile lies between 0.5 and 1.0
  EXPECT_DOUBLE_EQ(noisy[0], 1.0);                                   // faster than the quartile: 1
  EXPECT_GT(noisy[3], 2.0);
  // Without expectations (a mismatch in size), nobody is slow.
  for (double x : measured_slowdown({1.0, 3.0}, {})) EXPECT_DOUBLE_EQ(x, 1.0);
}

// Re-plans after `steps` steps in a row beyond the margin of what the plan assumes, with the
// median of those steps rounded to 0.05; a broken run of steps triggers nothing. After a switch the
// next `steps` steps calibrate the expectation (here the new plan's expectation is off for rank 1:
// it takes 0.6 where the model says 0.25 x 2), so only the recovery re-plans.
TEST(Adapt, ReplansAfterStepsInARowCalibratesAfterASwitchAndSeesTheRecovery) {
  const std::vector<double> even{1.0, 1.0, 1.0, 1.0};
  Adapter a(AdaptOptions{1.25, 3, 1.05}, 4);
  EXPECT_FALSE(a.update({1.0, 1.1, 1.0, 1.0}, even));  // within the margin
  EXPECT_FALSE(a.update({1.0, 2.0, 1.0, 1.0}, even));
  EXPECT_FALSE(a.update({1.0, 1.0, 1.0, 1.0}, even));  // broken: starts again
  // Rank 3 reads 1.1 in these steps: within the margin, so it stays as assumed (1), and only rank 1's
  // slowdown is re-planned for.
  EXPECT_FALSE(a.update({1.0, 2.02, 1.0, 1.1}, even));
  EXPECT_FALSE(a.update({1.0, 1.93, 1.0, 1.1}, even));
  auto want = a.update({1.0, 2.1, 1.0, 1.1}, even);
  ASSERT_TRUE(want.has_value());
  EXPECT_EQ(*want, (std::vector<double>{1.0, 2.0, 1.0, 1.0}));
  a.switched(*want);
  const std::vector<double> aware{1.2, 0.25, 1.2, 1.2};  // the new plan's expectation, rank 1 given less
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(a.update({1.0, 0.6, 1.0, 1.0}, aware)) << "calibrating";
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(a.update({1.0, 0.62, 1.02, 1.0}, aware)) << "as assumed";
  EXPECT_FALSE(a.update({1.0, 0.3, 1.0, 1.0}, aware));  // rank 1 recovered: half the time
  EXPECT_FALSE(a.update({1.0, 0.3, 1.0, 1.0}, aware));
  auto back = a.update({1.0, 0.31, 1.0, 1.0}, aware);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, even);
  // The wrong number of ranks is ignored, not a crash.
  EXPECT_FALSE(a.update({2.0, 1.0}, {1.0, 1.0}));
  // A suspended rank (no work in the plan) is not measured: its near-zero compute is no recovery,
  // and it keeps the slowdown the plan was made for.
  a.switched({1.0, 8.0, 1.0, 1.0});
  const std::vector<double> without{1.3, 0.0, 1.3, 1.3};
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(a.update({1.0, 0.01, 1.0, 1.0}, without)) << "calibrating";
  for (int i = 0; i < 6; ++i) EXPECT_FALSE(a.update({1.0, 0.01, 1.01, 1.0}, without)) << "as assumed, step " << i;
  // Another rank slowing down re-plans, with the suspended one as assumed.
  for (int i = 0; i < 2; ++i) EXPECT_FALSE(a.update({1.0, 0.01, 2.0, 1.0}, without));
  auto again = a.update({1.0, 0.01, 2.0, 1.0}, without);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(*again, (std::vector<double>{1.0, 8.0, 2.0, 1.0}));
  // With probes (every rank timing the same small matmul while one has no work) the suspended rank
  // is measured by its probe against the working ranks': at their speed it has recovered.
  a.switched({1.0, 8.0, 1.0, 1.0});
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(a.update({1.0, 0.01, 1.0, 1.0}, without, {1.0, 8.1, 1.0, 1.0}));
  for (int i = 0; i < 4; ++i)
    EXPECT_FALSE(a.update({1.0, 0.01, 1.0, 1.0}, without, {1.0, 7.9, 1.02, 1.0})) << "still slow, step " << i;
  for (int i = 0; i < 2; ++i) EXPECT_FALSE(a.update({1.0, 0.01, 1.0, 1.0}, without, {1.0, 1.02, 1.0, 0.98}));
  auto probed = a.update({1.0, 0.01, 1.0, 1.0}, without, {1.0, 1.0, 1.0, 1.0});
  ASSERT_TRUE(probed.has_value());
  EXPECT_EQ(*probed, (std::vector<double>{1.0, 1.0, 1.0, 1.0}));
}

TEST(TokenSource, FileErrorsNameTheFile) {
  auto missing = file_source("/nonexistent/x.bin", DataFormat::kUint16, 100, 9, 1);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().kind, ErrorKind::kIo);
  EXPECT_NE(missing.error().message.find("/nonexistent/x.bin"), std::string::npos);
  const std::string dir = rttest::temp_dir("data_text");
  { std::ofstream(dir + "/t.txt") << "hello, world"; }
  auto text = file_source(dir + "/t.txt", DataFormat::kText, 64, 9, 1);
  std::filesystem::remove_all(dir);
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.error().message.find("vocabulary is 64"), std::string::npos);
}

TEST(ParamsFile, RoundTripAndCompare) {
  const std::string dir = rttest::temp_dir("params");
  ParamsFile a;
  a.step = 3;
  a.params.push_back({"x", {2, 2}, {1, 2, 3, 4}});
  a.params.push_back({"y", {3}, {5, 6, 7}});
  ASSERT_TRUE(write_params_file(dir + "/a", a).ok());
  auto b = read_params_file(dir + "/a");
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(b->step, 3);
  ASSERT_EQ(b->params.size(), 2u);
  EXPECT_EQ(b->params[1].data, (std::vector<float>{5, 6, 7}));
  ParamsFile c = a;
  c.params[1].data[2] = 7.5f;
  auto d = compare_params(c, a);
  ASSERT_TRUE(d.ok());
  EXPECT_DOUBLE_EQ(d->max_abs, 0.5);
  EXPECT_EQ(d->worst, "y");
  c.params[0].name = "z";
  EXPECT_FALSE(compare_params(c, a).ok());
  std::filesystem::remove_all(dir);
}

struct EnvGuard {
  std::vector<std::string> names{"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                                 "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"};
  EnvGuard() {
    for (auto& n : names) unsetenv(n.c_str());
  }
  ~EnvGuard() {
    for (auto& n : names) unsetenv(n.c_str());
  }
};

TEST(DistEnv, ReadsTorchrunVariablesWithFallbacks) {
  EnvGuard g;
  auto one = read_dist_env();
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->world, 1);
  EXPECT_EQ(one->rank, 0);
  setenv("RANK", "2", 1);
  setenv("WORLD_SIZE", "4", 1);
  setenv("MASTER_PORT", "1234", 1);
  auto e = read_dist_env();
  ASSERT_TRUE(e.ok()) << e.error().message;
  EXPECT_EQ(e->rank, 2);
  EXPECT_EQ(e->world, 4);
  EXPECT_EQ(e->local_rank, 2);
  EXPECT_EQ(e->master_port, 1234);
  EXPECT_EQ(e->master_addr, "127.0.0.1");
  setenv("RANK", "4", 1);
  auto bad = read_dist_env();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("RANK: 4 is out of range"), std::string::npos);
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  auto mpi = read_dist_env();
  ASSERT_TRUE(mpi.ok());
  EXPECT_EQ(mpi->rank, 1);
  EXPECT_EQ(mpi->world, 2);
}

TEST(PlanSupport, RefusesWhatTheRuntimeCannotRunNamingIt) {
  using namespace rttest;
  // Context parallelism runs where its 2 cp chunks cut the sequence evenly.
  Plan cp = uniform(tiny_llama(), 2, 1, strat(1, 2));
  cp.stages[0].layers[1].dp = 1;
  cp.stages[0].layers[1].cp = 2;
  EXPECT_TRUE(check_supported(cp).ok()) << check_supported(cp).error().message;
  cp.train.seq = 18;
  Status s = check_supported(cp);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("stages[0].layers[1].cp: context parallelism (cp=2) cuts the sequence into 2*cp = 4 "
                                   "chunks (two per rank, for causal load balance), which does not divide sequence "
                                   "length 18"),
            std::string::npos)
      << s.error().message;

  Plan moe = uniform(tiny_gpt(), 1, 1, strat(1, 1));
  moe.model.groups[0].shape.moe = MoeSpec{4, 2, 64, 0};
  s = check_supported(moe);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("MoE"), std::string::npos) << s.error().message;

  Plan inter = uniform(tiny_gpt(), 2, 2, strat(1, 1));
  inter.train.schedule = Schedule::kInterleaved;
  inter.train.vp = 2;
  inter.stages.clear();
  for (int k = 0; k < 4; ++k) inter.stages.push_back(Stage{k, {strat(1, 1)}, {}});
  EXPECT_TRUE(check_supported(inter).ok()) << check_supported(inter).error().message;

  // validate() runs first: a degree that does not divide is named with its numbers.
  Plan tp3 = uniform(tiny_gpt(), 3, 1, strat(3, 1));
  s = check_supported(tp3);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("does not divide"), std::string::npos) << s.error().message;

  EXPECT_TRUE(check_supported(uniform(tiny_llama(), 8, 2, strat(2, 2, 1, true, 3, Recompute::kFull))).ok());
}

}  // namespace
}  // namespace weft::runtime
