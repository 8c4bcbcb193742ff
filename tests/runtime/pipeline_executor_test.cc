// The pipeline executor alone, in one process: two stages on two threads, a fake Comm whose sends
// and receives go through an in-memory mailbox, and fake stages computing y = x * w. Checks the
// losses, the gradients that reach both stages' weights, the transfer tags and the backward hooks
// under gpipe and 1f1b.
#include "weft/runtime/pipeline_executor.h"

#include <gtest/gtest.h>

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
  at::Tensor input_buffer() override { return at::empty({2}); }
  at::Tensor forward(const at::Tensor& x) override { return x * w; }
  at::Tensor loss(const at::Tensor& y, int) override { return y.sum(); }
  void begin_backward(bool last) override { lasts.push_back(last); }
  void end_backward() override { ++ended; }

  bool first_, last_;
  at::Tensor w;
  std::vector<bool> lasts;
  int ended = 0;
};

class PipelineExecutor : public testing::TestWithParam<Schedule> {};

TEST_P(PipelineExecutor, TwoStagesGiveTheLossAndGradientsOfOneModel) {
  const int m = 3;
  const double divisor = 4;
  Mailbox mb;
  FakeComm c0(mb, 0), c1(mb, 1);
  FakeStage s0(true, false, 2.0f), s1(false, true, 3.0f);
  double loss0 = -1, loss1 = -1;
  std::thread t0([&] { loss0 = run_pipeline_step(pipeline_actions(GetParam(), 2, 0, m), s0, {&c0, -1, 1}, divisor); });
  std::thread t1([&] { loss1 = run_pipeline_step(pipeline_actions(GetParam(), 2, 1, m), s1, {&c1, 0, -1}, divisor); });
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
  // Every backward is bracketed; only the step's last one on each stage is marked last.
  for (const FakeStage* s : {&s0, &s1}) {
    EXPECT_EQ(s->ended, m);
    EXPECT_EQ(s->lasts, (std::vector<bool>{false, false, true}));
  }
}

INSTANTIATE_TEST_SUITE_P(Schedules, PipelineExecutor, testing::Values(Schedule::kGpipe, Schedule::k1F1B),
                         [](const auto& info) { return std::string(to_string(info.param)); });

}  // namespace
}  // namespace weft::runtime
