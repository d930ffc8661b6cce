// mpcomm tune: measures, for one world shape, every candidate of every choice the selection table makes
// and writes a table (src/tuning/selection_table.h) from the measurements; MPCOMM_TUNING=FILE puts its
// rows in front of the built-in table for communicators of that shape. For the native backend: every
// algorithm of an op, the send paths (`sendrecv`: a ring shift, through the ring or by single copy), the
// collectives' message paths (collective.path) and the algorithms' protocol choices (streaming stores,
// the hierarchical broadcast's inside of a host); for the mpi backend (--backend mpi): blocking or
// non-blocking MPI calls per op.
//
// The driver starts the ranks with bench's machinery (bench.h, run_bench, worker "tune-worker"). Each
// rank creates a communicator per candidate — an algorithm forced by MPCOMM_ALGO, a protocol's choice by
// a one-row table of its own (MPCOMM_TUNING; with the algorithm that asks forced), MPI calls by
// MPCOMM_MPI_CALLS — through Options::params, and one more for the bookkeeping (the checks' sums, the
// barriers, the timings' maxima), and measures every size of the op out of place and in place with
// bench's measure(): one JSON row per candidate, size and placement, or the reason it cannot run there.
#pragma once

#include <string>
#include <vector>

#include "bench.h"
#include "tuning/selection_table.h"

namespace mpcomm::tune {

// What tune measures under one name of --ops.
struct Plan {
  std::string subject;    // the rows' subject: an op, or a protocol choice ("send.path", "allgather.direct.stores")
  std::string op;         // the op bench measures ("sendrecv": the ring shift)
  std::string algorithm;  // forced with every candidate (the choice is made inside it), or ""
  std::vector<std::string> candidates;
  // How a candidate is forced: MPCOMM_ALGO=op=CANDIDATE, a one-row table "SUBJECT -> CANDIDATE", or
  // MPCOMM_MPI_CALLS=CANDIDATE.
  // auto: a communicator of the candidate backend itself (backend_choice).
  enum Force { algorithm_setting, table_row, mpi_calls, backend_choice } force = algorithm_setting;
  // send.path and collective.path: rows by message size, holding where the CPUs were, for every data type.
  bool per_message = false;
};
// For backend "native": an op (its algorithms), sendrecv or send.path (the send paths), collective.path
// (measured on the ring allgather, whose messages are whole blocks), or a choice point's subject
// (choice_points()); for "mpi": an op (blocking or non-blocking calls). InvalidArgument naming `what`
// and what there is otherwise.
Plan plan_of(const std::string& backend, const std::string& what);
// What tune measures when --ops is not given.
std::string default_ops(const std::string& backend, int hosts);
// The median of `v` (not empty): the middle value, or the mean of the middle two.
double median(std::vector<double> v);
// The op called `op` ("sendrecv": OpKind::send); InvalidArgument naming it when there is none.
OpKind op_kind(const std::string& op);

// The shape measured, as the table's rows name it.
struct Shape {
  int ranks = 2, hosts = 1, per_host = 2;
  long cpus = 1;  // this machine's
  // Where the CPUs of ranks 0 and 1 were when the driver measured (unknown: not measured); the send
  // path rows hold only there, since which path is faster depends on it.
  tuning::Placement placement = tuning::Placement::unknown;
};
Shape shape_of(int ranks, int hosts, long cpus);

// The table text of `backend` for `rows` (tune workers' rows of one shape; a row's op is its plan's
// subject): per subject, data type class and measured size the fastest candidate by median time, a row
// from that size to the next measured one, and every candidate's median (us=) and the ones that could
// not run (skipped=) with it. Where the fastest in place differs from the fastest out of place, from 1
// MiB per rank (where the round of small frames that agrees on it costs under 1%), a row for each.
// `comment`: lines (without '#') for the header.
// `machine`: the host fingerprint the header names ("": none).
std::string table_text(const std::string& backend, const Shape& s, const std::vector<bench::Row>& rows,
                       const std::vector<std::string>& comment, const std::string& machine = "");
// `text` (one backend's section) in place of that backend's sections of the table `old` (a file's text,
// "" when there was none); other backends' sections are kept as they were.
std::string merged_table(const std::string& old, const std::string& backend, const std::string& text);

// auto (tune_auto.cc). The backends auto's rows choose between: MPCOMM_AUTO_BACKENDS, else every CPU
// backend of this build, native first (the driver and its workers read the same).
std::vector<std::string> auto_candidates();
// The auto section to store: `text` (the rows of shape s) and then the rows of `old`'s auto section for
// other shapes (ranks, hosts, placement), so that one stored table gathers every shape tuned.
std::string merged_auto_section(const std::string& old, const std::string& text, const Shape& s);
// tune --check: per measured op, data type and size, auto's choice by the table in use (MPCOMM_TUNING,
// the stored table, the built-in one) against the fastest candidate measured; a point whose choice takes
// more than `limit` × the fastest is reported as drifted.
struct CheckResult {
  std::string report;
  int points = 0, drifted = 0;
};
CheckResult check_rows(const Shape& s, const std::vector<bench::Row>& rows, double limit);

// Worker side: measures every candidate of every plan of c in this job (under launch); rank 0 appends
// the rows to json_path.
int run_worker(const bench::Config& c, const std::string& json_path);

}  // namespace mpcomm::tune
