// Generators: each device's wraps a CPU generator, which the CPU kernels draw from.
// Compiled through emulated_device.cpp.
#pragma once

#include "devices.h"

namespace anyaccel {
namespace emulated {
namespace {

struct DeviceGeneratorImpl final : public c10::GeneratorImpl {
  explicit DeviceGeneratorImpl(DeviceIndex index, at::Generator host = at::detail::createCPUGenerator())
      : c10::GeneratorImpl(c10::Device(kDevice, index), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        host_(std::move(host)) {}

  void set_current_seed(uint64_t seed) override { host_.set_current_seed(seed); }
  void set_offset(uint64_t offset) override { host_.set_offset(offset); }
  uint64_t get_offset() const override { return host_.get_offset(); }
  uint64_t current_seed() const override { return host_.current_seed(); }
  uint64_t seed() override { return host_.seed(); }
  void set_state(const c10::TensorImpl& state) override {
    host_.unsafeGetGeneratorImpl()->set_state(state);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    return host_.unsafeGetGeneratorImpl()->get_state();
  }
  static c10::DeviceType device_type() { return kDevice; }

  const at::Generator& host() const { return host_; }

 private:
  DeviceGeneratorImpl* clone_impl() const override {
    return new DeviceGeneratorImpl(device().index(), host_.clone());
  }
  at::Generator host_;
};

std::vector<at::Generator>& default_generators() {
  static std::vector<at::Generator> generators;
  return generators;
}

const at::Generator& default_generator(DeviceIndex index) {
  if (index < 0) index = t_current_device;
  check_index(index);
  return default_generators()[index];
}

// The CPU generator a device generator (or a device's default) draws from.
at::Generator host_generator(const at::Generator& generator) {
  auto* impl = dynamic_cast<DeviceGeneratorImpl*>(generator.unsafeGetGeneratorImpl());
  TORCH_CHECK(impl != nullptr, "expected a generator of the emulated device, got one on ",
              generator.device());
  return impl->host();
}

}  // namespace
}  // namespace emulated
}  // namespace anyaccel
