// The unit of a group step: a Task (one tensor's operands, element count and step count), and
// what reading a group's tensors needs: their dtypes, shapes and names, and prefetching their
// metadata. Part of group_step.h.
#pragma once

#include <ATen/MemoryOverlap.h>
#include <ATen/ops/full.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>
#include <string>

#include "dtype.h"
#include "simd.h"

namespace anyaccel {
namespace py = pybind11;

// The operand dtypes the kernels read and write, or false for any other.
inline bool to_dtype(c10::ScalarType type, DType* out) {
  switch (type) {
    case c10::ScalarType::Float: *out = DType::kFloat32; return true;
    case c10::ScalarType::BFloat16: *out = DType::kBFloat16; return true;
    case c10::ScalarType::Half: *out = DType::kFloat16; return true;
    default: return false;
  }
}

// IntArrayRef::equals without a memcmp call: shapes have a few dimensions.
inline bool same_sizes(at::IntArrayRef a, at::IntArrayRef b) {
  if (a.size() != b.size()) return false;
  for (size_t d = 0; d < a.size(); ++d) {
    if (a[d] != b[d]) return false;
  }
  return true;
}

inline std::string shape_str(at::IntArrayRef sizes) {
  std::string out = "(";
  for (size_t i = 0; i < sizes.size(); ++i) {
    out += std::to_string(sizes[i]);
    if (sizes.size() == 1 || i + 1 < sizes.size()) out += sizes.size() == 1 ? "," : ", ";
  }
  return out + ")";
}

// torch's Python name of a dtype, e.g. "torch.float64".
inline std::string dtype_str(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Float: return "torch.float32";
    case c10::ScalarType::Double: return "torch.float64";
    case c10::ScalarType::BFloat16: return "torch.bfloat16";
    case c10::ScalarType::Half: return "torch.float16";
    case c10::ScalarType::Long: return "torch.int64";
    case c10::ScalarType::Int: return "torch.int32";
    case c10::ScalarType::Short: return "torch.int16";
    case c10::ScalarType::Char: return "torch.int8";
    case c10::ScalarType::Byte: return "torch.uint8";
    case c10::ScalarType::Bool: return "torch.bool";
    case c10::ScalarType::ComplexFloat: return "torch.complex64";
    case c10::ScalarType::ComplexDouble: return "torch.complex128";
    default: return std::string("torch.") + c10::toString(type);
  }
}

constexpr int kMaxStates = 3;

// An operand of a task: a contiguous buffer and its dtype.
struct Operand {
  void* data = nullptr;
  DType type = DType::kFloat32;
};

// One tensor's share of a group step: its operands, element count and step count.
struct Task {
  Operand param, grad;
  Operand states[kMaxStates];
  void* copy = nullptr;
  Copy copy_kind = Copy::kNone;
  int64_t n = 0;
  double step = 0.0;  // this tensor's step count after the increment
};

// Software prefetch: a step over many small tensors is bound by the latency of reading each
// tensor's scattered metadata (Python object, TensorImpl, storage, state dict), one miss after
// another. The plan reads it in blocks, first requesting each level for the whole block so the
// misses overlap, then walking it from cache.
inline void prefetch_lines(const void* address, size_t bytes) {
#if defined(__GNUC__)
  const char* bytes_at = static_cast<const char*>(address);
  for (size_t offset = 0; offset < bytes; offset += 64) __builtin_prefetch(bytes_at + offset);
#else
  (void)address;
  (void)bytes;
#endif
}

inline void prefetch_impl(const c10::TensorImpl* impl) {
  if (impl != nullptr) prefetch_lines(impl, sizeof(c10::TensorImpl));
}

// The storage record of a tensor, read for its data pointer.
inline void prefetch_storage(const c10::TensorImpl* impl) {
  if (impl != nullptr) prefetch_lines(impl->unsafe_storage().unsafeGetStorageImpl(), 64);
}

constexpr int64_t kPrefetchBlock = 32;

}  // namespace anyaccel
