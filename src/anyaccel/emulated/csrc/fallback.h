// The boxed fallback: any ATen op on the CPU kernels over aliases of the device memory, and the
// ops with a composite kernel routed to it so that they run the CPU's own kernels.
// Compiled through emulated_device.cpp.
#pragma once

#include "cpu_kernel_ops.h"
#include "generator.h"
#include "host_alias.h"

namespace anyaccel {
namespace emulated {
namespace {

class Aliases;
// A CPU sparse result as a device sparse tensor over device parts (defined in sparse.h).
at::Tensor sparse_device_of(Aliases& aliases, const at::Tensor& result, DeviceIndex index,
                            std::unordered_map<c10::StorageImpl*, c10::Storage>& adopted);

struct AliasedStorage {
  c10::Storage device;
  c10::Storage host;
  const void* data;
  size_t bytes;
};

struct AliasedTensor {
  at::Tensor device;
  at::Tensor host;
};

// The aliases made for one call: each device storage gets one host storage, so aliasing
// between arguments is kept.
class Aliases {
 public:
  at::Tensor host_of(const at::Tensor& tensor) {
    check_strided(tensor);
    c10::StorageImpl* key = tensor.storage().unsafeGetStorageImpl();
    auto found = by_device_.find(key);
    size_t slot;
    if (found == by_device_.end()) {
      slot = storages_.size();
      storages_.push_back({tensor.storage(), host_storage_of(tensor.storage()),
                           tensor.storage().data_ptr().get(), tensor.storage().nbytes()});
      by_device_.emplace(key, slot);
      by_host_.emplace(storages_.back().host.unsafeGetStorageImpl(), slot);
    } else {
      slot = found->second;
    }
    at::Tensor host = with_geometry(storages_[slot].host, c10::DispatchKey::CPU, tensor);
    tensors_.push_back({tensor, host});
    return host;
  }

  // After the CPU kernel: storages it reallocated (a resizing out=) become device memory again,
  // and inputs whose geometry it changed take the new geometry.
  void write_back(DeviceIndex index) {
    for (AliasedStorage& aliased : storages_) {
      c10::StorageImpl* host = aliased.host.unsafeGetStorageImpl();
      if (host->data_ptr().get() == aliased.data && host->nbytes() == aliased.bytes) continue;
      const size_t bytes = host->nbytes();
      at::DataPtr moved = host->set_data_ptr(at::DataPtr());
      DeviceIndex owner = aliased.device.device().index();
      aliased.device.unsafeGetStorageImpl()->set_data_ptr_noswap(
          adopt(owner >= 0 ? owner : index, std::move(moved), bytes));
      aliased.device.unsafeGetStorageImpl()->set_nbytes(bytes);
      // the host storage now aliases the new device memory, for results that point at it
      host->set_data_ptr_noswap(host_data_of(aliased.device));
    }
    for (AliasedTensor& aliased : tensors_) {
      const at::Tensor& host = aliased.host;
      c10::TensorImpl* device = aliased.device.unsafeGetTensorImpl();
      if (host.unsafeGetTensorImpl()->storage().unsafeGetStorageImpl() !=
          storages_[by_device_.at(device->storage().unsafeGetStorageImpl())].host.unsafeGetStorageImpl()) {
        continue;  // the kernel pointed it at other memory: left as the input was
      }
      if (host.sizes() != device->sizes() || host.strides() != device->strides() ||
          host.storage_offset() != device->storage_offset()) {
        device->set_sizes_and_strides(host.sizes(), host.strides(), host.storage_offset());
      }
    }
  }

  // The device tensor for one CPU result.
  at::Tensor device_of(const at::Tensor& result, DeviceIndex index,
                       std::unordered_map<c10::StorageImpl*, c10::Storage>& adopted,
                       const std::unordered_map<c10::StorageImpl*, int64_t>& result_uses) {
    if (!result.defined() || !result.device().is_cpu()) return result;
    for (const AliasedTensor& aliased : tensors_) {
      if (aliased.host.unsafeGetTensorImpl() == result.unsafeGetTensorImpl()) {
        return aliased.device;  // in place, or out=: the input itself
      }
    }
    if (result.layout() != c10::kStrided) return sparse_device_of(*this, result, index, adopted);
    c10::StorageImpl* storage = result.storage().unsafeGetStorageImpl();
    auto aliased = by_host_.find(storage);
    if (aliased != by_host_.end()) {  // a view of an input
      return with_geometry(storages_[aliased->second].device, c10::DispatchKey::PrivateUse1, result);
    }
    auto done = adopted.find(storage);
    if (done == adopted.end()) {
      done = adopted.emplace(storage, adopt_storage(result, index, result_uses)).first;
    }
    return with_geometry(done->second, c10::DispatchKey::PrivateUse1, result);
  }

