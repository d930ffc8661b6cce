// Device memory through the CUDA runtime when the build has it; host memory otherwise.
#include "device/device.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "mpcomm/error.h"

#ifdef MPCOMM_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace mpcomm::device {

namespace {

#ifdef MPCOMM_HAVE_CUDA
void check(cudaError_t e, const char* call, size_t bytes = 0) {
  if (e == cudaSuccess) return;
  std::string msg = std::string("mpcomm: ") + call + " failed: " + cudaGetErrorString(e);
  if (bytes > 0) msg += " (" + std::to_string(bytes) + " bytes)";
  throw Internal(msg);
}
#endif

void* host_alloc(size_t bytes) {
  void* p = nullptr;
  if (::posix_memalign(&p, 64, bytes > 0 ? bytes : 1) != 0)
    throw Internal("mpcomm: out of host memory allocating " + std::to_string(bytes) + " bytes");
  return p;
}

}  // namespace

bool cuda_compiled() {
#ifdef MPCOMM_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_devices(std::string* why) {
  static std::once_flag once;
  static int count = 0;
  static std::string reason;
  std::call_once(once, [] {
#ifdef MPCOMM_HAVE_CUDA
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      reason = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
      (void)cudaGetLastError();  // clear the sticky-free error so later calls start clean
      n = 0;
    } else if (n == 0) {
      reason = "the CUDA runtime sees no GPU";
    }
    count = n;
#else
    reason = "this build has no CUDA (CMake found no CUDA toolkit)";
#endif
  });
  if (why != nullptr) *why = reason;
  return count;
}

void require_cuda(const std::string& what) {
  std::string why;
  if (cuda_devices(&why) == 0) throw Unsupported("mpcomm: " + what + " needs a GPU: " + why);
}

int resolve_index(Device d, int local_rank) {
  if (d.kind != Device::cuda) return 0;
  if (d.index >= 0) return d.index;
  int n = cuda_devices();
  return n > 0 ? local_rank % n : 0;
}

void make_current(Device d) {
  if (d.kind != Device::cuda) return;
#ifdef MPCOMM_HAVE_CUDA
  check(cudaSetDevice(d.index < 0 ? 0 : d.index), "cudaSetDevice");
#else
  require_cuda("device " + to_string(d));
#endif
}

void* alloc(Device d, size_t bytes) {
  if (d.kind == Device::cpu) return host_alloc(bytes);
  require_cuda("allocating on " + to_string(d));
#ifdef MPCOMM_HAVE_CUDA
  make_current(d);
  void* p = nullptr;
  check(cudaMalloc(&p, bytes > 0 ? bytes : 1), "cudaMalloc", bytes);
  return p;
#else
  return nullptr;
#endif
}

void release(Device d, void* p) noexcept {
  if (p == nullptr) return;
  if (d.kind == Device::cpu) {
    std::free(p);
    return;
  }
#ifdef MPCOMM_HAVE_CUDA
  (void)cudaFree(p);
#endif
}

void* alloc_pinned(size_t bytes) {
#ifdef MPCOMM_HAVE_CUDA
  if (cuda_devices() > 0) {
    void* p = nullptr;
    check(cudaMallocHost(&p, bytes > 0 ? bytes : 1), "cudaMallocHost", bytes);
    return p;
  }
#endif
  return host_alloc(bytes);
}

void release_pinned(void* p) noexcept {
  if (p == nullptr) return;
#ifdef MPCOMM_HAVE_CUDA
  if (cuda_devices() > 0) {
    (void)cudaFreeHost(p);
    return;
  }
#endif
  std::free(p);
}

void copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
#ifdef MPCOMM_HAVE_CUDA
  if (cuda_devices() > 0) {
    check(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), "cudaMemcpy", bytes);
    return;
  }
#endif
  std::memmove(dst, src, bytes);
}

void fill(Device d, void* p, int byte, size_t bytes) {
  if (bytes == 0) return;
  if (d.kind == Device::cpu) {
    std::memset(p, byte, bytes);
    return;
  }
#ifdef MPCOMM_HAVE_CUDA
  make_current(d);
  check(cudaMemset(p, byte, bytes), "cudaMemset", bytes);
#else
  require_cuda("filling memory on " + to_string(d));
#endif
}

}  // namespace mpcomm::device
