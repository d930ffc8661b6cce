// mpcomm launch, supervision: launch() itself, the one loop that runs a job from its start to its end.
//
// Shape: validate; start the store; build every rank's argv and environment; fork the ranks; then one
// poll() loop in the calling thread relays output, reaps ranks, reacts to the first failure and to
// SIGINT/SIGTERM, and escalates SIGTERM -> SIGKILL on a clock. Nothing here runs on another thread.
//
// With needs.via_mpirun the launcher forks one child, mpirun, instead of the ranks (see mpirun_plan()); the
// same loop supervises it, reading its --tag-output streams through TagDemux, which turns them back into
// "[r] " lines and notices mpirun's reports of a failed rank.
//
// Guarantees (launcher.h has them all): the first failure is announced in the store and its status
// returned; the other ranks get grace_s, then SIGTERM, then SIGKILL kKillAfter later; SIGINT/SIGTERM
// terminate at once and a second one kills. The job's objects are declared so that on every way out,
// an exception included, they end in this order: the children (Job), what mpirun left (JobSweeper), the
// signal handlers, the store, and last the job's lock with its /dev/shm entries (JobLock).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bootstrap/abort_record.h"
#include "bootstrap/env.h"
#include "bootstrap/launch/launch_internal.h"
#include "log/log.h"
#include "mpcomm/error.h"
#include "mpcomm/store.h"
#include "net/socket.h"

