// The checker behind the conformance suite and `mpcomm selftest` must catch every wrong element, also
// in large buffers, where it compares whole tiles of the expected pattern at once. Here a communicator
// runs each collective on a real one (native, 3 ranks as threads) and then damages one element of one
// rank's result: a changed value, or an element left unwritten (the poison the checker put there).
// The checker must count exactly that one element on that rank, name its index, and pass every other
// rank; an avg result within the rounding the suite allows must still pass.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "core/front_door.h"
#include "core/op.h"
#include "harness/thread_world.h"
#include "mpcomm/error.h"
#include "testing/collective_check.h"

namespace mpcomm {
namespace {

enum class Damage { none, flip_high_bit, flip_low_bit, unwritten };

// A backend made of a communicator (the front door in front of it checks and records each call once).
class Damaging : public detail::Backend {
 public:
  Damaging(Communicator& inner, bool damage_here, size_t at, Damage how)
      : Backend("damaging", inner.rank(), inner.size(), inner.topology(), inner.options(), nullptr),
        inner_(inner), damage_here_(damage_here), at_(at), how_(how) {}

  void run(const detail::Op& op) override {
    Communicator& c = inner_;
    switch (op.kind) {
      case OpKind::allreduce: c.allreduce(op.send, op.recv, op.count, op.dtype, op.redop); break;
      case OpKind::broadcast: c.broadcast(op.recv, op.count, op.dtype, op.root); break;
      case OpKind::reduce: c.reduce(op.send, op.recv, op.count, op.dtype, op.redop, op.root); break;
      case OpKind::allgather: c.allgather(op.send, op.recv, op.count, op.dtype); break;
      case OpKind::reduce_scatter: c.reduce_scatter(op.send, op.recv, op.count, op.dtype, op.redop); break;
      case OpKind::gather: c.gather(op.send, op.recv, op.count, op.dtype, op.root); break;
      case OpKind::scatter: c.scatter(op.send, op.recv, op.count, op.dtype, op.root); break;
      case OpKind::alltoall: c.alltoall(op.send, op.recv, op.count, op.dtype); break;
      case OpKind::alltoallv:
        c.alltoallv(op.send, op.v->send_counts, op.v->send_displs, op.recv, op.v->recv_counts, op.v->recv_displs,
                    op.dtype);
        break;
      case OpKind::allgatherv:
        c.allgatherv(op.send, op.count, op.recv, op.v->recv_counts, op.v->recv_displs, op.dtype);
        break;
      default: throw Internal("Damaging: no " + std::string(to_string(op.kind)));
    }
    // The front door's own exchanges (MPCOMM_CHECK, the uneven ops' counts) are not the case's result.
    if (!damage_here_ || how_ == Damage::none || op.fingerprint_probe) return;
    const size_t es = dtype_size(op.dtype);
    auto* e = static_cast<unsigned char*>(op.recv) + at_ * es;
    switch (how_) {
      case Damage::flip_high_bit: e[es - 1] ^= 0x40; break;  // little endian: exponent or high bits
      case Damage::flip_low_bit: e[0] ^= 0x01; break;        // one unit in the last place
      case Damage::unwritten: std::memset(e, 0xA5, es); break;
      case Damage::none: break;
    }
  }
  std::shared_ptr<detail::RequestState> start(const detail::Op&) override {
    throw Internal("Damaging: no point to point");
  }
  void abort(ErrorCode, const std::string& reason) override { inner_.abort(reason); }

