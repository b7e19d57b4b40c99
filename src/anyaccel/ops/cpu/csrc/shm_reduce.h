// The reductions of the shared-memory collectives: every rank's slot combined, in rank order,
// into one output (fp32, bf16 and fp16; SUM, PRODUCT, MIN, MAX, and the mean for AVG), so every
// rank gets the same bits. One header of shm_comm.cpp's single translation unit.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "shm_contract.h"
#include "simd.h"

namespace anyaccel {
namespace {

inline float bf16_to_float(uint16_t bits) {
  const uint32_t wide = uint32_t(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof value);
  return value;
}

inline float fp16_to_float(uint16_t half) {
  const uint32_t sign = uint32_t(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1Fu;
  const uint32_t mantissa = half & 0x3FFu;
  uint32_t bits;
  if (exponent == 0x1Fu) {
    bits = sign | 0x7F800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  } else {  // zero or subnormal: exact in float
    float value = float(mantissa) * 5.9604644775390625e-8f;  // 2^-24
    return sign ? -value : value;
  }
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// `a` (the ranks before) combined with `b` (the next rank). b != b: b is a NaN.
template <Op kOp>
inline float combine(float a, float b) {
  if constexpr (kOp == Op::kSum) return a + b;
  if constexpr (kOp == Op::kProduct) return a * b;
  if constexpr (kOp == Op::kMin) return (b < a || b != b) ? b : a;
  return (b > a || b != b) ? b : a;
}

// out[i] = srcs[0][i] (op) srcs[1][i] (op) ... in rank order, for elements [begin, end). `out`
// may be one of the sources (a rank reduces from its own tensor, not its slot's copy of it: one
// stream of memory traffic less), so every element is read from all sources before it is written.
template <Op kOp>
void reduce_float(float* out, const std::vector<const char*>& srcs, int64_t begin,
                  int64_t end) {
  const float* s0 = reinterpret_cast<const float*>(srcs[0]);
  if (srcs.size() == 2) {
    const float* s1 = reinterpret_cast<const float*>(srcs[1]);
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) out[i] = combine<kOp>(s0[i], s1[i]);
    return;
  }
  constexpr int64_t kBlock = 1024;
  float acc[kBlock];
  for (int64_t start = begin; start < end; start += kBlock) {
    const int64_t count = std::min(kBlock, end - start);
#pragma omp simd
    for (int64_t i = 0; i < count; ++i) acc[i] = s0[start + i];
    for (size_t r = 1; r < srcs.size(); ++r) {
      const float* sr = reinterpret_cast<const float*>(srcs[r]) + start;
#pragma omp simd
      for (int64_t i = 0; i < count; ++i) acc[i] = combine<kOp>(acc[i], sr[i]);
    }
#pragma omp simd
    for (int64_t i = 0; i < count; ++i) out[start + i] = acc[i];
  }
}

template <DType kType>
inline float load(const char* base, int64_t i) {
  if constexpr (kType == DType::kFloat32) return reinterpret_cast<const float*>(base)[i];
  const uint16_t bits = reinterpret_cast<const uint16_t*>(base)[i];
  return kType == DType::kBFloat16 ? bf16_to_float(bits) : fp16_to_float(bits);
}

template <DType kType>
inline void store(char* base, int64_t i, float value) {
  if constexpr (kType == DType::kFloat32) {
    reinterpret_cast<float*>(base)[i] = value;
  } else {
    reinterpret_cast<uint16_t*>(base)[i] =
        kType == DType::kBFloat16 ? float_to_bf16(value) : float_to_fp16(value);
  }
}

// The mean over ranks: summed in double in rank order, divided there, then rounded to float and
// to the dtype (as torch converts a double), so a mean that fits is exact even where the sum
// would overflow the dtype or fp32.
template <DType kType>
void reduce_mean(char* out, const std::vector<const char*>& slots, int64_t begin, int64_t end) {
  constexpr int64_t kBlock = 512;
  double acc[kBlock];
  const double ranks = double(slots.size());
  for (int64_t start = begin; start < end; start += kBlock) {
    const int64_t count = std::min(kBlock, end - start);
#pragma omp simd
    for (int64_t i = 0; i < count; ++i) acc[i] = double(load<kType>(slots[0], start + i));
    for (size_t r = 1; r < slots.size(); ++r) {
#pragma omp simd
      for (int64_t i = 0; i < count; ++i) acc[i] += double(load<kType>(slots[r], start + i));
    }
    for (int64_t i = 0; i < count; ++i) store<kType>(out, start + i, float(acc[i] / ranks));
  }
}

#if defined(__x86_64__) && defined(__AVX512F__) && \
    (defined(__clang__) ? __clang_major__ >= 11 : __GNUC__ >= 10)
#define ANYACCEL_BF16_PAIR 1
// Two ranks' bf16 SUM or PRODUCT with the CPU's own fp32 -> bf16 conversion (AVX512_BF16,
// checked at run time; this build's SIMD level must be AVX-512 already). That instruction rounds
// as float_to_bf16 does for every normal, zero and infinite value, but turns NaNs and subnormals
// its own way, so 16 results holding either take the integer rounding instead (what it saves:
// docs/distributed.md). Returns how many elements it did (the rest go to the scalar loop).
template <Op kOp>
__attribute__((target("avx512f,avx512bw,avx512dq,avx512bf16"))) int64_t reduce_bf16_pair(
    uint16_t* out, const uint16_t* s0, const uint16_t* s1, int64_t begin, int64_t end) {
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    const __m512 a = _mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s0 + i))), 16));
    const __m512 b = _mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s1 + i))), 16));
    const __m512 value = kOp == Op::kSum ? _mm512_add_ps(a, b) : _mm512_mul_ps(a, b);
    __m256i bf16;
    if (_mm512_fpclass_ps_mask(value, 0x01 | 0x20 | 0x80) == 0) {  // no NaN, no subnormal
      bf16 = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(value));
    } else {
      const __m512i bits = _mm512_castps_si512(value);
      const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
      __m512i rounded = _mm512_srli_epi32(
          _mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
      rounded = _mm512_mask_mov_epi32(rounded, _mm512_cmp_ps_mask(value, value, _CMP_UNORD_Q),
                                      _mm512_set1_epi32(0x7FC0));
      bf16 = _mm512_cvtepi32_epi16(rounded);
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), bf16);
  }
  return i - begin;
}

