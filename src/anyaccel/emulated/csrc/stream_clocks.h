// Vector clocks of the device's streams, for the stream sanitizer
// (anyaccel/emulated/stream_sanitizer.py), in the model of torch.cuda._sanitizer: each stream
// counts the ops issued on it; an event carries its stream's clock; a wait (wait_event,
// wait_stream) merges the event's clock into the waiting stream's; the host learns a stream's
// clock when it synchronizes with it, and every op issued after carries what the host knows.
// Kept only while the sanitizer is on. Compiled through emulated_device.cpp.
#pragma once

#include "devices.h"

namespace anyaccel {
namespace emulated {
namespace {

using StreamClock = std::unordered_map<int64_t, int64_t>;  // stream key -> ops seen

std::atomic<bool> g_clocks_on{false};
std::mutex g_clocks_mutex;

int64_t stream_key(DeviceIndex device, c10::StreamId stream) {
  return stream * kMaxDevices + device;
}

struct Clocks {
  std::unordered_map<int64_t, StreamClock> streams;
  StreamClock host;
};

Clocks& clocks() {
  static auto* all = new Clocks();
  return *all;
}

void merge(StreamClock& into, const StreamClock& from) {
  for (const auto& [key, count] : from) {
    int64_t& mine = into[key];
    mine = std::max(mine, count);
  }
}

// An op issued on `stream`: its clock after the op (it knows what the host knew when issued).
StreamClock tick(DeviceIndex device, c10::StreamId stream) {
  std::lock_guard<std::mutex> lock(g_clocks_mutex);
  const int64_t key = stream_key(device, stream);
  StreamClock& clock = clocks().streams[key];
  merge(clock, clocks().host);
  clock[key] += 1;
  return clock;
}

StreamClock clock_of(DeviceIndex device, c10::StreamId stream) {
  if (!g_clocks_on.load()) return {};
  std::lock_guard<std::mutex> lock(g_clocks_mutex);
  return clocks().streams[stream_key(device, stream)];
}

void stream_waits(DeviceIndex device, c10::StreamId stream, const StreamClock& event_clock) {
  if (!g_clocks_on.load()) return;
  std::lock_guard<std::mutex> lock(g_clocks_mutex);
  merge(clocks().streams[stream_key(device, stream)], event_clock);
}

void host_waits(const StreamClock& clock) {
  if (!g_clocks_on.load()) return;
  std::lock_guard<std::mutex> lock(g_clocks_mutex);
  merge(clocks().host, clock);
}

void host_waits_for_device(DeviceIndex device) {
  if (!g_clocks_on.load()) return;
  std::lock_guard<std::mutex> lock(g_clocks_mutex);
  for (const auto& [key, clock] : clocks().streams) {
    if (key % kMaxDevices == device) merge(clocks().host, clock);
  }
}

void track_stream_clocks(bool on) {
  std::lock_guard<std::mutex> lock(g_clocks_mutex);
  clocks() = Clocks();
  g_clocks_on.store(on);
}

}  // namespace
}  // namespace emulated
}  // namespace anyaccel
