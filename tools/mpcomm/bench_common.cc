// Sizes, bus-bandwidth factors and the JSON row format of mpcomm bench.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "bench.h"

namespace mpcomm::bench {

const std::vector<std::string>& all_ops() {
  static const std::vector<std::string> ops = {"allreduce",      "broadcast", "reduce",    "allgather",
                                               "reduce_scatter", "gather",    "scatter",   "alltoall",
                                               "sendrecv",       "alltoallv", "allgatherv"};
  return ops;
}

// nccl-tests (doc/PERFORMANCE.md): the factor turns algorithm bandwidth into the bandwidth each link
// would need, so that numbers compare across rank counts.
double busbw_factor(const std::string& op, int n) {
  const double nn = n;
  if (op == "allreduce") return n > 1 ? 2 * (nn - 1) / nn : 0;
  if (op == "allgather" || op == "reduce_scatter" || op == "alltoall" || op == "gather" || op == "scatter" ||
      op == "alltoallv" || op == "allgatherv")
    return (nn - 1) / nn;
  return 1;  // broadcast, reduce, sendrecv
}

std::vector<size_t> sizes(const Config& c) {
  std::vector<size_t> out;
  double s = static_cast<double>(c.min_bytes);
  while (s <= static_cast<double>(c.max_bytes) * (1 + 1e-9)) {
    size_t v = static_cast<size_t>(std::llround(s));
    if (out.empty() || v != out.back()) out.push_back(v);
    s *= c.factor;
  }
  out.insert(out.end(), c.extra_sizes.begin(), c.extra_sizes.end());
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

size_t parse_bytes(const std::string& s) {
  if (s.empty()) throw InvalidArgument("mpcomm bench: empty size");
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  std::string suffix(end);
  double mult = 1;
  if (suffix == "K" || suffix == "k" || suffix == "KiB" || suffix == "KB") mult = 1024.0;
  else if (suffix == "M" || suffix == "m" || suffix == "MiB" || suffix == "MB") mult = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "g" || suffix == "GiB" || suffix == "GB") mult = 1024.0 * 1024 * 1024;
  else if (!suffix.empty() && suffix != "B") throw InvalidArgument("mpcomm bench: bad size '" + s + "' (use e.g. 8, 64K, 16M, 1G)");
  if (end == s.c_str() || v < 0) throw InvalidArgument("mpcomm bench: bad size '" + s + "'");
  return static_cast<size_t>(v * mult);
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

std::string human_bytes(size_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 3) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, v == std::floor(v) ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

std::string to_json(const Row& r) {
  nlohmann::json j = {{"backend", r.backend}, {"op", r.op},         {"bytes", r.bytes},         {"count", r.count},
                      {"dtype", r.dtype},     {"redop", r.redop},   {"root", r.root},           {"ranks", r.ranks},
                      {"hosts", r.hosts},     {"inplace", r.inplace}, {"time_us", r.time_us},   {"algbw_gbs", r.algbw_gbs},
                      {"busbw_gbs", r.busbw_gbs}, {"wrong", r.wrong}, {"p50_us", r.p50_us},     {"p99_us", r.p99_us},
                      {"device", r.device},   {"start_s", r.start_s}, {"end_s", r.end_s}};
  if (!r.transport.empty()) j["transport"] = r.transport;
  if (!std::isnan(r.cpus_round_trip_ns)) j["cpus_round_trip_ns"] = r.cpus_round_trip_ns;
  if (!r.algorithm.empty()) j["algorithm"] = r.algorithm;
  if (!r.ran.empty()) j["ran"] = r.ran;
  if (r.imbalance > 0) j["imbalance"] = r.imbalance;
  if (r.compute_us > 0) j["compute_us"] = r.compute_us, j["wait_us"] = r.wait_us;
  if (!r.refused.empty()) j["refused"] = r.refused;
  return j.dump();
}

Row row_from_json(const std::string& line) {
  auto j = nlohmann::json::parse(line);
  Row r;
  r.backend = j.at("backend");
  r.op = j.at("op");
  r.bytes = j.at("bytes");
  r.count = j.at("count");
  r.dtype = j.at("dtype");
  r.redop = j.at("redop");
  r.root = j.at("root");
  r.ranks = j.at("ranks");
  r.hosts = j.at("hosts");
  r.inplace = j.at("inplace");
  r.time_us = j.at("time_us");
  r.algbw_gbs = j.at("algbw_gbs");
  r.busbw_gbs = j.at("busbw_gbs");
  r.wrong = j.at("wrong");
  r.p50_us = j.at("p50_us");
  r.p99_us = j.at("p99_us");
  r.start_s = j.value("start_s", 0.0);
  r.end_s = j.value("end_s", 0.0);
  r.cpus_round_trip_ns = j.value("cpus_round_trip_ns", std::numeric_limits<double>::quiet_NaN());
  r.device = j.value("device", "cpu");
  r.transport = j.value("transport", "");
  r.algorithm = j.value("algorithm", "");
  r.ran = j.value("ran", "");
  r.imbalance = j.value("imbalance", 0.0);
  r.compute_us = j.value("compute_us", 0.0);
  r.wait_us = j.value("wait_us", 0.0);
  r.refused = j.value("refused", "");
  return r;
}

std::vector<std::string> all_backends_for(const std::string& device) {
  std::vector<std::string> out;
  for (const auto& b : available_backends())
    if (b != "nccl" || device != "cpu") out.push_back(b);
  return out;
}

}  // namespace mpcomm::bench
