#include "core/flight_recorder.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "core/op_clock.h"
#include "settings/settings.h"

namespace mpcomm::detail {

namespace {

const char* state_name(FlightRecorder::State s) {
  switch (s) {
    case FlightRecorder::State::queued: return "QUEUED";
    case FlightRecorder::State::running: return "RUNNING";
    case FlightRecorder::State::done: return "done";
    case FlightRecorder::State::failed: return "FAILED";
  }
  return "?";
}

}  // namespace

FlightRecorder::FlightRecorder(size_t capacity) : ring_(capacity), t0_(OpClock::now()) {}

FlightRecorder::Entry* FlightRecorder::entry(uint64_t ticket) {
  const uint64_t next = next_.load(std::memory_order_acquire);
  if (ring_.empty() || ticket >= next || next - ticket > ring_.size()) return nullptr;  // overwritten since
  return &ring_[ticket % ring_.size()];
}

uint64_t FlightRecorder::start(const Op& op, uint64_t at, State state) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ring_.empty()) return 0;
  const uint64_t ticket = next_.load(std::memory_order_relaxed);
  Entry& e = ring_[ticket % ring_.size()];
  e.op = op;
  e.op.send = nullptr;
  e.op.recv = nullptr;
  e.op.v = nullptr;  // the counts live only as long as the op runs
  e.state.store(state, std::memory_order_relaxed);
  e.start = at;
  e.end.store(0, std::memory_order_relaxed);
  e.algorithm.store(nullptr, std::memory_order_relaxed);
  e.error.clear();
  next_.store(ticket + 1, std::memory_order_release);
  return ticket;
}

void FlightRecorder::running(uint64_t ticket, uint64_t at) {
  std::lock_guard<std::mutex> lock(mu_);
  if (Entry* e = entry(ticket)) {
    e->state = State::running;
    e->start = at;
  }
}

void FlightRecorder::finish(uint64_t ticket, State state, uint64_t at, const char* algorithm, const std::string& error) {
  if (state == State::done && error.empty()) {  // the common case: no lock (see Entry)
    if (Entry* e = entry(ticket)) {
      e->algorithm.store(algorithm, std::memory_order_relaxed);
      e->end.store(at, std::memory_order_relaxed);
      e->state.store(state, std::memory_order_release);
    }
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  Entry* e = entry(ticket);
  if (e == nullptr) return;
  e->state.store(state, std::memory_order_relaxed);
  e->algorithm.store(algorithm, std::memory_order_relaxed);
  e->end.store(at, std::memory_order_relaxed);
  if (!error.empty()) e->error = error.substr(0, error.find('\n'));
}

std::string FlightRecorder::dump(const std::string& who) const {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t next = next_.load(std::memory_order_acquire);
  const uint64_t n = std::min<uint64_t>(next, ring_.size());
  std::string out = "mpcomm flight recorder: " + who + ": last " + std::to_string(n) + " of " + std::to_string(next) +
                    " operations, oldest first\n";
  char line[512];
  std::snprintf(line, sizeof line, "  %-6s %-15s %12s %-9s %-5s %4s %4s %4s %-8s %12s %10s  %-20s\n", "seq", "op",
                "count", "dtype", "redop", "root", "peer", "tag", "state", "start(ms)", "took(ms)", "algorithm");
  out += line;
  for (uint64_t t = next - n; t < next; ++t) {
    const Entry& e = ring_[t % ring_.size()];
    const Op& op = e.op;
    const bool p2p = op.kind == OpKind::send || op.kind == OpKind::recv;
    auto num = [](int v, bool show) { return show ? std::to_string(v) : std::string("-"); };
    char took[32] = "-";
    const uint64_t end = e.end.load(std::memory_order_acquire);
    if (end != 0) std::snprintf(took, sizeof took, "%.3f", OpClock::seconds(end - e.start) * 1e3);
    const char* algorithm = e.algorithm.load(std::memory_order_relaxed);
    std::snprintf(line, sizeof line, "  %-6s %-15s %12zu %-9s %-5s %4s %4s %4s %-8s %12.3f %10s  %-20s",
                  ((p2p ? "p" : "#") + std::to_string(op.seq)).c_str(), std::string(to_string(op.kind)).c_str(),
                  op.count, std::string(to_string(op.dtype)).c_str(),
                  op.reduces() ? std::string(to_string(op.redop)).c_str() : "-", num(op.root, op.rooted()).c_str(),
                  (op.kind == OpKind::recv && op.peer == kAnySource ? std::string("any") : num(op.peer, p2p)).c_str(),
                  num(op.tag, p2p).c_str(), state_name(e.state.load(std::memory_order_acquire)),
                  OpClock::seconds(e.start - t0_) * 1e3, took, algorithm != nullptr ? algorithm : "-");
    out += line;
    if (!e.error.empty()) out += "  " + e.error;
    out += "\n";
  }
  return out;
}

std::string FlightRecorder::write_once(const std::string& who, const std::string& file_tag) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (written_ || ring_.empty()) return "";
    written_ = true;
  }
  const std::string text = dump(who);
  const std::string dir = param_string("MPCOMM_TRACE_DIR");
  if (!dir.empty()) {
    const std::string path = dir + "/mpcomm-trace-" + file_tag + ".txt";
    if (FILE* f = std::fopen(path.c_str(), "w")) {
      std::fputs(text.c_str(), f);
      std::fclose(f);
      std::fprintf(stderr, "mpcomm: %s: flight record written to %s\n", who.c_str(), path.c_str());
      return path;
    }
    std::fprintf(stderr, "mpcomm: cannot write the flight record to %s; here it is:\n", path.c_str());
  }
  std::fputs(text.c_str(), stderr);
  return "stderr";
}

}  // namespace mpcomm::detail
