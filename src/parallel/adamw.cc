#include "parallel/adamw.h"

#include <cmath>

namespace mpcomm::parallel {

void AdamW::step(float* p, const float* g) {
  ++t_;
  const float decay = static_cast<float>(1.0 - opt_.lr * opt_.weight_decay);
  const float b1 = static_cast<float>(opt_.beta1), one_minus_b1 = static_cast<float>(1.0 - opt_.beta1);
  const float b2 = static_cast<float>(opt_.beta2), one_minus_b2 = static_cast<float>(1.0 - opt_.beta2);
  const double bias1 = 1.0 - std::pow(opt_.beta1, t_), bias2 = 1.0 - std::pow(opt_.beta2, t_);
  const float step_size = static_cast<float>(opt_.lr / bias1);
  const float bias2_sqrt = static_cast<float>(std::sqrt(bias2));
  const float eps = static_cast<float>(opt_.eps);
  for (size_t i = 0; i < m_.size(); ++i) {
    p[i] *= decay;
    m_[i] = m_[i] * b1 + one_minus_b1 * g[i];
    v_[i] = v_[i] * b2 + one_minus_b2 * g[i] * g[i];
    float denom = std::sqrt(v_[i]) / bias2_sqrt + eps;
    p[i] += -step_size * (m_[i] / denom);
  }
}

}  // namespace mpcomm::parallel
