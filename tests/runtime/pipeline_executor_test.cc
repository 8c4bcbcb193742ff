// The pipeline executor alone, in one process: two stages on two threads, a fake Comm whose sends
// and receives go through an in-memory mailbox, and fake stages computing y = x * w. Checks the
// losses, the gradients that reach both stages' weights, the transfer tags and the backward hooks
// under gpipe, 1f1b and zb-h1 (whose input-gradient passes must leave the weights untouched).
#include "weft/runtime/pipeline_executor.h"
#include "weft/runtime/ops.h"
#include "weft/runtime/split_backward.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <ostream>
#include <stdexcept>
#include <thread>
#include <tuple>

namespace weft {
// Test names and failure messages show the schedule by name.
void PrintTo(Schedule s, std::ostream* os) { *os << to_string(s); }
}  // namespace weft

namespace weft::runtime {
namespace {

struct Mailbox {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::tuple<int, int, int>, std::vector<at::Tensor>> box;  // (from, to, tag)
  std::vector<std::tuple<int, int, int>> sent;                        // in the order sent
};

// Two ranks whose point-to-point transfers are copies through the mailbox; no collectives.
class FakeComm : public Comm {
 public:
  FakeComm(Mailbox& mb, int rank) : Comm({0, 1}, rank, "fake"), mb_(mb) {}
  Pending send(const at::Tensor& t, int peer, int tag) override {
    std::lock_guard<std::mutex> l(mb_.mu);
    mb_.box[{rank(), peer, tag}].push_back(t.detach().clone());
    mb_.sent.emplace_back(rank(), peer, tag);
    mb_.cv.notify_all();
    return {};
  }
  void recv(at::Tensor& t, int peer, int tag) override {
    std::unique_lock<std::mutex> l(mb_.mu);
    auto& q = mb_.box[{peer, rank(), tag}];
    mb_.cv.wait(l, [&] { return !q.empty(); });
    t.copy_(q.front());
    q.erase(q.begin());
  }
  void allreduce_sum(at::Tensor&) override { unused(); }
  Pending allreduce_sum_async(at::Tensor) override { unused(); }
  void allreduce_max(at::Tensor&) override { unused(); }
  at::Tensor allgather(const at::Tensor&) override { unused(); }
  Pending allgather_into_async(at::Tensor, const at::Tensor&) override { unused(); }
  at::Tensor reduce_scatter(const at::Tensor&) override { unused(); }
  Pending reduce_scatter_async(const at::Tensor&, std::function<void(at::Tensor)>) override { unused(); }
  Pending reduce_scatter_v_async(const at::Tensor&, std::vector<int64_t>, std::function<void(at::Tensor)>) override {
    unused();
  }
  at::Tensor alltoall(const at::Tensor&) override { unused(); }
  void barrier() override { unused(); }

 private:
  [[noreturn]] static void unused() { throw std::logic_error("the pipeline executor only sends and receives"); }
  Mailbox& mb_;
};

// Micro-batch k enters the first stage as (k + 1) * [1, 1]; each stage multiplies by its weight;
// the loss is the sum of the last stage's output.
class FakeStage : public PipelineStage {
 public:
  FakeStage(bool first, bool last, float w) : first_(first), last_(last), w(at::full({2}, w).requires_grad_(true)) {}
  bool first_stage() const override { return first_; }
  bool last_stage() const override { return last_; }
  at::Tensor input(int k) override { return at::full({2}, k + 1.0f); }
  at::Tensor input_buffer(int, int) override { return at::empty({2}); }
  at::Tensor forward(const at::Tensor& x, int) override { return x * w; }
  at::Tensor loss(const at::Tensor& y, int) override { return y.sum(); }
  void begin_backward(bool last, int) override { lasts.push_back(last); }
  void end_backward() override { ++ended; }
  void begin_input_grad() override { before_b = grad_sum(); }
  void end_input_grad() override {
    ++input_passes;
    if (grad_sum() != before_b) weights_changed_in_b = true;
  }
  double grad_sum() const { return w.grad().defined() ? w.grad().sum().item<double>() : 0.0; }

