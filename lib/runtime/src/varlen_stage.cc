#include "varlen_stage.h"

#include <algorithm>
#include <string>

namespace weft::runtime {

bool power_of_two(int x) { return x > 0 && (x & (x - 1)) == 0; }

namespace {

Status bad(const std::string& m) { return Error{ErrorKind::kBadInput, m}; }

}  // namespace

int varlen_max_group(const Plan& plan, int world) {
  const int tp = plan.embedding.tp;
  int g = 1;
  while (g * 2 * tp <= world) {
    bool ok = true;
    for (int i = 0; i < plan.model.num_layers(); ++i)
      if ((plan.model.layer(i).heads / tp) % (g * 2) != 0) ok = false;
    if (!ok) break;
    g *= 2;
  }
  return g;
}

std::vector<std::vector<int>> varlen_groups(int world, int tp, int min_group, int max_group) {
  std::vector<std::vector<int>> out;
  const int units = world / tp;
  for (int g = 1; g <= max_group; g *= 2) {
    if (g < min_group) continue;
    for (int b = 0; b + g <= units; b += g)
      for (int t = 0; t < tp; ++t) {
        std::vector<int> r(g);
        for (int j = 0; j < g; ++j) r[j] = (b + j) * tp + t;
        out.push_back(std::move(r));
      }
  }
  return out;
}

Status check_varlen_step(const VarlenStep& s, int step, int units, int min_group, int max_group, int docs) {
  const std::string at = "variable-length step " + std::to_string(step);
  if (s.micro_batches.empty()) return bad(at + ": the plan has no micro-batch");
  std::vector<int> seen(docs, 0);
  for (size_t k = 0; k < s.micro_batches.size(); ++k) {
    int sum = 0, prev = units;
    for (const VarlenGroup& g : s.micro_batches[k]) {
      if (!power_of_two(g.size) || g.size < min_group || g.size > max_group || g.size > prev)
        return bad(at + ", micro-batch " + std::to_string(k) + ": group of " + std::to_string(g.size) +
                   " ranks (sizes must be powers of two from " + std::to_string(min_group) + " to " +
                   std::to_string(max_group) + ", the largest first)");
      prev = g.size;
      sum += g.size;
      for (int d : g.docs) {
        if (d < 0 || d >= docs)
          return bad(at + ", micro-batch " + std::to_string(k) + ": document " + std::to_string(d) +
                     " is not in the batch of " + std::to_string(docs));
        ++seen[d];
      }
    }
    if (sum != units)
      return bad(at + ", micro-batch " + std::to_string(k) + ": its groups hold " + std::to_string(sum) +
                 " sequence-parallel ranks, the job " + std::to_string(units));
  }
  for (int d = 0; d < docs; ++d)
    if (seen[d] != 1)
      return bad(at + ": document " + std::to_string(d) + " of the batch runs " + std::to_string(seen[d]) +
                 " times (must be once)");
  return {};
}

double varlen_fingerprint(const VarlenStep& s) {
  std::uint64_t h = 1469598103934665603ULL;
  auto add = [&](std::uint64_t v) { h = mix64(h ^ v); };
  for (const auto& mb : s.micro_batches) {
    add(0xffff);
    for (const VarlenGroup& g : mb) {
      add(static_cast<std::uint64_t>(g.size) << 32);
      for (int d : g.docs) add(static_cast<std::uint64_t>(d));
    }
  }
  return static_cast<double>(h >> 12);  // 52 bits: exact in a double
}

Json varlen_step_json(const VarlenStep& s, const std::vector<std::int64_t>& lengths) {
  Json mbs = Json::array();
  for (const auto& mb : s.micro_batches) {
    Json groups = Json::array();
    for (const VarlenGroup& g : mb) {
      std::vector<std::int64_t> l;
      for (int d : g.docs) l.push_back(lengths[d]);
      groups.push_back(Json{{"size", g.size}, {"lengths", l}});
    }
    mbs.push_back(std::move(groups));
  }
  return mbs;
}

VarlenStage::VarlenStage(Model& m, Optimizer& opt, GroupSet& groups, const TokenSource& data,
                         const DocumentBatches& batches)
    : m_(m), opt_(opt), groups_(groups), data_(data), batches_(batches) {}

std::int64_t VarlenStage::set_step(int step, const VarlenStep& plan) {
  const std::vector<std::int64_t> batch = batches_.batch(step);
  const Documents& docs = batches_.documents();
  lengths_.clear();
  std::int64_t counted = 0;
  for (std::int64_t d : batch) {
    lengths_.push_back(docs.length[d]);
    counted += docs.length[d] - 1;
  }
  parts_.clear();
  const int tp = m_.plan().embedding.tp;
  const int unit = groups_.rank() / tp, tp_idx = groups_.rank() % tp;
  for (const auto& mb : plan.micro_batches) {
    int first = 0;
    for (const VarlenGroup& g : mb) {
      if (unit >= first && unit < first + g.size) {
        Part p;
        for (int j = 0; j < g.size; ++j) p.ranks.push_back((first + j) * tp + tp_idx);
        for (int d : g.docs) p.docs.push_back(batch[d]);
        parts_.push_back(std::move(p));
      }
      first += g.size;
    }
  }
  return counted;
}

at::Tensor VarlenStage::input(int k) {
  const Part& p = parts_[k];
  Comm& group = groups_.get(p.ranks);
  const Documents& docs = batches_.documents();
  const int g = group.size();
  const LayerStrategy& e = m_.plan().embedding;
  std::int64_t total = 0;
  for (std::int64_t d : p.docs) total += docs.length[d];
  // At least one token per rank (a group may run no document: it still takes part in the step's
  // collectives), and a multiple of the group size (times tp with Megatron-SP, which cuts each
  // rank's block again over its tp ranks).
  const std::int64_t q = static_cast<std::int64_t>(g) * (e.sp && e.tp > 1 ? e.tp : 1);
  const std::int64_t T = std::max<std::int64_t>(q, (total + q - 1) / q * q);
  std::vector<std::int64_t> tok(T, 0), tgt(T, -1), ids(T, -1);
  std::int64_t at = 0;
  for (size_t i = 0; i < p.docs.size(); ++i) {
    const std::int64_t n = docs.length[p.docs[i]];
    data_.read(docs.start[p.docs[i]], n, tok.data() + at);
    for (std::int64_t j = 0; j < n; ++j) {
      ids[at + j] = static_cast<std::int64_t>(i);
      if (j + 1 < n) tgt[at + j] = tok[at + j + 1];
    }
    at += n;
  }
  if (Status s = m_.set_sequence_group(&group); !s.ok()) throw InputError(s.error().message);
  if (Status s = m_.set_documents(at::tensor(ids).view({1, T})); !s.ok()) throw InputError(s.error().message);
  const std::int64_t t = T / g, r = group.rank();
  targets_ = at::tensor(tgt).view({1, T}).narrow(1, r * t, t).contiguous();
  return m_.embed(at::tensor(tok).view({1, T}).narrow(1, r * t, t).contiguous().to(m_.device()));
}

at::Tensor VarlenStage::loss(const at::Tensor& y, int) { return m_.head_loss(y, targets_.to(m_.device())); }

}  // namespace weft::runtime
