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

// The state (m, v) of n parameters. step() updates all of them; a sharded optimizer (ZeRO-1) whose
// parameters lie in several pieces calls begin_step() once and update() per piece.
class AdamW {
 public:
  AdamW(size_t n, const AdamWOptions& o) : opt_(o), m_(n, 0.0f), v_(n, 0.0f) {}
  void step(float* params, const float* grads) {
    begin_step();
    update(params, grads, m_.size(), 0);
  }
  void begin_step();
  // Updates params[0..n) from grads[0..n) with state elements [offset, offset + n).
  void update(float* params, const float* grads, size_t n, size_t offset);
  int steps() const { return t_; }
  // The whole state, to carry it into another AdamW of the same size (an elastic trainer rebuilt after a
  // lost replica) or to send it to a joining one.
  const std::vector<float>& m() const { return m_; }
  const std::vector<float>& v() const { return v_; }
  void restore(const std::vector<float>& m, const std::vector<float>& v, int t);
  // In place (a broadcast from another replica's AdamW): the state's buffers and its step count.
  float* m_data() { return m_.data(); }
  float* v_data() { return v_.data(); }
  void set_steps(int t) { t_ = t; }
  size_t size() const { return m_.size(); }
  size_t state_bytes() const { return (m_.size() + v_.size()) * sizeof(float); }

 private:
  AdamWOptions opt_;
  std::vector<float> m_, v_;
  int t_ = 0;
  float decay_ = 1, b1_ = 0, one_minus_b1_ = 0, b2_ = 0, one_minus_b2_ = 0, step_size_ = 0, bias2_sqrt_ = 1, eps_ = 0;
};

}  // namespace mpcomm::parallel
