// AdamW with exactly torch.optim.AdamW's update (PyTorch 1.13, single-tensor path, one parameter group,
// weight decay on every parameter, constant learning rate). For step t = 1, 2, ...:
//   p *= 1 - lr*wd
//   m = m*b1 + (1-b1)*g
//   v = v*b2 + (1-b2)*g*g
//   p -= lr/(1 - b1^t) * m / (sqrt(v)/sqrt(1 - b2^t) + eps)
// Scalars are computed in double and applied in float32, as torch does for float tensors.
#pragma once

#include <cstddef>
#include <vector>

namespace mpcomm::parallel {

struct AdamWOptions {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 1e-2;  // torch's defaults
};

class AdamW {
 public:
  AdamW(size_t n, const AdamWOptions& o) : opt_(o), m_(n, 0.0f), v_(n, 0.0f) {}
  void step(float* params, const float* grads);
  int steps() const { return t_; }

 private:
  AdamWOptions opt_;
  std::vector<float> m_, v_;
  int t_ = 0;
};

}  // namespace mpcomm::parallel
