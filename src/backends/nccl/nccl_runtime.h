// NCCL's vocabulary for the nccl backend: which ncclResult_t values succeed, their text and ErrorCode, and
// mpcomm's data types and reductions as NCCL's.
#pragma once

#include <nccl.h>

#include <string>

#include "mpcomm/error.h"
#include "mpcomm/types.h"

namespace mpcomm::nccl {

// ncclInProgress counts as success: with a non-blocking communicator the call goes on in NCCL's thread.
inline bool ok(ncclResult_t r) { return r == ncclSuccess || r == ncclInProgress; }

// The error string of `r`, and NCCL's last message on this thread when it has one (ncclGetLastError reads
// a thread-local buffer and ignores its argument, so it is safe after the communicator is gone).
std::string nccl_text(ncclResult_t r);

// A peer that died or a broken connection surfaces as ncclRemoteError or ncclSystemError; the other codes
// are faults of this rank (CUDA, NCCL internals, misuse).
ErrorCode code_of(ncclResult_t r);

// Throws InvalidArgument for a value outside the enum.
ncclDataType_t nccl_type(DataType t);

// avg is NCCL's own ncclAvg: sum then divide for integers, pre-multiplied by 1/size for floating types.
// The bitwise reductions throw InvalidArgument (NcclBackend::run refuses them before any NCCL call).
ncclRedOp_t nccl_op(ReduceOp op);

}  // namespace mpcomm::nccl
