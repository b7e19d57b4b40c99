// An accelerator that computes without hardware: torch's PrivateUse1 device, backed by host memory.
//
// Tensors live in host memory owned by this device's allocator (counted per device index,
// optionally capped). Every ATen op without a PrivateUse1 kernel reaches one boxed fallback that
// hands the CPU kernel CPU tensors aliasing the same memory (no copy), then wraps the results
// back: results that alias an input share its device storage; new results are adopted into
// device storage. Factories, copies, resize_ and set_ have their own kernels, as a real backend's.
// The pieces keep torch's shapes and names: an Allocator, a DeviceGuardImplInterface, the
// PrivateUse1 hooks, a GeneratorImpl.
//
// One translation unit (torch's headers are most of a build), one header per concern:
// devices.h (the device table), allocator.h (memory), memory_protection.h (strict memory:
// device memory the host cannot touch outside kernels), generator.h, guard.h, hooks.h,
// deferred_copies.h (device-to-host copies landing at a synchronization), stream_clocks.h,
// host_alias.h, cpu_kernel_ops.h (which ops the fallback takes), fallback.h, kernels.h,
// sparse.h (sparse layouts), rnn_cells.h (the fused LSTM/GRU cells), sdpa.h (attention's
// kernel choice), autocast.h; here, configuration and the Python face.

#include "allocator.h"
#include "autocast.h"
#include "cpu_kernel_ops.h"
#include "devices.h"
#include "fallback.h"
#include "generator.h"
#include "guard.h"
#include "hooks.h"
#include "host_alias.h"
#include "kernels.h"
#include "rnn_cells.h"
#include "sdpa.h"
#include "sparse.h"

