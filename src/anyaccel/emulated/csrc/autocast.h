// Autocast: CUDA's op lists (torch's own macros) for AutocastPrivateUse1, where torch has none.
// Compiled through emulated_device.cpp.
#pragma once

#include "devices.h"

namespace anyaccel {
namespace emulated {
namespace {

// Registered at configure, and only what this torch lacks: some releases register the lists
// for PrivateUse1 themselves, and a second registration would fail.
void register_autocast() {
  static std::vector<std::unique_ptr<torch::Library>> libraries;
  const c10::DispatchKey key = c10::DispatchKey::AutocastPrivateUse1;
  if (!c10::Dispatcher::singleton().hasBackendFallbackForDispatchKey(key)) {
    libraries.push_back(std::make_unique<torch::Library>(torch::Library::IMPL, "_", key, __FILE__, __LINE__));
    libraries.back()->fallback(torch::CppFunction::makeFallthrough());
  }
  auto mm = c10::Dispatcher::singleton().findSchema({"aten::mm", ""});
  if (mm.has_value() && mm->hasKernelForDispatchKey(key)) return;
  libraries.push_back(std::make_unique<torch::Library>(torch::Library::IMPL, "aten", key, __FILE__, __LINE__));
  torch::Library& m = *libraries.back();
  using at::IntArrayRef;
  using at::Scalar;
  using at::ScalarType;
  using at::Tensor;
#ifndef ADD_NS
#define ADD_NS(RAW_OP) at::RAW_OP
#endif
#define ANYACCEL_LOWER_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define ANYACCEL_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define ANYACCEL_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define ANYACCEL_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_LOWER_PRECISION_FP(ANYACCEL_LOWER_PRECISION_FP)
  AT_FORALL_FP32(ANYACCEL_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(ANYACCEL_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(ANYACCEL_PROMOTE)
#undef ANYACCEL_LOWER_PRECISION_FP
#undef ANYACCEL_FP32
#undef ANYACCEL_FP32_SET_OPT_DTYPE
#undef ANYACCEL_PROMOTE
}

}  // namespace
}  // namespace emulated
}  // namespace anyaccel
