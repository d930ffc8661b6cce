// mpcomm/trace.h — a timeline of a job's communication and compute, as one Chrome trace / Perfetto JSON
// file (open it in ui.perfetto.dev or chrome://tracing).
//
// A traced communicator records every op it runs — kind, bytes, dtype, peer or root (as world ranks),
// algorithm, backend, and when it was issued, started and ended — and so do the communicators split from
// it afterwards, each on its own track. A program adds spans of its own work (forward, backward, ...).
// write() gathers every rank's events into one file on rank 0: one process per rank, one thread per track,
// all on rank 0's clock (ranks on other machines are moved onto it by a ping-pong at start(), NTP-style:
// the sample with the shortest round trip; ranks on rank 0's machine share its clock).
//
// MPCOMM_TRACE=FILE traces every program on the library without a change to it: the first communicator a
// process creates (mpcomm::create, init_from_env) is traced, later ones it creates join the same timeline,
// and when that first communicator is destroyed each rank writes FILE.rank<R>of<N>; the rank that writes
// the last part merges them all into FILE (when the ranks share a file system; else gather the parts and run
// `mpcomm trace-merge FILE PARTS...`).
//
// Recording costs a clock reading and an append per op (under a mutex); nothing when tracing is off.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mpcomm/communicator.h"
#include "mpcomm/export.h"

namespace mpcomm::trace {

// Collective over `world`: starts recording its ops (and those of communicators split from it from now
// on), after measuring each rank's clock against rank 0's. Does nothing if `world` is traced already.
MPCOMM_API void start(Communicator& world);
MPCOMM_API bool enabled(const Communicator& comm);
// Names comm's track ("tp", "dp"); no-op when comm is not traced.
MPCOMM_API void name(Communicator& comm, std::string_view track);

// A clock reading for span() (the clock ops are stamped with).
MPCOMM_API uint64_t now();
// Records [begin, end) of the program's own work on the track `track` of comm's timeline. `args` are the
// members of a JSON object ("\"micro\": 3") shown with the span. No-op when comm is not traced.
MPCOMM_API void span(Communicator& comm, std::string_view track, std::string_view name, uint64_t begin, uint64_t end,
                     std::string_view args = {});

// A span from its construction to its destruction (nothing is copied or read when comm is not traced).
class Span {
 public:
  Span(Communicator& comm, std::string_view track, std::string_view name, std::string_view args = {})
      : comm_(enabled(comm) ? &comm : nullptr) {
    if (comm_ == nullptr) return;
    track_ = track, name_ = name, args_ = args;
    begin_ = now();
  }
  ~Span() {
    if (comm_ != nullptr) span(*comm_, track_, name_, begin_, now(), args_);
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  Communicator* comm_;
  std::string track_, name_, args_;
  uint64_t begin_ = 0;
};

// Collective over `world` (the communicator start() was called on): gathers every rank's events to rank 0,
// which writes them to `path` (replacing it). Recording goes on afterwards. Returns the bytes written on
// rank 0, 0 elsewhere. Uses point-to-point messages with tag kWriteTag on `world`.
inline constexpr int kWriteTag = 0x7472;
MPCOMM_API size_t write(Communicator& world, const std::string& path);

// Events recorded so far on this rank (ops and spans).
MPCOMM_API size_t events(const Communicator& comm);

// Joins part files (FILE.rank<R>of<N>, written under MPCOMM_TRACE) into one trace at `path`. Returns bytes
// written; throws InvalidArgument naming a part that is missing or unreadable.
MPCOMM_API size_t merge_parts(const std::string& path, const std::vector<std::string>& parts);

}  // namespace mpcomm::trace
