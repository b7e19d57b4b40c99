// The device guard: the current device (per thread, as CUDA's), streams and events; their
// synchronizations land the copies deferred_copies.h queued. Compiled through emulated_device.cpp.
#pragma once

#include "deferred_copies.h"
#include "devices.h"
#include "stream_clocks.h"

namespace anyaccel {
namespace emulated {
namespace {

std::atomic<int64_t> g_next_stream{1};
thread_local std::unordered_map<DeviceIndex, c10::StreamId> t_current_stream;

c10::StreamId current_stream_of(DeviceIndex index) {
  auto found = t_current_stream.find(index);
  return found == t_current_stream.end() ? 0 : found->second;
}

struct DeviceEvent {
  DeviceIndex device = -1;
  bool recorded = false;
  bool timing = false;
  std::chrono::steady_clock::time_point when;
  c10::StreamId stream = 0;  // where it was recorded, and after which queued work
  uint64_t position = 0;
  StreamClock clock;  // its stream's clock at record (with the stream sanitizer on)
};

// The host has waited for `event`: the copies queued before it on its stream land.
void synchronize_event(void* event) {
  auto* waited = static_cast<DeviceEvent*>(event);
  if (waited != nullptr && waited->recorded) {
    synchronize_stream(waited->device, waited->stream, waited->position);
    host_waits(waited->clock);
  }
}

struct DeviceGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kDevice; }
  c10::Device exchangeDevice(c10::Device device) const override {
    const c10::Device previous = getDevice();
    setDevice(device);
    return previous;
  }
  c10::Device getDevice() const override { return c10::Device(kDevice, t_current_device); }
  void setDevice(c10::Device device) const override {
    TORCH_CHECK(device.type() == kDevice, "expected a ", backend_name(), " device, got ", device);
    if (!device.has_index()) return;
    check_index(device.index());
    t_current_device = device.index();
  }
  void uncheckedSetDevice(c10::Device device) const noexcept override {
    if (device.has_index()) t_current_device = device.index();
  }
  c10::Stream getStream(c10::Device device) const override {
    const DeviceIndex index = device.has_index() ? device.index() : t_current_device;
    auto found = t_current_stream.find(index);
    const c10::StreamId id = found == t_current_stream.end() ? 0 : found->second;
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kDevice, index), id);
  }
  c10::Stream getDefaultStream(c10::Device device) const override {
    const DeviceIndex index = device.has_index() ? device.index() : t_current_device;
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kDevice, index), 0);
  }
  c10::Stream getStreamFromGlobalPool(c10::Device device, bool /*high_priority*/) const override {
    return getNewStream(device, 0);
  }
  c10::Stream getNewStream(c10::Device device, int /*priority*/) const override {
    const DeviceIndex index = device.has_index() ? device.index() : t_current_device;
    check_index(index);
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kDevice, index), g_next_stream++);
  }
  c10::Stream exchangeStream(c10::Stream stream) const override {
    const c10::Stream previous = getStream(stream.device());
    t_current_stream[stream.device_index()] = stream.id();
    return previous;
  }
  void destroyEvent(void* event, const DeviceIndex /*index*/) const noexcept override {
    delete static_cast<DeviceEvent*>(event);
  }
  void record(void** event, const c10::Stream& stream, const DeviceIndex index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(index == -1 || index == stream.device_index(), "Event device index ", index,
                " does not match recording stream's device index ", stream.device_index(), ".");
    if (*event == nullptr) {
      auto* created = new DeviceEvent();
      created->timing = flag == c10::EventFlag::BACKEND_DEFAULT;
      *event = created;
    }
    auto* recorded = static_cast<DeviceEvent*>(*event);
    recorded->device = stream.device_index();
    recorded->recorded = true;
    recorded->when = std::chrono::steady_clock::now();  // work before it has finished: synchronous
    recorded->stream = stream.id();
    recorded->position = stream_position();
    recorded->clock = clock_of(stream.device_index(), stream.id());
  }
  void block(void* event, const c10::Stream& stream) const override {
    auto* waited = static_cast<DeviceEvent*>(event);
    if (waited == nullptr || !waited->recorded) return;
    stream_waits(stream.device_index(), stream.id(), waited->clock);
    wait_on(stream.device_index(), stream.id(), waited->device, waited->stream, waited->position);
  }
  // Done, as all work is; the host may read what the event covers, so its copies land.
  bool queryEvent(void* event) const override {
    synchronize_event(event);
    return true;
  }
  DeviceIndex deviceCount() const noexcept override {
    return static_cast<DeviceIndex>(g_device_count.load());
  }
  bool queryStream(const c10::Stream& stream) const override {
    synchronizeStream(stream);
    return true;
  }
  void synchronizeStream(const c10::Stream& stream) const override {
    synchronize_stream(stream.device_index(), stream.id());
    host_waits(clock_of(stream.device_index(), stream.id()));
  }
  void synchronizeEvent(void* event) const override { synchronize_event(event); }
  void recordDataPtrOnStream(const c10::DataPtr& /*data*/, const c10::Stream& /*stream*/) const override {}
  void synchronizeDevice(const DeviceIndex index) const override {
    check_index(index);
    synchronize_device(index);
    host_waits_for_device(index);
  }
  // Every dtype: its memory is the host's and its kernels the CPU's, so each dtype the CPU
  // allocates and converts, the device does (torch.accelerator.get_device_capability).
  c10::DeviceCapability getDeviceCapability(c10::Device device) const override {
    check_index(device.has_index() ? device.index() : t_current_device);
    return c10::DeviceCapability();
  }
  double elapsedTime(void* start, void* end, const DeviceIndex /*index*/) const override {
    auto* first = static_cast<DeviceEvent*>(start);
    auto* second = static_cast<DeviceEvent*>(end);
    TORCH_CHECK(first != nullptr && second != nullptr && first->recorded && second->recorded,
                "Both events must be recorded before calculating elapsed time.");
    TORCH_CHECK(first->timing && second->timing,
                "Both events must be created with argument 'enable_timing=True'.");
    return std::chrono::duration<double, std::milli>(second->when - first->when).count();
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, DeviceGuardImpl);

}  // namespace
}  // namespace emulated
}  // namespace anyaccel
