#include "testing/collective_check.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "device/device.h"

namespace mpcomm::check {

namespace {

bool is_unsigned(DataType t) { return t == DataType::uint8; }

// Input of `rank` at element `i` for an op that reduces with `red` over n ranks. Each pattern is
// periodic in i (period_of), so the expected reduction is a small table computed once per case.
inline int64_t reduce_input(ReduceOp red, bool uns, int rank, size_t i, int n) {
  const auto ii = static_cast<int64_t>(i);
  switch (red) {
    case ReduceOp::sum: {
      int64_t v = (ii * 3 + rank * 5 + 1) % 7;
      return uns ? v : v - 3;
    }
    case ReduceOp::prod:
      if (rank == static_cast<int>(ii % n)) return 2;
      return (!uns && (ii + rank) % 3 == 0) ? -1 : 1;
    case ReduceOp::min:
    case ReduceOp::max: {
      int64_t v = (ii * 5 + rank * 11) % 13;
      return uns ? v : v - 6;
    }
    case ReduceOp::avg: {
      int64_t base = ii % 5 + 3;
      if (rank == n - 1 && n % 2 == 1) return base;
      int64_t d = (ii + rank / 2) % 3;
      return rank % 2 == 0 ? base + d : base - d;
    }
    case ReduceOp::band: return 0x7f & ~(int64_t{1} << ((ii + rank) % 7));  // each rank clears one bit
    case ReduceOp::bor: return int64_t{1} << ((ii * 3 + rank) % 7);          // each rank sets one
    case ReduceOp::bxor: {
      int64_t v = (ii * 5 + rank * 3 + 1) % 256;
      return uns ? v : v - 128;  // signed: negative half the time, every bit of the byte
    }
  }
  return 0;
}

size_t period_of(ReduceOp red, int n) {
  switch (red) {
    case ReduceOp::sum: return 7;
    case ReduceOp::prod: return 3 * static_cast<size_t>(n);
    case ReduceOp::min:
    case ReduceOp::max: return 13;
    case ReduceOp::avg: return 15;
    case ReduceOp::band:
    case ReduceOp::bor: return 7;
    case ReduceOp::bxor: return 256;
  }
  return 1;
}

// The exact reduction over all n ranks' inputs, for one period of indices.
std::vector<int64_t> reduce_expected_table(ReduceOp red, bool uns, int n) {
  std::vector<int64_t> table(period_of(red, n));
  for (size_t i = 0; i < table.size(); ++i) {
    int64_t acc = reduce_input(red, uns, 0, i, n);
    for (int r = 1; r < n; ++r) {
      int64_t v = reduce_input(red, uns, r, i, n);
      switch (red) {
        case ReduceOp::sum:
        case ReduceOp::avg: acc += v; break;
        case ReduceOp::prod: acc *= v; break;
        case ReduceOp::min: acc = v < acc ? v : acc; break;
        case ReduceOp::max: acc = v > acc ? v : acc; break;
        case ReduceOp::band: acc &= v; break;
        case ReduceOp::bor: acc |= v; break;
        case ReduceOp::bxor: acc ^= v; break;
      }
    }
    table[i] = red == ReduceOp::avg ? acc / n : acc;
  }
  return table;
}

constexpr size_t kMovePeriod = 97;
inline int64_t move_value(int rank, size_t i) { return (31 * static_cast<int64_t>(rank) + 7 * static_cast<int64_t>(i % kMovePeriod)) % 97; }

void put(DataType t, void* p, size_t i, int64_t v) {
  switch (t) {
    case DataType::int8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v); break;
    case DataType::uint8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
    case DataType::int32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DataType::int64: static_cast<int64_t*>(p)[i] = v; break;
    case DataType::float16: static_cast<uint16_t*>(p)[i] = float_to_half(static_cast<float>(v)); break;
    case DataType::bfloat16: static_cast<uint16_t*>(p)[i] = float_to_bf16(static_cast<float>(v)); break;
    case DataType::float32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DataType::float64: static_cast<double*>(p)[i] = static_cast<double>(v); break;
  }
}

double get(DataType t, const void* p, size_t i) {
  switch (t) {
    case DataType::int8: return static_cast<const int8_t*>(p)[i];
    case DataType::uint8: return static_cast<const uint8_t*>(p)[i];
    case DataType::int32: return static_cast<const int32_t*>(p)[i];
    case DataType::int64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DataType::float16: return half_to_float(static_cast<const uint16_t*>(p)[i]);
    case DataType::bfloat16: return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DataType::float32: return static_cast<const float*>(p)[i];
    case DataType::float64: return static_cast<const double*>(p)[i];
  }
  return 0;
}

// What a floating-point avg may be off by: NCCL computes it as a sum of premultiplied values
// (x_i × 1/n, each rounded), so allow n roundings of the largest value the avg inputs reach (< 16). Every
// other result must be exact: the inputs are small integers.
double avg_tolerance(const Case& c, int n) {
  if (c.redop != ReduceOp::avg || !is_floating(c.dtype)) return 0;
  const double eps = c.dtype == DataType::float16 ? 0x1p-10 : c.dtype == DataType::bfloat16 ? 0x1p-7
                     : c.dtype == DataType::float32 ? 0x1p-23 : 0x1p-52;
  return n * eps * 16;
}

// Every pattern the checker writes or expects is periodic in the element index (period_of, 97 for data
// movement). A large buffer is filled from, and compared against, a tile of whole periods in the
// dtype's bytes (memcpy/memcmp); only a tile that differs is looked at element by element. This keeps
// the conformance suite's 2^20-element cases about as cheap as the collective itself.
constexpr size_t kTileMin = 4096;  // elements; shorter runs go element by element

// value(k) for k in [0, *elems): *elems is the smallest multiple of value's period p >= kTileMin.
template <class F>
std::vector<uint8_t> tile(DataType t, size_t p, F&& value, size_t* elems) {
  const size_t len = (kTileMin + p - 1) / p * p;
  std::vector<uint8_t> bytes(len * dtype_size(t));
  for (size_t k = 0; k < len; ++k) put(t, bytes.data(), k, value(k));
  *elems = len;
  return bytes;
}

// buf[at + k] = value(k) for k in [0, count); value(k) has period p.
template <class F>
void fill(DataType t, void* buf, size_t at, size_t count, size_t p, F&& value) {
  if (count <= kTileMin) {
    for (size_t k = 0; k < count; ++k) put(t, buf, at + k, value(k));
    return;
  }
  const size_t es = dtype_size(t);
  size_t len = 0;
  const std::vector<uint8_t> pattern = tile(t, p, value, &len);
  auto* dst = static_cast<uint8_t*>(buf) + at * es;
  for (size_t k = 0; k < count; k += len) std::memcpy(dst + k * es, pattern.data(), std::min(len, count - k) * es);
}

constexpr uint8_t kPoison = 0xA5;  // every byte of an output before the call

struct Checker {
  const Case& c;
  Result& res;
  double tol = 0;
  // Elements [at, at + count) of buf still hold the poison (nobody wrote them).
  void untouched(const void* buf, size_t at, size_t count, const char* where) {
    const size_t es = dtype_size(c.dtype);
    const auto* b = static_cast<const uint8_t*>(buf);
    for (size_t i = at; i < at + count; ++i)
      for (size_t k = 0; k < es; ++k)
        if (b[i * es + k] != kPoison) {
          if (res.wrong++ == 0)
            res.first_wrong = std::string(where) + "[" + std::to_string(i) + "] was written, but it lies between blocks";
          break;
        }
  }
  void expect(const void* buf, size_t i, int64_t want_int, const char* where) {
    // The expected value as this dtype stores it (integer types wrap, as the reduction does).
    uint64_t slot = 0;
    put(c.dtype, &slot, 0, want_int);
    double want = get(c.dtype, &slot, 0);
    double got = get(c.dtype, buf, i);
    if (got == want || (tol > 0 && std::fabs(got - want) <= tol)) return;
    if (res.wrong++ == 0)
      res.first_wrong = std::string(where) + "[" + std::to_string(i) + "] = " + std::to_string(got) + ", expected " +
                        std::to_string(want);
  }
  // expect(buf, at + k, want(k)) for k in [0, count); want(k) has period p. Bytes equal to the
  // expected value's are a pass (the expected values are never NaN); a tile with any other byte is
  // checked element by element, so ±0, the avg tolerance and the count of wrong elements are as above.
  template <class F>
  void expect_run(const void* buf, size_t at, size_t count, size_t p, F&& want, const char* where) {
    if (count <= kTileMin) {
      for (size_t k = 0; k < count; ++k) expect(buf, at + k, want(k), where);
      return;
    }
    const size_t es = dtype_size(c.dtype);
    size_t len = 0;
    const std::vector<uint8_t> pattern = tile(c.dtype, p, want, &len);
    const auto* got = static_cast<const uint8_t*>(buf) + at * es;
    for (size_t k = 0; k < count; k += len) {
      const size_t m = std::min(len, count - k);
      if (std::memcmp(got + k * es, pattern.data(), m * es) == 0) continue;
      for (size_t j = k; j < k + m; ++j) expect(buf, at + j, want(j), where);
    }
  }
};

// The case's host buffers mirrored on the communicator's device (nothing to do for cpu): pointers into
// a registered host buffer translate to the same offset of its device copy; upload() before the call,
// download() after it.
class Mirror {
 public:
  explicit Mirror(Device d) : d_(d) {}
  void add(std::vector<uint8_t>& host) {
    if (d_.kind == Device::cpu) return;
    bufs_.push_back({&host, device::Buffer(d_, host.size())});
  }
  template <class T>
  T* operator()(T* p) const {
    for (const auto& b : bufs_) {
      auto* h = reinterpret_cast<const uint8_t*>(b.host->data());
      auto* q = reinterpret_cast<const uint8_t*>(p);
      if (q >= h && q < h + b.host->size())
        return reinterpret_cast<T*>(b.dev.data() + (q - h));
    }
    return p;
  }
  void upload() const {
    for (const auto& b : bufs_) device::copy(b.dev.data(), b.host->data(), b.host->size());
  }
  void download() const {
    for (const auto& b : bufs_) device::copy(b.host->data(), b.dev.data(), b.host->size());
  }

