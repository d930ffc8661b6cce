// The native backend's named constants (constants.h), read from where each is defined.
#include "backends/native/constants.h"

#include "backends/native/algorithms/algorithms.h"
#include "backends/native/engine/engine.h"
#include "tuning/selection_table.h"

namespace mpcomm::native {

namespace {

std::string size_text(size_t bytes) {
  const std::string s = tuning::format_size(static_cast<double>(bytes));
  const char unit = s.back();
  return unit == 'K' || unit == 'M' || unit == 'G' ? s.substr(0, s.size() - 1) + " " + unit + "iB" : s + " bytes";
}

template <class D>
std::string ms_text(D d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count()) + " ms";
}

}  // namespace

const std::vector<NamedConstant>& constants() {
  static const std::vector<NamedConstant> list = {
      {"fast_send", size_text(kFastSendBytes),
       "a collective frame below this goes straight into an empty link whole, with no queue"},
      {"eager", size_text(kEagerBytes),
       "a collective frame above this that comes before its receive waits in its link (smaller: buffered, but a single-copy descriptor, which always waits)"},
      {"align_from", size_text(kAlignFrom),
       "payloads from this size sit in a ring at their source's offset within a cache line"},
      {"lazy_limit", ms_text(kLazyLimit),
       "a single-copy send whose receive is not posted within this long is read into a buffer"},
      {"crowded_read_piece", size_text(kCrowdedReadPiece),
       "on a crowded host a single-copy read goes in pieces of this size, yielding between them"},
      {"spare_from", size_text(UnexpectedBuffers::kSpareFrom),
       "buffers of early frames from this size (up to " + size_text(UnexpectedBuffers::kSpareMaxBytes) + ", " +
           std::to_string(UnexpectedBuffers::kSpareBuffers) + " of them) are kept for the next"},
      {"yield_passes", std::to_string(kYieldPasses), "passes a waiter makes yielding its CPU before it sleeps"},
      {"longest_sleep", ms_text(kLongestSleep), "the longest a waiter sleeps before it checks its peers and deadline"},
      {"liveness_every", ms_text(kLivenessEvery), "how often a waiter checks that the local peers it waits for live"},
      {"board", size_text(HostLocal::kBoardBytes), "per rank on the host's board: the board algorithms' largest input"},
      {"stage", size_text(HostLocal::kStageBytes), "each rank's stage in shared memory (the staged algorithms)"},
      {"arrival_chunk", size_text(kArrivalChunkBytes),
       "arrival allreduce results above this are reduced in chunks by every waiting rank"},
  };
  return list;
}

}  // namespace mpcomm::native
