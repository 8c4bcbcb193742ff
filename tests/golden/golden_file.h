// A golden file of the golden tests: a JSON object of named cases that a test compares today's
// output with, or, with WEFT_UPDATE_GOLDEN set, writes afresh from it (each test's header says how
// to regenerate its file on purpose). Also the cases' shape and the weft flags of the model /
// cluster pairs that several golden files share.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "weft/core/json.h"

namespace weft::golden {

// The folder of the golden files (tests/golden).
inline const std::string kDir = WEFT_GOLDEN_DIR;

// A golden case: its name and the arguments after the weft command (the test adds --format json).
struct Case {
  std::string name;
  std::vector<std::string> args;
};

class GoldenFile {
 public:
  // Reads the file at `path`, or starts empty when WEFT_UPDATE_GOLDEN is set.
  explicit GoldenFile(std::string path)
      : path_(std::move(path)),
        update_(std::getenv("WEFT_UPDATE_GOLDEN") != nullptr),
        cases_(update_ ? Json::object() : read_json_file(path_)) {}

  const std::string& path() const { return path_; }
  bool updating() const { return update_; }

  // While updating: keeps `entry` as the case `name`.
  void record(const std::string& name, Json entry) { cases_[name] = std::move(entry); }

  // The stored case `name`; has(name) says whether there is one, missing(name) says so in words.
  bool has(const std::string& name) const { return cases_.contains(name); }
  std::string missing(const std::string& name) const {
    return name + " is not in " + path_ + " (WEFT_UPDATE_GOLDEN=1 adds it)";
  }
  const Json& entry(const std::string& name) const { return cases_.at(name); }

  // Counts the case `name` as compared; when `got` differs from `want` the test fails with
  // "<name>: <what> changed" and the JSON patch from the golden <golden_what> to today's.
  void compare(const std::string& name, const Json& want, const Json& got, const std::string& what,
               const std::string& golden_what) {
    if (got != want) {
      ADD_FAILURE() << name << ": " << what << " changed (JSON patch from the golden " << golden_what
                    << " to today's):\n"
                    << nlohmann::json::diff(nlohmann::json(want), nlohmann::json(got)).dump(2);
    }
    ++compared_;
  }

  // After the last case. Updating: writes the file and says so ("wrote N golden <kind> to ...").
  // Otherwise: every stored case was compared, and at least `at_least` of them.
  void finish(const std::string& kind, int at_least) const {
    if (update_) {
      write();
      std::printf("wrote %zu golden %s to %s\n", cases_.size(), kind.c_str(), path_.c_str());
      return;
    }
    EXPECT_EQ(compared_, static_cast<int>(cases_.size())) << path_ << " holds cases this test no longer runs";
    EXPECT_GE(compared_, at_least);
  }

  void write() const { write_json_file(path_, cases_); }

 private:
  std::string path_;
  bool update_;
  Json cases_;
  int compared_ = 0;
};

// `a` followed by `more`.
inline std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& more) {
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

// Llama-2-7B on 8 A100-80GB, seq 4096, global batch 512.
inline std::vector<std::string> llama2_7b_a100x8() {
  return {"--model", "llama-2-7b", "--cluster", "a100-80gb", "--gpus", "8", "--seq", "4096", "--global-batch", "512"};
}

// Llama-3-70B on 64 H100-80GB, seq 8192, global batch 512.
inline std::vector<std::string> llama3_70b_h100x64() {
  return {"--model", "llama-3-70b", "--cluster", "h100-80gb", "--gpus", "64", "--seq", "8192", "--global-batch", "512"};
}

// GPT-3 175B on 1024 A100-80GB, seq 2048, global batch 1536.
inline std::vector<std::string> gpt3_175b_a100x1024() {
  return {"--model", "gpt3-175b", "--cluster", "a100-80gb", "--gpus", "1024", "--seq", "2048",
          "--global-batch", "1536"};
}

// Mixtral-8x7B on 32 H100-80GB, seq 4096, global batch 256.
inline std::vector<std::string> mixtral_8x7b_h100x32() {
  return {"--model", "mixtral-8x7b", "--cluster", "h100-80gb", "--gpus", "32", "--seq", "4096",
          "--global-batch", "256"};
}

// Galvatron's cost model on its published Llama-2-7B profiles (data/reference/galvatron), 8
// A100-80GB, seq 2048, global batch 64.
inline std::vector<std::string> galvatron_llama2_7b() {
  const std::string ref = std::string(WEFT_DATA_DIR) + "/reference/galvatron";
  return {"--cost-model", "galvatron", "--galvatron-profiles", ref, "--galvatron-model", ref + "/llama2-7b.yaml",
          "--cluster", "a100-80gb", "--gpus", "8", "--seq", "2048", "--global-batch", "64"};
}

}  // namespace weft::golden