 private:
  struct Pair {
    std::vector<uint8_t>* host;
    device::Buffer dev;
  };
  Device d_;
  std::vector<Pair> bufs_;
};

// An uneven op's layout on one rank: counts and displacements per rank, and each buffer's elements.
// Blocks go in another order than the ranks' with gaps of 0-2 elements between them and one before and
// after, so that a backend that assumes packed blocks, or writes between them, is caught.
struct UnevenLayout {
  std::vector<size_t> send_counts, send_displs, recv_counts, recv_displs;
  size_t send_elems = 0, recv_elems = 0;
};

// Places blocks of `counts` in the order first, first+step, ... (mod n); returns the elements spanned.
size_t place(const std::vector<size_t>& counts, int first, int step, std::vector<size_t>& displs) {
  const int n = static_cast<int>(counts.size());
  displs.assign(counts.size(), 0);
  size_t at = 1;
  for (int i = 0; i < n; ++i) {
    const auto q = static_cast<size_t>(((first + i * step) % n + n) % n);
    displs[q] = at;
    at += counts[q] + q % 3;
  }
  return at + 1;
}

UnevenLayout uneven_layout(const Case& c, int r, int n) {
  UnevenLayout l;
  const auto nn = static_cast<size_t>(n);
  l.recv_counts.resize(nn);
  for (int q = 0; q < n; ++q)
    l.recv_counts[static_cast<size_t>(q)] = c.op == OpKind::alltoallv ? uneven_count(q, r, c.count, n)
                                                                       : uneven_count(q, 0, c.count, n);
  l.recv_elems = place(l.recv_counts, n - 1, -1, l.recv_displs);  // reverse rank order
  if (c.op == OpKind::alltoallv) {
    l.send_counts.resize(nn);
    for (int q = 0; q < n; ++q) l.send_counts[static_cast<size_t>(q)] = uneven_count(r, q, c.count, n);
    l.send_elems = place(l.send_counts, r + 1, 1, l.send_displs);  // rotated: rank r+1's block first
  } else {
    l.send_elems = l.recv_counts[static_cast<size_t>(r)];
  }
  return l;
}

// What rank `from` sends rank `to` in an uneven case: its data-movement values from this index on.
size_t uneven_first(int from, int to) { return 13 * static_cast<size_t>(to) + 5 * static_cast<size_t>(from); }

}  // namespace

