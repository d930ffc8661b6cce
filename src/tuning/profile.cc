#include "tuning/profile.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "mpcomm/error.h"

namespace mpcomm::tuning {
namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r"), e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

double number(const std::string& v, const std::string& where) {
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || !std::isfinite(d) || d < 0)
    throw InvalidArgument(where + ": '" + v + "' is not a number of at least 0");
  return d;
}

// "key=value key=value ..." after a backend or op line's names.
std::map<std::string, std::string> fields(std::istringstream& in, const std::string& where) {
  std::map<std::string, std::string> f;
  std::string w;
  while (in >> w) {
    const auto eq = w.find('=');
    if (eq == std::string::npos || eq == 0) throw InvalidArgument(where + ": '" + w + "' is not key=value");
    f[w.substr(0, eq)] = w.substr(eq + 1);
  }
  return f;
}

double take(std::map<std::string, std::string>& f, const std::string& key, const std::string& where) {
  auto it = f.find(key);
  if (it == f.end()) throw InvalidArgument(where + ": missing field " + key);
  const double d = number(it->second, where + ": " + key);
  f.erase(it);
  return d;
}

LinkCost link(std::map<std::string, std::string>& f, const std::string& level, const std::string& where) {
  LinkCost l;
  l.alpha_s = take(f, level + "_alpha_us", where) * 1e-6;
  l.bw_Bps = take(f, level + "_bw_gbs", where) * 1e9;
  if (l.bw_Bps <= 0) throw InvalidArgument(where + ": " + level + "_bw_gbs must be above 0");
  return l;
}

void no_more(const std::map<std::string, std::string>& f, const std::string& where) {
  if (!f.empty()) throw InvalidArgument(where + ": unknown field " + f.begin()->first);
}

std::string num(double v) {
  std::ostringstream o;
  o.precision(6);
  o << v;
  return o.str();
}

std::string link_text(const std::string& level, const LinkCost& l) {
  return " " + level + "_alpha_us=" + num(l.alpha_s * 1e6) + " " + level + "_bw_gbs=" + num(l.bw_Bps / 1e9);
}

// The published profiles. Each constant's source is in docs/planner.md; in short: intra bandwidth is the
// effective NVLink rate NCCL's ring reaches, inter bandwidth the per-NIC rate NCCL reaches times 8 NICs, the
// latencies set so that the model gives the published small-message all-reduce time of 16 H100 nodes, FLOP/s
// and memory the datasheets'.
struct Published {
  const char *name, *description, *flops, *memory_gb, *mfu, *intra_bw_gbs, *inter_bw_gbs;
};
const Published kPublished[] = {
    {"dgx-a100-ib200",
     "DGX A100: 8 x A100 SXM 80 GB per node (NVLink 3 through NVSwitch), 8 x HDR 200 Gb/s InfiniBand per node",
     "312e12", "80", "0.45", "240", "192"},
    {"dgx-h100-ndr400",
     "DGX H100: 8 x H100 SXM 80 GB per node (NVLink 4 through NVSwitch), 8 x NDR 400 Gb/s InfiniBand per node",
     "989e12", "80", "0.4", "370", "384"},
    {"h200-ndr400",
     "HGX H200: 8 x H200 SXM 141 GB per node (NVLink 4 through NVSwitch), 8 x NDR 400 Gb/s InfiniBand per node",
     "989e12", "141", "0.4", "370", "384"},
};

std::string published_text(const Published& p) {
  return std::string("mpcomm-profile 1\nname = ") + p.name + "\ndescription = " + p.description +
         "\nranks_per_host = 8\nflops = " + p.flops + "\nmemory_gb = " + p.memory_gb + "\nmfu = " + p.mfu +
         "\ndefault_backend = nccl\nbackend nccl overhead_us=8 intra_alpha_us=1 intra_bw_gbs=" + p.intra_bw_gbs +
         " inter_alpha_us=5 inter_bw_gbs=" + p.inter_bw_gbs + " algorithms=ring,tree\n";
}

}  // namespace

const BackendCosts& Profile::backend(const std::string& b) const {
  auto it = backends.find(b);
  if (it != backends.end()) return it->second;
  std::string have;
  for (const auto& [n, c] : backends) have += (have.empty() ? "" : ", ") + n;
  throw InvalidArgument("profile " + name + " has no constants for backend '" + b + "' (it has: " + have + ")");
}

