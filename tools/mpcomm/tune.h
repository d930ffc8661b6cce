// mpcomm tune: measures every native algorithm of every op for one world shape — and for sends
// (`sendrecv`: a ring shift) both paths, through the ring and by single copy — and writes a selection
// table (src/tuning/selection_table.h) from the measurements; MPCOMM_TUNING=FILE puts its rows in front
// of the built-in table for communicators of that shape.
//
// The driver starts the ranks with bench's machinery (bench.h, run_bench, worker "tune-worker"). Each
// rank creates a communicator per candidate — an algorithm forced by MPCOMM_ALGO, or a send path forced
// by a one-row table of its own (MPCOMM_TUNING) — through Options::params, and one more for the
// bookkeeping (the checks' sums, the barriers, the timings' maxima), and measures every size of the op
// out of place and in place with bench's measure(): one JSON row per candidate, size and placement, or
// the reason it cannot run there.
#pragma once

#include <string>
#include <vector>

#include "bench.h"
#include "tuning/selection_table.h"

namespace mpcomm::tune {

// The op called `op` (InvalidArgument naming it when there is none; "sendrecv": OpKind::send).
OpKind op_kind(const std::string& op);
// What tune measures of `op`: its native algorithms, or for "sendrecv" the send paths.
std::vector<std::string> candidates(const std::string& op);

// The shape measured, as the table's rows name it.
struct Shape {
  int ranks = 2, hosts = 1, per_host = 2;
  long cpus = 1;  // this machine's
  // Where the CPUs of ranks 0 and 1 were when the driver measured (unknown: not measured); the send
  // path rows hold only there, since which path is faster depends on it.
  tuning::Placement placement = tuning::Placement::unknown;
};
Shape shape_of(int ranks, int hosts, long cpus);

// The table text for `rows` (tune workers' rows of one shape): per op, data type class and measured
// size the fastest algorithm by median time, a row from that size to the next measured one, and every
// candidate's median (us=) and the ones that could not run (skipped=) with it. Where the fastest in
// place differs from the fastest out of place, from 1 MiB per rank (where the round of small frames
// that agrees on it costs under 1%), a row for each. `comment`: lines (without '#') for the header.
std::string table_text(const Shape& s, const std::vector<bench::Row>& rows, const std::vector<std::string>& comment);

// Worker side: measures every algorithm of every op of c in this job (under launch); rank 0 appends
// the rows to json_path.
int run_worker(const bench::Config& c, const std::string& json_path);

}  // namespace mpcomm::tune
