// The timeline (mpcomm/trace.h): what a traced communicator and its groups record, that the file is one
// valid Chrome trace with every rank on one clock, and MPCOMM_TRACE for a program that knows nothing of it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "core/clock_align.h"
#include "core/timeline.h"
#include "harness/process.h"
#include "harness/thread_world.h"

namespace mpcomm {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::string temp_dir() {
  char tmpl[] = "/tmp/mpcomm-timeline-test-XXXXXX";
  return ::mkdtemp(tmpl);
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return json::parse(in);
}

// The complete ("X") events of a trace, and the thread names per (pid, tid).
struct Trace {
  std::vector<json> spans;
  std::map<std::pair<int, int>, std::string> threads;
  std::map<int, std::string> processes;
  explicit Trace(const json& j) {
    for (const json& e : j.at("traceEvents")) {
      const std::string ph = e.at("ph");
      if (ph == "X") spans.push_back(e);
      if (ph == "M" && e.at("name") == "thread_name") threads[{e.at("pid"), e.at("tid")}] = e.at("args").at("name");
      if (ph == "M" && e.at("name") == "process_name") processes[e.at("pid")] = e.at("args").at("name");
    }
  }
  std::vector<json> of(int pid, const std::string& name, const std::string& cat = "comm") const {
    std::vector<json> out;
    for (const json& e : spans)
      if (e.at("pid") == pid && e.at("name") == name && e.at("cat") == cat) out.push_back(e);
    return out;
  }
  std::string thread(const json& e) const { return threads.at({e.at("pid"), e.at("tid")}); }
  // The track of an event: its thread's name without the lane number ("pp [ranks 0,4] (2)" is lane 2 of
  // "pp [ranks 0,4]").
  std::string track(const json& e) const {
    std::string n = thread(e);
    if (n.size() > 4 && n.back() == ')') n = n.substr(0, n.rfind(" ("));
    return n;
  }
};

// Every thread's events nest: none starts inside another and ends after it (what a viewer needs to draw
// them as one stack).
void expect_nested(const Trace& t) {
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> by_thread;
  for (const json& e : t.spans)
    by_thread[{e.at("pid"), e.at("tid")}].push_back(
        {e.at("ts").get<double>(), e.at("ts").get<double>() + e.at("dur").get<double>()});
  for (auto& [key, v] : by_thread) {
    std::sort(v.begin(), v.end());
    for (size_t i = 1; i < v.size(); ++i)
      EXPECT_GE(v[i].first + 1e-3, v[i - 1].second)
          << "rank " << key.first << " thread " << key.second << ": events overlap at " << v[i].first;
  }
}

class Timeline : public ::testing::TestWithParam<std::string> {};

// Four ranks: a world all-reduce, a split into pairs with a broadcast and a send/recv, a span of the
// program's own, then write(): one file, one process per rank, each op with its bytes, backend and
// algorithm on its communicator's track, peers and roots as world ranks, and none of write()'s own traffic.
TEST_P(Timeline, RecordsEveryRanksOpsOnTheirGroupsTracks) {
  const std::string dir = temp_dir(), path = dir + "/t.json";
  testing::ThreadWorld world(GetParam(), 4);
  world.run([&](int r, Communicator& c) {
    trace::start(c);
    ASSERT_TRUE(trace::enabled(c));
    std::vector<float> x(1000, 1.0f);
    c.allreduce(x.data(), x.data(), x.size(), DataType::float32, ReduceOp::sum);
    auto pair = c.split(r / 2, r);  // {0,1}, {2,3}
    ASSERT_TRUE(trace::enabled(*pair));
    trace::name(*pair, "pairs");
    pair->broadcast(x.data(), 10, DataType::float32, 1);
    const uint64_t t0 = trace::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    trace::span(c, "compute", "work", t0, trace::now(), "\"micro\":" + std::to_string(r));
    if (pair->rank() == 0)
      pair->send(x.data(), 7, DataType::float32, 1, 5);
    else
      pair->recv(x.data(), 7, DataType::float32, 0, 5);
    const size_t bytes = trace::write(c, path);
    EXPECT_EQ(bytes > 0, r == 0);
  });
  const Trace t(read_json(path));
  EXPECT_EQ(t.processes.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    auto ar = t.of(r, "allreduce");
    ASSERT_EQ(ar.size(), 1u);
    EXPECT_EQ(ar[0].at("args").at("bytes"), 4000);
    EXPECT_EQ(ar[0].at("args").at("op"), "sum");
    EXPECT_EQ(ar[0].at("args").at("backend"), GetParam());
    EXPECT_TRUE(ar[0].at("args").contains("algorithm"));
    EXPECT_EQ(t.thread(ar[0]), "world [ranks 0,1,2,3]");
    auto bc = t.of(r, "broadcast");
    ASSERT_EQ(bc.size(), 1u);
    EXPECT_EQ(bc[0].at("args").at("root"), r < 2 ? 1 : 3);  // the pair's rank 1, as a world rank
    EXPECT_EQ(t.thread(bc[0]), r < 2 ? "pairs [ranks 0,1]" : "pairs [ranks 2,3]");
    auto p2p = t.of(r, r % 2 == 0 ? "send" : "recv");
    ASSERT_EQ(p2p.size(), 1u);
    EXPECT_EQ(p2p[0].at("args").at("peer"), r % 2 == 0 ? r + 1 : r - 1);
    EXPECT_EQ(p2p[0].at("args").at("tag"), 5);
    EXPECT_EQ(p2p[0].at("args").at("bytes"), 28);
    auto work = t.of(r, "work", "compute");
    ASSERT_EQ(work.size(), 1u);
    EXPECT_EQ(work[0].at("args").at("micro"), r);
    EXPECT_GE(work[0].at("dur").get<double>(), 1900.0);  // microseconds
    EXPECT_EQ(t.thread(work[0]), "compute");
    // write()'s gather and sends are not in the trace; the split's allgather is (it is the job's traffic)
    EXPECT_TRUE(t.of(r, "gather").empty());
    EXPECT_EQ(t.of(r, "allgather").size(), 1u);
    // one clock: each rank's ops in the order it ran them
    EXPECT_LE(ar[0].at("ts").get<double>(), bc[0].at("ts").get<double>());
    EXPECT_LE(bc[0].at("ts").get<double>(), work[0].at("ts").get<double>());
  }
  // The same all-reduce on every rank overlaps in time on the shared clock (none ends before another starts).
  double latest_start = 0, earliest_end = 1e300;
  for (int r = 0; r < 4; ++r) {
    const json e = t.of(r, "allreduce")[0];
    latest_start = std::max(latest_start, e.at("ts").get<double>());
    earliest_end = std::min(earliest_end, e.at("ts").get<double>() + e.at("dur").get<double>());
  }
  EXPECT_LE(latest_start, earliest_end + 1.0);
  expect_nested(t);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Backends, Timeline, ::testing::ValuesIn(testing::thread_backends()),
                         [](const auto& info) { return info.param; });

// Non-blocking ops in flight together on one communicator go to lanes of its track, so every thread's
// events still nest; an op that waited behind others shows its queued time.
TEST(TimelineLanes, OverlappingRequestsGetLanesAndQueuedTime) {
  const std::string dir = temp_dir(), path = dir + "/t.json";
  testing::ThreadWorld world("native", 2);
  world.run([&](int r, Communicator& c) {
    trace::start(c);
    std::vector<std::vector<float>> bufs(6, std::vector<float>(1 << 16, 1.0f));
    std::vector<Request> reqs;
    for (auto& b : bufs) reqs.push_back(c.iallreduce(b.data(), b.data(), b.size(), DataType::float32, ReduceOp::sum));
    std::vector<float> a(100), b(100);
    Request s = c.isend(a.data(), a.size(), DataType::float32, 1 - r, 1);
    Request v = c.irecv(b.data(), b.size(), DataType::float32, 1 - r, 1);
    for (auto& q : reqs) q.wait();
    s.wait();
    v.wait();
    trace::write(c, path);
  });
  const Trace t(read_json(path));
  expect_nested(t);
  for (int r = 0; r < 2; ++r) {
    auto ar = t.of(r, "allreduce");
    ASSERT_EQ(ar.size(), 6u);
    int queued = 0;
    for (const json& e : ar) queued += e.at("args").contains("queued_us") ? 1 : 0;
    EXPECT_GE(queued, 5) << "rank " << r << ": all but the first waited for the one before";
    EXPECT_GE(t.of(r, "queued: allreduce", "queued").size(), 5u);
    std::set<std::string> lanes;
    for (const json& e : t.spans)
      if (e.at("pid") == r) lanes.insert(t.thread(e));
    EXPECT_GE(lanes.size(), 2u) << "the send and receive overlap: a second lane";
  }
  fs::remove_all(dir);
}

// Clocks that differ by whole seconds per rank come out aligned: each offset is the skew to within the
// round trip it was measured with.
TEST(ClockAlignment, PingPongFindsEachRanksOffsetToRankZero) {
  testing::ThreadWorld world("native", 4);
  std::vector<detail::ClockAlignment> got(4);
  world.run([&](int r, Communicator& c) {
    const int64_t skew = static_cast<int64_t>(r) * 1'000'000'000 + 12345;
    got[static_cast<size_t>(r)] = detail::align_clocks(
        c, [skew] { return detail::steady_ns() + skew; }, /*trust_same_machine=*/false);
  });
  EXPECT_EQ(got[0].offset_ns, 0);
  for (int r = 1; r < 4; ++r) {
    const int64_t want = -static_cast<int64_t>(r) * 1'000'000'000;  // rank 0 reads 12345 + 0 s
    EXPECT_GT(got[r].rtt_ns, 0);
    EXPECT_NEAR(static_cast<double>(got[r].offset_ns), static_cast<double>(want), got[r].rtt_ns / 2.0 + 1000)
        << "rank " << r;
    EXPECT_EQ(got[r].base_ns, got[0].base_ns);
  }
  // Trusting the machine: the same boot id, so no ping-pong and offset 0.
  world.run(
      [&](int r, Communicator& c) { got[static_cast<size_t>(r)] = detail::align_clocks(c, detail::steady_ns, true); });
  for (int r = 0; r < 4; ++r) EXPECT_EQ(got[r].offset_ns, 0);
}

TEST(TimelineOff, NothingIsRecordedAndWriteSaysWhy) {
  testing::ThreadWorld world("native", 2);
  world.run([&](int, Communicator& c) {
    EXPECT_FALSE(trace::enabled(c));
    float x = 1;
    c.allreduce(&x, &x, 1, DataType::float32, ReduceOp::sum);
    { trace::Span s(c, "compute", "nothing"); }
    EXPECT_EQ(trace::events(c), 0u);
    try {
      trace::write(c, "/tmp/never.json");
      ADD_FAILURE() << "write on an untraced communicator";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("not traced"), std::string::npos) << e.what();
    }
  });
  EXPECT_FALSE(fs::exists("/tmp/never.json"));
}

