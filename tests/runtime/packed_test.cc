// Packed documents in one sample (docs/varlen.md): with Model::set_documents, attention stays inside
// each document and positions restart at each document's first token, so a packed sample's summed
// token losses and every parameter gradient equal those of its documents run one by one (1e-5).
// Learned positions (GPT) and rotary positions with grouped-query attention (Llama), without and
// with selective and full recompute. In one process, on one rank.
#include <gtest/gtest.h>

#include <random>
#include <tuple>

#include "rt_util.h"
#include "weft/plan/geometry.h"
#include "weft/runtime/comm.h"
#include "weft/runtime/model.h"
#include "weft/runtime/ops.h"

namespace weft::rttest {
namespace {

// Banded attention with sinks (GPT-OSS's attention) against its definition written out per query
// in double precision: query i attends to keys max(0, i - w + 1) .. i, softmax over those scores
// and the head's sink logit, the sink's weight dropped; GQA's key heads serve consecutive query
// heads. Packed documents keep attention inside a document. Without a window and sinks it is
// plain causal attention.
// The router's choice (route_top_k) against its definition, on scores built so that each rule
// changes the answer: 8 experts in 4 groups of 2, top 2.
TEST(Router, GroupLimitedChoiceAndBalancingBias) {
  using runtime::route_top_k;
  //                        group 0     group 1     group 2     group 3
  const at::Tensor s = at::tensor({0.90f, 0.05f, 0.50f, 0.48f, 0.60f, 0.01f, 0.20f, 0.10f}).view({1, 8});
  auto idx = [](const at::Tensor& i) { return std::vector<int64_t>(i.data_ptr<int64_t>(), i.data_ptr<int64_t>() + i.numel()); };
  // No limit: the two best of all, experts 0 and 4.
  EXPECT_EQ(idx(route_top_k(s, {}, 2, 1, 1, 1).second), (std::vector<int64_t>{0, 4}));
  // One group scored by its best expert (DeepSeek-V2): group 0 (0.90) wins, so experts 0 and 1.
  EXPECT_EQ(idx(route_top_k(s, {}, 2, 4, 1, 1).second), (std::vector<int64_t>{0, 1}));
  // Scored by the sum of its two best (DeepSeek-V3, Megatron-LM): group 1 (0.98) beats group 0
  // (0.95), so experts 2 and 3 though expert 0 scores highest.
  EXPECT_EQ(idx(route_top_k(s, {}, 2, 4, 1, 2).second), (std::vector<int64_t>{2, 3}));
  // Two groups by their sums (1 and 0): the best two of experts 0..3.
  EXPECT_EQ(idx(route_top_k(s, {}, 2, 4, 2, 2).second), (std::vector<int64_t>{0, 2}));
  // A bias picks (expert 5 now first, its group with it) but the weights stay the unbiased scores.
  const at::Tensor bias = at::tensor({0.f, 0.f, 0.f, 0.f, 0.f, 1.0f, 0.f, 0.f});
  const auto [w, i] = route_top_k(s, bias, 2, 4, 1, 2);
  EXPECT_EQ(idx(i), (std::vector<int64_t>{5, 4}));
  EXPECT_FLOAT_EQ(w[0][0].item<float>(), 0.01f);
  EXPECT_FLOAT_EQ(w[0][1].item<float>(), 0.60f);
  // The weights carry the scores' gradient, none of the bias's.
  at::Tensor x = s.clone().requires_grad_(true);
  route_top_k(x, bias, 2, 4, 1, 2).first.sum().backward();
  const at::Tensor g = x.grad().view({8});
  for (int e = 0; e < 8; ++e) EXPECT_EQ(g[e].item<float>(), e == 4 || e == 5 ? 1.0f : 0.0f) << e;
}

TEST(Attention, BandedWithSinksIsItsDefinition) {
  at::manual_seed(5);
  const int64_t b = 2, T = 9, h = 4, kvh = 2, d = 3, w = 4;
  const at::Tensor q = at::randn({b, T, h, d}, at::kDouble), k = at::randn({b, T, kvh, d}, at::kDouble);
  const at::Tensor v = at::randn({b, T, kvh, d}, at::kDouble), sinks = at::randn({h}, at::kDouble);
  at::Tensor ids = at::zeros({b, T}, at::kLong);
  ids.narrow(1, 6, 3).fill_(1);  // two documents: tokens 0-5 and 6-8
  auto reference = [&](int64_t window, bool with_sinks, bool docs) {
    at::Tensor out = at::zeros({b, T, h, d}, at::kDouble);
    for (int64_t s = 0; s < b; ++s)
      for (int64_t hd = 0; hd < h; ++hd)
        for (int64_t i = 0; i < T; ++i) {
          std::vector<double> logits;
          std::vector<int64_t> keys;
          for (int64_t j = 0; j <= i; ++j) {
            if (window > 0 && i - j >= window) continue;
            if (docs && ids[s][i].item<int64_t>() != ids[s][j].item<int64_t>()) continue;
            keys.push_back(j);
            logits.push_back((q[s][i][hd] * k[s][j][hd / (h / kvh)]).sum().item<double>() / std::sqrt(double(d)));
          }
          double mx = with_sinks ? sinks[hd].item<double>() : -1e300;
          for (double x : logits) mx = std::max(mx, x);
          double z = with_sinks ? std::exp(sinks[hd].item<double>() - mx) : 0.0;
          for (double x : logits) z += std::exp(x - mx);
          for (size_t n = 0; n < keys.size(); ++n)
            out[s][i][hd] += std::exp(logits[n] - mx) / z * v[s][keys[n]][hd / (h / kvh)];
        }
    return out;
  };
  for (const auto& [window, with_sinks, docs] : std::vector<std::tuple<int64_t, bool, bool>>{
           {w, true, false}, {w, false, false}, {0, true, false}, {0, false, false}, {w, true, true}}) {
    std::vector<at::Tensor> in{q, k, v};
    if (with_sinks) in.push_back(sinks);
    if (docs) in.push_back(ids);
    const at::Tensor got = runtime::banded_sink_attention(in, window, with_sinks);
    EXPECT_LT((got - reference(window, with_sinks, docs)).abs().max().item<double>(), 1e-12)
        << "window " << window << ", sinks " << with_sinks << ", documents " << docs;
  }
}


using runtime::Channel;
using runtime::CommConfig;
using runtime::GroupSet;
using runtime::Model;

std::vector<at::Tensor> grads(Model& m) {
  std::vector<at::Tensor> out;
  for (runtime::Unit& u : m.units()) out.push_back(u.grad.clone());
  return out;
}

void zero(Model& m) {
  for (runtime::Unit& u : m.units()) u.grad.zero_();
}

double loss_of(Model& m, const at::Tensor& tokens, const at::Tensor& targets) {
  at::Tensor loss = m.head_loss(m.forward_layers(m.embed(tokens)), targets);
  loss.backward();
  return loss.item<double>();
}

void check(const ModelSpec& spec, Recompute rc) {
  LayerStrategy s;
  s.recompute = rc;
  const Plan plan = uniform(spec, 1, 1, s, {spec.num_layers()}, Schedule::k1F1B, 1, 1);
  GroupSet groups(CommConfig{});
  groups.build(process_groups(plan));
  groups.build(grad_groups(plan), Channel::kGrad);
  Model m(plan, 0, groups, 7);
  const std::vector<int64_t> lens = {5, 1, 7, 3};  // 16 = the plan's sequence
  std::mt19937 rng(11);
  std::vector<int64_t> tok, tgt, ids;
  for (size_t d = 0; d < lens.size(); ++d)
    for (int64_t i = 0; i < lens[d]; ++i) {
      tok.push_back(static_cast<int64_t>(rng() % spec.vocab));
      tgt.push_back(static_cast<int64_t>(rng() % spec.vocab));
      ids.push_back(static_cast<int64_t>(d));
    }
  const auto T = static_cast<int64_t>(tok.size());
  const at::Tensor tokens = at::tensor(tok).view({1, T}), targets = at::tensor(tgt).view({1, T});
  const at::Tensor doc_ids = at::tensor(ids).view({1, T});

  // Packed, attention and positions per document.
  ASSERT_TRUE(m.set_documents(doc_ids).ok());
  zero(m);
  const double packed = loss_of(m, tokens, targets);
  const std::vector<at::Tensor> g_packed = grads(m);

  // The documents one by one, gradients accumulated.
  ASSERT_TRUE(m.set_documents(at::Tensor()).ok());
  zero(m);
  double separate = 0;
  int64_t at0 = 0;
  for (int64_t n : lens) {
    separate += loss_of(m, tokens.narrow(1, at0, n), targets.narrow(1, at0, n));
    at0 += n;
  }
  const std::vector<at::Tensor> g_sep = grads(m);
  EXPECT_NEAR(packed, separate, 1e-5 * std::abs(separate)) << spec.name;
  for (size_t u = 0; u < g_sep.size(); ++u) {
    const double scale = std::max(1e-6, g_sep[u].abs().max().item<double>());
    EXPECT_LT((g_packed[u] - g_sep[u]).abs().max().item<double>(), 1e-5 * scale)
        << spec.name << " unit " << m.units()[u].spec.name;
  }

  // Without the document ids the same tokens attend across documents: a different loss.
  zero(m);
  const double mixed = loss_of(m, tokens, targets);
  EXPECT_GT(std::abs(mixed - separate), 1e-4 * std::abs(separate)) << spec.name;
}

TEST(RuntimePacked, GptDocumentsEqualSeparateRuns) { check(tiny_gpt(), Recompute::kNone); }
TEST(RuntimePacked, LlamaDocumentsEqualSeparateRuns) { check(tiny_llama(4, 2), Recompute::kNone); }
TEST(RuntimePacked, SelectiveRecompute) { check(tiny_llama(2, 2), Recompute::kSelective); }
TEST(RuntimePacked, FullRecompute) { check(tiny_gpt(2), Recompute::kFull); }

TEST(RuntimePacked, BadDocumentIdsAreErrors) {
  const ModelSpec spec = tiny_gpt(2);
  const Plan one = uniform(spec, 1, 1, LayerStrategy{}, {2}, Schedule::k1F1B, 1, 1);
  GroupSet groups(CommConfig{});
  groups.build(process_groups(one));
  groups.build(grad_groups(one), Channel::kGrad);
  Model m(one, 0, groups, 7);
  const Status bad = m.set_documents(at::zeros({1, 8}, at::kLong));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("[samples, 16]"), std::string::npos) << bad.error().message;
}

}  // namespace
}  // namespace weft::rttest
