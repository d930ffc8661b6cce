// mpcomm launch (see launcher.h for what it guarantees).
//
// Shape: validate; start the store; build every rank's argv and environment; fork the ranks; then one
// poll() loop in the calling thread relays output, reaps ranks, reacts to the first failure and to
// SIGINT/SIGTERM, and escalates SIGTERM -> SIGKILL on a clock. Nothing here runs on another thread.
//
// Forking from a process that has threads (the store server has one): between fork() and exec the child
// only makes system calls, on data prepared before the fork (ExecPlan), so it cannot deadlock on a lock
// another thread held at the fork.
//
// With --backend mpi the launcher forks one child, mpirun, instead of the ranks (see mpirun_plan()); the
// same loop supervises it, reading its --tag-output streams through TagDemux, which turns them back into
// "[r] " lines and notices mpirun's reports of a failed rank.
#include "core/abort_watch.h"
#include "bootstrap/launcher.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bootstrap/env.h"
#include "core/log.h"
#include "mpcomm/error.h"
#include "mpcomm/store.h"

extern char** environ;

namespace mpcomm {

namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kKillAfter = std::chrono::seconds(2);       // SIGTERM, then SIGKILL this much later
constexpr int kPollMs = 50;                                // reaping and escalation granularity
constexpr auto kDrainAfterExit = std::chrono::seconds(1);  // pipes held open by escaped descendants
constexpr size_t kMaxLine = 64 * 1024;                     // longer lines are cut into pieces this long
constexpr size_t kReadChunk = 64 * 1024;

std::string errno_text(int e) { return std::string(std::strerror(e)) + " (errno " + std::to_string(e) + ")"; }

std::string fmt_seconds(double s) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

// ---- options -------------------------------------------------------------------------------------

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// The path execve() should run, found the way execvp() would find it.
std::string find_program(const std::string& prog) {
  if (prog.empty()) throw InvalidArgument("mpcomm: launch: the program name is empty");
  if (prog.find('/') != std::string::npos) {
    if (is_executable_file(prog)) return prog;
    throw InvalidArgument("mpcomm: launch: cannot run '" + prog +
                          "': " + (::access(prog.c_str(), F_OK) != 0 ? errno_text(errno) : "not an executable file"));
  }
  const char* env_path = std::getenv("PATH");
  std::string path = env_path != nullptr && *env_path != '\0' ? env_path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(start, end - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + prog;
    if (is_executable_file(candidate)) return candidate;
    start = end + 1;
  }
  throw InvalidArgument("mpcomm: launch: program '" + prog + "' not found on PATH (" + path + ")");
}

void validate(const LaunchOptions& o) {
  auto bad = [](const std::string& why) { throw InvalidArgument("mpcomm: launch: " + why); };
  if (o.nranks < 1) bad("-n must be at least 1 (got " + std::to_string(o.nranks) + ")");
  if (o.hosts < 1 || o.hosts > o.nranks)
    bad("--hosts must be between 1 and -n " + std::to_string(o.nranks) + " (got " + std::to_string(o.hosts) + ")");
  if (!(o.timeout_s > 0) || !std::isfinite(o.timeout_s))
    bad("--timeout must be a positive number of seconds (got " + fmt_seconds(o.timeout_s) + ")");
  if (!(o.grace_s >= 0) || !std::isfinite(o.grace_s))
    bad("the grace period must be >= 0 seconds (got " + fmt_seconds(o.grace_s) + ")");
  if (o.backend.empty()) bad("the backend name is empty");
#ifndef MPCOMM_HAVE_MPI
  if (o.backend == "mpi")
    bad("--backend mpi: this build of mpcomm has no mpi backend (Open MPI was not found when it was configured; "
        "install libopenmpi-dev and openmpi-bin, then reconfigure and rebuild)");
#endif
  if (o.bind_addr.empty()) bad("the bind address is empty");
  if (o.argv.empty()) bad("no program given (mpcomm launch -n N -- PROGRAM ARGS...)");
}

std::string random_hex(size_t nbytes) {
  std::vector<unsigned char> raw(nbytes);
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Internal("mpcomm: launch: cannot open /dev/urandom: " + errno_text(errno));
  size_t got = 0;
  while (got < nbytes) {
    ssize_t n = ::read(fd, raw.data() + got, nbytes - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = n < 0 ? errno : EIO;
      ::close(fd);
      throw Internal("mpcomm: launch: cannot read /dev/urandom: " + errno_text(e));
    }
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  static const char digits[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char b : raw) {
    hex += digits[b >> 4];
    hex += digits[b & 15];
  }
  return hex;
}

// MPCOMM_TIMEOUT as the ranks will parse it: an integer when it is one.
std::string timeout_text(double s) {
  char buf[64];
  if (s == std::floor(s) && s < 1e15)
    std::snprintf(buf, sizeof buf, "%.0f", s);
  else
    std::snprintf(buf, sizeof buf, "%.3f", s);
  return buf;
}

// ---- exit statuses -------------------------------------------------------------------------------

int status_of(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

// "exited with status 3", "exited with signal 9 (Killed)".
std::string describe(int wait_status) {
  if (WIFEXITED(wait_status)) return "exited with status " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    int sig = WTERMSIG(wait_status);
    const char* name = sigdescr_np(sig);
    return "exited with signal " + std::to_string(sig) + " (" + (name != nullptr ? name : "unknown signal") + ")";
  }
  return "ended with wait status " + std::to_string(wait_status);
}

// ---- output --------------------------------------------------------------------------------------

// Writes whole buffers to our stdout/stderr. A closed destination (EPIPE: `mpcomm launch ... | head`)
// drops what is written to it from then on; the job itself goes on.
class Output {
 public:
  void write(int fd, const std::string& s) {
    const char* p = s.data();
    size_t n = s.size();
    while (n > 0 && !broken_[fd]) {
      ssize_t w = ::write(fd, p, n);
      if (w > 0) {
        p += w;
        n -= static_cast<size_t>(w);
      } else if (w < 0 && errno == EINTR) {
        continue;
      } else if (w < 0 && errno == EAGAIN) {
        pollfd pfd{fd, POLLOUT, 0};
        ::poll(&pfd, 1, 100);
      } else {
        broken_[fd] = true;
      }
    }
  }

 private:
  bool broken_[3] = {false, false, false};
};

class TagDemux;

// One of a rank's output pipes, cut into lines.
struct Stream {
  int fd = -1;  // read end (non-blocking); -1 once closed
  int dest = STDOUT_FILENO;
  std::string pending;  // bytes after the last newline
  TagDemux* demux = nullptr;  // mpirun's pipes: text is demultiplexed by rank instead of prefixed

  // Takes bytes read from fd.
  void take(const char* p, size_t n, const std::string& prefix, Output& out);

  // Emits every complete line with `prefix`, in one write; at EOF also the unterminated rest. A line
  // longer than kMaxLine goes out in kMaxLine pieces, each a line of its own, however it arrived.
  void relay(const std::string& prefix, bool eof, Output& out) {
    std::string text;
    size_t start = 0;
    for (;;) {
      size_t nl = pending.find('\n', start);
      size_t len = (nl == std::string::npos ? pending.size() : nl) - start;
      if (len > kMaxLine) {
        (text += prefix).append(pending, start, kMaxLine) += '\n';
        start += kMaxLine;
      } else if (nl != std::string::npos) {
        (text += prefix).append(pending, start, len + 1);
        start = nl + 1;
      } else {
        break;
      }
    }
    pending.erase(0, start);
    if (eof && !pending.empty()) {
      text += prefix + pending + "\n";
      pending.clear();
    }
    if (!text.empty()) out.write(dest, text);
  }

  void close(const std::string& prefix, Output& out);
};

// ---- mpirun's output -----------------------------------------------------------------------------

// A rank failure as mpirun reported it.
struct RankFailure {
  int rank = -1;
  int status = 1;   // exit code, or 128 + signal
  std::string how;  // "exited with signal 9 (Killed)"
};

// Turns one of mpirun's --tag-output streams back into whole lines per rank. mpirun tags each chunk of a
// rank's output that it forwards, and each line within a chunk, with "[JOB,RANK]<stdout>:" (<stderr>,
// <stddiag>); chunks of different ranks interleave mid-line ("[1,0]<stdout>:part1 [1,2]<stdout>:x\n
// [1,0]<stdout>:part2\n"). So the stream is a sequence of segments, each a tag and its text up to the next
// newline or the next tag; each rank's text is collected apart and leaves as whole "[r] " lines, exactly
// as a forked rank's would. Untagged text is mpirun's own (warnings, failure reports): it passes through
// unchanged and is scanned for the rank failures mpirun reports.
class TagDemux {
 public:
  TagDemux(int dest, bool prefix) : dest_(dest), prefix_(prefix) { untagged_.dest = dest; }

  void feed(const char* p, size_t n, Output& out) {
    buf_.append(p, n);
    parse(/*eof=*/false, out);
  }
  // At EOF: everything still held leaves, unterminated lines included.
  void finish(Output& out) {
    parse(/*eof=*/true, out);
    for (auto& [rank, s] : ranks_) s.relay(prefix_of(rank), /*eof=*/true, out);
    untagged_.relay("", /*eof=*/true, out);
    if (!untagged_line_.empty()) scan_mpirun_line(untagged_line_);
    untagged_line_.clear();
  }
  std::vector<RankFailure> take_failures() { return std::exchange(failures_, {}); }

 private:
  static constexpr int kSegmentStart = -1;  // cur_: the next bytes are a tag or untagged text
  static constexpr int kUntagged = -2;      // cur_: mpirun's own text, up to the newline
  enum Match { kNo, kPartial, kFull };

  // Whether a tag starts at s[i]; kPartial when s ends inside something that may still become one.
  static Match match_tag(const std::string& s, size_t i, int* rank, size_t* len) {
    size_t j = i;
    auto expect = [&](char c) -> Match {
      if (j >= s.size()) return kPartial;
      if (s[j] != c) return kNo;
      ++j;
      return kFull;
    };
    auto number = [&](long* v) -> Match {
      const size_t start = j;
      *v = 0;
      while (j < s.size() && s[j] >= '0' && s[j] <= '9') {
        if (j - start >= 9) return kNo;
        *v = *v * 10 + (s[j++] - '0');
      }
      if (j >= s.size()) return kPartial;
      return j == start ? kNo : kFull;
    };
    long job = 0, r = 0;
    Match m = kFull;
    if ((m = expect('[')) != kFull || (m = number(&job)) != kFull || (m = expect(',')) != kFull ||
        (m = number(&r)) != kFull || (m = expect(']')) != kFull || (m = expect('<')) != kFull)
      return m;
    for (const char* name : {"stdout>:", "stderr>:", "stddiag>:"}) {
      const size_t n = std::strlen(name), have = std::min(n, s.size() - j);
      if (s.compare(j, have, name, have) != 0) continue;
      if (have < n) return kPartial;
      *rank = static_cast<int>(r);
      *len = j + n - i;
      return kFull;
    }
    return kNo;
  }

  std::string prefix_of(int rank) const { return prefix_ ? "[" + std::to_string(rank) + "] " : ""; }

  Stream& stream_of(int rank) {
    Stream& s = ranks_[rank];
    s.dest = dest_;
    return s;
  }

  void parse(bool eof, Output& out) {
    size_t i = 0;
    while (i < buf_.size()) {
      if (cur_ == kSegmentStart) {
        int rank = 0;
        size_t len = 0;
        Match m = match_tag(buf_, i, &rank, &len);
        if (m == kPartial && !eof) break;
        if (m == kFull) {
          cur_ = rank;
          i += len;
          continue;
        }
        cur_ = kUntagged;
      }
      // The segment runs to the newline, or to the next tag (a chunk that ended mid-line).
      size_t j = i;
      bool newline = false, tag = false, partial = false;
      for (; j < buf_.size(); ++j) {
        if (buf_[j] == '\n') {
          newline = true;
          break;
        }
        if (buf_[j] == '[' && cur_ != kUntagged) {
          int rank = 0;
          size_t len = 0;
          Match m = match_tag(buf_, j, &rank, &len);
          if (m == kFull) tag = true;
          if (m == kPartial && !eof) partial = true;
          if (tag || partial) break;
        }
      }
      const size_t end = newline ? j + 1 : j;
      if (cur_ == kUntagged) {
        untagged_line_.append(buf_, i, end - i);
        if (newline) {
          scan_mpirun_line(untagged_line_);
          untagged_line_.clear();
        }
        untagged_.pending.append(buf_, i, end - i);
        untagged_.relay("", /*eof=*/false, out);
      } else {
        Stream& s = stream_of(cur_);
        s.pending.append(buf_, i, end - i);
        s.relay(prefix_of(cur_), /*eof=*/false, out);
      }
      i = end;
      if (newline || tag) cur_ = kSegmentStart;
      if (partial) break;
    }
    buf_.erase(0, i);
  }

  // mpirun's reports, e.g.
  //   "mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed)."
  //   "  Process name: [[19502,1],1]" followed by "  Exit code:    3"
  void scan_mpirun_line(const std::string& line) {
    const char* p = line.c_str();
    while (*p == ' ' || *p == '\t') ++p;
    int rank = -1, value = 0;
    if (std::sscanf(p, "mpirun noticed that process rank %d with PID %*d on node %*s exited on signal %d", &rank,
                    &value) == 2) {
      const char* name = sigdescr_np(value);
      failures_.push_back({rank, 128 + value,
                           "exited with signal " + std::to_string(value) + " (" +
                               (name != nullptr ? name : "unknown signal") + ")"});
    } else if (std::sscanf(p, "Process name: [[%*d,%*d],%d]", &rank) == 1) {
      process_name_rank_ = rank;
    } else if (process_name_rank_ >= 0 && std::sscanf(p, "Exit code: %d", &value) == 1) {
      failures_.push_back({process_name_rank_, value, "exited with status " + std::to_string(value)});
      process_name_rank_ = -1;
    }
  }

  int dest_;
  bool prefix_;
  std::string buf_;  // bytes not parsed yet (they may end inside a tag)
  int cur_ = kSegmentStart;
  std::map<int, Stream> ranks_;  // each rank's partial line
  Stream untagged_;
  std::string untagged_line_;
  int process_name_rank_ = -1;
  std::vector<RankFailure> failures_;
};

void Stream::take(const char* p, size_t n, const std::string& prefix, Output& out) {
  if (demux != nullptr) {
    demux->feed(p, n, out);
    return;
  }
  pending.append(p, n);
  relay(prefix, /*eof=*/false, out);
}

void Stream::close(const std::string& prefix, Output& out) {
  if (fd < 0) return;
  if (demux != nullptr)
    demux->finish(out);
  else
    relay(prefix, /*eof=*/true, out);
  ::close(fd);
  fd = -1;
}

// ---- signals -------------------------------------------------------------------------------------

// Write end of the self-pipe of the launch() running now, -1 when none runs.
std::atomic<int> g_signal_pipe{-1};

extern "C" void on_launcher_signal(int sig) {
  int saved = errno;
  int fd = g_signal_pipe.load();
  if (fd >= 0) {
    unsigned char b = static_cast<unsigned char>(sig);
    [[maybe_unused]] ssize_t n = ::write(fd, &b, 1);
  }
  errno = saved;
}

// While alive: SIGINT/SIGTERM become bytes on a pipe that the poll loop reads; SIGPIPE is ignored (a
// closed stdout must not kill the launcher and orphan the job); SIGCHLD is SIG_DFL so that nothing
// auto-reaps our ranks. The previous dispositions come back at destruction.
class SignalCatcher {
 public:
  SignalCatcher() {
    if (::pipe2(pipe_, O_CLOEXEC | O_NONBLOCK) != 0)
      throw Internal("mpcomm: launch: pipe2() failed: " + errno_text(errno));
    int expected = -1;
    if (!g_signal_pipe.compare_exchange_strong(expected, pipe_[1])) {
      ::close(pipe_[0]);
      ::close(pipe_[1]);
      throw Internal("mpcomm: launch: another launch() is already running in this process");
    }
    struct sigaction sa {};
    sa.sa_handler = on_launcher_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    ::sigaction(SIGINT, &sa, &old_int_);
    ::sigaction(SIGTERM, &sa, &old_term_);
    struct sigaction ign {};
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    ::sigaction(SIGPIPE, &ign, &old_pipe_);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    ::sigaction(SIGCHLD, &dfl, &old_chld_);
  }
  ~SignalCatcher() {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
    ::sigaction(SIGPIPE, &old_pipe_, nullptr);
    ::sigaction(SIGCHLD, &old_chld_, nullptr);
    g_signal_pipe.store(-1);
    ::close(pipe_[0]);
    ::close(pipe_[1]);
  }
  SignalCatcher(const SignalCatcher&) = delete;
  SignalCatcher& operator=(const SignalCatcher&) = delete;

  int fd() const { return pipe_[0]; }
  std::vector<int> drain() {
    std::vector<int> sigs;
    unsigned char buf[64];
    ssize_t n;
    while ((n = ::read(pipe_[0], buf, sizeof buf)) > 0)
      for (ssize_t i = 0; i < n; ++i) sigs.push_back(buf[i]);
    return sigs;
  }

 private:
  int pipe_[2] = {-1, -1};
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
  struct sigaction old_pipe_ {};
  struct sigaction old_chld_ {};
};

// ---- ranks ---------------------------------------------------------------------------------------

// Everything a child needs between fork() and exec, built beforehand.
struct ExecPlan {
  std::string path;              // resolved program
  std::vector<char*> argv;       // PROGRAM ARGS... (argv[0] as the user wrote it)
  std::vector<char*> sh_argv;    // /bin/sh PATH ARGS..., for scripts without #! (what execvp does)
  std::vector<std::string> env;  // storage for envp
  std::vector<char*> envp;
  std::string exec_failed;  // message prefix written when exec fails
  int death_signal = SIGKILL;  // sent to the child when the launcher dies (mpirun: SIGTERM, to end its ranks)
  int cpu = -1;                // >= 0: the child runs on this CPU only (LaunchOptions::bind)
};

struct Rank {
  int rank = 0;
  std::string name;  // "rank 3", or "mpirun"
  pid_t pid = -1;  // also its process group id
  bool running = false;
  int status = 0;   // exit code, or 128 + signal
  std::string how;  // "exited with status 3", once reaped
  std::string prefix;
  Stream out, err;
};

// The ranks. Its destructor kills and reaps whatever still runs, so no path out of launch() — an
// exception included — leaves a child behind.
struct Job {
  std::vector<Rank> ranks;

  ~Job() {
    signal_all(SIGKILL);
    for (Rank& r : ranks) {
      if (r.running) {
        int ws;
        while (::waitpid(r.pid, &ws, 0) < 0 && errno == EINTR) {
        }
        r.running = false;
      }
      for (Stream* s : {&r.out, &r.err})
        if (s->fd >= 0) ::close(s->fd);
    }
  }

  // Signals every running rank's process group. A rank that is still running has not been reaped, so
  // its pid (= its group id) cannot have been reused.
  void signal_all(int sig) {
    for (Rank& r : ranks)
      if (r.running && ::killpg(r.pid, sig) != 0) ::kill(r.pid, sig);
  }
  int running() const {
    int n = 0;
    for (const Rank& r : ranks) n += r.running ? 1 : 0;
    return n;
  }
  bool streams_open() const {
    for (const Rank& r : ranks)
      if (r.out.fd >= 0 || r.err.fd >= 0) return true;
    return false;
  }
};

// Runs in the child: system calls only (see the top of this file).
[[noreturn]] void exec_child(const ExecPlan& plan, pid_t launcher, int out_fd, int err_fd, int stdin_fd) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, plan.death_signal);
  if (plan.cpu >= 0) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(plan.cpu, &one);
    ::sched_setaffinity(0, sizeof one, &one);  // best effort: a rank runs unbound rather than not at all
  }
  if (::getppid() != launcher) ::_exit(126);  // the launcher died before PDEATHSIG was armed
  if (stdin_fd >= 0) ::dup2(stdin_fd, STDIN_FILENO);
  ::dup2(out_fd, STDOUT_FILENO);
  ::dup2(err_fd, STDERR_FILENO);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGPIPE, SIGCHLD}) ::sigaction(sig, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::close_range(3, ~0U, 0);  // the store's sockets, other ranks' pipes, anything the host program had open
  ::execve(plan.path.c_str(), plan.argv.data(), plan.envp.data());
  if (errno == ENOEXEC) ::execve("/bin/sh", plan.sh_argv.data(), plan.envp.data());
  int e = errno;
  const char* why = strerrordesc_np(e);
  [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, plan.exec_failed.data(), plan.exec_failed.size());
  n = ::write(STDERR_FILENO, why, std::strlen(why));
  n = ::write(STDERR_FILENO, "\n", 1);
  ::_exit(127);
}

