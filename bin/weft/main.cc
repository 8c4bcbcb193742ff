// weft: the command-line entry point. Thin: its commands (train and profile need libtorch), then cli_main()
// (cli_main.cc) parses flags, calls the libraries and maps errors to exit codes (0 ok, 2 bad
// input, 3 nothing fits, 4 I/O, 5 runtime failure).
#include "commands.h"

int main(int argc, char** argv) {
  using namespace weft::cli;
  std::vector<Registrar> commands;
  commands.push_back(register_spec_commands);
  commands.push_back(register_plan_commands);
  commands.push_back(register_report_commands);
  commands.push_back(register_galvatron_commands);
  commands.push_back(register_varlen_commands);
  commands.push_back(register_moe_commands);
#ifdef WEFT_WITH_TORCH
  commands.push_back(register_train_commands);
  commands.push_back(register_profile_commands);
  commands.push_back(register_checkpoint_commands);
#endif
  return cli_main(argc, argv, "weft: automatic parallelism for transformer training", commands, "weft 0.1.0");
}
