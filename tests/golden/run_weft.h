// Runs the weft binary of this build for the golden tests: `weft <args...>` with stdout and
// stderr captured apart and the exit status.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

namespace weft::golden {

struct Output {
  int status = -1;  // exit status; -1 when it did not exit normally
  std::string out, err;
};

inline std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

inline std::string read_all(FILE* f) {
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  return s;
}

// Each argument is passed as one word (shell-quoted).
inline Output run_weft(const std::vector<std::string>& args) {
  // One file per test process: the golden tests run side by side under ctest -j.
  const std::string err_path = testing::TempDir() + "weft_golden_" + std::to_string(getpid()) + ".err";
  std::string cmd = std::string(WEFT_BINARY_DIR) + "/bin/weft";
  for (const auto& a : args) cmd += " " + quote(a);
  cmd += " 2>" + quote(err_path);
  Output r;
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return r;
  r.out = read_all(f);
  const int st = pclose(f);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  if (FILE* e = std::fopen(err_path.c_str(), "r")) {
    r.err = read_all(e);
    std::fclose(e);
  }
  std::remove(err_path.c_str());
  return r;
}

}  // namespace weft::golden
