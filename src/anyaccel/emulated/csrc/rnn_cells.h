// The fused RNN cells: torch's lstm_cell and gru_cell take them for accelerator tensors (CUDA,
// XPU, PrivateUse1), and the CPU has no kernel for them, so the fallback cannot serve them.
// Written here from ATen ops on the device's tensors, with CUDA's workspace layouts (LSTM: the
// activated gates i, f, g, o; GRU: r, z, n, hx and the hidden n-gate); torch's autograd formulas
// call the backward kernels. Compiled through emulated_device.cpp.
#pragma once

#include <ATen/ATen.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

namespace anyaccel {
namespace emulated {
namespace {

bool has(const std::optional<at::Tensor>& tensor) { return tensor.has_value() && tensor->defined(); }

void check_cell(const char* op, const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                const at::Tensor& state, int64_t gates) {
  TORCH_CHECK(input_gates.dim() == 2 && input_gates.sizes() == hidden_gates.sizes(), op,
              ": input_gates and hidden_gates must be matrices of one shape, got ",
              input_gates.sizes(), " and ", hidden_gates.sizes());
  TORCH_CHECK(state.dim() == 2 && state.size(0) == input_gates.size(0) &&
                  state.size(1) * gates == input_gates.size(1),
              op, ": the state must be (batch, ", gates, " gates' width / ", gates, "), got ",
              state.sizes(), " for gates ", input_gates.sizes());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& cx,
    const std::optional<at::Tensor>& input_bias, const std::optional<at::Tensor>& hidden_bias) {
  check_cell("_thnn_fused_lstm_cell", input_gates, hidden_gates, cx, 4);
  at::Tensor gates = input_gates + hidden_gates;
  if (has(input_bias)) gates = gates + *input_bias;
  if (has(hidden_bias)) gates = gates + *hidden_bias;
  const auto chunks = gates.chunk(4, 1);
  const at::Tensor i = chunks[0].sigmoid(), f = chunks[1].sigmoid();
  const at::Tensor g = chunks[2].tanh(), o = chunks[3].sigmoid();
  at::Tensor cy = f * cx + i * g;
  at::Tensor hy = o * cy.tanh();
  return {hy, cy, at::cat({i, f, g, o}, 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell_backward_impl(
    const std::optional<at::Tensor>& grad_hy, const std::optional<at::Tensor>& grad_cy,
    const at::Tensor& cx, const at::Tensor& cy, const at::Tensor& workspace, bool has_bias) {
  if (!has(grad_hy) && !has(grad_cy)) return {};  // as CUDA: nothing flows back
  const auto w = workspace.chunk(4, 1);
  const at::Tensor &i = w[0], &f = w[1], &g = w[2], &o = w[3];
  const at::Tensor tanh_cy = cy.tanh();
  at::Tensor d_cy = has(grad_cy) ? grad_cy->clone() : at::zeros_like(cy);
  at::Tensor d_o = at::zeros_like(cy);
  if (has(grad_hy)) {
    d_cy = d_cy + *grad_hy * o * (1 - tanh_cy * tanh_cy);
    d_o = *grad_hy * tanh_cy;
  }
  at::Tensor grad_gates = at::cat({d_cy * g * i * (1 - i), d_cy * cx * f * (1 - f),
                                   d_cy * i * (1 - g * g), d_o * o * (1 - o)},
                                  1);
  at::Tensor grad_bias = has_bias ? grad_gates.sum(0) : at::Tensor();
  return {grad_gates, d_cy * f, grad_bias};
}

std::tuple<at::Tensor, at::Tensor> fused_gru_cell(const at::Tensor& input_gates,
                                                  const at::Tensor& hidden_gates,
                                                  const at::Tensor& hx,
                                                  const std::optional<at::Tensor>& input_bias,
                                                  const std::optional<at::Tensor>& hidden_bias) {
  check_cell("_thnn_fused_gru_cell", input_gates, hidden_gates, hx, 3);
  const auto in = (has(input_bias) ? input_gates + *input_bias : input_gates).chunk(3, 1);
  const auto hid = (has(hidden_bias) ? hidden_gates + *hidden_bias : hidden_gates).chunk(3, 1);
  const at::Tensor r = (in[0] + hid[0]).sigmoid(), z = (in[1] + hid[1]).sigmoid();
  const at::Tensor n = (in[2] + r * hid[2]).tanh();
  at::Tensor hy = n + z * (hx - n);
  return {hy, at::cat({r, z, n, hx, hid[2]}, 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  const auto w = workspace.chunk(5, 1);
  const at::Tensor &r = w[0], &z = w[1], &n = w[2], &hx = w[3], &hn = w[4];
  const at::Tensor d_pre_n = grad_hy * (1 - z) * (1 - n * n);
  const at::Tensor d_pre_r = d_pre_n * hn * r * (1 - r);
  const at::Tensor d_pre_z = grad_hy * (hx - n) * z * (1 - z);
  at::Tensor grad_input_gates = at::cat({d_pre_r, d_pre_z, d_pre_n}, 1);
  at::Tensor grad_hidden_gates = at::cat({d_pre_r, d_pre_z, d_pre_n * r}, 1);
  at::Tensor grad_input_bias = has_bias ? grad_input_gates.sum(0) : at::Tensor();
  at::Tensor grad_hidden_bias = has_bias ? grad_hidden_gates.sum(0) : at::Tensor();
  return {grad_input_gates, grad_hidden_gates, grad_hy * z, grad_input_bias, grad_hidden_bias};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_thnn_fused_lstm_cell", TORCH_FN(fused_lstm_cell));
  m.impl("_thnn_fused_lstm_cell_backward_impl", TORCH_FN(fused_lstm_cell_backward_impl));
  m.impl("_thnn_fused_gru_cell", TORCH_FN(fused_gru_cell));
  m.impl("_thnn_fused_gru_cell_backward", TORCH_FN(fused_gru_cell_backward));
}

}  // namespace
}  // namespace emulated
}  // namespace anyaccel