// Starts rank r.rank (or mpirun); fills pid and the pipes. stdin_fd -1 keeps the launcher's stdin.
void start_rank(Rank& r, const ExecPlan& plan, int stdin_fd) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) throw Internal("mpcomm: launch: pipe2() failed: " + errno_text(errno));
  if (::pipe2(err, O_CLOEXEC) != 0) {
    int e = errno;
    ::close(out[0]);
    ::close(out[1]);
    throw Internal("mpcomm: launch: pipe2() failed: " + errno_text(e));
  }
  // SIGINT/SIGTERM stay blocked across fork() until the child has dropped our handlers.
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  ::pthread_sigmask(SIG_BLOCK, &block, &old);
  pid_t launcher = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) exec_child(plan, launcher, out[1], err[1], stdin_fd);
  int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ::close(out[1]);
  ::close(err[1]);
  if (pid < 0) {
    ::close(out[0]);
    ::close(err[0]);
    throw Internal("mpcomm: launch: fork() for rank " + std::to_string(r.rank) + " failed: " + errno_text(fork_errno));
  }
  ::setpgid(pid, pid);  // also here, so that signal_all() reaches the group even before the child ran
  r.pid = pid;
  r.running = true;
  r.out.fd = out[0];
  r.out.dest = STDOUT_FILENO;
  r.err.fd = err[0];
  r.err.dest = STDERR_FILENO;
  for (int fd : {out[0], err[0]}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

// If the rank has ended: kills what is left of its process group, reaps it and returns true.
bool reap(Rank& r) {
  siginfo_t si{};
  if (::waitid(P_PID, static_cast<id_t>(r.pid), &si, WEXITED | WNOHANG | WNOWAIT) != 0) {
    if (errno == EINTR) return false;
    // ECHILD: someone else in this process reaped it; its status is lost.
    MPCOMM_LOG(warn, "launch: rank %d (pid %d) was reaped outside the launcher: %s", r.rank, static_cast<int>(r.pid),
               errno_text(errno).c_str());
    r.running = false;
    r.status = 1;
    r.how = "ended, its exit status lost (reaped outside the launcher)";
    return true;
  }
  if (si.si_pid == 0) return false;
  // The zombie still holds its pid, so the group id is still ours: anything the rank left behind in its
  // group (background jobs of a shell script) dies with it.
  ::killpg(r.pid, SIGKILL);
  int ws = 0;
  while (::waitpid(r.pid, &ws, 0) < 0 && errno == EINTR) {
  }
  r.running = false;
  r.status = status_of(ws);
  r.how = describe(ws);
  MPCOMM_LOG(info, "launch: %s (pid %d) %s", r.name.c_str(), static_cast<int>(r.pid), r.how.c_str());
  return true;
}

// Entries of /dev/shm that ranks of this job may have left behind when they were killed: every name
// "mpcomm.<job id>." starts (the launcher's lock among them).
void remove_shm_segments(const std::string& job_id) {
  const std::string prefix = "mpcomm." + job_id + ".";
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return;
  while (dirent* e = ::readdir(dir)) {
    if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) != 0) continue;
    bool removed = ::unlinkat(::dirfd(dir), e->d_name, 0) == 0;
    if (!removed && (errno == EISDIR || errno == EPERM)) {  // Open MPI's backing folder (mpirun_plan)
      int fd = ::openat(::dirfd(dir), e->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (DIR* sub = fd >= 0 ? ::fdopendir(fd) : nullptr) {
        while (dirent* f = ::readdir(sub))
          if (std::strcmp(f->d_name, ".") != 0 && std::strcmp(f->d_name, "..") != 0) ::unlinkat(::dirfd(sub), f->d_name, 0);
        ::closedir(sub);
      } else if (fd >= 0) {
        ::close(fd);
      }
      removed = ::unlinkat(::dirfd(dir), e->d_name, AT_REMOVEDIR) == 0;
    }
    if (removed && std::strstr(e->d_name, ".launcher") == nullptr)
      MPCOMM_LOG(info, "launch: removed /dev/shm/%s left behind by job %s", e->d_name, job_id.c_str());
  }
  ::closedir(dir);
}

