// ReproducibleSum (mpcomm/reproducible.h): per element, the top bin seen so far and the sums of the 16-bit pieces
// of every value added, bin by bin (exact.h). Combining ranks: a max all-reduce of the top bins (and of the
// vector count, so every rank can refuse too many alike), the words of each element's common window
// reduce-scattered as int64, each rank rounds its block, an allgather of the blocks.
#include <algorithm>
#include <vector>

#include "core/reproducible/exact.h"
#include "mpcomm/error.h"
#include "mpcomm/reproducible.h"

namespace mpcomm {

namespace r = detail::repro;

struct ReproducibleSum::State {
  DataType dt;
  size_t n, bins_per;
  uint64_t vectors = 0;
  std::vector<uint8_t> top;
  std::vector<int64_t> bins, specials;
};

ReproducibleSum::ReproducibleSum(DataType dtype, size_t count) : s_(std::make_unique<State>()) {
  s_->dt = dtype;
  s_->n = count;
  s_->bins_per = static_cast<size_t>(r::words(dtype) * r::kBinsPerWord);  // throws for a type that is not floating
  clear();
}

ReproducibleSum::~ReproducibleSum() = default;
ReproducibleSum::ReproducibleSum(ReproducibleSum&&) noexcept = default;
ReproducibleSum& ReproducibleSum::operator=(ReproducibleSum&&) noexcept = default;

DataType ReproducibleSum::dtype() const { return s_->dt; }
size_t ReproducibleSum::count() const { return s_->n; }
uint64_t ReproducibleSum::vectors() const { return s_->vectors; }

void ReproducibleSum::clear() {
  s_->vectors = 0;
  s_->top.assign(s_->n, 0);
  s_->bins.assign(s_->n * s_->bins_per, 0);
  s_->specials.assign(s_->n, 0);
}

void ReproducibleSum::add(const void* values) {
  if (s_->n > 0 && values == nullptr) throw InvalidArgument("mpcomm: ReproducibleSum::add of a null vector");
  if (s_->vectors >= r::kMaxValues)
    throw InvalidArgument("mpcomm: ReproducibleSum holds " + std::to_string(s_->vectors) +
                          " vectors, the most it sums");
  r::accumulate(values, s_->n, s_->dt, s_->top.data(), s_->bins.data(), s_->specials.data());
  ++s_->vectors;
}

namespace {

// The top bins every rank reports: its own, or the special bin where it saw an infinity or NaN.
std::vector<uint8_t> reported(const std::vector<uint8_t>& top, const std::vector<int64_t>& specials) {
  std::vector<uint8_t> out(top);
  for (size_t i = 0; i < out.size(); ++i)
    if (specials[i] != 0) out[i] = r::kSpecialBin;
  return out;
}

}  // namespace

void ReproducibleSum::result(void* out) const {
  const State& s = *s_;
  const std::vector<uint8_t> top = reported(s.top, s.specials);
  std::vector<int64_t> words(s.n * static_cast<size_t>(r::words(s.dt)));
  r::window_words(s.top.data(), s.bins.data(), s.specials.data(), s.n, s.dt, top.data(), words.data());
  r::decode(words.data(), s.n, s.dt, top.data(), out);
}

namespace {

// The common top bins (the last two bytes carry the ranks' largest vector count, bytewise: an upper bound the
// same on every rank), after which every rank refuses too many vectors alike.
std::vector<uint8_t> common_top(Communicator& comm, const std::vector<uint8_t>& mine, uint64_t vectors) {
  std::vector<uint8_t> top(mine);
  const uint64_t v = std::min<uint64_t>(vectors, 0xFFFF);
  top.push_back(static_cast<uint8_t>(v >> 8));
  top.push_back(static_cast<uint8_t>(v & 0xFF));
  comm.allreduce(top.data(), top.data(), top.size(), DataType::uint8, ReduceOp::max);
  const uint64_t most = (uint64_t{top[top.size() - 2]} << 8) | top.back();
  top.resize(mine.size());
  if (most * static_cast<uint64_t>(comm.size()) > r::kMaxValues)
    throw InvalidArgument("mpcomm: ReproducibleSum: up to " + std::to_string(most) + " vectors on each of " +
                          std::to_string(comm.size()) + " ranks may be more than the " + std::to_string(r::kMaxValues) +
                          " a reproducible sum adds");
  return top;
}

}  // namespace

void ReproducibleSum::reduce_scatter(Communicator& comm, void* out) const {
  const State& s = *s_;
  const size_t P = static_cast<size_t>(comm.size()), W = static_cast<size_t>(r::words(s.dt));
  if (s.n % P != 0)
    throw InvalidArgument("mpcomm: ReproducibleSum::reduce_scatter: " + std::to_string(s.n) +
                          " elements do not split over " + std::to_string(P) + " ranks");
  const size_t block = s.n / P;
  const std::vector<uint8_t> top = common_top(comm, reported(s.top, s.specials), s.vectors);
  std::vector<int64_t> words(s.n * W), mine(block * W);
  r::window_words(s.top.data(), s.bins.data(), s.specials.data(), s.n, s.dt, top.data(), words.data());
  comm.reduce_scatter(words.data(), mine.data(), block * W, DataType::int64, ReduceOp::sum);
  r::decode(mine.data(), block, s.dt, top.data() + static_cast<size_t>(comm.rank()) * block, out);
}

void ReproducibleSum::allreduce(Communicator& comm, void* out) const {
  const State& s = *s_;
  const size_t P = static_cast<size_t>(comm.size()), W = static_cast<size_t>(r::words(s.dt));
  const size_t es = dtype_size(s.dt), block = (s.n + P - 1) / P;
  const std::vector<uint8_t> top = common_top(comm, reported(s.top, s.specials), s.vectors);
  std::vector<int64_t> words(block * P * W, 0), mine(block * W);
  r::window_words(s.top.data(), s.bins.data(), s.specials.data(), s.n, s.dt, top.data(), words.data());
  comm.reduce_scatter(words.data(), mine.data(), block * W, DataType::int64, ReduceOp::sum);
  const size_t first = static_cast<size_t>(comm.rank()) * block;
  const size_t have = first >= s.n ? 0 : std::min(block, s.n - first);
  std::vector<char> rounded(block * es, 0), all(block * P * es);
  r::decode(mine.data(), have, s.dt, top.data() + first, rounded.data());
  comm.allgather(rounded.data(), all.data(), block, s.dt);
  std::copy_n(all.data(), s.n * es, static_cast<char*>(out));
}

}  // namespace mpcomm
