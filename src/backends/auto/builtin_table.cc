// The auto backend's built-in table: which backend runs a call when neither MPCOMM_TUNING nor a table
// stored for this machine has an auto section (route_table.h). Data only, measured on the machine its
// header names; a call no row matches runs on native. docs/performance.md ("auto") has the command that
// measured it.
#include "backends/auto/route_table.h"

namespace mpcomm::autosel {

namespace {

constexpr std::string_view kAuto = R"(mpcomm-tuning 1 backend=auto machine=Intel_R_Xeon_R_Processor.c2.g0.h1
# One host of 2 CPUs, 8 ranks: Open MPI's tuned collectives win the middle sizes of allreduce and
# broadcast; two ranks whose CPUs are far apart: Open MPI's single-copy sends from 1 MiB.
allreduce hosts=1 ranks=8 bytes=[1M,4M) -> mpi
broadcast hosts=1 ranks=8 bytes=[256K,1M) -> mpi
sendrecv hosts=1 ranks=2 placement=far bytes=[1M,inf) -> mpi
)";

}  // namespace

std::string_view builtin_table_text() { return kAuto; }

}  // namespace mpcomm::autosel
