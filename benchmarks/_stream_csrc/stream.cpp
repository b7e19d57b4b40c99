// STREAM-style kernels compiled with the same flags as anyaccel's CPU ops, to measure the
// memory bandwidth the optimizer kernels can reach on this machine.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <cstring>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

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

// Adam's pattern plus a 2-byte copy per element written the way the optimizer writes its bf16
// copy (streaming stores where AVX2 is compiled in and the copy is 32-byte aligned): the memory
// floor of the offload step, so both sides of its "% of bandwidth" move the same bytes.
void adam_shaped_copy(uintptr_t p_address, uintptr_t g_address, uintptr_t m_address,
                      uintptr_t v_address, uintptr_t c_address, int64_t n, int threads) {
  float* __restrict p = reinterpret_cast<float*>(p_address);
  const float* __restrict g = reinterpret_cast<const float*>(g_address);
  float* __restrict m = reinterpret_cast<float*>(m_address);
  float* __restrict v = reinterpret_cast<float*>(v_address);
  uint16_t* __restrict c = reinterpret_cast<uint16_t*>(c_address);
  constexpr int64_t kBlock = 2048;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t block = 0; block < blocks; ++block) {
    const int64_t begin = block * kBlock;
    const int64_t end = begin + kBlock < n ? begin + kBlock : n;
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) {
      p[i] += g[i];
      m[i] += g[i];
      v[i] += g[i];
    }
    int64_t i = begin;
#if defined(__AVX2__)
    if (reinterpret_cast<uintptr_t>(c + begin) % 32 == 0) {
      for (; i + 16 <= end; i += 16) {
        const __m256i low = _mm256_srli_epi32(_mm256_castps_si256(_mm256_loadu_ps(p + i)), 16);
        const __m256i high =
            _mm256_srli_epi32(_mm256_castps_si256(_mm256_loadu_ps(p + i + 8)), 16);
        const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(low, high), 0xD8);
        _mm256_stream_si256(reinterpret_cast<__m256i*>(c + i), packed);
      }
      _mm_sfence();
    }
#endif
    for (; i < end; ++i) {
      uint32_t bits;
      std::memcpy(&bits, p + i, sizeof bits);
      c[i] = uint16_t(bits >> 16);
    }
  }
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  namespace py = pybind11;
  m.def("add_inplace", &add_inplace, py::call_guard<py::gil_scoped_release>());
  m.def("triad", &triad, py::call_guard<py::gil_scoped_release>());
  m.def("adam_shaped", &adam_shaped, py::call_guard<py::gil_scoped_release>());
  m.def("adam_shaped_copy", &adam_shaped_copy, py::call_guard<py::gil_scoped_release>());
}