  bool first_, last_;
  at::Tensor w;
  std::vector<bool> lasts;
  int ended = 0, input_passes = 0;
  double before_b = 0;
  bool weights_changed_in_b = false;
};

class PipelineExecutor : public testing::TestWithParam<Schedule> {};

TEST_P(PipelineExecutor, TwoStagesGiveTheLossAndGradientsOfOneModel) {
  const int m = 3;
  const double divisor = 4;
  Mailbox mb;
  FakeComm c0(mb, 0), c1(mb, 1);
  FakeStage s0(true, false, 2.0f), s1(false, true, 3.0f);
  double loss0 = -1, loss1 = -1;
  const Schedule sc = GetParam();
  std::thread t0([&] { loss0 = run_pipeline_step(pipeline_actions(sc, 2, 0, m), s0, {&c0, {0, 1}, 0, sc}, divisor); });
  std::thread t1([&] { loss1 = run_pipeline_step(pipeline_actions(sc, 2, 1, m), s1, {&c1, {0, 1}, 1, sc}, divisor); });
  t0.join();
  t1.join();

  // loss_k = sum((k + 1) * 2 * 3 over 2 elements) = 12 (k + 1): 72 in all, on the last stage only.
  EXPECT_DOUBLE_EQ(loss0, 0.0);
  EXPECT_DOUBLE_EQ(loss1, 72.0);
  // d(sum_k loss_k / 4) / dw0 = sum_k (k + 1) * 3 / 4 = 4.5 per element; / dw1 = 6 * 2 / 4 = 3.
  ASSERT_TRUE(s0.w.grad().defined());
  EXPECT_TRUE(at::allclose(s0.w.grad(), at::full({2}, 4.5f)));
  EXPECT_TRUE(at::allclose(s1.w.grad(), at::full({2}, 3.0f)));
  // Activations of micro-batch k go forward with tag 2k, their gradients come back with 2k + 1.
  std::vector<std::tuple<int, int, int>> fwd, bwd;
  for (const auto& s : mb.sent) (std::get<0>(s) == 0 ? fwd : bwd).push_back(s);
  EXPECT_EQ(fwd, (std::vector<std::tuple<int, int, int>>{{0, 1, 0}, {0, 1, 2}, {0, 1, 4}}));
  EXPECT_EQ(bwd, (std::vector<std::tuple<int, int, int>>{{1, 0, 1}, {1, 0, 3}, {1, 0, 5}}));
  // Every backward is bracketed (under zb-h1 the weight-gradient passes of the second stage and the
  // whole backwards of the first); only the step's last one on each stage is marked last.
  for (const FakeStage* s : {&s0, &s1}) {
    EXPECT_EQ(s->ended, m);
    EXPECT_EQ(s->lasts, (std::vector<bool>{false, false, true}));
  }
  // zb-h1: the second stage's input-gradient passes ran apart from the brackets and gave its weight
  // nothing; the first stage runs none (its B is the whole backward).
  EXPECT_EQ(s0.input_passes, 0);
  EXPECT_EQ(s1.input_passes, GetParam() == Schedule::kZbH1 ? m : 0);
  EXPECT_FALSE(s1.weights_changed_in_b);
}

INSTANTIATE_TEST_SUITE_P(Schedules, PipelineExecutor,
                         testing::Values(Schedule::kGpipe, Schedule::k1F1B, Schedule::kZbH1),
                         [](const auto& info) {
                           std::string n = to_string(info.param);
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

// Two chunks per device group in a V (zb-v): group 0 runs virtual stages 0 and 3 (the input and
// the loss), group 1 stages 1 and 2, handing stage 1's output to stage 2 (and its gradient back) in
// memory. Chunk c of group g multiplies by weight w[g][c].
class FakeChunkedStage : public PipelineStage {
 public:
  FakeChunkedStage(bool ends, float w0, float w1)
      : ends_(ends), w{at::full({2}, w0).requires_grad_(true), at::full({2}, w1).requires_grad_(true)} {}
  bool first_stage() const override { return ends_; }
  bool last_stage() const override { return ends_; }
  int chunks() const override { return 2; }
  at::Tensor input(int k) override { return at::full({2}, k + 1.0f); }
  at::Tensor input_buffer(int, int) override { return at::empty({2}); }
  at::Tensor forward(const at::Tensor& x, int c) override { return x * w[c]; }
  at::Tensor loss(const at::Tensor& y, int) override { return y.sum(); }
  void begin_backward(bool last, int c) override { lasts[c].push_back(last); }
  void end_backward() override {}

  bool ends_;
  at::Tensor w[2];
  std::vector<bool> lasts[2];
};

TEST(PipelineExecutorZbV, TwoGroupsInAVGiveTheLossAndGradientsOfOneModel) {
  const int m = 3;
  const double divisor = 4;
  Mailbox mb;
  FakeComm c0(mb, 0), c1(mb, 1);
  // Virtual stages 0..3 multiply by 2, 3, 5, 7.
  FakeChunkedStage s0(true, 2.0f, 7.0f), s1(false, 3.0f, 5.0f);
  double loss0 = -1, loss1 = -1;
  const Schedule v = Schedule::kZbV;
  std::thread t0([&] { loss0 = run_pipeline_step(pipeline_actions(v, 2, 0, m, 2), s0, {&c0, {0, 1}, 0, v}, divisor); });
  std::thread t1([&] { loss1 = run_pipeline_step(pipeline_actions(v, 2, 1, m, 2), s1, {&c1, {0, 1}, 1, v}, divisor); });
  t0.join();
  t1.join();

  // loss_k = 2 elements * (k + 1) * 210: 2520 over k = 0..2, on group 0 (which holds the head).
  EXPECT_DOUBLE_EQ(loss0, 2520.0);
  EXPECT_DOUBLE_EQ(loss1, 0.0);
  // d(sum_k loss_k / 4) / dw = sum_k (k + 1) * (210 / w) / 4 = 1.5 * 210 / w per element.
  const std::pair<const at::Tensor*, double> grads[] = {{&s0.w[0], 2}, {&s1.w[0], 3}, {&s1.w[1], 5}, {&s0.w[1], 7}};
  for (const auto& [t, wv] : grads) {
    ASSERT_TRUE(t->grad().defined()) << "weight " << wv;
    EXPECT_TRUE(at::allclose(t->grad(), at::full({2}, 1.5f * 210.0f / static_cast<float>(wv)))) << "weight " << wv;
  }
  // Between the groups only the boundaries 0|1 (tags 2k forward, 2k + 1 back) and 2|3 (tags
  // 2 (2 m + k), + 1) are sent; the turn 1|2 stays on group 1.
  std::vector<std::tuple<int, int, int>> sent = mb.sent;
  std::sort(sent.begin(), sent.end());
  EXPECT_EQ(sent, (std::vector<std::tuple<int, int, int>>{
                      {0, 1, 0}, {0, 1, 2}, {0, 1, 4}, {0, 1, 13}, {0, 1, 15}, {0, 1, 17},
                      {1, 0, 1}, {1, 0, 3}, {1, 0, 5}, {1, 0, 12}, {1, 0, 14}, {1, 0, 16}}));
  // Each chunk's gradients are final at its last backward only.
  for (const FakeChunkedStage* s : {&s0, &s1})
    for (int c = 0; c < 2; ++c) {
      ASSERT_FALSE(s->lasts[c].empty());
      EXPECT_TRUE(s->lasts[c].back());
      EXPECT_EQ(std::count(s->lasts[c].begin(), s->lasts[c].end(), true), 1);
    }
}

// A split backward (zero-bubble schedules): B gives the input the gradient of one whole backward and
// the weights nothing; W then gives each weight the whole backward's gradient. The graph has a norm
// scale on the input path, a weight used by two matmuls (its gradients summed in W) and a recomputed
// block whose weight only its closure knows (its inner backward split too).
TEST(SplitBackward, InputGradientsFirstWeightGradientsLaterAsOneBackward) {
  at::manual_seed(3);
  const at::Tensor x0 = at::randn({3, 5, 8});
  std::vector<at::Tensor> w{at::randn({8}), at::randn({8, 8}), at::randn({8}), at::randn({8, 8})};
  for (auto& t : w) t.requires_grad_(true);
  auto loss = [&](const at::Tensor& x) {
    at::Tensor h = at::layer_norm(x, {8}, w[0], at::Tensor());
    h = at::gelu(at::linear(h, w[1], w[2])) + at::linear(x, w[1]);
    h = recompute([&](const std::vector<at::Tensor>& in) { return at::linear(in[0], w[3]) * in[0]; }, {h});
    return (h * h).sum();
  };
  at::Tensor xa = x0.clone().requires_grad_(true);
  loss(xa).backward();
  std::vector<at::Tensor> whole;
  for (auto& t : w) {
    whole.push_back(t.grad().clone());
    t.mutable_grad() = at::Tensor();
  }

  at::Tensor xb = x0.clone().requires_grad_(true);
  WeightGradWork work;
  const std::vector<at::Tensor> gx = backward_inputs({loss(xb)}, {}, {xb}, work);
  ASSERT_EQ(gx.size(), 1u);
  EXPECT_TRUE(at::allclose(gx[0], xa.grad(), 1e-5, 1e-6));
  for (auto& t : w) EXPECT_FALSE(t.grad().defined());
  EXPECT_FALSE(work.empty());
  work.run();
  EXPECT_TRUE(work.empty());
  for (size_t i = 0; i < w.size(); ++i) {
    ASSERT_TRUE(w[i].grad().defined()) << "weight " << i;
    EXPECT_TRUE(at::allclose(w[i].grad(), whole[i], 1e-5, 1e-6)) << "weight " << i;
  }
}

// The other rank of a two-rank group, simulated: it holds the same tensors, so a sum doubles, a
// gather repeats and a reduce-scatter doubles this rank's half. Records the storages it was handed
// and answers asynchronous calls with an empty Pending (done at once).
class TwinComm : public Comm {
 public:
  TwinComm() : Comm({0, 1}, 0, "twin") {}
  std::vector<const void*> seen;
  std::vector<at::ScalarType> dtypes;
  void allreduce_sum(at::Tensor& t) override { see(t), t.mul_(2); }
  Pending allreduce_sum_async(at::Tensor t) override {
    see(t), t.mul_(2);
    return {};
  }
  void allreduce_max(at::Tensor& t) override { see(t); }
  at::Tensor allgather(const at::Tensor& t) override { return see(t), at::stack({t, t}); }
  Pending allgather_into_async(at::Tensor out, const at::Tensor& shard) override {
    see(out), see(shard);
    out.copy_(at::cat({shard.reshape({-1}), shard.reshape({-1})}));
    return {};
  }
  at::Tensor reduce_scatter(const at::Tensor& in) override { return see(in), in.reshape({-1}).narrow(0, 0, in.numel() / 2) * 2; }
  Pending reduce_scatter_async(const at::Tensor& in, std::function<void(at::Tensor)> then) override {
    then(reduce_scatter(in));
    return {};
  }
  Pending reduce_scatter_v_async(const at::Tensor& in, std::vector<int64_t> counts,
                                 std::function<void(at::Tensor)> then) override {
    see(in);
    then(in.reshape({-1}).narrow(0, 0, counts[0]) * 2);
    return {};
  }
  at::Tensor alltoall(const at::Tensor& in) override { return see(in), in.clone(); }
  Pending send(const at::Tensor& t, int, int) override {
    see(t);
    return {};
  }
  void recv(at::Tensor& t, int, int) override { see(t), t.fill_(7); }
  void barrier() override {}

 private:
  void see(const at::Tensor& t) {
    seen.push_back(t.storage().data());
    dtypes.push_back(t.scalar_type());
  }
};

at::Tensor ft(std::vector<float> v) { return at::tensor(v); }

// host_staged() hands the transport copies, never the caller's storage, and puts every result back
// where the caller expects it: in place (views too), returned, or through the continuation (on the
// CPU here, with copy_cpu_tensors, the copies a CUDA tensor takes; data/reference/h100 ran them on a GPU).
TEST(HostStagedComm, CopiesInAndResultsBack) {
  auto twin = std::make_unique<TwinComm>();
  TwinComm* t = twin.get();
  std::unique_ptr<Comm> c = host_staged(std::move(twin), /*copy_cpu_tensors=*/true);
  EXPECT_EQ(c->size(), 2);
  at::Tensor flat = at::arange(8, at::kFloat);
  at::Tensor view = flat.narrow(0, 2, 4);  // a view into a larger buffer, reduced in place
  c->allreduce_sum(view);
  EXPECT_TRUE(at::equal(flat, ft({0.f, 1, 4, 6, 8, 10, 6, 7})));
  Pending p = c->allreduce_sum_async(view);
  p.wait();
  EXPECT_TRUE(at::equal(view, ft({8.f, 12, 16, 20})));
  at::Tensor out = at::zeros({6});
  at::Tensor shard = ft({1.f, 2, 3});
  c->allgather_into_async(out, shard).wait();
  EXPECT_TRUE(at::equal(out, ft({1.f, 2, 3, 1, 2, 3})));
  EXPECT_TRUE(at::equal(c->allgather(shard), ft({1.f, 2, 3, 1, 2, 3}).view({2, 3})));
  at::Tensor got;
  c->reduce_scatter_async(ft({1.f, 2, 3, 4}), [&](at::Tensor r) { got = r; }).wait();
  EXPECT_TRUE(at::equal(got, ft({2.f, 4})));
  c->reduce_scatter_v_async(ft({1.f, 2, 3}), {1, 2}, [&](at::Tensor r) { got = r; }).wait();
  EXPECT_TRUE(at::equal(got, ft({2.f})));
  at::Tensor r = at::zeros({3});
  c->recv(r, 1, 0);
  EXPECT_TRUE(at::equal(r, at::full({3}, 7.f)));
  // None of the caller's storages reached the transport.
  for (const at::Tensor& mine : {flat, out, shard, r})
    for (const void* s : t->seen) EXPECT_NE(s, mine.storage().data());
  EXPECT_EQ(t->seen.size(), 8u);
}

// bf16 tensors, which Gloo does not reduce, reach the transport as fp32 copies and come back in
// bf16 (the sum rounded once); fp32 CPU tensors pass straight through, uncopied.
TEST(HostStagedComm, CarriesBf16AsFp32) {
  auto twin = std::make_unique<TwinComm>();
  TwinComm* t = twin.get();
  std::unique_ptr<Comm> c = host_staged(std::move(twin));
  at::Tensor f = ft({1.f, 2});
  c->allreduce_sum(f);
  ASSERT_EQ(t->seen.size(), 1u);
  EXPECT_EQ(t->seen[0], f.storage().data());
  EXPECT_TRUE(at::equal(f, ft({2.f, 4})));
  at::Tensor b = ft({1.f, 3, 257}).to(at::kBFloat16);  // 257 is not a bf16: stored as 256
  c->allreduce_sum(b);
  EXPECT_EQ(b.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::equal(b.to(at::kFloat), ft({2.f, 6, 512})));
  EXPECT_EQ(t->dtypes.back(), at::kFloat);
  at::Tensor got;
  c->reduce_scatter_async(ft({1.f, 2, 3, 4}).to(at::kBFloat16), [&](at::Tensor r) { got = r; }).wait();
  EXPECT_EQ(got.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::equal(got.to(at::kFloat), ft({2.f, 4})));
  EXPECT_EQ(c->alltoall(b).scalar_type(), at::kBFloat16);
  for (at::ScalarType d : t->dtypes) EXPECT_EQ(d, at::kFloat);
}

TEST(Pending, AndThenOnAnEmptyPendingRunsAtOnce) {
  std::vector<int> order;
  Pending empty;
  empty.and_then([&] { order.push_back(1); });
  EXPECT_EQ(order, (std::vector<int>{1}));
}

}  // namespace
}  // namespace weft::runtime
