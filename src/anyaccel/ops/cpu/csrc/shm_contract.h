// The contract between the shared-memory kernel (shm_comm.cpp), anyaccel's c10d Backend
// (shm_c10d_backend.cpp) and Python: every code they exchange, and the kernel's C entries.
//
// Each code is defined here once. shm_comm.cpp's module exports them (DTYPE_CODES, OP_CODES,
// COLLECTIVE_CODES), and Python reads them from the module (anyaccel.distributed.shm.codes), so
// the three cannot disagree. Plain C++: shm_c10d_backend.cpp, built with torch's headers, includes it
// too, and needs no C++ type of the kernel's (the entries are handed over as addresses).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "dtype.h"

namespace anyaccel {

// The reduce ops of all_reduce and reduce_scatter. kAvg sums in double and divides there before
// rounding to the tensor's dtype (a mean that fits is exact even where the dtype's or fp32's sum
// would overflow). kMin and kMax let a NaN from any rank win, as torch.minimum/maximum do;
// between equal values (-0.0 and +0.0) the lower rank's wins, as folding torch.minimum over the
// ranks in order does.
enum class Op : int { kSum = 0, kProduct = 1, kMin = 2, kMax = 3, kAvg = 4 };
constexpr int32_t kOps = 5;
// Each op's name as torch.distributed.ReduceOp spells it, in code order.
inline constexpr const char* kOpNames[] = {"SUM", "PRODUCT", "MIN", "MAX", "AVG"};

// The collectives, as a round's `op` field tells them apart (with the reduce op of all_reduce
// and reduce_scatter, or the root of broadcast, added), so ranks that call different
// collectives find out like a size mismatch. Python announces a gloo fallback with these too.
constexpr int32_t kAllReduce = 0;       // + the reduce op
constexpr int32_t kAllGather = 16;
constexpr int32_t kReduceScatter = 32;  // + the reduce op
constexpr int32_t kBroadcast = 64;      // + the root
struct CollectiveCode {
  int32_t code;
  const char* name;  // torch.distributed's name, and the key of its C entry
};
inline constexpr CollectiveCode kCollectives[] = {{kAllReduce, "all_reduce"},
                                                  {kAllGather, "all_gather"},
                                                  {kReduceScatter, "reduce_scatter"},
                                                  {kBroadcast, "broadcast"}};

// A `dtype` field of kBytes + tag: a byte collective (all_gather, broadcast) of a caller's
// dtype, whose tag the caller chooses (the Python group's table) and the ranks compare.
constexpr int32_t kBytes = 256;

inline std::string dtype_name(int32_t code) {
  if (code >= 0 && code < kDTypes) return kDTypeNames[code];
  return code >= kBytes ? "dtype #" + std::to_string(code - kBytes) : "unknown dtype";
}

inline std::string op_name(int32_t code) {
  if (code >= 0 && code < kOps) return kOpNames[code];
  if (code == kAllGather) return "all_gather";
  if (code >= kReduceScatter && code < kReduceScatter + kOps)
    return "reduce_scatter " + op_name(code - kReduceScatter);
  if (code >= kBroadcast) return "broadcast from rank " + std::to_string(code - kBroadcast);
  return "unknown op";
}

inline const char* collective_name(int32_t op) {
  if (op >= kAllReduce && op < kAllReduce + kOps) return "all_reduce";
  if (op == kAllGather) return "all_gather";
  if (op >= kReduceScatter && op < kReduceScatter + kOps) return "reduce_scatter";
  return "broadcast";
}

// The kernel's C entries for a caller without Python (anyaccel's c10d Backend), by collective
// name in the module's native_entry_addresses(). Each runs one collective on `communicator`
// (a Communicator's handle) and answers:
enum NativeResult : int {
  kNativeDone = 0,      // done
  kNativeUnusable = 1,  // the communicator is closed or failed: nothing done (Python says why)
  kNativeError = 2,     // failed: the text in `message` (`capacity` bytes, always terminated)
};
// all_reduce of `numel` elements at `data` in place.
using NativeAllReduce = int (*)(void* communicator, void* data, int64_t numel, int dtype, int op,
                                double timeout, int threads, char* message,
                                size_t capacity) noexcept;
// all_gather into one output: rank r's `nbytes` at out + r * nbytes.
using NativeAllGather = int (*)(void* communicator, const void* in, void* out, int64_t nbytes,
                                int tag, double timeout, int threads, char* message,
                                size_t capacity) noexcept;
// broadcast of `nbytes` at `data` from rank `root`.
using NativeBroadcast = int (*)(void* communicator, void* data, int64_t nbytes, int root, int tag,
                                double timeout, int threads, char* message,
                                size_t capacity) noexcept;
// reduce_scatter of `numel` elements per rank into `out`.
using NativeReduceScatter = int (*)(void* communicator, const void* in, void* out, int64_t numel,
                                    int dtype, int op, double timeout, int threads,
                                    char* message, size_t capacity) noexcept;

}  // namespace anyaccel
