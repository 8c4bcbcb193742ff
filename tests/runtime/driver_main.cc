// weft_rt: the `train`, `launch` and `checkpoint` commands of weft on their own, for the runtime tests and
// benchmarks (same option parsing and exit codes as `weft train` / `weft launch`: cli_main).
#include "commands.h"

int main(int argc, char** argv) {
  using namespace weft::cli;
  return cli_main(argc, argv, "weft_rt: weft's train, launch and checkpoint commands", {register_train_commands, register_checkpoint_commands});
}
