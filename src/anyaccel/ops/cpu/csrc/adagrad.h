// anyaccel CPU Adagrad: one native call per param group, one pass over p, g and the
// squared-gradient sum (and an optional copy of p), for fp32, bf16 and fp16 tensors.
// Compiled into the one CPU optimizer library through cpu_optim.cpp.
#pragma once

#include "group_step.h"

namespace anyaccel {
namespace adagrad {

struct AdagradScalars {
  float clr, eps, weight_decay, grad_sign;
};

template <bool kDecay>
void adagrad_math(float* __restrict p, const float* __restrict g, float* const* s, int64_t n,
                  const AdagradScalars& a) {
  float* __restrict sum = s[0];
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    float gi = g[i] * a.grad_sign;
    if constexpr (kDecay) gi += a.weight_decay * p[i];
    const float acc = sum[i] + gi * gi;
    sum[i] = acc;
    p[i] = p[i] - a.clr * (gi / (std::sqrt(acc) + a.eps));
  }
}

// bf16 parameter and gradient with an fp32 sum, widened and rounded in registers (the same
// per-element code as adagrad_math, so the same bits).
template <bool kDecay>
void adagrad_math_bf16(uint16_t* __restrict p, const uint16_t* __restrict g,
                       float* __restrict sum, int64_t n, const AdagradScalars& a) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float value = bf16_to_float(p[i]);
    float gi = bf16_to_float(g[i]) * a.grad_sign;
    if constexpr (kDecay) gi += a.weight_decay * value;
    const float acc = sum[i] + gi * gi;
    sum[i] = acc;
    p[i] = float_to_bf16(value - a.clr * (gi / (std::sqrt(acc) + a.eps)));
  }
}

// Takes a task range whole when a one-pass loop fits it (bf16 or fp16 parameter and gradient,
// an fp32 sum, no copy to write); false sends it through the chunked path.
template <bool kDecay>
bool adagrad_direct(const Task& task, int64_t begin, int64_t end, const AdagradScalars& a) {
  float* __restrict sum = static_cast<float*>(task.states[0].data) + begin;
  if (one_pass(task, 1, DType::kBFloat16)) {
    adagrad_math_bf16<kDecay>(static_cast<uint16_t*>(task.param.data) + begin,
                              static_cast<const uint16_t*>(task.grad.data) + begin, sum,
                              end - begin, a);
    return true;
  }
  if (!one_pass(task, 1, DType::kFloat16)) return false;
  fp16_one_pass(static_cast<uint16_t*>(task.param.data) + begin,
                static_cast<const uint16_t*>(task.grad.data) + begin, end - begin,
                [&](int64_t i, float grad, float value) {
                  float gi = grad * a.grad_sign;
                  if constexpr (kDecay) gi += a.weight_decay * value;
                  const float acc = sum[i] + gi * gi;
                  sum[i] = acc;
                  return value - a.clr * (gi / (std::sqrt(acc) + a.eps));
                });
  return true;
}

// One Adagrad step over a prepared group (torch: clr = lr / (1 + (step - 1) * lr_decay)).
void adagrad_step(Plan& plan, double lr, double lr_decay, double eps, double weight_decay,
                  bool maximize, int threads) {
  auto per_task = [=](const Task& task) {
    return AdagradScalars{float(lr / (1.0 + (task.step - 1.0) * lr_decay)), float(eps),
                          float(weight_decay), maximize ? -1.0f : 1.0f};
  };
  if (weight_decay != 0.0) {
    return step_group<1>(plan, threads, per_task, adagrad_math<true>, adagrad_direct<true>);
  }
  step_group<1>(plan, threads, per_task, adagrad_math<false>, adagrad_direct<false>);
}

}  // namespace adagrad
}  // namespace anyaccel
