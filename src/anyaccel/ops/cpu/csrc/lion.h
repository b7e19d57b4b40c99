// anyaccel CPU Lion: one native call per param group, one pass over p, g, m (and an optional
// copy of p), for fp32, bf16 and fp16 tensors.
// Compiled into the one CPU optimizer library through cpu_optim.cpp.
#pragma once

#include "group_step.h"

namespace anyaccel {
namespace lion {

struct LionScalars {
  float lr, beta1, beta2, one_minus_beta1, one_minus_beta2, decay_factor, grad_sign;
};

void lion_math(float* __restrict p, const float* __restrict g, float* const* s, int64_t n,
               const LionScalars& a) {
  float* __restrict m = s[0];
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * a.grad_sign;
    const float blend = a.beta1 * m[i] + a.one_minus_beta1 * gi;
    p[i] = p[i] * a.decay_factor - a.lr * nan_sign(blend);
    m[i] = a.beta2 * m[i] + a.one_minus_beta2 * gi;
  }
}

// One Lion step (Chen et al. 2023): p -= lr * sign(beta1 m + (1 - beta1) g), decoupled decay.
void lion_step(Plan& plan, double lr, double beta1, double beta2, double weight_decay,
               bool maximize, int threads) {
  const LionScalars scalars{float(lr),         float(beta1),
                            float(beta2),      float(1.0 - beta1),
                            float(1.0 - beta2), float(1.0 - lr * weight_decay),
                            maximize ? -1.0f : 1.0f};
  step_group<1>(plan, threads, [&](const Task&) { return scalars; }, lion_math);
}

}  // namespace lion
}  // namespace anyaccel
