// Bad arguments are rejected at the call, before any traffic: the rank that made the bad call gets an
// InvalidArgument naming the op and the problem, its peers see nothing, and the communicator stays
// usable (a stray frame would make the next collective fail with a mismatch).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

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
      {"overlapping buffers not in place", "overlap but are not the in-place layout",
       [](Communicator& c) { c.allreduce(b, b + 1, 4, DataType::float32, ReduceOp::sum); }},
      {"allgather wrong in-place offset", "overlap but are not the in-place layout",
       [](Communicator& c) { c.allgather(b + 3, b, 2, DataType::float32); }},
      {"send to self", "oneself", [](Communicator& c) { c.send(a, 1, DataType::float32, c.rank(), 0); }},
      {"recv from a rank that does not exist", "peer 5 is out of range", [](Communicator& c) { c.recv(b, 1, DataType::float32, 5, 0); }},
      {"negative tag", "tag -3 is negative", [](Communicator& c) { c.isend(a, 1, DataType::float32, 1 - c.rank(), -3); }},
  };
}

TEST(Arguments, EveryBadCallIsRejectedAtTheCallWithoutTraffic) {
  testing::ThreadWorld world("native", 2);
  for (const auto& bc : bad_calls()) {
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
  EXPECT_THROW(parse_dtype("float128"), InvalidArgument);
  EXPECT_THROW(parse_reduce_op("xor"), InvalidArgument);
}

}  // namespace
}  // namespace mpcomm
