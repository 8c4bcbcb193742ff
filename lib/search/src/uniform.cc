#include "weft/search/uniform.h"

#include <string>

#include "weft/core/assert.h"

namespace weft {

std::vector<int> even_stage_sizes(int layers, int stages) {
  WEFT_ASSERT(stages >= 1 && layers >= stages, "cannot split " + std::to_string(layers) + " layers into " + std::to_string(stages) + " stages");
  std::vector<int> out(stages, layers / stages);
  const int rest = layers % stages;
  for (int s = stages - rest; s < stages; ++s) ++out[s];
  return out;
}

LayerStrategy embedding_for(const LayerStrategy& layer) {
  LayerStrategy e = without_experts(layer);
  e.recompute = Recompute::kNone;
  return e;
}

Result<Plan> make_uniform_plan(const ModelSpec& model, const ClusterSpec& cluster, const TrainSettings& train,
                               const LayerStrategy& layer, const LayerStrategy& embedding) {
  const int layers = model.num_layers();
  const long long stages = static_cast<long long>(train.pp) * train.vp;
  if (train.pp < 1 || train.vp < 1)
    return Error{ErrorKind::kBadInput, "train: pp and vp must be >= 1 (pp=" + std::to_string(train.pp) +
                                           " vp=" + std::to_string(train.vp) + ")"};
  if (stages > layers)
    return Error{ErrorKind::kBadInput, "train.pp: pp*vp = " + std::to_string(train.pp) + "*" +
                                           std::to_string(train.vp) + " = " + std::to_string(stages) +
                                           " pipeline stages for only " + std::to_string(layers) + " layers"};
  Plan p;
  p.model = model;
  p.cluster = cluster;
  p.train = train;
  p.embedding = embedding;
  const LayerStrategy dense = without_experts(layer);
  int next = 0;
  for (int n : even_stage_sizes(layers, static_cast<int>(stages))) {
    Stage st;
    st.first_layer = next;
    st.layers.reserve(n);
    for (int i = 0; i < n; ++i) st.layers.push_back(model.layer(next + i).moe.enabled() ? layer : dense);
    next += n;
    p.stages.push_back(std::move(st));
  }
  Status ok = validate(p);
  if (!ok.ok()) return ok.error();
  return p;
}

}  // namespace weft
