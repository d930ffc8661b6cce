// broadcast, staged — on one host whose ranks outnumber its CPUs, from 32 KiB. There the
// direct broadcast's single copies (process_vm_readv/writev) cost 2-3 times a memcpy each, Open MPI
// copies the same way, and the binomial tree's rounds through the rings make each rank wait for one
// that may not hold a CPU. Here the root copies its buffer once into its stage in shared memory, and
// every receiver copies it out, all of them at once (staged_flow.cc).
// Needs: shared memory (HostLocal: the root's stage and the board's tags, and waiting for them).
//
//   1. the staged flow: the root publishes its buffer, every other rank copies it out (with streaming
//      stores where the table's broadcast.staged.stores says).
// Bytes: B into the root's stage, B out of it into every receiver. No rank waits for a particular
// other but the root.
#include "backends/native/algorithms/algorithms.h"

namespace mpcomm::native {

void broadcast_staged(AlgoCtx& c) {
  const auto& op = c.op;
  const int n = c.size, root = op.root;
  const size_t bytes = op.bytes();
  char* buf = static_cast<char*>(op.recv);
  // 1.
  if (c.rank == root) {
    std::vector<int> readers;
    for (int k = 1; k < n; ++k) readers.push_back(mod(root + k, n));
    staged_flow(c, buf, bytes, readers, {}, false);
  } else {
    staged_flow(c, nullptr, 0, {}, {{root, buf, bytes}}, c.pick(Choice::broadcast_staged_stores) == kStreamingStores);
  }
}

}  // namespace mpcomm::native
