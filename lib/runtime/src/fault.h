// The --fault test hook (`weft train --fault RANK:STEP:MODE`): makes one rank fail on purpose at the
// start of a step, so the tests can check how the job reports and survives failures. MODE is exit
// (the process exits with code 7), kill (SIGKILL), stop (SIGSTOP; it hangs if continued), hang (the
// main thread sleeps forever; the watchdog thread goes on) or sleep=SECONDS (the main thread
// pauses, then goes on).
#pragma once

#include <string>

#include "weft/core/error.h"

namespace weft::runtime {

struct Fault {
  int rank = -1, step = -1;  // -1: no fault
  std::string mode;
  double sleep_s = 0;        // mode "sleep"
};

// "" gives no fault. Errors (kBadInput) name the flag and quote what was given.
Result<Fault> parse_fault(const std::string& s);

// At the start of step `step` on rank `rank`: does what `f` says if it names this rank and step
// (printing "weft: fault injection: ..." on stderr first); otherwise returns at once.
void inject(const Fault& f, int rank, int step);

}  // namespace weft::runtime
