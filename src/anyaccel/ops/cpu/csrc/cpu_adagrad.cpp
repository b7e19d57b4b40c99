// anyaccel CPU Adagrad: one pass over p, g, the squared-gradient sum (and an optional copy of p).
#include <pybind11/pybind11.h>

#include "cpu_optim.h"

namespace anyaccel {
namespace {

template <bool kDecay, Copy kCopy>
void adagrad_kernel(float* param, const float* grad, float* sum, void* copy, int64_t n,
                    float clr, float eps, float weight_decay, float grad_sign, int threads) {
  for_each_chunk(n, threads, [&](int64_t begin, int64_t end) {
    float* __restrict p = param;
    const float* __restrict g = grad;
    float* __restrict s = sum;
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) {
      float gi = g[i] * grad_sign;
      if constexpr (kDecay) gi += weight_decay * p[i];
      const float acc = s[i] + gi * gi;
      s[i] = acc;
      p[i] = p[i] - clr * (gi / (std::sqrt(acc) + eps));
    }
    if constexpr (kCopy != Copy::kNone) write_copy(kCopy, p + begin, copy, begin, end - begin);
  });
}

template <bool kDecay>
void dispatch_copy(Copy kind, float* p, const float* g, float* s, void* c, int64_t n, float clr,
                   float eps, float wd, float sign, int threads) {
  switch (kind) {
    case Copy::kNone: return adagrad_kernel<kDecay, Copy::kNone>(p, g, s, c, n, clr, eps, wd, sign, threads);
    case Copy::kBF16: return adagrad_kernel<kDecay, Copy::kBF16>(p, g, s, c, n, clr, eps, wd, sign, threads);
    case Copy::kFP16: return adagrad_kernel<kDecay, Copy::kFP16>(p, g, s, c, n, clr, eps, wd, sign, threads);
  }
}

// One Adagrad step (torch semantics: clr = lr / (1 + (step - 1) * lr_decay)).
void adagrad_step(uintptr_t param, uintptr_t grad, uintptr_t state_sum, uintptr_t copy,
                  int copy_kind, int64_t n, int64_t step, double lr, double lr_decay, double eps,
                  double weight_decay, bool maximize, int threads) {
  const float clr = float(lr / (1.0 + double(step - 1) * lr_decay));
  const Copy kind = static_cast<Copy>(copy_kind);
  auto run = weight_decay != 0.0 ? dispatch_copy<true> : dispatch_copy<false>;
  run(kind, as_ptr<float>(param), as_ptr<const float>(grad), as_ptr<float>(state_sum),
      as_ptr<void>(copy), n, clr, float(eps), float(weight_decay), maximize ? -1.0f : 1.0f,
      threads);
}

}  // namespace
}  // namespace anyaccel

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  namespace py = pybind11;
  m.doc() = "anyaccel CPU Adagrad kernel (raw-pointer interface; use anyaccel.ops.adagrad)";
  m.def("adagrad_step", &anyaccel::adagrad_step, py::call_guard<py::gil_scoped_release>(),
        "One fused Adagrad step over contiguous fp32 tensors given by data pointers.",
        py::arg("param"), py::arg("grad"), py::arg("state_sum"), py::arg("copy"),
        py::arg("copy_kind"), py::arg("n"), py::arg("step"), py::arg("lr"), py::arg("lr_decay"),
        py::arg("eps"), py::arg("weight_decay"), py::arg("maximize"), py::arg("threads"));
  m.def("simd_level", &anyaccel::simd_level, "The vector instruction set compiled in.");
}
