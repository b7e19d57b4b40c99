// Device-to-host copies the host sees only after a synchronization, as on a GPU.
//
// Every op of the emulated device completes at once, so a non_blocking copy from the device into
// pinned host memory would hold its values before the host synchronized, where a GPU's host reads
// stale memory. Such a copy is queued instead: the source's values are taken at enqueue (stream
// order), the destination is left untouched, and the copy lands at the stream's next
// synchronization point, as CUDA defines them: device, stream and event synchronize or query, a
// blocking copy between host and device (and .item()) on that stream, or a later copy that reads
// or writes the same host memory. A wait on an event (wait_event, wait_stream) carries the
// waited copies into the waiting stream's queue. Copies into pageable memory stay immediate:
// CUDA completes a device-to-pageable copy before the call returns. docs/emulated.md ("Reading
// before the device is done") lists what this catches and what not. Compiled through
// emulated_device.cpp.
#pragma once

#include "allocator.h"
#include "stream_clocks.h"

#include <deque>
#include <limits>

namespace anyaccel {
namespace emulated {
namespace {

// One queued entry of a stream: a copy into host memory, or a wait on another stream's work.
struct QueuedWork {
  uint64_t position = 0;         // its place among all queued work (a process-wide clock)
  DeviceIndex device = -1;
  c10::StreamId stream = 0;
  at::Tensor destination;        // pinned host tensor; undefined for a wait
  at::Tensor snapshot;           // the source's values when the copy was queued
  DeviceIndex waited_device = -1;
  c10::StreamId waited_stream = 0;
  uint64_t waited_position = 0;  // the waited stream's work up to here
};

// Past these, the oldest copy lands (a GPU's queue is bounded too, and drains on its own).
constexpr size_t kMaxQueued = 1024;
constexpr int64_t kMaxQueuedBytes = int64_t{1} << 30;
constexpr uint64_t kEverything = std::numeric_limits<uint64_t>::max();

std::mutex g_queue_mutex;
std::atomic<uint64_t> g_clock{0};
std::atomic<size_t> g_queued_count{0};  // read without the lock: the common path is an empty queue
int64_t g_queued_bytes = 0;

std::deque<QueuedWork>& queue() {
  static auto* work = new std::deque<QueuedWork>();  // never destroyed: no tensor dies at exit
  return *work;
}

// The stream a copy touching `index` runs on: the calling thread's current stream there.
c10::StreamId current_stream_of(DeviceIndex index);

bool is_pinned_tensor(const at::Tensor& tensor) {
  return tensor.defined() && tensor.device().is_cpu() && tensor.has_storage() &&
         tensor.storage().data() != nullptr && is_pinned_pointer(tensor.storage().data());
}

void land_locked(QueuedWork work);

// Land, in queue order, the entries `take` selects (the lock held).
template <typename Select>
void drain_locked(Select take) {
  for (;;) {
    auto& work = queue();
    auto found = std::find_if(work.begin(), work.end(), take);
    if (found == work.end()) return;
    QueuedWork taken = std::move(*found);
    work.erase(found);
    land_locked(std::move(taken));
  }
}

void drain_stream_locked(DeviceIndex device, c10::StreamId stream, uint64_t upto) {
  drain_locked([&](const QueuedWork& work) {
    return work.device == device && work.stream == stream && work.position <= upto;
  });
}

void land_locked(QueuedWork work) {
  g_queued_count.fetch_sub(1);
  if (!work.destination.defined()) {
    drain_stream_locked(work.waited_device, work.waited_stream, work.waited_position);
    return;
  }
  g_queued_bytes -= static_cast<int64_t>(work.snapshot.nbytes());
  // Below autograd, as the copy it finishes was: a leaf that requires grad, filled under
  // no_grad, must not fail at a sync outside it.
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  work.destination.copy_(work.snapshot);
}

bool nothing_queued() { return g_queued_count.load() == 0; }

// The host has synchronized with `stream` (up to `upto`): its copies land.
void synchronize_stream(DeviceIndex device, c10::StreamId stream, uint64_t upto = kEverything) {
  if (nothing_queued()) return;
  std::lock_guard<std::mutex> lock(g_queue_mutex);
  drain_stream_locked(device, stream, upto);
}

// The host has synchronized with every stream of `device`.
void synchronize_device(DeviceIndex device) {
  if (nothing_queued()) return;
  std::lock_guard<std::mutex> lock(g_queue_mutex);
  drain_locked([&](const QueuedWork& work) { return work.device == device; });
}

// A later copy reads or writes `host`'s memory: the copies queued into it land first.
void land_copies_into(const at::Tensor& host) {
  if (nothing_queued() || !is_pinned_tensor(host)) return;
  const c10::StorageImpl* storage = host.storage().unsafeGetStorageImpl();
  std::lock_guard<std::mutex> lock(g_queue_mutex);
  drain_locked([&](const QueuedWork& work) {
    return work.destination.defined() &&
           work.destination.storage().unsafeGetStorageImpl() == storage;
  });
}

uint64_t stream_position() { return g_clock.load(); }

void enqueue_locked(QueuedWork work) {
  work.position = ++g_clock;
  if (work.destination.defined()) g_queued_bytes += static_cast<int64_t>(work.snapshot.nbytes());
  queue().push_back(std::move(work));
  g_queued_count.fetch_add(1);
  while (queue().size() > kMaxQueued || g_queued_bytes > kMaxQueuedBytes) {
    QueuedWork oldest = std::move(queue().front());
    queue().pop_front();
    land_locked(std::move(oldest));
  }
}

// `stream` waits on an event recorded on `waited_stream` at `position`: the copies queued there
// before it land when `stream` is synchronized (or when the event or its own stream is).
void wait_on(DeviceIndex device, c10::StreamId stream, DeviceIndex waited_device,
             c10::StreamId waited_stream, uint64_t position) {
  if (nothing_queued()) return;
  std::lock_guard<std::mutex> lock(g_queue_mutex);
  const bool pending = std::any_of(queue().begin(), queue().end(), [&](const QueuedWork& work) {
    return work.device == waited_device && work.stream == waited_stream &&
           work.position <= position;
  });
  if (!pending) return;
  QueuedWork wait;
  wait.device = device;
  wait.stream = stream;
  wait.waited_device = waited_device;
  wait.waited_stream = waited_stream;
  wait.waited_position = position;
  enqueue_locked(std::move(wait));
}

// Order a copy between host and device as a GPU would. Returns true when the copy was queued
// (a non_blocking copy from the device into pinned memory); otherwise the caller copies now,
// after the queued work this copy waits for has landed.
bool order_host_copy(const at::Tensor& destination, const at::Tensor& device_source_on_host,
                     const at::Tensor& source, bool non_blocking) {
  const bool to_host = destination.device().is_cpu() && source.device().type() == kDevice;
  const bool to_device = destination.device().type() == kDevice && source.device().is_cpu();
  if (to_host) {
    const DeviceIndex device = source.device().index();
    const c10::StreamId stream = current_stream_of(device);
    if (non_blocking && is_pinned_tensor(destination)) {
      QueuedWork copy;
      copy.device = device;
      copy.stream = stream;
      copy.destination = destination;
      copy.snapshot = device_source_on_host.clone();
      std::lock_guard<std::mutex> lock(g_queue_mutex);
      enqueue_locked(std::move(copy));
      return true;
    }
    // A blocking copy syncs its stream (torch's memcpy_and_sync). A non_blocking one into
    // pageable memory is done on return, but CUDA only says it "might be synchronous" with
    // the host, so the copies queued before it stay queued.
    if (!non_blocking) {
      synchronize_stream(device, stream);
      host_waits(clock_of(device, stream));
    }
    land_copies_into(destination);
  } else if (to_device) {
    land_copies_into(source);  // it reads host memory a queued copy writes
    if (!non_blocking) {
      const DeviceIndex device = destination.device().index();
      const c10::StreamId stream = current_stream_of(device);
      synchronize_stream(device, stream);  // a blocking copy syncs its stream
      host_waits(clock_of(device, stream));
    }
  }
  return false;
}

int64_t queued_copies() {
  std::lock_guard<std::mutex> lock(g_queue_mutex);
  return static_cast<int64_t>(std::count_if(queue().begin(), queue().end(), [](const QueuedWork& work) {
    return work.destination.defined();
  }));
}

}  // namespace
}  // namespace emulated
}  // namespace anyaccel
