// Sparse tensors on the device: COO (SparsePrivateUse1) and the compressed layouts CSR, CSC, BSR,
// BSC (SparseCsrPrivateUse1). A device sparse tensor is torch's own SparseTensorImpl or
// SparseCsrTensorImpl over device parts (indices, values). An op on one runs the CPU's sparse
// kernel on a CPU twin over host aliases of those parts (no copy), as dense ops do; a sparse
// result becomes a device sparse tensor over device parts, and a kernel's in-place change to a
// sparse argument is written back to the device tensor. An op the CPU has no sparse kernel for
// fails as on a GPU without one. Compiled through emulated_device.cpp.
#pragma once

#include "fallback.h"

#include <ATen/SparseCsrTensorImpl.h>
#include <ATen/SparseTensorImpl.h>

namespace anyaccel {
namespace emulated {
namespace {

bool is_sparse_compressed_layout(c10::Layout layout) {
  return layout == c10::kSparseCsr || layout == c10::kSparseCsc || layout == c10::kSparseBsr ||
         layout == c10::kSparseBsc;
}

at::SparseTensorImpl* coo_impl(const at::Tensor& tensor) {
  return static_cast<at::SparseTensorImpl*>(tensor.unsafeGetTensorImpl());
}

at::SparseCsrTensorImpl* compressed_impl(const at::Tensor& tensor) {
  return static_cast<at::SparseCsrTensorImpl*>(tensor.unsafeGetTensorImpl());
}

// The parts of one sparse tensor, in a fixed order: COO (indices, values); compressed
// (compressed indices, plain indices, values).
std::vector<at::Tensor> sparse_parts(const at::Tensor& tensor) {
  if (tensor.layout() == c10::kSparse) return {coo_impl(tensor)->indices(), coo_impl(tensor)->values()};
  TORCH_CHECK(is_sparse_compressed_layout(tensor.layout()), "the emulated ", backend_name(),
              " device holds strided and sparse (COO, CSR, CSC, BSR, BSC) tensors, got layout ",
              tensor.layout());
  at::SparseCsrTensorImpl* impl = compressed_impl(tensor);
  return {impl->compressed_indices(), impl->plain_indices(), impl->values()};
}

// A sparse tensor of `like`'s layout, dtype and shape on `device`, over `parts` (on `device`).
at::Tensor sparse_over(const at::Tensor& like, const std::vector<at::Tensor>& parts, c10::Device device) {
  if (like.layout() == c10::kSparse) {
    const c10::DispatchKey key = device.is_cpu() ? c10::DispatchKey::SparseCPU : c10::DispatchKey::SparsePrivateUse1;
    at::Tensor made = at::detail::make_tensor<at::SparseTensorImpl>(c10::DispatchKeySet(key), like.dtype());
    at::SparseTensorImpl* impl = coo_impl(made);
    impl->raw_resize_(coo_impl(like)->sparse_dim(), coo_impl(like)->dense_dim(), like.sizes());
    impl->set_indices_and_values_unsafe(parts[0], parts[1]);
    impl->set_coalesced(coo_impl(like)->coalesced());
    return made;
  }
  const c10::DispatchKey key =
      device.is_cpu() ? c10::DispatchKey::SparseCsrCPU : c10::DispatchKey::SparseCsrPrivateUse1;
  at::Tensor made = at::detail::make_tensor<at::SparseCsrTensorImpl>(
      c10::DispatchKeySet(key), device, like.layout(), like.dtype());
  compressed_impl(made)->set_member_tensors(parts[0], parts[1], parts[2], like.sizes());
  return made;
}

// Whether `host` (a CPU twin after the kernel) differs from the parts and shape it was made with.
bool sparse_changed(const at::Tensor& host, const std::vector<at::Tensor>& given,
                    const at::Tensor& device) {
  const std::vector<at::Tensor> now = sparse_parts(host);
  for (size_t i = 0; i < now.size(); ++i) {
    if (now[i].unsafeGetTensorImpl() != given[i].unsafeGetTensorImpl()) return true;
  }
  if (host.sizes() != device.sizes() || host.layout() != device.layout()) return true;
  if (host.layout() != c10::kSparse) return false;
  return coo_impl(host)->sparse_dim() != coo_impl(device)->sparse_dim() ||
         coo_impl(host)->coalesced() != coo_impl(device)->coalesced();
}

// The device sparse tensors of one call and their CPU twins.
class SparseAliases {
 public:
  explicit SparseAliases(Aliases& dense) : dense_(dense) {}

