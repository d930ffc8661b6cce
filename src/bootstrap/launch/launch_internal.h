// mpcomm launch, inside (bootstrap/launcher.h says what it guarantees): the declarations the pieces of
// src/bootstrap/launch share, one section per file. Only those files include this header.
//
//   options.cc      checks LaunchOptions, finds the program, makes the job's ids and the texts of numbers
//   secret.cc       the job's secret: random, MPCOMM_TOKEN, a token file, or a MUNGE join
//   processes.cc    a child from its ExecPlan, in a process group of its own; reaping; SIGINT/SIGTERM
//   launch.cc       launch(): the plans, the start, and the one loop that supervises the job
//   mpirun.cc       the ExecPlan of `mpirun` (LaunchNeeds::via_mpirun) and its session folder
//   cpu_binding.cc  the CPUs the ranks may be pinned to, and which one each rank gets
//   output.cc       the "[r] line" streams, and mpirun's --tag-output turned back into them
//   job_lock.cc     the job's lock in /dev/shm, and the sweep of what killed jobs left behind
//
// Everything here runs in the thread that called launch(); nothing is thread-safe on its own.
#pragma once

#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "bootstrap/launcher.h"
#include "core/wait.h"

namespace mpcomm::launch_detail {

using Clock = std::chrono::steady_clock;

constexpr auto kKillAfter = std::chrono::seconds(2);  // SIGTERM, then SIGKILL this much later

// ---- options.cc ------------------------------------------------------------------------------------

std::string errno_text(int e);  // "No such file or directory (errno 2)"

// The path execve() should run, found the way execvp() would find it. Throws InvalidArgument.
std::string find_program(const std::string& prog);

// Throws InvalidArgument for options launch() cannot run with.
void validate(const LaunchOptions& o);

// nbytes random bytes, in hex (net::random_hex). Throws Internal.
std::string random_hex(size_t nbytes);

// MPCOMM_TIMEOUT as the ranks will parse it: an integer when it is one.
std::string timeout_text(double s);

// ---- secret.cc -------------------------------------------------------------------------------------

// How the job's connections prove they belong to it: its secret, or (several nodes under Slurm with
// MUNGE) none yet: node 0's store makes one and hands it to the launchers that join by MUNGE.
struct JobSecret {
  std::string secret;
  bool munge = false;
};
// MPCOMM_TOKEN, else --token-file, else one node: random; several: MUNGE under Slurm, a secret derived
// from --master on loopback or with --insecure, else InvalidArgument saying what to give.
JobSecret job_secret(const LaunchOptions& o);
// The secret in `path`: a regular file of this user, readable by nobody else, of 16 characters or more
// (a trailing newline dropped). Throws InvalidArgument naming the file and, when loose, its mode.
std::string read_token_file(const std::string& path);

// ---- output.cc -------------------------------------------------------------------------------------

// Writes whole buffers to our stdout/stderr. A closed destination (EPIPE: `mpcomm launch ... | head`)
// drops what is written to it from then on; the job itself goes on.
class Output {
 public:
  void write(int fd, const std::string& s);

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
  void relay(const std::string& prefix, bool eof, Output& out);

  // Relays the rest (as at EOF) and closes fd; nothing when it is closed already.
  void close(const std::string& prefix, Output& out);
};

// A rank failure as mpirun reported it.
struct RankFailure {
  int rank = -1;
  int status = 1;   // exit code, or 128 + signal
  std::string how;  // "exited with signal 9 (Killed)"
};

// Turns one of mpirun's --tag-output streams back into whole lines per rank (output.cc says how), and
// collects the rank failures mpirun reports in its own, untagged text.
class TagDemux {
 public:
  TagDemux(int dest, bool prefix) : dest_(dest), prefix_(prefix) { untagged_.dest = dest; }

  void feed(const char* p, size_t n, Output& out);
  // At EOF: everything still held leaves, unterminated lines included.
  void finish(Output& out);
  std::vector<RankFailure> take_failures();

 private:
  static constexpr int kSegmentStart = -1;  // cur_: the next bytes are a tag or untagged text
  static constexpr int kUntagged = -2;      // cur_: mpirun's own text, up to the newline
  enum Match { kNo, kPartial, kFull };

  static Match match_tag(const std::string& s, size_t i, int* rank, size_t* len);
  std::string prefix_of(int rank) const;
  Stream& stream_of(int rank);
  void parse(bool eof, Output& out);
  void scan_mpirun_line(const std::string& line);

