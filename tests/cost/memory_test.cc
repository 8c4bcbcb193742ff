// Memory formulas against hand derivations (docs/cost-model.md §5).
#include "weft/cost/memory.h"

#include <gtest/gtest.h>

#include "tiny_specs.h"

namespace weft {
namespace {

// GPT-3 175B layer (Brown et al. 2020): h 12288, 96 heads of 128, FFN 4h, biases and dropout.
LayerShape gpt3_layer() { return testing::gpt_shape(12288, 96); }

ActivationOptions megatron_2022(double samples, double seq) {
  ActivationOptions o;
  o.samples = samples;
  o.seq = seq;
  o.elem_bytes = 2;
  o.flash_attention = false;  // Korthikanti et al. store the s x s softmax and dropout tensors
  o.dropout = true;
  return o;
}

TEST(Activations, KorthikantiFormulas) {
  const LayerShape g = gpt3_layer();
  const double s = 2048, b = 1, h = 12288, a = 96;
  const double sbh = s * b * h;
  LayerStrategy st;
  // no parallelism: sbh (34 + 5as/h)
  EXPECT_NEAR(layer_activation_bytes(g, st, megatron_2022(b, s)).value(), sbh * (34 + 5 * a * s / h), 1.0);
  // tensor parallel 8: sbh (10 + 24/t + 5as/(ht))
  st.tp = 8;
  EXPECT_NEAR(layer_activation_bytes(g, st, megatron_2022(b, s)).value(), sbh * (10 + 24.0 / 8 + 5 * a * s / (h * 8)), 1.0);
  // + sequence parallel: everything / t
  st.sp = true;
  EXPECT_NEAR(layer_activation_bytes(g, st, megatron_2022(b, s)).value(), sbh * (34 + 5 * a * s / h) / 8, 1.0);
  // selective recompute drops the 5as/h term
  st.recompute = Recompute::kSelective;
  EXPECT_NEAR(layer_activation_bytes(g, st, megatron_2022(b, s)).value(), sbh * 34 / 8, 1.0);
  // full recompute keeps the layer input
  st.recompute = Recompute::kFull;
  EXPECT_NEAR(layer_activation_bytes(g, st, megatron_2022(b, s)).value(), 2 * sbh / 8, 1.0);
  st.sp = false;
  EXPECT_NEAR(layer_activation_bytes(g, st, megatron_2022(b, s)).value(), 2 * sbh, 1.0);
}

// Ring attention (cp > 1) keeps the log-sum-exp and its output instead of the s x s scores, and
// its backward holds the keys, values and their gradients twice (the share worked on and the one
// arriving) with the query gradient and one chunk pair's score blocks.
TEST(Activations, RingAttentionKeepsNoScores) {
  const LayerShape g = gpt3_layer();
  const double s = 2048, b = 1, h = 12288, a = 96;
  ActivationOptions o = megatron_2022(b, s);
  o.dropout = false;
  LayerStrategy one, cp2;
  cp2.cp = 2;
  const double scores = 2.0 * a * s * s;                // e = 2, one rank, no dropout
  const double lse = 4.0 * a * (s / 2);                 // fp32, the cp share's queries
  const double one_rank = layer_activation_bytes(g, one, o).value();
  // Without Ulysses and in bf16 the ring's fp32 output is a tensor of its own: 4 bytes x (s/2) x h.
  EXPECT_NEAR(layer_activation_bytes(g, cp2, o).value(), (one_rank - scores) / 2 + lse + 4.0 * (s / 2) * h, 1.0);
  o.elem_bytes = 4;  // in fp32 the output is the projection's input itself
  const double one32 = layer_activation_bytes(g, one, o).value();
  EXPECT_NEAR(layer_activation_bytes(g, cp2, o).value(), (one32 - 2 * scores) / 2 + lse, 1.0);
  EXPECT_EQ(ring_attention_transient_bytes(g, one, o).value(), 0.0);
  const double chunk = s / 4;
  EXPECT_NEAR(ring_attention_transient_bytes(g, cp2, o).value(),
              4.0 * (8 * (s / 2) * h + (s / 2) * h) + 16.0 * a * chunk * chunk, 1.0);
}

TEST(Activations, ScaleWithMicroBatch) {
  const LayerShape g = gpt3_layer();
  LayerStrategy st;
  const double one = layer_activation_bytes(g, st, megatron_2022(1, 2048)).value();
  EXPECT_NEAR(layer_activation_bytes(g, st, megatron_2022(4, 2048)).value(), 4 * one, 1e-3 * one);
}

TEST(Activations, FlashAttentionWithoutDropout) {
  // No s x s tensors and no masks: 4 (norm in/out) + 6 (Q, K, V) + 2 (out-proj input) + 4 (norm
  // in, FC1 in) + 16 (GELU and FC2 inputs of 4h) = 32 sbh, plus the fp32 log-sum-exp 4*a*s*b.
  LayerShape g = gpt3_layer();
  g.bias = false;
  ActivationOptions o = megatron_2022(1, 2048);
  o.flash_attention = true;
  o.dropout = false;
  EXPECT_NEAR(layer_activation_bytes(g, LayerStrategy{}, o).value(), 32 * 2048.0 * 12288 + 4 * 96 * 2048.0, 1.0);
}

TEST(Activations, GqaSwigluByTensor) {
  // Llama-3-70B layer: h 8192, 64 heads, 8 KV heads, SwiGLU FFN 28672, flash attention.
  const LayerShape l = testing::swiglu_shape(8192, 64, 8, 28672);
  ActivationOptions o;
  o.samples = 1;
  o.seq = 4096;
  o.elem_bytes = 2;
  o.flash_attention = true;
  o.dropout = false;
  const double T = 4096;
  // attention: 2 norm tensors (2*2*8192) + Q (2*8192) + K,V (2*2*1024) + out-proj in (2*8192)
  // FFN: 2 norm tensors (2*2*8192) + gate, up, down inputs (3*2*28672); LSE 4*64*4096
  const double expect = T * (4 * 8192 + 2 * 8192 + 4 * 1024 + 2 * 8192 + 4 * 8192 + 6 * 28672) + 4 * 64 * T;
  EXPECT_NEAR(layer_activation_bytes(l, LayerStrategy{}, o).value(), expect, 1.0);
}

TEST(StateBytes, MixedPrecisionAdam) {
  const StateBytes bf = state_bytes_per_param(DType::kBf16);
  EXPECT_DOUBLE_EQ(bf.weights + bf.grads + bf.optimizer, 18.0);
  const StateBytes fp16 = state_bytes_per_param(DType::kFp16);
  EXPECT_DOUBLE_EQ(fp16.weights + fp16.grads + fp16.optimizer, 16.0);
  const StateBytes z1 = sharded_state_bytes(DType::kBf16, 1, 4);
  EXPECT_DOUBLE_EQ(z1.optimizer, 3.0);
  EXPECT_DOUBLE_EQ(z1.grads, 4.0);
  const StateBytes z2 = sharded_state_bytes(DType::kBf16, 2, 4);
  EXPECT_DOUBLE_EQ(z2.grads, 1.0);
  EXPECT_DOUBLE_EQ(z2.weights, 2.0);
  const StateBytes z3 = sharded_state_bytes(DType::kBf16, 3, 8);
  EXPECT_DOUBLE_EQ(z3.weights + z3.grads + z3.optimizer, 18.0 / 8);
}

TEST(InFlight, Schedules) {
  TrainSettings t;
  t.pp = 4;
  t.micro_batches = 8;
  t.schedule = Schedule::k1F1B;
  EXPECT_EQ(micro_batches_in_flight(t, 0), 4);
  EXPECT_EQ(micro_batches_in_flight(t, 3), 1);
  t.micro_batches = 2;
  EXPECT_EQ(micro_batches_in_flight(t, 0), 2);
  t.schedule = Schedule::kGpipe;
  t.micro_batches = 8;
  EXPECT_EQ(micro_batches_in_flight(t, 2), 8);
  // interleaved, v = 2: group 0 warms up 2*(4-0-1) + (2-1)*4 + 1 = 11 chunk-micro-batches
  t.schedule = Schedule::kInterleaved;
  t.vp = 2;
  EXPECT_DOUBLE_EQ(micro_batches_in_flight(t, 0), 11.0 / 2);
  EXPECT_DOUBLE_EQ(micro_batches_in_flight(t, 4), 11.0 / 2);  // second chunk of group 0
  EXPECT_DOUBLE_EQ(micro_batches_in_flight(t, 3), 5.0 / 2);
}

// ZB-H1's W state per layer and micro-batch: h 1024, 16 heads of 64 (MHA), GELU FFN 4096, one
// sample of 1024 tokens in 2-byte elements. Per token with tp 2: attention h + (q + 2kv)/t + q/t
// + h = 1024 + 1536 + 512 + 1024 = 4096; FFN h + ff/t + ff/t + h = 1024 + 2048 + 2048 + 1024 = 6144;
// 10240 * 1024 * 2 = 20,971,520 bytes. Sequence parallelism splits the four h terms by t:
// (3072 + 5120) * 2048 = 16,777,216; cp 2 halves the tokens.
TEST(WeightGradState, ByHand) {
  const LayerShape l = testing::dense_shape(1024, 16, 16);
  ActivationOptions o;
  o.samples = 1;
  o.seq = 1024;
  o.elem_bytes = 2;
  LayerStrategy st{.tp = 2};
  // The two norms' inputs and output gradients: 4 * 1024 per token (halved with SP).
  EXPECT_DOUBLE_EQ(weight_grad_state_bytes(l, st, o).value(), 20971520.0 + 4 * 1024 * 1024 * 2);
  st.sp = true;
  EXPECT_DOUBLE_EQ(weight_grad_state_bytes(l, st, o).value(), 16777216.0 + 2 * 1024 * 1024 * 2);
  st.sp = false;
  st.cp = 2;
  EXPECT_DOUBLE_EQ(weight_grad_state_bytes(l, st, o).value(), (20971520.0 + 4 * 1024 * 1024 * 2) / 2);
  // SwiGLU of 2816: gate and up gradients 2 * 2816 / 2, down input 2816 / 2: FFN 1024 + 2816 +
  // 1408 + 1024 = 6272 per token.
  const LayerShape sw = testing::swiglu_shape(1024, 16, 16, 2816);
  EXPECT_DOUBLE_EQ(weight_grad_state_bytes(sw, LayerStrategy{.tp = 2}, o).value(),
                   (4096.0 + 6272 + 4096) * 1024 * 2);
}

// ZB-H1 device group g keeps up to min(g, m - 1) micro-batches' W state; 1F1B's in-flight count.
TEST(InFlight, ZbH1PendingWeightGrads) {
  TrainSettings t;
  t.pp = 4;
  t.micro_batches = 8;
  t.schedule = Schedule::kZbH1;
  EXPECT_EQ(micro_batches_in_flight(t, 0), 4);
  EXPECT_EQ(micro_batches_in_flight(t, 3), 1);
  EXPECT_EQ(pending_weight_grads(t, 0), 0);
  EXPECT_EQ(pending_weight_grads(t, 1), 1);
  EXPECT_EQ(pending_weight_grads(t, 3), 3);
  t.micro_batches = 2;
  EXPECT_EQ(pending_weight_grads(t, 3), 1);
  t.micro_batches = 8;
  t.schedule = Schedule::k1F1B;
  EXPECT_EQ(pending_weight_grads(t, 3), 0);
}

// ZB-V, pp 4: group g holds virtual stages g (chunk 0) and 7 - g (chunk 1). At m 8 its peak, the end
// of its warm-up, is 7 - g chunk-micro-batches of chunk 0 and g + 1 of chunk 1: 8 = 2 pp on every
// group, pp micro-batches of a whole stage, 1F1B's first group's count (Qi et al., section 6). At
// m 4 each chunk is capped at m: group 0 holds 4 + 1, group 3 4 + 4. One chunk-micro-batch's W state
// per group, half on each chunk.
TEST(InFlight, ZbVHoldsTwoPpChunkMicroBatches) {
  TrainSettings t;
  t.pp = 4;
  t.vp = 2;
  t.micro_batches = 8;
  t.schedule = Schedule::kZbV;
  std::vector<double> n;
  for (int s = 0; s < 8; ++s) n.push_back(micro_batches_in_flight(t, s));
  EXPECT_EQ(n, (std::vector<double>{7, 6, 5, 4, 4, 3, 2, 1}));
  for (int g = 0; g < 4; ++g) EXPECT_EQ(n[g] + n[7 - g], 8) << g;
  for (int s = 0; s < 8; ++s) EXPECT_EQ(pending_weight_grads(t, s), 0.5) << s;
  t.micro_batches = 4;
  EXPECT_EQ(micro_batches_in_flight(t, 0) + micro_batches_in_flight(t, 7), 5);
  EXPECT_EQ(micro_batches_in_flight(t, 3) + micro_batches_in_flight(t, 4), 8);
  // 1F1B's first group holds pp = 4 micro-batches of its whole stage.
  t.vp = 1;
  t.schedule = Schedule::k1F1B;
  t.micro_batches = 8;
  EXPECT_EQ(micro_batches_in_flight(t, 0), 4);
}

}  // namespace
}  // namespace weft