// The start time of process `pid` (field 22 of /proc/<pid>/stat, in clock ticks since boot) and its
// state letter; false when there is no such process. A pid and its start time name one process.
bool process_start(pid_t pid, unsigned long long* start, char* state) {
  std::FILE* f = std::fopen(("/proc/" + std::to_string(static_cast<int>(pid)) + "/stat").c_str(), "r");
  if (f == nullptr) return false;
  char line[1024] = {};
  const bool got = std::fgets(line, sizeof line, f) != nullptr;
  std::fclose(f);
  const char* after = got ? std::strrchr(line, ')') : nullptr;  // the command may hold spaces and ')'
  if (after == nullptr) return false;
  std::istringstream fields(after + 1);  // field 3 (state) on
  std::string skipped;
  fields >> *state;
  for (int field = 4; field < 22; ++field) fields >> skipped;
  return static_cast<bool>(fields >> *start);
}

// The launcher's lock, /dev/shm/mpcomm.<job>.launcher, held (flock) for as long as the launcher lives:
// the kernel releases it however the launcher ends, SIGKILL included, when there is no time to clean
// up. Made under another name, locked, then renamed, so that no sweep (sweep_dead_jobs) ever sees it
// unlocked while its launcher lives. Destroyed last in launch(), after every rank is gone: removes the
// job's /dev/shm entries, the lock itself among them (unlinked before it is released, so a sweep that
// opened it just before can tell that the job ended in order).
class JobLock {
 public:
  explicit JobLock(std::string job_id) : job_id_(std::move(job_id)) {
    const std::string path = "/dev/shm/mpcomm." + job_id_ + ".launcher", made = path + ".new";
    fd_ = ::open(made.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd_ < 0) {
      if (errno != ENOENT)  // no /dev/shm: then nothing of this job can be left there either
        MPCOMM_LOG(warn, "launch: cannot make %s (%s): a later launch will not know if this job was killed",
                   made.c_str(), std::strerror(errno));
      return;
    }
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0 || ::rename(made.c_str(), path.c_str()) != 0) {
      MPCOMM_LOG(warn, "launch: cannot lock %s (%s): a later launch will not know if this job was killed",
                 path.c_str(), std::strerror(errno));
      ::unlink(made.c_str());
    }
  }
  ~JobLock() {
    remove_shm_segments(job_id_);
    if (fd_ >= 0) ::close(fd_);
  }
  // Written into the lock, with its start time: a later sweep removes this mpirun's session folder.
  void note_mpirun(pid_t pid) {
    unsigned long long start = 0;
    char state = 0;
    if (fd_ < 0 || !process_start(pid, &start, &state)) return;
    const std::string text = "mpirun " + std::to_string(static_cast<int>(pid)) + " " + std::to_string(start) + "\n";
    const ssize_t n = ::pwrite(fd_, text.data(), text.size(), 0);
    if (n != static_cast<ssize_t>(text.size()))
      MPCOMM_LOG(warn, "launch: cannot note mpirun's pid in the job's lock: %s",
                 n < 0 ? std::strerror(errno) : "short write");
  }
  JobLock(const JobLock&) = delete;
  JobLock& operator=(const JobLock&) = delete;

 private:
  std::string job_id_;
  int fd_ = -1;
};

