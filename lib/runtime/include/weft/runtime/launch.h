// `weft launch`: starts N local processes of a command with the torchrun environment, streams their
// output line by line with a rank prefix, and propagates failure. Torch-free. docs/runtime.md,
// "Launching".
#pragma once

#include <string>
#include <vector>

namespace weft::runtime {

struct LaunchOptions {
  int nprocs = 1;                        // -n: processes (ranks 0..n-1) on this machine
  std::string master_addr = "127.0.0.1"; // where rank 0's store listens
  int master_port = 0;                   // 0: pick a free port on master_addr
  bool prefix = true;                    // prefix output lines with "[rank] " (see launch())
  double grace_s = 5;                    // after SIGTERM, seconds before SIGKILL
  std::vector<std::string> command;      // program and arguments; "weft" means this executable
};

// Runs the job and returns the exit status for the launcher process:
//   0 when every rank exits 0;
//   otherwise the exit code of the first rank that failed (5 if it was killed by a signal), after
//   the others were stopped (SIGTERM, then SIGKILL after grace_s) and reaped.
// Each child gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, and
// OMP_NUM_THREADS=1 / OPENBLAS_NUM_THREADS=1 unless they are already set. SIGINT and SIGTERM sent
// to the launcher are forwarded to every rank. Messages about ranks go to stderr as
// "weft launch: ...". Returns 2 with a message if the options are invalid.
// Output: a rank's stdout goes to stdout and its stderr to stderr, line by line, each line
// prefixed with "[rank] " when `prefix` is set, except:
//   - a stdout line starting with '{' is passed through unprefixed, so JSON lines
//     (`weft train --format json`, printed by rank 0) stay JSON lines;
//   - an error, a stderr line starting "weft: error: " and the stderr lines after it, is held until
//     its rank exits (at most 2 s) and printed once: before "weft launch: rank R exited with code
//     C; ..." for the first rank to fail, and not again when other ranks print the same text; the
//     last line then says "weft launch: ranks 0, 2 reported the same error as rank 1".
int launch(const LaunchOptions& o);

}  // namespace weft::runtime
