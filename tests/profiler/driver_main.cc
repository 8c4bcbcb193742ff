// weft_prof: the `profile` and `launch` commands of weft on their own, for the profiler tests (same
// option parsing and exit codes as `weft profile` / `weft launch`).
#include <cstdio>

#include "commands.h"

namespace weft::cli {

void fail(const Error& e) {
  std::fprintf(stderr, "weft: error: %s\n", e.message.c_str());
  throw CliExit{exit_code(e.kind)};
}

}  // namespace weft::cli

int main(int argc, char** argv) {
  using namespace weft::cli;
  CLI::App app{"weft_prof: weft's profile and launch commands"};
  app.require_subcommand(1);
  register_profile_commands(app);
  register_train_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
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
