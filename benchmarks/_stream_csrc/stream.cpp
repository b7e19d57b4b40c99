// STREAM-style kernels compiled with the same flags as anyaccel's CPU ops, to measure the
// memory bandwidth the optimizer kernels can reach on this machine.
#include <pybind11/pybind11.h>

#include <cstdint>

namespace {

// a[i] += b[i]: reads a and b, writes a back (12 bytes per element, no write-allocate).
void add_inplace(uintptr_t a_address, uintptr_t b_address, int64_t n, int threads) {
  float* __restrict a = reinterpret_cast<float*>(a_address);
  const float* __restrict b = reinterpret_cast<const float*>(b_address);
#pragma omp parallel for simd schedule(static) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) a[i] += b[i];
}

// a[i] = b[i] + s * c[i]: reads b and c, writes a (16 bytes per element with write-allocate).
void triad(uintptr_t a_address, uintptr_t b_address, uintptr_t c_address, float s, int64_t n,
           int threads) {
  float* __restrict a = reinterpret_cast<float*>(a_address);
  const float* __restrict b = reinterpret_cast<const float*>(b_address);
  const float* __restrict c = reinterpret_cast<const float*>(c_address);
#pragma omp parallel for simd schedule(static) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
}

// p += g; m += g; v += g: Adam's access pattern (read 4 arrays, write 3 back: 28 bytes per
// element) with almost no arithmetic, so its time is the memory floor for an Adam step.
void adam_shaped(uintptr_t p_address, uintptr_t g_address, uintptr_t m_address,
                 uintptr_t v_address, int64_t n, int threads) {
  float* __restrict p = reinterpret_cast<float*>(p_address);
  const float* __restrict g = reinterpret_cast<const float*>(g_address);
  float* __restrict m = reinterpret_cast<float*>(m_address);
  float* __restrict v = reinterpret_cast<float*>(v_address);
#pragma omp parallel for simd schedule(static) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) {
    p[i] += g[i];
    m[i] += g[i];
    v[i] += g[i];
  }
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  namespace py = pybind11;
  m.def("add_inplace", &add_inplace, py::call_guard<py::gil_scoped_release>());
  m.def("triad", &triad, py::call_guard<py::gil_scoped_release>());
  m.def("adam_shaped", &adam_shaped, py::call_guard<py::gil_scoped_release>());
}
