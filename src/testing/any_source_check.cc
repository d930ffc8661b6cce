#include "testing/any_source_check.h"

#include <cstdint>
#include <vector>

namespace mpcomm::check {

namespace {

int32_t value(int from, size_t i, int round) {
  return static_cast<int32_t>(from * 1000003 + static_cast<int64_t>(i) * 7 + round * 13);
}

std::vector<int32_t> message(int from, size_t count, int round) {
  std::vector<int32_t> m(count);
  for (size_t i = 0; i < count; ++i) m[i] = value(from, i, round);
  return m;
}

// What is wrong with a message that rank 0 got from `from` ("" when nothing).
std::string wrong(const std::vector<int32_t>& got, int from, int round, const std::string& what) {
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != value(from, i, round))
      return what + ": element " + std::to_string(i) + " is " + std::to_string(got[i]) + ", rank " +
             std::to_string(from) + " sent " + std::to_string(value(from, i, round));
  return "";
}

std::string sources_text(const std::vector<int>& from) {
  std::string s;
  for (int f : from) s += (s.empty() ? "" : ", ") + std::to_string(f);
  return s;
}

// Every rank but 0 sends one message of `count` with tag 3; rank 0 takes n-1 from any source, posted
// before the messages come (`posted_first`) or after they all came. A barrier ends each round.
std::string fan_in(Communicator& comm, size_t count, bool posted_first, int round) {
  const int n = comm.size(), me = comm.rank();
  const std::string what = "fan-in of " + std::to_string(count) + " int32 (receives posted " +
                           (posted_first ? "before" : "after") + " the sends)";
  if (me != 0) {
    std::vector<int32_t> m = message(me, count, round);
    if (posted_first) comm.barrier();
    Request s = comm.isend(m.data(), count, DataType::int32, 0, 3);
    if (!posted_first) comm.barrier();
    s.wait();
    comm.barrier();  // the next round's messages (same tag) only after rank 0 took this round's
    return "";
  }
  std::vector<std::vector<int32_t>> got(static_cast<size_t>(n), std::vector<int32_t>(count, -1));
  std::vector<int> from;
  if (posted_first) {
    std::vector<Request> rs;
    for (int k = 1; k < n; ++k)
      rs.push_back(comm.irecv(got[static_cast<size_t>(k)].data(), count, DataType::int32, kAnySource, 3));
    comm.barrier();
    for (auto& r : rs) {
      r.wait();
      from.push_back(r.source());
    }
  } else {
    comm.barrier();
    for (int k = 1; k < n; ++k)
      from.push_back(comm.recv(got[static_cast<size_t>(k)].data(), count, DataType::int32, kAnySource, 3));
  }
  comm.barrier();
  std::vector<bool> seen(static_cast<size_t>(n), false);
  for (int k = 1; k < n; ++k) {
    const int f = from[static_cast<size_t>(k - 1)];
    if (f <= 0 || f >= n || seen[static_cast<size_t>(f)])
      return what + ": receive " + std::to_string(k) + " reports source " + std::to_string(f) + " (sources " +
             sources_text(from) + ")";
    seen[static_cast<size_t>(f)] = true;
    if (std::string w = wrong(got[static_cast<size_t>(k)], f, round, what); !w.empty()) return w;
  }
  return "";
}

// Tags keep messages apart: a receive from any source with tag 7 leaves rank 1's earlier tag-8 message.
std::string tags(Communicator& comm) {
  int32_t a = 88, b = 77, x = -1, y = -1;
  if (comm.rank() == 1) {
    // Not blocking sends: gloo's send ends only once its receive is posted.
    Request sa = comm.isend(&a, 1, DataType::int32, 0, 8);
    Request sb = comm.isend(&b, 1, DataType::int32, 0, 7);
    sb.wait();
    sa.wait();
  } else if (comm.rank() == 0) {
    const int f = comm.recv(&x, 1, DataType::int32, kAnySource, 7);
    comm.recv(&y, 1, DataType::int32, 1, 8);
    if (f != 1 || x != 77 || y != 88)
      return "tags: the tag-7 receive from any source got " + std::to_string(x) + " from rank " + std::to_string(f) +
             ", the tag-8 one " + std::to_string(y) + " (expected 77 from rank 1, then 88)";
  }
  return "";
}

// Receives posted first match first: from-any then from-one, and from-one then from-any, both fed by
// rank 1's two messages.
std::string posting_order(Communicator& comm) {
  const int me = comm.rank();
  for (int any_first = 0; any_first < 2; ++any_first) {
    const int tag = 5 + any_first;
    int32_t one = 1, two = 2, first = -1, second = -1;
    if (me == 1) {
      comm.barrier();
      comm.send(&one, 1, DataType::int32, 0, tag);
      comm.send(&two, 1, DataType::int32, 0, tag);
    } else if (me == 0) {
      Request a = comm.irecv(&first, 1, DataType::int32, any_first ? kAnySource : 1, tag);
      Request b = comm.irecv(&second, 1, DataType::int32, any_first ? 1 : kAnySource, tag);
      comm.barrier();
      a.wait();
      b.wait();
      if (first != 1 || second != 2 || a.source() != 1 || b.source() != 1)
        return std::string("posting order (") + (any_first ? "from-any" : "from-one") + " posted first): got " +
               std::to_string(first) + " then " + std::to_string(second) + " (sources " + std::to_string(a.source()) +
               ", " + std::to_string(b.source()) + "), expected 1 then 2 from rank 1";
    } else {
      comm.barrier();
    }
  }
  return "";
}

// Of the messages that came before the receive, the earliest: rank 2's comes first, then rank 1's (rank 0
// sees each arrive: a marker behind it on the same link), so the order differs from the ranks' order.
std::string arrival_order(Communicator& comm) {
  const int me = comm.rank();
  int32_t mark = 0, go = 0;
  if (me == 2 || me == 1) {
    if (me == 1) comm.recv(&go, 1, DataType::int32, 0, 10);
    int32_t v = 100 + me;
    comm.send(&v, 1, DataType::int32, 0, 9);
    comm.send(&mark, 1, DataType::int32, 0, 11);
  } else if (me == 0) {
    comm.recv(&mark, 1, DataType::int32, 2, 11);  // rank 2's tag-9 message is here now
    comm.send(&go, 1, DataType::int32, 1, 10);
    comm.recv(&mark, 1, DataType::int32, 1, 11);  // and rank 1's
    int32_t x = -1, y = -1;
    const int f1 = comm.recv(&x, 1, DataType::int32, kAnySource, 9);
    const int f2 = comm.recv(&y, 1, DataType::int32, kAnySource, 9);
    if (f1 != 2 || x != 102 || f2 != 1 || y != 101)
      return "arrival order: got " + std::to_string(x) + " from rank " + std::to_string(f1) + ", then " +
             std::to_string(y) + " from rank " + std::to_string(f2) +
             " (expected rank 2's 102 first, then rank 1's 101)";
  }
  return "";
}

}  // namespace

std::string any_source_check(Communicator& comm, bool native_order) {
  if (comm.size() < 2) return "any_source_check needs 2 ranks";
  // Every part runs on every rank whatever an earlier one found (the others would wait for it otherwise).
  std::string err;
  auto keep = [&](std::string e) {
    if (err.empty()) err = std::move(e);
  };
  int round = 0;
  for (size_t count : {size_t{5}, size_t{1} << 18})
    for (bool posted_first : {true, false}) keep(fan_in(comm, count, posted_first, round++));
  keep(tags(comm));
  if (native_order && comm.size() >= 3) {
    keep(posting_order(comm));
    keep(arrival_order(comm));
  }
  comm.barrier();
  return err;
}

}  // namespace mpcomm::check
