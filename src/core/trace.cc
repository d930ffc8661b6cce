// The public timeline calls (mpcomm/trace.h): starting one with the ranks' clocks aligned, spans, the
// collective write, and MPCOMM_TRACE's part files and their merge.
#include "mpcomm/trace.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <sstream>

#include "core/clock_align.h"
#include "core/front_door.h"
#include "core/op_clock.h"
#include "core/timeline.h"
#include "log/log.h"
#include "mpcomm/error.h"

namespace mpcomm {

using detail::FrontDoor;
using detail::Timeline;

namespace {

constexpr const char* kHeader =
    "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"generator\":\"mpcomm\"},\"traceEvents\":[\n";
constexpr const char* kFooter = "\n]}\n";

std::vector<int> identity(int n) {
  std::vector<int> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
  return v;
}

// Writes `pieces` joined by commas inside the header and footer to path (through a temporary file, so a
// reader never sees half a trace). Returns the bytes written.
size_t write_trace_file(const std::string& path, const std::vector<std::string>& pieces) {
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  if (!out) throw InvalidArgument("mpcomm trace: cannot write " + tmp + ": " + std::strerror(errno));
  out << kHeader;
  bool first = true;
  for (const std::string& p : pieces) {
    if (p.empty()) continue;
    if (!first) out << ",\n";
    out << p;
    first = false;
  }
  out << kFooter;
  out.close();
  if (!out || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    throw InvalidArgument("mpcomm trace: cannot write " + path + ": " + why);
  }
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  return static_cast<size_t>(in.tellg());
}

std::string who(const Communicator& c) {
  return "host " + c.options().host_id + ", pid " + std::to_string(::getpid()) + ", " + std::string(c.backend());
}

std::shared_ptr<Timeline> start_timeline(Communicator& world) {
  const detail::ClockAlignment a = detail::align_clocks(world, detail::steady_ns, /*trust_same_machine=*/true);
  auto t = std::make_shared<Timeline>(world.rank(), who(world));
  t->set_clock(a.offset_ns, a.base_ns);
  return t;
}

std::string part_name(const std::string& file, int rank, int size) {
  return file + ".rank" + std::to_string(rank) + "of" + std::to_string(size);
}

}  // namespace

namespace trace {

void start(Communicator& world) {
  FrontDoor& door = FrontDoor::of(world);
  if (door.timeline() != nullptr) return;
  auto t = start_timeline(world);
  door.attach_timeline(t, t->add_track("world", identity(world.size())));
}

bool enabled(const Communicator& comm) { return FrontDoor::of(comm).timeline() != nullptr; }

void name(Communicator& comm, std::string_view track) {
  FrontDoor& door = FrontDoor::of(comm);
  if (Timeline* t = door.timeline()) t->rename_track(door.timeline_track(), std::string(track));
}

uint64_t now() { return detail::OpClock::now(); }

void span(Communicator& comm, std::string_view track, std::string_view name, uint64_t begin, uint64_t end,
          std::string_view args) {
  Timeline* t = FrontDoor::of(comm).timeline();
  if (t == nullptr) return;
  t->span(t->span_track(std::string(track)), std::string(name), begin, end, std::string(args));
}

size_t events(const Communicator& comm) {
  Timeline* t = FrontDoor::of(comm).timeline();
  return t == nullptr ? 0 : t->events();
}

size_t write(Communicator& world, const std::string& path) {
  Timeline* t = FrontDoor::of(world).timeline();
  if (t == nullptr)
    throw InvalidArgument("mpcomm trace: write(" + path + ") on rank " + std::to_string(world.rank()) +
                          ": this communicator is not traced (call trace::start on it first)");
  struct Pause {
    Timeline* t;
    ~Pause() { t->pause(false); }
  } pause{t};
  t->pause(true);  // the gather below is not part of the job's traffic
  std::string mine = t->json();
  uint64_t n = mine.size();
  const bool root = world.rank() == 0;
  std::vector<uint64_t> sizes(root ? static_cast<size_t>(world.size()) : 0);
  world.gather(&n, root ? sizes.data() : nullptr, 1, DataType::int64, 0);
  if (!root) {
    world.send(mine.data(), n, DataType::uint8, 0, trace::kWriteTag);
    return 0;
  }
  std::vector<std::string> pieces(static_cast<size_t>(world.size()));
  pieces[0] = std::move(mine);
  for (int r = 1; r < world.size(); ++r) {  // every part first: a rank that cannot write still drains them
    pieces[static_cast<size_t>(r)].resize(sizes[static_cast<size_t>(r)]);
    world.recv(pieces[static_cast<size_t>(r)].data(), sizes[static_cast<size_t>(r)], DataType::uint8, r,
               trace::kWriteTag);
  }
  return write_trace_file(path, pieces);
}

size_t merge_parts(const std::string& path, const std::vector<std::string>& parts) {
  std::vector<std::string> pieces;
  for (const std::string& p : parts) {
    std::ifstream in(p, std::ios::binary);
    if (!in) throw InvalidArgument("mpcomm trace: cannot read the part " + p + ": " + std::strerror(errno));
    std::ostringstream s;
    s << in.rdbuf();
    pieces.push_back(s.str());
  }
  return write_trace_file(path, pieces);
}

}  // namespace trace

namespace detail {

namespace {
std::mutex g_env_mu;
std::weak_ptr<Timeline> g_env_timeline;  // MPCOMM_TRACE's: one per process
}  // namespace

void trace_from_env(Communicator& comm, const std::string& file) {
  FrontDoor& door = FrontDoor::of(comm);
  std::lock_guard<std::mutex> lk(g_env_mu);
  if (auto t = g_env_timeline.lock()) {  // a later communicator of the process: a track of the same timeline
    door.attach_timeline(t, t->add_track("communicator of " + std::to_string(comm.size()), identity(comm.size())));
    return;
  }
  auto t = start_timeline(comm);
  g_env_timeline = t;
  door.attach_timeline(t, t->add_track("world", identity(comm.size())), file);
}

void write_trace_part(FrontDoor& door, const std::string& file) {
  Timeline* t = door.timeline();
  if (t == nullptr) return;
  t->pause(true);
  const int rank = door.backend().rank(), size = door.backend().size();
  try {
    const std::string part = part_name(file, rank, size), tmp = part + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out << t->json();
      out.close();
      if (!out || std::rename(tmp.c_str(), part.c_str()) != 0)
        throw InvalidArgument("cannot write " + part + ": " + std::strerror(errno));
    }
    // The rank that finds every part there merges them; the lock file makes it one rank.
    std::vector<std::string> parts;
    for (int r = 0; r < size; ++r) {
      parts.push_back(part_name(file, r, size));
      if (::access(parts.back().c_str(), R_OK) != 0) return;
    }
    const std::string lock = file + ".merging";
    const int fd = ::open(lock.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
    if (fd < 0) {
      MPCOMM_LOG(info,
                 "MPCOMM_TRACE: %s exists: another rank merges the parts (or a merge was cut short: remove it "
                 "and run mpcomm trace-merge)",
                 lock.c_str());
      return;
    }
    ::close(fd);
    const size_t bytes = trace::merge_parts(file, parts);
    for (const std::string& p : parts) std::remove(p.c_str());
    std::remove(lock.c_str());
    MPCOMM_LOG(info, "MPCOMM_TRACE: %d ranks' timelines merged into %s (%zu bytes)", size, file.c_str(), bytes);
  } catch (const std::exception& e) {
    MPCOMM_LOG(warn, "MPCOMM_TRACE: rank %d: the timeline was not written: %s", rank, e.what());
  }
}

}  // namespace detail
}  // namespace mpcomm
