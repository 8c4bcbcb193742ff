// weft's single-process forward/backward against an independent PyTorch (Python) implementation of
// the same architectures (tests/runtime/torch_reference.py): the loss and gradient norm of the first
// step, from the same parameters and tokens. The parity tests compare every parallel mode with this
// single-process run; this test anchors that run to PyTorch's own modules.
#include "rt_util.h"

namespace weft::rttest {
namespace {

const char* kPython = "/usr/bin/python3";

void check_against_torch(const ModelSpec& m, const std::string& name) {
  if (run(std::string(kPython) + " -c 'import torch, numpy'").status != 0)
    GTEST_SKIP() << kPython << " with torch (Debian python3-torch) is not available";
  const std::string dir = temp_dir("torchref_" + name);
  Plan p = uniform(m, 1, 1, LayerStrategy{}, {m.num_layers()}, Schedule::k1F1B, 4, 1);
  const std::string plan = write_plan(p, dir, "plan");
  write_json_file(dir + "/model.json", to_json(m));
  // A learning rate of 1e-30 leaves the saved parameters equal to the initial ones.
  const RunResult w = run(driver() + " train --plan " + plan + " --steps 1 --lr 1e-30 --seed 7 --format json " +
                          "--save-params " + dir + "/p.params");
  ASSERT_EQ(w.status, 0) << w.output;
  ASSERT_EQ(w.losses.size(), 1u);
  const RunResult t = run(std::string(kPython) + " " + WEFT_RT_TESTS_DIR + "/torch_reference.py " + dir +
                          "/model.json " + dir + "/p.params " + std::to_string(p.train.seq) + " " +
                          std::to_string(p.train.global_batch) + " 7");
  ASSERT_EQ(t.status, 0) << t.output;
  const Json j = Json::parse(t.output.substr(t.output.rfind("{\"loss\"")));
  const double loss = j.at("loss").get<double>(), norm = j.at("grad_norm").get<double>();
  EXPECT_NEAR(w.losses[0], loss, 1e-5 * loss);
  EXPECT_NEAR(w.grad_norms[0], norm, 1e-4 * norm);
  std::printf("%s: weft loss %.8f grad_norm %.6f; torch loss %.8f grad_norm %.6f\n", name.c_str(), w.losses[0],
              w.grad_norms[0], loss, norm);
  std::filesystem::remove_all(dir);
}

TEST(RuntimeReference, GptMatchesPyTorch) { check_against_torch(tiny_gpt(), "gpt"); }
TEST(RuntimeReference, LlamaGqaRopeMatchesPyTorch) { check_against_torch(tiny_llama(4, 2), "llama"); }
TEST(RuntimeReference, LlamaMultiQueryMatchesPyTorch) { check_against_torch(tiny_llama(2, 1), "mqa"); }

}  // namespace
}  // namespace weft::rttest
