// The operand dtypes the host kernels read and write: the CPU optimizers (group_step.h) and the
// shared-memory collectives (shm_contract.h, whose module hands these codes to Python).
#pragma once

#include <cstddef>

namespace anyaccel {

// The code of each dtype is what Python passes the shared-memory kernel (read from the module's
// DTYPE_CODES, never restated in Python).
enum class DType : int { kFloat32 = 0, kBFloat16 = 1, kFloat16 = 2 };

// Each dtype's name as torch spells it (torch.float32, ...), in code order.
inline constexpr const char* kDTypeNames[] = {"float32", "bfloat16", "float16"};
inline constexpr int kDTypes = 3;

inline size_t element_size(DType dtype) { return dtype == DType::kFloat32 ? 4 : 2; }

}  // namespace anyaccel
