// anyaccel fused Adam/AdamW for CUDA: one kernel per tensor, fp32 math, fp32/fp16/bf16 params.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/extension.h>

#include <cmath>
#include <utility>

namespace {

template <typename scalar_t>
__global__ void fused_adam_kernel(scalar_t* __restrict__ param, const scalar_t* __restrict__ grad,
                                  float* __restrict__ exp_avg, float* __restrict__ exp_avg_sq,
                                  int64_t n, float lr, float beta1, float beta2, float eps,
                                  float weight_decay, float step_size,
                                  float inv_bias_correction2_sqrt, bool adamw_mode) {
  const int64_t stride = int64_t(blockDim.x) * gridDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float g = static_cast<float>(grad[i]);
    float p = static_cast<float>(param[i]);
    if (weight_decay != 0.0f) {
      if (adamw_mode) {
        p *= 1.0f - lr * weight_decay;
      } else {
        g += weight_decay * p;
      }
    }
    const float m = beta1 * exp_avg[i] + (1.0f - beta1) * g;
    const float v = beta2 * exp_avg_sq[i] + (1.0f - beta2) * g * g;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    p -= step_size * m / (sqrtf(v) * inv_bias_correction2_sqrt + eps);
    param[i] = static_cast<scalar_t>(p);
  }
}

void fused_adam_step(torch::Tensor param, torch::Tensor grad, torch::Tensor exp_avg,
                     torch::Tensor exp_avg_sq, int64_t step, double lr, double beta1, double beta2,
                     double eps, double weight_decay, bool adamw_mode, bool bias_correction) {
  TORCH_CHECK(param.is_cuda() && param.is_contiguous(), "param must be a contiguous CUDA tensor");
  // The kernel indexes all four buffers by param's element count on param's device: a tensor
  // elsewhere (the CPU, another GPU) or smaller would be read or written out of bounds.
  for (const auto& [name, tensor] :
       {std::pair<const char*, const torch::Tensor&>{"grad", grad}, {"exp_avg", exp_avg},
        {"exp_avg_sq", exp_avg_sq}}) {
    TORCH_CHECK(tensor.device() == param.device(), name, " is on ", tensor.device(),
                " but param is on ", param.device(), "; move it to param's device");
    TORCH_CHECK(tensor.numel() == param.numel() && tensor.is_contiguous(), name,
                " must be contiguous with param's ", param.numel(), " elements, got ",
                tensor.numel());
  }
  TORCH_CHECK(grad.scalar_type() == param.scalar_type(), "grad's dtype ", grad.scalar_type(),
              " differs from param's ", param.scalar_type());
  TORCH_CHECK(exp_avg.scalar_type() == at::kFloat && exp_avg_sq.scalar_type() == at::kFloat,
              "optimizer states must be contiguous fp32 tensors");
  const c10::cuda::CUDAGuard guard(param.device());
  const double bias_correction1 = bias_correction ? 1.0 - std::pow(beta1, double(step)) : 1.0;
  const double bias_correction2 = bias_correction ? 1.0 - std::pow(beta2, double(step)) : 1.0;
  const int64_t n = param.numel();
  if (n == 0) return;
  const int threads = 256;
  const int blocks = int(std::min<int64_t>((n + threads - 1) / threads, 65535));
  auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, param.scalar_type(), "fused_adam", [&] {
    fused_adam_kernel<scalar_t><<<blocks, threads, 0, stream>>>(
        param.data_ptr<scalar_t>(), grad.data_ptr<scalar_t>(), exp_avg.data_ptr<float>(),
        exp_avg_sq.data_ptr<float>(), n, float(lr), float(beta1), float(beta2), float(eps),
        float(weight_decay), float(lr / bias_correction1),
        float(1.0 / std::sqrt(bias_correction2)), adamw_mode);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("fused_adam_step", &fused_adam_step, "One fused Adam(W) step on a CUDA tensor.");
}
