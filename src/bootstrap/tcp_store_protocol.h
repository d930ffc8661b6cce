// The TcpStore wire protocol, in one place so that the server (tcp_store_server.cc) and the client
// (tcp_store_client.cc) cannot disagree on it: message kinds, framing, encoding, and the decoding that
// bounds every length against the store's limits before anything is allocated for it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mpcomm/store.h"
#include "net/socket.h"

namespace mpcomm::store_wire {

// All integers are little-endian. A connection opens with the handshake of net/handshake.h (magic 'MPST'):
// the server closes connections that do not prove they belong to the job and counts them. Then the
// client sends requests, one at a time, and the server answers each in order:
//   request  u32 'MPSQ' | u8 cmd | u32 key_len | key | u64 value_len | value | i64 arg
//   reply    u32 'MPSR' | u8 status | u64 value_len | value | i64 number
// arg is the timeout in ms for GET and WAIT, the delta for ADD, 0 otherwise. CHECK and WAIT carry no
// key; their value is a key list (u32 count, then u32 length + bytes per key), and a WAIT that times out
// answers with the list of keys still missing. status is OK, TIMEOUT or INVALID (value = message).
// number is ADD's new value, CHECK's and REMOVE's 0/1.

inline constexpr uint32_t kHelloMagic = 0x4d505354;    // 'MPST'
inline constexpr uint32_t kRequestMagic = 0x4d505351;  // 'MPSQ'
inline constexpr uint32_t kReplyMagic = 0x4d505352;    // 'MPSR'

enum Cmd : uint8_t { kSet = 1, kGet, kAdd, kCheck, kWait, kRemove };
enum Status : uint8_t { kOk = 0, kTimedOut = 1, kInvalid = 2 };

inline constexpr size_t kRequestHead = 4 + 1 + 4;  // magic, cmd, key_len
inline constexpr size_t kReplyHead = 4 + 1 + 8;    // magic, status, value_len
// The longest GET or WAIT timeout a request carries: "forever", without overflowing the server's clock.
inline constexpr int64_t kLongestWaitMs = int64_t{365} * 24 * 3600 * 1000;

// A protocol violation by one client; the server closes that connection with `why` as the warning.
struct Malformed {
  std::string why;
};

// "set", "get", ...; "unknown" for anything else.
const char* cmd_name(uint8_t c);

// n-byte little-endian integers.
void put_le(Bytes& out, uint64_t v, size_t n);
uint64_t get_le(const uint8_t* p, size_t n);

// Appends a key list: u32 count, then u32 length + bytes per key.
void put_key_list(Bytes& out, const std::vector<std::string>& keys);
// Parses a key list, bounding every count and length before using it. Returns why it is malformed, or
// an empty string.
std::string parse_key_list(const uint8_t* p, size_t n, std::vector<std::string>* keys);

// One request frame; value points into the bytes it was parsed from.
struct RequestFrame {
  uint8_t cmd = 0;
  std::string key;
  const uint8_t* value = nullptr;
  size_t value_len = 0;
  int64_t arg = 0;
};

Bytes encode_request(uint8_t cmd, const std::string& key, const Bytes& value, int64_t arg);
// Parses the request frame at the start of p[0..avail). True when it is complete: *req holds it and
// *frame_bytes its size. False when more bytes are needed: *frame_bytes is then the whole frame's size
// once its lengths have arrived (each bounded by the store's limits), else 0. Throws Malformed when the
// frame breaks the protocol, as soon as the bytes that show it have arrived.
bool parse_request(const uint8_t* p, size_t avail, RequestFrame* req, size_t* frame_bytes);

// Appends a reply frame.
void put_reply(Bytes& out, Status status, const uint8_t* value, size_t value_len, int64_t number);

// "tcp://host:port" (IPv6 in brackets): the store's name in messages on both sides.
std::string store_url(const std::string& host, uint16_t port);

}  // namespace mpcomm::store_wire
