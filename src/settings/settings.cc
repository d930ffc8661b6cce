// Every MPCOMM_* setting, declared once with its default, what it does and which values it takes; how a
// communicator's value is found (its Options::params, then the environment, then the default); and the
// checks made when a communicator is created: every setting's value, used or not, and any MPCOMM_* name
// in the environment that is not a setting (warned once, as UCX does for its variables).
#include "settings/settings.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "log/log.h"
#include "mpcomm/communicator.h"
#include "mpcomm/error.h"

extern char** environ;

namespace mpcomm {

const std::vector<ParamInfo>& all_params() {
  using Kind = ParamInfo::Kind;
  static const std::vector<ParamInfo> params = {
      {"MPCOMM_BACKEND", "native",
       "backend init_from_env() creates (auto: every call on the backend its table chooses)", Kind::choice, 0, 0,
       "native|gloo|mpi|nccl|auto"},
      {"MPCOMM_TIMEOUT", "300", "seconds any blocking wait may last before it fails with a timeout", Kind::number, 1e-3,
       1e9},
      {"MPCOMM_CHECK", "0", "1: exchange a fingerprint before every collective so mismatched calls fail on every rank",
       Kind::flag},
      {"MPCOMM_HOST_ID", "", "which host this rank is on (default: the hostname); lets one machine act as several",
       Kind::text},
      {"MPCOMM_HOSTS", "", "emulated hosts under mpirun (set by mpcomm launch --backend mpi --hosts H)", Kind::integer,
       1, 1 << 20},
      {"MPCOMM_STORE_SERVED", "", "1: someone else (mpcomm launch) serves MPCOMM_STORE, so rank 0 must not",
       Kind::flag},
      {"MPCOMM_STORE", "", "rendezvous store URL, tcp://HOST:PORT or file:///PATH (set by mpcomm launch)", Kind::text},
      {"MPCOMM_TOKEN", "",
       "the job's secret, proved (never sent) on every store and transport connection (made by mpcomm launch; under "
       "Slurm without it, ranks join by MUNGE)",
       Kind::text},
      {"MPCOMM_TLS", "0",
       "1: TLS 1.3 on the store's connections and the native transport's links between hosts, keyed by the job's "
       "secret (no certificates); every rank and the launcher must say the same",
       Kind::flag},
      {"MPCOMM_MUNGE_SOCKET", "", "munged's socket (empty: AuthInfo's socket= in slurm.conf, else MUNGE's default)",
       Kind::text},
      {"MPCOMM_MUNGE_ROOT", "0", "1: a store joined by MUNGE also lets in root's processes, not only the job owner's",
       Kind::flag},
      {"MPCOMM_DEVICE", "cpu", "where the caller's buffers live: cpu, cuda (the rank's local GPU) or cuda:N",
       Kind::device},
      {"MPCOMM_ELASTIC", "0",
       "1: a failure ends the communicator only, not the job, so the survivors can shrink it (mpcomm launch "
       "--elastic sets it)",
       Kind::flag},
      {"MPCOMM_JOIN", "0",
       "1: init_from_env() joins a running job (mpcomm::join) instead of starting one: the process takes the next "
       "rank when the job's ranks grow() their communicator (mpcomm launch --max-restarts sets it for a restart)",
       Kind::flag},
      {"MPCOMM_REPRODUCIBLE", "0",
       "1: floating-point sums and averages (allreduce, reduce_scatter, reduce) give the same bits on any backend, "
       "algorithm, layout or number of ranks",
       Kind::flag},
      {"MPCOMM_STAGING", "0",
       "1: the CPU backends copy host buffers through their staging buffer as they do device buffers (tests that path "
       "without a GPU)",
       Kind::flag},
      {"MPCOMM_ADDR", "", "address that TCP listeners bind to and advertise (empty: chosen, see MPCOMM_IFNAME)",
       Kind::text},
      {"MPCOMM_TCP_STREAMS", "1",
       "TCP connections per pair of ranks on different hosts; a link's bytes are striped over them in 256 KiB pieces "
       "(the connecting rank's value holds for the pair; docs/performance.md has the measurement behind the default)",
       Kind::integer, 1, 64},
      {"MPCOMM_IFNAME", "",
       "interfaces to take the address from: eth0 (prefix), =eth0 (exact), ^lo,docker (all but); empty: the one that "
       "routes to the store",
       Kind::text},
      {"MPCOMM_JOB_ID", "", "job id used to name shared-memory segments (set by mpcomm launch)", Kind::text},
      {"MPCOMM_SHM_RING_BYTES", "0", "bytes per shared-memory channel (0: sized from the number of local ranks)",
       Kind::integer, 0, 1 << 30},
      {"MPCOMM_CPUS", "0",
       "CPUs of this machine as the native backend counts them when it judges whether its local ranks outnumber them "
       "(a crowded host: other algorithms, single copy for large sends); 0: the online CPUs",
       Kind::integer, 0, 1 << 20},
      {"MPCOMM_SPIN_US", "1000",
       "microseconds a waiting native rank keeps polling (yielding the CPU between passes) before it sleeps",
       Kind::integer, 0, 60e6},
      {"MPCOMM_MPI_SPIN_MS", "1000",
       "milliseconds a waiting mpi rank keeps calling MPI_Test back to back (yielding the CPU between bursts) before "
       "it sleeps between calls; Open MPI moves a non-blocking collective on only inside those calls",
       Kind::integer, 0, 3600e3},
      {"MPCOMM_MPI_CALLS", "auto",
       "which MPI calls the mpi backend makes: blocking (Open MPI's tuned collectives on the calling thread; a "
       "watchdog ends the job when one outlasts the timeout), nonblocking (MPI_Iallreduce ... polled against the "
       "deadline), or auto (by op, size and whether ranks outnumber cores, as measured)",
       Kind::choice, 0, 0, "auto|blocking|nonblocking"},
      {"MPCOMM_MPI_CHUNK_ELEMENTS", "0",
       "most elements one MPI call of the mpi backend carries (0: as many as 1 GiB and MPI's int counts allow); larger "
       "allreduce, broadcast, reduce, send and recv go out in several calls",
       Kind::integer, 0, 2147483647},
      {"MPCOMM_SINGLE_COPY", "1",
       "1: native messages to ranks of this host may go by single copy (the receiver reads the sender's buffer with "
       "process_vm_readv) where the selection table's send.path and collective.path rows say; 0: every message through "
       "the shared-memory rings",
       Kind::flag},
      {"MPCOMM_FAR_NS", "200",
       "the CPUs of native ranks 0 and 1 count as far apart when a cache line's round trip between them takes longer "
       "than this (ns; 0: never, negative: always); measured at communicator creation and at the calls whose "
       "selection-table row asks (placement, placement_now)",
       Kind::number, -1e12, 1e12},
      {"MPCOMM_MAX_UNEXPECTED_MB", "1024",
       "largest native message buffered before its receive is posted; a larger one fails the job naming the sender",
       Kind::integer, 1, 1 << 24},
      {"MPCOMM_KERNELS", "",
       "reduction kernels: generic, avx2 or avx512 (default: the best this CPU runs; all give the same bits)",
       Kind::choice, 0, 0, "generic|avx2|avx512"},
      {"MPCOMM_ALGO", "",
       "force native algorithms, e.g. allreduce=ring,broadcast=binomial; one that cannot run for a call fails it "
       "(Unsupported)",
       Kind::text},
      {"MPCOMM_TUNING", "",
       "a selection table (written by mpcomm tune) whose rows for this communicator's shape come before the built-in "
       "table",
       Kind::text},
      {"MPCOMM_PROFILE_DIR", "",
       "where mpcomm plan --calibrate writes, and --profile this-machine reads, this machine's cost-model profile "
       "(default ~/.cache/mpcomm)",
       Kind::text},
      {"MPCOMM_AUTO_BACKENDS", "",
       "the backends the auto backend may route calls to, comma-separated (empty: every one usable: gloo, mpi when "
       "mpirun started the ranks, nccl for GPU buffers); native is always among them, and a backend is used only where "
       "every rank may use it",
       Kind::text},
      {"MPCOMM_TRACE_ENTRIES", "64",
       "operations each communicator's flight recorder keeps (0: off); written out on a timeout, peer failure or "
       "mismatch",
       Kind::integer, 0, 1 << 20},
      {"MPCOMM_TRACE_DIR", "",
       "folder for flight records (mpcomm-trace-<backend>-r<rank>of<size>-pid<pid>-c<n>.txt); default stderr",
       Kind::text},
      {"MPCOMM_TRACE", "",
       "file for a timeline of every op (Chrome trace / Perfetto JSON, all ranks merged on rank 0's clock); each rank "
       "writes FILE.rank<R>of<N> when its first communicator is destroyed and the last one merges them",
       Kind::text},
      {"MPCOMM_DEBUG", "WARN", "log level: ERROR, WARN, INFO or TRACE", Kind::choice, 0, 0, "ERROR|WARN|INFO|TRACE"},
  };
  return params;
}

namespace {

const ParamInfo* lookup(std::string_view name) {
  for (const auto& p : all_params())
    if (name == p.name) return &p;
  return nullptr;
}

const ParamInfo& find_param(const char* name) {
  if (const ParamInfo* p = lookup(name)) return *p;
  throw InvalidArgument(std::string("mpcomm: undeclared parameter ") + name);
}

bool same_word(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::toupper(static_cast<unsigned char>(x)) == std::toupper(static_cast<unsigned char>(y));
         });
}

