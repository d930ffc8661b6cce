#include "mpcomm/types.h"

#include <cstring>
#include <string>

#include "mpcomm/communicator.h"
#include "mpcomm/error.h"

namespace mpcomm {

size_t dtype_size(DataType t) {
  switch (t) {
    case DataType::int8:
    case DataType::uint8: return 1;
    case DataType::float16:
    case DataType::bfloat16: return 2;
    case DataType::int32:
    case DataType::float32: return 4;
    case DataType::int64:
    case DataType::float64: return 8;
  }
  throw InvalidArgument("mpcomm: unknown DataType value " + std::to_string(static_cast<int>(t)));
}

bool is_floating(DataType t) {
  return t == DataType::float16 || t == DataType::bfloat16 || t == DataType::float32 ||
         t == DataType::float64;
}

std::string_view to_string(DataType t) {
  static const char* names[] = {"int8", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64"};
  auto i = static_cast<unsigned>(t);
  return i < kNumDataTypes ? names[i] : "invalid-dtype";
}

bool is_bitwise(ReduceOp op) { return op == ReduceOp::band || op == ReduceOp::bor || op == ReduceOp::bxor; }

std::string_view to_string(ReduceOp op) {
  static const char* names[] = {"sum", "prod", "min", "max", "avg", "band", "bor", "bxor"};
  auto i = static_cast<unsigned>(op);
  return i < kNumReduceOps ? names[i] : "invalid-redop";
}

std::string to_string(Device d) {
  if (d.kind == Device::cpu) return "cpu";
  return d.index < 0 ? std::string("cuda") : "cuda:" + std::to_string(d.index);
}

Device parse_device(std::string_view name) {
  if (name == "cpu") return Device{};
  if (name == "cuda" || name == "gpu") return Device{Device::cuda, -1};
  if (name.rfind("cuda:", 0) == 0 && name.size() > 5 && name.size() < 9) {
    int index = 0;
    for (char ch : name.substr(5)) {
      if (ch < '0' || ch > '9') index = -1;
      if (index < 0) break;
      index = index * 10 + (ch - '0');
    }
    if (index >= 0) return Device{Device::cuda, index};
  }
  throw InvalidArgument("mpcomm: unknown device '" + std::string(name) + "' (cpu, cuda or cuda:N)");
}

std::string_view to_string(OpKind k) {
  static const char* names[] = {"allreduce", "broadcast", "reduce", "allgather", "reduce_scatter", "gather",
                                "scatter", "alltoall", "barrier", "send", "recv", "split", "alltoallv", "allgatherv"};
  auto i = static_cast<unsigned>(k);
  return i < kNumOpKinds ? names[i] : "invalid-op";
}

DataType parse_dtype(std::string_view n) {
  struct Alias { const char* name; DataType t; };
  static const Alias aliases[] = {
      {"int8", DataType::int8},       {"char", DataType::int8},         {"uint8", DataType::uint8},
      {"int32", DataType::int32},     {"int", DataType::int32},         {"int64", DataType::int64},
      {"float16", DataType::float16}, {"half", DataType::float16},      {"fp16", DataType::float16},
      {"bfloat16", DataType::bfloat16}, {"bf16", DataType::bfloat16},   {"float32", DataType::float32},
      {"float", DataType::float32},   {"fp32", DataType::float32},      {"float64", DataType::float64},
      {"double", DataType::float64},  {"fp64", DataType::float64},
  };
  for (const auto& a : aliases)
    if (n == a.name) return a.t;
  throw InvalidArgument("mpcomm: unknown data type '" + std::string(n) +
                        "' (expected int8, uint8, int32, int64, half, bfloat16, float, double)");
}

ReduceOp parse_reduce_op(std::string_view n) {
  for (int i = 0; i < kNumReduceOps; ++i)
    if (n == to_string(static_cast<ReduceOp>(i))) return static_cast<ReduceOp>(i);
  throw InvalidArgument("mpcomm: unknown reduce op '" + std::string(n) + "' (expected sum, prod, min, max, avg, band, bor, bxor)");
}

float half_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf / nan
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    bits = sign | (static_cast<uint32_t>(112 - e) << 23) | ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u)  // inf or nan (keep nan quiet)
    return static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u | ((absx >> 13) & 0x3ffu) : 0));
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (absx < 0x38800000u) {  // result is subnormal or zero
    if (absx < 0x33000000u) return static_cast<uint16_t>(sign);
    uint32_t e = absx >> 23;
    uint32_t m = (absx & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;  // 14..24
    uint32_t r = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t r = absx - 0x38000000u;  // rebias exponent 127 -> 15
  uint32_t out = r >> 13;
  uint32_t rem = r & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (out & 1u))) ++out;
  return static_cast<uint16_t>(sign | out);
}

float bf16_to_float(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet nan
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

}  // namespace mpcomm
