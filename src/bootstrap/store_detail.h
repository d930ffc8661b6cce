// The checks and messages every store implementation shares (defined in store.cc), so that a program
// that works on one store works on all of them and fails on all of them with the same words. Only the
// store implementations in src/bootstrap include this header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mpcomm/error.h"
#include "mpcomm/store.h"
#include "net/socket.h"

namespace mpcomm::store_detail {

// Limits every store enforces: TcpStore must, to bound what it reads from the wire; the others do so that
// a program that works on one store works on all of them.
extern const size_t kMaxKeyBytes;
extern const size_t kMaxValueBytes;
extern const size_t kMaxKeysPerRequest;

// "[a, b, c]" for messages; long lists are cut after 16 keys ("... and 40 more").
std::string key_list(const std::vector<std::string>& keys);

// The checks throw InvalidArgument naming `op` and `where` (the store's name in messages:
// "tcp://127.0.0.1:4000", "file:///tmp/x", "HashStore").
// Rejects a key longer than kMaxKeyBytes.
void check_key(const std::string& key, const char* op, const std::string& where);
// Rejects more than kMaxKeysPerRequest keys, or any key check_key() rejects.
void check_keys(const std::vector<std::string>& keys, const char* op, const std::string& where);
// Rejects a value longer than kMaxValueBytes.
void check_value(const std::string& key, size_t size, const std::string& where);

// Validates a blocking call's timeout (negative throws InvalidArgument) and turns it into a deadline that
// cannot overflow.
net::Deadline deadline_for(Millis timeout, const char* op, const std::string& where);

// The Timeout a blocking call throws, naming the keys still missing.
Timeout timeout_error(const char* op, Millis timeout, const std::vector<std::string>& missing,
                      const std::string& where);

// Adds `delta` to the counter in `value`, stores the sum there and returns it. Counters are decimal text
// (so get_string reads them); an empty value, a missing key's, is 0. Throws InvalidArgument when `value`
// is not a counter or the sum overflows.
int64_t add_to_counter(Bytes& value, int64_t delta, const std::string& key, const std::string& where);

}  // namespace mpcomm::store_detail
