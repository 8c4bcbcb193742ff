// Task files: the examples of data/tasks load with their published shapes, round-trip through
// to_json, and every bad file is an error naming the task, the module and the numbers.
#include <gtest/gtest.h>

#include <cmath>

#include "weft/spec/tasks.h"
#include "weft/spec/counts.h"

namespace weft::multitask {
namespace {

const std::string kTasks = std::string(WEFT_DATA_DIR) + "/tasks/";

TaskSpec load(const std::string& file) {
  Result<TaskSpec> t = load_tasks(kTasks + file);
  EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().message);
  return t.ok() ? *t : TaskSpec{};
}

// ImageBind's encoders as Spindle's Multitask-CLIP uses them: 4, 7 and 10 encoder pairs over 5, 6
// and 6 encoders; the vision encoder (ViT-H/14, 32 x 1280) holds about 12 L h^2 = 629M parameters
// and the six together about 1.2B (Spindle's Table 1b: 1.20B with ImageBind's heads).
TEST(Tasks, ClipExamplesOnImageBindShapes) {
  const TaskSpec t4 = load("clip-4-tasks.json"), t7 = load("clip-7-tasks.json"), t10 = load("clip-10-tasks.json");
  EXPECT_EQ(t4.tasks.size(), 4u);
  EXPECT_EQ(t4.modules.size(), 5u);
  EXPECT_EQ(t7.tasks.size(), 7u);
  EXPECT_EQ(t10.tasks.size(), 10u);
  ASSERT_EQ(t10.modules.size(), 6u);
  const Module& vision = t10.modules[static_cast<size_t>(t10.module_index("vision"))];
  EXPECT_EQ(vision.tokens, 257);
  EXPECT_EQ(vision.model.groups[0].shape.kind, LayerKind::kEncoder);
  EXPECT_LT(std::abs(total_params(vision.model) - 629e6) / 629e6, 0.02) << total_params(vision.model);
  double all = 0;
  for (const Module& m : t10.modules) all += total_params(m.model);
  EXPECT_LT(std::abs(all - 1.19e9) / 1.19e9, 0.03) << all;
  for (const Task& task : t10.tasks) {
    EXPECT_EQ(task.modules.size(), 2u) << task.name;
    EXPECT_EQ(task.loss, "contrastive") << task.name;
  }
}

// Qwen-VL / Qwen-Audio: both encoders flow into the LLM; a task runs its modules in that order.
TEST(Tasks, QwenValRunsEncodersBeforeTheLlm) {
  const TaskSpec t = load("qwen-val-3-tasks.json");
  ASSERT_EQ(t.tasks.size(), 3u);
  const std::vector<int> order = task_order(t, t.tasks[2]);
  ASSERT_EQ(order.size(), 3u);
  EXPECT_EQ(t.modules[static_cast<size_t>(order.back())].name, "llm");
  const Module& llm = t.modules[static_cast<size_t>(t.module_index("llm"))];
  EXPECT_EQ(llm.model.groups[0].shape.kind, LayerKind::kDecoder);
  EXPECT_EQ(llm.model.groups[0].shape.ffn_kind, FfnKind::kSwiglu);
  EXPECT_LT(std::abs(total_params(llm.model) - 7.7e9) / 7.7e9, 0.03) << total_params(llm.model);  // Qwen-7B: 7.7B
  const TaskSpec big = load("vit-22b-gpt-175b.json");
  EXPECT_LT(std::abs(total_params(big.modules[1].model) - 175e9) / 175e9, 0.01) << total_params(big.modules[1].model);
  EXPECT_LT(std::abs(total_params(big.modules[0].model) - 22e9) / 22e9, 0.03) << total_params(big.modules[0].model);
}

TEST(Tasks, RoundTripThroughJson) {
  for (const char* f : {"clip-7-tasks.json", "qwen-val-3-tasks.json", "vit-3b-gpt-11b.json"}) {
    const TaskSpec t = load(f);
    Result<TaskSpec> back = tasks_from_json(to_json(t), "round trip");
    ASSERT_TRUE(back.ok()) << f << ": " << back.error().message;
    EXPECT_EQ(to_json(*back).dump(), to_json(t).dump()) << f;
  }
}

// A small file to break in each test below.
Json two_tasks() {
  return Json::parse(R"({"name": "t", "modules": [
      {"name": "a", "layers": 2, "hidden": 64, "heads": 4, "tokens": 16},
      {"name": "b", "layers": 2, "hidden": 64, "heads": 4, "tokens": 16},
      {"name": "c", "layers": 1, "hidden": 64, "heads": 4, "tokens": 16}],
    "flows": [{"from": "a", "to": "c"}, {"from": "b", "to": "c"}],
    "tasks": [{"name": "x", "modules": ["a", "c"], "batch": 8}, {"name": "y", "modules": ["b", "c"], "batch": 4}]})");
}

std::string error_of(const Json& j) {
  Result<TaskSpec> r = tasks_from_json(j, "f.json");
  return r.ok() ? std::string("accepted") : r.error().message;
}

TEST(Tasks, BadFilesNameTheTaskModuleAndNumbers) {
  EXPECT_EQ(error_of(two_tasks()), "accepted");
  auto expect = [](const Json& j, const std::string& part) {
    const std::string e = error_of(j);
    EXPECT_NE(e.find(part), std::string::npos) << e;
  };
  Json j = two_tasks();
  j["tasks"][0]["modules"][1] = "d";
  expect(j, "task \"x\": module \"d\" does not exist (modules: a, b, c)");
  j = two_tasks();
  j["flows"].push_back({{"from", "c"}, {"to", "a"}});
  expect(j, "flows: a cycle (a -> c -> a)");
  j = two_tasks();
  j["flows"].push_back({{"from", "c"}, {"to", "z"}});
  expect(j, "flows: \"z\" is not a module");
  j = two_tasks();
  j["tasks"][1]["batch"] = 0;
  expect(j, "task \"y\": batch must be positive, got 0");
  j = two_tasks();
  j["modules"][2]["shares"] = "a";
  expect(j, "module \"c\": shares the parameters of \"a\" but its layers differ (1 layers of hidden 64 against 2 of 64)");
  j = two_tasks();
  j["modules"][1]["shares"] = "a";
  EXPECT_EQ(error_of(j), "accepted");  // b is a's shape: the two encoders are one set of parameters
  j = two_tasks();
  j["modules"][1]["name"] = "a";
  expect(j, "modules: \"a\" is named twice");
  j = two_tasks();
  j["modules"][0]["tokens"] = -3;
  expect(j, "module \"a\": tokens must be positive, got -3");
  j = two_tasks();
  j["modules"][0]["heads"] = 5;
  expect(j, "modules[0].heads: 5 does not divide the hidden size 64");
  j = two_tasks();
  j["tasks"][0]["epochs"] = 2;
  expect(j, "epochs");
  j = two_tasks();
  j["modules"][0]["kind"] = "vision";
  expect(j, "kind: expected \"encoder\" or \"decoder\", got \"vision\"");
  j = two_tasks();
  j["modules"][0] = {{"name", "a"}, {"tokens", 16}, {"model", "no-such-preset"}};
  expect(j, "no-such-preset");
}

}  // namespace
}  // namespace weft::multitask
