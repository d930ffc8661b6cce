// The TcpStore wire protocol's encoding and decoding (tcp_store_protocol.h describes the format). The
// decoders check every count and length against store_detail's limits before they use it, since the
// server runs them on bytes from any process that can reach its port.
#include "bootstrap/tcp_store_protocol.h"

#include <cstdio>
#include <string_view>

#include "bootstrap/store_detail.h"

namespace mpcomm::store_wire {

namespace sd = store_detail;

namespace {

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

}  // namespace

const char* cmd_name(uint8_t c) {
  switch (c) {
    case kSet: return "set";
    case kGet: return "get";
    case kAdd: return "add";
    case kCheck: return "check";
    case kWait: return "wait";
    case kRemove: return "remove";
  }
  return "unknown";
}

void put_le(Bytes& out, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

uint64_t get_le(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

void put_key_list(Bytes& out, const std::vector<std::string>& keys) {
  put_le(out, keys.size(), 4);
  for (const auto& k : keys) {
    put_le(out, k.size(), 4);
    out.insert(out.end(), k.begin(), k.end());
  }
}

std::string parse_key_list(const uint8_t* p, size_t n, std::vector<std::string>* keys) {
  if (n < 4) return "a key list of " + std::to_string(n) + " bytes, too short for its count";
  uint64_t count = get_le(p, 4);
  if (count > sd::kMaxKeysPerRequest)
    return "a key list of " + std::to_string(count) + " keys (at most " + std::to_string(sd::kMaxKeysPerRequest) + ")";
  size_t off = 4;
  keys->clear();
  for (uint64_t i = 0; i < count; ++i) {
    if (n - off < 4) return "a key list that ends before key " + std::to_string(i) + " of " + std::to_string(count);
    uint64_t len = get_le(p + off, 4);
    off += 4;
    if (len > sd::kMaxKeyBytes) return "a key of " + std::to_string(len) + " bytes in its key list";
    if (n - off < len) return "a key list that ends inside key " + std::to_string(i);
    keys->emplace_back(reinterpret_cast<const char*>(p + off), len);
    off += len;
  }
  if (off != n) return "a key list with " + std::to_string(n - off) + " bytes after its last key";
  return "";
}

Bytes encode_request(uint8_t cmd, const std::string& key, const Bytes& value, int64_t arg) {
  Bytes f;
  f.reserve(kRequestHead + key.size() + 8 + value.size() + 8);
  put_le(f, kRequestMagic, 4);
  f.push_back(cmd);
  put_le(f, key.size(), 4);
  f.insert(f.end(), key.begin(), key.end());
  put_le(f, value.size(), 8);
  f.insert(f.end(), value.begin(), value.end());
  put_le(f, static_cast<uint64_t>(arg), 8);
  return f;
}

bool parse_request(const uint8_t* p, size_t avail, RequestFrame* req, size_t* frame_bytes) {
  *frame_bytes = 0;
  if (avail < kRequestHead) return false;
  uint32_t magic = static_cast<uint32_t>(get_le(p, 4));
  uint8_t cmd = p[4];
  uint64_t key_len = get_le(p + 5, 4);
  if (magic != kRequestMagic) throw Malformed{"bad frame magic " + hex(magic)};
  if (cmd < kSet || cmd > kRemove) throw Malformed{"unknown command " + std::to_string(cmd)};
  if (key_len > sd::kMaxKeyBytes)
    throw Malformed{std::string(cmd_name(cmd)) + " with a key of " + std::to_string(key_len) + " bytes (at most " +
                    std::to_string(sd::kMaxKeyBytes) + ")"};
  if (avail < kRequestHead + key_len + 8) return false;
  uint64_t value_len = get_le(p + kRequestHead + key_len, 8);
  if (value_len > sd::kMaxValueBytes)
    throw Malformed{std::string(cmd_name(cmd)) + " with a value of " + std::to_string(value_len) + " bytes (at most " +
                    std::to_string(sd::kMaxValueBytes) + ")"};
  *frame_bytes = kRequestHead + key_len + 8 + value_len + 8;
  if (avail < *frame_bytes) return false;
  req->cmd = cmd;
  req->key.assign(reinterpret_cast<const char*>(p + kRequestHead), key_len);
  req->value = p + kRequestHead + key_len + 8;
  req->value_len = value_len;
  req->arg = static_cast<int64_t>(get_le(req->value + value_len, 8));
  return true;
}

void put_reply(Bytes& out, Status status, const uint8_t* value, size_t value_len, int64_t number) {
  put_le(out, kReplyMagic, 4);
  out.push_back(status);
  put_le(out, value_len, 8);
  if (value_len > 0) out.insert(out.end(), value, value + value_len);
  put_le(out, static_cast<uint64_t>(number), 8);
}

std::string store_url(const std::string& host, uint16_t port) {
  bool v6 = host.find(':') != std::string::npos;
  return "tcp://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

}  // namespace mpcomm::store_wire
