// weft: the command-line entry point. Thin: the commands this build has, then cli_main()
// (cli_main.cc) parses flags, calls the libraries and maps errors to exit codes (0 ok, 2 bad
// input, 3 nothing fits, 4 I/O, 5 runtime failure).
#include "commands.h"

int main(int argc, char** argv) {
  using namespace weft::cli;
  std::vector<Registrar> commands;
#ifdef WEFT_CMD_SPECS
  commands.push_back(register_spec_commands);
#endif
#ifdef WEFT_CMD_PLAN
  commands.push_back(register_plan_commands);
#endif
#ifdef WEFT_CMD_REPORT
  commands.push_back(register_report_commands);
#endif
#ifdef WEFT_CMD_GALVATRON
  commands.push_back(register_galvatron_commands);
#endif
#ifdef WEFT_CMD_TRAIN
  commands.push_back(register_train_commands);
#endif
#ifdef WEFT_CMD_PROFILE
  commands.push_back(register_profile_commands);
#endif
  return cli_main(argc, argv, "weft: automatic parallelism for transformer training", commands, "weft 0.1.0");
}