void sweep_job_processes(const std::string& job_id);
void remove_mpirun_session_dir(pid_t mpirun_pid);

// "mpcomm.<job id>.launcher" (suffix ".launcher") or its ".launcher.new": the job id, 12 hex digits as
// launch() makes them, or "" for any other name.
std::string job_of_lock(const std::string& name, const std::string& suffix) {
  const std::string prefix = "mpcomm.";
  if (name.size() != prefix.size() + 12 + suffix.size() || name.rfind(prefix, 0) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return "";
  const std::string job = name.substr(prefix.size(), 12);
  return job.find_first_not_of("0123456789abcdef") == std::string::npos ? job : "";
}

// Ends what every earlier job whose launcher is gone (its lock is free) left behind: its processes, its
// /dev/shm entries and its mpirun's session folder. A launcher killed by SIGKILL leaves Open MPI's
// backing folder, segments of ranks killed with it, and sometimes mpirun's ranks: the kernel sends
// mpirun the launcher's death signal (SIGTERM) again each time a dying launcher thread hands it on to
// another, and a second SIGTERM makes mpirun exit at once, without ending its ranks. Jobs without a lock
// (ranks started by another launcher) and other users' are left alone.
void sweep_dead_jobs() {
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return;
  struct Dead {
    std::string job;
    int mpirun = 0;  // 0: none noted
    unsigned long long mpirun_start = 0;
  };
  std::vector<Dead> dead;
  const time_t now = ::time(nullptr);
  while (dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    const std::string job = job_of_lock(name, ".launcher"), made = job_of_lock(name, ".launcher.new");
    if (job.empty() && made.empty()) continue;
    // O_NONBLOCK: a FIFO of that name must not stop the launch.
    const int fd = ::openat(::dirfd(dir), e->d_name, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;  // gone meanwhile
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid() && ::flock(fd, LOCK_EX | LOCK_NB) == 0 &&
        ::fstat(fd, &st) == 0 && st.st_nlink > 0) {  // linked: not a lock its launcher removed on its way out
      if (!made.empty()) {
        // A launcher killed between making its lock and renaming it; or one about to lock it now.
        if (now - st.st_mtime > 60) ::unlinkat(::dirfd(dir), e->d_name, 0);
      } else {
        Dead d{job};
        char text[96] = {};
        if (::pread(fd, text, sizeof text - 1, 0) <= 0 || std::sscanf(text, "mpirun %d %llu", &d.mpirun, &d.mpirun_start) != 2)
          d.mpirun = 0;
        dead.push_back(d);
      }
    }
    ::close(fd);
  }
  ::closedir(dir);
  for (const Dead& d : dead) {
    MPCOMM_LOG(info, "launch: job %s ended without cleaning up (its launcher was killed)", d.job.c_str());
    sweep_job_processes(d.job);  // mpirun too, if it still ran
    // Its mpirun's session folder, once that mpirun is gone (or a zombie). A live process with its pid
    // is another process, perhaps another mpirun with a folder of that name: then the folder stays.
    unsigned long long start = 0;
    char state = 0;
    if (d.mpirun > 0 && (!process_start(d.mpirun, &start, &state) || (start == d.mpirun_start && state == 'Z')))
      remove_mpirun_session_dir(d.mpirun);
    remove_shm_segments(d.job);
  }
}

// ---- mpirun --------------------------------------------------------------------------------------

// The CPUs this process may run on, in order.
std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof set, &set) == 0)
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

