#include "torch/cuda_order.h"

#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <algorithm>
#include <stdexcept>
#include <thread>

namespace mpcomm::torch_backend {

void order_after_current_streams(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b,
                                 std::chrono::milliseconds timeout, const char* op) {
  std::vector<c10::Device> devices;
  for (const auto* list : {&a, &b})
    for (const at::Tensor& t : *list)
      if (t.defined() && t.device().is_cuda() && std::find(devices.begin(), devices.end(), t.device()) == devices.end())
        devices.push_back(t.device());
  if (devices.empty()) return;
  const c10::impl::VirtualGuardImpl cuda(c10::DeviceType::CUDA);
  std::vector<c10::Event> marks;
  for (const c10::Device& d : devices) {
    marks.emplace_back(c10::DeviceType::CUDA);
    marks.back().record(cuda.getStream(d));
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (size_t i = 0; i < marks.size(); ++i)
    while (!marks[i].query()) {
      if (std::chrono::steady_clock::now() >= deadline)
        throw std::runtime_error(std::string("mpcomm: ") + (op ? op : "op") + ": PyTorch's current stream on " +
                                 devices[i].str() + " did not reach the call within " +
                                 std::to_string(timeout.count()) + " ms");
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
}

}  // namespace mpcomm::torch_backend
