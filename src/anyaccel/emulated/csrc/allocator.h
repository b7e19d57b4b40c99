// Device memory: host memory counted per device (and optionally capped, with CUDA's
// out-of-memory error), its allocators, storage resizing, and pinned host memory. In strict
// memory mode each allocation is protected pages (memory_protection.h).
// Compiled through emulated_device.cpp.
#pragma once

#include "devices.h"
#include "memory_protection.h"

namespace anyaccel {
namespace emulated {
namespace {

struct MemoryCounters {
  int64_t allocated = 0;        // bytes held by live allocations
  int64_t peak_allocated = 0;   // since start or the last reset
  int64_t allocations = 0;      // live allocations
  int64_t peak_allocations = 0;
  int64_t alloc_count = 0;      // allocations made
  int64_t free_count = 0;       // allocations released
  int64_t oom_count = 0;        // allocations refused for capacity
  int64_t capacity = -1;        // bytes, or -1 for no limit
};

std::mutex g_memory_mutex;
MemoryCounters g_memory[kMaxDevices];

// Sizes as CUDA's allocator prints them.
std::string format_size(int64_t bytes) {
  char text[64];
  if (bytes <= 1024) {
    std::snprintf(text, sizeof(text), "%lld bytes", static_cast<long long>(bytes));
  } else if (bytes <= 1048576) {
    std::snprintf(text, sizeof(text), "%.2f KiB", bytes / 1024.0);
  } else if (bytes <= 1073741824) {
    std::snprintf(text, sizeof(text), "%.2f MiB", bytes / 1048576.0);
  } else {
    std::snprintf(text, sizeof(text), "%.2f GiB", bytes / 1073741824.0);
  }
  return text;
}

// Count `bytes` against device `index`, or raise torch.OutOfMemoryError as CUDA does.
void reserve(DeviceIndex index, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_memory_mutex);
  MemoryCounters& memory = g_memory[index];
  const int64_t asked = static_cast<int64_t>(bytes);
  if (memory.capacity >= 0 && memory.allocated + asked > memory.capacity) {
    memory.oom_count += 1;
    const int64_t free_bytes = memory.capacity - memory.allocated;
    TORCH_CHECK_WITH(OutOfMemoryError, false, backend_name(), " out of memory. Tried to allocate ",
                     format_size(asked), ". Device ", static_cast<int>(index),
                     " has a total capacity of ", format_size(memory.capacity), " of which ",
                     format_size(free_bytes), " is free. Of the allocated memory ",
                     format_size(memory.allocated), " is allocated by PyTorch, and 0 bytes is "
                     "reserved by PyTorch but unallocated. (This device is emulated in host "
                     "memory: its capacity is the memory_capacity given to install(), or the "
                     "third field of ANYACCEL_EMULATED.)");
  }
  memory.allocated += asked;
  memory.peak_allocated = std::max(memory.peak_allocated, memory.allocated);
  memory.allocations += 1;
  memory.peak_allocations = std::max(memory.peak_allocations, memory.allocations);
  memory.alloc_count += 1;
}

void release_bytes(DeviceIndex index, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_memory_mutex);
  MemoryCounters& memory = g_memory[index];
  memory.allocated -= static_cast<int64_t>(bytes);
  memory.allocations -= 1;
  memory.free_count += 1;
}

// One device allocation: its bytes, and the host memory behind it (ours, or adopted).
struct Allocation {
  DeviceIndex device;
  size_t bytes;
  void* data;
  at::DataPtr adopted;  // set when the memory came from a CPU result (it frees it)
  std::shared_ptr<ProtectedPages> pages;  // strict memory: the pages (unmapped by the last owner)
};

void free_allocation(void* context) {
  auto* allocation = static_cast<Allocation*>(context);
  release_bytes(allocation->device, allocation->bytes);
  if (!allocation->adopted && !allocation->pages) {
    c10::free_cpu(allocation->data);
  }
  delete allocation;  // an adopted DataPtr frees its memory here, protected pages are unmapped
}

// The protected pages behind a device DataPtr (null: memory the host may touch).
std::shared_ptr<ProtectedPages> pages_of(const at::DataPtr& data) {
  if (data.get_deleter() != &free_allocation) return nullptr;
  return static_cast<const Allocation*>(data.get_context())->pages;
}

// A window on a device storage's memory, for a kernel's host code.
MemoryWindow window_on(const at::DataPtr& data) { return MemoryWindow(pages_of(data)); }

// The host could not back an allocation: torch.OutOfMemoryError, as a GPU's allocator raises
// when the device is full (never the host allocator's RuntimeError).
[[noreturn]] void host_out_of_memory(DeviceIndex index, size_t bytes, const c10::Error& error) {
  int64_t allocated = 0;
  {
    std::lock_guard<std::mutex> lock(g_memory_mutex);
    g_memory[index].oom_count += 1;
    allocated = g_memory[index].allocated;
  }
  TORCH_CHECK_WITH(OutOfMemoryError, false, backend_name(), " out of memory. Tried to allocate ",
                   format_size(static_cast<int64_t>(bytes)), " on device ", backend_name(), ":",
                   static_cast<int>(index), ", which has ", format_size(allocated),
                   " allocated by PyTorch. (This device is emulated in host memory, and the "
                   "host's allocator refused: ", error.what_without_backtrace(), ")");
}

at::DataPtr allocate_on(DeviceIndex index, size_t bytes) {
  reserve(index, bytes);
  void* data = nullptr;
  std::shared_ptr<ProtectedPages> pages;
  if (bytes > 0) {
    try {
      if (strict_memory()) {
        pages = std::make_shared<ProtectedPages>(bytes);
        data = pages->data();
      } else {
        data = c10::alloc_cpu(bytes);
      }
    } catch (const c10::Error& error) {
      release_bytes(index, bytes);
      host_out_of_memory(index, bytes, error);
    } catch (...) {
      release_bytes(index, bytes);
      throw;
    }
  }
  auto* allocation = new Allocation{index, bytes, data, at::DataPtr(), std::move(pages)};
  return {data, allocation, &free_allocation, c10::Device(kDevice, index)};
}

// `bytes` of host memory copied into a new allocation of device `index`.
at::DataPtr copy_to_device(DeviceIndex index, const void* source, size_t bytes) {
  at::DataPtr data = allocate_on(index, bytes);
  if (bytes > 0) {
    MemoryWindow window = window_on(data);
    std::memcpy(data.get(), source, bytes);
  }
  return data;
}

// Host memory from a CPU DataPtr becomes device memory of `index` and is counted there; it
// stays host memory the host may touch (device_tensor_from_host shares it with a CPU tensor).
at::DataPtr share_host_memory(DeviceIndex index, at::DataPtr host, size_t bytes) {
  reserve(index, bytes);
  void* data = host.get();
  auto* allocation = new Allocation{index, bytes, data, std::move(host), nullptr};
  return {data, allocation, &free_allocation, c10::Device(kDevice, index)};
}

// A CPU kernel's result becomes device memory of `index`: taken over, or in strict memory mode
// copied into protected pages (the host allocator's memory cannot be protected page by page).
at::DataPtr adopt(DeviceIndex index, at::DataPtr host, size_t bytes) {
  if (strict_memory()) return copy_to_device(index, host.get(), bytes);
  return share_host_memory(index, std::move(host), bytes);
}

struct DeviceAllocator final : public c10::Allocator {
  DeviceIndex index = -1;  // -1: the thread's current device
  at::DataPtr allocate(size_t bytes) override {
    const DeviceIndex device = index >= 0 ? index : t_current_device;
    check_index(device);
    return allocate_on(device, bytes);
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

DeviceAllocator g_current_allocator;
DeviceAllocator g_allocators[kMaxDevices];

c10::Allocator* allocator_for(DeviceIndex index) {
  check_index(index);
  return &g_allocators[index];
}

// Grow or shrink a device storage in place (keeping its bytes up to the smaller size).
void resize_storage_bytes(c10::StorageImpl* storage, size_t bytes) {
  TORCH_CHECK(storage->resizable(), "Trying to resize storage that is not resizable");
  DeviceIndex index = storage->data_ptr().device().index();
  if (index < 0) index = t_current_device;
  at::DataPtr fresh = allocate_on(index, bytes);
  const size_t kept = std::min(bytes, storage->nbytes());
  if (kept > 0 && storage->data() != nullptr) {
    MemoryWindow to = window_on(fresh);
    MemoryWindow from = window_on(storage->data_ptr());
    std::memcpy(fresh.get(), storage->data(), kept);
  }
  storage->set_data_ptr_noswap(std::move(fresh));
  storage->set_nbytes(bytes);
}

// Pinned host memory: ordinary host memory this device remembers as page-locked, by range, so a
// pointer inside a pinned block (a storage slice rewrapped with set_) is pinned too, as on CUDA.
std::mutex g_pinned_mutex;
std::map<uintptr_t, size_t> g_pinned;  // block start -> bytes

void free_pinned(void* data) {
  {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    g_pinned.erase(reinterpret_cast<uintptr_t>(data));
  }
  c10::free_cpu(data);
}

struct PinnedAllocator final : public c10::Allocator {
  at::DataPtr allocate(size_t bytes) override {
    void* data = bytes > 0 ? c10::alloc_cpu(bytes) : nullptr;
    if (data != nullptr) {
      std::lock_guard<std::mutex> lock(g_pinned_mutex);
      g_pinned[reinterpret_cast<uintptr_t>(data)] = bytes;
    }
    return {data, data, &free_pinned, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

PinnedAllocator g_pinned_allocator;

bool is_pinned_pointer(const void* data) {
  const auto address = reinterpret_cast<uintptr_t>(data);
  std::lock_guard<std::mutex> lock(g_pinned_mutex);
  auto block = g_pinned.upper_bound(address);
  if (block == g_pinned.begin()) return false;
  --block;
  return address < block->first + block->second;
}

}  // namespace
}  // namespace emulated
}  // namespace anyaccel
