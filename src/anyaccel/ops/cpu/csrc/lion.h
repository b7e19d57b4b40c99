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

// bf16 parameter and gradient with an fp32 momentum, widened and rounded in registers: one pass
// over every stream (the same per-element code as lion_math, so the same bits).
void lion_math_bf16(uint16_t* __restrict p, const uint16_t* __restrict g, float* __restrict m,
                    int64_t n, const LionScalars& a) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float gi = bf16_to_float(g[i]) * a.grad_sign;
    const float blend = a.beta1 * m[i] + a.one_minus_beta1 * gi;
    p[i] = float_to_bf16(bf16_to_float(p[i]) * a.decay_factor - a.lr * nan_sign(blend));
    m[i] = a.beta2 * m[i] + a.one_minus_beta2 * gi;
  }
}

// Takes a task range whole when a one-pass loop fits it (bf16 or fp16 parameter and gradient,
// an fp32 momentum, no copy to write); false sends it through the chunked path.
inline bool lion_direct(const Task& task, int64_t begin, int64_t end, const LionScalars& a) {
  float* __restrict m = static_cast<float*>(task.states[0].data) + begin;
  if (one_pass(task, 1, DType::kBFloat16)) {
    lion_math_bf16(static_cast<uint16_t*>(task.param.data) + begin,
                   static_cast<const uint16_t*>(task.grad.data) + begin, m, end - begin, a);
    return true;
  }
  if (!one_pass(task, 1, DType::kFloat16)) return false;
  fp16_one_pass(static_cast<uint16_t*>(task.param.data) + begin,
                static_cast<const uint16_t*>(task.grad.data) + begin, end - begin,
                [&](int64_t i, float grad, float value) {
                  const float gi = grad * a.grad_sign;
                  const float blend = a.beta1 * m[i] + a.one_minus_beta1 * gi;
                  const float out = value * a.decay_factor - a.lr * nan_sign(blend);
                  m[i] = a.beta2 * m[i] + a.one_minus_beta2 * gi;
                  return out;
                });
  return true;
}

// One Lion step (Chen et al. 2023): p -= lr * sign(beta1 m + (1 - beta1) g), decoupled decay.
void lion_step(Plan& plan, double lr, double beta1, double beta2, double weight_decay,
               bool maximize, int threads) {
  const LionScalars scalars{float(lr),         float(beta1),
                            float(beta2),      float(1.0 - beta1),
                            float(1.0 - beta2), float(1.0 - lr * weight_decay),
                            maximize ? -1.0f : 1.0f};
  step_group<1>(plan, threads, [&](const Task&) { return scalars; }, lion_math, lion_direct);
}

}  // namespace lion
}  // namespace anyaccel
