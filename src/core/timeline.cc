#include "core/timeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <set>

#include "core/op_clock.h"

namespace mpcomm::detail {

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

const char* intern(std::string_view s) {
  static std::mutex mu;
  static std::set<std::string, std::less<>>* names = new std::set<std::string, std::less<>>;  // never freed
  std::lock_guard<std::mutex> lk(mu);
  auto it = names->find(s);
  if (it == names->end()) it = names->emplace(s).first;
  return it->c_str();
}

namespace {

// Lanes of one track: a thread id per lane, tracks 1000 ids apart (thread ids only need to be distinct
// within a process).
constexpr int kLanesPerTrack = 1000;

void append_escaped(std::string& out, std::string_view s) {
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
}

}  // namespace

Timeline::Timeline(int rank, std::string who)
    : rank_(rank), who_(std::move(who)), tick0_(OpClock::now()), ns0_(steady_ns()) {}

uint16_t Timeline::add_track(const std::string& name, std::vector<int> world_ranks) {
  std::lock_guard<std::mutex> lk(mu_);
  tracks_.push_back({name, std::move(world_ranks), false});
  return static_cast<uint16_t>(tracks_.size() - 1);
}

void Timeline::rename_track(uint16_t track, const std::string& name) {
  std::lock_guard<std::mutex> lk(mu_);
  if (track < tracks_.size()) tracks_[track].name = name;
}

uint16_t Timeline::span_track(const std::string& name) {
  std::lock_guard<std::mutex> lk(mu_);
  for (size_t i = 0; i < tracks_.size(); ++i)
    if (tracks_[i].spans && tracks_[i].name == name) return static_cast<uint16_t>(i);
  tracks_.push_back({name, {}, true});
  return static_cast<uint16_t>(tracks_.size() - 1);
}

std::vector<int> Timeline::world_ranks(uint16_t track) const {
  std::lock_guard<std::mutex> lk(mu_);
  return tracks_.at(track).world_ranks;
}

void Timeline::op(uint16_t track, const Op& o, const char* backend, uint64_t ended, bool failed) {
  if (paused()) return;
  OpEvent e{o.issued != 0 ? o.issued : o.started,
            o.started != 0 ? o.started : ended,
            ended,
            o.seq,
            o.count,
            o.algorithm,
            backend,
            o.peer,
            o.root,
            o.tag,
            o.kind,
            o.dtype,
            o.redop,
            track,
            failed};
  if (e.issued > e.started) e.issued = e.started;
  std::lock_guard<std::mutex> lk(mu_);
  ops_.push_back(e);
}

void Timeline::span(uint16_t track, std::string name, uint64_t begin, uint64_t end, std::string args) {
  if (paused()) return;
  std::lock_guard<std::mutex> lk(mu_);
  spans_.push_back({begin, std::max(begin, end), track, std::move(name), std::move(args)});
}

void Timeline::set_clock(int64_t offset_ns, int64_t base_ns) {
  std::lock_guard<std::mutex> lk(mu_);
  offset_ns_ = offset_ns;
  base_ns_ = base_ns;
}

size_t Timeline::events() const {
  std::lock_guard<std::mutex> lk(mu_);
  return ops_.size() + spans_.size();
}

std::string Timeline::json() {
  // The second (tick, ns) pair: ticks map to nanoseconds by the line through both.
  const uint64_t tick1 = OpClock::now();
  const int64_t ns1 = steady_ns();
  std::lock_guard<std::mutex> lk(mu_);
  const double ns_per_tick =
      tick1 > tick0_ ? static_cast<double>(ns1 - ns0_) / static_cast<double>(tick1 - tick0_) : 1.0;
  auto us = [&](uint64_t tick) {  // microseconds on rank 0's clock since tracing started
    const double ns = static_cast<double>(ns0_ + offset_ns_ - base_ns_) +
                      (static_cast<double>(tick) - static_cast<double>(tick0_)) * ns_per_tick;
    return ns / 1e3;
  };

  // Every event as (track, first tick, last tick, index): ops first, then spans.
  struct Item {
    uint16_t track;
    uint64_t begin, end;
    size_t index;
    bool span;
  };
  std::vector<Item> items;
  items.reserve(ops_.size() + spans_.size());
  for (size_t i = 0; i < ops_.size(); ++i) items.push_back({ops_[i].track, ops_[i].issued, ops_[i].ended, i, false});
  for (size_t i = 0; i < spans_.size(); ++i)
    items.push_back({spans_[i].track, spans_[i].begin, spans_[i].end, i, true});
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return a.track != b.track ? a.track < b.track : a.begin < b.begin;
  });

  std::string out;
  out.reserve(items.size() * 160 + 512);
  char buf[256];
  const std::string pid = std::to_string(rank_);
  auto sep = [&] {
    if (!out.empty()) out += ",\n";
  };
  sep();
  out += "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"args\":{\"name\":\"rank " + pid + " (";
  append_escaped(out, who_);
  out += ")\"}},\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" + pid + ",\"args\":{\"sort_index\":" + pid +
         "}}";

  std::vector<uint64_t> lane_end;  // per lane of the current track: its last event's end
  std::vector<bool> lane_named;
  int current = -1;
  auto x_event = [&](const char* name_prefix, std::string_view name, const char* cat, int tid, uint64_t b, uint64_t e) {
    sep();
    out += "{\"name\":\"";
    out += name_prefix;
    append_escaped(out, name);
    out += "\",\"cat\":\"";
    out += cat;
    // Both ends rounded to the printed nanosecond, so events that touch do not overlap once printed.
    const double tb = std::round(us(b) * 1e3) / 1e3, te = std::round(us(e) * 1e3) / 1e3;
    std::snprintf(buf, sizeof buf, "\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f", rank_, tid, tb,
                  te - tb);
    out += buf;
  };
  for (const Item& it : items) {
    if (it.track != current) {
      current = it.track;
      lane_end.clear();
      lane_named.clear();
    }
    size_t lane = 0;
    while (lane < lane_end.size() && lane_end[lane] > it.begin) ++lane;
    if (lane >= static_cast<size_t>(kLanesPerTrack)) lane = kLanesPerTrack - 1;  // overlapping: draw on the last
    if (lane >= lane_end.size()) {
      lane_end.resize(lane + 1, 0);
      lane_named.resize(lane + 1, false);
    }
    lane_end[lane] = std::max(lane_end[lane], it.end);
    const int tid = static_cast<int>(it.track) * kLanesPerTrack + static_cast<int>(lane) + 1;
    if (!lane_named[lane]) {
      lane_named[lane] = true;
      sep();
      out += "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"tid\":" + std::to_string(tid) +
             ",\"args\":{\"name\":\"";
      const Track& t = tracks_[it.track];
      append_escaped(out, t.name);
      if (!t.world_ranks.empty()) {  // the group: its world ranks (the first 8)
        out += " [ranks ";
        for (size_t i = 0; i < t.world_ranks.size() && i < 8; ++i)
          out += (i ? "," : "") + std::to_string(t.world_ranks[i]);
        out += t.world_ranks.size() > 8 ? ",...]" : "]";
      }
      if (lane > 0) out += " (" + std::to_string(lane + 1) + ")";
      out += "\"}},\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":" + pid + ",\"tid\":" + std::to_string(tid) +
             ",\"args\":{\"sort_index\":" + std::to_string(tid) + "}}";
    }
    if (it.span) {
      const SpanEvent& s = spans_[it.index];
      x_event("", s.name, "compute", tid, s.begin, s.end);
      out += s.args.empty() ? "}" : ",\"args\":{" + s.args + "}}";
      continue;
    }
    const OpEvent& e = ops_[it.index];
    const std::string_view kind = to_string(e.kind);
    const std::vector<int>& world = tracks_[e.track].world_ranks;
    auto world_rank = [&](int r) { return r >= 0 && static_cast<size_t>(r) < world.size() ? world[r] : r; };
    if (e.started > e.issued) {
      x_event("queued: ", kind, "queued", tid, e.issued, e.started);
      out += "}";
    }
    x_event("", kind, "comm", tid, e.started, e.ended);
    std::snprintf(buf, sizeof buf, ",\"args\":{\"bytes\":%zu,\"count\":%zu,\"dtype\":\"%s\",\"seq\":%llu",
                  e.count * dtype_size(e.dtype), e.count, std::string(to_string(e.dtype)).c_str(),
                  static_cast<unsigned long long>(e.seq));
    out += buf;
    const bool p2p = e.kind == OpKind::send || e.kind == OpKind::recv;
    if (p2p) {
      out += e.peer == kAnySource ? ",\"peer\":\"any\"" : ",\"peer\":" + std::to_string(world_rank(e.peer));
      out += ",\"tag\":" + std::to_string(e.tag);
    }
    if (e.kind == OpKind::allreduce || e.kind == OpKind::reduce || e.kind == OpKind::reduce_scatter)
      out += ",\"op\":\"" + std::string(to_string(e.redop)) + "\"";
    if (e.kind == OpKind::broadcast || e.kind == OpKind::reduce || e.kind == OpKind::gather ||
        e.kind == OpKind::scatter)
      out += ",\"root\":" + std::to_string(world_rank(e.root));
    if (e.algorithm != nullptr) {
      out += ",\"algorithm\":\"";
      append_escaped(out, e.algorithm);
      out += "\"";
    }
    out += ",\"backend\":\"";
    out += e.backend;
    out += "\"";
    if (e.started > e.issued) {
      std::snprintf(buf, sizeof buf, ",\"queued_us\":%.3f", us(e.started) - us(e.issued));
      out += buf;
    }
    if (e.failed) out += ",\"failed\":true";
    out += "}}";
  }
  return out;
}

}  // namespace mpcomm::detail
