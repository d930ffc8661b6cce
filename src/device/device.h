// Device memory, for whoever needs to touch a cuda buffer without being a GPU backend: the common
// layer's host staging (native, gloo and mpi on Device::cuda), mpcomm bench and the conformance checks.
//
// Compiled with the CUDA runtime when CMake found the toolkit (MPCOMM_HAVE_CUDA); without it every
// cuda request fails with Unsupported naming the reason, and cpu requests work as plain host memory.
#pragma once

#include <cstddef>
#include <string>

#include "mpcomm/types.h"

namespace mpcomm::device {

// True when this build has the CUDA runtime.
bool cuda_compiled();
// GPUs this process can use: 0 when the build has no CUDA, there is no driver or no device; then
// `why` (if given) says which. Asked once per process.
int cuda_devices(std::string* why = nullptr);
// Throws Unsupported, naming `what` and the reason, unless a GPU is usable.
void require_cuda(const std::string& what);

// The GPU a rank uses: d.index when it names one, else local_rank modulo the visible GPUs.
int resolve_index(Device d, int local_rank);
// Makes d current on the calling thread (cudaSetDevice); no-op for cpu.
void make_current(Device d);

// Memory on d (cpu: 64-byte aligned host memory). release() accepts nullptr and never throws.
void* alloc(Device d, size_t bytes);
void release(Device d, void* p) noexcept;
// Page-locked host memory (plain host memory without CUDA), for staging.
void* alloc_pinned(size_t bytes);
void release_pinned(void* p) noexcept;
// Synchronous copy in any direction (host or device on either side).
void copy(void* dst, const void* src, size_t bytes);
void fill(Device d, void* p, int byte, size_t bytes);

// Owns `bytes` of memory on a device.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Device d, size_t bytes) : d_(d), p_(alloc(d, bytes)), n_(bytes) {}
  ~Buffer() { release(d_, p_); }
  Buffer(Buffer&& o) noexcept : d_(o.d_), p_(o.p_), n_(o.n_) { o.p_ = nullptr; o.n_ = 0; }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      release(d_, p_);
      d_ = o.d_; p_ = o.p_; n_ = o.n_;
      o.p_ = nullptr; o.n_ = 0;
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  char* data() const { return static_cast<char*>(p_); }
  size_t size() const { return n_; }
  Device device() const { return d_; }

 private:
  Device d_{};
  void* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace mpcomm::device
