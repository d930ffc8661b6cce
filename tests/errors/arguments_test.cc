// Bad arguments are rejected at the call, before any traffic: the rank that made the bad call gets an
// InvalidArgument naming the op and the problem, its peers see nothing, and the communicator stays
// usable (a stray frame would make the next collective fail with a mismatch).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "harness/thread_world.h"

namespace mpcomm {
namespace {

struct BadCall {
  const char* name;
  const char* expect;  // a substring of the error message
  std::function<void(Communicator&)> call;
};

std::vector<BadCall> bad_calls() {
  static float a[8], b[64];
  const size_t huge = std::numeric_limits<size_t>::max() / 2;
  return {
      {"broadcast root too large", "root 2 is out of range [0, 2)", [](Communicator& c) { c.broadcast(a, 4, DataType::float32, 2); }},
      {"reduce negative root", "root -1 is out of range", [](Communicator& c) { c.reduce(a, b, 4, DataType::float32, ReduceOp::sum, -1); }},
      {"gather root too large", "root 7 is out of range", [](Communicator& c) { c.gather(a, b, 4, DataType::float32, 7); }},
      {"scatter root too large", "root 2 is out of range", [](Communicator& c) { c.scatter(a, b, 4, DataType::float32, 2); }},
      {"allreduce null send", "send buffer is null but count is 4", [](Communicator& c) { c.allreduce(nullptr, b, 4, DataType::float32, ReduceOp::sum); }},
      {"allreduce null recv", "recv buffer is null but count is 4", [](Communicator& c) { c.allreduce(a, nullptr, 4, DataType::float32, ReduceOp::sum); }},
      {"allgather null recv", "recv buffer is null", [](Communicator& c) { c.allgather(a, nullptr, 1, DataType::int8); }},
      {"alltoall null send", "send buffer is null", [](Communicator& c) { c.alltoall(nullptr, b, 1, DataType::int8); }},
      {"allreduce count overflow", "overflows the address space", [huge](Communicator& c) { c.allreduce(a, b, huge, DataType::float64, ReduceOp::sum); }},
      {"allgather count × ranks overflow", "overflows the address space",
       [](Communicator& c) { c.allgather(a, b, std::numeric_limits<size_t>::max() / 8, DataType::int32); }},
      {"unknown dtype", "unknown data type value 99", [](Communicator& c) { c.allreduce(a, b, 1, static_cast<DataType>(99), ReduceOp::sum); }},
      {"unknown reduce op", "unknown reduce op value 42", [](Communicator& c) { c.allreduce(a, b, 1, DataType::float32, static_cast<ReduceOp>(42)); }},
      {"bitwise and of floats", "band needs an integer data type (int8, uint8, int32, int64), not float32",
       [](Communicator& c) { c.allreduce(a, b, 4, DataType::float32, ReduceOp::band); }},
      {"bitwise xor of bfloat16, reduce_scatter", "bxor needs an integer data type (int8, uint8, int32, int64), not bfloat16",
       [](Communicator& c) { c.ireduce_scatter(b, a, 2, DataType::bfloat16, ReduceOp::bxor); }},
      {"overlapping buffers not in place", "overlap but are not the in-place layout",
       [](Communicator& c) { c.allreduce(b, b + 1, 4, DataType::float32, ReduceOp::sum); }},
      {"allgather wrong in-place offset", "overlap but are not the in-place layout",
       [](Communicator& c) { c.allgather(b + 3, b, 2, DataType::float32); }},
      {"send to self", "oneself", [](Communicator& c) { c.send(a, 1, DataType::float32, c.rank(), 0); }},
      {"recv from a rank that does not exist", "peer 5 is out of range", [](Communicator& c) { c.recv(b, 1, DataType::float32, 5, 0); }},
      {"negative tag", "tag -3 is negative", [](Communicator& c) { c.isend(a, 1, DataType::float32, 1 - c.rank(), -3); }},
  };
}

// The uneven ops' own bad calls, on 2 ranks (rank 0 makes them). Blocks: 2 elements each, packed.
std::vector<BadCall> bad_uneven_calls() {
  static float a[8], b[64];
  static const size_t two[2] = {2, 2}, packed[2] = {0, 2}, three[3] = {2, 2, 2}, same_place[2] = {0, 1};
  static const size_t own3[2] = {3, 2}, huge[2] = {2, std::numeric_limits<size_t>::max() / 4};
  using S = std::span<const size_t>;
  return {
      {"alltoallv send_counts of 3 on 2 ranks", "send_counts has 3 entries, expected one per rank (2)",
       [](Communicator& c) { c.alltoallv(a, S(three), S(packed), b, S(two), S(packed), DataType::float32); }},
      {"alltoallv recv_displs empty", "recv_displs has 0 entries, expected one per rank (2)",
       [](Communicator& c) { c.ialltoallv(a, S(two), S(packed), b, S(two), S(), DataType::float32); }},
      {"allgatherv recv_counts of 3", "recv_counts has 3 entries, expected one per rank (2)",
       [](Communicator& c) { c.allgatherv(a, 2, b, S(three), S(packed), DataType::float32); }},
      {"alltoallv displacement overflow", "send_displs[1] 4611686018427387903 + send_counts[1] 2 elements × 4 bytes overflows",
       [](Communicator& c) { c.alltoallv(a, S(two), S(huge), b, S(two), S(packed), DataType::float32); }},
      {"allgatherv count overflow", "recv_counts[1] 4611686018427387903 elements × 8 bytes overflows",
       [](Communicator& c) { c.iallgatherv(a, 2, b, S(huge), S(packed), DataType::float64); }},
      {"alltoallv null send", "send buffer is null but 4 elements go out",
       [](Communicator& c) { c.alltoallv(nullptr, S(two), S(packed), b, S(two), S(packed), DataType::float32); }},
      {"allgatherv null recv", "recv buffer is null but recv_counts[0] is 2",
       [](Communicator& c) { c.allgatherv(a, 2, nullptr, S(two), S(packed), DataType::float32); }},
      {"alltoallv own block of another size", "send_counts[0] is 3 but recv_counts[0] is 2",
       [](Communicator& c) { c.alltoallv(a, S(own3), S(packed), b, S(two), S(packed), DataType::float32); }},
      {"allgatherv send_count not its block", "send_count is 3 but recv_counts[0] (this rank's block) is 2",
       [](Communicator& c) { c.allgatherv(a, 3, b, S(two), S(packed), DataType::float32); }},
      {"alltoallv receive blocks overlap", "the receive blocks of ranks 0 and 1 overlap (elements [0, 2) and [1, 3) of recv)",
       [](Communicator& c) { c.alltoallv(a, S(two), S(packed), b, S(two), S(same_place), DataType::float32); }},
      {"allgatherv receive blocks overlap", "the receive blocks of ranks 0 and 1 overlap",
       [](Communicator& c) { c.iallgatherv(a, 2, b, S(two), S(same_place), DataType::float32); }},
      {"alltoallv in place", "overlaps the receive block of rank 0 (elements [0, 2) of recv); alltoallv has no in-place form",
       [](Communicator& c) { c.alltoallv(b, S(two), S(packed), b, S(two), S(packed), DataType::float32); }},
      {"alltoallv send and receive blocks interleaved", "the send block for rank 1 (elements [2, 4) of send) overlaps the receive block of rank 0 (elements [0, 2) of recv)",
       [](Communicator& c) { c.alltoallv(b, S(two), S(packed), b + 3, S(two), S(packed), DataType::float32); }},
      {"allgatherv send in recv, not its own block", "the send buffer overlaps the receive block of rank 1 (elements [2, 4) of recv) but is not the in-place layout",
       [](Communicator& c) { c.allgatherv(b + 2, 2, b, S(two), S(packed), DataType::float32); }},
  };
}

TEST(Arguments, EveryBadCallIsRejectedAtTheCallWithoutTraffic) {
  testing::ThreadWorld world("native", 2);
  std::vector<BadCall> calls = bad_calls();
  for (auto& bc : bad_uneven_calls()) calls.push_back(std::move(bc));
  for (const auto& bc : calls) {
    std::string msg;
    world.run([&](int r, Communicator& c) {
      if (r == 0) {
        try {
          bc.call(c);
          msg = "(no error)";
        } catch (const InvalidArgument& e) {
          msg = e.what();
        }
      }
      // Both ranks then run a real collective: it must succeed, so the bad call sent nothing.
      int32_t v = r + 1, sum = 0;
      c.allreduce(&v, &sum, 1, DataType::int32, ReduceOp::sum);
      if (sum != 3) throw std::runtime_error("allreduce after a rejected call gave " + std::to_string(sum));
    });
    EXPECT_NE(msg.find(bc.expect), std::string::npos) << bc.name << ": got '" << msg << "'";
    EXPECT_NE(msg.find("on rank 0 of 2 [native]"), std::string::npos) << bc.name << ": " << msg;
  }
}

TEST(Arguments, CountZeroWithNullBuffersIsFine) {
  testing::ThreadWorld world("native", 3);
  world.run([](int r, Communicator& c) {
    c.allreduce(nullptr, nullptr, 0, DataType::float32, ReduceOp::sum);
    c.broadcast(nullptr, 0, DataType::int8, 2);
    c.allgather(nullptr, nullptr, 0, DataType::float64);
    c.alltoall(nullptr, nullptr, 0, DataType::bfloat16);
    c.reduce(nullptr, nullptr, 0, DataType::int64, ReduceOp::max, 1);
    // Empty blocks may sit anywhere, and their buffers be null.
    const size_t zeros[3] = {0, 0, 0}, far[3] = {7, size_t{1} << 40, 3};
    c.alltoallv(nullptr, zeros, far, nullptr, zeros, far, DataType::int32);
    c.iallgatherv(nullptr, 0, nullptr, zeros, far, DataType::int8).wait();
  });
}

// The uneven ops count in the statistics (bytes: what this rank sends) and show in the flight record
// with this rank's side of the call.
TEST(Arguments, UnevenOpsCountInTheStatisticsAndTheRecord) {
  testing::ThreadWorld world("gloo", 2);
  world.run([](int r, Communicator& c) {
    // Rank 0 sends 1 element to itself and 3 to rank 1; rank 1 sends 2 to rank 0 and none to itself.
    const size_t send_counts[2][2] = {{1, 3}, {2, 0}}, recv_counts[2][2] = {{1, 2}, {3, 0}};
    const size_t send_displs[2] = {0, 1}, recv_displs[2][2] = {{4, 0}, {1, 0}};  // rank 0's in reverse order
    std::vector<int32_t> in(4), out(6, -1);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int32_t>(10 * r + i);
    c.alltoallv(in.data(), send_counts[r], send_displs, out.data(), recv_counts[r], recv_displs[r], DataType::int32);
    const std::vector<int32_t> want = r == 0 ? std::vector<int32_t>{10, 11, -1, -1, 0, -1}
                                             : std::vector<int32_t>{-1, 1, 2, 3, -1, -1};
    if (out != want) throw std::runtime_error("rank " + std::to_string(r) + ": wrong alltoallv result");
    const auto st = c.stats()[static_cast<size_t>(OpKind::alltoallv)];
    if (st.calls != 1 || st.bytes != (r == 0 ? 16u : 8u))
      throw std::runtime_error("stats: " + std::to_string(st.calls) + " calls, " + std::to_string(st.bytes) + " bytes");
    const std::string rec = c.flight_record();
    if (rec.find("alltoallv") == std::string::npos || rec.find("gloo unbound buffers") == std::string::npos)
      throw std::runtime_error("record: " + rec);
  });
}

TEST(Arguments, UnknownBackendNamesTheOnesAvailable) {
  auto store = std::make_shared<HashStore>();
  try {
    create("carrier-pigeon", store, 0, 1);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("carrier-pigeon"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("native"), std::string::npos);
  }
}

TEST(Arguments, ParsersRejectUnknownNames) {
  EXPECT_EQ(parse_dtype("half"), DataType::float16);
  EXPECT_EQ(parse_dtype("bf16"), DataType::bfloat16);
  EXPECT_EQ(parse_reduce_op("avg"), ReduceOp::avg);
  EXPECT_EQ(parse_reduce_op("bxor"), ReduceOp::bxor);
  for (int i = 0; i < kNumReduceOps; ++i)  // every name parses back to its op
    EXPECT_EQ(parse_reduce_op(to_string(static_cast<ReduceOp>(i))), static_cast<ReduceOp>(i));
  EXPECT_THROW(parse_dtype("float128"), InvalidArgument);
  EXPECT_THROW(parse_reduce_op("xor"), InvalidArgument);
}

}  // namespace
}  // namespace mpcomm
