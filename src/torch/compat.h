// What differs between the PyTorch versions this backend is built against, in one place. PyTorch 1.13
// (Debian's) creates a c10d::ProcessGroup subclass for a registered backend; 2.x creates a c10d::Backend, which
// a ProcessGroup holds per device. Both bases declare the same op signatures, so one class (process_group.h)
// derives from GroupBase and overrides them; the 2.x-only ops are compiled where MPCOMM_TORCH_2 is 1.
#pragma once

#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#define MPCOMM_TORCH_2 1
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#define MPCOMM_TORCH_2 0
#endif

namespace mpcomm::torch_backend {

#if MPCOMM_TORCH_2
using GroupBase = c10d::Backend;
#else
using GroupBase = c10d::ProcessGroup;
#endif

// The PyTorch version the extension was compiled for ("1.13.0", "2.15.0").
inline constexpr const char* kBuiltForTorch = TORCH_VERSION;

}  // namespace mpcomm::torch_backend
