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

// One element of Adam(W): updates m, v (and vmax under amsgrad), returns the new parameter.
template <Decay kDecay, bool kAmsgrad>
inline float adam_element(float gradient, float value, float& m, float& v, float& vmax,
                          const AdamScalars& a) {
  float grad = gradient * a.grad_sign;
  if constexpr (kDecay == Decay::kL2) grad += a.weight_decay * value;
  if constexpr (kDecay == Decay::kDecoupled) value *= a.decay_factor;
  const float mean = m + a.one_minus_beta1 * (grad - m);
  const float var = a.beta2 * v + a.one_minus_beta2 * grad * grad;
  m = mean;
  v = var;
  float second = var;
  if constexpr (kAmsgrad) {
    second = nan_max(vmax, var);
    vmax = second;
  }
  const float denom = std::sqrt(second) * a.inv_bias_correction2_sqrt + a.eps;
  return value - a.step_size * (mean / denom);
}

// The update over fp32 values (a parameter, gradient and states, or their fp32 chunk buffers).
template <Decay kDecay, bool kAmsgrad>
void adam_math(float* __restrict p, const float* __restrict g, float* const* s, int64_t n,
               const AdamScalars& a) {
  float* __restrict m = s[0];
  float* __restrict v = s[1];
  float* __restrict vmax = s[2];
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    float unused = 0.0f;
    p[i] = adam_element<kDecay, kAmsgrad>(g[i], p[i], m[i], v[i], kAmsgrad ? vmax[i] : unused, a);
  }
}

// bf16 parameter and gradient with fp32 states (DeepSpeed's default for bf16 models), widened
// and rounded back in registers: one pass that moves every stream at once, as the fp32 update
// does. Through chunk buffers (widen, update, narrow) this case ran ~1.6x slower than its bytes.
template <Decay kDecay, bool kAmsgrad>
void adam_math_bf16(uint16_t* __restrict p, const uint16_t* __restrict g, float* __restrict m,
                    float* __restrict v, float* __restrict vmax, int64_t n,
                    const AdamScalars& a) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    float unused = 0.0f;
    p[i] = float_to_bf16(adam_element<kDecay, kAmsgrad>(
        bf16_to_float(g[i]), bf16_to_float(p[i]), m[i], v[i], kAmsgrad ? vmax[i] : unused, a));
  }
}

// Takes a task range whole when a one-pass loop fits it (bf16 or fp16 parameter and gradient,
// fp32 states, no copy to write); false sends it through the chunked path.
template <Decay kDecay, bool kAmsgrad>
bool adam_direct(const Task& task, int64_t begin, int64_t end, const AdamScalars& a) {
  constexpr int kStates = kAmsgrad ? 3 : 2;
  auto state = [&](int k) {
    return k < kStates ? static_cast<float*>(task.states[k].data) + begin : nullptr;
  };
  if (one_pass(task, kStates, DType::kBFloat16)) {
    adam_math_bf16<kDecay, kAmsgrad>(static_cast<uint16_t*>(task.param.data) + begin,
                                     static_cast<const uint16_t*>(task.grad.data) + begin,
                                     state(0), state(1), state(2), end - begin, a);
    return true;
  }
  if (!one_pass(task, kStates, DType::kFloat16)) return false;
  float* __restrict m = state(0);
  float* __restrict v = state(1);
  float* __restrict vmax = state(2);
  fp16_one_pass(static_cast<uint16_t*>(task.param.data) + begin,
                static_cast<const uint16_t*>(task.grad.data) + begin, end - begin,
                [&](int64_t i, float grad, float value) {
                  float unused = 0.0f;
                  return adam_element<kDecay, kAmsgrad>(grad, value, m[i], v[i],
                                                        kAmsgrad ? vmax[i] : unused, a);
                });
  return true;
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
  step_group<kAmsgrad ? 3 : 2>(plan, threads, per_task, adam_math<kDecay, kAmsgrad>,
                               adam_direct<kDecay, kAmsgrad>);
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
