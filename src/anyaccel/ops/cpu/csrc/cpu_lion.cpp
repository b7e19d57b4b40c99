// anyaccel CPU Lion: one pass over p, g, m (and an optional copy of p).
#include <pybind11/pybind11.h>

#include "cpu_optim.h"

namespace anyaccel {
namespace {

template <Copy kCopy>
void lion_kernel(float* param, const float* grad, float* exp_avg, void* copy, int64_t n, float lr,
                 float beta1, float beta2, float one_minus_beta1, float one_minus_beta2,
                 float decay_factor, float grad_sign, int threads) {
  for_each_chunk(n, threads, [&](int64_t begin, int64_t end) {
    float* __restrict p = param;
    const float* __restrict g = grad;
    float* __restrict m = exp_avg;
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) {
      const float gi = g[i] * grad_sign;
      const float blend = beta1 * m[i] + one_minus_beta1 * gi;
      const float sign = float(blend > 0.0f) - float(blend < 0.0f);
      p[i] = p[i] * decay_factor - lr * sign;
      m[i] = beta2 * m[i] + one_minus_beta2 * gi;
    }
    if constexpr (kCopy != Copy::kNone) write_copy(kCopy, p + begin, copy, begin, end - begin);
  });
}

// One Lion step (Chen et al. 2023): p -= lr * sign(beta1 m + (1 - beta1) g), decoupled decay.
void lion_step(uintptr_t param, uintptr_t grad, uintptr_t exp_avg, uintptr_t copy, int copy_kind,
               int64_t n, double lr, double beta1, double beta2, double weight_decay,
               bool maximize, int threads) {
  auto run = lion_kernel<Copy::kNone>;
  if (copy_kind == int(Copy::kBF16)) run = lion_kernel<Copy::kBF16>;
  if (copy_kind == int(Copy::kFP16)) run = lion_kernel<Copy::kFP16>;
  run(as_ptr<float>(param), as_ptr<const float>(grad), as_ptr<float>(exp_avg), as_ptr<void>(copy),
      n, float(lr), float(beta1), float(beta2), float(1.0 - beta1), float(1.0 - beta2),
      float(1.0 - lr * weight_decay), maximize ? -1.0f : 1.0f, threads);
}

}  // namespace
}  // namespace anyaccel

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  namespace py = pybind11;
  m.doc() = "anyaccel CPU Lion kernel (raw-pointer interface; use anyaccel.ops.lion)";
  m.def("lion_step", &anyaccel::lion_step, py::call_guard<py::gil_scoped_release>(),
        "One fused Lion step over contiguous fp32 tensors given by data pointers.",
        py::arg("param"), py::arg("grad"), py::arg("exp_avg"), py::arg("copy"),
        py::arg("copy_kind"), py::arg("n"), py::arg("lr"), py::arg("beta1"), py::arg("beta2"),
        py::arg("weight_decay"), py::arg("maximize"), py::arg("threads"));
  m.def("simd_level", &anyaccel::simd_level, "The vector instruction set compiled in.");
}