  at::Tensor host_of(const at::Tensor& device) {
    std::vector<at::Tensor> parts;
    for (const at::Tensor& part : sparse_parts(device)) parts.push_back(dense_.host_of(part));
    at::Tensor host = sparse_over(device, parts, c10::Device(c10::DeviceType::CPU));
    twins_.push_back({device, host, std::move(parts)});
    return host;
  }

  // After the kernel: sparse arguments it changed in place take their twin's new parts and shape.
  void write_back(DeviceIndex index, std::unordered_map<c10::StorageImpl*, c10::Storage>& adopted) {
    for (Twin& twin : twins_) {
      if (!sparse_changed(twin.host, twin.given, twin.device)) continue;
      std::vector<at::Tensor> parts = device_parts(twin.host, index, adopted);
      if (twin.device.layout() == c10::kSparse) {
        at::SparseTensorImpl* impl = coo_impl(twin.device);
        impl->raw_resize_(coo_impl(twin.host)->sparse_dim(), coo_impl(twin.host)->dense_dim(),
                          twin.host.sizes());
        impl->set_indices_and_values_unsafe(parts[0], parts[1]);
        impl->set_coalesced(coo_impl(twin.host)->coalesced());
      } else {
        compressed_impl(twin.device)->set_layout(twin.host.layout());
        compressed_impl(twin.device)->set_member_tensors(parts[0], parts[1], parts[2], twin.host.sizes());
      }
    }
  }

  // The device tensor for one CPU sparse result: an argument's own tensor, or a new one.
  at::Tensor device_of(const at::Tensor& result, DeviceIndex index,
                       std::unordered_map<c10::StorageImpl*, c10::Storage>& adopted) {
    for (const Twin& twin : twins_) {
      if (twin.host.unsafeGetTensorImpl() == result.unsafeGetTensorImpl()) return twin.device;
    }
    return sparse_over(result, device_parts(result, index, adopted), c10::Device(kDevice, index));
  }

 private:
  struct Twin {
    at::Tensor device;
    at::Tensor host;
    std::vector<at::Tensor> given;  // the host parts the twin was made with
  };

  std::vector<at::Tensor> device_parts(const at::Tensor& host, DeviceIndex index,
                                       std::unordered_map<c10::StorageImpl*, c10::Storage>& adopted) {
    const std::vector<at::Tensor> parts = sparse_parts(host);
    std::unordered_map<c10::StorageImpl*, int64_t> uses;
    for (const at::Tensor& part : parts) uses[part.storage().unsafeGetStorageImpl()] += 1;
    std::vector<at::Tensor> devices;
    for (const at::Tensor& part : parts) devices.push_back(dense_.device_of(part, index, adopted, uses));
    return devices;
  }

