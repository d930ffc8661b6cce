// The flight recorder: every communicator keeps its last MPCOMM_TRACE_ENTRIES operations and writes
// them out when one fails, so the ranks' records side by side show who was behind.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "harness/thread_world.h"

namespace mpcomm {
namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The record line of one operation ("#3 ", "p0 "), or "" when it is not in the record.
std::string line_of(const std::string& record, const std::string& seq) {
  std::istringstream in(record);
  for (std::string l; std::getline(in, l);)
    if (l.rfind("  " + seq + " ", 0) == 0) return l;
  return "";
}

struct TraceDir {
  std::string path;
  TraceDir() {
    char tmpl[] = "/tmp/mpcomm-trace-test-XXXXXX";
    path = ::mkdtemp(tmpl);
    ::setenv("MPCOMM_TRACE_DIR", path.c_str(), 1);
  }
  ~TraceDir() {
    ::unsetenv("MPCOMM_TRACE_DIR");
    std::filesystem::remove_all(path);
  }
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path)) out.push_back(e.path().string());
    return out;
  }
};

std::string read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Rank 1 stops after three all-reduces; rank 0's broadcast #3 times out. Rank 0's record shows the three
// done, the broadcast FAILED with the timeout, and is written to MPCOMM_TRACE_DIR; rank 1 wrote nothing.
TEST(FlightRecorder, ATimeoutWritesTheRecordShowingWhereTheRankStopped) {
  TraceDir dir;
  Options o;
  o.timeout = Millis(500);
  testing::ThreadWorld world("native", 2, o);
  auto errs = world.run_collect([](int r, Communicator& c) {
    std::vector<float> x(1000, 1.0f);
    for (int i = 0; i < 3; ++i) c.allreduce(x.data(), x.data(), x.size(), DataType::float32, ReduceOp::sum);
    if (r == 1) return;
    c.broadcast(x.data(), 10, DataType::float32, 1);
  });
  ASSERT_TRUE(errs[0]);
  EXPECT_FALSE(errs[1]);
  const std::string rec = world.comm(0).flight_record();
  EXPECT_TRUE(contains(rec, "rank 0 of 2 [native]")) << rec;
  EXPECT_TRUE(contains(rec, "last 4 of 4 operations")) << rec;
  for (const char* s : {"#0", "#1", "#2"}) {
    std::string l = line_of(rec, s);
    EXPECT_TRUE(contains(l, "allreduce") && contains(l, "1000") && contains(l, "float32") && contains(l, " sum ") &&
                contains(l, " done "))
        << s << ": " << rec;
  }
  const std::string failed = line_of(rec, "#3");
  EXPECT_TRUE(contains(failed, "broadcast") && contains(failed, "FAILED") && contains(failed, "timed out")) << rec;
  // Rank 1's record ends at #2, all done: set side by side, rank 1 is the one that stopped.
  const std::string rec1 = world.comm(1).flight_record();
  EXPECT_TRUE(contains(line_of(rec1, "#2"), " done ")) << rec1;
  EXPECT_EQ(line_of(rec1, "#3"), "") << rec1;

  auto files = dir.files();
  ASSERT_EQ(files.size(), 1u) << "only the failed rank writes its record";
  EXPECT_TRUE(contains(files[0], "mpcomm-trace-native-r0of2-pid" + std::to_string(::getpid()))) << files[0];
  EXPECT_EQ(read(files[0]), rec);
}

TEST(FlightRecorder, KeepsTheLastEntriesAndPointToPoint) {
  ::setenv("MPCOMM_TRACE_ENTRIES", "4", 1);
  Options o;
  o.timeout = Millis(400);
  testing::ThreadWorld world("native", 2, o);
  ::unsetenv("MPCOMM_TRACE_ENTRIES");
  TraceDir dir;
  auto errs = world.run_collect([](int r, Communicator& c) {
    int32_t v = r;
    for (int i = 0; i < 10; ++i) c.allreduce(&v, &v, 1, DataType::int32, ReduceOp::max);
    if (r == 0) c.send(&v, 1, DataType::int32, 1, 7);
    if (r == 1) {
      c.recv(&v, 1, DataType::int32, 0, 7);
      c.recv(&v, 1, DataType::int32, 0, 8);  // never sent
    }
  });
  EXPECT_FALSE(errs[0]);
  ASSERT_TRUE(errs[1]);
  const std::string rec = world.comm(1).flight_record();
  EXPECT_TRUE(contains(rec, "last 4 of 12 operations")) << rec;
  EXPECT_EQ(line_of(rec, "#7"), "") << rec;  // pushed out of the ring
  EXPECT_TRUE(contains(line_of(rec, "#8"), " done ")) << rec;
  EXPECT_TRUE(contains(line_of(rec, "#9"), " done ")) << rec;
  const std::string got = line_of(rec, "p0"), lost = line_of(rec, "p1");
  EXPECT_TRUE(contains(got, "recv") && contains(got, " done ")) << rec;
  EXPECT_TRUE(contains(lost, "recv") && contains(lost, "FAILED") && contains(lost, "tag 8")) << rec;
  EXPECT_EQ(dir.files().size(), 1u);
}

TEST(FlightRecorder, ZeroEntriesTurnsItOff) {
  ::setenv("MPCOMM_TRACE_ENTRIES", "0", 1);
  testing::ThreadWorld world("native", 1);
  ::unsetenv("MPCOMM_TRACE_ENTRIES");
  float x = 1;
  world.comm(0).allreduce(&x, &x, 1, DataType::float32, ReduceOp::sum);
  EXPECT_TRUE(contains(world.comm(0).flight_record(), "last 0 of 0 operations")) << world.comm(0).flight_record();
}

}  // namespace
}  // namespace mpcomm
