// Device tensors and their host aliases: CPU tensors over device memory and back, no copy.
// Compiled through emulated_device.cpp.
#pragma once

#include "allocator.h"

namespace anyaccel {
namespace emulated {
namespace {

bool is_device_tensor(const at::Tensor& tensor) {
  return tensor.defined() && tensor.device().type() == kDevice;
}

void copy_flags(const at::Tensor& from, at::Tensor& to) {
  if (from.is_conj()) to._set_conj(true);
  if (from.is_neg()) to._set_neg(true);
}

// A tensor with `storage` and `geometry`'s sizes, strides, offset, dtype and conj/neg bits.
at::Tensor with_geometry(c10::Storage storage, c10::DispatchKey key, const at::Tensor& geometry) {
  at::Tensor made = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(key), geometry.dtype());
  made.unsafeGetTensorImpl()->set_sizes_and_strides(geometry.sizes(), geometry.strides(),
                                                    geometry.storage_offset());
  copy_flags(geometry, made);
  return made;
}

void drop_storage_reference(void* context) { delete static_cast<c10::Storage*>(context); }

// What a host alias holds: the device storage, alive, and a window on its memory (strict
// memory mode: the host may touch it while an alias lives).
struct HostAliasHold {
  explicit HostAliasHold(const c10::Storage& storage)
      : device(storage), window(pages_of(storage.data_ptr())) {}
  c10::Storage device;
  MemoryWindow window;
};

void drop_host_alias(void* context) { delete static_cast<HostAliasHold*>(context); }

// A CPU DataPtr over a device storage's memory, holding the storage and a window on it.
at::DataPtr host_data_of(const c10::Storage& device_storage) {
  return at::DataPtr(const_cast<void*>(device_storage.data_ptr().get()),
                     new HostAliasHold(device_storage), &drop_host_alias,
                     c10::Device(c10::DeviceType::CPU));
}

// A CPU storage over a device storage's memory; it keeps the device storage alive (and, in
// strict memory mode, its memory open to the host).
c10::Storage host_storage_of(const c10::Storage& device_storage) {
  at::DataPtr data = host_data_of(device_storage);
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), device_storage.nbytes(), std::move(data),
      c10::GetCPUAllocator(), /*resizable=*/true));
}

void check_strided(const at::Tensor& tensor) {
  TORCH_CHECK(tensor.layout() == c10::kStrided, "the emulated ", backend_name(),
              " device holds strided tensors only, got layout ", tensor.layout());
}

at::Tensor host_view(const at::Tensor& tensor) {
  TORCH_CHECK(is_device_tensor(tensor), "host_view expects a tensor on the emulated ",
              backend_name(), " device, got one on ", tensor.device());
  check_strided(tensor);
  return with_geometry(host_storage_of(tensor.storage()), c10::DispatchKey::CPU, tensor);
}

// A device tensor sharing `host`'s memory (kept alive by it), counted on device `index`.
at::Tensor device_tensor_from_host(const at::Tensor& host, int64_t index) {
  TORCH_CHECK(host.defined() && host.device().is_cpu(),
              "device_tensor_from_host expects a CPU tensor, got one on ", host.device());
  check_strided(host);
  check_index(index);
  const c10::Storage& storage = host.storage();
  auto* holder = new c10::Storage(storage);
  at::DataPtr kept(const_cast<void*>(storage.data_ptr().get()), holder, &drop_storage_reference,
                   c10::Device(c10::DeviceType::CPU));
  at::DataPtr device_data =
      share_host_memory(static_cast<DeviceIndex>(index), std::move(kept), storage.nbytes());
  c10::Storage device_storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), storage.nbytes(), std::move(device_data),
      &g_allocators[index], /*resizable=*/false));
  return with_geometry(std::move(device_storage), c10::DispatchKey::PrivateUse1, host);
}

}  // namespace
}  // namespace emulated
}  // namespace anyaccel
