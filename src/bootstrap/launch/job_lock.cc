// mpcomm launch, job lock and sweep: each job holds a lock in /dev/shm for as long as its launcher lives;
// each launch first sweeps away what earlier jobs, whose launchers were killed, left behind; and a job's
// own leftovers (its /dev/shm entries, processes that outlived mpirun) are removed when it ends.
//
// Guarantees: a sweep touches only this user's jobs whose lock is free (their launcher is gone), and of
// them only what carries the job's id (/dev/shm/mpcomm.<job id>.*, processes with MPCOMM_JOB_ID=<job
// id>) or the session folder of the mpirun the lock names, once that very mpirun is gone; a live job's
// lock is never seen unlocked. What cannot be done is logged and left, never thrown: cleaning up must not
// stop a launch.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bootstrap/launch/launch_internal.h"
#include "log/log.h"

namespace mpcomm::launch_detail {

namespace {

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

}  // namespace

JobLock::JobLock(std::string job_id) : job_id_(std::move(job_id)) {
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

JobLock::~JobLock() {
  remove_shm_segments(job_id_);
  if (fd_ >= 0) ::close(fd_);
}

void JobLock::note_mpirun(pid_t pid) {
  unsigned long long start = 0;
  char state = 0;
  if (fd_ < 0 || !process_start(pid, &start, &state)) return;
  const std::string text = "mpirun " + std::to_string(static_cast<int>(pid)) + " " + std::to_string(start) + "\n";
  const ssize_t n = ::pwrite(fd_, text.data(), text.size(), 0);
  if (n != static_cast<ssize_t>(text.size()))
    MPCOMM_LOG(warn, "launch: cannot note mpirun's pid in the job's lock: %s",
               n < 0 ? std::strerror(errno) : "short write");
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

// Kills what is left of the job until nothing is (a dead process keeps its environ until it is reaped,
// by mpirun or init, so this may take a few rounds), for at most 2 s.
void sweep_job_processes(const std::string& job_id) {
  const auto until = Clock::now() + kKillAfter;
  while (kill_job_processes(job_id) > 0 && Clock::now() < until) ::usleep(20 * 1000);
}

}  // namespace mpcomm::launch_detail
