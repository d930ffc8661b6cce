// Environment discovery (see env.h for the precedence). Every failure names the launcher it thought it
// saw and every variable that launcher is read from, so a wrong `export` is one message away.
#include "bootstrap/env.h"

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "log/log.h"
#include "net/socket.h"
#include "settings/settings.h"
#include "mpcomm/error.h"

namespace mpcomm {

namespace {

// The launcher being read and the variables it is read from, for messages.
struct Source {
  const char* name;       // EnvInfo::source
  const char* label;      // how a person calls it
  const char* looked_at;  // every variable read for it
};

constexpr Source kMpcomm = {"mpcomm", "mpcomm launch", "MPCOMM_STORE, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE"};
constexpr Source kTorchrun = {"torchrun", "torchrun",
                              "RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT"};
constexpr Source kOpenMpi = {"openmpi", "Open MPI",
                             "OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK, "
                             "OMPI_COMM_WORLD_LOCAL_SIZE, MPCOMM_STORE, MASTER_ADDR, MASTER_PORT"};
constexpr Source kSlurm = {"slurm", "Slurm",
                           "SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE, "
                           "SLURM_STEP_TASKS_PER_NODE, SLURM_TASKS_PER_NODE, SLURM_NODEID, MPCOMM_STORE, "
                           "MASTER_ADDR, MASTER_PORT, SLURM_STEP_NODELIST, SLURM_JOB_NODELIST, SLURM_JOB_ID, "
                           "SLURM_STEP_ID, SLURMD_NODENAME"};

constexpr Source kEmulatedHosts = {"openmpi", "emulated hosts under mpirun",
                                   "MPCOMM_HOST_ID, MPCOMM_HOSTS, OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE"};

[[noreturn]] void fail(const Source& src, const std::string& why) {
  throw InvalidArgument("mpcomm: environment discovery (" + std::string(src.label) + "): " + why + " (looked at " +
                        src.looked_at + ")");
}

// The value of `var`, or nullopt when it is unset or empty (launchers export empty strings for "none").
std::optional<std::string> get(const char* var) {
  const char* v = std::getenv(var);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

bool is_set(const char* var) { return get(var).has_value(); }

// A non-negative int; throws naming `var` when it is not one.
int parse_count(const Source& src, const char* var, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0') fail(src, std::string(var) + "='" + text + "' is not a number");
  if (v < 0) fail(src, std::string(var) + "=" + text + " is negative");
  if (errno == ERANGE || v > INT_MAX) fail(src, std::string(var) + "=" + text + " is too large");
  return static_cast<int>(v);
}

std::optional<int> read_int(const Source& src, const char* var) {
  auto v = get(var);
  if (!v) return std::nullopt;
  return parse_count(src, var, *v);
}

int require_int(const Source& src, const char* var) {
  auto v = read_int(src, var);
  if (!v) fail(src, std::string(var) + " is not set");
  return *v;
}

// Checks rank/size and local rank/size. Missing local information means "one host"; half of it is an error.
void set_ranks(EnvInfo& info, const Source& src, const char* rank_var, int rank, const char* size_var, int size,
               const char* local_rank_var, std::optional<int> local_rank, const char* local_size_var,
               std::optional<int> local_size) {
  if (size < 1) fail(src, std::string(size_var) + "=" + std::to_string(size) + " must be at least 1");
  if (rank >= size)
    fail(src, std::string(rank_var) + "=" + std::to_string(rank) + " is not less than " + size_var + "=" +
                  std::to_string(size));
  if (local_rank.has_value() != local_size.has_value())
    fail(src, std::string(local_rank.has_value() ? local_rank_var : local_size_var) + " is set but " +
                  (local_rank.has_value() ? local_size_var : local_rank_var) + " is not");
  if (!local_rank) {
    local_rank = rank;
    local_size = size;
  }
  if (*local_size < 1 || *local_size > size)
    fail(src, std::string(local_size_var) + "=" + std::to_string(*local_size) + " is not between 1 and " + size_var +
                  "=" + std::to_string(size));
  if (*local_rank >= *local_size)
    fail(src, std::string(local_rank_var) + "=" + std::to_string(*local_rank) + " is not less than " + local_size_var +
                  "=" + std::to_string(*local_size));
  info.rank = rank;
  info.size = size;
  info.local_rank = *local_rank;
  info.local_size = *local_size;
  info.source = src.name;
}

std::string checked_store_url(const Source& src, const std::string& url) {
  const std::string tcp = "tcp://", file = "file://";
  if (url.compare(0, tcp.size(), tcp) == 0) {
    uint16_t port = 0;
    try {
      port = net::parse_host_port(url.substr(tcp.size())).second;
    } catch (const InvalidArgument&) {
      fail(src, "MPCOMM_STORE='" + url + "' is not tcp://HOST:PORT");
    }
    if (port == 0) fail(src, "MPCOMM_STORE='" + url + "' has port 0");
    return url;
  }
  if (url.compare(0, file.size(), file) == 0 && url.size() > file.size() + 1 && url[file.size()] == '/') return url;
  fail(src, "MPCOMM_STORE='" + url + "' is neither tcp://HOST:PORT nor file:///ABSOLUTE/PATH");
}

// MPCOMM_STORE, else tcp://MASTER_ADDR:MASTER_PORT, else nullopt.
std::optional<std::string> store_from_env(const Source& src) {
  if (auto url = get("MPCOMM_STORE")) return checked_store_url(src, *url);
  auto addr = get("MASTER_ADDR");
  auto port_text = get("MASTER_PORT");
  if (!addr && !port_text) return std::nullopt;
  if (!addr) fail(src, "MASTER_PORT is set but MASTER_ADDR is not");
  if (!port_text) fail(src, "MASTER_ADDR is set but MASTER_PORT is not");
  int port = parse_count(src, "MASTER_PORT", *port_text);
  if (port < 1 || port > 65535) fail(src, "MASTER_PORT=" + *port_text + " is not a port (1..65535)");
  std::string host = addr->find(':') != std::string::npos && addr->front() != '[' ? "[" + *addr + "]" : *addr;
  return "tcp://" + host + ":" + std::to_string(port);
}

std::string require_store(const Source& src) {
  auto url = store_from_env(src);
  if (!url) fail(src, "no store address: set MPCOMM_STORE, or MASTER_ADDR and MASTER_PORT");
  return *url;
}

bool is_tcp(const std::string& url) { return url.compare(0, 6, "tcp://") == 0; }

// MPCOMM_STORE_SERVED=1: the store at MPCOMM_STORE is served by someone else (mpcomm launch around
// mpirun), so no rank may start a server on its port.
bool store_served_elsewhere() {
  auto v = get("MPCOMM_STORE_SERVED");
  return v && *v != "0";
}

// Tasks on node `node` from Slurm's compressed list, e.g. "2(x3),1" = 2,2,2,1.
std::optional<int> slurm_tasks_on_node(const Source& src, const char* var, const std::string& text, int node) {
  std::vector<int> per_node;
  size_t i = 0;
  auto number = [&]() {
    size_t start = i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
    if (i == start || i - start > 9) fail(src, std::string(var) + "='" + text + "' is not like 2(x3),1");
    return std::stoi(text.substr(start, i - start));
  };
  while (i < text.size()) {
    int tasks = number();
    int repeat = 1;
    if (text.compare(i, 2, "(x") == 0) {
      i += 2;
      repeat = number();
      if (i >= text.size() || text[i] != ')') fail(src, std::string(var) + "='" + text + "' is not like 2(x3),1");
      ++i;
    }
    for (int r = 0; r < repeat && per_node.size() < 1'000'000; ++r) per_node.push_back(tasks);
    if (i < text.size()) {
      if (text[i] != ',') fail(src, std::string(var) + "='" + text + "' is not like 2(x3),1");
      ++i;
    }
  }
  if (per_node.empty()) return std::nullopt;
  if (node >= 0 && static_cast<size_t>(node) < per_node.size()) return per_node[static_cast<size_t>(node)];
  return per_node.front();
}

EnvInfo from_mpcomm() {
  const Source& s = kMpcomm;
  EnvInfo info;
  set_ranks(info, s, "RANK", require_int(s, "RANK"), "WORLD_SIZE", require_int(s, "WORLD_SIZE"), "LOCAL_RANK",
            read_int(s, "LOCAL_RANK"), "LOCAL_WORLD_SIZE", read_int(s, "LOCAL_WORLD_SIZE"));
  info.store_url = require_store(s);
  info.serve_store = false;  // the launcher serves it
  return info;
}

EnvInfo from_torchrun() {
  const Source& s = kTorchrun;
  EnvInfo info;
  set_ranks(info, s, "RANK", require_int(s, "RANK"), "WORLD_SIZE", require_int(s, "WORLD_SIZE"), "LOCAL_RANK",
            read_int(s, "LOCAL_RANK"), "LOCAL_WORLD_SIZE", read_int(s, "LOCAL_WORLD_SIZE"));
  info.store_url = require_store(s);
  // (With MPCOMM_STORE given, someone else runs the store: discover_env() reports that as "mpcomm".)
  info.serve_store = info.rank == 0;
  return info;
}

EnvInfo from_openmpi() {
  const Source& s = kOpenMpi;
  EnvInfo info;
  set_ranks(info, s, "OMPI_COMM_WORLD_RANK", require_int(s, "OMPI_COMM_WORLD_RANK"), "OMPI_COMM_WORLD_SIZE",
            require_int(s, "OMPI_COMM_WORLD_SIZE"), "OMPI_COMM_WORLD_LOCAL_RANK",
            read_int(s, "OMPI_COMM_WORLD_LOCAL_RANK"), "OMPI_COMM_WORLD_LOCAL_SIZE",
            read_int(s, "OMPI_COMM_WORLD_LOCAL_SIZE"));
  info.store_url = require_store(s);
  info.serve_store = info.rank == 0 && is_tcp(info.store_url) && !store_served_elsewhere();
  return info;
}

// Under Slurm without MPCOMM_STORE or MASTER_ADDR/PORT: the store is on the step's first node, where
// rank 0 runs, at a port every task derives alike from the job and step ids (10000-29999, below
// Linux's ephemeral ports).
std::optional<std::string> slurm_store(const Source& src) {
  auto list = get("SLURM_STEP_NODELIST");
  if (!list) list = get("SLURM_JOB_NODELIST");
  if (!list) list = get("SLURM_NODELIST");
  auto job = get("SLURM_JOB_ID");
  if (!job) job = get("SLURM_JOBID");
  if (!list || !job) return std::nullopt;
  const std::string host = first_slurm_host(*list);
  if (host.empty()) fail(src, "SLURM_STEP_NODELIST='" + *list + "' is not a Slurm host list");
  uint64_t h = 1469598103934665603ull;
  for (char c : *job + "." + get("SLURM_STEP_ID").value_or(get("SLURM_STEPID").value_or("0"))) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return "tcp://" + net::host_port(host, static_cast<uint16_t>(10000 + h % 20000));
}

EnvInfo from_slurm() {
  const Source& s = kSlurm;
  EnvInfo info;
  const char* local_size_var = "SLURM_NTASKS_PER_NODE";
  std::optional<int> local_size = read_int(s, local_size_var);
  for (const char* var : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
    if (local_size) break;
    if (auto text = get(var)) {
      local_size_var = var;
      local_size = slurm_tasks_on_node(s, var, *text, read_int(s, "SLURM_NODEID").value_or(0));
    }
  }
  set_ranks(info, s, "SLURM_PROCID", require_int(s, "SLURM_PROCID"), "SLURM_NTASKS", require_int(s, "SLURM_NTASKS"),
            "SLURM_LOCALID", read_int(s, "SLURM_LOCALID"), local_size_var, local_size);
  auto url = store_from_env(s);
  bool derived = false;
  if (!url) {
    url = slurm_store(s);
    derived = url.has_value();
  }
  if (!url) fail(s, "no store address: set MPCOMM_STORE, or MASTER_ADDR and MASTER_PORT (or run under srun, which "
                    "sets SLURM_STEP_NODELIST and SLURM_JOB_ID)");
  info.store_url = *url;
  info.serve_store = info.rank == 0 && is_tcp(info.store_url) && !store_served_elsewhere();
  // The derived store is on the step's first node: its first task serves it, which is rank 0 unless the
  // tasks were placed otherwise (--distribution=arbitrary, a host file). slurmd names each task's node.
  auto node = get("SLURMD_NODENAME");
  if (derived && node) {
    const std::string first = first_slurm_host(get("SLURM_STEP_NODELIST").value_or(get("SLURM_JOB_NODELIST").value_or(
        get("SLURM_NODELIST").value_or(""))));
    info.serve_store = *node == first && info.local_rank == 0;
  }
  return info;
}

}  // namespace

std::string first_slurm_host(const std::string& list) {
  size_t end = 0;
  for (int depth = 0; end < list.size(); ++end) {
    if (list[end] == '[') ++depth;
    if (list[end] == ']') --depth;
    if (list[end] == ',' && depth == 0) break;
  }
  std::string host = list.substr(0, end);
  // Each bracket: its first number or range's start ("n[3-4,9]" -> "n3"), zero padding kept.
  for (size_t open; (open = host.find('[')) != std::string::npos;) {
    const size_t close = host.find(']', open);
    if (close == std::string::npos) return "";
    const std::string range = host.substr(open + 1, close - open - 1);
    host = host.substr(0, open) + range.substr(0, range.find_first_of(",-")) + host.substr(close + 1);
  }
  return host;
}

bool launched_as_rank() {
  // A job of one rank (an `srun --pty bash` shell, a lone torchrun worker) is not: there the tools start
  // their own ranks.
  auto more_than_one = [](const char* var) {
    auto v = get(var);
    return v && std::atoll(v->c_str()) > 1;
  };
  return (is_set("RANK") && more_than_one("WORLD_SIZE")) || (is_set("OMPI_COMM_WORLD_RANK") && more_than_one("OMPI_COMM_WORLD_SIZE")) ||
         (is_set("SLURM_PROCID") && (is_set("SLURM_STEP_ID") || is_set("SLURM_STEPID")) && more_than_one("SLURM_NTASKS"));
}

EnvInfo discover_env() {
  bool has_store = is_set("MPCOMM_STORE");
  bool has_torch = is_set("RANK") || is_set("WORLD_SIZE");
  EnvInfo info;
  if (has_store && has_torch)
    info = from_mpcomm();
  else if (has_torch)
    info = from_torchrun();
  else if (is_set("OMPI_COMM_WORLD_RANK") || is_set("OMPI_COMM_WORLD_SIZE"))
    info = from_openmpi();
  else if (is_set("SLURM_PROCID"))
    info = from_slurm();
  else
    throw InvalidArgument(
        std::string("mpcomm: environment discovery: no launcher found") +
        (has_store ? " (MPCOMM_STORE is set, but RANK and WORLD_SIZE are not)" : "") +
        "; run under mpcomm launch (MPCOMM_STORE, RANK, WORLD_SIZE), torchrun (RANK, WORLD_SIZE, MASTER_ADDR, "
        "MASTER_PORT), mpirun (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE) or srun (SLURM_PROCID, SLURM_NTASKS)");
  MPCOMM_LOG(info, "environment (%s): rank %d of %d, local %d of %d, store %s%s", info.source.c_str(), info.rank,
             info.size, info.local_rank, info.local_size, info.store_url.c_str(),
             info.serve_store ? " (serving it)" : "");
  return info;
}

int emulated_host_of_rank(int rank, int size, int hosts) {
  int h = 0;
  while (h + 1 < hosts && static_cast<long>(h + 1) * size / hosts <= rank) ++h;
  return h;
}

std::string host_id_from_env() {
  std::string id = param_string("MPCOMM_HOST_ID");
  if (!id.empty()) return id;
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') {
    MPCOMM_LOG(warn, "gethostname() failed (errno %d); using host id 'localhost'", errno);
    std::strcpy(name, "localhost");
  }
  // Emulated hosts under mpirun (see env.h). Under mpcomm's own forked ranks the launcher sets
  // MPCOMM_HOST_ID instead.
  auto hosts_text = get("MPCOMM_HOSTS");
  auto rank_text = get("OMPI_COMM_WORLD_RANK");
  auto size_text = get("OMPI_COMM_WORLD_SIZE");
  if (!hosts_text || !rank_text || !size_text) return name;
  const Source& s = kEmulatedHosts;
  const int hosts = parse_count(s, "MPCOMM_HOSTS", *hosts_text);
  const int rank = parse_count(s, "OMPI_COMM_WORLD_RANK", *rank_text);
  const int size = parse_count(s, "OMPI_COMM_WORLD_SIZE", *size_text);
  if (hosts < 1 || hosts > size)
    fail(s, "MPCOMM_HOSTS=" + *hosts_text + " is not between 1 and OMPI_COMM_WORLD_SIZE=" + *size_text);
  if (rank >= size)
    fail(s, "OMPI_COMM_WORLD_RANK=" + *rank_text + " is not less than OMPI_COMM_WORLD_SIZE=" + *size_text);
  if (hosts == 1) return name;
  return std::string(name) + "-h" + std::to_string(emulated_host_of_rank(rank, size, hosts));
}

}  // namespace mpcomm
