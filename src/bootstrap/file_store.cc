// FileStore: an append-only log in one file, for ranks that share a file system but not a network.
//
// Layout: the 8-byte magic "MPCFST01", then records
//   u8 op ('S' set, 'R' remove) | u32 key_len | u64 value_len | key bytes | value bytes   (little-endian)
// The last record of a key wins; add() appends the new counter value as a set. Every operation opens the
// file, takes flock() (shared to read, exclusive to append) and reads the whole log, so ranks in
// different processes, and threads of one process (each open() is its own lock holder), see one order
// of operations. A writer that died mid-append leaves a torn record at the end: readers ignore it and
// the next writer cuts it off before appending. Lengths read back are bounded before anything is
// allocated, so a corrupt or foreign file gives an error, never a huge allocation.
// The log is never compacted: it is sized for rendezvous traffic (thousands of small keys), not for data.
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <unordered_map>

#include "bootstrap/store_detail.h"
#include "log/log.h"
#include "net/socket.h"
#include "mpcomm/error.h"
#include "mpcomm/store.h"

namespace mpcomm {

namespace sd = store_detail;

namespace {

constexpr char kMagic[8] = {'M', 'P', 'C', 'F', 'S', 'T', '0', '1'};
constexpr size_t kRecordHeader = 1 + 4 + 8;
constexpr size_t kMaxFileBytes = size_t{1} << 31;  // a log this large is not a rendezvous store
constexpr uint8_t kOpSet = 'S', kOpRemove = 'R';

std::string errno_text(int e) { return std::string(std::strerror(e)) + " (errno " + std::to_string(e) + ")"; }

uint64_t load_le(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

uint8_t* store_le(uint8_t* p, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; ++i) *p++ = static_cast<uint8_t>(v >> (8 * i));
  return p;
}

// The store file, opened and flock()ed for the duration of one operation.
class LockedFile {
 public:
  LockedFile(const std::string& path, int lock_op, const std::string& where) : where_(where) {
    fd_ = net::Fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    if (!fd_.valid()) {
      int e = errno;
      throw InvalidArgument("mpcomm: cannot open file store " + path + ": " + errno_text(e));
    }
    while (::flock(fd_.get(), lock_op) != 0) {
      if (errno != EINTR) throw Internal("mpcomm: flock() on file store " + where + " failed: " + errno_text(errno));
    }
  }  // the lock goes with the descriptor when fd_ closes

  int fd() const { return fd_.get(); }

  // Reads the whole file into `data_` and indexes the live keys.
  void load() {
    struct stat st {};
    if (::fstat(fd(), &st) != 0)
      throw Internal("mpcomm: fstat() on file store " + where_ + " failed: " + errno_text(errno));
    size_t size = static_cast<size_t>(st.st_size);
    if (size > kMaxFileBytes)
      throw Internal("mpcomm: file store " + where_ + " is " + std::to_string(size) + " bytes, larger than any " +
                     "rendezvous log should be (at most " + std::to_string(kMaxFileBytes) + ")");
    data_.resize(size);
    size_t got = 0;
    while (got < size) {
      ssize_t r = ::pread(fd(), data_.data() + got, size - got, static_cast<off_t>(got));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) throw Internal("mpcomm: reading file store " + where_ + " failed: " + errno_text(errno));
      if (r == 0) break;  // shrank under us: only possible if someone ignored the lock
      got += static_cast<size_t>(r);
    }
    data_.resize(got);
    parse();
  }

  // Value of `key`, or nullptr. Valid until the next load().
  const Bytes* find(const std::string& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    scratch_.assign(data_.begin() + static_cast<ptrdiff_t>(it->second.first),
                    data_.begin() + static_cast<ptrdiff_t>(it->second.first + it->second.second));
    return &scratch_;
  }
  bool contains(const std::string& key) const { return index_.count(key) > 0; }

  // Appends one record (exclusive lock held). Cuts off a torn tail first; undoes a partial append.
  void append(uint8_t op, const std::string& key, const Bytes& value) {
    if (valid_end_ < data_.size()) {
      MPCOMM_LOG(warn, "file store %s: dropping a torn record of %zu bytes at offset %zu (a writer died "
                 "mid-append)", where_.c_str(), data_.size() - valid_end_, valid_end_);
      truncate_to(valid_end_);
    }
    size_t magic = valid_end_ == 0 ? sizeof kMagic : 0;  // the first record also writes the file's magic
    Bytes rec(magic + kRecordHeader + key.size() + value.size());
    uint8_t* p = rec.data();
    std::memcpy(p, kMagic, magic);
    p += magic;
    *p++ = op;
    p = store_le(p, key.size(), 4);
    p = store_le(p, value.size(), 8);
    if (!key.empty()) std::memcpy(p, key.data(), key.size());
    if (!value.empty()) std::memcpy(p + key.size(), value.data(), value.size());
    size_t done = 0;
    while (done < rec.size()) {
      ssize_t w = ::pwrite(fd(), rec.data() + done, rec.size() - done, static_cast<off_t>(valid_end_ + done));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        int e = w < 0 ? errno : EIO;
        truncate_to(valid_end_);
        throw Internal("mpcomm: writing key '" + key + "' to file store " + where_ + " failed: " + errno_text(e));
      }
      done += static_cast<size_t>(w);
    }
  }

