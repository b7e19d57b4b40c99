// The host kernels' shared SIMD level and conversions: fp32 <-> bf16/fp16 (scalar, AVX2+F16C
// and AVX-512), streaming copies, and the chunk sizes of the CPU optimizers' loops. Used by the
// CPU optimizers (group_step.h) and the shared-memory collectives (shm_comm.cpp).
//
// The per-group plumbing of the optimizers (tensors, validation, parallel split) is in
// group_step.h.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__AVX512F__) || defined(__AVX2__) || defined(__F16C__)
#include <immintrin.h>
#endif

namespace anyaccel {

// Elements per chunk: the loop body for one chunk stays in L1, so the conversion of the
// freshly updated parameters reads them from cache, not memory.
constexpr int64_t kChunk = 2048;
// Below this many elements a step runs on one thread: a parallel region costs more.
constexpr int64_t kParallelThreshold = 32768;

enum class Copy : int { kNone = 0, kBF16 = 1, kFP16 = 2 };

inline const char* simd_level() {
#if defined(__AVX512F__)
  return "avx512";
#elif defined(__AVX2__)
  return "avx2";
#elif defined(__ARM_NEON)
  return "neon";
#else
  return "generic";
#endif
}

// Round-to-nearest-even fp32 -> bf16, NaN -> canonical quiet NaN (as torch converts).
inline uint16_t float_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  return (bits & 0x7FFFFFFFu) > 0x7F800000u ? uint16_t(0x7FC0u) : uint16_t(rounded);
}

// Round-to-nearest-even fp32 -> IEEE half, with subnormals, overflow to inf and NaN.
inline uint16_t float_to_fp16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude >= 0x7F800000u) {  // inf or NaN
    return uint16_t(sign | (magnitude > 0x7F800000u ? 0x7E00u : 0x7C00u));
  }
  if (magnitude >= 0x477FF000u) {  // rounds to a value beyond the largest half
    return uint16_t(sign | 0x7C00u);
  }
  if (magnitude < 0x38800000u) {  // half subnormal or zero: let the FPU round
    float shifted;
    std::memcpy(&shifted, &magnitude, sizeof shifted);
    shifted += 0.5f;
    uint32_t shifted_bits;
    std::memcpy(&shifted_bits, &shifted, sizeof shifted_bits);
    return uint16_t(sign | (shifted_bits - 0x3F000000u));
  }
  const uint32_t odd = (magnitude >> 13) & 1u;
  magnitude += 0xC8000FFFu + odd;  // rebias exponent 127 -> 15 and round half to even
  return uint16_t(sign | (magnitude >> 13));
}

// The copies below use streaming (non-temporal) stores where the destination is 32-byte
// aligned: the step never reads the copy back, so skipping the write-allocate read saves 2 of
// the 32 bytes moved per parameter (measured 6-10 % faster at 50M parameters). Each chunk ends
// with an sfence, so the copy is globally visible when the step returns.
#if defined(__AVX512F__)
inline __m256i bf16_round16(const float* src) {
  const __m512 x = _mm512_loadu_ps(src);
  const __m512i bits = _mm512_castps_si512(x);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i bias = _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), odd);
  __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, bias), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  rounded = _mm512_mask_mov_epi32(rounded, nan, _mm512_set1_epi32(0x7FC0));
  return _mm512_cvtepi32_epi16(rounded);
}
inline __m256i fp16_round16(const float* src) {
  return _mm512_cvtps_ph(_mm512_loadu_ps(src), _MM_FROUND_TO_NEAREST_INT);
}
#define ANYACCEL_HAS_PACK16 1
#elif defined(__AVX2__) && defined(__F16C__)
inline __m256i bf16_round8(const float* src) {
  const __m256 x = _mm256_loadu_ps(src);
  const __m256i bits = _mm256_castps_si256(x);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i bias = _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), odd);
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, bias), 16);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  return _mm256_blendv_epi8(rounded, _mm256_set1_epi32(0x7FC0), nan);
}
inline __m256i bf16_round16(const float* src) {
  // packus interleaves 128-bit lanes; the permute restores element order.
  const __m256i packed = _mm256_packus_epi32(bf16_round8(src), bf16_round8(src + 8));
  return _mm256_permute4x64_epi64(packed, 0xD8);
}
inline __m256i fp16_round16(const float* src) {
  const __m128i low = _mm256_cvtps_ph(_mm256_loadu_ps(src), _MM_FROUND_TO_NEAREST_INT);
  const __m128i high = _mm256_cvtps_ph(_mm256_loadu_ps(src + 8), _MM_FROUND_TO_NEAREST_INT);
  return _mm256_set_m128i(high, low);
}
#define ANYACCEL_HAS_PACK16 1
#endif

// Converts src[0, n) into dst with `round16` (16 at a time), returning how many it converted.
template <typename Round16>
inline int64_t convert_vectorised(const float* src, uint16_t* dst, int64_t n, Round16 round16) {
  int64_t i = 0;
#if defined(ANYACCEL_HAS_PACK16)
  if (reinterpret_cast<uintptr_t>(dst) % 32 == 0) {
    for (; i + 16 <= n; i += 16) {
      _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i), round16(src + i));
    }
    _mm_sfence();
  } else {
    for (; i + 16 <= n; i += 16) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), round16(src + i));
    }
  }