size_t uneven_count(int from, int to, size_t count, int n) {
  if (count == 0) return 0;
  if (count >= (size_t{1} << 20) && from == n - 1 && to == 0) return count;
  const size_t b = (count + static_cast<size_t>(n) - 1) / static_cast<size_t>(n);
  switch ((3 * from + 2 * to + 1) % 5) {
    case 0: return 0;
    case 1: return b;
    case 2: return (b + 1) / 2;
    case 3: return b + (b + 2) / 3;
    default: return 1;
  }
}

size_t uneven_recv_elements(const Case& c, int rank, int n) { return uneven_layout(c, rank, n).recv_elems; }

const std::vector<OpKind>& checked_ops() {
  static const std::vector<OpKind> ops = {OpKind::allreduce, OpKind::broadcast,      OpKind::reduce,
                                          OpKind::allgather, OpKind::reduce_scatter, OpKind::gather,
                                          OpKind::scatter,   OpKind::alltoall,       OpKind::alltoallv,
                                          OpKind::allgatherv};
  return ops;
}

std::vector<Case> conformance_cases(OpKind op, int n) {
  static const size_t counts[] = {0, 1, 7, 1000, (size_t{1} << 20) + 3};
  const bool reduces = op == OpKind::allreduce || op == OpKind::reduce || op == OpKind::reduce_scatter;
  const bool rooted = op == OpKind::broadcast || op == OpKind::reduce || op == OpKind::gather || op == OpKind::scatter;
  const bool blocks = op == OpKind::allgather || op == OpKind::reduce_scatter || op == OpKind::gather ||
                      op == OpKind::scatter || op == OpKind::alltoall;
  const auto nn = static_cast<size_t>(n);
  std::vector<Case> cases;
  if (op == OpKind::alltoallv || op == OpKind::allgatherv) {
    for (DataType dt : {DataType::int8, DataType::bfloat16, DataType::float32, DataType::float64})
      for (size_t count : counts)
        for (bool in_place : {false, true}) {
          if (op == OpKind::alltoallv && in_place) continue;
          Case c;
          c.op = op;
          c.dtype = dt;
          c.count = count;
          c.in_place = in_place;
          cases.push_back(c);
        }
    return cases;
  }
  for (int d = 0; d < kNumDataTypes; ++d)
    for (int ro = 0; ro < (reduces ? kNumReduceOps : 1); ++ro)
      for (size_t count : counts)
        for (bool in_place : {false, true}) {
          if (op == OpKind::broadcast && in_place) continue;  // broadcast has one buffer
          if (reduces && is_bitwise(static_cast<ReduceOp>(ro)) && is_floating(static_cast<DataType>(d))) continue;
          Case c;
          c.op = op;
          c.dtype = static_cast<DataType>(d);
          c.redop = static_cast<ReduceOp>(ro);
          c.count = blocks ? (count + nn - 1) / nn : count;
          c.root = rooted ? static_cast<int>((count + static_cast<size_t>(d)) % nn) : 0;
          c.in_place = in_place;
          cases.push_back(c);
        }
  return cases;
}

