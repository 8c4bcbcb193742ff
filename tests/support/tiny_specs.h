// Hand-built layer shapes, models, GPUs and clusters for unit tests (no presets). Every figure is
// written here, so a test's expected values follow from this file and the library alone. Where two
// tests want different figures (a name, a latency, a context length) the builder takes it as an
// argument, and each test names its own.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "weft/spec/cluster.h"
#include "weft/spec/model.h"

namespace weft::testing {

// A decoder layer with a GELU FFN of 4 x hidden, head_dim = hidden / heads and no biases.
inline LayerShape dense_shape(std::int64_t hidden, int heads, int kv_heads) {
  return LayerShape{.hidden = hidden,
                    .heads = heads,
                    .kv_heads = kv_heads,
                    .head_dim = static_cast<int>(hidden / heads),
                    .ffn = 4 * hidden};
}

// A GPT-2 / GPT-3 layer: multi-head attention, GELU FFN of 4 x hidden, biases on the linear layers.
inline LayerShape gpt_shape(std::int64_t hidden, int heads) {
  LayerShape s = dense_shape(hidden, heads, heads);
  s.bias = true;
  return s;
}

// A Llama-style layer: kv_heads key/value heads (GQA), SwiGLU FFN of `ffn`, no biases.
inline LayerShape swiglu_shape(std::int64_t hidden, int heads, int kv_heads, std::int64_t ffn) {
  LayerShape s = dense_shape(hidden, heads, kv_heads);
  s.ffn = ffn;
  s.ffn_kind = FfnKind::kSwiglu;
  return s;
}

// One group "decoder" of `layers` x `shape`, the embedding as wide as the layer; LayerNorm, learned
// positions, untied embeddings (the ModelSpec defaults); max_seq 0 means unknown.
inline ModelSpec decoder_model(std::string name, int layers, const LayerShape& shape, std::int64_t vocab,
                               int max_seq = 0) {
  return ModelSpec{.name = std::move(name),
                   .vocab = vocab,
                   .hidden = shape.hidden,
                   .max_seq = max_seq,
                   .groups = {LayerGroup{"decoder", layers, shape}}};
}

// decoder_model() with Llama's RMSNorm and rotary positions.
inline ModelSpec llama_model(std::string name, int layers, const LayerShape& shape, std::int64_t vocab) {
  ModelSpec m = decoder_model(std::move(name), layers, shape, vocab);
  m.norm = NormKind::kRmsNorm;
  m.position = PositionKind::kRope;
  return m;
}

// "small": the layer groups (count, shape) in order, named g0, g1, ...; LayerNorm, rotary positions,
// the embedding as wide as the first group.
inline ModelSpec small_model(std::vector<std::pair<int, LayerShape>> groups, std::int64_t vocab = 32000) {
  ModelSpec m{.name = "small", .vocab = vocab, .hidden = groups.front().second.hidden, .position = PositionKind::kRope};
  for (auto& [count, shape] : groups)
    m.groups.push_back(LayerGroup{"g" + std::to_string(m.groups.size()), count, shape});
  return m;
}

// "tiny": `layers` layers of hidden 8, 2 heads of 4, FFN 32 (GELU), no biases; vocab 16, LayerNorm,
// learned positions up to max_seq. Per layer: attention 4*8*8 = 256, FFN 2*8*32 = 512, norms 2*8 = 16
// -> 784 parameters.
inline ModelSpec tiny_model(int layers, int max_seq) {
  return decoder_model("tiny", layers, dense_shape(8, 2, 2), 16, max_seq);
}

// An A100-80GB by its datasheet figures: 19.5 FP32, 156 TF32, 312 dense BF16 / FP16 TFLOP/s, no
// FP8, 80 GiB of HBM at 2039 GB/s. gpu_traits() looks the name up: a name without "a100" gets the
// traits of an unknown GPU.
inline GpuSpec a100_gpu(std::string name) { return GpuSpec{std::move(name), 19.5, 156, 312, 312, 0, 80, 2039}; }

// nodes x gpus_per_node A100-80GB GPUs named gpu_name, NVLink 300 GB/s and InfiniBand 25 GB/s per
// GPU per direction, with the given per-hop latencies in microseconds.
inline ClusterSpec a100_cluster(std::string name, int nodes, int gpus_per_node, std::string gpu_name,
                                double intra_latency_us, double inter_latency_us) {
  return ClusterSpec{.name = std::move(name),
                     .nodes = nodes,
                     .gpus_per_node = gpus_per_node,
                     .gpu = a100_gpu(std::move(gpu_name)),
                     .intra = LinkSpec{300, intra_latency_us},
                     .inter = LinkSpec{25, inter_latency_us}};
}

// `gpus` A100s ("testgpu") in nodes of gpus_per_node (one partial node when gpus is fewer),
// 3 us inside a node, 10 us between nodes.
inline ClusterSpec small_cluster(int gpus, int gpus_per_node) {
  const int per_node = std::min(gpus, gpus_per_node);
  return a100_cluster("test", gpus / per_node, per_node, "testgpu", 3, 10);
}

}  // namespace weft::testing
