// A preloadable library (LD_PRELOAD) that records every fsync and rename of the process it is
// loaded into, so a test can check the order in which a program makes its files durable. Each
// call is appended as one line to the file named by WEFT_SYNC_LOG, after the real call succeeds:
//   <pid> fsync <absolute path of the descriptor>
//   <pid> rename <from> <to>
// Without WEFT_SYNC_LOG it only forwards the calls.
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace {

void log_line(const char* what, const char* a, const char* b) {
  const char* path = std::getenv("WEFT_SYNC_LOG");
  if (!path) return;
  char line[8300];
  const int n = std::snprintf(line, sizeof line, "%d %s %s%s%s\n", static_cast<int>(getpid()), what, a, b ? " " : "",
                              b ? b : "");
  if (n <= 0) return;
  const int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  const ssize_t w = write(fd, line, static_cast<size_t>(n < static_cast<int>(sizeof line) ? n : sizeof line - 1));
  (void)w;
  close(fd);
}

template <class F>
F real(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

}  // namespace

extern "C" int fsync(int fd) {
  static auto next = real<int (*)(int)>("fsync");
  char link[64], path[4096];
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, path, sizeof path - 1);
  path[n > 0 ? n : 0] = '\0';
  const int rc = next(fd);
  if (rc == 0) log_line("fsync", path, nullptr);
  return rc;
}

extern "C" int rename(const char* from, const char* to) {
  static auto next = real<int (*)(const char*, const char*)>("rename");
  const int rc = next(from, to);
  if (rc == 0) log_line("rename", from, to);
  return rc;
}
