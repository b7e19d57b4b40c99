// DDP's runtime statistics on the emulated device: a c10d::Timer for PrivateUse1.
//
// DDP's Reducer asks torch's TimerRegistry for a timer of its device type; torch registers
// CPU's and CUDA's only, so on any other device DDP warns "Time stats are currently only
// collected for CPU and CUDA devices" on every rank and reports no forward/backward times.
// The emulated device runs each op on the host before the call returns, so host timestamps
// (the CPU timer's way) are the device's times. Registered once, when the emulated device's
// collective backend module loads, and never over a timer a runtime registered first.
#pragma once

#include <c10/core/DeviceType.h>
#include <torch/csrc/distributed/c10d/reducer_timer.hpp>

#include <memory>
#include <optional>

namespace anyaccel {

class EmulatedDeviceTimer : public c10d::Timer {
 public:
  explicit EmulatedDeviceTimer(c10::Device /*device*/) {}

  std::optional<int64_t> measureDifference(Event start, Event end) override {
    const int64_t began = getTimeRef(start);
    const int64_t ended = getTimeRef(end);
    // Not recorded this iteration (DDP without a sync), or recorded out of order: no figure.
    if (began == c10d::kUnsetTime || ended == c10d::kUnsetTime || ended < began) {
      return std::nullopt;
    }
    return ended - began;
  }
};

// Registers the timer for PrivateUse1 unless one is there; true when this call registered it.
inline bool register_ddp_timer() {
  auto* registry = c10d::TimerRegistry();
  if (registry->Has(c10::DeviceType::PrivateUse1)) {
    return false;
  }
  registry->Register(c10::DeviceType::PrivateUse1, [](c10::Device device) {
    return std::unique_ptr<c10d::Timer>(new EmulatedDeviceTimer(device));
  });
  return true;
}

}  // namespace anyaccel
