// mpcomm tune: on 2 and 4 ranks it writes a table that loads; a communicator of that shape that loads
// it (MPCOMM_TUNING) runs what each row chooses — algorithms, send paths, protocol choices (the flight
// record says what ran) — and each row's choice is the fastest of its measured candidates. mpcomm info
// names the table in use. (tune --backend mpi: tests/mpi/mpi_test.cc.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "backends/native/algorithms/algorithms.h"
#include "backends/native/selection/selection.h"
#include "harness/flight_record.h"
#include "harness/process.h"
#include "harness/table_notes.h"
#include "harness/thread_world.h"
#include "tuning/selection_table.h"

namespace mpcomm {
namespace {

using testing::note;
using testing::times;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

double size_of(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  const std::string units = "KMGT";
  if (*end != '\0') v *= std::pow(1024.0, static_cast<double>(units.find(*end) + 1));
  return v;
}

TEST(Tune, WritesATableThatCommunicatorsOfItsShapeFollow) {
  for (int ranks : {2, 4}) {
    SCOPED_TRACE(std::to_string(ranks) + " ranks");
    const std::string path = ::testing::TempDir() + "mpcomm-tune-" + std::to_string(ranks) + ".txt";
    auto r = testing::run_command(std::string(MPCOMM_CLI) + " tune --ranks " + std::to_string(ranks) +
                                  " --ops allreduce,broadcast,allgather,reduce_scatter,sendrecv,collective.path,allgather.direct.stores"
                                  " -b 8 -e 256K -f 8 -n 3 -w 1 --timeout 60 -o " + path);
    ASSERT_EQ(r.status, 0) << r.output;
    const tuning::Table t = tuning::load_table(path, "native", native::vocabulary());
    std::ifstream f(path);
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    EXPECT_TRUE(contains(text, "# mpcomm tune --backend native --ranks " + std::to_string(ranks))) << text;
    // 6 sizes of 4 ops (allgather and reduce_scatter: the sizes that leave a block per rank), the send
    // and collective message paths (rows where the CPUs were when tune measured), the direct allgather's
    // stores.
    EXPECT_GE(t.rows.size(), 26u) << text;
    tuning::Placement sends_at = tuning::Placement::unknown;
    std::map<std::string, int> rows_of;
    for (const tuning::Row& row : t.rows) {
      ++rows_of[row.subject_name];
      if (row.subject_name == "send.path") sends_at = row.placement;
    }
    for (const tuning::Row& row : t.rows)
      if (row.subject_name == "collective.path") {
        EXPECT_EQ(row.placement, sends_at) << tuning::format_row(row);
      }
    EXPECT_NE(sends_at, tuning::Placement::unknown) << "send.path rows hold where the CPUs were\n" << text;
    EXPECT_GE(rows_of["collective.path"], 1) << text;
    EXPECT_GE(rows_of["allgather.direct.stores"], 1) << text;
    if (ranks == 4) {
      EXPECT_TRUE(contains(text, "#   allreduce two_copy: it runs on exactly 2 ranks")) << text;
      EXPECT_TRUE(contains(text, "skipped=two_copy")) << text;
    }
    testing::ThreadWorld world("native", ranks, [&] {
      Options o;
      o.params["MPCOMM_TUNING"] = path;
      // Where the send paths' rows hold, whatever the CPUs do now.
      o.params["MPCOMM_FAR_NS"] = sends_at == tuning::Placement::far ? "-1" : "0";
      return o;
    }());
    // The direct allgather forced, so that the table's stores rows are asked.
    testing::ThreadWorld direct("native", ranks, [&] {
      Options o;
      o.params["MPCOMM_TUNING"] = path;
      o.params["MPCOMM_ALGO"] = "allgather=direct";
      return o;
    }());
    for (const tuning::Row& row : t.rows) {
      SCOPED_TRACE(tuning::format_row(row));
      EXPECT_TRUE(row.ranks.contains(ranks) && !row.ranks.contains(ranks + 1)) << "a row for this shape only";
      const std::map<std::string, double> us = times(note(row, "us"));
      ASSERT_TRUE(us.count(row.choice));
      for (const auto& [alg, t_us] : us) EXPECT_LE(us.at(row.choice), t_us) << "the fastest of those measured: " << alg;
      // The row's measured size, out of place: the algorithm the row names runs.
      const size_t count = static_cast<size_t>(size_of(note(row, "at"))) / sizeof(float);
      std::vector<std::string> ran(static_cast<size_t>(ranks));
      if (row.subject_name == "collective.path") continue;  // per message: tests/native/engine_test.cc
      if (row.subject_name == "allgather.direct.stores") {
        direct.run([&](int rank, Communicator& comm) {
          std::vector<float> in(count, 1.0f), out(count * static_cast<size_t>(ranks));
          comm.allgather(in.data(), out.data(), count, DataType::float32);
          const std::string x = testing::last_ran(comm);
          ran[static_cast<size_t>(rank)] = x.substr(x.find('+') + 1);
        });
        for (int q = 0; q < ranks; ++q) EXPECT_EQ(ran[static_cast<size_t>(q)], row.choice) << "rank " << q;
        continue;
      }
      world.run([&](int rank, Communicator& comm) {
        std::vector<float> in(count * static_cast<size_t>(ranks) + 1, 1.0f), out(in.size());
        switch (row.op) {
          case OpKind::allreduce: comm.allreduce(in.data(), out.data(), count, DataType::float32, ReduceOp::sum); break;
          case OpKind::broadcast: comm.broadcast(out.data(), count, DataType::float32, 0); break;
          case OpKind::allgather: comm.allgather(in.data(), out.data(), count, DataType::float32); break;
          case OpKind::reduce_scatter: comm.reduce_scatter(in.data(), out.data(), count, DataType::float32, ReduceOp::sum); break;
          case OpKind::send:  // the ring shift's send: its path, as the flight record names it
            if (rank < 2) {
              Request rq = comm.irecv(out.data(), count, DataType::float32, 1 - rank);
              comm.send(in.data(), count, DataType::float32, 1 - rank);
              ran[static_cast<size_t>(rank)] = testing::last_algorithm(comm);
              rq.wait();
            }
            for (int q = 2; q < ranks; ++q) ran[static_cast<size_t>(q)] = row.choice;
            return;
          default: FAIL() << "an op tune was not asked for";
        }
        ran[static_cast<size_t>(rank)] = testing::last_algorithm(comm);
      });
      for (int q = 0; q < ranks; ++q) EXPECT_EQ(ran[static_cast<size_t>(q)], row.choice) << "rank " << q;
    }
  }
}

TEST(Tune, InfoNamesTheTableInUse) {
  auto r = testing::run_command(std::string(MPCOMM_CLI) + " info");
  EXPECT_TRUE(contains(r.output, "native selection: the built-in table (")) << r.output;
  const std::string path = ::testing::TempDir() + "mpcomm-info-table.txt";
  std::ofstream(path) << "mpcomm-tuning 1 backend=native\nallreduce ranks=2 -> ring\n";
  r = testing::run_command("MPCOMM_TUNING=" + path + " MPCOMM_ALGO=broadcast=flat " + MPCOMM_CLI + " info");
  EXPECT_TRUE(contains(r.output, "native selection: tuning file " + path + ", then the built-in table (1 + ")) << r.output;
  EXPECT_TRUE(contains(r.output, "MPCOMM_ALGO forces broadcast=flat")) << r.output;
  r = testing::run_command("MPCOMM_TUNING=" + path + " " + MPCOMM_CLI + " info --table");
  EXPECT_TRUE(contains(r.output, "  allreduce ranks=2 -> ring   # line 2")) << r.output;
  EXPECT_TRUE(contains(r.output, "  # the built-in table")) << r.output;
  // What rows choose, and the rows whose calls agree facts in frames, named.
  EXPECT_TRUE(contains(r.output, "  #   send.path -> ring | single_copy: how a send to a rank of this host travels")) << r.output;
  EXPECT_TRUE(contains(r.output, "  send.path placement=far bytes=[64K,inf) -> single_copy   # line ")) << r.output;
  EXPECT_TRUE(contains(r.output, "in_place=no placement_now=near -> two_copy   # line ")) << r.output;
  EXPECT_TRUE(contains(r.output, "; agreed at the call: in_place, placement_now (one round of 8-byte frames)")) << r.output;
  // Another backend's section only: no rows for native, and info says so.
  std::ofstream(path) << "mpcomm-tuning 1 backend=mpi\nallreduce -> blocking\n";
  r = testing::run_command("MPCOMM_TUNING=" + path + " " + MPCOMM_CLI + " info");
  EXPECT_TRUE(contains(r.output, "native selection: tuning file " + path +
                                     " (no section for backend native; it has: mpi), then the built-in table (0 + ")) << r.output;
}

}  // namespace
}  // namespace mpcomm