 private:
  Communicator& inner_;
  bool damage_here_;
  size_t at_;
  Damage how_;
};

bool uneven(OpKind op) { return op == OpKind::alltoallv || op == OpKind::allgatherv; }

// Elements of the buffer the checker reads on `rank` when it gets a result.
size_t result_elems(const check::Case& c, int n, int rank) {
  if (uneven(c.op)) return check::uneven_recv_elements(c, rank, n);
  const bool blocks = c.op == OpKind::allgather || c.op == OpKind::gather || c.op == OpKind::alltoall;
  return blocks ? c.count * static_cast<size_t>(n) : c.count;
}

// Runs c with element `at` of rank `victim`'s result damaged; returns every rank's result.
std::vector<check::Result> run_damaged(const check::Case& c, int victim, size_t at, Damage how) {
  auto& world = testing::shared_world("native", 3);
  std::vector<check::Result> res(3);
  world.run([&](int r, Communicator& comm) {
    auto d = detail::make_communicator(std::make_unique<Damaging>(comm, r == victim, at, how), nullptr);
    res[static_cast<size_t>(r)] = check::run_case(*d, c);
  });
  return res;
}

TEST(Checker, CountsExactlyTheDamagedElementOfEveryOpAndDtype) {
  const int n = 3;
  const size_t large = (size_t{1} << 20) + 3;
  int runs = 0;
  for (OpKind op : check::checked_ops()) {
    for (int d = 0; d < kNumDataTypes; ++d) {
      check::Case c;
      c.op = op;
      c.dtype = static_cast<DataType>(d);
      // Every reduce op once over the dtypes: the bitwise ones on integer types (int8 band, uint8 bor,
      // int32 bxor, int64 sum), the others on the floating-point ones (prod, min, max, avg).
      c.redop = op == OpKind::allreduce || op == OpKind::reduce || op == OpKind::reduce_scatter
                    ? static_cast<ReduceOp>(is_floating(c.dtype) ? (d + 7) % 5 : (d + 5) % kNumReduceOps)
                    : ReduceOp::sum;
      const bool blocks = op != OpKind::allreduce && op != OpKind::reduce && op != OpKind::broadcast;
      c.count = blocks ? (large + n - 1) / n : large;
      c.root = d % n;
      c.in_place = op != OpKind::broadcast && op != OpKind::alltoallv && d % 2 == 1;
      // Only the root's result is checked for reduce and gather.
      const int victim = op == OpKind::reduce || op == OpKind::gather ? c.root : (d + 1) % n;
      const size_t elems = result_elems(c, n, victim);
      // The first element (left unwritten), one inside a later tile, the last one (changed): each op
      // gets every position over the dtypes. The uneven ops' first and last elements lie between blocks
      // (the gaps before and after them), where a change is a write the op must not make.
      const size_t positions[] = {0, elems / 2 + 1, elems - 1};
      const size_t at = positions[d % 3];
      const auto res =
          run_damaged(c, victim, at, at == 0 && !uneven(op) ? Damage::unwritten : Damage::flip_high_bit);
      ++runs;
      for (int r = 0; r < n; ++r) {
        const auto& got = res[static_cast<size_t>(r)];
        const std::string what = check::describe(c) + ", element " + std::to_string(at) + " of rank " +
                                 std::to_string(victim) + " damaged; rank " + std::to_string(r);
        if (r != victim) {
          EXPECT_EQ(got.wrong, 0u) << what << ": " << got.first_wrong;
          continue;
        }
        EXPECT_EQ(got.wrong, 1u) << what;
        EXPECT_NE(got.first_wrong.find("[" + std::to_string(at) + "]"), std::string::npos) << what << ": " << got.first_wrong;
      }
    }
  }
  EXPECT_EQ(runs, static_cast<int>(check::checked_ops().size()) * kNumDataTypes);
}

// Small counts go element by element; the same damage must be caught there too.
TEST(Checker, CountsTheDamagedElementOfSmallBuffers) {
  for (OpKind op : check::checked_ops())
    for (size_t count : {size_t{1}, size_t{7}, size_t{1000}}) {
      check::Case c;
      c.op = op;
      c.dtype = DataType::int32;
      c.count = count;
      const int victim = op == OpKind::reduce || op == OpKind::gather ? c.root : 2;
      // The uneven ops' last element lies after every block: written there, it is wrong.
      const auto res = run_damaged(c, victim, result_elems(c, 3, victim) - 1,
                                   uneven(op) ? Damage::flip_high_bit : Damage::unwritten);
      for (int r = 0; r < 3; ++r)
        EXPECT_EQ(res[static_cast<size_t>(r)].wrong, r == victim ? 1u : 0u) << check::describe(c) << ", rank " << r;
    }
}

// A floating-point avg one unit in the last place off is within the allowed rounding; the same element
// off by a power of two is not. The tile comparison sees both as different bytes.
TEST(Checker, AllowsTheAvgRoundingAndNothingMore) {
  for (DataType t : {DataType::float16, DataType::bfloat16, DataType::float32, DataType::float64}) {
    check::Case c;
    c.op = OpKind::allreduce;
    c.dtype = t;
    c.redop = ReduceOp::avg;
    c.count = (size_t{1} << 20) + 3;
    const size_t at = c.count / 3;
    const auto near = run_damaged(c, 1, at, Damage::flip_low_bit);
    const auto far = run_damaged(c, 1, at, Damage::flip_high_bit);
    for (size_t r = 0; r < 3; ++r) {
      EXPECT_EQ(near[r].wrong, 0u) << to_string(t) << ", rank " << r << ": " << near[r].first_wrong;
      EXPECT_EQ(far[r].wrong, r == 1 ? 1u : 0u) << to_string(t) << ", rank " << r;
    }
    // A sum has no tolerance: one unit in the last place is wrong.
    c.redop = ReduceOp::sum;
    EXPECT_EQ(run_damaged(c, 1, at, Damage::flip_low_bit)[1].wrong, 1u) << to_string(t);
  }
}

}  // namespace
}  // namespace mpcomm
