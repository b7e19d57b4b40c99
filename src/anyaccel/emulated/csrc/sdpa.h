// scaled_dot_product_attention's choice of kernel: torch asks a PrivateUse1 device through
// _fused_sdp_choice_stub and falls back to the math path where the device registers none. The
// device runs the CPU's kernels, so it answers as the CPU does: the CPU's fused (flash) kernel
// then runs on device tensors through the fallback, and results are the CPU's bit for bit.
// Compiled through emulated_device.cpp.
#pragma once

#include <ATen/ATen.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>

#include <optional>

namespace anyaccel {
namespace emulated {
namespace {

int64_t fused_sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                         const std::optional<at::Tensor>& attn_mask, double dropout_p,
                         bool is_causal, std::optional<double> scale, bool enable_gqa) {
  // the dispatched op: the device's fallback runs the CPU's choice on these tensors
  return at::_fused_sdp_choice(query, key, value, attn_mask, dropout_p, is_causal, scale,
                               enable_gqa);
}

}  // namespace
}  // namespace emulated
}  // namespace anyaccel

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &anyaccel::emulated::fused_sdp_choice)
}  // namespace at::native
