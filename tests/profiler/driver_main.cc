// weft_prof: the `profile` and `launch` commands of weft on their own, for the profiler tests (same
// option parsing and exit codes as `weft profile` / `weft launch`: cli_main).
#include "commands.h"

int main(int argc, char** argv) {
  using namespace weft::cli;
  return cli_main(argc, argv, "weft_prof: weft's profile and launch commands",
                  {register_profile_commands, register_train_commands});
}