namespace anyaccel {
namespace emulated {
namespace {

std::once_flag g_hooks_once;

// Called once, by anyaccel.emulated.runtime.install (which holds the rules and their messages).
void configure(int64_t device_count, int64_t capacity, bool strict) {
  TORCH_CHECK(device_count >= 1 && device_count <= kMaxDevices, "device_count must be 1..",
              kMaxDevices, ", got ", device_count);
  TORCH_CHECK(g_device_count.load() == 0,
              "configure() runs once per process: anyaccel.emulated.runtime.install() calls it");
  for (int64_t index = 0; index < device_count; ++index) {
    g_allocators[index].index = static_cast<DeviceIndex>(index);
    g_memory[index].capacity = capacity;
    default_generators().push_back(
        at::make_generator<DeviceGeneratorImpl>(static_cast<DeviceIndex>(index)));
  }
  g_strict_memory.store(strict);
  c10::SetAllocator(kDevice, &g_current_allocator);
  std::call_once(g_hooks_once, [] {
    at::RegisterPrivateUse1HooksInterface(new DeviceHooks());
    register_autocast();
    route_to_cpu_kernels();
    route_sparse_to_cpu_kernels();
  });
  g_device_count.store(static_cast<int>(device_count));
}

void set_capacity(int64_t index, int64_t capacity) {
  check_index(index);
  std::lock_guard<std::mutex> lock(g_memory_mutex);
  g_memory[index].capacity = capacity;
}

py::dict memory_counters(int64_t index) {
  check_index(index);
  MemoryCounters copy;
  {
    std::lock_guard<std::mutex> lock(g_memory_mutex);
    copy = g_memory[index];
  }
  py::dict counters;
  counters["allocated"] = copy.allocated;
  counters["peak_allocated"] = copy.peak_allocated;
  counters["allocations"] = copy.allocations;
  counters["peak_allocations"] = copy.peak_allocations;
  counters["alloc_count"] = copy.alloc_count;
  counters["free_count"] = copy.free_count;
  counters["oom_count"] = copy.oom_count;
  counters["capacity"] = copy.capacity;
  return counters;
}

void reset_peak(int64_t index) {
  check_index(index);
  std::lock_guard<std::mutex> lock(g_memory_mutex);
  g_memory[index].peak_allocated = g_memory[index].allocated;
  g_memory[index].peak_allocations = g_memory[index].allocations;
}

py::object python_default_generator(int64_t index) {
  return py::reinterpret_steal<py::object>(
      THPGenerator_initDefaultGenerator(default_generator(static_cast<DeviceIndex>(index))));
}

int64_t current_device() { return t_current_device; }

void set_device(int64_t index) {
  check_index(index);
  t_current_device = static_cast<DeviceIndex>(index);
}

int64_t current_stream_id(int64_t index) {
  check_index(index);
  return current_stream_of(static_cast<DeviceIndex>(index));
}

void synchronize(int64_t index) {
  check_index(index);
  synchronize_device(static_cast<DeviceIndex>(index));
  host_waits_for_device(static_cast<DeviceIndex>(index));
}

// The stream sanitizer issues an op on the thread's current stream of `index`: its clock.
py::dict issue_on_current_stream(int64_t index) {
  check_index(index);
  const DeviceIndex device = static_cast<DeviceIndex>(index);
  py::dict clock;
  for (const auto& [key, count] : tick(device, current_stream_of(device))) clock[py::int_(key)] = count;
  return clock;
}

void set_current_stream(int64_t index, int64_t stream_id) {
  check_index(index);
  TORCH_CHECK(stream_id >= 0 && stream_id < g_next_stream.load(), "stream id ", stream_id,
              " was not made by the emulated device");
  t_current_stream[static_cast<DeviceIndex>(index)] = stream_id;
}

bool is_pinned_address(int64_t address) {
  return is_pinned_pointer(reinterpret_cast<const void*>(address));
}

// The host view as an op, for the device's collective backend (another extension): a CPU
// tensor over a device tensor's memory that keeps it open to the host while it lives.
TORCH_LIBRARY(anyaccel_emulated, m) { m.def("host_view(Tensor self) -> Tensor"); }

TORCH_LIBRARY_IMPL(anyaccel_emulated, PrivateUse1, m) { m.impl("host_view", TORCH_FN(host_view)); }

}  // namespace
}  // namespace emulated
}  // namespace anyaccel

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  namespace emulated = anyaccel::emulated;
  m.def("configure", &emulated::configure,
        "Set the device count, each device's capacity (-1: none) and strict memory");
  m.def("strict_memory", &emulated::strict_memory);
  m.def("set_strict_memory", [](bool strict) { emulated::g_strict_memory.store(strict); },
        "Protect the allocations made from now on (or not); for measuring its cost");
  m.def("device_count", [] { return emulated::g_device_count.load(); });
  m.def("set_capacity", &emulated::set_capacity);
  m.def("memory_counters", &emulated::memory_counters);
  m.def("reset_peak", &emulated::reset_peak);
  m.def("default_generator", &emulated::python_default_generator);
  m.def("current_device", &emulated::current_device);
  m.def("set_device", &emulated::set_device);
  m.def("current_stream_id", &emulated::current_stream_id);
  m.def("synchronize", &emulated::synchronize, "Land the device's queued copies into host memory");
  m.def("queued_copies", &emulated::queued_copies, "Copies into host memory not landed yet");
  m.def("track_stream_clocks", &emulated::track_stream_clocks, "Keep streams' clocks (sanitizer)");
  m.def("issue_on_current_stream", &emulated::issue_on_current_stream,
        "Count an op on the current stream; its clock as {stream key: ops}");
  m.def("stream_key", [](int64_t device, int64_t stream) {
    return emulated::stream_key(static_cast<c10::DeviceIndex>(device), stream);
  });
  m.def("set_current_stream", &emulated::set_current_stream);
  m.def("host_view", &emulated::host_view);
  m.def("device_tensor_from_host", &emulated::device_tensor_from_host);
  m.def("is_pinned_address", &emulated::is_pinned_address);
  m.def("allow_cpu_kernels", &emulated::allow_cpu_kernels,
        "Let the fallback run these ops or namespaces on the CPU's kernels");
  m.def("allowed_cpu_kernels", &emulated::allowed_cpu_kernels);
}
