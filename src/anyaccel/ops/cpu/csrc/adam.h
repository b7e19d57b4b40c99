// anyaccel CPU Adam/AdamW: one native call per param group, one pass over p, g, m, v (and an
// optional bf16/fp16 copy of p), for fp32, bf16 and fp16 parameters and states.
// Compiled into the one CPU optimizer library through cpu_optim.cpp.
#pragma once

#include "group_step.h"

namespace anyaccel {
namespace adam {

enum class Decay { kNone, kL2, kDecoupled };

struct AdamScalars {
  float beta2, eps, weight_decay, step_size, inv_bias_correction2_sqrt, grad_sign;
  float one_minus_beta1, one_minus_beta2, decay_factor;  // rounded from double, as torch does
};

template <Decay kDecay, bool kAmsgrad>
void adam_math(float* __restrict p, const float* __restrict g, float* const* s, int64_t n,
               const AdamScalars& a) {
  float* __restrict m = s[0];
  float* __restrict v = s[1];
  float* __restrict vmax = s[2];
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    float grad = g[i] * a.grad_sign;
    float value = p[i];
    if constexpr (kDecay == Decay::kL2) grad += a.weight_decay * value;
    if constexpr (kDecay == Decay::kDecoupled) value *= a.decay_factor;
    const float mean = m[i] + a.one_minus_beta1 * (grad - m[i]);
    const float var = a.beta2 * v[i] + a.one_minus_beta2 * grad * grad;
    m[i] = mean;
    v[i] = var;
    float second = var;
    if constexpr (kAmsgrad) {
      second = nan_max(vmax[i], var);
      vmax[i] = second;
    }
    const float denom = std::sqrt(second) * a.inv_bias_correction2_sqrt + a.eps;
    p[i] = value - a.step_size * (mean / denom);
  }
}

template <Decay kDecay, bool kAmsgrad>
void run(Plan& plan, int threads, double lr, double beta1, double beta2, double eps,
         double weight_decay, bool bias_correction, bool maximize) {
  // Every parameter of a group usually has the same step count: the scalars (two pow calls)
  // are computed again only when the count differs from the previous parameter's.
  double last_step = 0.0;
  AdamScalars last{};
  bool have_last = false;
  auto per_task = [&](const Task& task) {
    if (have_last && task.step == last_step) return last;
    const double bias_correction1 = bias_correction ? 1.0 - std::pow(beta1, task.step) : 1.0;
    const double bias_correction2 = bias_correction ? 1.0 - std::pow(beta2, task.step) : 1.0;
    last = AdamScalars{float(beta2),
                       float(eps),
                       float(weight_decay),
                       float(lr / bias_correction1),
                       float(1.0 / std::sqrt(bias_correction2)),
                       maximize ? -1.0f : 1.0f,
                       float(1.0 - beta1),
                       float(1.0 - beta2),
                       float(1.0 - lr * weight_decay)};
    last_step = task.step;
    have_last = true;
    return last;
  };
  step_group<kAmsgrad ? 3 : 2>(plan, threads, per_task, adam_math<kDecay, kAmsgrad>);
}

template <Decay kDecay>
void run_amsgrad(bool amsgrad, Plan& plan, int threads, double lr, double beta1, double beta2,
                 double eps, double weight_decay, bool bias_correction, bool maximize) {
  auto body = amsgrad ? run<kDecay, true> : run<kDecay, false>;
  body(plan, threads, lr, beta1, beta2, eps, weight_decay, bias_correction, maximize);
}

// One Adam(W) step over a prepared group (states: exp_avg, exp_avg_sq[, max_exp_avg_sq]).
void adam_step(Plan& plan, double lr, double beta1, double beta2, double eps, double weight_decay,
               bool adamw_mode, bool bias_correction, bool maximize, bool amsgrad, int threads) {
  auto body = weight_decay == 0.0 ? run_amsgrad<Decay::kNone>
              : adamw_mode        ? run_amsgrad<Decay::kDecoupled>
                                  : run_amsgrad<Decay::kL2>;
  body(amsgrad, plan, threads, lr, beta1, beta2, eps, weight_decay, bias_correction, maximize);
}

}  // namespace adam
}  // namespace anyaccel