std::string describe(const Case& c) {
  std::string s = std::string(to_string(c.op)) + " count " + std::to_string(c.count) + " " +
                  std::string(to_string(c.dtype));
  if (c.op == OpKind::allreduce || c.op == OpKind::reduce || c.op == OpKind::reduce_scatter)
    s += " " + std::string(to_string(c.redop));
  if (c.op == OpKind::broadcast || c.op == OpKind::reduce || c.op == OpKind::gather || c.op == OpKind::scatter)
    s += " root " + std::to_string(c.root);
  return s + (c.in_place ? " in-place" : " out-of-place");
}

// ---- a case on one rank: its buffers, the call, and the check ------------------------------------------

struct PreparedCase::State {
  State(Communicator& comm, const Case& c)
      : comm(comm), c(c), n(comm.size()), r(comm.rank()), es(dtype_size(c.dtype)), m(comm.options().device) {}
  Communicator& comm;
  Case c;
  int n, r;
  size_t es;
  Mirror m;
  UnevenLayout v;  // alltoallv, allgatherv
  std::vector<uint8_t> in, out;
  void* send = nullptr;  // the call's buffers (host; m() maps them to the device)
  void* recv = nullptr;
};

PreparedCase::PreparedCase(Communicator& comm, const Case& c) : s_(std::make_unique<State>(comm, c)) {
  State& st = *s_;
  const int n = st.n, r = st.r;
  const size_t es = st.es, cnt = c.count, nn = static_cast<size_t>(n);
  const bool uns = is_unsigned(c.dtype);
  const DataType t = c.dtype;
  const size_t rp = period_of(c.redop, n), mp = kMovePeriod;
  const size_t rc = static_cast<size_t>(r) * cnt;  // this rank's block, for the ops with blocks
  auto reduce_in = [&](size_t i) { return reduce_input(c.redop, uns, r, i, n); };
  auto moved = [](int q, size_t first) { return [q, first](size_t k) { return move_value(q, first + k); }; };
  // Outputs are poisoned so that an element the backend never wrote is caught.
  auto poisoned = [&](size_t elems) { return std::vector<uint8_t>(elems * es + 1, kPoison); };
  switch (c.op) {
    case OpKind::allreduce:
    case OpKind::reduce:
      st.in.resize(cnt * es + 1), st.out = poisoned(cnt);
      st.send = c.in_place ? st.out.data() : st.in.data();
      st.recv = st.out.data();
      fill(t, st.send, 0, cnt, rp, reduce_in);
      break;
    case OpKind::broadcast:
      st.out = poisoned(cnt);
      st.send = st.recv = st.out.data();
      if (r == c.root) fill(t, st.out.data(), 0, cnt, mp, moved(c.root, 0));
      break;
    case OpKind::allgather:
      st.in.resize(cnt * es + 1), st.out = poisoned(cnt * nn);
      st.send = c.in_place ? st.out.data() + rc * es : st.in.data();
      st.recv = st.out.data();
      fill(t, st.send, 0, cnt, mp, moved(r, 0));
      break;
    case OpKind::reduce_scatter:
      st.in.resize(cnt * nn * es + 1), st.out = poisoned(cnt);
      fill(t, st.in.data(), 0, cnt * nn, rp, reduce_in);
      st.send = st.in.data();
      st.recv = c.in_place ? st.in.data() + rc * es : st.out.data();
      break;
    case OpKind::gather:
      st.in.resize(cnt * es + 1), st.out = poisoned(cnt * nn);
      st.send = (c.in_place && r == c.root) ? st.out.data() + rc * es : st.in.data();
      st.recv = st.out.data();
      fill(t, st.send, 0, cnt, mp, moved(r, 0));
      break;
    case OpKind::scatter:
      st.in.resize(cnt * nn * es + 1), st.out = poisoned(cnt);
      if (r == c.root) fill(t, st.in.data(), 0, cnt * nn, mp, moved(c.root, 0));
      st.send = st.in.data();
      st.recv = (c.in_place && r == c.root) ? st.in.data() + rc * es : st.out.data();
      break;
    case OpKind::alltoall:
      st.in.resize(cnt * nn * es + 1), st.out = poisoned(cnt * nn);
      st.send = c.in_place ? st.out.data() : st.in.data();
      st.recv = st.out.data();
      fill(t, st.send, 0, cnt * nn, mp, moved(r, 0));
      break;
    case OpKind::alltoallv: {
      if (c.in_place) throw InvalidArgument("mpcomm: check: alltoallv has no in-place form");
      st.v = uneven_layout(c, r, n);
      st.in = poisoned(st.v.send_elems), st.out = poisoned(st.v.recv_elems);
      st.send = st.in.data();
      st.recv = st.out.data();
      for (int q = 0; q < n; ++q) {
        const auto qi = static_cast<size_t>(q);
        fill(t, st.send, st.v.send_displs[qi], st.v.send_counts[qi], mp, moved(r, uneven_first(r, q)));
      }
      break;
    }
    case OpKind::allgatherv: {
      st.v = uneven_layout(c, r, n);
      const size_t mine = st.v.recv_counts[static_cast<size_t>(r)];
      st.in = poisoned(mine), st.out = poisoned(st.v.recv_elems);
      st.send = c.in_place ? st.out.data() + st.v.recv_displs[static_cast<size_t>(r)] * es : st.in.data();
      st.recv = st.out.data();
      fill(t, st.send, 0, mine, mp, moved(r, uneven_first(r, r)));
      break;
    }
    default:
      throw InvalidArgument("mpcomm: check: cases of " + std::string(to_string(c.op)) + " are not supported");
  }
  st.m.add(st.in);
  st.m.add(st.out);
}

