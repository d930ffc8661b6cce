#include "core/clock_align.h"

#include <unistd.h>

#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "mpcomm/trace.h"

namespace mpcomm::detail {

namespace {
constexpr int kRounds = 8;
constexpr int kPingTag = trace::kWriteTag + 1;

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}
}  // namespace

uint64_t machine_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (!(in >> id)) {  // no procfs: the host name is the best guess
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    id = host;
  }
  return fnv1a(id);
}

ClockAlignment align_clocks(Communicator& world, const std::function<int64_t()>& clock, bool trust_same_machine) {
  ClockAlignment a;
  const int n = world.size(), me = world.rank();
  uint64_t mine = machine_id();
  std::vector<uint64_t> ids(static_cast<size_t>(n));
  world.allgather(&mine, ids.data(), 1, DataType::int64);
  auto needs_ping = [&](int r) { return r != 0 && !(trust_same_machine && ids[static_cast<size_t>(r)] == ids[0]); };
  if (me == 0) {
    for (int r = 1; r < n; ++r) {
      if (!needs_ping(r)) continue;
      for (int k = 0; k < kRounds; ++k) {
        int64_t ping = 0;
        world.recv(&ping, 1, DataType::int64, r, kPingTag);
        const int64_t t = clock();
        world.send(&t, 1, DataType::int64, r, kPingTag);
      }
    }
  } else if (needs_ping(me)) {
    int64_t best = std::numeric_limits<int64_t>::max();
    for (int k = 0; k < kRounds; ++k) {
      const int64_t t1 = clock();
      world.send(&t1, 1, DataType::int64, 0, kPingTag);
      int64_t t0 = 0;
      world.recv(&t0, 1, DataType::int64, 0, kPingTag);
      const int64_t t2 = clock();
      if (t2 - t1 < best) {
        best = t2 - t1;
        a.offset_ns = t0 - (t1 + (t2 - t1) / 2);
      }
    }
    a.rtt_ns = best;
  }
  int64_t base = me == 0 ? clock() : 0;
  world.broadcast(&base, 1, DataType::int64, 0);
  a.base_ns = base;
  return a;
}

}  // namespace mpcomm::detail