inline bool cpu_has_bf16() {
  static const bool has = __builtin_cpu_supports("avx512bf16");
  return has;
}
#endif

template <Op kOp, DType kType>
void reduce_half(uint16_t* out, const std::vector<const char*>& slots, int64_t begin,
                 int64_t end) {
  if (slots.size() == 2) {  // two ranks: one fused pass (no float block), a third fewer stores
    const uint16_t* s0 = reinterpret_cast<const uint16_t*>(slots[0]);
    const uint16_t* s1 = reinterpret_cast<const uint16_t*>(slots[1]);
#if defined(ANYACCEL_BF16_PAIR)
    if constexpr (kType == DType::kBFloat16 && (kOp == Op::kSum || kOp == Op::kProduct)) {
      if (cpu_has_bf16()) begin += reduce_bf16_pair<kOp>(out, s0, s1, begin, end);
    }
#endif
#pragma omp simd
    for (int64_t i = begin; i < end; ++i)
      out[i] = kType == DType::kBFloat16
                   ? float_to_bf16(combine<kOp>(bf16_to_float(s0[i]), bf16_to_float(s1[i])))
                   : float_to_fp16(combine<kOp>(fp16_to_float(s0[i]), fp16_to_float(s1[i])));
    return;
  }
  constexpr int64_t kBlock = 512;
  float acc[kBlock];
  for (int64_t start = begin; start < end; start += kBlock) {
    const int64_t count = std::min(kBlock, end - start);
    for (size_t r = 0; r < slots.size(); ++r) {
      const uint16_t* sr = reinterpret_cast<const uint16_t*>(slots[r]) + start;
      if (r == 0) {
#pragma omp simd
        for (int64_t i = 0; i < count; ++i)
          acc[i] = kType == DType::kBFloat16 ? bf16_to_float(sr[i]) : fp16_to_float(sr[i]);
      } else {
#pragma omp simd
        for (int64_t i = 0; i < count; ++i)
          acc[i] = combine<kOp>(
              acc[i], kType == DType::kBFloat16 ? bf16_to_float(sr[i]) : fp16_to_float(sr[i]));
      }
    }
#pragma omp simd
    for (int64_t i = 0; i < count; ++i)
      out[start + i] = kType == DType::kBFloat16 ? float_to_bf16(acc[i]) : float_to_fp16(acc[i]);
  }
}

template <Op kOp>
void reduce_dispatch_type(DType dtype, char* out, const std::vector<const char*>& slots,
                          int64_t begin, int64_t end) {
  switch (dtype) {
    case DType::kFloat32:
      return reduce_float<kOp>(reinterpret_cast<float*>(out), slots, begin, end);
    case DType::kBFloat16:
      return reduce_half<kOp, DType::kBFloat16>(reinterpret_cast<uint16_t*>(out), slots, begin,
                                                 end);
    case DType::kFloat16:
      return reduce_half<kOp, DType::kFloat16>(reinterpret_cast<uint16_t*>(out), slots, begin,
                                                end);
  }
}

void reduce(Op op, DType dtype, char* out, const std::vector<const char*>& slots, int64_t begin,
            int64_t end) {
  switch (op) {
    case Op::kSum: return reduce_dispatch_type<Op::kSum>(dtype, out, slots, begin, end);
    case Op::kProduct: return reduce_dispatch_type<Op::kProduct>(dtype, out, slots, begin, end);
    case Op::kMin: return reduce_dispatch_type<Op::kMin>(dtype, out, slots, begin, end);
    case Op::kMax: return reduce_dispatch_type<Op::kMax>(dtype, out, slots, begin, end);
    case Op::kAvg:
      switch (dtype) {
        case DType::kFloat32: return reduce_mean<DType::kFloat32>(out, slots, begin, end);
        case DType::kBFloat16: return reduce_mean<DType::kBFloat16>(out, slots, begin, end);
        case DType::kFloat16: return reduce_mean<DType::kFloat16>(out, slots, begin, end);
      }
  }
}

}  // namespace
}  // namespace anyaccel
