#include "parallel/data.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "mpcomm/error.h"

namespace mpcomm::parallel {

namespace {

std::vector<unsigned char> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InvalidArgument("training data " + path + ": cannot open (" + std::strerror(errno) + ")");
  std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (bytes.empty()) throw InvalidArgument("training data " + path + ": the file is empty");
  return bytes;
}

}  // namespace

TokenData TokenData::from_bytes(const std::string& path) {
  TokenData d;
  d.path_ = path;
  auto bytes = read_file(path);
  d.tokens_.assign(bytes.begin(), bytes.end());
  d.vocab_needed_ = 256;
  return d;
}

TokenData TokenData::from_uint16(const std::string& path) {
  TokenData d;
  d.path_ = path;
  auto bytes = read_file(path);
  if (bytes.size() % 2 != 0)
    throw InvalidArgument("training data " + path + ": " + std::to_string(bytes.size()) +
                          " bytes is not a whole number of uint16 tokens");
  d.tokens_.resize(bytes.size() / 2);
  for (size_t i = 0; i < d.tokens_.size(); ++i) d.tokens_[i] = bytes[2 * i] | (bytes[2 * i + 1] << 8);
  d.vocab_needed_ = *std::max_element(d.tokens_.begin(), d.tokens_.end()) + 1;
  return d;
}

size_t TokenData::offset(uint64_t step, uint64_t j, size_t B, size_t T) const {
  // (k*B + j)*T can exceed 64 bits only after ~10^12 steps; 128-bit keeps the rule exact anyway.
  unsigned __int128 o = (static_cast<unsigned __int128>(step) * B + j) * T;
  return static_cast<size_t>(o % (tokens_.size() - T - 1));
}

void TokenData::batch(uint64_t step, size_t first, size_t count, size_t B, size_t T, int32_t* inputs,
                      int32_t* targets) const {
  for (size_t i = 0; i < count; ++i) {
    size_t o = offset(step, first + i, B, T);
    std::copy_n(tokens_.data() + o, T, inputs + i * T);
    std::copy_n(tokens_.data() + o + 1, T, targets + i * T);
  }
}

}  // namespace mpcomm::parallel
