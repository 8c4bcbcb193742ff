#include "fault.h"

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <thread>

namespace weft::runtime {

Result<Fault> parse_fault(const std::string& s) {
  Fault f;
  if (s.empty()) return f;
  const auto a = s.find(':'), b = s.find(':', a == std::string::npos ? a : a + 1);
  try {
    if (a == std::string::npos || b == std::string::npos) throw std::invalid_argument("shape");
    f.rank = std::stoi(s.substr(0, a));
    f.step = std::stoi(s.substr(a + 1, b - a - 1));
    f.mode = s.substr(b + 1);
  } catch (const std::exception&) {
    return Error{ErrorKind::kBadInput, "--fault: expected RANK:STEP:MODE, got \"" + s + "\""};
  }
  if (f.mode.rfind("sleep=", 0) == 0) {
    char* end = nullptr;
    f.sleep_s = std::strtod(f.mode.c_str() + 6, &end);
    if (!end || *end != '\0' || !(f.sleep_s > 0))
      return Error{ErrorKind::kBadInput, "--fault: sleep=SECONDS needs a positive number, got \"" + f.mode + "\""};
    f.mode = "sleep";
  }
  if (f.mode != "exit" && f.mode != "kill" && f.mode != "hang" && f.mode != "stop" && f.mode != "sleep")
    return Error{ErrorKind::kBadInput,
                 "--fault: MODE must be exit, kill, hang, stop or sleep=SECONDS, got \"" + f.mode + "\""};
  return f;
}

void inject(const Fault& f, int rank, int step) {
  if (f.rank != rank || f.step != step) return;
  std::fprintf(stderr, "weft: fault injection: rank %d %s at step %d\n", rank, f.mode.c_str(), step);
  std::fflush(stderr);
  if (f.mode == "exit") std::_Exit(7);
  if (f.mode == "kill") raise(SIGKILL);
  if (f.mode == "stop") raise(SIGSTOP);
  if (f.mode == "sleep") {
    std::this_thread::sleep_for(std::chrono::duration<double>(f.sleep_s));  // then goes on
    return;
  }
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));  // hang: the main thread only
}

}  // namespace weft::runtime
