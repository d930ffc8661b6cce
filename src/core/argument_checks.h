// The front door's argument checks: every call's arguments, before any traffic, so that a bad one is an
// InvalidArgument on the rank that made it, naming the op and what is wrong (unknown data type or reduce
// op, a bitwise op on floats, root or peer out of range, null buffers with elements to move, counts that
// overflow, buffers that overlap other than in the documented in-place layout, uneven counts and
// displacements that do not fit). Backends never check arguments themselves.
#pragma once

#include "core/backend.h"
#include "core/op.h"

namespace mpcomm::detail {

// The bytes of the op's buffers that matter on this rank, once every argument is checked; throws
// InvalidArgument (or Unsupported: a cuda device without a GPU) naming the op on `b`.
BufferSpans check_arguments(const Op& op, const Backend& b);

}  // namespace mpcomm::detail
