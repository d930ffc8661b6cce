// mpcomm launch, processes: starts each child (a rank, or mpirun) from its ExecPlan in a process group
// of its own, reaps it, and turns SIGINT/SIGTERM to the launcher into bytes the poll loop reads.
//
// Guarantees: a child runs with the launcher's death signal armed (PR_SET_PDEATHSIG; it does not run at
// all when the launcher died first), default signal dispositions, an empty signal mask, only fds 0-2
// open and, with a cpu in its plan, on that CPU; a reaped rank's whole process group is killed with it;
// Job's destructor kills and reaps every child still running, so no way out of launch() leaves one.
//
// Forking from a process that has threads (the store server has one): between fork() and exec the child
// only makes system calls, on data prepared before the fork (ExecPlan), so it cannot deadlock on a lock
// another thread held at the fork.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "bootstrap/launch/launch_internal.h"
#include "log/log.h"
#include "mpcomm/error.h"

extern char** environ;

namespace mpcomm::launch_detail {

namespace {

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

}  // namespace

// ---- signals -------------------------------------------------------------------------------------

namespace {

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

}  // namespace

SignalCatcher::SignalCatcher() {
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

SignalCatcher::~SignalCatcher() {
  ::sigaction(SIGINT, &old_int_, nullptr);
  ::sigaction(SIGTERM, &old_term_, nullptr);
  ::sigaction(SIGPIPE, &old_pipe_, nullptr);
  ::sigaction(SIGCHLD, &old_chld_, nullptr);
  g_signal_pipe.store(-1);
  ::close(pipe_[0]);
  ::close(pipe_[1]);
}

std::vector<int> SignalCatcher::drain() {
  std::vector<int> sigs;
  unsigned char buf[64];
  ssize_t n;
  while ((n = ::read(pipe_[0], buf, sizeof buf)) > 0)
    for (ssize_t i = 0; i < n; ++i) sigs.push_back(buf[i]);
  return sigs;
}

// ---- ranks ---------------------------------------------------------------------------------------

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


Job::~Job() {
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

void Job::signal_all(int sig) {
  for (Rank& r : ranks)
    if (r.running && ::killpg(r.pid, sig) != 0) ::kill(r.pid, sig);
}

int Job::running() const {
  int n = 0;
  for (const Rank& r : ranks) n += r.running ? 1 : 0;
  return n;
}

bool Job::streams_open() const {
  for (const Rank& r : ranks)
    if (r.out.fd >= 0 || r.err.fd >= 0) return true;
  return false;
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

}  // namespace mpcomm::launch_detail