Profile parse_profile(const std::string& text, const std::string& origin) {
  Profile p;
  std::istringstream in(text);
  std::string line;
  int n = 0;
  bool header = false;
  while (std::getline(in, line)) {
    ++n;
    const std::string where = "profile " + origin + ": line " + std::to_string(n);
    if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    line = trim(line);
    if (line.empty()) continue;
    if (!header) {
      if (line != "mpcomm-profile 1")
        throw InvalidArgument(where + ": expected 'mpcomm-profile 1' first (is this a profile?)");
      header = true;
      continue;
    }
    std::istringstream words(line);
    std::string first;
    words >> first;
    if (first == "cold") {
      std::string backend, op;
      words >> backend >> op;
      if (op.empty()) throw InvalidArgument(where + ": 'cold' needs a backend and an op");
      const std::string at = where + " (cold " + backend + " " + op + ")";
      auto f = fields(words, at);
      if (!p.backends.count(backend)) throw InvalidArgument(at + ": comes before a 'backend " + backend + "' line");
      if (algorithms_for(op, CommShape{}).empty()) throw InvalidArgument(at + ": unknown op '" + op + "'");
      BackendCosts::ColdCost k;
      k.across_hosts = take(f, "across_hosts", at) != 0;
      k.wait_s = take(f, "wait_us", at) * 1e-6;
      k.scale = take(f, "scale", at);
      k.wake_s = take(f, "wake_us", at) * 1e-6;
      no_more(f, at);
      auto& cold = p.backends[backend].cold[op];
      const bool grows = cold.empty() || k.across_hosts != cold.back().across_hosts || k.wait_s > cold.back().wait_s;
      if (!(k.wait_s > 0) || !grows || (!cold.empty() && cold.back().across_hosts && !k.across_hosts))
        throw InvalidArgument(at +
                              ": wait_us must be above 0 and grow from one cold line of the op and level to the "
                              "next (within a host first, then across hosts)");
      cold.push_back(k);
      continue;
    }
    if (first == "backend" || first == "op") {
      std::string backend, op;
      words >> backend;
      if (first == "op") words >> op;
      if (backend.empty() || (first == "op" && op.empty()))
        throw InvalidArgument(where + ": '" + first + "' needs " + (first == "op" ? "a backend and an op" : "a name"));
      auto f = fields(words, where + " (" + first + " " + backend + (op.empty() ? "" : " " + op) + ")");
      const std::string at = where + " (" + first + " " + backend + (op.empty() ? "" : " " + op) + ")";
      if (first == "backend") {
        BackendCosts& c = p.backends[backend];
        c.overhead_s = take(f, "overhead_us", at) * 1e-6;
        c.intra = link(f, "intra", at);
        c.inter = link(f, "inter", at);
        if (auto it = f.find("algorithms"); it != f.end()) {
          c.algorithms.clear();
          std::istringstream a(it->second);
          for (std::string x; std::getline(a, x, ',');) {
            if (x != "ring" && x != "tree" && x != "hierarchical" && x != "direct")
              throw InvalidArgument(at + ": algorithms: unknown algorithm '" + x + "'");
            c.algorithms.push_back(x);
          }
          f.erase(it);
        }
        no_more(f, at);
      } else {
        if (!p.backends.count(backend)) throw InvalidArgument(at + ": comes before a 'backend " + backend + "' line");
        if (algorithms_for(op, CommShape{}).empty()) throw InvalidArgument(at + ": unknown op '" + op + "'");
        BackendCosts::OpCosts o;
        if (f.count("below_bytes")) o.below_bytes = take(f, "below_bytes", at);
        if (f.count("pairs")) o.pairs = take(f, "pairs", at) != 0;
        if (f.count("at_bytes")) o.at_bytes = take(f, "at_bytes", at);
        auto& bands = p.backends[backend].ops[op];
        for (auto b = bands.rbegin(); b != bands.rend(); ++b) {
          if (b->pairs != o.pairs) continue;
          if (!(o.below_bytes > b->below_bytes))
            throw InvalidArgument(at + ": below_bytes must grow from one band of the op to the next");
          break;
        }
        o.overhead_s = take(f, "overhead_us", at) * 1e-6;
        o.intra = link(f, "intra", at);
        o.has_intra = true;
        if (auto it = f.find("algorithm"); it != f.end()) {
          o.algorithm = it->second;
          f.erase(it);
          if (o.algorithm != "ring" && o.algorithm != "tree" && o.algorithm != "hierarchical" &&
              o.algorithm != "direct")
            throw InvalidArgument(at + ": unknown algorithm '" + o.algorithm + "'");
        }
        if (f.count("inter_alpha_us") || f.count("inter_bw_gbs")) {
          o.inter = link(f, "inter", at);
          o.has_inter = true;
        }
        no_more(f, at);
        bands.push_back(o);
      }
      continue;
    }
    const auto eq = line.find('=');
    if (eq == std::string::npos) throw InvalidArgument(where + ": '" + line + "' is not key = value");
    const std::string key = trim(line.substr(0, eq)), value = trim(line.substr(eq + 1));
    const std::string at = where + ": " + key;
    if (key == "name")
      p.name = value;
    else if (key == "description")
      p.description = value;
    else if (key == "default_backend")
      p.default_backend = value;
    else if (key == "ranks_per_host")
      p.ranks_per_host = static_cast<int>(number(value, at));
    else if (key == "cores_per_host")
      p.cores_per_host = static_cast<int>(number(value, at));
    else if (key == "emulated_hosts")
      p.emulated_hosts = number(value, at) != 0;
    else if (key == "flops")
      p.flops = number(value, at);
    else if (key == "memory_gb")
      p.memory_gb = number(value, at);
    else if (key == "mfu")
      p.mfu = number(value, at);
    else
      throw InvalidArgument(where + ": unknown key '" + key + "'");
  }
  if (!header) throw InvalidArgument("profile " + origin + ": empty (expected 'mpcomm-profile 1' first)");
  if (p.name.empty()) throw InvalidArgument("profile " + origin + ": missing field name");
  if (p.backends.empty()) throw InvalidArgument("profile " + origin + ": missing a 'backend' line");
  if (p.ranks_per_host < 1) throw InvalidArgument("profile " + origin + ": missing field ranks_per_host (at least 1)");
  if (p.mfu <= 0 || p.mfu > 1) throw InvalidArgument("profile " + origin + ": mfu must be in (0, 1]");
  if (p.default_backend.empty()) p.default_backend = p.backends.begin()->first;
  p.backend(p.default_backend);
  return p;
}

