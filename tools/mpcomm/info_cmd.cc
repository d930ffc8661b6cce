// mpcomm info: what this build and this machine offer.
#include <openssl/crypto.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "backends/auto/auto_backend.h"
#include "backends/auto/route_table.h"
#include "backends/native/constants.h"
#include "backends/native/selection/selection.h"
#include "commands.h"
#include "device/device.h"
#include "kernels/reduce.h"
#include "mpcomm/mpcomm.h"
#include "net/munge.h"
#include "net/tls.h"
#include "settings/settings.h"

#ifdef MPCOMM_HAVE_MPI
#include <mpi.h>

#include "backends/mpi/calls_table.h"
#endif

namespace mpcomm::cli {

namespace {

std::string nccl_headers();

std::string backend_line(const std::string& b) {
  if (b == "native") return "mpcomm " MPCOMM_VERSION ": shared memory within a host, TCP between hosts";
  if (b == "auto") return "every call on the backend its table chooses (auto routing, below)";
#ifdef MPCOMM_HAVE_GLOO
  if (b == "gloo") return "Gloo " MPCOMM_GLOO_VERSION ": TCP transport between every pair (also within a host)";
#endif
#ifdef MPCOMM_HAVE_MPI
  if (b == "mpi") {
    char v[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int len = 0;
    MPI_Get_library_version(v, &len);
    std::string s(v, static_cast<size_t>(len));
    if (auto nl = s.find_first_of(",\n"); nl != std::string::npos) s = s.substr(0, nl);
    return s + ": launched through mpirun, shared memory (vader) on one host, TCP between emulated hosts";
  }
#endif
  if (b == "nccl") {
    std::string why;
    std::string v = "NCCL" + nccl_headers() + ": GPU buffers; ranks sharing one GPU each get their own emulated host";
    if (device::cuda_devices(&why) == 0) v += " (compiled in, unavailable here: " + why + ")";
    return v;
  }
  return "";
}

// The NCCL version of the headers CUDA ships (" 2.28.3 (headers in /usr/local/cuda)"), if present.
std::string nccl_headers() {
  std::ifstream f("/usr/local/cuda/include/nccl.h");
  std::string line, major, minor, patch;
  while (std::getline(f, line)) {
    auto grab = [&](const char* name, std::string& out) {
      std::string key = std::string("#define ") + name + " ";
      if (line.rfind(key, 0) == 0) out = line.substr(key.size());
    };
    grab("NCCL_MAJOR", major);
    grab("NCCL_MINOR", minor);
    grab("NCCL_PATCH", patch);
  }
  if (major.empty()) return "";
  return " " + major + "." + minor + "." + patch + " (headers in /usr/local/cuda)";
}

// A row as `mpcomm info --table` shows it: its text, where it is, and what a call that reaches it pays.
std::string row_text(const tuning::Row& r) {
  std::string s = "  " + tuning::format_row(r) + "   # line " + std::to_string(r.line);
  std::string asks;
  if (r.in_place != tuning::Want::any) asks = "in_place";
  if (r.placement_now != tuning::Placement::unknown) asks += std::string(asks.empty() ? "" : ", ") + "placement_now";
  if (!asks.empty()) s += "; agreed at the call: " + asks + " (one round of 8-byte frames)";
  return s + "\n";
}

// A tuning file's rows (when there is one), then the built-in table's: the order they are tried in.
std::string tables_text(const tuning::Table* file, const tuning::Table& builtin) {
  std::string out;
  for (const tuning::Table* t : {file, &builtin}) {
    if (t == nullptr) continue;
    out += "  # " + t->source + "\n";
    for (const auto& r : t->rows) out += row_text(r);
  }
  return out;
}

// Which backends auto routes to in this environment (as one rank of a job started here: mpi only under
// mpirun), and which table it routes by (for one host); with `rows` what its rows choose and every row.
std::string auto_text(bool rows) {
  std::string out = "auto routing: ";
  try {
    const autosel::Usable u = autosel::usable_here(Options{}.resolved(), 0, 1);
    std::string names, left;
    for (const auto& n : u.names) names += (names.empty() ? "" : ", ") + n;
    for (const auto& l : u.left_out) left += (left.empty() ? "" : "; ") + l;
    out += "routes to " + names;
    if (u.names.size() == 1) out += " only (one usable backend: every call runs on it)";
    out += left.empty() ? "\n" : "; left out: " + left + "\n";
    const std::string here = autosel::machine_fingerprint(1);
    const autosel::TableChoice t = autosel::choose_table(param_string("MPCOMM_TUNING"), 1);
    const tuning::Table table = tuning::parse_table(t.text, t.source, "auto", autosel::vocabulary());
    out += "  table: " + t.source + ", measured on " + t.machine +
           (t.machine == here ? " (this machine)" : " (this machine: " + here + ")") + ", " +
           std::to_string(table.rows.size()) + " rows; a call no row matches runs on native\n";
    out += "  stored tables for this machine: " + autosel::cache_path(here) + " (mpcomm tune --backends all)\n";
    for (const auto& w : t.warnings) out += "  passed over: " + w + "\n";
    if (rows) {
      out += "  # what rows choose: the backend of each op (sendrecv: of every send and receive, both ends alike)\n";
      out += "  # " + table.source + "\n";
      for (const auto& r : table.rows) out += row_text(r);
    }
  } catch (const Error& e) {
    out += std::string("refused: ") + e.what() + "\n";
  }
  return out;
}

// Which selection table the native backend uses with this environment (MPCOMM_TUNING, MPCOMM_ALGO), and
// with `rows` what its rows choose and every row, in the order they are tried. A bad file or name is
// shown, not thrown.
std::string selection_text(bool rows) {
  std::string out = "native selection: ";
  try {
    const native::Selection sel(Options{});
    const std::string forced = param_string("MPCOMM_ALGO");
    const tuning::Table& builtin = native::builtin_table();
    out += sel.describe() + " (";
    if (sel.file() != nullptr) out += std::to_string(sel.file()->rows.size()) + " + ";
    out += std::to_string(builtin.rows.size()) + " rows)" + (forced.empty() ? "" : "; MPCOMM_ALGO forces " + forced) + "\n";
    if (rows) {
      out += "  # what rows choose (SUBJECT -> CHOICE); rows of one subject are tried in order, the first that fits chooses:\n";
      for (const tuning::Subject& s : native::vocabulary()) {
        if (s.name.empty()) continue;
        std::string choices;
        for (const auto& c : s.choices) choices += (choices.empty() ? "" : " | ") + c;
        out += "  #   " + s.name + " -> " + choices + ": " + s.doc + "\n";
      }
      out += tables_text(sel.file(), builtin);
    }
  } catch (const Error& e) {
    out += std::string("refused: ") + e.what() + "\n";
  }
#ifdef MPCOMM_HAVE_MPI
  out += "mpi calls: ";
  try {
    const mpi::CallsSelection sel(Options{});
    const tuning::Table& builtin = mpi::builtin_calls_table();
    out += sel.describe() + " (" + (sel.file() != nullptr ? std::to_string(sel.file()->rows.size()) + " + " : "") +
           std::to_string(builtin.rows.size()) + " rows)\n";
    if (rows) {
      out += "  # what rows choose: which MPI call an op makes (blocking: MPI_Allreduce ..., watched by the watchdog; "
             "nonblocking: MPI_Iallreduce ..., polled against the deadline)\n";
      out += tables_text(sel.file(), builtin);
    }
  } catch (const Error& e) {
    out += std::string("refused: ") + e.what() + "\n";
  }
#endif
  out += auto_text(rows);
  return out;
}

// How a rank started here would prove it belongs to its job, and whether its links are encrypted.
std::string security_line() {
  std::string how;
  const std::string token = param_string("MPCOMM_TOKEN");
  if (!token.empty()) {
    how = "the secret in MPCOMM_TOKEN, proved on every connection";
  } else if (!net::munge::slurm_job().empty()) {
    std::string why;
    const std::string sock = net::munge::socket_path();
    how = "MUNGE (a Slurm job without MPCOMM_TOKEN; munged at " +
          (sock.empty() ? std::string("its default socket") : sock) +
          (net::munge::available(&why) ? ": answering)" : ": " + why + ")");
  } else {
    how = "the secret mpcomm launch makes (MPCOMM_TOKEN); other launchers: none unless MPCOMM_TOKEN is set";
  }
  return "joins: " + how + "; links between hosts: " +
         (net::tls::requested() ? "TLS 1.3 (MPCOMM_TLS=1, " : "unencrypted (MPCOMM_TLS=1 encrypts them; ") +
         OpenSSL_version(OPENSSL_VERSION) + ")";
}

}  // namespace

// The text `mpcomm info` prints; also the machine section of `mpcomm compare --report`.
std::string info_text() {
  std::string out;
  auto line = [&](const char* fmt, auto... args) {
    char buf[512];
    std::snprintf(buf, sizeof buf, fmt, args...);
    out += buf;
  };
  line("mpcomm %s\n", MPCOMM_VERSION);
  line("backends:\n");
  for (const auto& b : compiled_backends()) line("  %-8s %s\n", b.c_str(), backend_line(b).c_str());
#ifndef MPCOMM_HAVE_GLOO
  line("  %-8s not in this build (needs libgloo-dev at configure time)\n", "gloo");
#endif
#ifndef MPCOMM_HAVE_MPI
  line("  %-8s not in this build (needs libopenmpi-dev at configure time)\n", "mpi");
#endif
#ifndef MPCOMM_HAVE_NCCL
  line("  %-8s not in this build (needs the CUDA toolkit and NCCL at configure time)%s\n", "nccl",
       nccl_headers().empty() ? "" : ("; found NCCL" + nccl_headers()).c_str());
#endif
  {
    std::string why;
    const int gpus = device::cuda_devices(&why);
    if (gpus > 0)
      line("devices: cpu, %d GPU(s) (cuda:0..%d)\n", gpus, gpus - 1);
    else
      line("devices: cpu only (%s)\n", why.c_str());
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  std::string cpu;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string l; std::getline(cpuinfo, l);)
    if (l.rfind("model name", 0) == 0) {
      cpu = l.substr(l.find(':') + 2);
      break;
    }
  line("host: %s, %u cores (%s), %.1f GiB memory, reduction kernels: %s\n", host, std::thread::hardware_concurrency(),
       cpu.c_str(), static_cast<double>(pages) * page / (1 << 30), reduce_kernel_isa());
  line("%s\n", security_line().c_str());
  out += selection_text(false);
  line("native constants (every other choice is a row of the selection table: mpcomm info --table):\n");
  for (const auto& c : native::constants()) line("  %-20s %-10s %s\n", c.name.c_str(), c.value.c_str(), c.doc.c_str());
  line("environment:\n");
  for (const auto& p : all_params()) {
    std::string v = param_string(p.name);
    line("  %-22s %-12s %s\n", p.name, v.empty() ? "(unset)" : v.c_str(), p.doc);
  }
  return out;
}

Runner add_info(CLI::App& app) {
  auto table = std::make_shared<bool>(false);
  app.add_flag("--table", *table, "print only the selection tables in use (native; mpi's calls): what their rows choose, and every row in the order rows are tried");
  return [table] {
    std::fputs(*table ? selection_text(true).c_str() : info_text().c_str(), stdout);
    return 0;
  };
}

}  // namespace mpcomm::cli