#else
  (void)src;
  (void)dst;
  (void)n;
  (void)round16;
#endif
  return i;
}

inline void convert_bf16(const float* src, uint16_t* dst, int64_t n) {
#if defined(ANYACCEL_HAS_PACK16)
  const int64_t done = convert_vectorised(src, dst, n, bf16_round16);
#else
  const int64_t done = convert_vectorised(src, dst, n, 0);
#endif
#pragma omp simd
  for (int64_t j = done; j < n; ++j) dst[j] = float_to_bf16(src[j]);
}

inline void convert_fp16(const float* src, uint16_t* dst, int64_t n) {
#if defined(ANYACCEL_HAS_PACK16)
  const int64_t done = convert_vectorised(src, dst, n, fp16_round16);
#else
  const int64_t done = convert_vectorised(src, dst, n, 0);
#endif
  for (int64_t j = done; j < n; ++j) dst[j] = float_to_fp16(src[j]);
}

inline void write_copy(Copy kind, const float* src, void* dst, int64_t offset, int64_t n) {
  if (kind == Copy::kBF16) {
    convert_bf16(src, static_cast<uint16_t*>(dst) + offset, n);
  } else if (kind == Copy::kFP16) {
    convert_fp16(src, static_cast<uint16_t*>(dst) + offset, n);
  }
}

// One bf16 value widened to fp32 (exact: bf16 is fp32's upper half).
inline float bf16_to_float(uint16_t half) {
  const uint32_t bits = uint32_t(half) << 16;
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

// Widens bf16 to fp32 (exact: bf16 is fp32's upper half).
inline void bf16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  uint32_t* bits = reinterpret_cast<uint32_t*>(dst);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) bits[i] = uint32_t(src[i]) << 16;
}

// Exact IEEE half -> fp32, including subnormals, infinities and NaN.
inline float fp16_to_float(uint16_t half) {
  const uint32_t sign = uint32_t(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1Fu;
  uint32_t mantissa = half & 0x3FFu;
  uint32_t bits;
  if (exponent == 0x1Fu) {
    bits = sign | 0x7F800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {  // subnormal: value = mantissa * 2^-24, exact in fp32
    float value = float(mantissa) * 5.9604644775390625e-8f;
    std::memcpy(&bits, &value, sizeof bits);
    bits |= sign;
  }
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

inline void fp16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m128i half = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(half));
  }
#endif
  for (; i < n; ++i) dst[i] = fp16_to_float(src[i]);
}

#if defined(__F16C__)
// Whether the fp16 one-pass loops are compiled in (F16C converts 8 halves per instruction).
constexpr bool kFp16OnePass = true;
#else
constexpr bool kFp16OnePass = false;  // fp16 parameters take the chunked path
#endif

// One pass over an fp16 parameter and gradient: p[i] = element(i, g[i], p[i]) computed in fp32,
// one vector of elements at a time widened and rounded back (to nearest even) with F16C, so
// nothing goes through a chunk buffer in memory. Bit-identical to widening, updating and
// narrowing through buffers (the conversions are exact and round alike; the math is the same
// code). The block is one register wide (16 with AVX-512, else 8), so its stores and loads
// forward from the store buffer.
template <typename Element>
inline void fp16_one_pass(uint16_t* __restrict p, const uint16_t* __restrict g, int64_t n,
                          const Element& element) {
  int64_t i = 0;
#if defined(__AVX512F__)
  constexpr int kBlock = 16;
  for (; i + kBlock <= n; i += kBlock) {
    alignas(64) float value[kBlock];
    alignas(64) float grad[kBlock];
    _mm512_store_ps(value, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i))));
    _mm512_store_ps(grad, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + i))));
#pragma omp simd
    for (int k = 0; k < kBlock; ++k) value[k] = element(i + k, grad[k], value[k]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + i),
                        _mm512_cvtps_ph(_mm512_load_ps(value), _MM_FROUND_TO_NEAREST_INT));
  }
#elif defined(__F16C__)
  constexpr int kBlock = 8;
  for (; i + kBlock <= n; i += kBlock) {
    alignas(32) float value[kBlock];
    alignas(32) float grad[kBlock];
    _mm256_store_ps(value, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i))));
    _mm256_store_ps(grad, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + i))));
#pragma omp simd
    for (int k = 0; k < kBlock; ++k) value[k] = element(i + k, grad[k], value[k]);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p + i),
                     _mm256_cvtps_ph(_mm256_load_ps(value), _MM_FROUND_TO_NEAREST_INT));
  }
#endif
  for (; i < n; ++i) p[i] = float_to_fp16(element(i, fp16_to_float(g[i]), fp16_to_float(p[i])));
}

// torch.maximum's rule: NaN if either is NaN, else the larger.
inline float nan_max(float a, float b) {
  const float sum = a + b;
  return sum != sum ? sum : (a > b ? a : b);
}

// torch.sign's rule: -1, 0 or 1, and NaN stays NaN.
inline float nan_sign(float x) {
  return x != x ? x : float(x > 0.0f) - float(x < 0.0f);
}

}  // namespace anyaccel
