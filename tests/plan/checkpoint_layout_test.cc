// Checkpoint layout and re-sharding (weft/plan/checkpoint_layout.h), without files or torch: every
// element of a simulated checkpoint carries a value naming its tensor, state and full index, so a
// re-sharded entry can be checked element by element against an independent computation of where
// each of its elements sits in the full tensor.
#include "weft/plan/checkpoint_layout.h"

#include <gtest/gtest.h>

#include <map>

#include "test_plans.h"
#include "weft/plan/geometry.h"

namespace weft {
namespace {

using testing::message_of;

// hidden 32, 4 heads of 8, kv_heads key/value heads, SwiGLU 64, vocab 64, RMSNorm, RoPE.
ModelSpec tiny_llama(int layers = 4, int kv_heads = 2) {
  return testing::llama_model("tiny-llama", layers, testing::swiglu_shape(32, 4, kv_heads, 64), 64);
}

// GPT-2 style: LayerNorm, learned positions, biases, tied embeddings.
ModelSpec tiny_gpt(int layers = 4) {
  ModelSpec m = testing::decoder_model("tiny-gpt", layers, testing::gpt_shape(32, 4), 64, 16);
  m.tied_embeddings = true;
  return m;
}

LayerStrategy st(int tp, int dp, int zero = 0, bool sp = false, int ulysses = 1) {
  LayerStrategy s;
  s.tp = tp;
  s.dp = dp;
  s.zero = zero;
  s.sp = sp;
  s.ulysses = ulysses;
  return s;
}

// `world` ranks in pp stages; layer i gets layers[i % layers.size()], the embedding `emb`.
Plan make_plan(const ModelSpec& m, int world, int pp, std::vector<LayerStrategy> layers, LayerStrategy emb) {
  Plan p;
  p.model = m;
  p.cluster = testing::small_cluster(world, 8);
  p.train = TrainSettings{.seq = 16, .global_batch = 8, .micro_batches = pp > 1 ? 2 : 1, .pp = pp};
  p.embedding = emb;
  const int L = m.num_layers();
  for (int k = 0; k < pp; ++k) {
    Stage s;
    s.first_layer = k * L / pp;
    for (int i = s.first_layer; i < (k + 1) * L / pp; ++i) s.layers.push_back(layers[static_cast<size_t>(i) % layers.size()]);
    p.stages.push_back(s);
  }
  EXPECT_EQ(message_of(validate(p)), "OK");
  return p;
}

// A value no other element of the state shares (exact in float: below 2^24).
float value_of(StateKind k, int param_id, int64_t full_index) {
  return static_cast<float>(static_cast<int>(k) * 4000000 + param_id * 30000 + full_index + 1);
}

// The full-tensor index of element j of a piece's slice, by unravelling it over the slice's shape.
int64_t full_index(const SavedPiece& p, int64_t j) {
  std::vector<int64_t> local = p.full_shape;
  if (p.shard_dim >= 0) local[static_cast<size_t>(p.shard_dim)] = p.shard_len;
  std::vector<int64_t> idx(local.size());
  for (size_t d = local.size(); d-- > 0;) {
    idx[d] = j % local[d];
    j /= local[d];
  }
  if (p.shard_dim >= 0) idx[static_cast<size_t>(p.shard_dim)] += p.shard_start;
  int64_t f = 0;
  for (size_t d = 0; d < idx.size(); ++d) f = f * p.full_shape[d] + idx[d];
  return f;
}

struct Ids {
  std::map<std::string, int> of;
  int operator()(const std::string& name) { return of.emplace(name, static_cast<int>(of.size())).first->second; }
};

// The values an entry must hold: each piece's elements, 0 in the padding.
std::vector<float> expected(const SavedEntry& e, Ids& ids) {
  std::vector<float> v(static_cast<size_t>(e.numel), 0.0f);
  for (const SavedPiece& p : e.pieces)
    for (int64_t i = 0; i < p.count; ++i)
      v[static_cast<size_t>(p.offset + i)] = value_of(e.kind, ids(p.param), full_index(p, p.local_begin + i));
  return v;
}

// Writes a simulated checkpoint under `a`, re-shards it for every rank of `b`, and checks every value.
void check_reshard(const Plan& a, const Plan& b) {
  Ids ids;
  const CheckpointIndex idx = checkpoint_index(a);
  ASSERT_EQ(idx.world, a.world_size());
  std::vector<std::vector<std::vector<float>>> files;
  for (const auto& entries : idx.ranks) {
    files.emplace_back();
    for (const SavedEntry& e : entries) files.back().push_back(expected(e, ids));
  }
  auto source = [&](int r, int e) -> Result<const std::vector<float>*> { return &files[static_cast<size_t>(r)][static_cast<size_t>(e)]; };
  for (int r = 0; r < b.world_size(); ++r) {
    // Odd ranks take their own copies first (as a running job re-sharding in place does): the
    // values are the same either way.
    auto fills = reshard_rank(idx, b, r, r % 2 == 1 ? r : -1);
    ASSERT_TRUE(fills.ok()) << fills.error().message;
    const std::vector<SavedEntry> want = saved_entries(b, r);
    ASSERT_EQ(fills->size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ((*fills)[i].name, want[i].name);
      auto got = fill_entry(idx, (*fills)[i], source);
      ASSERT_TRUE(got.ok()) << got.error().message;
      const std::vector<float> exp = expected(want[i], ids);
      ASSERT_EQ(got->size(), exp.size()) << want[i].name;
      int64_t wrong = 0;
      for (size_t k = 0; k < exp.size(); ++k) wrong += (*got)[k] != exp[k];
      EXPECT_EQ(wrong, 0) << "rank " << r << " " << want[i].name;
    }
  }
}

TEST(CheckpointLayout, EntriesCoverEveryTensorOncePerState) {
  // tp 2 with ZeRO-3 over dp 2 on a pipeline of 2: the pieces of all ranks, less replicas, are
  // every element of every tensor, for each of the three states.
  const Plan p = make_plan(tiny_llama(), 8, 2, {st(2, 2, 3, true)}, st(2, 2, 1));
  std::map<std::pair<std::string, int>, std::vector<int>> hits;  // (param, kind) -> count per element
  std::map<std::string, int64_t> size;
  for (int r = 0; r < p.world_size(); ++r)
    for (const SavedEntry& e : saved_entries(p, r))
      for (const SavedPiece& pc : e.pieces) {
        int64_t n = 1;
        for (auto d : pc.full_shape) n *= d;
        size[pc.param] = n;
        auto& h = hits[{pc.param, static_cast<int>(e.kind)}];
        h.resize(static_cast<size_t>(n));
        for (int64_t i = 0; i < pc.count; ++i) ++h[static_cast<size_t>(full_index(pc, pc.local_begin + i))];
      }
  EXPECT_EQ(hits.size(), 3 * size.size());
  for (const auto& [key, h] : hits)
    for (size_t i = 0; i < h.size(); ++i) {
      // Every element is held; the tp-replicated norms 2x (both tp ranks), the others once per dp
      // replica under ZeRO 0 and once under ZeRO-3 (params) / ZeRO 1-3 (moments).
      EXPECT_GE(h[i], 1) << key.first << " element " << i;
      if (h[i] < 1) break;
    }
  EXPECT_EQ(size.at("layers.0.attn.wq"), 32 * 32);
  EXPECT_EQ(size.at("layers.0.attn.wk"), 16 * 32);
  EXPECT_EQ(size.at("head.lm_head"), 64 * 32);
}

TEST(CheckpointLayout, ReshardsTensorPipelineToZero3) {
  check_reshard(make_plan(tiny_llama(), 4, 2, {st(2, 1, 0, true)}, st(2, 1)),
                make_plan(tiny_llama(), 2, 1, {st(1, 2, 3)}, st(1, 2, 3)));
}

TEST(CheckpointLayout, ReshardsZero3ToTensorPipelineAndBack) {
  const Plan a = make_plan(tiny_llama(), 2, 1, {st(1, 2, 3)}, st(1, 2, 3));
  const Plan b = make_plan(tiny_llama(), 8, 2, {st(2, 2, 2, true)}, st(2, 2, 1));
  check_reshard(a, b);
  check_reshard(b, a);
}

TEST(CheckpointLayout, ReshardsMixedLayersAndGqaReplicas) {
  // tp 4 over 2 kv heads: each kv head on two ranks. Per layer: tp4, ulysses 2 x dp 2 ZeRO-1,
  // dp4 ZeRO-2, tp2 x dp2 ZeRO-3.
  const Plan a = make_plan(tiny_llama(), 4, 1, {st(4, 1, 0, true), st(1, 2, 1, false, 2), st(1, 4, 2), st(2, 2, 3)},
                           st(4, 1));
  const Plan b = make_plan(tiny_llama(), 8, 4, {st(2, 1, 0), st(1, 2, 1)}, st(2, 1));
  check_reshard(a, b);
  check_reshard(b, a);
}

TEST(CheckpointLayout, ReshardsTiedEmbeddingAcrossStages) {
  // Under pp 2 the tied table lives on the first stage ("wte") and its copy on the last
  // ("wte_copy"); under pp 1 once.
  const Plan a = make_plan(tiny_gpt(), 4, 2, {st(2, 1, 0, true)}, st(2, 1));
  const Plan b = make_plan(tiny_gpt(), 4, 1, {st(1, 4, 3)}, st(1, 4, 3));
  check_reshard(a, b);
  check_reshard(b, a);
}

TEST(CheckpointLayout, BytesMovedCountOnlyStateThatChangesRanks) {
  const Plan dp = make_plan(tiny_llama(), 4, 1, {st(1, 4)}, st(1, 4));
  // The same plan, and ZeRO-1 over the same replicas (each rank keeps a slice of what it holds).
  EXPECT_EQ(*reshard_bytes_moved(dp, dp), 0);
  EXPECT_EQ(*reshard_bytes_moved(dp, make_plan(tiny_llama(), 4, 1, {st(1, 4, 1)}, st(1, 4, 1))), 0);
  // ZeRO-1 back to replicas: each rank receives the three quarters of the moments it lacks.
  const Plan z1 = make_plan(tiny_llama(), 4, 1, {st(1, 4, 1)}, st(1, 4, 1));
  int64_t params = 0;
  for (const UnitSpec& u : unit_specs(dp, 0)) params += u.numel;
  EXPECT_EQ(*reshard_bytes_moved(z1, dp), 4 * 3 * (2 * params / 4) * 4);
  // A 4-stage pipeline of 8 layers re-cut from 2:2:2:2 to 3:1:2:2: layer 2 moves from rank 1 to rank 0.
  const Plan a = make_plan(tiny_llama(8), 4, 4, {st(1, 1)}, st(1, 1));
  Plan b = a;
  b.stages[0].layers.push_back(b.stages[1].layers[0]);
  b.stages[1].first_layer = 3;
  b.stages[1].layers.pop_back();
  ASSERT_EQ(message_of(validate(b)), "OK");
  int64_t layer = 0;
  for (const UnitSpec& u : unit_specs(a, 1)) layer += u.numel;  // layers 2 and 3
  EXPECT_EQ(*reshard_bytes_moved(a, b), 3 * (layer / 2) * 4);  // its parameters and two moments
}

TEST(CheckpointLayout, RefusesAnotherModel) {
  const CheckpointIndex idx = checkpoint_index(make_plan(tiny_llama(4), 2, 1, {st(1, 2)}, st(1, 2)));
  auto deeper = reshard_rank(idx, make_plan(tiny_llama(6), 2, 1, {st(1, 2)}, st(1, 2)), 0);
  ASSERT_FALSE(deeper.ok());
  EXPECT_EQ(deeper.error().message,
            "checkpoint has no layers.4.ln1.weight [32], which the plan's model (tiny-llama) holds");
  auto shallower = reshard_rank(idx, make_plan(tiny_llama(2), 2, 1, {st(1, 2)}, st(1, 2)), 0);
  ASSERT_FALSE(shallower.ok());
  EXPECT_NE(shallower.error().message.find("which the plan's model (tiny-llama) lacks"), std::string::npos)
      << shallower.error().message;
  auto gqa = reshard_rank(idx, make_plan(tiny_llama(4, 4), 2, 1, {st(1, 2)}, st(1, 2)), 1);
  ASSERT_FALSE(gqa.ok());
  EXPECT_EQ(gqa.error().message, "layers.0.attn.wk: the checkpoint's is [16,32], the plan's model's [32,32]");
}

TEST(CheckpointLayout, IndexRoundTripsAndRejectsDamage) {
  const CheckpointIndex idx = checkpoint_index(make_plan(tiny_gpt(), 4, 2, {st(2, 1, 0, true)}, st(2, 1)));
  auto back = checkpoint_index_from_json(to_json(idx));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, idx);

  Json bad = to_json(idx);
  bad["files"][1]["entries"][0]["pieces"][0]["offset"] = 1 << 20;
  auto r = checkpoint_index_from_json(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("index.files[1].entries[0].pieces[0].offset: ["), std::string::npos)
      << r.error().message;
  EXPECT_NE(r.error().message.find("outside the entry of"), std::string::npos) << r.error().message;

  Json gap = to_json(idx);
  // No file holds the table's values any more (its moments stay).
  for (auto& f : gap["files"])
    for (auto& e : f["entries"])
      if (e["name"] == "wte.params" || e["name"] == "wte_copy.params") e["pieces"] = Json::array();
  auto g = checkpoint_index_from_json(gap);
  ASSERT_TRUE(g.ok());
  auto fills = reshard_rank(*g, make_plan(tiny_gpt(), 1, 1, {st(1, 1)}, st(1, 1)), 0);
  ASSERT_FALSE(fills.ok());
  EXPECT_EQ(fills.error().kind, ErrorKind::kIo);
  EXPECT_EQ(fills.error().message, "checkpoint lacks elements [0, 2048) of embed.wte (params)");
}

}  // namespace
}  // namespace weft