// A whole number or a number, the whole text; false for anything else ("", "12abc", "nan").
bool parse_integer(const std::string& s, long long* v) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  *v = std::strtoll(s.c_str(), &end, 10);
  return end != s.c_str() && *end == '\0' && errno == 0;
}
bool parse_number(const std::string& s, double* v) {
  if (s.empty()) return false;
  char* end = nullptr;
  *v = std::strtod(s.c_str(), &end);
  return end != s.c_str() && *end == '\0' && std::isfinite(*v);
}

std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

int64_t to_int(const char* name, const std::string& s) {
  if (s.empty()) return 0;
  long long v = 0;
  if (!parse_integer(s, &v)) throw InvalidArgument(std::string("mpcomm: ") + name + "='" + s + "' is not a whole number");
  return v;
}

double to_double(const char* name, const std::string& s) {
  if (s.empty()) return 0;
  double v = 0;
  if (!parse_number(s, &v)) throw InvalidArgument(std::string("mpcomm: ") + name + "='" + s + "' is not a number");
  return v;
}

// Edits (insert, delete, replace one character) between two names: how close a misspelling is.
size_t distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string value_problem(const ParamInfo& p, const std::string& v) {
  using Kind = ParamInfo::Kind;
  switch (p.kind) {
    case Kind::text: return "";
    case Kind::flag:
      return v.empty() || v == "0" || v == "1" ? "" : "expected 0 or 1";
    case Kind::integer: {
      long long n = 0;
      if (v.empty() && p.def[0] == '\0') return "";
      const std::string range = "a whole number from " + number_text(p.lo) + " to " + number_text(p.hi);
      if (!parse_integer(v, &n)) return "expected " + range;
      return n >= p.lo && n <= p.hi ? "" : "expected " + range;
    }
    case Kind::number: {
      double x = 0;
      const std::string range = "a number from " + number_text(p.lo) + " to " + number_text(p.hi);
      if (!parse_number(v, &x)) return "expected " + range;
      return x >= p.lo && x <= p.hi ? "" : "expected " + range;
    }
    case Kind::choice: {
      if (v.empty() && p.def[0] == '\0') return "";
      std::string_view all(p.choices);
      for (size_t pos = 0; pos <= all.size();) {
        const size_t bar = std::min(all.find('|', pos), all.size());
        if (same_word(v, all.substr(pos, bar - pos))) return "";
        pos = bar + 1;
      }
      std::string list(p.choices);
      std::replace(list.begin(), list.end(), '|', ',');
      return "expected one of " + list;
    }
    case Kind::device:
      try {
        parse_device(v);
        return "";
      } catch (const Error&) {
        return "expected cpu, cuda or cuda:N";
      }
  }
  return "";
}

