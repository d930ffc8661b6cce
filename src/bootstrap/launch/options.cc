// mpcomm launch, options: checks LaunchOptions, finds the program the way execvp() would, makes the
// job's random ids (token, job id), and writes the numbers the launcher says or exports as text.
//
// Guarantees: a bad option or a program that cannot be run is refused with InvalidArgument, whose
// message names the option and the value, before launch() starts anything (no process, file or socket
// of the job exists yet).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bootstrap/launch/launch_internal.h"
#include "mpcomm/error.h"
#include "net/handshake.h"
#include "net/socket.h"

namespace mpcomm::launch_detail {

std::string errno_text(int e) { return std::string(std::strerror(e)) + " (errno " + std::to_string(e) + ")"; }

namespace {

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

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
    bad("--timeout must be a positive number of seconds (got " + seconds_text(o.timeout_s) + ")");
  if (!(o.grace_s >= 0) || !std::isfinite(o.grace_s))
    bad("the grace period must be >= 0 seconds (got " + seconds_text(o.grace_s) + ")");
  if (o.backend.empty()) bad("the backend name is empty");
  if (o.max_restarts < 0) bad("--max-restarts must not be negative");
  if (o.max_restarts > 0 && !o.elastic)
    bad("--max-restarts starts lost ranks again as joiners, and ranks are lost only with --elastic: give it too");
  if (o.bind_addr.empty()) bad("the bind address is empty");
  if (o.argv.empty()) bad("no program given (mpcomm launch -n N -- PROGRAM ARGS...)");
  if (o.nnodes < 1) bad("--nnodes must be at least 1 (got " + std::to_string(o.nnodes) + ")");
  if (o.node_rank < 0 || o.node_rank >= o.nnodes)
    bad("--node-rank must be between 0 and --nnodes - 1 = " + std::to_string(o.nnodes - 1) + " (got " +
        std::to_string(o.node_rank) + ")");
  if (o.nnodes > 1) {
    if (o.master.empty()) bad("--nnodes " + std::to_string(o.nnodes) + " needs --master HOST:PORT (node 0's address)");
    uint16_t port = 0;
    try {
      port = net::parse_host_port(o.master).second;
    } catch (const InvalidArgument&) {
      bad("--master '" + o.master + "' is not HOST:PORT");
    }
    if (port == 0) bad("--master '" + o.master + "' needs a port other than 0 (every node must know it)");
    if (o.hosts > 1) bad("--hosts emulates hosts on one machine; with --nnodes each node is a host");
    if (o.needs.via_mpirun)
      bad("--backend " + o.backend + " starts its ranks with mpirun: across nodes run mpirun itself (see docs/cluster.md)");
  }
}

std::string random_hex(size_t nbytes) { return net::random_hex(nbytes); }

// MPCOMM_TIMEOUT as the ranks will parse it: an integer when it is one.
std::string timeout_text(double s) {
  char buf[64];
  if (s == std::floor(s) && s < 1e15)
    std::snprintf(buf, sizeof buf, "%.0f", s);
  else
    std::snprintf(buf, sizeof buf, "%.3f", s);
  return buf;
}

}  // namespace mpcomm::launch_detail
