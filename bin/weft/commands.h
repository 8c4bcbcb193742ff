// Each CLI subcommand lives in its own cmd_*.cc and registers itself on the app. A command's
// callback throws CliExit (carrying the exit code) to finish; main() maps it to the process status.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "weft/core/error.h"

namespace weft::cli {

struct CliExit {
  int code = 0;
};

// Prints "weft: error: <message>" on stderr and throws CliExit with the error kind's exit code.
[[noreturn]] void fail(const Error& e);
// Unwraps a Result or fails with its error.
template <class T>
T unwrap(Result<T> r) {
  if (!r.ok()) fail(r.error());
  return std::move(r).value();
}
inline void check(const Status& s) {
  if (!s.ok()) fail(s.error());
}

void register_spec_commands(CLI::App& app);     // models, clusters          (cmd_specs.cc)
void register_plan_commands(CLI::App& app);     // plan, estimate            (cmd_plan.cc)
void register_report_commands(CLI::App& app);   // report, simulate, export  (cmd_report.cc)
void register_galvatron_commands(CLI::App& app);// import galvatron          (cmd_galvatron.cc)
#ifdef WEFT_WITH_TORCH
void register_train_commands(CLI::App& app);    // train, launch             (cmd_train.cc)
void register_profile_commands(CLI::App& app);  // profile hardware|model    (cmd_profile.cc)
#endif

}  // namespace weft::cli