 private:
  // A new CPU result's memory becomes device memory: taken over when only the results hold it,
  // copied otherwise.
  static c10::Storage adopt_storage(const at::Tensor& result, DeviceIndex index,
                                    const std::unordered_map<c10::StorageImpl*, int64_t>& result_uses) {
    c10::StorageImpl* storage = result.storage().unsafeGetStorageImpl();
    const size_t bytes = storage->nbytes();
    auto uses = result_uses.find(storage);
    const int64_t held_by_results = uses == result_uses.end() ? 0 : uses->second;
    at::DataPtr data;
    if (static_cast<int64_t>(c10::raw::intrusive_ptr::use_count(storage)) <= held_by_results) {
      data = adopt(index, storage->set_data_ptr(at::DataPtr()), bytes);
      storage->set_nbytes(0);
    } else {
      data = copy_to_device(index, storage->data(), bytes);
    }
    return c10::Storage(c10::make_intrusive<c10::StorageImpl>(
        c10::StorageImpl::use_byte_size_t(), bytes, std::move(data), &g_allocators[index],
        /*resizable=*/true));
  }

  std::vector<AliasedStorage> storages_;
  std::vector<AliasedTensor> tensors_;
  std::unordered_map<c10::StorageImpl*, size_t> by_device_;
  std::unordered_map<c10::StorageImpl*, size_t> by_host_;
};

[[noreturn]] void mixed_devices(const c10::OperatorHandle& op, const c10::Device& first,
                                const c10::Device& second) {
  TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two "
              "devices, ", first, " and ", second, "! (in ", op.schema().operator_name(),
              ", run on the emulated device)");
}

// Device of the call, checking that its tensors agree (0-dim CPU tensors may join, as on CUDA).
std::optional<DeviceIndex> call_device(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args) {
  std::optional<c10::Device> device;
  auto note = [&](const at::Tensor& tensor, bool cpu_allowed) {
    if (!tensor.defined()) return;
    const c10::Device here = tensor.device();
    if (here.type() == kDevice) {
      if (!device.has_value() || device->type() != kDevice) {
        if (device.has_value()) mixed_devices(op, here, *device);
        device = here;
      } else if (device->index() != here.index()) {
        mixed_devices(op, *device, here);
      }
    } else if (here.is_cpu()) {
      if (cpu_allowed || tensor.dim() == 0) return;
      if (device.has_value() && device->type() == kDevice) mixed_devices(op, *device, here);
      if (!device.has_value()) device = here;
    }
  };
  for (const c10::IValue& arg : args) {
    if (arg.isTensor()) {
      note(arg.toTensor(), false);
    } else if (arg.isTensorList()) {
      for (const at::Tensor& tensor : arg.toTensorList()) note(tensor, false);
    } else if (arg.isList()) {
      for (const c10::IValue& item : arg.toListRef()) {
        if (item.isTensor()) note(item.toTensor(), true);  // Tensor?[] (indices may stay on the host)
      }
    } else if (arg.isDevice() && arg.toDevice().type() == kDevice && !device.has_value()) {
      device = c10::Device(kDevice, resolve_index(arg.toDevice()));
    }
  }
  if (device.has_value() && device->type() == kDevice) return device->index();
  return std::nullopt;
}

bool is_generator_argument(const c10::Argument& argument) {
  const c10::TypePtr& type = argument.type();
  if (type->kind() == c10::TypeKind::GeneratorType) return true;
  if (auto optional = type->cast<c10::OptionalType>()) {
    return optional->getElementType()->kind() == c10::TypeKind::GeneratorType;
  }
  return false;
}

// Draws a seeded op makes from the CPU default generator come from the device's instead.
class DefaultGeneratorSwap {
 public:
  explicit DefaultGeneratorSwap(const at::Generator& device_host)
      : device_host_(device_host), cpu_(at::detail::getDefaultCPUGenerator()) {
    saved_ = cpu_.get_state();
    cpu_.set_state(device_host_.get_state());
  }
  ~DefaultGeneratorSwap() {
    device_host_.set_state(cpu_.get_state());
    cpu_.set_state(saved_);
  }

 private:
  at::Generator device_host_;
  at::Generator cpu_;
  at::Tensor saved_;
};

void device_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  check_cpu_kernel_allowed(op);
  const c10::FunctionSchema& schema = op.schema();
  const size_t argument_count = schema.arguments().size();
  const size_t first = stack->size() - argument_count;
  const std::optional<DeviceIndex> found =
      call_device(op, c10::ArrayRef<c10::IValue>(stack->data() + first, argument_count));
  const DeviceIndex index = found.value_or(t_current_device);
  const CurrentDeviceScope on_device(index);