std::string param_string(const char* name) {
  const ParamInfo& p = find_param(name);
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string(p.def);
}

std::string param_string(const Options& opts, const char* name) {
  if (auto it = opts.params.find(name); it != opts.params.end()) {
    (void)find_param(name);
    return it->second;
  }
  return param_string(name);
}

int64_t param_int(const char* name) { return to_int(name, param_string(name)); }
double param_double(const char* name) { return to_double(name, param_string(name)); }
int64_t param_int(const Options& opts, const char* name) { return to_int(name, param_string(opts, name)); }
double param_double(const Options& opts, const char* name) { return to_double(name, param_string(opts, name)); }

void check_params(const Options& opts) {
  for (const auto& [name, value] : opts.params)
    if (lookup(name) == nullptr)
      throw InvalidArgument("mpcomm: Options::params names '" + name + "', which is not an mpcomm setting (mpcomm info lists them)");
  std::string problems;
  for (const ParamInfo& p : all_params()) {
    const std::string v = param_string(opts, p.name);
    const std::string why = value_problem(p, v);
    if (why.empty()) continue;
    const bool from_params = opts.params.count(p.name) != 0;
    problems += (problems.empty() ? "" : "; ") + std::string(p.name) + "='" + v + "'" +
                (from_params ? " (Options::params)" : "") + ": " + why;
  }
  if (!problems.empty()) throw InvalidArgument("mpcomm: " + problems);
  warn_unknown_settings();
}

std::vector<std::string> unknown_settings() {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view kv(*e);
    const std::string_view name = kv.substr(0, kv.find('='));
    if (name.rfind("MPCOMM_", 0) != 0 || name.rfind("MPCOMM_TEST_", 0) == 0 || lookup(name) != nullptr) continue;
    std::string line(name);
    const ParamInfo* best = nullptr;
    size_t best_d = 3;  // suggest only names within two edits
    for (const ParamInfo& p : all_params())
      if (const size_t d = distance(name, p.name); d < best_d) best = &p, best_d = d;
    if (best != nullptr) line += " (did you mean " + std::string(best->name) + "?)";
    out.push_back(line);
  }
  std::sort(out.begin(), out.end());
  return out;
}

void warn_unknown_settings() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (const std::string& u : unknown_settings())
      MPCOMM_LOG(warn, "%s is set in the environment but is not an mpcomm setting, and nothing reads it; mpcomm info lists the settings", u.c_str());
  });
}

}  // namespace mpcomm
