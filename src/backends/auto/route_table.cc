// The auto backend's table: its vocabulary, this machine's fingerprint, and which table is in use
// (route_table.h).
#include "backends/auto/route_table.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "device/device.h"
#include "mpcomm/error.h"

namespace mpcomm::autosel {

const tuning::Vocabulary& vocabulary() {
  static const tuning::Vocabulary v = [] {
    tuning::Vocabulary out(static_cast<size_t>(kNumOpKinds));
    const std::vector<std::string> backends = {"native", "gloo", "mpi", "nccl"};
    for (int k = 0; k < kNumOpKinds; ++k) {
      const auto op = static_cast<OpKind>(k);
      if (op == OpKind::recv || op == OpKind::split) continue;  // recv routes by sendrecv; split by none
      tuning::Subject& s = out[static_cast<size_t>(k)];
      s.op = op;
      s.name = op == OpKind::send ? "sendrecv" : std::string(to_string(op));
      s.choices = backends;
      s.doc = op == OpKind::send ? "the backend of every send and receive (both ends route by the message's size)"
                                 : "the backend of every " + s.name;
    }
    return out;
  }();
  return v;
}

int subject_of(OpKind op) { return static_cast<int>(op == OpKind::recv ? OpKind::send : op); }

namespace {

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon != std::string::npos) return line.substr(colon + 1);
  }
  return "unknown_cpu";
}

// Letters and digits kept, every run of anything else one '_', none at either end.
std::string file_word(const std::string& s) {
  std::string out;
  for (char c : s) {
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (keep)
      out += c;
    else if (!out.empty() && out.back() != '_')
      out += '_';
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out.empty() ? "unknown_cpu" : out;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream text;
  text << f.rdbuf();
  return text.str();
}

}  // namespace

std::string machine_fingerprint(int hosts) {
  return file_word(cpu_model()) + ".c" + std::to_string(sysconf(_SC_NPROCESSORS_ONLN)) + ".g" +
         std::to_string(device::cuda_devices()) + ".h" + std::to_string(hosts);
}

std::string cache_path(const std::string& fingerprint) {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  std::string dir = xdg != nullptr && *xdg != '\0' ? xdg : std::string(home != nullptr ? home : "/tmp") + "/.cache";
  return dir + "/mpcomm/tables/" + fingerprint + ".table";
}

TableChoice choose_table(const std::string& tuning_file, int hosts) {
  const std::string here = machine_fingerprint(hosts);
  TableChoice c;
  // A table of this machine, or the reason it is passed over; malformed text throws (naming file, field).
  auto take = [&](const std::string& text, const std::string& source) {
    const tuning::Table t = tuning::parse_table(text, source, "auto", vocabulary());
    if (!t.has_section()) return false;
    if (!t.machine.empty() && t.machine != here) {
      c.warnings.push_back(source + " was measured on machine " + t.machine + ", not this one (" + here +
                           "): its auto rows are not used");
      return false;
    }
    c.text = text;
    c.source = source;
    c.machine = t.machine.empty() ? here : t.machine;
    return true;
  };
  if (!tuning_file.empty()) {
    std::ifstream f(tuning_file);
    if (!f) throw InvalidArgument("mpcomm: tuning file " + tuning_file + ": cannot be read");
    if (take(read_file(tuning_file), "tuning file " + tuning_file)) return c;
  }
  const std::string stored = cache_path(here);
  if (std::ifstream(stored).good() && take(read_file(stored), "the stored table " + stored)) return c;
  c.text = std::string(builtin_table_text());
  c.source = "the built-in table";
  c.machine = tuning::parse_table(c.text, c.source, "auto", vocabulary()).machine;
  return c;
}

}  // namespace mpcomm::autosel
