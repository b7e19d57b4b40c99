// Kernels where a fallback cannot be right: factories, copies, resize_, set_, convolutions;
// registered with torch for PrivateUse1 with the fallback. Compiled through emulated_device.cpp.
#pragma once

#include "fallback.h"
#include "guard.h"

namespace anyaccel {
namespace emulated {
namespace {

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<at::Device> device,
                               std::optional<bool> /*pin_memory*/,
                               std::optional<at::MemoryFormat> memory_format) {
  TORCH_CHECK(!layout.has_value() || *layout == c10::kStrided, "the emulated ", backend_name(),
              " device holds strided tensors only, got layout ", *layout);
  const DeviceIndex index = resolve_index(device);
  return at::detail::empty_generic(size, allocator_for(index),
                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                         std::optional<at::Device> device, std::optional<bool> /*pin_memory*/) {
  TORCH_CHECK(!layout.has_value() || *layout == c10::kStrided, "the emulated ", backend_name(),
              " device holds strided tensors only, got layout ", *layout);
  const DeviceIndex index = resolve_index(device);
  return at::detail::empty_strided_generic(size, stride, allocator_for(index),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

// The CPU side of a copy: the tensor itself on the host, an alias on the device.
at::Tensor copy_side(const at::Tensor& tensor, Aliases& aliases, const char* role) {
  if (is_device_tensor(tensor)) return aliases.host_of(tensor);
  TORCH_CHECK(tensor.device().is_cpu(), "copy between the emulated ", backend_name(),
              " device and ", tensor.device(), " is not supported (", role,
              "); copy through the CPU");
  return tensor;
}

at::Tensor& copy_(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  Aliases aliases;
  at::Tensor host_self = copy_side(self, aliases, "destination");
  const at::Tensor host_src = copy_side(src, aliases, "source");
  if (order_host_copy(self, host_src, src, non_blocking)) return self;  // lands at a sync
  host_self.copy_(host_src, non_blocking);
  return self;
}

// .item(): a GPU copies the value to the host and synchronizes the current stream.
at::Scalar local_scalar_dense(const at::Tensor& self) {
  const DeviceIndex index = self.device().index();
  synchronize_stream(index, current_stream_of(index));
  host_waits(clock_of(index, current_stream_of(index)));
  Aliases aliases;
  return at::_local_scalar_dense(aliases.host_of(self));
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  at::Tensor target = dst;
  copy_(target, self, non_blocking);
  return dst;
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<at::MemoryFormat> memory_format);

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (is_device_tensor(dst)) {
    resize_(dst, self.sizes(), std::nullopt);
  } else {
    dst.resize_(self.sizes());
  }
  at::Tensor target = dst;
  copy_(target, self, false);
  return dst;
}

void ensure_storage_holds(c10::TensorImpl* impl) {
  const size_t needed = at::detail::computeStorageNbytes(
      impl->sizes(), impl->strides(), impl->dtype().itemsize(),
      static_cast<size_t>(impl->storage_offset()));
  if (impl->numel() > 0 && needed > impl->storage().nbytes()) {
    resize_storage_bytes(impl->storage().unsafeGetStorageImpl(), needed);
  }
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<at::MemoryFormat> memory_format) {
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  impl->set_sizes_contiguous(size);
  if (memory_format.has_value()) {
    TORCH_CHECK(*memory_format != at::MemoryFormat::Preserve,
                "Unsupported memory format ", *memory_format);
    impl->empty_tensor_restride(*memory_format);
  }
  ensure_storage_holds(impl);
  return self;
}

at::Tensor& set_storage_offset(at::Tensor& self, at::Storage source, int64_t storage_offset,
                               c10::IntArrayRef size, c10::IntArrayRef stride) {
  TORCH_CHECK(source.device().type() == kDevice, "set_: expected a storage on the emulated ",
              backend_name(), " device, got one on ", source.device());
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  impl->set_storage_keep_dtype(std::move(source));
  if (stride.empty()) {
    impl->set_sizes_contiguous(size);
    impl->set_storage_offset(storage_offset);
  } else {
    impl->set_sizes_and_strides(size, stride, storage_offset);
  }
  ensure_storage_holds(impl);
  return self;
}

at::Tensor& set_storage(at::Tensor& self, at::Storage source) {
  const int64_t elements = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return set_storage_offset(self, std::move(source), 0, {elements}, {});
}

at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source) {
  TORCH_CHECK(is_device_tensor(source), "set_: expected a tensor on the emulated ", backend_name(),
              " device, got one on ", source.device());
  if (self.unsafeGetTensorImpl() == source.unsafeGetTensorImpl()) return self;
  return set_storage_offset(self, source.storage(), source.storage_offset(), source.sizes(),
                            source.strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  const DeviceIndex index = self.device().has_index() ? self.device().index() : t_current_device;
  c10::Storage storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), 0, allocate_on(index, 0), &g_allocators[index],
      /*resizable=*/true));
  return set_storage_offset(self, std::move(storage), 0, {0}, {});
}

// Convolutions: torch sends a PrivateUse1 convolution to convolution_overrideable (no CPU
// kernel exists for it, so the fallback cannot serve it); run the CPU's convolution instead.
at::Tensor host_result(Aliases& aliases, const at::Tensor& result, DeviceIndex index) {
  std::unordered_map<c10::StorageImpl*, c10::Storage> adopted;
  std::unordered_map<c10::StorageImpl*, int64_t> uses;
  if (result.defined() && result.has_storage()) uses[result.storage().unsafeGetStorageImpl()] = 1;
  return aliases.device_of(result, index, adopted, uses);
}

void check_same_device(const at::Tensor& first, const at::Tensor& other) {
  TORCH_CHECK(!other.defined() || other.device() == first.device(),
              "Expected all tensors to be on the same device, but found at least two devices, ",
              first.device(), " and ", other.device(), "!");
}

at::Tensor host_optional(Aliases& aliases, const std::optional<at::Tensor>& tensor) {
  if (!tensor.has_value() || !tensor->defined()) return at::Tensor();
  return is_device_tensor(*tensor) ? aliases.host_of(*tensor) : *tensor;
}

at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                                    c10::IntArrayRef padding, c10::IntArrayRef dilation,
                                    bool transposed, c10::IntArrayRef output_padding,
                                    int64_t groups) {
  check_same_device(input, weight);
  if (bias.has_value()) check_same_device(input, *bias);
  Aliases aliases;
  const DeviceIndex index = input.device().index();
  const at::Tensor host_input = copy_side(input, aliases, "convolution input");
  const at::Tensor host_weight = copy_side(weight, aliases, "convolution weight");
  at::Tensor result;
  {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    result = at::convolution(host_input, host_weight, host_optional(aliases, bias), stride,
                             padding, dilation, transposed, output_padding, groups);
  }
  return host_result(aliases, result, index);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
    c10::IntArrayRef output_padding, int64_t groups, std::array<bool, 3> output_mask) {
  check_same_device(input, weight);
  check_same_device(input, grad_output);
  Aliases aliases;
  const DeviceIndex index = input.device().index();
  const at::Tensor host_grad = copy_side(grad_output, aliases, "convolution gradient");
  const at::Tensor host_input = copy_side(input, aliases, "convolution input");
  const at::Tensor host_weight = copy_side(weight, aliases, "convolution weight");
  const int64_t bias_size = transposed ? weight.size(1) * groups : weight.size(0);
  std::tuple<at::Tensor, at::Tensor, at::Tensor> grads;
  {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    grads = at::convolution_backward(host_grad, host_input, host_weight,
                                     std::vector<int64_t>{bias_size}, stride, padding, dilation,
                                     transposed, output_padding, groups, output_mask);
  }
  return {host_result(aliases, std::get<0>(grads), index),
          host_result(aliases, std::get<1>(grads), index),
          host_result(aliases, std::get<2>(grads), index)};
}

