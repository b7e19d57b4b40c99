// anyaccel CPU Adam/AdamW: one pass over p, g, m, v (and an optional bf16/fp16 copy of p).
#include <pybind11/pybind11.h>

#include "cpu_optim.h"

namespace anyaccel {
namespace {

enum class Decay { kNone, kL2, kDecoupled };

struct AdamArgs {
  float* param;
  const float* grad;
  float* exp_avg;
  float* exp_avg_sq;
  float* max_exp_avg_sq;  // null unless amsgrad
  void* copy;             // null unless a low-precision copy is kept in sync
  int64_t n;
  float lr, beta1, beta2, eps, weight_decay, step_size, inv_bias_correction2_sqrt, grad_sign;
  float one_minus_beta1, one_minus_beta2, decay_factor;  // rounded from double, as torch does
};

template <Decay kDecay, bool kAmsgrad, Copy kCopy>
void adam_kernel(const AdamArgs& a, int threads) {
  const float one_minus_beta1 = a.one_minus_beta1;
  const float one_minus_beta2 = a.one_minus_beta2;
  const float decay_factor = a.decay_factor;
  for_each_chunk(a.n, threads, [&](int64_t begin, int64_t end) {
    float* __restrict p = a.param;
    const float* __restrict g = a.grad;
    float* __restrict m = a.exp_avg;
    float* __restrict v = a.exp_avg_sq;
    float* __restrict vmax = a.max_exp_avg_sq;
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) {
      float grad = g[i] * a.grad_sign;
      float value = p[i];
      if constexpr (kDecay == Decay::kL2) grad += a.weight_decay * value;
      if constexpr (kDecay == Decay::kDecoupled) value *= decay_factor;
      const float mean = m[i] + one_minus_beta1 * (grad - m[i]);
      const float var = a.beta2 * v[i] + one_minus_beta2 * grad * grad;
      m[i] = mean;
      v[i] = var;
      float second = var;
      if constexpr (kAmsgrad) {
        second = std::max(vmax[i], var);
        vmax[i] = second;
      }
      const float denom = std::sqrt(second) * a.inv_bias_correction2_sqrt + a.eps;
      p[i] = value - a.step_size * (mean / denom);
    }
    if constexpr (kCopy != Copy::kNone) write_copy(kCopy, p + begin, a.copy, begin, end - begin);
  });
}

template <Decay kDecay, bool kAmsgrad>
void dispatch_copy(const AdamArgs& a, Copy copy, int threads) {
  switch (copy) {
    case Copy::kNone: return adam_kernel<kDecay, kAmsgrad, Copy::kNone>(a, threads);
    case Copy::kBF16: return adam_kernel<kDecay, kAmsgrad, Copy::kBF16>(a, threads);
    case Copy::kFP16: return adam_kernel<kDecay, kAmsgrad, Copy::kFP16>(a, threads);
  }
}

template <Decay kDecay>
void dispatch_amsgrad(const AdamArgs& a, Copy copy, int threads) {
  if (a.max_exp_avg_sq != nullptr) return dispatch_copy<kDecay, true>(a, copy, threads);
  return dispatch_copy<kDecay, false>(a, copy, threads);
}

// One Adam(W) step on n contiguous fp32 elements. Addresses are raw data pointers;
// max_exp_avg_sq and copy may be 0. copy_kind: 0 none, 1 bf16, 2 fp16.
void adam_step(uintptr_t param, uintptr_t grad, uintptr_t exp_avg, uintptr_t exp_avg_sq,
               uintptr_t max_exp_avg_sq, uintptr_t copy, int copy_kind, int64_t n, int64_t step,
               double lr, double beta1, double beta2, double eps, double weight_decay,
               bool adamw_mode, bool bias_correction, bool maximize, int threads) {
  const double bias_correction1 = bias_correction ? 1.0 - std::pow(beta1, double(step)) : 1.0;
  const double bias_correction2 = bias_correction ? 1.0 - std::pow(beta2, double(step)) : 1.0;
  AdamArgs a{as_ptr<float>(param),
             as_ptr<const float>(grad),
             as_ptr<float>(exp_avg),
             as_ptr<float>(exp_avg_sq),
             as_ptr<float>(max_exp_avg_sq),
             as_ptr<void>(copy),
             n,
             float(lr),
             float(beta1),
             float(beta2),
             float(eps),
             float(weight_decay),
             float(lr / bias_correction1),
             float(1.0 / std::sqrt(bias_correction2)),
             maximize ? -1.0f : 1.0f,
             float(1.0 - beta1),
             float(1.0 - beta2),
             float(1.0 - lr * weight_decay)};
  const Copy kind = static_cast<Copy>(copy_kind);
  if (weight_decay == 0.0) return dispatch_amsgrad<Decay::kNone>(a, kind, threads);
  if (adamw_mode) return dispatch_amsgrad<Decay::kDecoupled>(a, kind, threads);
  return dispatch_amsgrad<Decay::kL2>(a, kind, threads);
}

}  // namespace
}  // namespace anyaccel

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  namespace py = pybind11;
  m.doc() = "anyaccel CPU Adam/AdamW kernels (raw-pointer interface; use anyaccel.ops.adam)";
  m.def("adam_step", &anyaccel::adam_step, py::call_guard<py::gil_scoped_release>(),
        "One fused Adam(W) step over contiguous fp32 tensors given by data pointers.",
        py::arg("param"), py::arg("grad"), py::arg("exp_avg"), py::arg("exp_avg_sq"),
        py::arg("max_exp_avg_sq"), py::arg("copy"), py::arg("copy_kind"), py::arg("n"),
        py::arg("step"), py::arg("lr"), py::arg("beta1"), py::arg("beta2"), py::arg("eps"),
        py::arg("weight_decay"), py::arg("adamw_mode"), py::arg("bias_correction"),
        py::arg("maximize"), py::arg("threads"));
  m.def("simd_level", &anyaccel::simd_level, "The vector instruction set compiled in.");
}
