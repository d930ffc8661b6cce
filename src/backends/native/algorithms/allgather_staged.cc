// allgather, staged — on one host whose ranks outnumber its CPUs, from 16 KiB in all.
// There the direct allgather's single copies (process_vm_writev) cost 2-3 times a memcpy each, and Open
// MPI copies the same way; the ring's n-1 steps each make a rank wait for one that may not hold a CPU.
// Here every rank copies its block once into its stage in shared memory, and every other rank copies
// it out (staged_flow.cc), all at once: each rank publishes its block while it drains the others'.
// Needs: shared memory (HostLocal: the stages and the board's tags, and waiting for them).
//
//   1. our block into our own slot of the result (out of place);
//   2. the staged flow: we publish our block, and copy every other rank's block out of its stage into
//      its slot (ranks r+1, r+2, ...: the n ranks start on n different stages; with streaming stores
//      where the table's allgather.staged.stores says).
// Bytes per rank (B = one block): B into our slot, B into our stage, (n-1)·B out of the others' stages.
#include "backends/native/algorithms/algorithms.h"

namespace mpcomm::native {

void allgather_staged(AlgoCtx& c) {
  const auto& op = c.op;
  const int n = c.size, r = c.rank;
  const size_t b = op.bytes();
  // 1.
  char* out = allgather_place_own_block(c);
  // 2.
  std::vector<int> readers;
  std::vector<StagedIn> in;
  for (int k = 1; k < n; ++k) {
    const int q = mod(r + k, n);
    readers.push_back(q);
    in.push_back({q, out + static_cast<size_t>(q) * b, b});
  }
  staged_flow(c, out + static_cast<size_t>(r) * b, b, readers, in, c.pick(Choice::allgather_staged_stores) == kStreamingStores);
}

}  // namespace mpcomm::native