std::string format_profile(const Profile& p) {
  std::ostringstream o;
  o << "mpcomm-profile 1\nname = " << p.name << "\n";
  if (!p.description.empty()) o << "description = " << p.description << "\n";
  o << "ranks_per_host = " << p.ranks_per_host << "\ncores_per_host = " << p.cores_per_host << "\n";
  o << "emulated_hosts = " << (p.emulated_hosts ? 1 : 0) << "\n";
  o << "flops = " << num(p.flops) << "\nmemory_gb = " << num(p.memory_gb) << "\nmfu = " << num(p.mfu) << "\n";
  o << "default_backend = " << p.default_backend << "\n";
  for (const auto& [name, c] : p.backends) {
    o << "backend " << name << " overhead_us=" << num(c.overhead_s * 1e6) << link_text("intra", c.intra)
      << link_text("inter", c.inter) << " algorithms=";
    for (size_t i = 0; i < c.algorithms.size(); ++i) o << (i ? "," : "") << c.algorithms[i];
    o << "\n";
    for (const auto& [op, bands] : c.ops)
      for (const auto& oc : bands) {
        o << "op " << name << " " << op << (oc.pairs ? " pairs=1" : "");
        if (std::isfinite(oc.below_bytes)) o << " below_bytes=" << static_cast<long long>(oc.below_bytes);
        if (oc.at_bytes > 0) o << " at_bytes=" << static_cast<long long>(oc.at_bytes);
        o << " overhead_us=" << num(oc.overhead_s * 1e6) << link_text("intra", oc.intra);
        if (oc.has_inter) o << link_text("inter", oc.inter);
        if (!oc.algorithm.empty()) o << " algorithm=" << oc.algorithm;
        o << "\n";
      }
    for (const auto& [op, list] : c.cold)
      for (const auto& k : list)
        o << "cold " << name << " " << op << " across_hosts=" << (k.across_hosts ? 1 : 0)
          << " wait_us=" << num(k.wait_s * 1e6) << " scale=" << num(k.scale) << " wake_us=" << num(k.wake_s * 1e6)
          << "\n";
  }
  return o.str();
}

const std::vector<std::string>& published_profiles() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& p : kPublished) n.push_back(p.name);
    return n;
  }();
  return names;
}

Profile published_profile(const std::string& name) {
  for (const auto& p : kPublished)
    if (name == p.name) return parse_profile(published_text(p), name);
  std::string have;
  for (const auto& n : published_profiles()) have += ", " + n;
  throw InvalidArgument("unknown profile '" + name + "' (known: this-machine" + have + ", or a profile file)");
}

std::string this_machine_profile_path() {
  if (const char* d = std::getenv("MPCOMM_PROFILE_DIR"); d && *d) return std::string(d) + "/this-machine.profile";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.cache/mpcomm/this-machine.profile";
}

Profile load_profile(const std::string& name_or_path) {
  std::string path = name_or_path;
  if (name_or_path == "this-machine") {
    path = this_machine_profile_path();
  } else if (name_or_path.find('/') == std::string::npos && !std::ifstream(name_or_path)) {
    return published_profile(name_or_path);  // a bare name that is no file here: a built-in one
  }
  std::ifstream f(path);
  if (!f) {
    if (name_or_path == "this-machine")
      throw InvalidArgument("profile this-machine: " + path + " does not exist (write it: mpcomm plan --calibrate)");
    throw InvalidArgument("profile " + path + ": cannot be read");
  }
  std::stringstream s;
  s << f.rdbuf();
  return parse_profile(s.str(), path);
}

}  // namespace mpcomm::tuning
