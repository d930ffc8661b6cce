// The job's secret as mpcomm launch decides it (launcher.h, "Who gets in"): one node makes a random one;
// several nodes share MPCOMM_TOKEN or a token file, or join by MUNGE under Slurm; a derived secret only on
// loopback or when the user says --insecure.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "bootstrap/launch/launch_internal.h"
#include "log/log.h"
#include "mpcomm/error.h"
#include "net/munge.h"
#include "net/socket.h"

namespace mpcomm::launch_detail {

namespace {

std::string mode_text(mode_t m) {
  char b[8];
  std::snprintf(b, sizeof b, "%04o", static_cast<unsigned>(m & 07777));
  return b;
}

}  // namespace

std::string read_token_file(const std::string& path) {
  auto bad = [&](const std::string& why) {
    throw InvalidArgument("mpcomm: launch: --token-file " + path + ": " + why);
  };
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) bad(errno_text(errno));
  if (!S_ISREG(st.st_mode)) bad("not a regular file");
  if (st.st_uid != ::geteuid())
    bad("owned by uid " + std::to_string(st.st_uid) + ", not by this user (uid " + std::to_string(::geteuid()) + ")");
  if ((st.st_mode & 077) != 0)
    bad("its mode is " + mode_text(st.st_mode) + ": others may read it; the job's secret must be readable by its " +
        "owner only (chmod 600 " + path + ")");
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  if (s.size() < 16) bad("holds " + std::to_string(s.size()) + " characters; a secret needs at least 16");
  return s;
}

JobSecret job_secret(const LaunchOptions& o) {
  JobSecret js;
  const char* env = std::getenv("MPCOMM_TOKEN");
  if (env != nullptr && *env != '\0') {
    js.secret = env;
    return js;
  }
  if (!o.token_file.empty()) {
    js.secret = read_token_file(o.token_file);
    return js;
  }
  if (o.nnodes <= 1) {  // one node: its launcher serves the store, nothing to agree on
    js.secret = random_hex(32);
    return js;
  }
  if (!net::munge::slurm_job().empty()) {
    std::string why;
    if (net::munge::available(&why)) {
      js.munge = true;  // node 0's store makes the secret and hands it to the launchers that prove who they are
      return js;
    }
    if (!o.insecure)
      throw InvalidArgument("mpcomm: launch: --nnodes under Slurm without MPCOMM_TOKEN joins the nodes by MUNGE, but " +
                            why +
                            "; give every node the same secret (MPCOMM_TOKEN, or --token-file FILE of mode 0600)");
  }
  const std::string host = net::parse_host_port(o.master).first;
  if (!o.insecure && !net::is_loopback_literal(host))
    throw InvalidArgument(
        "mpcomm: launch: --nnodes with --master " + o.master +
        " needs a secret every node shares, or any process that "
        "reaches " +
        o.master +
        " could join the job: set MPCOMM_TOKEN on every node, or give --token-file FILE (mode "
        "0600, e.g. on the shared home), or run under Slurm with MUNGE; --insecure goes on without one");
  if (o.insecure && !net::is_loopback_literal(host))
    MPCOMM_LOG(warn,
               "launch: --insecure: the job's secret is derived from --master %s; any process that reaches it "
               "can join the job",
               o.master.c_str());
  js.secret = "master/" + o.master;  // loopback: the nodes are this machine's processes
  return js;
}

}  // namespace mpcomm::launch_detail
