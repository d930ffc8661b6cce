// Store's convenience methods, PrefixStore, open_store(), and the checks and messages every store
// implementation shares (store_detail), so that a program that works on one store works on all of them
// and fails on all of them with the same words.
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <string_view>

#include "bootstrap/store_detail.h"
#include "net/socket.h"
#include "mpcomm/error.h"
#include "mpcomm/store.h"

namespace mpcomm {

// ---- store_detail -------------------------------------------------------------------------------------
// Declared, and described, in store_detail.h; every store implementation includes it.
namespace store_detail {

extern const size_t kMaxKeyBytes = 4096;
extern const size_t kMaxValueBytes = size_t{64} << 20;
extern const size_t kMaxKeysPerRequest = 4096;

std::string key_list(const std::vector<std::string>& keys) {
  constexpr size_t kShown = 16;
  std::string s = "[";
  for (size_t i = 0; i < keys.size() && i < kShown; ++i) {
    if (i > 0) s += ", ";
    s += keys[i];
  }
  if (keys.size() > kShown) s += ", ... and " + std::to_string(keys.size() - kShown) + " more";
  return s + "]";
}

void check_key(const std::string& key, const char* op, const std::string& where) {
  if (key.size() > kMaxKeyBytes)
    throw InvalidArgument("mpcomm: store " + std::string(op) + " rejected a key of " + std::to_string(key.size()) +
                          " bytes (at most " + std::to_string(kMaxKeyBytes) + ") (store " + where + ")");
}

void check_keys(const std::vector<std::string>& keys, const char* op, const std::string& where) {
  if (keys.size() > kMaxKeysPerRequest)
    throw InvalidArgument("mpcomm: store " + std::string(op) + " of " + std::to_string(keys.size()) +
                          " keys rejected (at most " + std::to_string(kMaxKeysPerRequest) + " per call) (store " +
                          where + ")");
  for (const auto& k : keys) check_key(k, op, where);
}

void check_value(const std::string& key, size_t size, const std::string& where) {
  if (size > kMaxValueBytes)
    throw InvalidArgument("mpcomm: store set of key '" + key + "' rejected a value of " + std::to_string(size) +
                          " bytes (at most " + std::to_string(kMaxValueBytes) + ") (store " + where + ")");
}

net::Deadline deadline_for(Millis timeout, const char* op, const std::string& where) {
  if (timeout.count() < 0)
    throw InvalidArgument("mpcomm: store " + std::string(op) + " was given a negative timeout (" +
                          std::to_string(timeout.count()) + " ms) (store " + where + ")");
  constexpr Millis kLongest = std::chrono::hours(24 * 365);  // "forever", without overflowing the clock
  return net::Clock::now() + std::min(timeout, kLongest);
}

Timeout timeout_error(const char* op, Millis timeout, const std::vector<std::string>& missing,
                      const std::string& where) {
  return Timeout("mpcomm: store " + std::string(op) + " timed out after " + std::to_string(timeout.count()) +
                 " ms waiting for keys " + key_list(missing) + " (store " + where + ")");
}

int64_t add_to_counter(Bytes& value, int64_t delta, const std::string& key, const std::string& where) {
  int64_t current = 0;
  if (!value.empty()) {
    std::string text(value.begin(), value.end());
    const char* s = text.c_str();
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(s, &end, 10);
    if (end == s || *end != '\0' || errno == ERANGE || text.size() > 20)
      throw InvalidArgument("mpcomm: store add on key '" + key + "' failed: its value (" +
                            std::to_string(value.size()) + " bytes) is not a decimal integer (store " + where + ")");
    current = v;
  }
  int64_t next = 0;
  if (__builtin_add_overflow(current, delta, &next))
    throw InvalidArgument("mpcomm: store add on key '" + key + "' failed: " + std::to_string(current) + " + " +
                          std::to_string(delta) + " overflows int64 (store " + where + ")");
  std::string text = std::to_string(next);
  value.assign(text.begin(), text.end());
  return next;
}

}  // namespace store_detail

// ---- Store -------------------------------------------------------------------------------------------

void Store::set_string(const std::string& key, const std::string& value) {
  set(key, Bytes(value.begin(), value.end()));
}

std::string Store::get_string(const std::string& key, Millis timeout) {
  Bytes v = get(key, timeout);
  return std::string(v.begin(), v.end());
}

// ---- PrefixStore ---------------------------------------------------------------------------------------
// "prefix/key" in the base store. Errors come from the base store and so name the full key, which is
// the one to look for when inspecting the store.

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : prefix_(std::move(prefix)), base_(std::move(base)) {
  if (base_ == nullptr) throw InvalidArgument("mpcomm: PrefixStore '" + prefix_ + "' was given no base store");
}

static std::string prefixed(const std::string& prefix, const std::string& key) { return prefix + "/" + key; }

static std::vector<std::string> prefixed(const std::string& prefix, const std::vector<std::string>& keys) {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(prefixed(prefix, k));
  return out;
}

void PrefixStore::set(const std::string& key, const Bytes& value) { base_->set(prefixed(prefix_, key), value); }
Bytes PrefixStore::get(const std::string& key, Millis timeout) { return base_->get(prefixed(prefix_, key), timeout); }
int64_t PrefixStore::add(const std::string& key, int64_t delta) { return base_->add(prefixed(prefix_, key), delta); }
bool PrefixStore::check(const std::vector<std::string>& keys) { return base_->check(prefixed(prefix_, keys)); }
void PrefixStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  base_->wait(prefixed(prefix_, keys), timeout);
}
bool PrefixStore::remove(const std::string& key) { return base_->remove(prefixed(prefix_, key)); }

// ---- open_store ------------------------------------------------------------------------------------------

std::shared_ptr<Store> open_store(const std::string& url, const std::string& token, Millis timeout) {
  constexpr std::string_view kTcp = "tcp://", kFile = "file://";
  std::string_view u = url;
  if (u.starts_with(kTcp)) {
    auto [host, port] = net::parse_host_port(std::string(u.substr(kTcp.size())));
    if (port == 0) throw InvalidArgument("mpcomm: store URL '" + url + "' has port 0; give the server's port");
    return std::make_shared<TcpStore>(host, port, token, timeout);
  }
  if (u.starts_with(kFile)) {
    std::string_view path = u.substr(kFile.size());
    if (path.size() < 2 || path.front() != '/')
      throw InvalidArgument("mpcomm: store URL '" + url + "' is not file:///ABSOLUTE/PATH");
    return std::make_shared<FileStore>(std::string(path));
  }
  throw InvalidArgument("mpcomm: unknown store URL '" + url + "' (expected tcp://HOST:PORT or file:///ABSOLUTE/PATH)");
}

std::shared_ptr<Store> root_store(std::shared_ptr<Store> s) {
  while (auto* p = dynamic_cast<PrefixStore*>(s.get())) s = p->base();
  return s;
}

}  // namespace mpcomm