// Cores this process may run on (distinct (package, core) pairs of the CPUs in its affinity mask): what
// mpirun counts as slots by default, so more ranks than this need --oversubscribe.
int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  std::set<std::pair<long, long>> cores;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    auto read_id = [&](const char* what) {
      std::string path = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/" + what;
      long v = -1;
      if (FILE* f = std::fopen(path.c_str(), "r")) {
        if (std::fscanf(f, "%ld", &v) != 1) v = -1;
        std::fclose(f);
      }
      return v;
    };
    long package = read_id("physical_package_id"), core = read_id("core_id");
    cores.emplace(core < 0 ? -1 - cpu : package, core < 0 ? cpu : core);  // unknown topology: one core per CPU
  }
  return std::max(1, static_cast<int>(cores.size()));
}

// Every process of this job that is still alive: those with MPCOMM_JOB_ID=<job id> in their environment
// (mpirun passes it on to every rank). SIGKILLs them and returns how many there were. This is how no rank
// outlives launch() even when mpirun itself had to be killed, since ranks are mpirun's children, in
// process groups of their own.
int kill_job_processes(const std::string& job_id) {
  const std::string needle = "MPCOMM_JOB_ID=" + job_id;
  const pid_t self = ::getpid();
  int killed = 0;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return 0;
  std::vector<char> env(1 << 20);
  while (dirent* e = ::readdir(proc)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const pid_t pid = static_cast<pid_t>(std::atol(e->d_name));
    if (pid == self) continue;
    int fd = ::open(("/proc/" + std::string(e->d_name) + "/environ").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    size_t got = 0;
    ssize_t n;
    while (got < env.size() && (n = ::read(fd, env.data() + got, env.size() - got)) > 0) got += static_cast<size_t>(n);
    ::close(fd);
    for (size_t start = 0; start < got;) {
      const char* var = env.data() + start;
      size_t len = strnlen(var, got - start);
      if (len == needle.size() && std::memcmp(var, needle.data(), len) == 0) {
        if (::kill(pid, SIGKILL) == 0) {
          ++killed;
          MPCOMM_LOG(info, "launch: killed pid %d of job %s, left behind by mpirun", static_cast<int>(pid),
                     job_id.c_str());
        }
        break;
      }
      start += len + 1;
    }
  }
  ::closedir(proc);
  return killed;
}

// Kills what is left of the job until nothing is (a dead process keeps its environ until it is reaped,
// by mpirun or init, so this may take a few rounds), for at most 2 s.
void sweep_job_processes(const std::string& job_id) {
  const auto until = Clock::now() + kKillAfter;
  while (kill_job_processes(job_id) > 0 && Clock::now() < until) ::usleep(20 * 1000);
}

// The launcher's environment without `names`.
std::vector<std::string> environment_without(const std::vector<std::string>& names) {
  std::vector<std::string> kept;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string kv = *e;
    std::string name = kv.substr(0, kv.find('='));
    bool drop = false;
    for (const auto& n : names) drop = drop || name == n;
    if (!drop) kept.push_back(std::move(kv));
  }
  return kept;
}