void record_stream(at::Tensor& /*self*/, c10::Stream /*stream*/) {}  // memory is never reused early

// A dense CPU tensor and a dense device tensor may share a TensorImpl (`param.data = moved`), as
// for torch's own devices, so `module.to(device)` keeps each Parameter object and an optimizer
// built before the move steps the moved weights. torch leaves this answer to a PrivateUse1
// backend (c10/core/TensorImpl.h); without it every Parameter was replaced by a new one.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  const auto dense = [](c10::DispatchKeySet keys) {
    constexpr auto backends = c10::DispatchKeySet(
        {c10::BackendComponent::CPUBit, c10::BackendComponent::PrivateUse1Bit});
    return keys.has_any(c10::DispatchKeySet(c10::DispatchKey::Dense)) && keys.has_any(backends);
  };
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set()) ||
         (dense(self.key_set()) && dense(from.key_set()));
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&device_fallback>());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("copy_", TORCH_FN(copy_));
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage_offset));
  m.impl("set_.source_Storage", TORCH_FN(set_storage));
  m.impl("set_.source_Tensor", TORCH_FN(set_tensor));
  m.impl("set_", TORCH_FN(set_empty));
  m.impl("record_stream", TORCH_FN(record_stream));
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
  m.impl("convolution_overrideable", TORCH_FN(convolution_overrideable));
  m.impl("convolution_backward_overrideable", TORCH_FN(convolution_backward_overrideable));
}

}  // namespace
}  // namespace emulated
}  // namespace anyaccel
