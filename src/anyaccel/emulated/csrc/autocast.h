// Autocast: CUDA's op lists (torch's own macros) and its refusals for AutocastPrivateUse1, where
// torch has none.
// Compiled through emulated_device.cpp.
#pragma once

#include "devices.h"

namespace anyaccel {
namespace emulated {
namespace {

// The ops CUDA's autocast refuses outright (no safe cast exists), refused here the same way: a
// job that trips it on the emulated device would trip it on a GPU. The first sentence is
// torch's own, so code and tests that match CUDA's message match this one.
at::Tensor binary_cross_entropy_refused(const at::Tensor&, const at::Tensor&,
                                        const std::optional<at::Tensor>&, int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
              "Under autocast its input may be float16, where the log of a probability near 0 or 1 "
              "loses its precision (CUDA's autocast refuses it the same way). Feed logits instead: "
              "torch.nn.functional.binary_cross_entropy_with_logits or torch.nn.BCEWithLogitsLoss "
              "(the sigmoid folded in) are safe to autocast; or run this op with autocast disabled "
              "and float32 inputs.");
}

// Registered at configure, and only what this torch lacks: some releases register the lists
// for PrivateUse1 themselves, and a second registration would fail.
void register_autocast() {
  static std::vector<std::unique_ptr<torch::Library>> libraries;
  const c10::DispatchKey key = c10::DispatchKey::AutocastPrivateUse1;
  if (!c10::Dispatcher::singleton().hasBackendFallbackForDispatchKey(key)) {
    libraries.push_back(std::make_unique<torch::Library>(torch::Library::IMPL, "_", key, __FILE__, __LINE__));
    libraries.back()->fallback(torch::CppFunction::makeFallthrough());
  }
  auto has_kernel = [key](const char* name) {
    auto op = c10::Dispatcher::singleton().findSchema({name, ""});
    return op.has_value() && op->hasKernelForDispatchKey(key);
  };
  if (!has_kernel("aten::binary_cross_entropy")) {
    libraries.push_back(std::make_unique<torch::Library>(torch::Library::IMPL, "aten", key, __FILE__, __LINE__));
    libraries.back()->impl("binary_cross_entropy", TORCH_FN(binary_cross_entropy_refused));
  }
  if (has_kernel("aten::mm")) return;
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
