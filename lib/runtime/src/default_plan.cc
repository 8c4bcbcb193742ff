// What `weft train` runs without --plan (weft/runtime/train.h): the built-in model and the plan of
// pure data parallelism.
#include "weft/runtime/support.h"
#include "weft/runtime/train.h"

namespace weft::runtime {

ModelSpec builtin_model() {
  ModelSpec m;
  m.name = "weft-tiny-gpt";
  m.vocab = 256;
  m.hidden = 64;
  m.tied_embeddings = true;
  m.norm = NormKind::kLayerNorm;
  m.position = PositionKind::kLearned;
  m.max_seq = 256;
  LayerGroup g;
  g.name = "decoder";
  g.count = 2;
  g.shape.kind = LayerKind::kDecoder;
  g.shape.hidden = 64;
  g.shape.heads = 4;
  g.shape.kv_heads = 4;
  g.shape.head_dim = 16;
  g.shape.ffn = 256;
  g.shape.ffn_kind = FfnKind::kGelu;
  g.shape.bias = true;
  m.groups.push_back(g);
  return m;
}

Result<Plan> data_parallel_plan(const ModelSpec& model, int world, int seq, int global_batch, int micro_batches) {
  Plan p;
  p.model = model;
  p.cluster.name = "local";
  p.cluster.nodes = 1;
  p.cluster.gpus_per_node = world;
  // The runtime reads no figure of the cluster but its size; these placeholders only satisfy
  // validate(ClusterSpec).
  p.cluster.gpu.name = "cpu";
  p.cluster.gpu.tflops_fp32 = 1;
  p.cluster.gpu.memory_gib = 16;
  p.cluster.gpu.hbm_gbps = 10;
  p.cluster.intra.gbps = 10;
  p.train.seq = seq;
  p.train.global_batch = global_batch;
  p.train.micro_batches = micro_batches;
  p.train.pp = 1;
  p.train.schedule = Schedule::k1F1B;
  p.train.dtype = DType::kFp32;
  LayerStrategy s;
  s.dp = world;
  p.embedding = s;
  Stage st;
  st.first_layer = 0;
  st.layers.assign(model.num_layers(), s);
  p.stages.push_back(st);
  Status v = check_supported(p);
  if (!v.ok()) return v.error();
  return p;
}

}  // namespace weft::runtime
