// The main() of every weft executable (the weft binary and the test drivers that carry some of its
// commands): one place that builds the app, parses and maps errors to exit codes.
#include <cstdio>

#include "commands.h"

namespace weft::cli {

void fail(const Error& e) {
  std::fprintf(stderr, "weft: error: %s\n", e.message.c_str());
  throw CliExit{exit_code(e.kind)};
}

int cli_main(int argc, char** argv, const std::string& description, const std::vector<Registrar>& registrars,
             const std::string& version) {
  CLI::App app{description};
  app.require_subcommand(1);
  if (!version.empty()) app.set_version_flag("--version", version);
  for (Registrar r : registrars) r(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --help-all, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "weft: error: %s\n", e.what());
    return 2;
  } catch (const CliExit& e) {
    return e.code;
  } catch (const InputError& e) {
    std::fprintf(stderr, "weft: error: %s\n", e.what());
    return exit_code(e.kind);
  }
  return 0;
}

}  // namespace weft::cli
