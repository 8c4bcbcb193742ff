// `weft launch`: starts N local processes of a command with the torchrun environment, streams their
// output line by line with a rank prefix, and propagates failure. Torch-free.
#pragma once

#include <string>
#include <vector>

namespace weft::runtime {

struct LaunchOptions {
  int nprocs = 1;                        // -n: processes (ranks 0..n-1) on this machine
  std::string master_addr = "127.0.0.1"; // where rank 0's store listens
  int master_port = 0;                   // 0: pick a free port on master_addr
  bool prefix = true;                    // prefix every output line with "[rank] "
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
int launch(const LaunchOptions& o);

}  // namespace weft::runtime
