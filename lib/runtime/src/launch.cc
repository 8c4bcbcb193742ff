#include "weft/runtime/launch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace weft::runtime {

namespace {

volatile sig_atomic_t g_forward_signal = 0;
void on_signal(int sig) { g_forward_signal = sig; }

// Asks the kernel for a free TCP port on addr (a race with other programs is possible but rare).
int free_port(const std::string& addr) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = 0;
  if (inet_pton(AF_INET, addr.c_str(), &a.sin_addr) != 1) a.sin_addr.s_addr = htonl(INADDR_ANY);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    socklen_t len = sizeof a;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) port = ntohs(a.sin_port);
  }
  close(fd);
  return port;
}

std::string self_exe() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "weft";
  buf[n] = '\0';
  return buf;
}

// Writes all of s to fd, retrying on short writes.
void write_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = write(fd, s.data() + off, s.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    off += static_cast<size_t>(n);
  }
}

struct Stream {
  int fd = -1;       // read end of the pipe, -1 when closed
  int out = 1;       // where lines go: 1 stdout, 2 stderr
  std::string pending;
};

struct Child {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  Stream streams[2];
};

void flush_lines(Stream& s, const std::string& prefix, bool final) {
  size_t start = 0;
  for (;;) {
    const size_t nl = s.pending.find('\n', start);
    if (nl == std::string::npos) break;
    write_all(s.out, prefix + s.pending.substr(start, nl - start + 1));
    start = nl + 1;
  }
  s.pending.erase(0, start);
  if (final && !s.pending.empty()) {
    write_all(s.out, prefix + s.pending + "\n");
    s.pending.clear();
  }
}

void message(const std::string& m) { write_all(2, "weft launch: " + m + "\n"); }

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const char* name = strsignal(WTERMSIG(status));
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" + (name ? name : "?") + ")";
  }
  return "ended with status " + std::to_string(status);
}

}  // namespace

int launch(const LaunchOptions& o) {
  if (o.nprocs < 1) {
    message("-n must be at least 1, got " + std::to_string(o.nprocs));
    return 2;
  }
  if (o.command.empty()) {
    message("no command given (usage: weft launch -n N -- weft train ...)");
    return 2;
  }
  const int port = o.master_port > 0 ? o.master_port : free_port(o.master_addr);
  if (port <= 0) {
    message("could not find a free port on " + o.master_addr + "; pass --master-port");
    return 2;
  }
  std::vector<std::string> argv_s = o.command;
  if (argv_s[0] == "weft") argv_s[0] = self_exe();

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int {}, old_term {};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  signal(SIGPIPE, SIG_IGN);

  std::vector<Child> kids(o.nprocs);
  for (int r = 0; r < o.nprocs; ++r) {
    int pout[2], perr[2];
    if (pipe2(pout, O_CLOEXEC) != 0 || pipe2(perr, O_CLOEXEC) != 0) {
      message(std::string("pipe failed: ") + std::strerror(errno));
      return 5;
    }
    const pid_t pid = fork();
    if (pid < 0) {
      message(std::string("fork failed: ") + std::strerror(errno));
      return 5;
    }
    if (pid == 0) {
      setpgid(0, 0);
      dup2(pout[1], 1);
      dup2(perr[1], 2);
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      signal(SIGPIPE, SIG_DFL);
      setenv("RANK", std::to_string(r).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(o.nprocs).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(o.nprocs).c_str(), 1);
      setenv("MASTER_ADDR", o.master_addr.c_str(), 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      setenv("OMP_NUM_THREADS", "1", 0);
      setenv("OPENBLAS_NUM_THREADS", "1", 0);
      std::vector<char*> args;
      for (auto& a : argv_s) args.push_back(a.data());
      args.push_back(nullptr);
      execvp(args[0], args.data());
      const std::string m = "weft launch: cannot run " + argv_s[0] + ": " + std::strerror(errno) + "\n";
      write_all(2, m);
      _exit(127);
    }
    close(pout[1]);
    close(perr[1]);
    Child& c = kids[r];
    c.rank = r;
    c.pid = pid;
    c.running = true;
    c.streams[0] = {pout[0], 1, {}};
    c.streams[1] = {perr[0], 2, {}};
  }

  int running = o.nprocs;
  int first_failed = -1;
  int exit_code = 0;
  bool term_sent = false, kill_sent = false;
  auto term_time = std::chrono::steady_clock::now();
  auto stop_all = [&](int sig) {
    for (auto& c : kids)
      if (c.running) {
        kill(-c.pid, sig);
        kill(c.pid, sig);
        if (sig == SIGTERM) kill(-c.pid, SIGCONT), kill(c.pid, SIGCONT);  // a stopped rank must run to die
      }
  };

  while (running > 0 || [&] {
    for (auto& c : kids)
      for (auto& s : c.streams)
        if (s.fd >= 0) return true;
    return false;
  }()) {
    std::vector<pollfd> fds;
    std::vector<std::pair<int, int>> who;
    for (auto& c : kids)
      for (int k = 0; k < 2; ++k)
        if (c.streams[k].fd >= 0) {
          fds.push_back({c.streams[k].fd, POLLIN, 0});
          who.push_back({c.rank, k});
        }
    if (!fds.empty()) {
      const int n = poll(fds.data(), fds.size(), 100);
      if (n > 0) {
        for (size_t i = 0; i < fds.size(); ++i) {
          if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
          Child& c = kids[who[i].first];
          Stream& s = c.streams[who[i].second];
          char buf[65536];
          const ssize_t got = read(s.fd, buf, sizeof buf);
          const std::string prefix = o.prefix ? "[" + std::to_string(c.rank) + "] " : "";
          if (got > 0) {
            s.pending.append(buf, static_cast<size_t>(got));
            flush_lines(s, prefix, false);
          } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
            flush_lines(s, prefix, true);
            close(s.fd);
            s.fd = -1;
          }
        }
      }
    } else {
      usleep(20000);
    }

    if (g_forward_signal && !term_sent) {
      message(std::string("received ") + strsignal(g_forward_signal) + "; stopping all ranks");
      stop_all(SIGTERM);
      term_sent = true;
      term_time = std::chrono::steady_clock::now();
      if (exit_code == 0) exit_code = 128 + g_forward_signal;
    }

    for (auto& c : kids) {
      if (!c.running) continue;
      int st = 0;
      const pid_t w = waitpid(c.pid, &st, WNOHANG);
      if (w != c.pid) continue;
      c.running = false;
      c.status = st;
      --running;
      const bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
      if (!ok && first_failed < 0 && !term_sent) {
        first_failed = c.rank;
        exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 5;
        message("rank " + std::to_string(c.rank) + " " + describe_status(st) +
                (running > 0 ? "; stopping the other " + std::to_string(running) + " rank(s)" : ""));
        stop_all(SIGTERM);
        term_sent = true;
        term_time = std::chrono::steady_clock::now();
      }
    }
    if (term_sent && !kill_sent && running > 0 &&
        std::chrono::steady_clock::now() - term_time > std::chrono::duration<double>(o.grace_s)) {
      char b[96];
      std::snprintf(b, sizeof b, "ranks still running %g s after SIGTERM; sending SIGKILL", o.grace_s);
      message(b);
      stop_all(SIGKILL);
      kill_sent = true;
    }
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  return exit_code;
}

}  // namespace weft::runtime
