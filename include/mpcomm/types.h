// mpcomm/types.h — element types, reduction operators and devices shared by every backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "mpcomm/export.h"

namespace mpcomm {

// Element type of a buffer. float16 and bfloat16 are reduced with float32 accumulation.
enum class DataType : uint8_t { int8, uint8, int32, int64, float16, bfloat16, float32, float64 };
inline constexpr int kNumDataTypes = 8;

// Reduction operator. avg is sum divided by the group size (integer division for integer types).
// band, bor, bxor: bitwise and, or, exclusive or, for the integer types only.
enum class ReduceOp : uint8_t { sum, prod, min, max, avg, band, bor, bxor };
inline constexpr int kNumReduceOps = 8;

// Where a buffer lives. cuda buffers go to the nccl backend directly and through pinned host staging to
// the CPU backends. index -1: the rank's local GPU (local rank modulo the visible GPUs).
struct Device {
  enum Kind : uint8_t { cpu, cuda } kind = cpu;
  int index = 0;
};

// Size in bytes of one element; throws InvalidArgument for a value outside the enum.
MPCOMM_API size_t dtype_size(DataType t);
MPCOMM_API bool is_floating(DataType t);
// band, bor, bxor.
MPCOMM_API bool is_bitwise(ReduceOp op);
MPCOMM_API std::string_view to_string(DataType t);
MPCOMM_API std::string_view to_string(ReduceOp op);
MPCOMM_API std::string to_string(Device d);

// Parse names as nccl-tests and PyTorch spell them ("float", "float32", "half", "bf16", ...).
// Throw InvalidArgument naming the unknown value.
MPCOMM_API DataType parse_dtype(std::string_view name);
MPCOMM_API ReduceOp parse_reduce_op(std::string_view name);
// "cpu", "cuda" (the rank's local GPU), "cuda:N".
MPCOMM_API Device parse_device(std::string_view name);

// IEEE half and bfloat16 conversions (round to nearest even), usable by tests and kernels alike.
MPCOMM_API float half_to_float(uint16_t h);
MPCOMM_API uint16_t float_to_half(float f);
MPCOMM_API float bf16_to_float(uint16_t b);
MPCOMM_API uint16_t float_to_bf16(float f);

}  // namespace mpcomm
