// The timeline of one rank: every op of a traced communicator (and of the communicators split from it)
// with when it was issued, started and ended, and the spans the program adds (the trainer's forwards and
// backwards), written as Chrome trace JSON (chrome://tracing, ui.perfetto.dev) — one process per rank,
// one thread per track (a communicator, or a kind of span), ops that overlap on a track spread over
// extra threads of it ("lanes"), so every thread's events nest.
//
// Clock: ops are stamped with OpClock ticks (the front door reads them anyway); they are mapped to
// steady_clock nanoseconds by the line through two (tick, ns) pairs, one taken when the timeline starts and
// one when it is written, so a TSC's rate error does not grow with the run. offset_ns moves this rank's
// steady_clock onto rank 0's (0 on rank 0's machine; trace.cc measures it elsewhere), and base_ns, rank 0's
// reading when tracing started, becomes time 0 of the file.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/op.h"

namespace mpcomm::detail {

class Timeline {
 public:
  Timeline(int rank, std::string who);

  // A track named `name`; `world_ranks[i]` is the world rank of the communicator's rank i (empty for a
  // track of spans), so a send's peer is written as a world rank. Returns its index.
  uint16_t add_track(const std::string& name, std::vector<int> world_ranks);
  // Renames a track (the trainer calls its groups "tp", "pp", "dp").
  void rename_track(uint16_t track, const std::string& name);
  // The track of spans named `name`, added on first use.
  uint16_t span_track(const std::string& name);
  // A copy: another communicator sharing the timeline may add a track (and move the tracks) meanwhile.
  std::vector<int> world_ranks(uint16_t track) const;

  // An op that ended at `ended` (OpClock), issued and started at op.issued and op.started.
  void op(uint16_t track, const Op& op, const char* backend, uint64_t ended, bool failed);
  // A span of the program's own work on `track`, between two OpClock readings. `args` is a JSON object's
  // members ("\"micro\":3") or empty.
  void span(uint16_t track, std::string name, uint64_t begin, uint64_t end, std::string args = {});

  void set_clock(int64_t offset_ns, int64_t base_ns);
  // While paused nothing is recorded (the write's own gather).
  void pause(bool on) { paused_.store(on, std::memory_order_relaxed); }
  bool paused() const { return paused_.load(std::memory_order_relaxed); }

  // This rank's events and the names of its process and threads, as comma-separated Chrome trace events
  // (no enclosing brackets), so that the fragments of all ranks join with commas into one file.
  std::string json();
  size_t events() const;

 private:
  struct OpEvent {
    uint64_t issued, started, ended, seq;
    size_t count;
    const char* algorithm;
    const char* backend;
    int peer, root, tag;
    OpKind kind;
    DataType dtype;
    ReduceOp redop;
    uint16_t track;
    bool failed;
  };
  struct SpanEvent {
    uint64_t begin, end;
    uint16_t track;
    std::string name, args;
  };
  struct Track {
    std::string name;
    std::vector<int> world_ranks;
    bool spans = false;
  };

  const int rank_;
  const std::string who_;
  const uint64_t tick0_;
  const int64_t ns0_;
  int64_t offset_ns_ = 0, base_ns_ = 0;
  std::atomic<bool> paused_{false};
  mutable std::mutex mu_;
  std::vector<Track> tracks_;
  std::vector<OpEvent> ops_;
  std::vector<SpanEvent> spans_;
};

// steady_clock now, in nanoseconds.
int64_t steady_ns();

// A copy of `s` that lives as long as the program (backend names outlive their communicators here).
const char* intern(std::string_view s);

// MPCOMM_TRACE (trace.cc): traces a communicator mpcomm::create() made; writes a rank's part when the
// communicator that started the timeline closes, and merges the parts when they are all there.
class FrontDoor;
void trace_from_env(Communicator& comm, const std::string& file);
void write_trace_part(FrontDoor& door, const std::string& file);

}  // namespace mpcomm::detail
