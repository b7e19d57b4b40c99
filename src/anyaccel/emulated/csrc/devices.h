// The emulated devices: how many this process has, the calling thread's current one, and the
// index checks every part shares. Compiled through emulated_device.cpp.
#pragma once

#include <torch/csrc/utils/pybind.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/EmptyTensor.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/GeneratorImpl.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/csrc/Generator.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

// Written against the interfaces of the oldest torch the Python side accepts (MINIMUM_TORCH in
// anyaccel/emulated/state.py). Where a later release changes one, test
// ANYACCEL_TORCH_AT_LEAST(major, minor) around it.
#if !defined(ANYACCEL_TORCH_MAJOR) || !defined(ANYACCEL_TORCH_MINOR)
#error "the builder passes ANYACCEL_TORCH_MAJOR and ANYACCEL_TORCH_MINOR"
#endif
#if !defined(ANYACCEL_EMULATED_MAX_DEVICES)
#error "the builder passes ANYACCEL_EMULATED_MAX_DEVICES"
#endif
#define ANYACCEL_TORCH_AT_LEAST(major, minor) \
  (ANYACCEL_TORCH_MAJOR > (major) ||          \
   (ANYACCEL_TORCH_MAJOR == (major) && ANYACCEL_TORCH_MINOR >= (minor)))

namespace anyaccel {
namespace emulated {
namespace {

using c10::DeviceIndex;
constexpr c10::DeviceType kDevice = c10::DeviceType::PrivateUse1;
// The device table's size: MAX_DEVICES in anyaccel/emulated/spec.py, passed by the builder.
constexpr int kMaxDevices = ANYACCEL_EMULATED_MAX_DEVICES;

std::atomic<int> g_device_count{0};
thread_local DeviceIndex t_current_device = 0;

std::string backend_name() { return c10::get_privateuse1_backend(); }

void check_index(int64_t index) {
  const int count = g_device_count.load();
  TORCH_CHECK(count > 0, "the emulated device is not configured: call "
              "anyaccel.testing.emulated.install() first");
  TORCH_CHECK(index >= 0 && index < count, "Invalid device index ", index, " for ",
              backend_name(), ": this process has ", count,
              " emulated devices (valid: 0..", count - 1, ")");
}

// The calling thread's current device set to a checked `index` for one call, put back after
// (the CPU-kernel fallbacks, dense and sparse, run each op on its tensors' device).
class CurrentDeviceScope {
 public:
  explicit CurrentDeviceScope(DeviceIndex index) : previous_(t_current_device) {
    check_index(index);
    t_current_device = index;
  }
  ~CurrentDeviceScope() { t_current_device = previous_; }
  CurrentDeviceScope(const CurrentDeviceScope&) = delete;
  CurrentDeviceScope& operator=(const CurrentDeviceScope&) = delete;

 private:
  DeviceIndex previous_;
};

DeviceIndex resolve_index(std::optional<c10::Device> device) {
  if (device.has_value() && device->has_index()) {
    check_index(device->index());
    return device->index();
  }
  return t_current_device;
}

}  // namespace
}  // namespace emulated
}  // namespace anyaccel
