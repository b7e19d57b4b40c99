// The PrivateUse1 hooks: availability, generators, pinned memory, storage resizing.
// Compiled through emulated_device.cpp.
#pragma once

#include "allocator.h"
#include "generator.h"

namespace anyaccel {
namespace emulated {
namespace {

struct DeviceHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return g_device_count.load() > 0; }
  bool hasPrimaryContext(DeviceIndex /*index*/) const override { return true; }
  const at::Generator& getDefaultGenerator(DeviceIndex index) const override {
    return default_generator(index);
  }
  at::Generator getNewGenerator(DeviceIndex index) const override {
    if (index < 0) index = t_current_device;
    return at::make_generator<DeviceGeneratorImpl>(index);
  }
  at::Device getDeviceFromPtr(void* /*data*/) const override {
    return c10::Device(kDevice, t_current_device);
  }
  bool isPinnedPtr(const void* data) const override { return is_pinned_pointer(data); }
  at::Allocator* getPinnedMemoryAllocator() const override { return &g_pinned_allocator; }
  DeviceIndex deviceCount() const override { return static_cast<DeviceIndex>(g_device_count.load()); }
  void setCurrentDevice(DeviceIndex index) const override {
    check_index(index);
    t_current_device = index;
  }
  DeviceIndex getCurrentDevice() const override { return t_current_device; }
  DeviceIndex exchangeDevice(DeviceIndex index) const override {
    const DeviceIndex previous = t_current_device;
    if (index >= 0) setCurrentDevice(index);
    return previous;
  }
  DeviceIndex maybeExchangeDevice(DeviceIndex index) const override { return exchangeDevice(index); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t bytes) const override {
    resize_storage_bytes(storage.unsafeGetStorageImpl(), bytes);
  }
};

}  // namespace
}  // namespace emulated
}  // namespace anyaccel
