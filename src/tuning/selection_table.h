// Choices as data: a selection table maps what a call looks like — the op, its data type's class, its
// size, and the communicator's shape (ranks, hosts, ranks per host, CPUs per rank, single copy, where the
// CPUs are) — to a choice. What a row chooses is its subject, the row's first word, from the backend's
// vocabulary (Vocabulary): an op's algorithm ("allreduce" -> ring), a protocol inside the backend
// ("send.path" -> single_copy: how a point-to-point message to a rank of this host travels;
// "allgather.direct.stores" -> streaming), or for the mpi backend which MPI calls an op makes
// ("allreduce" -> nonblocking). The built-in defaults are such tables (one per backend, with the
// backend's code), `mpcomm tune` writes them from measurements, and MPCOMM_TUNING=FILE puts one in front
// of the defaults for a communicator.
//
// A table is text (table_format.cc has the grammar); one file may hold the sections of several backends:
//
//   mpcomm-tuning 1 backend=native
//   allreduce ranks=2 hosts=1 bytes=[8M,inf) in_place=no placement_now=near -> two_copy
//   allreduce single_copy=yes cpus_per_rank=[1,inf) bytes=[64K,inf) -> direct
//   allreduce -> ring
//   send.path placement=far bytes=[64K,inf) -> single_copy
//   send.path -> ring
//   mpcomm-tuning 1 backend=mpi
//   allreduce cpus_per_rank=[1,inf) bytes=[32M,inf) -> nonblocking
//
// Rows of one subject are tried in order; the first whose every condition holds chooses (a condition
// left out holds always). Every condition is a fact that every rank of the communicator shares, so that
// all of them choose alike: the communicator's facts are agreed at its creation, the call's follow from
// its arguments, and the two per-call facts that do not (in_place: some rank runs in place;
// placement_now: where the first two ranks' CPUs are at this call) are agreed in one round of small
// frames, only when an algorithm row that the call reaches asks for them. Protocol rows decide from the
// communicator's facts and the size alone.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "mpcomm/communicator.h"

namespace mpcomm::tuning {

// Data types by how they move and reduce: 8- to 64-bit integers, float32/float64, and the 16-bit floats
// (reduced in float32, so their reductions cost more per byte).
enum class DtypeClass : uint8_t { integer, floating, half };
inline constexpr int kNumDtypeClasses = 3;
DtypeClass dtype_class(DataType dt);
std::string_view to_string(DtypeClass c);

// Where the CPUs of ranks 0 and 1 are: a cache line's round trip between them above MPCOMM_FAR_NS is
// far. Unknown when they are not on one host, or not measured.
enum class Placement : uint8_t { unknown, near, far };
std::string_view to_string(Placement p);

// A range of numbers, each end open or closed ([64K,8M), (0,1), [1,inf)); by default every number.
struct Range {
  double lo = -std::numeric_limits<double>::infinity(), hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;
  bool contains(double v) const { return (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi); }
  bool all() const { return lo == -std::numeric_limits<double>::infinity() && hi == std::numeric_limits<double>::infinity(); }
};

// A condition on a yes/no fact.
enum class Want : uint8_t { any, yes, no };

// The communicator's facts: fixed at its creation, the same on every rank.
struct Shape {
  int ranks = 1;
  int hosts = 1;
  int per_host = 1;          // the most ranks on one host
  bool even_hosts = true;    // every host holds as many ranks
  double cpus_per_rank = 1;  // the fewest CPUs per rank of any host
  bool single_copy = false;  // one host, and every rank reads and writes every other's memory
  Placement placement = Placement::unknown;  // measured at creation
};

// One call's facts, from its arguments.
struct Call {
  OpKind op = OpKind::barrier;
  DtypeClass dtype = DtypeClass::integer;
  double bytes = 0;       // per rank: count × element size (for block ops, one block)
  double total = 0;       // all ranks' blocks for the block ops (allgather ... alltoall), else bytes
  double flat_bytes = 0;  // what a rank sends in a flat exchange: bytes × max(ranks - 1, 1)
};
// count: per rank (the block ops: one block). The uneven ops have no count all ranks share but
// allgatherv's total: pass ceil(total / ranks) for allgatherv, 0 for alltoallv (uneven_call_count()).
Call make_call(OpKind op, DataType dt, size_t count, int ranks);

// What the ranks agree on at a call, when a row asks.
struct CallFacts {
  bool in_place = false;  // some rank runs in place
  Placement placement = Placement::unknown;  // measured at this call
};

// What rows of one subject choose, and what they may ask.
struct Subject {
  std::string name;     // the row's first word: "allreduce", "send.path", "allgather.direct.stores"
  OpKind op = OpKind::barrier;  // the op whose calls (or, per_message, whose messages) it decides for
  std::vector<std::string> choices;
  // `bytes` is one message's size (a send, or one frame of a collective), and the call's other facts
  // (dtype, total, flat_bytes) do not apply: the engine asks per message.
  bool per_message = false;
  // Its rows may ask the per-call facts (in_place, placement_now): algorithm rows only, since only a
  // collective's call is made by every rank, which can then agree them.
  bool call_facts = false;
  std::string doc;      // what it decides, for `mpcomm info --table`
};
// A backend's subjects; a row names one by its index here (Row::subject).
using Vocabulary = std::vector<Subject>;

struct Row {
  int line = 0;  // in its table's text
  int subject = -1;          // index in the vocabulary the table was read with
  std::string subject_name;  // its name (the row's first word)
  OpKind op = OpKind::barrier;  // the subject's op
  // Conditions.
  int dtypes = 0;  // bit per DtypeClass; 0: any
  Range bytes, total, flat_bytes, ranks, hosts, per_host, cpus_per_rank;
  Want even_hosts = Want::any, single_copy = Want::any, in_place = Want::any;
  Placement placement = Placement::unknown, placement_now = Placement::unknown;  // unknown: any
  // The choice, and what a measured table says about it (kept as written; see table_format.cc).
  std::string choice;
  std::string notes;