namespace mpcomm {

namespace {

constexpr int kPollMs = 50;                                // reaping and escalation granularity
constexpr auto kDrainAfterExit = std::chrono::seconds(1);  // pipes held open by escaped descendants
constexpr size_t kReadChunk = 64 * 1024;

}  // namespace

int launch(const LaunchOptions& o) {
  using namespace launch_detail;
  validate(o);
  const std::string program = find_program(o.argv[0]);
  const int n = o.nranks, hosts = o.hosts;
  // The ranks are started by mpirun, the only child (see mpirun_plan()).
  const bool via_mpirun = o.needs.via_mpirun;
  std::string mpirun;
  if (via_mpirun) {
    try {
      mpirun = find_program("mpirun");
    } catch (const InvalidArgument& e) {
      throw InvalidArgument("mpcomm: launch: --backend " + o.backend + " starts the ranks with mpirun, but " +
                            (e.what() + std::strlen("mpcomm: launch: ")) + " (install openmpi-bin)");
    }
  }

  const bool multi = o.nnodes > 1;
  const int world = multi ? o.nnodes * n : n;  // ranks of the whole job
  const int rank_base = multi ? o.node_rank * n : 0;
  // Across nodes every launcher must prove the same secret without talking first (secret.cc).
  const JobSecret js = job_secret(o);
  std::string token = js.secret;
  const StoreAuth auth = js.munge ? StoreAuth::munge : StoreAuth::secret;
  sweep_dead_jobs();
  std::optional<JobLock> lock;  // destroyed last: cleans up /dev/shm/mpcomm.<job id>*
  std::optional<TcpStoreServer> server;
  std::unique_ptr<TcpStore> client;  // across nodes: the job's store, for ids, aborts and the end
  std::unique_ptr<TcpStore> watch;   // across nodes: the same store, for the abort watch (short replies)
  std::string job_id, addr, store_url, torch_port;
  auto free_port = [](const std::string& host) {
    uint16_t p = 0;
    (void)net::listen_tcp(host, 0, &p);  // bound, read, closed: free unless someone takes it meanwhile
    return std::to_string(p);
  };
  if (!multi) {
    job_id = random_hex(6);
    lock.emplace(job_id);  // after the sweep, before anything of the job exists
    server.emplace(o.bind_addr, 0, token);
    // Ranks connect to the address the store listens on; a wildcard listener is reached on loopback.
    addr = o.bind_addr == "0.0.0.0" ? "127.0.0.1" : o.bind_addr == "::" ? "::1" : o.bind_addr;
    store_url = "tcp://" + net::host_port(addr, server->port());
    // MASTER_PORT is another free port, not the store's: PyTorch's env:// rendezvous starts its own c10d
    // store there on rank 0 (torchrun's convention), so that PyTorch programs run under mpcomm launch
    // unchanged. mpcomm itself finds its store through MPCOMM_STORE.
    torch_port = free_port(addr);
  } else {
    auto [mhost, mport] = net::parse_host_port(o.master);
    addr = mhost;
    store_url = "tcp://" + net::host_port(mhost, mport);
    const Millis timeout(static_cast<int64_t>(o.timeout_s * 1000));
    if (o.node_rank == 0) {
      const std::string any = net::wildcard_for(mhost);
      server.emplace(any, mport, token, auth);
      client = std::make_unique<TcpStore>(any == "::" ? "::1" : "127.0.0.1", mport, token, timeout, false, auth);
      token = client->secret();  // by MUNGE: the one the server made
      job_id = random_hex(6);
      torch_port = free_port(any);
      client->set_string("launch/job", job_id + " " + torch_port + " " + std::to_string(o.nnodes) + " " + std::to_string(n));
    } else {
      client = std::make_unique<TcpStore>(mhost, mport, token, timeout, false, auth);
      token = client->secret();  // by MUNGE: the one node 0's server handed out
      // Node 0's job: its id, PyTorch's port, and the shape every node must agree on.
      std::istringstream v(client->get_string("launch/job", timeout));
      int nnodes0 = 0, n0 = 0;
      v >> job_id >> torch_port >> nnodes0 >> n0;
      if (nnodes0 != o.nnodes || n0 != n) {
        const std::string why = "mpcomm: launch: node " + std::to_string(o.node_rank) + " was given --nnodes " +
                                std::to_string(o.nnodes) + " and " + std::to_string(n) + " ranks per node, node 0 --nnodes " +
                                std::to_string(nnodes0) + " and " + std::to_string(n0) + ": every node must be given the same";
        client->set_string(kAbortKey, why);  // the other nodes end their ranks too
        throw InvalidArgument(why);
      }
    }
    job_id += "n" + std::to_string(o.node_rank);  // this node's segments: nodes may share a /dev/shm
    lock.emplace(job_id);
    // The supervisor's own look at the store every 200 ms: a short reply deadline, so that a node 0
    // gone silent (power, a cut link: no reset) is noticed in seconds, not after the job's timeout.
    watch = std::make_unique<TcpStore>(o.node_rank == 0 ? (net::wildcard_for(mhost) == "::" ? "::1" : "127.0.0.1") : mhost,
                                       mport, token, std::min(timeout, Millis(5000)));
  }
  // With --max-restarts, how many joiners this job's launchers start in all (each node's up to K): a grow() beyond
  // it is refused at once (src/core/grow.cc) instead of waiting for joiners that never come. Without it nothing is
  // said: a program may start its joiners itself.
  if (o.elastic && o.max_restarts > 0) {
    const std::string join_limit = std::to_string(o.max_restarts * o.nnodes);
    if (!multi)
      server->set_local_if_absent("mpcomm/join/limit", Bytes(join_limit.begin(), join_limit.end()));
    else if (o.node_rank == 0)
      client->set_string("mpcomm/join/limit", join_limit);
  }
  MPCOMM_LOG(info, "launch: job %s, %d ranks on %d host(s), node %d of %d, store %s%s", job_id.c_str(), n, hosts,
             o.node_rank, o.nnodes, store_url.c_str(), via_mpirun ? ", through mpirun" : "");

  // ---- every child's argv and environment, before any fork
  std::vector<ExecPlan> plans;
  std::vector<std::string> mpirun_args;  // storage for the mpirun plan's argv
  if (via_mpirun) {
    plans.push_back(mpirun_plan(o, mpirun, program, {addr, torch_port, store_url, token, job_id, timeout_text(o.timeout_s)},
                                mpirun_args));
  } else {
    const std::string host_base = hosts > 1 ? host_id_from_env() : "";
    std::vector<std::string> overridden = {"RANK",          "WORLD_SIZE",     "LOCAL_RANK",     "LOCAL_WORLD_SIZE",
                                           "MASTER_ADDR",   "MASTER_PORT",    "MPCOMM_STORE",   "MPCOMM_TOKEN",
                                           "MPCOMM_JOB_ID", "MPCOMM_TIMEOUT", "MPCOMM_BACKEND", "MPCOMM_ELASTIC",
                                           "MPCOMM_JOIN"};
    if (hosts > 1) overridden.push_back("MPCOMM_HOST_ID");  // with one host the inherited value (or hostname) holds
    const std::vector<std::string> inherited = environment_without(overridden);
    plans.resize(static_cast<size_t>(n));
    const std::vector<int> cpus = allowed_cpus();
    const bool bind = o.bind && o.needs.may_pin && !cpus.empty();  // see LaunchOptions::bind
    for (int r = 0; r < n; ++r) {
      const int h = emulated_host_of_rank(r, n, hosts);  // host h runs [h*n/hosts, (h+1)*n/hosts)
      const int first = static_cast<int>(static_cast<long>(h) * n / hosts);
      const int end = static_cast<int>(static_cast<long>(h + 1) * n / hosts);
      ExecPlan& p = plans[static_cast<size_t>(r)];
      p.path = program;
      p.env = inherited;
      auto put = [&](const char* k, const std::string& v) { p.env.push_back(std::string(k) + "=" + v); };
      put("RANK", std::to_string(rank_base + r));
      put("WORLD_SIZE", std::to_string(world));
      put("LOCAL_RANK", std::to_string(r - first));
      put("LOCAL_WORLD_SIZE", std::to_string(end - first));
      put("MASTER_ADDR", addr);
      put("MASTER_PORT", torch_port);
      put("MPCOMM_STORE", store_url);
      put("MPCOMM_TOKEN", token);
      put("MPCOMM_JOB_ID", job_id);
      put("MPCOMM_TIMEOUT", timeout_text(o.timeout_s));
      put("MPCOMM_BACKEND", o.backend);
      put("MPCOMM_ELASTIC", o.elastic ? "1" : "0");
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
    lock->note_mpirun(r.pid);
    r.out.demux = &mpirun_out;
    r.err.demux = &mpirun_err;
  } else {
    job.ranks.reserve(static_cast<size_t>(n + std::max(0, o.max_restarts)));  // restarts: no reallocation
    job.ranks.resize(static_cast<size_t>(n));
    int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);  // stdin of every rank but 0, like mpirun
    try {
      for (int r = 0; r < n; ++r) {
        Rank& rank = job.ranks[static_cast<size_t>(r)];
        rank.rank = rank_base + r;
        rank.name = "rank " + std::to_string(rank_base + r);
        rank.prefix = o.prefix_output ? "[" + std::to_string(rank_base + r) + "] " : "";
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
      if (server)
        server->set_local_if_absent(kAbortKey, Bytes(text.begin(), text.end()));  // a rank's own report is better
      else if (!watch->check({kAbortKey}))
        watch->set_string(kAbortKey, text);
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
  std::string elsewhere;   // across nodes: why the job ended on another node (or the store was lost)
  std::vector<std::string> lost;  // --elastic: the ranks killed by a signal while the others went on
  int lost_status = 0;            // the last lost rank's status: the job's when no rank was left
  int restarts = 0;               // --max-restarts: lost ranks started again so far
  Clock::time_point next_look = Clock::now();
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
            (job.running() > 0 ? "; waiting up to " + seconds_text(o.grace_s) + " s for mpirun to end the job" : ""));
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
    std::vector<int> restart;  // --max-restarts: the plans (local rank) of lost ranks to start again
    for (Rank& r : job.ranks) {
      if (!r.running || !reap(r) || r.status == 0) continue;
      bool signaled = r.how.find("signal") != std::string::npos;
      if (o.elastic && signaled && !via_mpirun && interrupted_by == 0) {  // lost: the others go on
        lost.push_back(r.name);
        lost_status = r.status;
        say(r.name + " " + r.how + "; --elastic: " + std::to_string(job.running()) + " other rank(s) go on");
        // Not while the job is ending: a rank the launcher signals itself is no loss to make good.
        if (restarts < o.max_restarts && job.running() > 0 && first_failure == 0 && elsewhere.empty() && !term_at)
          restart.push_back(r.rank - rank_base);
        continue;
      }
      if (failed == nullptr || (signaled && failed->how.find("signal") == std::string::npos)) failed = &r;
    }
    for (int local : restart) {  // as a joiner of the running job, in a new slot (reserved: no reallocation)
      if (restarts >= o.max_restarts) break;
      ++restarts;
      ExecPlan p;  // start_rank forks and execs before it returns: the child has its own copy
      const ExecPlan& was = plans[static_cast<size_t>(local)];
      p.path = was.path, p.env = was.env, p.cpu = was.cpu, p.exec_failed = was.exec_failed;
      p.env.push_back("MPCOMM_JOIN=1");
      finish_plan(p, o.argv);
      Rank& again = job.ranks.emplace_back();
      again.rank = rank_base + local;
      again.name = "rank " + std::to_string(again.rank) + " (restart " + std::to_string(restarts) + ")";
      again.prefix = o.prefix_output ? "[" + std::to_string(again.rank) + "+] " : "";
      start_rank(again, p, /*stdin_fd=*/-1);
      say("started " + again.name + " as a joiner (" + std::to_string(o.max_restarts - restarts) + " restart(s) left)");
    }
    if (failed != nullptr && first_failure == 0 && interrupted_by == 0 && !via_mpirun) {
      Rank& r = *failed;
      first_failure = r.status;
      std::string what = r.name + " " + r.how;
      announce(what);
      int others = job.running();
      say(others > 0 ? what + "; waiting up to " + seconds_text(o.grace_s) + " s for the other ranks" : what);
      if (others > 0)
        term_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.grace_s));
    }

    // Across nodes: a failure announced by another node (or by a rank), or the store gone, ends this
    // node's ranks too.
    if (client && elsewhere.empty() && first_failure == 0 && interrupted_by == 0 && Clock::now() >= next_look) {
      next_look = Clock::now() + std::chrono::milliseconds(200);
      try {
        if (watch->check({kAbortKey})) elsewhere = "the job failed: " + watch->get_string(kAbortKey, Millis(1000));
      } catch (const std::exception& e) {
        elsewhere = std::string("lost the job's store at ") + store_url + ": " + e.what();
      }
      if (!elsewhere.empty() && job.running() > 0) {
        say(elsewhere + "; waiting up to " + seconds_text(o.grace_s) + " s for this node's " + running());
        term_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.grace_s));
      }
    }

    // Escalation.
    now = Clock::now();
    if (term_at && !termed && now >= *term_at) {
      termed = true;
      if (job.running() > 0) {
        say("terminating " + running() + " still running after " + seconds_text(o.grace_s) + " s");
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
      // (It may not: when several ranks call MPI_Abort at once, Open MPI's report can fail itself,
      // "ORTE_ERROR_LOG: ... show_help.c".) The ranks' own report in the store names the rank.
      Bytes report;
      std::smatch rank;
      std::string text;
      if (server && server->get_local(kAbortKey, &report)) text.assign(report.begin(), report.end());
      if (std::regex_search(text, rank, std::regex("on rank (\\d+) of")))
        say("rank " + rank[1].str() + " failed: " + text + " (" + m.name + " " + m.how + " without naming it)");
      else
        say(m.name + " " + m.how);
    }
    remove_mpirun_session_dir(m.pid);
  }
  if (client) {
    // Node 0 serves the store: it stays until every other node's ranks have ended (or its timeout).
    try {
      if (o.node_rank != 0) {
        client->add("launch/done", 1);
      } else {
        // The others' ranks may run longer than ours, up to the job's timeout; once the job has failed
        // they get the grace period and the kill.
        const bool failed = first_failure != 0 || !elsewhere.empty() || interrupted_by != 0;
        const double wait_s = failed ? o.grace_s + 5 : o.timeout_s + o.grace_s;
        const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wait_s));
        while (client->add("launch/done", 0) < o.nnodes - 1 && Clock::now() < until) {
          const std::vector<int> sigs = signals.drain();
          if (!sigs.empty()) {
            if (interrupted_by == 0) interrupted_by = sigs.front();
            break;
          }
          ::usleep(100 * 1000);
        }
        if (client->add("launch/done", 0) < o.nnodes - 1)
          say("not every node reported its ranks ended; closing the store");
      }
      // A rank of another node that failed after this node's ranks had ended fails the job here too.
      if (elsewhere.empty() && first_failure == 0 && client->check({kAbortKey}))
        elsewhere = "the job failed: " + client->get_string(kAbortKey, Millis(1000));
    } catch (const std::exception& e) {
      MPCOMM_LOG(warn, "launch: the job's store at %s: %s", store_url.c_str(), e.what());
    }
  }
  if (!lost.empty()) {
    std::string names;
    for (const std::string& l : lost) names += (names.empty() ? "" : ", ") + l;
    say("lost " + names +
        (first_failure == 0 && elsewhere.empty() && interrupted_by == 0 ? "; every other rank ended with 0" : ""));
  }
  if (interrupted_by != 0) return 128 + interrupted_by;
  if (lost.size() == job.ranks.size()) return lost_status;  // nobody went on
  if (first_failure == 0 && !elsewhere.empty()) return 1;
  return first_failure;
}

}  // namespace mpcomm