  Aliases& dense_;
  std::vector<Twin> twins_;
};

at::Tensor sparse_device_of(Aliases& aliases, const at::Tensor& result, DeviceIndex index,
                            std::unordered_map<c10::StorageImpl*, c10::Storage>& adopted) {
  SparseAliases sparse(aliases);
  return sparse.device_of(result, index, adopted);
}

// The device of a sparse call; a copy_ may join the host and the device, other ops may not.
DeviceIndex sparse_call_device(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args) {
  if (op.schema().name() == "aten::copy_") {
    for (const c10::IValue& arg : args) {
      if (arg.isTensor() && is_device_tensor(arg.toTensor())) return arg.toTensor().device().index();
    }
  }
  const std::optional<DeviceIndex> found = call_device(op, args);
  return found.value_or(t_current_device);
}

// Every op on a device sparse tensor (or making one) without a kernel of its own.
void sparse_fallback(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  check_cpu_kernel_allowed(op);
  const c10::DispatchKey host_key =
      c10::toFunctionalityKey(keys.highestPriorityTypeId()) == c10::DispatchKey::SparseCsr
          ? c10::DispatchKey::SparseCsrCPU
          : c10::DispatchKey::SparseCPU;
  TORCH_CHECK_NOT_IMPLEMENTED(
      op.hasComputedKernelForDispatchKey(host_key), "Could not run '", op.schema().name(),
      "' with arguments from the '", keys.highestPriorityTypeId(), "' backend: the emulated ",
      backend_name(), " device runs sparse ops on the CPU's sparse kernels, and the CPU has none "
      "for this op (", host_key, ")");
  const c10::FunctionSchema& schema = op.schema();
  const size_t argument_count = schema.arguments().size();
  const size_t first = stack->size() - argument_count;
  const DeviceIndex index =
      sparse_call_device(op, c10::ArrayRef<c10::IValue>(stack->data() + first, argument_count));
  const CurrentDeviceScope on_device(index);

  Aliases aliases;
  SparseAliases sparse(aliases);
  auto host = [&](const at::Tensor& tensor) -> at::Tensor {
    if (!is_device_tensor(tensor)) return tensor;
    return tensor.layout() == c10::kStrided ? aliases.host_of(tensor) : sparse.host_of(tensor);
  };
  for (size_t i = 0; i < argument_count; ++i) {
    c10::IValue& arg = (*stack)[first + i];
    if (arg.isTensor()) {
      arg = host(arg.toTensor());
    } else if (arg.isTensorList()) {
      c10::List<at::Tensor> hosts;
      for (const at::Tensor& tensor : arg.toTensorList()) hosts.push_back(host(tensor));
      arg = std::move(hosts);
    } else if (arg.isDevice() && arg.toDevice().type() == kDevice) {
      arg = c10::Device(c10::DeviceType::CPU);
    } else if (arg.isGenerator()) {
      TORCH_CHECK(false, "the emulated ", backend_name(), " device runs no seeded sparse op (",
                  schema.operator_name(), ")");
    }
  }

  op.redispatchBoxed(c10::DispatchKeySet(host_key), stack);
  aliases.write_back(index);
  std::unordered_map<c10::StorageImpl*, c10::Storage> adopted;
  sparse.write_back(index, adopted);

  const size_t results = stack->size() - schema.returns().size();
  std::unordered_map<c10::StorageImpl*, int64_t> result_uses;
  auto count_use = [&](const at::Tensor& tensor) {
    if (tensor.defined() && tensor.device().is_cpu() && tensor.layout() == c10::kStrided) {
      result_uses[tensor.storage().unsafeGetStorageImpl()] += 1;
    }
  };
  for (size_t i = results; i < stack->size(); ++i) {
    const c10::IValue& value = (*stack)[i];
    if (value.isTensor()) {
      count_use(value.toTensor());
    } else if (value.isTensorList()) {
      for (const at::Tensor& tensor : value.toTensorList()) count_use(tensor);
    }
  }
  auto device = [&](const at::Tensor& tensor) -> at::Tensor {
    if (!tensor.defined() || !tensor.device().is_cpu()) return tensor;
    if (tensor.layout() == c10::kStrided) return aliases.device_of(tensor, index, adopted, result_uses);
    return sparse.device_of(tensor, index, adopted);
  };
  for (size_t i = results; i < stack->size(); ++i) {
    c10::IValue& value = (*stack)[i];
    if (value.isTensor()) {
      value = device(value.toTensor());
    } else if (value.isTensorList()) {
      c10::List<at::Tensor> devices;
      for (const at::Tensor& tensor : value.toTensorList()) devices.push_back(device(tensor));
      value = std::move(devices);
    }
  }
}

// Ops with a composite kernel and a CPU sparse kernel: the CPU's sparse kernel instead (a
// composite would run the dense path on a sparse tensor), as route_to_cpu_kernels does for dense.
void route_sparse_to_cpu_kernels() {
  static std::unique_ptr<torch::Library> coo;
  static std::unique_ptr<torch::Library> compressed;
  c10::Dispatcher& dispatcher = c10::Dispatcher::singleton();
  coo = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", c10::DispatchKey::SparsePrivateUse1,
                                         __FILE__, __LINE__);
  compressed = std::make_unique<torch::Library>(torch::Library::IMPL, "aten",
                                                c10::DispatchKey::SparseCsrPrivateUse1, __FILE__, __LINE__);
  const std::pair<c10::DispatchKey, torch::Library*> routes[] = {
      {c10::DispatchKey::SparseCPU, coo.get()}, {c10::DispatchKey::SparseCsrCPU, compressed.get()}};
  for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) continue;
    const std::optional<c10::OperatorHandle> op = dispatcher.findOp(name);
    if (!op.has_value() ||
        !(op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional) ||
          op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd))) {
      continue;
    }
    const std::string full = name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
    for (const auto& [host_key, library] : routes) {
      if (op->hasKernelForDispatchKey(host_key)) {
        library->impl(full.c_str(), torch::CppFunction::makeFromBoxedFunction<&sparse_fallback>());
      }
    }
  }
}

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&sparse_fallback>());
}

TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&sparse_fallback>());
}

}  // namespace
}  // namespace emulated
}  // namespace anyaccel
