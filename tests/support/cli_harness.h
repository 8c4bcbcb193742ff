// Runs weft subcommands in-process through CLI11, capturing stdout, stderr and the exit code
// main() would return. For test binaries that link some bin/weft/cmd_*.cc files without main.cc:
// include this header in exactly one translation unit of the binary (it defines cli::fail).
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "commands.h"

namespace weft::cli {

// main.cc's definition: print the error, leave with its exit code.
void fail(const Error& e) {
  std::fprintf(stderr, "weft: error: %s\n", e.message.c_str());
  throw CliExit{exit_code(e.kind)};
}

namespace test {

struct CliRun {
  int code = 0;
  std::string out, err;
};

// `registrar(app)` adds the subcommands under test (register_plan_commands, ...).
template <class Registrar>
CliRun run_cli(Registrar&& registrar, const std::vector<std::string>& args) {
  CLI::App app{"weft"};
  app.require_subcommand(1);
  registrar(app);
  std::vector<const char*> argv{"weft"};
  for (const auto& a : args) argv.push_back(a.c_str());
  CliRun r;
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  try {
    app.parse(static_cast<int>(argv.size()), const_cast<char**>(argv.data()));
  } catch (const CliExit& e) {
    r.code = e.code;
  } catch (const CLI::ParseError&) {
    r.code = 2;  // what main() returns for a flag error
  }
  std::fflush(stdout);
  r.out = testing::internal::GetCapturedStdout();
  r.err = testing::internal::GetCapturedStderr();
  return r;
}

}  // namespace test
}  // namespace weft::cli