  Aliases aliases;
  bool generator_given = false;
  for (size_t i = 0; i < argument_count; ++i) {
    c10::IValue& arg = (*stack)[first + i];
    if (arg.isTensor()) {
      const at::Tensor& tensor = arg.toTensor();
      if (is_device_tensor(tensor)) arg = aliases.host_of(tensor);
    } else if (arg.isTensorList()) {
      c10::List<at::Tensor> hosts;
      for (const at::Tensor& tensor : arg.toTensorList()) {
        hosts.push_back(is_device_tensor(tensor) ? aliases.host_of(tensor) : tensor);
      }
      arg = std::move(hosts);
    } else if (arg.isList() && schema.arguments()[i].type()->kind() == c10::TypeKind::ListType) {
      const auto element = schema.arguments()[i].type()->castRaw<c10::ListType>()->getElementType();
      if (element->kind() == c10::TypeKind::OptionalType &&
          element->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::TensorType) {
        c10::List<std::optional<at::Tensor>> hosts;
        for (const c10::IValue& item : arg.toListRef()) {
          if (item.isTensor() && is_device_tensor(item.toTensor())) {
            hosts.push_back(aliases.host_of(item.toTensor()));
          } else if (item.isTensor()) {
            hosts.push_back(item.toTensor());
          } else {
            hosts.push_back(std::nullopt);
          }
        }
        arg = std::move(hosts);
      }
    } else if (arg.isDevice() && arg.toDevice().type() == kDevice) {
      arg = c10::Device(c10::DeviceType::CPU);
    } else if (is_generator_argument(schema.arguments()[i])) {
      if (arg.isNone()) {
        arg = host_generator(default_generator(index));
        generator_given = true;
      } else if (arg.isGenerator() && arg.toGenerator().device().type() == kDevice) {
        arg = host_generator(arg.toGenerator());
        generator_given = true;
      } else if (arg.isGenerator()) {  // a CPU generator for device tensors: refused, as on CUDA
        TORCH_CHECK(false, "Expected a '", backend_name(), "' device type for generator but found '",
                    c10::DeviceTypeName(arg.toGenerator().device().type(), /*lower_case=*/true),
                    "'");
      }
    }
  }

  {
    std::optional<DefaultGeneratorSwap> swap;
    if (!generator_given && op.hasTag(at::Tag::nondeterministic_seeded)) {
      swap.emplace(host_generator(default_generator(index)));
    }
    try {
      op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
    } catch (const c10::Error& error) {
      // The CPU kernel's result is device memory: the host allocator's refusal is the device's
      // out-of-memory error. torch's CPU allocator says so only in its message.
      const std::string what = error.what_without_backtrace();
      if (dynamic_cast<const c10::OutOfMemoryError*>(&error) != nullptr ||
          what.find("DefaultCPUAllocator: can't allocate memory") == std::string::npos) {
        throw;
      }
      const std::string::size_type asked = what.find("you tried to allocate ");
      int64_t bytes = 0;
      if (asked != std::string::npos) {
        bytes = std::atoll(what.c_str() + asked + std::strlen("you tried to allocate "));
      }
      host_out_of_memory(index, static_cast<size_t>(bytes), error);
    }
  }
  aliases.write_back(index);

  const size_t return_count = schema.returns().size();
  const size_t results = stack->size() - return_count;
  std::unordered_map<c10::StorageImpl*, int64_t> result_uses;
  auto count_use = [&](const at::Tensor& tensor) {
    if (tensor.defined() && tensor.device().is_cpu() && tensor.has_storage()) {
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
  std::unordered_map<c10::StorageImpl*, c10::Storage> adopted;
  for (size_t i = results; i < stack->size(); ++i) {
    c10::IValue& value = (*stack)[i];
    if (value.isTensor()) {
      const at::Tensor result = value.toTensor();
      value = aliases.device_of(result, index, adopted, result_uses);
    } else if (value.isTensorList()) {
      c10::List<at::Tensor> devices;
      for (const at::Tensor& tensor : value.toTensorList()) {
        devices.push_back(aliases.device_of(tensor, index, adopted, result_uses));
      }
      value = std::move(devices);
    }
  }
}

// Ops with a composite kernel: the CPU's own kernels instead, as on the CPU
// ------------------------------------------------------------------------------------------

// An op with a CPU kernel and a composite one reaches a backend without its own kernels through
// the composite: structured ops make the output from the meta function and call the out=
// kernel (some CPU out= kernels then resize it, warning that this is deprecated), others run a
// decomposition (native_layer_norm's rounds differently). Routing them to the fallback runs
// exactly the CPU's kernels, so results are the CPU's bit for bit.
void route_to_cpu_kernels() {
  // Ops whose composite kernel is the right one for a device (they make tensors with keys or
  // memory a CPU kernel would give the host).
  static const std::unordered_set<std::string> kKeepComposite = {
      "aten::_efficientzerotensor", "aten::_pin_memory", "aten::is_pinned", "aten::_to_copy",
      "aten::lift_fresh", "aten::empty_like", "aten::new_empty", "aten::new_empty_strided"};
  static std::unique_ptr<torch::Library> library;
  c10::Dispatcher& dispatcher = c10::Dispatcher::singleton();
  library = std::make_unique<torch::Library>(torch::Library::IMPL, "aten",
                                             c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) continue;
    const std::optional<c10::OperatorHandle> op = dispatcher.findOp(name);
    if (!op.has_value() || !op->hasKernelForDispatchKey(c10::DispatchKey::CPU) ||
        op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1) ||
        kKeepComposite.count(name.name) > 0 ||
        !(op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional) ||
          op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd))) {
      continue;
    }
    const std::string full = name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
    library->impl(full.c_str(), torch::CppFunction::makeFromBoxedFunction<&device_fallback>());
  }
}

}  // namespace
}  // namespace emulated
}  // namespace anyaccel