  int dest_;
  bool prefix_;
  std::string buf_;  // bytes not parsed yet (they may end inside a tag)
  int cur_ = kSegmentStart;
  std::map<int, Stream> ranks_;  // each rank's partial line
  Stream untagged_;
  std::string untagged_line_;
  int process_name_rank_ = -1;
  int abort_rank_ = -1;          // "MPI_ABORT was invoked on rank R", before its errorcode line
  std::vector<RankFailure> failures_;
};

// ---- processes.cc ----------------------------------------------------------------------------------

// While alive: SIGINT/SIGTERM become bytes on a pipe that the poll loop reads; SIGPIPE is ignored (a
// closed stdout must not kill the launcher and orphan the job); SIGCHLD is SIG_DFL so that nothing
// auto-reaps our ranks. The previous dispositions come back at destruction.
class SignalCatcher {
 public:
  SignalCatcher();
  ~SignalCatcher();
  SignalCatcher(const SignalCatcher&) = delete;
  SignalCatcher& operator=(const SignalCatcher&) = delete;

  int fd() const { return pipe_[0]; }
  std::vector<int> drain();  // the signals caught since the last call

 private:
  int pipe_[2] = {-1, -1};
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
  struct sigaction old_pipe_ {};
  struct sigaction old_chld_ {};
};

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

// The launcher's environment without `names`.
std::vector<std::string> environment_without(const std::vector<std::string>& names);

// Points plan.argv / sh_argv / envp at the plan's own strings and at `args`.
void finish_plan(ExecPlan& p, const std::vector<std::string>& args);

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

  ~Job();

  // Signals every running rank's process group. A rank that is still running has not been reaped, so
  // its pid (= its group id) cannot have been reused.
  void signal_all(int sig);
  int running() const;
  bool streams_open() const;
};

// Starts rank r.rank (or mpirun); fills pid and the pipes. stdin_fd -1 keeps the launcher's stdin.
void start_rank(Rank& r, const ExecPlan& plan, int stdin_fd);

// If the rank has ended: kills what is left of its process group, reaps it and returns true.
bool reap(Rank& r);

// ---- mpirun.cc -------------------------------------------------------------------------------------

// What the job's ranks are told, by either path.
struct JobEnv {
  std::string addr, port, store_url, token, job_id, timeout;
};

// `mpirun -n N ... PROGRAM ARGS...` with the job's environment; `args` holds the strings of its argv.
ExecPlan mpirun_plan(const LaunchOptions& o, const std::string& mpirun, const std::string& program, const JobEnv& je,
                     std::vector<std::string>& args);

// Removes the session folder Open MPI made for mpirun `mpirun_pid`, if it is still there.
void remove_mpirun_session_dir(pid_t mpirun_pid);

// ---- cpu_binding.cc --------------------------------------------------------------------------------

// The CPUs this process may run on, in order.
std::vector<int> allowed_cpus();

// Cores this process may run on: what mpirun counts as slots by default.
int usable_cores();

// ---- job_lock.cc -----------------------------------------------------------------------------------

// The launcher's lock, /dev/shm/mpcomm.<job>.launcher, held (flock) for as long as the launcher lives:
// the kernel releases it however the launcher ends, SIGKILL included, when there is no time to clean
// up. Made under another name, locked, then renamed, so that no sweep (sweep_dead_jobs) ever sees it
// unlocked while its launcher lives. Destroyed last in launch(), after every rank is gone: removes the
// job's /dev/shm entries, the lock itself among them (unlinked before it is released, so a sweep that
// opened it just before can tell that the job ended in order).
class JobLock {
 public:
  explicit JobLock(std::string job_id);
  ~JobLock();
  // Written into the lock, with its start time: a later sweep removes this mpirun's session folder.
  void note_mpirun(pid_t pid);
  JobLock(const JobLock&) = delete;
  JobLock& operator=(const JobLock&) = delete;

 private:
  std::string job_id_;
  int fd_ = -1;
};

// Ends what every earlier job whose launcher is gone (its lock is free) left behind.
void sweep_dead_jobs();

// Kills what is left of the job until nothing is, for at most kKillAfter.
void sweep_job_processes(const std::string& job_id);

// Removes any process of the job still alive when it goes out of scope (after the Job's destructor).
struct JobSweeper {
  std::string job_id;  // empty: nothing to do
  ~JobSweeper() {
    if (!job_id.empty()) sweep_job_processes(job_id);
  }
};

}  // namespace mpcomm::launch_detail
