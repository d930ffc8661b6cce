// The native backend's built-in selection table: which algorithm runs for each call, and every protocol
// choice (how messages travel, which stores the algorithms use), when no MPCOMM_TUNING row applies. Data
// only; the rules' measurements are in docs/performance.md ("Why the defaults are what they are"), the
// algorithms in docs/native.md.
#include "backends/native/selection/selection.h"

namespace mpcomm::native {

namespace {

constexpr std::string_view kNative = R"(mpcomm-tuning 1 backend=native
# Rows are tried in order; the first whose conditions all hold chooses. Every condition is a fact all
# ranks share, so all of them choose alike. Ranks outnumbering the CPUs of their one host:
# cpus_per_rank < 1 (with one rank per host, hosts may differ in CPUs: crowding is judged on one host).

# ---- allreduce
# Several hosts, some with several ranks: one message per host over the slow links; large, on hosts of
# equal rank counts, every rank carries a slice between the hosts.
allreduce hosts=[2,inf) per_host=[2,inf) even_hosts=yes flat_bytes=(256K,inf) -> hierarchical_sliced
allreduce hosts=[2,inf) per_host=[2,inf) -> hierarchical
# One crowded host: no rank waits for a particular other (arrival), up to 32 KiB with two ranks per CPU
# or more, 4 KiB with fewer; then log2(n) rounds of one message (recursive doubling), where with 4 ranks
# the ring's small steps win from 24 KiB; larger, the ring with its chunks through the shared-memory
# rings while the CPUs are near each other, else (from 256 KiB) and from 8 MiB every block reduced by
# its owner, every byte through the stages (staged).
allreduce hosts=1 ranks=[3,inf) cpus_per_rank=(0,0.5] bytes=[1,32K] -> arrival
allreduce hosts=1 ranks=[3,inf) cpus_per_rank=(0.5,1) bytes=[1,4K] -> arrival
allreduce hosts=1 ranks=4 cpus_per_rank=(0,1) bytes=[0,24K] -> recursive_doubling
allreduce hosts=1 ranks=4 cpus_per_rank=(0,1) bytes=(24K,256K) -> ring_shm
allreduce hosts=1 ranks=[3,inf) cpus_per_rank=(0,1) flat_bytes=[0,256K] -> recursive_doubling
allreduce hosts=1 ranks=2 cpus_per_rank=(0,1) flat_bytes=[0,256K] -> flat
allreduce hosts=1 cpus_per_rank=(0,1) bytes=[8M,inf) -> staged
allreduce hosts=1 cpus_per_rank=(0,1) bytes=[256K,inf) placement_now=far -> staged
allreduce hosts=1 cpus_per_rank=(0,1) -> ring_shm
# One host, a CPU per rank: up to 2 KiB every rank reads every input off the board (board); 2 ranks
# from 8 MiB out of place with the CPUs near each other through shared memory (two-copy); from 64 KiB
# every rank reduces its chunk straight out of the others' buffers (direct); small, one round of n-1
# messages (flat); else the ring.
allreduce hosts=1 ranks=[2,inf) cpus_per_rank=[1,inf) bytes=[0,2K] -> board
allreduce hosts=1 ranks=2 cpus_per_rank=[1,inf) bytes=[8M,inf) in_place=no placement_now=near -> two_copy
allreduce single_copy=yes cpus_per_rank=[1,inf) bytes=[64K,inf) -> direct
allreduce flat_bytes=[0,256K] -> flat
allreduce -> ring

# ---- broadcast
# A CPU per rank, up to 2 KiB: every receiver reads the root's input off the board; a crowded host up to
# 2 KiB: the root writes a frame to every receiver and leaves (flat); from 32 KiB: through the root's
# stage in shared memory; a CPU per rank from 64 KiB: receivers read the head of the root's buffer while
# it writes their tails; several hosts: among host leaders, then within each host.
broadcast hosts=1 ranks=[2,inf) cpus_per_rank=[1,inf) bytes=[0,2K] -> board
broadcast hosts=1 ranks=[2,inf) cpus_per_rank=(0,1) bytes=[0,2K] -> flat
broadcast hosts=1 ranks=[2,inf) cpus_per_rank=(0,1) bytes=[32K,inf) -> staged
broadcast single_copy=yes cpus_per_rank=[1,inf) bytes=[64K,inf) -> direct
broadcast hosts=[2,inf) per_host=[2,inf) -> hierarchical
broadcast -> binomial

# ---- reduce
reduce hosts=[2,inf) per_host=[2,inf) -> hierarchical
reduce -> binomial

# ---- allgather
# A crowded host from 16 KiB in all: every block through its sender's stage; 2 ranks with blocks of
# 256 KiB-2 MiB and the CPUs near: the ring through shared memory, cache to cache; one host from 32 KiB
# blocks: every rank writes its block straight into the others' results.
allgather hosts=1 ranks=[2,inf) cpus_per_rank=(0,1) total=[16K,inf) -> staged
allgather ranks=2 single_copy=yes bytes=[256K,2M] placement_now=near -> ring_shm
allgather single_copy=yes bytes=[32K,inf) -> direct
allgather -> ring

# ---- reduce_scatter: one host from 32 KiB blocks, every rank reduces its block out of the others' inputs
reduce_scatter single_copy=yes bytes=[32K,inf) -> direct
reduce_scatter -> ring

# ---- one algorithm each
gather -> flat
scatter -> flat
alltoall -> pairwise
# ---- the uneven ops. alltoallv's ranks share no size (a size condition sees 0); allgatherv's share the
# total, which `total` is and `bytes` is a rank's share of. No measurements yet: the ring.
alltoallv -> pairwise
allgatherv -> ring
# ---- barrier: one host, a CPU per rank: every rank's tag on the board; a crowded host: everyone to rank
# 0 and back (linear), so that rank 0 leaves first
barrier hosts=1 ranks=[2,inf) cpus_per_rank=[1,inf) -> board
barrier hosts=1 ranks=[3,inf) cpus_per_rank=(0,1) -> linear
barrier -> dissemination

# ---- how messages to ranks of this host travel: through the shared-memory ring (the sender copies in,
# the receiver out: fast while the two CPUs share a cache), or by single copy (the receiver reads the
# sender's buffer with process_vm_readv: through memory, about as fast wherever the CPUs are). Decided at
# creation, per message size. Sends from 64 KiB: by single copy on a crowded host (through the ring the
# sender and the receiver take turns on the CPUs for every ring's worth) and with the CPUs far apart;
# else through the ring.
send.path cpus_per_rank=(0,1) bytes=[64K,inf) -> single_copy
send.path placement=far bytes=[64K,inf) -> single_copy
send.path -> ring
# A collective's messages from 256 KiB by single copy (algorithms that are the ring, ring_shm and
# two_copy, never).
collective.path bytes=[256K,inf) -> single_copy
collective.path -> ring

# ---- stores: streaming stores write an output's lines without reading them first and leave them out of
# the cache, which pays once the output is too large to stay there
allgather.direct.stores bytes=[4M,inf) -> streaming
allgather.direct.stores -> plain
allgather.staged.stores total=[2M,inf) -> streaming
allgather.staged.stores -> plain
broadcast.staged.stores bytes=[2M,inf) -> streaming
broadcast.staged.stores -> plain
allreduce.staged.stores bytes=[2M,inf) -> streaming
allreduce.staged.stores -> plain
# ---- the hierarchical broadcast inside each host: flat from 256 KiB (the host's ranks read the leader's
# buffer by single copy), else binomial
broadcast.hierarchical.local bytes=[256K,inf) -> flat
broadcast.hierarchical.local -> binomial
)";

}  // namespace

std::string_view builtin_table_text() { return kNative; }

}  // namespace mpcomm::native
