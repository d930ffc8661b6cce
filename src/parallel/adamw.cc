#include "parallel/adamw.h"

#include <cmath>
#include <string>

#include "mpcomm/error.h"

namespace mpcomm::parallel {

void AdamW::begin_step() {
  ++t_;
  decay_ = static_cast<float>(1.0 - opt_.lr * opt_.weight_decay);
  b1_ = static_cast<float>(opt_.beta1), one_minus_b1_ = static_cast<float>(1.0 - opt_.beta1);
  b2_ = static_cast<float>(opt_.beta2), one_minus_b2_ = static_cast<float>(1.0 - opt_.beta2);
  const double bias1 = 1.0 - std::pow(opt_.beta1, t_), bias2 = 1.0 - std::pow(opt_.beta2, t_);
  step_size_ = static_cast<float>(opt_.lr / bias1);
  bias2_sqrt_ = static_cast<float>(std::sqrt(bias2));
  eps_ = static_cast<float>(opt_.eps);
}

void AdamW::restore(const std::vector<float>& m, const std::vector<float>& v, int t) {
  if (m.size() != m_.size() || v.size() != v_.size() || t < 0)
    throw Internal("AdamW: restoring a state of " + std::to_string(m.size()) + " elements, step " + std::to_string(t) +
                   ", into one of " + std::to_string(m_.size()));
  m_ = m, v_ = v, t_ = t;
}

void AdamW::update(float* p, const float* g, size_t n, size_t offset) {
  if (offset > m_.size() || n > m_.size() - offset)
    throw Internal("AdamW: update of state elements [" + std::to_string(offset) + ", " + std::to_string(offset + n) +
                   ") of " + std::to_string(m_.size()));
  float* m = m_.data() + offset;
  float* v = v_.data() + offset;
  for (size_t i = 0; i < n; ++i) {
    p[i] *= decay_;
    m[i] = m[i] * b1_ + one_minus_b1_ * g[i];
    v[i] = v[i] * b2_ + one_minus_b2_ * g[i] * g[i];
    float denom = std::sqrt(v[i]) / bias2_sqrt_ + eps_;
    p[i] += -step_size_ * (m[i] / denom);
  }
}

}  // namespace mpcomm::parallel
