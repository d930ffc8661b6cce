// What NCCL's result codes say (text, ErrorCode) and how mpcomm's data types and reductions map to NCCL's.
#include "backends/nccl/nccl_runtime.h"

#include <string>

namespace mpcomm::nccl {

std::string nccl_text(ncclResult_t r) {
  std::string s = std::string(ncclGetErrorString(r)) + " (ncclResult_t " + std::to_string(static_cast<int>(r)) + ")";
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') s += "; last NCCL error: " + std::string(last);
  return s;
}

ErrorCode code_of(ncclResult_t r) {
  return r == ncclRemoteError || r == ncclSystemError ? ErrorCode::peer_failure : ErrorCode::internal;
}

ncclDataType_t nccl_type(DataType t) {
  switch (t) {
    case DataType::int8: return ncclInt8;
    case DataType::uint8: return ncclUint8;
    case DataType::int32: return ncclInt32;
    case DataType::int64: return ncclInt64;
    case DataType::float16: return ncclFloat16;
    case DataType::bfloat16: return ncclBfloat16;
    case DataType::float32: return ncclFloat32;
    case DataType::float64: return ncclFloat64;
  }
  throw InvalidArgument("mpcomm: nccl: unknown DataType value " + std::to_string(static_cast<int>(t)));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::prod: return ncclProd;
    case ReduceOp::min: return ncclMin;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::avg: return ncclAvg;
    case ReduceOp::band:
    case ReduceOp::bor:
    case ReduceOp::bxor: break;  // refused by NcclBackend::run
  }
  throw InvalidArgument("mpcomm: nccl: unknown ReduceOp value " + std::to_string(static_cast<int>(op)));
}

}  // namespace mpcomm::nccl