 private:
  void parse() {
    index_.clear();
    valid_end_ = 0;
    if (data_.empty()) return;
    if (data_.size() < sizeof kMagic || std::memcmp(data_.data(), kMagic, sizeof kMagic) != 0) {
      if (data_.size() < sizeof kMagic && std::memcmp(data_.data(), kMagic, data_.size()) == 0) return;  // torn
      throw InvalidArgument("mpcomm: " + where_ + " is not an mpcomm file store (it does not start with the "
                            "store's magic); give a new path or remove the file");
    }
    size_t off = sizeof kMagic;
    valid_end_ = off;
    while (data_.size() - off >= kRecordHeader) {
      const uint8_t* h = data_.data() + off;
      uint8_t op = h[0];
      uint64_t key_len = load_le(h + 1, 4), value_len = load_le(h + 5, 8);
      if ((op != kOpSet && op != kOpRemove) || key_len > sd::kMaxKeyBytes || value_len > sd::kMaxValueBytes ||
          (op == kOpRemove && value_len != 0))
        throw Internal("mpcomm: file store " + where_ + " is corrupt at offset " + std::to_string(off) + " (op " +
                       std::to_string(op) + ", key length " + std::to_string(key_len) + ", value length " +
                       std::to_string(value_len) + ")");
      if (data_.size() - off - kRecordHeader < key_len + value_len) break;  // torn tail
      std::string key(reinterpret_cast<const char*>(h + kRecordHeader), key_len);
      if (op == kOpSet)
        index_[std::move(key)] = {off + kRecordHeader + key_len, value_len};
      else
        index_.erase(key);
      off += kRecordHeader + key_len + value_len;
      valid_end_ = off;
    }
  }

  void truncate_to(size_t size) {
    while (::ftruncate(fd(), static_cast<off_t>(size)) != 0) {
      if (errno != EINTR)
        throw Internal("mpcomm: ftruncate() on file store " + where_ + " failed: " + errno_text(errno));
    }
    data_.resize(std::min(data_.size(), size));
  }

  net::Fd fd_;
  std::string where_;
  Bytes data_;
  size_t valid_end_ = 0;  // end of the last complete record
  std::unordered_map<std::string, std::pair<size_t, size_t>> index_;  // key -> (offset, length) in data_
  Bytes scratch_;
};

// Polls until every key exists (a shared-lock read per try, sleeping 1..50 ms between tries).
// Then calls on_found with the file still locked, or throws Timeout naming the keys still missing.
template <class OnFound>
void poll_until_present(const std::string& path, const std::string& where, const std::vector<std::string>& keys,
                        Millis timeout, const char* op, OnFound on_found) {
  auto deadline = sd::deadline_for(timeout, op, where);
  auto backoff = std::chrono::milliseconds(1);
  while (true) {
    std::vector<std::string> missing;
    {
      LockedFile f(path, LOCK_SH, where);
      f.load();
      for (const auto& k : keys)
        if (!f.contains(k)) missing.push_back(k);
      if (missing.empty()) {
        on_found(f);
        return;
      }
    }
    auto now = net::Clock::now();
    if (now >= deadline) throw sd::timeout_error(op, timeout, missing, where);
    std::this_thread::sleep_for(std::min<net::Clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(50));
  }
}

}  // namespace

static std::string where_of(const std::string& path) { return "file://" + path; }

FileStore::FileStore(std::string path) : path_(std::move(path)) {
  if (path_.empty()) throw InvalidArgument("mpcomm: FileStore was given an empty path");
  LockedFile f(path_, LOCK_SH, where_of(path_));  // creates the file and fails now, not later, on a bad path
  f.load();                                        // rejects a file that is not a store
}

FileStore::~FileStore() = default;  // the file is shared by every rank; the launcher removes it

void FileStore::set(const std::string& key, const Bytes& value) {
  const std::string where = where_of(path_);
  sd::check_key(key, "set", where);
  sd::check_value(key, value.size(), where);
  LockedFile f(path_, LOCK_EX, where);
  f.load();
  f.append(kOpSet, key, value);
}

Bytes FileStore::get(const std::string& key, Millis timeout) {
  const std::string where = where_of(path_);
  sd::check_key(key, "get", where);
  Bytes out;
  poll_until_present(path_, where, {key}, timeout, "get", [&](LockedFile& f) { out = *f.find(key); });
  return out;
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  const std::string where = where_of(path_);
  sd::check_key(key, "add", where);
  LockedFile f(path_, LOCK_EX, where);
  f.load();
  const Bytes* old = f.find(key);
  Bytes value = old != nullptr ? *old : Bytes{};
  int64_t result = sd::add_to_counter(value, delta, key, where);
  f.append(kOpSet, key, value);
  return result;
}

bool FileStore::check(const std::vector<std::string>& keys) {
  const std::string where = where_of(path_);
  sd::check_keys(keys, "check", where);
  LockedFile f(path_, LOCK_SH, where);
  f.load();
  return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return f.contains(k); });
}

void FileStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  const std::string where = where_of(path_);
  sd::check_keys(keys, "wait", where);
  poll_until_present(path_, where, keys, timeout, "wait", [](LockedFile&) {});
}

bool FileStore::remove(const std::string& key) {
  const std::string where = where_of(path_);
  sd::check_key(key, "remove", where);
  LockedFile f(path_, LOCK_EX, where);
  f.load();
  if (!f.contains(key)) return false;
  f.append(kOpRemove, key, {});
  return true;
}

}  // namespace mpcomm