// Points plan.argv / sh_argv / envp at the plan's own strings and at `args`.
void finish_plan(ExecPlan& p, const std::vector<std::string>& args) {
  for (auto& kv : p.env) p.envp.push_back(kv.data());
  p.envp.push_back(nullptr);
  for (const auto& a : args) p.argv.push_back(const_cast<char*>(a.c_str()));
  p.argv.push_back(nullptr);
  p.sh_argv.push_back(const_cast<char*>("/bin/sh"));
  p.sh_argv.push_back(p.path.data());
  for (size_t i = 1; i < args.size(); ++i) p.sh_argv.push_back(const_cast<char*>(args[i].c_str()));
  p.sh_argv.push_back(nullptr);
}

// What the job's ranks are told, by either path.
struct JobEnv {
  std::string addr, port, store_url, token, job_id, timeout;
};

// `mpirun -n N ... PROGRAM ARGS...` with the job's environment. mpirun gives every rank the same
// environment, so the ranks learn their rank from OMPI_COMM_WORLD_* (env.cc), that the launcher serves the
// store from MPCOMM_STORE_SERVED=1, and their emulated host from MPCOMM_HOSTS (host_id_from_env()).
//
// --mca pml ob1 --mca btl vader,self (one host) or tcp,self (emulated hosts): on one host MPI uses its
// shared-memory transport, as any MPI user gets; across emulated hosts TCP between every pair of ranks,
// what MPI uses between real hosts (it cannot tell emulated hosts apart, so shared memory is excluded
// there). ob1 so that UCX cannot bring its own transports. btl_tcp_if_include lo: every rank runs on this
// machine, and loopback also exists in containers without a network. --bind-to core (mpirun's own
// default for small jobs); when ranks outnumber cores, --oversubscribe and core:overload-allowed, which
// deals the ranks round-robin over the cores (rank r on core r mod cores), as our own launcher does.
ExecPlan mpirun_plan(const LaunchOptions& o, const std::string& mpirun, const std::string& program, const JobEnv& je,
                     std::vector<std::string>& args) {
  ExecPlan p;
  p.path = mpirun;
  p.death_signal = SIGTERM;  // mpirun, when told, ends its ranks; SIGKILL would orphan them
  std::vector<std::string> dropped = {"RANK",          "WORLD_SIZE",     "LOCAL_RANK",     "LOCAL_WORLD_SIZE",
                                      "MASTER_ADDR",   "MASTER_PORT",    "MPCOMM_STORE",   "MPCOMM_TOKEN",
                                      "MPCOMM_JOB_ID", "MPCOMM_TIMEOUT", "MPCOMM_BACKEND", "MPCOMM_STORE_SERVED",
                                      "MPCOMM_HOSTS"};
  if (o.hosts > 1) dropped.push_back("MPCOMM_HOST_ID");  // each rank derives its own from MPCOMM_HOSTS
  p.env = environment_without(dropped);
  auto put = [&](const char* k, const std::string& v) { p.env.push_back(std::string(k) + "=" + v); };
  put("MASTER_ADDR", je.addr);
  put("MASTER_PORT", je.port);
  put("MPCOMM_STORE", je.store_url);
  put("MPCOMM_STORE_SERVED", "1");
  put("MPCOMM_TOKEN", je.token);
  put("MPCOMM_JOB_ID", je.job_id);
  put("MPCOMM_TIMEOUT", je.timeout);
  put("MPCOMM_BACKEND", o.backend);
  if (o.hosts > 1) put("MPCOMM_HOSTS", std::to_string(o.hosts));

  args = {"mpirun", "-n", std::to_string(o.nranks)};
  if (::geteuid() == 0) args.push_back("--allow-run-as-root");
  if (o.nranks > usable_cores()) args.push_back("--oversubscribe");
  const bool overload = o.nranks > usable_cores();
  const char* btl = o.hosts > 1 ? "tcp,self" : "vader,self";
  // vader's segments go to a folder of this job that the launcher removes at the end, also when ranks
  // were killed (Open MPI leaves /dev/shm/vader_segment.* behind then).
  if (o.hosts == 1) {
    const std::string backing = "/dev/shm/mpcomm." + je.job_id + ".vader";
    if (::mkdir(backing.c_str(), 0700) == 0) {
      args.insert(args.end(), {"--mca", "btl_vader_backing_directory", backing});
    }
  }
  for (const char* a : {"--bind-to", !o.bind ? "none" : overload ? "core:overload-allowed" : "core", "--mca", "pml", "ob1", "--mca", "btl", btl, "--mca",
                        "btl_tcp_if_include", "lo", "--tag-output"})
    args.emplace_back(a);
  // -x NAME (not NAME=value): values, the token among them, stay out of mpirun's command line. Locally the
  // ranks inherit mpirun's environment anyway; -x is what carries it to other nodes.
  for (const auto& kv : p.env) {
    std::string name = kv.substr(0, kv.find('='));
    if (name.rfind("MPCOMM_", 0) == 0 || name == "MASTER_ADDR" || name == "MASTER_PORT") {
      args.emplace_back("-x");
      args.push_back(name);
    }
  }
  args.push_back(program);
  args.insert(args.end(), o.argv.begin() + 1, o.argv.end());
  finish_plan(p, args);
  p.exec_failed = "mpcomm launch: cannot execute '" + mpirun + "': ";
  return p;
}

