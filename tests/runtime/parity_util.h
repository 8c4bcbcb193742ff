// expect_parity(): a plan's run against the single-process run of the same model, batch and seed.
#pragma once

#include <map>

#include "rt_util.h"

namespace weft::rttest {

constexpr int kSteps = 5;
constexpr double kLossRel = 1e-5;
constexpr double kParamAbs = 1e-5;

struct Reference {
  RunResult run;
  runtime::ParamsFile params;
};

// One single-process run per (model, batch, micro-batches, driver build), cached on disk so the
// tests of a ctest run (one process each) share it. A cache entry is a directory renamed into place
// complete, so concurrent tests never read half of one.
// `both`: flags for the reference and the parallel run alike.
inline const Reference& reference(const Plan& p, const std::string& both = "") {
  static std::map<std::string, Reference> cache;
  const Plan ref = reference_of(p);
  const auto stamp = std::filesystem::last_write_time(driver()).time_since_epoch().count();
  const std::string key = json_hash(Json{to_json(ref), train_flags(kSteps) + both, std::to_string(stamp)});
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  const auto final_dir = std::filesystem::temp_directory_path() / ("weft_rt_ref_" + key);
  Reference r;
  if (!std::filesystem::exists(final_dir / "losses.json")) {
    const std::string dir = temp_dir("ref_" + key);
    const RunResult run = train_plan(ref, dir, "ref", kSteps, both);
    EXPECT_EQ(run.status, 0) << run.output;
    write_json_file(dir + "/losses.json", Json{{"losses", run.losses}, {"grad_norms", run.grad_norms}});
    std::error_code ec;
    std::filesystem::rename(dir, final_dir, ec);  // fails harmlessly if another test won the race
    if (ec) {
      r.run = run;
      r.params = read_params(dir + "/ref.params");
      std::filesystem::remove_all(dir);
      return cache.emplace(key, std::move(r)).first->second;
    }
  }
  const Json j = read_json_file((final_dir / "losses.json").string());
  r.run.status = 0;
  r.run.losses = j.at("losses").get<std::vector<double>>();
  r.run.grad_norms = j.at("grad_norms").get<std::vector<double>>();
  r.params = read_params((final_dir / "ref.params").string());
  return cache.emplace(key, std::move(r)).first->second;
}

// `extra`: flags for the parallel run only (the reference runs with the defaults); `both`: flags
// for both runs.
inline void expect_parity(const Plan& p, const std::string& name, const std::string& extra = "",
                          const std::string& both = "") {
  const Reference& ref = reference(p, both);
  ASSERT_EQ(ref.run.losses.size(), static_cast<size_t>(kSteps)) << ref.run.output;
  const std::string dir = temp_dir(name);
  const RunResult got = train_plan(p, dir, name, kSteps, extra + both);
  ASSERT_EQ(got.status, 0) << got.output;
  ASSERT_EQ(got.losses.size(), static_cast<size_t>(kSteps)) << got.output;
  double worst_loss = 0;
  for (int i = 0; i < kSteps; ++i) {
    worst_loss = std::max(worst_loss, std::fabs(got.losses[i] - ref.run.losses[i]) / std::fabs(ref.run.losses[i]));
    EXPECT_NEAR(got.losses[i], ref.run.losses[i], kLossRel * std::fabs(ref.run.losses[i])) << "step " << i + 1;
    EXPECT_NEAR(got.grad_norms[i], ref.run.grad_norms[i], 1e-4 * ref.run.grad_norms[i]) << "step " << i + 1;
  }
  // The run must have trained: the loss moves from the first to the last step.
  EXPECT_GT(std::fabs(got.losses.front() - got.losses.back()), 1e-3);
  const runtime::ParamsFile params = read_params(dir + "/" + name + ".params");
  auto d = runtime::compare_params(params, ref.params);
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_LE(d->max_abs, kParamAbs) << "worst parameter " << d->worst;
  std::printf("parity %s: %d ranks, loss max rel diff %.2e, params max abs diff %.2e (%s), %.1f s\n", name.c_str(),
              p.world_size(), worst_loss, d->max_abs, d->worst.c_str(), got.seconds);
  std::filesystem::remove_all(dir);
}

}  // namespace weft::rttest