PreparedCase::~PreparedCase() = default;
PreparedCase::PreparedCase(PreparedCase&&) noexcept = default;

Request PreparedCase::issue(bool nonblocking) {
  State& st = *s_;
  const Case& c = st.c;
  Communicator& comm = st.comm;
  st.m.upload();
  void* s = st.m(st.send);
  void* r = st.m(st.recv);
  const size_t n = c.count;
  const DataType t = c.dtype;
  switch (c.op) {
    case OpKind::allreduce:
      if (nonblocking) return comm.iallreduce(s, r, n, t, c.redop);
      comm.allreduce(s, r, n, t, c.redop);
      break;
    case OpKind::reduce:
      if (nonblocking) return comm.ireduce(s, r, n, t, c.redop, c.root);
      comm.reduce(s, r, n, t, c.redop, c.root);
      break;
    case OpKind::broadcast:
      if (nonblocking) return comm.ibroadcast(r, n, t, c.root);
      comm.broadcast(r, n, t, c.root);
      break;
    case OpKind::allgather:
      if (nonblocking) return comm.iallgather(s, r, n, t);
      comm.allgather(s, r, n, t);
      break;
    case OpKind::reduce_scatter:
      if (nonblocking) return comm.ireduce_scatter(s, r, n, t, c.redop);
      comm.reduce_scatter(s, r, n, t, c.redop);
      break;
    case OpKind::gather:
      if (nonblocking) return comm.igather(s, r, n, t, c.root);
      comm.gather(s, r, n, t, c.root);
      break;
    case OpKind::scatter:
      if (nonblocking) return comm.iscatter(s, r, n, t, c.root);
      comm.scatter(s, r, n, t, c.root);
      break;
    case OpKind::alltoall:
      if (nonblocking) return comm.ialltoall(s, r, n, t);
      comm.alltoall(s, r, n, t);
      break;
    case OpKind::alltoallv: {
      const UnevenLayout& v = st.v;
      if (nonblocking) {
        // The arrays go away before the request completes: the call must have copied them.
        const UnevenLayout copy = v;
        return comm.ialltoallv(s, copy.send_counts, copy.send_displs, r, copy.recv_counts, copy.recv_displs, t);
      }
      comm.alltoallv(s, v.send_counts, v.send_displs, r, v.recv_counts, v.recv_displs, t);
      break;
    }
    case OpKind::allgatherv: {
      const UnevenLayout& v = st.v;
      const size_t mine = v.recv_counts[static_cast<size_t>(st.r)];
      if (nonblocking) {
        const UnevenLayout copy = v;
        return comm.iallgatherv(s, mine, r, copy.recv_counts, copy.recv_displs, t);
      }
      comm.allgatherv(s, mine, r, v.recv_counts, v.recv_displs, t);
      break;
    }
    default: break;
  }
  return {};
}

