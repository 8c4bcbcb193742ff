// Each CLI subcommand lives in its own cmd_*.cc and registers itself on the app. A command's
// callback throws CliExit (carrying the exit code) to finish; cli_main() maps it to the process
// status.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "weft/core/error.h"

namespace weft::cli {

struct CliExit {
  int code = 0;
};

// Adds a family of subcommands to the app (register_*_commands below).
using Registrar = void (*)(CLI::App&);

// The whole main() of a weft executable (cli_main.cc): an app described by `description` with the
// subcommands of `registrars` (exactly one required), and `--version` printing `version` unless it
// is empty. Parses argv and runs the command; returns the exit code: 0 (also after --help or
// --version), 2 for a flag error, the CliExit code a command finishes with, or the exit code of an
// InputError's kind. Errors are printed as "weft: error: <message>" on stderr.
int cli_main(int argc, char** argv, const std::string& description, const std::vector<Registrar>& registrars,
             const std::string& version = "");

// Prints "weft: error: <message>" on stderr and throws CliExit with the error kind's exit code
// (defined in cli_main.cc).
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
void register_varlen_commands(CLI::App& app);   // varlen                    (cmd_varlen.cc)
void register_moe_commands(CLI::App& app);      // moe-placement             (cmd_moe.cc)
#ifdef WEFT_WITH_TORCH
void register_train_commands(CLI::App& app);    // train, launch             (cmd_train.cc)
void register_profile_commands(CLI::App& app);  // profile hardware|model    (cmd_profile.cc)
void register_checkpoint_commands(CLI::App& app);  // checkpoint inspect|convert (cmd_checkpoint.cc)
#endif

}  // namespace weft::cli
