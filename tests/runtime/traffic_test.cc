// What the cost model prices is what the runtime sends: for each strategy the parity tests run,
// the collectives one decoder layer adds to a training step (a run with two layers minus a run with
// one, every other collective being equal) are those `layer_traffic` lists, per group and
// operation. The runtime counts its own calls (summary `collectives_per_step`, rank 0's last step).
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "rt_util.h"
#include "weft/cost/traffic.h"
#include "weft/plan/geometry.h"

namespace weft::rttest {
namespace {

struct Sent {
  double calls = 0, bytes = 0;
  bool bytes_only = false;  // per-step gradient traffic: the runtime cuts it into buckets
};
using Key = std::pair<std::string, std::vector<int>>;  // op, group
using Table = std::map<Key, Sent>;

Table recorded(const RunResult& r) {
  Table t;
  if (!r.summary.is_object()) return t;
  for (const Json& c : r.summary.at("collectives_per_step")) {
    Sent& s = t[{c.at("op").get<std::string>(), c.at("group").get<std::vector<int>>()}];
    s.calls += c.at("calls").get<double>();
    s.bytes += c.at("bytes").get<double>();
  }
  return t;
}

const char* op_name(Collective k) {
  switch (k) {
    case Collective::kAllReduce: return "all_reduce";
    case Collective::kAllGather: return "all_gather";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAllToAll: return "all_to_all";
    case Collective::kSendRecv: return "send";
  }
  return "?";
}

// Rank 0's collectives for one layer of plan p's first stage in one step, from layer_traffic:
// forward and backward transfers once per micro-batch, per-step ones once; a full recomputation
// issues the forward's tensor and Ulysses traffic again in backward.
Table expected(const Plan& p, const LayerStrategy& s) {
  const int S = p.devices_per_stage();
  LayerContext ctx;
  ctx.model = &p.model;
  ctx.cluster = &p.cluster;
  ctx.train = p.train;
  ctx.stage_size = S;
  ctx.num_stages = p.train.pp;
  ctx.layer = 0;
  const LayerTraffic traffic = layer_traffic(ctx, s, runtime_traffic(DType::kFp32));
  const LayerShape& L = p.model.layer(0);
  const int kv = L.kv_heads > 0 ? L.kv_heads : L.heads;
  Table t;
  for (const Transfer& tr : traffic.transfers) {
    double per_step = tr.phase == Phase::kStep ? 1.0 : p.train.micro_batches;
    if (tr.phase == Phase::kForward && s.recompute == Recompute::kFull && tr.axis != CommAxis::kData) per_step *= 2;
    for (const CollectiveCall& c : tr.calls) {
      std::vector<int> group;
      switch (tr.axis) {
        case CommAxis::kTensor:
          group = c.group.size == s.tp ? group_of(0, S, p.train.pp, s, Axis::kTp) : kv_replica_group(0, S, 1, s, kv);
          break;
        case CommAxis::kUlysses: group = group_of(0, S, p.train.pp, s, Axis::kUlysses); break;
        case CommAxis::kData: group = group_of(0, S, p.train.pp, s, Axis::kShard); break;
        default: ADD_FAILURE() << "a " << to_string(tr.axis) << " transfer the runtime does not issue"; continue;
      }
      EXPECT_EQ(static_cast<int>(group.size()), c.group.size) << to_string(tr.axis);
      Sent& e = t[{op_name(c.kind), group}];
      e.calls += per_step * tr.repeat * c.times;
      e.bytes += per_step * tr.repeat * c.times * c.bytes.value();
      e.bytes_only = e.bytes_only || tr.phase == Phase::kStep;
    }
  }
  return t;
}

std::string group_str(const std::vector<int>& g) {
  std::string s;
  for (int r : g) s += (s.empty() ? "" : ",") + std::to_string(r);
  return "{" + s + "}";
}

void expect_layer_traffic(const std::string& name, const ModelSpec& one_layer, const ModelSpec& two_layers,
                          int world, const LayerStrategy& s) {
  const std::string dir = temp_dir("traffic_" + name);
  const Plan p1 = uniform(one_layer, world, 1, s, {1});
  const Plan p2 = uniform(two_layers, world, 1, s, {2});
  const RunResult r1 = train_plan(p1, dir, "one", 1), r2 = train_plan(p2, dir, "two", 1);
  ASSERT_EQ(r1.status, 0) << r1.output;
  ASSERT_EQ(r2.status, 0) << r2.output;
  Table got = recorded(r2);
  for (const auto& [k, v] : recorded(r1)) {
    got[k].calls -= v.calls;
    got[k].bytes -= v.bytes;
  }
  const Table want = expected(p2, s);
  for (const auto& [k, w] : want) {
    if (k.second.size() < 2) continue;  // a group of one rank sends nothing
    const Sent g = got.count(k) ? got.at(k) : Sent{};
    const std::string where = name + ": " + k.first + " on " + group_str(k.second);
    if (!w.bytes_only) EXPECT_EQ(g.calls, w.calls) << where;
    // Flat buffers are padded to a multiple of the group size: at most size - 1 float32 per call.
    const double pad = std::max(1.0, g.calls) * static_cast<double>(k.second.size()) * 4.0;
    EXPECT_NEAR(g.bytes, w.bytes, pad) << where << " (" << g.calls << " calls)";
  }
  for (const auto& [k, g] : got)
    if (!want.count(k)) EXPECT_EQ(g.calls, 0) << name << ": " << k.first << " on " << group_str(k.second)
                                              << " sent by the runtime, not in layer_traffic";
}

TEST(RuntimeTraffic, EachLayerSendsWhatTheCostModelPrices) {
  const ModelSpec a1 = tiny_llama(1), a2 = tiny_llama(2);
  expect_layer_traffic("tp2", a1, a2, 2, strat(2, 1));
  expect_layer_traffic("tp2-sp", a1, a2, 2, strat(2, 1, 1, true));
  expect_layer_traffic("ulysses2", a1, a2, 2, strat(1, 1, 2));
  expect_layer_traffic("dp2-zero0", a1, a2, 2, strat(1, 2));
  expect_layer_traffic("dp2-zero1", a1, a2, 2, strat(1, 2, 1, false, 1));
  expect_layer_traffic("dp2-zero2", a1, a2, 2, strat(1, 2, 1, false, 2));
  expect_layer_traffic("dp2-zero3", a1, a2, 2, strat(1, 2, 1, false, 3));
  expect_layer_traffic("tp2-dp2-zero1-full", a1, a2, 4, strat(2, 2, 1, false, 1, Recompute::kFull));
  expect_layer_traffic("tp2sp-uly2", a1, a2, 4, strat(2, 1, 2, true));
  expect_layer_traffic("uly2-dp2-zero3-full", a1, a2, 4, strat(1, 2, 2, false, 3, Recompute::kFull));
}

TEST(RuntimeTraffic, KeyValueReplicasAndGpt2Layers) {
  // One kv head on tp 2: the K/V weights live on both ranks and their gradients are summed.
  expect_layer_traffic("tp2-kv1", tiny_llama(1, 1), tiny_llama(2, 1), 2, strat(2, 1, 1, true));
  // One kv head on ulysses 2: sent as two copies (lcm(1, 2) heads), not four.
  expect_layer_traffic("uly2-kv1", tiny_llama(1, 1), tiny_llama(2, 1), 2, strat(1, 1, 2));
  // GPT-2: LayerNorm with biases, GELU, biased projections.
  expect_layer_traffic("gpt-tp2-sp-dp2", tiny_gpt(1), tiny_gpt(2), 4, strat(2, 2, 1, true, 2));
}

}  // namespace
}  // namespace weft::rttest
