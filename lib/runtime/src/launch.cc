#include "weft/runtime/launch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
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

using Clock = std::chrono::steady_clock;

// The line that starts an error a weft command prints before it exits (bin/weft/cli_main.cc).
constexpr char kErrorStart[] = "weft: error: ";
// How long a rank's error is held back waiting for the rank to exit (then printed anyway).
constexpr double kErrorHoldS = 2.0;

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
  std::string error;       // a held error: its "weft: error: " line and the stderr lines after it
  Clock::time_point error_at;
};

void message(const std::string& m) { write_all(2, "weft launch: " + m + "\n"); }

// "rank 2" or "ranks 0, 2", in rank order.
std::string rank_list(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

// Where the ranks' lines go. Every line gets the "[rank] " prefix (unless --no-prefix), except:
// a stdout line that starts with '{' is passed through as it is, so that JSON lines stay JSON
// lines; and an error (a stderr line starting "weft: error: ", with the stderr lines after it) is
// held until its rank exits (at most kErrorHoldS), then printed once: the same error from another
// rank is not repeated, and the end of the job names the ranks that reported it too.
class Output {
 public:
  explicit Output(bool prefix) : prefix_(prefix) {}

  // Writes (or holds) the complete lines of s; with `final`, also what is left after the last
  // newline, as a line.
  void flush(Child& c, Stream& s, bool final) {
    size_t start = 0;
    for (;;) {
      const size_t nl = s.pending.find('\n', start);
      if (nl == std::string::npos) break;
      line(c, s.out, s.pending.substr(start, nl - start + 1));
      start = nl + 1;
    }
    s.pending.erase(0, start);
    if (final && !s.pending.empty()) {
      line(c, s.out, s.pending + "\n");
      s.pending.clear();
    }
  }

  // Prints c's held error, or notes that it repeats one already printed.
  void release(Child& c) {
    if (c.error.empty()) return;
    for (Printed& p : printed_)
      if (p.text == c.error) {
        p.also.push_back(c.rank);
        c.error.clear();
        return;
      }
    write_all(2, prefix_of(c) + c.error);
    printed_.push_back({c.error, c.rank, {}});
    c.error.clear();
  }

  // Releases every error held longer than kErrorHoldS.
  void release_old(std::vector<Child>& kids, Clock::time_point now) {
    for (Child& c : kids)
      if (!c.error.empty() && now - c.error_at > std::chrono::duration<double>(kErrorHoldS)) release(c);
  }

  // "rank 0 reported the same error as rank 1", once per error that others repeated.
  void name_repeats() const {
    for (const Printed& p : printed_)
      if (!p.also.empty()) message(rank_list(p.also) + " reported the same error as rank " + std::to_string(p.rank));
  }

 private:
  struct Printed {
    std::string text;
    int rank = 0;
    std::vector<int> also;  // ranks whose error was the same text
  };

  std::string prefix_of(const Child& c) const { return prefix_ ? "[" + std::to_string(c.rank) + "] " : ""; }

  void line(Child& c, int out, const std::string& l) {
    if (out == 2 && (!c.error.empty() || l.rfind(kErrorStart, 0) == 0)) {
      if (c.error.empty()) c.error_at = Clock::now();
      c.error += l;
      return;
    }
    write_all(out, (out == 1 && l[0] == '{' ? "" : prefix_of(c)) + l);
  }

  bool prefix_;
  std::vector<Printed> printed_;
};

// Reads what stream s holds now without waiting (the pipe's read end is non-blocking); closes it
// at end of file. Returns false once nothing more is there.
bool read_some(Child& c, Stream& s, Output& out) {
  char buf[65536];
  const ssize_t got = read(s.fd, buf, sizeof buf);
  if (got > 0) {
    s.pending.append(buf, static_cast<size_t>(got));
    out.flush(c, s, false);
    return true;
  }
  if (got < 0 && errno == EINTR) return true;
  if (got < 0 && errno == EAGAIN) return false;  // nothing more for now
  out.flush(c, s, true);                          // end of file (or a read error)
  close(s.fd);
  s.fd = -1;
  return false;
}

// Everything an exited rank wrote before it exited (its pipes hold it all).
void drain(Child& c, Output& out) {
  for (Stream& s : c.streams)
    while (s.fd >= 0 && read_some(c, s, out)) {
    }
}

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
    fcntl(pout[0], F_SETFL, fcntl(pout[0], F_GETFL) | O_NONBLOCK);
    fcntl(perr[0], F_SETFL, fcntl(perr[0], F_GETFL) | O_NONBLOCK);
    Child& c = kids[r];
    c.rank = r;
    c.pid = pid;
    c.running = true;
    c.streams[0] = {pout[0], 1, {}};
    c.streams[1] = {perr[0], 2, {}};
  }

  Output out(o.prefix);
  int running = o.nprocs;
  int first_failed = -1;
  int exit_code = 0;
  bool term_sent = false, kill_sent = false;
  auto term_time = Clock::now();
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
          read_some(c, c.streams[who[i].second], out);
        }
      }
    } else {
      usleep(20000);
    }

    if (g_forward_signal && !term_sent) {
      message(std::string("received ") + strsignal(g_forward_signal) + "; stopping all ranks");
      stop_all(SIGTERM);
      term_sent = true;
      term_time = Clock::now();
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
      // Its error first (the first rank to fail prints it; the others' copies are not repeated),
      // then what the launcher does about it.
      drain(c, out);
      out.release(c);
      const bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
      if (!ok && first_failed < 0 && !term_sent) {
        first_failed = c.rank;
        exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 5;
        message("rank " + std::to_string(c.rank) + " " + describe_status(st) +
                (running > 0 ? "; stopping the other " + std::to_string(running) + " rank(s)" : ""));
        stop_all(SIGTERM);
        term_sent = true;
        term_time = Clock::now();
      }
    }
    out.release_old(kids, Clock::now());
    if (term_sent && !kill_sent && running > 0 &&
        Clock::now() - term_time > std::chrono::duration<double>(o.grace_s)) {
      char b[96];
      std::snprintf(b, sizeof b, "ranks still running %g s after SIGTERM; sending SIGKILL", o.grace_s);
      message(b);
      stop_all(SIGKILL);
      kill_sent = true;
    }
  }
  for (Child& c : kids) out.release(c);  // what a rank's children wrote after it exited
  out.name_repeats();
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  return exit_code;
}

}  // namespace weft::runtime
