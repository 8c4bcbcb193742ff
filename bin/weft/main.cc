// weft: the command-line entry point. Thin: parse flags, call the libraries, map errors to exit
// codes (0 ok, 2 bad input, 3 nothing fits, 4 I/O, 5 runtime failure).
#include <cstdio>
#include <iostream>

#include "commands.h"

namespace weft::cli {

void fail(const Error& e) {
  std::fprintf(stderr, "weft: error: %s\n", e.message.c_str());
  throw CliExit{exit_code(e.kind)};
}

}  // namespace weft::cli

int main(int argc, char** argv) {
  using namespace weft::cli;
  CLI::App app{"weft: automatic parallelism for transformer training"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "weft 0.1.0");
#ifdef WEFT_CMD_SPECS
  register_spec_commands(app);
#endif
#ifdef WEFT_CMD_PLAN
  register_plan_commands(app);
#endif
#ifdef WEFT_CMD_REPORT
  register_report_commands(app);
#endif
#ifdef WEFT_CMD_GALVATRON
  register_galvatron_commands(app);
#endif
#ifdef WEFT_CMD_TRAIN
  register_train_commands(app);
#endif
#ifdef WEFT_CMD_PROFILE
  register_profile_commands(app);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "weft: error: %s\n", e.what());
    return 2;
  } catch (const CliExit& e) {
    return e.code;
  } catch (const weft::InputError& e) {
    std::fprintf(stderr, "weft: error: %s\n", e.what());
    return weft::exit_code(e.kind);
  }
  return 0;
}