// Open MPI's session directory of one mpirun, <TMPDIR>/ompi.<node>.<uid>/pid.<pid>, holds the PMIx
// shared-memory files of the job (megabytes). mpirun removes it when it ends; when it was killed it stays,
// so the launcher removes it once mpirun is gone.
void remove_mpirun_session_dir(pid_t mpirun_pid) {
  const char* tmp = std::getenv("TMPDIR");
  const std::string base = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) return;
  std::string node = host;
  for (const std::string& name : {node, node.substr(0, node.find('.'))}) {  // Open MPI drops the domain
    const std::string dir = base + "/ompi." + name + "." + std::to_string(::geteuid()) + "/pid." +
                            std::to_string(static_cast<int>(mpirun_pid));
    std::error_code ec;
    if (std::filesystem::remove_all(dir, ec) > 0)
      MPCOMM_LOG(info, "launch: removed %s, left behind by mpirun", dir.c_str());
  }
}

// Removes any process of the job still alive when it goes out of scope (after the Job's destructor).
struct JobSweeper {
  std::string job_id;  // empty: nothing to do
  ~JobSweeper() {
    if (!job_id.empty()) sweep_job_processes(job_id);
  }
};

}  // namespace

int bind_slot(int rank, int nranks, int hosts, int ncpus) {
  if (nranks <= ncpus) return rank;
  const int h = emulated_host_of_rank(rank, nranks, hosts);
  const int first = static_cast<int>(static_cast<long>(h) * nranks / hosts);
  return (rank - first + h) % ncpus;
}