// MPCOMM_TRACE: a program that knows nothing of tracing (testprog) under mpcomm launch; each rank writes its
// part when its communicator goes, the last merges them into the one file and removes the parts.
TEST(TimelineFromEnvironment, ThreeProcessesMergeIntoOneFile) {
  const std::string dir = temp_dir(), path = dir + "/job.json";
  auto r = testing::run_command("MPCOMM_TRACE=" + path + " " + std::string(MPCOMM_CLI) + " launch -n 3 " +
                                MPCOMM_TESTPROG + " pattern 1000 5");
  ASSERT_EQ(r.status, 0) << r.output;
  const Trace t(read_json(path));
  EXPECT_EQ(t.processes.size(), 3u);
  for (int rank = 0; rank < 3; ++rank) EXPECT_EQ(t.of(rank, "allreduce").size(), 5u) << "rank " << rank;
  expect_nested(t);
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir)) left.push_back(e.path().filename());
  EXPECT_EQ(left, std::vector<std::string>{"job.json"});
  fs::remove_all(dir);
}

// Parts from machines without a shared file system, copied together: mpcomm trace-merge joins them; a
// missing part is named.
TEST(TimelineFromEnvironment, TraceMergeJoinsCopiedParts) {
  const std::string dir = temp_dir();
  auto r = testing::run_command("MPCOMM_TRACE=" + dir + "/a.json " + std::string(MPCOMM_CLI) + " launch -n 2 " +
                                MPCOMM_TESTPROG + " pattern 100 3");
  ASSERT_EQ(r.status, 0) << r.output;
  // Split the merged file back into what two machines would have left: its events per rank.
  const json all = read_json(dir + "/a.json");
  for (int rank = 0; rank < 2; ++rank) {
    std::string part;
    for (const json& e : all.at("traceEvents"))
      if (e.at("pid") == rank) part += (part.empty() ? "" : ",\n") + e.dump();
    std::ofstream(dir + "/p.rank" + std::to_string(rank) + "of2") << part;
  }
  r = testing::run_command(std::string(MPCOMM_CLI) + " trace-merge " + dir + "/b.json " + dir + "/p.rank0of2 " + dir +
                           "/p.rank1of2");
  ASSERT_EQ(r.status, 0) << r.output;
  const Trace t(read_json(dir + "/b.json"));
  EXPECT_EQ(t.processes.size(), 2u);
  for (int rank = 0; rank < 2; ++rank) EXPECT_EQ(t.of(rank, "allreduce").size(), 3u);
  r = testing::run_command(std::string(MPCOMM_CLI) + " trace-merge " + dir + "/c.json " + dir + "/p.rank7of8");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("p.rank7of8"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

// mpcomm train --trace: tp × pp × dp = 2 × 2 × 2; every rank's steps, forwards and backwards as spans, and
// its traffic on tracks named after its groups, whose world ranks follow the trainer's layout (tp fastest).
TEST(TrainTimeline, EveryRankHasItsComputeAndItsGroupsTraffic) {
  const std::string dir = temp_dir(), path = dir + "/train.json";
  auto r = testing::run_command(std::string(MPCOMM_CLI) +
                                " train -n 8 --tp 2 --pp 2 --dp 2 --micro-batches 2 --steps 2 --layers 2 --hidden 32 "
                                "--heads 2 --seq 16 --batch 4 --trace " +
                                path);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("timeline in " + path), std::string::npos) << r.output;
  const Trace t(read_json(path));
  ASSERT_EQ(t.processes.size(), 8u);
  for (int rank = 0; rank < 8; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    EXPECT_EQ(t.of(rank, "step", "compute").size(), 2u);
    EXPECT_EQ(t.of(rank, "forward", "compute").size(), 4u);  // 2 steps × 2 micro-batches
    EXPECT_EQ(t.of(rank, "backward", "compute").size(), 4u);
    EXPECT_EQ(t.of(rank, "optimizer", "compute").size(), 2u);
    const int tp0 = rank - rank % 2, dp = (rank / 2) % 2, pp = rank / 4;
    const std::string tp_track = "tp [ranks " + std::to_string(tp0) + "," + std::to_string(tp0 + 1) + "]";
    const std::string dp_track =
        "dp [ranks " + std::to_string(rank - 2 * dp) + "," + std::to_string(rank - 2 * dp + 2) + "]";
    const std::string pp_track =
        "pp [ranks " + std::to_string(rank - 4 * pp) + "," + std::to_string(rank - 4 * pp + 4) + "]";
    std::map<std::string, int> ops;  // "track/op" -> count
    for (const json& e : t.spans)
      if (e.at("pid") == rank && e.at("cat") == "comm") ops[t.track(e) + "/" + e.at("name").get<std::string>()]++;
    EXPECT_GT(ops[tp_track + "/allreduce"], 0);
    EXPECT_GT(ops[dp_track + "/allreduce"], 0);                       // gradient buckets
    EXPECT_EQ(ops[pp_track + (pp == 0 ? "/send" : "/recv")], 4 + 2);  // activations, and the tied embedding
  }
  expect_nested(t);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace mpcomm
