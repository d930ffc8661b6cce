// Deterministic training data: a token file and the rule that says which tokens every step, data-parallel
// rank and micro-batch reads, so that any split of the work sees exactly the batches of one process.
//
//   --data FILE    the file's bytes are the tokens (vocabulary 256)
//   --tokens FILE  uint16 little-endian token ids
// Step k uses a global batch of B sequences of T tokens; sequence j (0 <= j < B) starts at
//   o = ((k*B + j) * T) mod (N - T - 1)
// with inputs tokens[o, o+T) and targets tokens[o+1, o+T+1]. Data-parallel rank r takes sequences
// [r*B/dp, (r+1)*B/dp); its micro-batches are consecutive groups of B/(dp*M) of them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mpcomm::parallel {

class TokenData {
 public:
  // Throws InvalidArgument naming the file when it cannot be read, is empty, or (uint16) has an odd size.
  static TokenData from_bytes(const std::string& path);
  static TokenData from_uint16(const std::string& path);

  const std::string& path() const { return path_; }
  size_t size() const { return tokens_.size(); }
  // The largest token id + 1 (256 for bytes files).
  int vocab_needed() const { return vocab_needed_; }
  // The start of sequence j of step k.
  size_t offset(uint64_t step, uint64_t j, size_t B, size_t T) const;
  // Inputs and targets [count*T] of sequences [first, first+count) of step k.
  void batch(uint64_t step, size_t first, size_t count, size_t B, size_t T, int32_t* inputs, int32_t* targets) const;

 private:
  std::string path_;
  std::vector<int32_t> tokens_;
  int vocab_needed_ = 0;
};

}  // namespace mpcomm::parallel
