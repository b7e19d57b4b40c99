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

// One Adagrad step over a prepared group (torch: clr = lr / (1 + (step - 1) * lr_decay)).
void adagrad_step(Plan& plan, double lr, double lr_decay, double eps, double weight_decay,
                  bool maximize, int threads) {
  auto per_task = [=](const Task& task) {
    return AdagradScalars{float(lr / (1.0 + (task.step - 1.0) * lr_decay)), float(eps),
                          float(weight_decay), maximize ? -1.0f : 1.0f};
  };
  if (weight_decay != 0.0) return step_group<1>(plan, threads, per_task, adagrad_math<true>);
  step_group<1>(plan, threads, per_task, adagrad_math<false>);
}

}  // namespace adagrad
}  // namespace anyaccel
