// WEFT_ASSERT(cond, msg): the check of a broken invariant (ARCHITECTURE.md "Errors", tier ii): a
// state that no input can produce unless weft itself is wrong. Always on, in Release builds too
// (it does not depend on NDEBUG). When `cond` is false it prints
//   weft: internal error: <file>:<line>: check failed: <cond>: <msg>
// to stderr and aborts the process. `cond` is evaluated exactly once; `msg` (a string literal or
// a std::string expression) only when the check fails, so it may build a message with numbers.
// Never use it for bad user input or for a failure of a peer, a file or the network: those are
// Error values (weft/core/error.h) or exceptions their callers report.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace weft::detail {

[[noreturn]] inline void assert_failed(const char* file, int line, const char* cond, std::string_view msg) {
  std::fprintf(stderr, "weft: internal error: %s:%d: check failed: %s: %.*s\n", file, line, cond,
               static_cast<int>(msg.size()), msg.data());
  std::fflush(stderr);
  std::abort();
}

}  // namespace weft::detail

#define WEFT_ASSERT(cond, msg)                                                  \
  do {                                                                          \
    if (!(cond)) [[unlikely]]                                                   \
      ::weft::detail::assert_failed(__FILE__, __LINE__, #cond, (msg));          \
  } while (false)