void PreparedCase::run() { issue(false); }
Request PreparedCase::post() { return issue(true); }

Result PreparedCase::verify() {
  State& st = *s_;
  st.m.download();
  const Case& c = st.c;
  Result res;
  const int n = st.n, r = st.r;
  Checker chk{c, res, avg_tolerance(c, n)};
  const size_t cnt = c.count;
  const std::vector<int64_t> expected = reduce_expected_table(c.redop, is_unsigned(c.dtype), n);
  const size_t rp = period_of(c.redop, n), mp = kMovePeriod;
  const size_t rc = static_cast<size_t>(r) * cnt;
  auto reduced = [&](size_t first) { return [&, first](size_t k) { return expected[(first + k) % expected.size()]; }; };
  auto moved = [](int q, size_t first) { return [q, first](size_t k) { return move_value(q, first + k); }; };
  switch (c.op) {
    case OpKind::allreduce:
    case OpKind::reduce:
      if (c.op == OpKind::allreduce || r == c.root) chk.expect_run(st.recv, 0, cnt, rp, reduced(0), "recv");
      break;
    case OpKind::broadcast: chk.expect_run(st.recv, 0, cnt, mp, moved(c.root, 0), "buf"); break;
    case OpKind::allgather:
      for (int q = 0; q < n; ++q) chk.expect_run(st.recv, static_cast<size_t>(q) * cnt, cnt, mp, moved(q, 0), "recv");
      break;
    case OpKind::reduce_scatter: chk.expect_run(st.recv, 0, cnt, rp, reduced(rc), "recv"); break;
    case OpKind::gather:
      if (r == c.root)
        for (int q = 0; q < n; ++q) chk.expect_run(st.recv, static_cast<size_t>(q) * cnt, cnt, mp, moved(q, 0), "recv");
      break;
    case OpKind::scatter: chk.expect_run(st.recv, 0, cnt, mp, moved(c.root, rc), "recv"); break;
    case OpKind::alltoall:
      for (int q = 0; q < n; ++q) chk.expect_run(st.recv, static_cast<size_t>(q) * cnt, cnt, mp, moved(q, rc), "recv");
      break;
    case OpKind::alltoallv:
    case OpKind::allgatherv: {
      // Every block from its rank, and every element between blocks untouched.
      const UnevenLayout& v = st.v;
      std::vector<std::pair<size_t, size_t>> blocks;  // (displacement, count) in element order
      for (int q = 0; q < n; ++q) {
        const auto qi = static_cast<size_t>(q);
        const int from = q, to = c.op == OpKind::alltoallv ? r : q;
        chk.expect_run(st.recv, v.recv_displs[qi], v.recv_counts[qi], mp, moved(from, uneven_first(from, to)), "recv");
        blocks.emplace_back(v.recv_displs[qi], v.recv_counts[qi]);
      }
      std::sort(blocks.begin(), blocks.end());
      size_t at = 0;
      for (const auto& [d, k] : blocks) {
        chk.untouched(st.recv, at, d - at, "recv");
        at = d + k;
      }
      chk.untouched(st.recv, at, v.recv_elems - at, "recv");
      break;
    }
    default: break;
  }
  return res;
}

Result run_case(Communicator& comm, const Case& c) {
  PreparedCase pc(comm, c);
  const auto t0 = std::chrono::steady_clock::now();
  pc.run();
  const auto t1 = std::chrono::steady_clock::now();
  Result res = pc.verify();
  res.seconds = std::chrono::duration<double>(t1 - t0).count();
  return res;
}

}  // namespace mpcomm::check