int launch(const LaunchOptions& o) {
  validate(o);
  const std::string program = find_program(o.argv[0]);
  const int n = o.nranks, hosts = o.hosts;
  // --backend mpi: the ranks are started by mpirun, the only child (see mpirun_plan()).
  const bool via_mpirun = o.backend == "mpi";
  std::string mpirun;
  if (via_mpirun) {
    try {
      mpirun = find_program("mpirun");
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(std::string("mpcomm: launch: --backend mpi starts the ranks with mpirun, but ") +
                            (e.what() + std::strlen("mpcomm: launch: ")) + " (install openmpi-bin)");
    }
  }

  const char* env_token = std::getenv("MPCOMM_TOKEN");
  const std::string token = env_token != nullptr && *env_token != '\0' ? env_token : random_hex(16);
  const std::string job_id = random_hex(6);
  sweep_dead_jobs();
  JobLock lock(job_id);  // after the sweep, before anything of the job exists; destroyed last: cleans up

  TcpStoreServer store(o.bind_addr, 0, token);
  // Ranks connect to the address the store listens on; a wildcard listener is reached on loopback.
  std::string addr = o.bind_addr == "0.0.0.0" ? "127.0.0.1" : o.bind_addr == "::" ? "::1" : o.bind_addr;
  const std::string port = std::to_string(store.port());
  const std::string store_url = "tcp://" + (addr.find(':') != std::string::npos ? "[" + addr + "]" : addr) + ":" + port;
  MPCOMM_LOG(info, "launch: job %s, %d ranks on %d host(s), store %s%s", job_id.c_str(), n, hosts, store_url.c_str(),
             via_mpirun ? ", through mpirun" : "");

  // ---- every child's argv and environment, before any fork
  std::vector<ExecPlan> plans;
  std::vector<std::string> mpirun_args;  // storage for the mpirun plan's argv
  if (via_mpirun) {
    plans.push_back(mpirun_plan(o, mpirun, program, {addr, port, store_url, token, job_id, timeout_text(o.timeout_s)},
                                mpirun_args));
  } else {
    const std::string host_base = hosts > 1 ? host_id_from_env() : "";
    std::vector<std::string> overridden = {"RANK",          "WORLD_SIZE",     "LOCAL_RANK",    "LOCAL_WORLD_SIZE",
                                           "MASTER_ADDR",   "MASTER_PORT",    "MPCOMM_STORE",  "MPCOMM_TOKEN",
                                           "MPCOMM_JOB_ID", "MPCOMM_TIMEOUT", "MPCOMM_BACKEND"};
    if (hosts > 1) overridden.push_back("MPCOMM_HOST_ID");  // with one host the inherited value (or hostname) holds
    const std::vector<std::string> inherited = environment_without(overridden);
    plans.resize(static_cast<size_t>(n));
    const std::vector<int> cpus = allowed_cpus();
    const bool bind = o.bind && !cpus.empty() && o.backend != "gloo";  // see LaunchOptions::bind
    for (int r = 0; r < n; ++r) {
      const int h = emulated_host_of_rank(r, n, hosts);  // host h runs [h*n/hosts, (h+1)*n/hosts)
      const int first = static_cast<int>(static_cast<long>(h) * n / hosts);
      const int end = static_cast<int>(static_cast<long>(h + 1) * n / hosts);
      ExecPlan& p = plans[static_cast<size_t>(r)];
      p.path = program;
      p.env = inherited;
      auto put = [&](const char* k, const std::string& v) { p.env.push_back(std::string(k) + "=" + v); };
      put("RANK", std::to_string(r));
      put("WORLD_SIZE", std::to_string(n));
      put("LOCAL_RANK", std::to_string(r - first));
      put("LOCAL_WORLD_SIZE", std::to_string(end - first));
      put("MASTER_ADDR", addr);
      put("MASTER_PORT", port);
      put("MPCOMM_STORE", store_url);
      put("MPCOMM_TOKEN", token);
      put("MPCOMM_JOB_ID", job_id);
      put("MPCOMM_TIMEOUT", timeout_text(o.timeout_s));
      put("MPCOMM_BACKEND", o.backend);
      if (hosts > 1) put("MPCOMM_HOST_ID", host_base + "-h" + std::to_string(h));
      if (bind) p.cpu = cpus[static_cast<size_t>(bind_slot(r, n, hosts, static_cast<int>(cpus.size())))];
      finish_plan(p, o.argv);
      p.exec_failed = "mpcomm launch: rank " + std::to_string(r) + ": cannot execute '" + program + "': ";
    }
  }

  // ---- start
  Output output;
  SignalCatcher signals;
  JobSweeper sweeper{via_mpirun ? job_id : ""};  // destroyed after `job`: whatever mpirun left behind
  TagDemux mpirun_out(STDOUT_FILENO, o.prefix_output), mpirun_err(STDERR_FILENO, o.prefix_output);
  Job job;  // after `signals`: destroyed first, so ranks are gone before the handlers are restored
  if (via_mpirun) {
    job.ranks.resize(1);
    Rank& r = job.ranks[0];
    r.rank = -1;
    r.name = "mpirun";
    start_rank(r, plans[0], /*stdin_fd=*/-1);  // mpirun forwards stdin to rank 0
    lock.note_mpirun(r.pid);
    r.out.demux = &mpirun_out;
    r.err.demux = &mpirun_err;
  } else {
    job.ranks.resize(static_cast<size_t>(n));
    int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);  // stdin of every rank but 0, like mpirun
    try {
      for (int r = 0; r < n; ++r) {
        Rank& rank = job.ranks[static_cast<size_t>(r)];
        rank.rank = r;
        rank.name = "rank " + std::to_string(r);
        rank.prefix = o.prefix_output ? "[" + std::to_string(r) + "] " : "";
        start_rank(rank, plans[static_cast<size_t>(r)], r == 0 ? -1 : devnull);
      }
    } catch (...) {
      if (devnull >= 0) ::close(devnull);
      throw;
    }
    if (devnull >= 0) ::close(devnull);
  }

  // ---- supervise
  auto say = [&](const std::string& line) { output.write(STDERR_FILENO, "mpcomm launch: " + line + "\n"); };
  auto announce = [&](const std::string& text) {
    try {
      store.set_local_if_absent(kAbortKey, Bytes(text.begin(), text.end()));  // a rank's own report is better
    } catch (const std::exception& e) {
      MPCOMM_LOG(warn, "launch: could not set %s: %s", kAbortKey, e.what());
    }
  };
  // What the escalation messages name: the ranks, or mpirun (which ends its ranks itself).
  auto running = [&]() {
    return via_mpirun ? std::string("mpirun and its ranks") : std::to_string(job.running()) + " rank(s)";
  };
  std::optional<Clock::time_point> term_at, kill_at, drain_until;
  bool termed = false, killed = false;
  int first_failure = 0;   // status of the first rank that failed
  int interrupted_by = 0;  // signal that interrupted the launcher
  std::vector<pollfd> fds;
  std::vector<std::pair<Stream*, const std::string*>> polled;  // stream, its rank's prefix
  std::vector<char> buf(kReadChunk);
  auto take_mpirun_reports = [&]() {
    for (TagDemux* d : {&mpirun_out, &mpirun_err})
      for (const RankFailure& f : d->take_failures()) {
        if (first_failure != 0 || interrupted_by != 0) continue;
        first_failure = f.status;
        std::string what = "rank " + std::to_string(f.rank) + " " + f.how;
        announce(what);
        say(what + " (reported by mpirun)" +
            (job.running() > 0 ? "; waiting up to " + fmt_seconds(o.grace_s) + " s for mpirun to end the job" : ""));
        term_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.grace_s));
      }
  };

  for (;;) {
    auto now = Clock::now();
    if (job.running() == 0) {
      if (!job.streams_open()) break;
      // Every rank is reaped and its group killed; a pipe still open is held by a descendant that
      // left the group (setsid). Read what is buffered, then stop waiting for it.
      if (!drain_until) drain_until = now + kDrainAfterExit;
      if (now >= *drain_until) {
        for (Rank& r : job.ranks) {
          r.out.close(r.prefix, output);
          r.err.close(r.prefix, output);
        }
        break;
      }
    }

    fds.clear();
    polled.clear();
    fds.push_back({signals.fd(), POLLIN, 0});
    for (Rank& r : job.ranks)
      for (Stream* s : {&r.out, &r.err})
        if (s->fd >= 0) {
          fds.push_back({s->fd, POLLIN, 0});
          polled.emplace_back(s, &r.prefix);
        }
    int ready = ::poll(fds.data(), fds.size(), kPollMs);
    if (ready < 0 && errno != EINTR) throw Internal("mpcomm: launch: poll() failed: " + errno_text(errno));

    // SIGINT / SIGTERM: terminate everything at once; a second signal kills.
    if (ready > 0 && fds[0].revents != 0) {
      for (int sig : signals.drain()) {
        if (interrupted_by == 0) {
          interrupted_by = sig;
          say(std::string("interrupted by SIG") + sigabbrev_np(sig) + "; terminating " + running());
          announce(std::string("mpcomm launch was interrupted by SIG") + sigabbrev_np(sig));
          job.signal_all(SIGTERM);
          termed = true;
          kill_at = Clock::now() + kKillAfter;
        } else if (!killed) {
          killed = true;
          job.signal_all(SIGKILL);
          if (via_mpirun) sweep_job_processes(job_id);
        }
      }
    }

    // Output.
    for (size_t i = 1; ready > 0 && i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      auto [s, prefix] = polled[i - 1];
      ssize_t got = ::read(s->fd, buf.data(), buf.size());
      if (got > 0) {
        s->take(buf.data(), static_cast<size_t>(got), *prefix, output);
      } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
        s->close(*prefix, output);
      }
    }

    // Ranks that mpirun reported failed: mpirun ends the others itself; it gets grace_s to do so.
    take_mpirun_reports();

    // Ranks that ended. (mpirun's own exit is judged once its output is read: its report names the rank.)
    // Of the ranks reaped in one pass, one killed by a signal is more likely the cause than those that
    // exited with an error after noticing it, so it is reported as the first failure.
    Rank* failed = nullptr;
    for (Rank& r : job.ranks) {
      if (!r.running || !reap(r) || r.status == 0) continue;
      bool signaled = r.how.find("signal") != std::string::npos;
      if (failed == nullptr || (signaled && failed->how.find("signal") == std::string::npos)) failed = &r;
    }
    if (failed != nullptr && first_failure == 0 && interrupted_by == 0 && !via_mpirun) {
      Rank& r = *failed;
      first_failure = r.status;
      std::string what = r.name + " " + r.how;
      announce(what);
      int others = job.running();
      say(others > 0 ? what + "; waiting up to " + fmt_seconds(o.grace_s) + " s for the other ranks" : what);
      if (others > 0)
        term_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.grace_s));
    }

    // Escalation.
    now = Clock::now();
    if (term_at && !termed && now >= *term_at) {
      termed = true;
      if (job.running() > 0) {
        say("terminating " + running() + " still running after " + fmt_seconds(o.grace_s) + " s");
        job.signal_all(SIGTERM);
      }
      kill_at = now + kKillAfter;
    }
    if (kill_at && !killed && now >= *kill_at) {
      killed = true;
      if (job.running() > 0) {
        say("killing " + running() + " that did not end 2 s after SIGTERM");
        job.signal_all(SIGKILL);
      }
      if (via_mpirun) sweep_job_processes(job_id);
    }
  }

  if (via_mpirun) {
    take_mpirun_reports();
    const Rank& m = job.ranks[0];
    if (first_failure == 0 && interrupted_by == 0 && !m.running && m.status != 0) {
      first_failure = m.status;  // mpirun failed without naming a rank
      say(m.name + " " + m.how);
    }
    remove_mpirun_session_dir(m.pid);
  }
  if (interrupted_by != 0) return 128 + interrupted_by;
  return first_failure;
}

}  // namespace mpcomm