  bool matches(const Shape& s) const;
  bool matches(const Call& c) const;
  bool needs_call_facts() const { return in_place != Want::any || placement_now != Placement::unknown; }
  bool matches(const CallFacts& f) const;
};

struct Table {
  std::string backend;  // whose subjects the rows name
  std::string source;   // where it came from: "the built-in table", "tuning file PATH"
  std::string machine;  // the host fingerprint its section's header names ("": none)
  std::vector<Row> rows;
  std::vector<std::string> sections;  // every backend the text has a section for, in order
  bool has_section() const;           // for `backend`
};

// Reads the rows of `backend`'s sections of a table (none: no rows), checking them against its
// vocabulary. `source` names it in errors: "mpcomm: <source>, line N, field 'F': expected ..., got
// '...'". Refuses another format version, and text without any header. Lines of other backends' sections
// are skipped unread (their vocabulary is not known here).
Table parse_table(std::string_view text, const std::string& source, const std::string& backend, const Vocabulary& vocab);
// Reads the file at `path` (source "tuning file PATH").
Table load_table(const std::string& path, const std::string& backend, const Vocabulary& vocab);
// The header line and one line per row, in the format parse_table() reads.
std::string format_header(const std::string& backend, const std::string& machine = "");
std::string format_row(const Row& r);
// "64K", "8M", "87381": a size as a table writes it.
std::string format_size(double bytes);

// The rows of some tables that can apply to one communicator (its shape), per subject, in order: what a
// call then looks through.
class ShapeRows {
 public:
  struct Entry {
    const Row* row;
    const Table* table;
  };
  ShapeRows() = default;
  ShapeRows(const std::vector<const Table*>& tables, const Shape& shape, size_t subjects);
  // The first entry of `subject` whose row matches the call and `usable(row)` (its algorithm can run),
  // asking `facts()` (once) for a row that depends on them; null when none.
  template <class Facts, class Usable>
  const Entry* find(int subject, const Call& c, Facts&& facts, Usable&& usable) const {
    bool asked = false;
    CallFacts f;
    for (const Entry& e : rows_[static_cast<size_t>(subject)]) {
      if (!e.row->matches(c) || !usable(*e.row)) continue;
      if (e.row->needs_call_facts()) {
        if (!asked) f = facts();
        asked = true;
        if (!e.row->matches(f)) continue;
      }
      return &e;
    }
    return nullptr;
  }
  // The first entry of `subject` whose row matches `c`: for subjects whose rows ask no per-call facts.
  const Entry* find(int subject, const Call& c) const {
    for (const Entry& e : rows_[static_cast<size_t>(subject)])
      if (e.row->matches(c)) return &e;
    return nullptr;
  }
  const std::vector<Entry>& rows(int subject) const { return rows_[static_cast<size_t>(subject)]; }

 private:
  std::vector<std::vector<Entry>> rows_;
};

}  // namespace mpcomm::tuning
