// Strict memory: device memory the host cannot touch outside the device's own kernels, as a
// GPU's memory is out of the host's reach. Each protected allocation is its own page-aligned
// mapping, kept PROT_NONE; a kernel (the fallback, copy_, resize_, a convolution, a collective's
// host view) opens a window on the memory it works on for the call, and the last window to
// close protects it again. Windows are counted per allocation under one mutex, so nested calls
// and several threads on one tensor keep it open until the last of them is done. A host library
// reading a device tensor's data_ptr() outside a kernel then dies with SIGSEGV, as on a GPU.
// Compiled through emulated_device.cpp.
#pragma once

#include "devices.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <map>

namespace anyaccel {
namespace emulated {
namespace {

// Set by configure() (install's strict_memory); read when memory is allocated, so each
// allocation is protected or not for its whole life.
std::atomic<bool> g_strict_memory{false};

bool strict_memory() { return g_strict_memory.load(std::memory_order_relaxed); }

size_t page_size() {
  static const size_t size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return size;
}

// Freed mappings kept for reuse, by length (inaccessible, as a GPU allocator's cache is to the
// host): mapping fresh pages for every tensor costs a page fault per page on first use.
class PageCache {
 public:
  static constexpr size_t kMaxCachedBytes = size_t{1} << 31;

  // An inaccessible mapping of `length` bytes: a cached one, else a new one.
  void* take(size_t length) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto found = free_.find(length);
      if (found != free_.end()) {
        void* data = found->second;
        free_.erase(found);
        cached_ -= length;
        return data;
      }
    }
    void* data = mmap(nullptr, length, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (data == MAP_FAILED) {  // the cache may hold what the host lacks: give it back, retry
      release_all();
      data = mmap(nullptr, length, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    }
    TORCH_CHECK(data != MAP_FAILED, "mmap of ", length, " bytes failed: ", std::strerror(errno));
    return data;
  }

  void give(void* data, size_t length) noexcept {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (cached_ + length <= kMaxCachedBytes) {
        free_.emplace(length, data);
        cached_ += length;
        return;
      }
    }
    munmap(data, length);
  }

  void release_all() noexcept {
    std::multimap<size_t, void*> all;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      all.swap(free_);
      cached_ = 0;
    }
    for (const auto& entry : all) munmap(entry.second, entry.first);
  }

 private:
  std::mutex mutex_;
  std::multimap<size_t, void*> free_;
  size_t cached_ = 0;
};

PageCache& page_cache() {
  static PageCache* cache = new PageCache();  // never destroyed: tensors may outlive statics
  return *cache;
}

// One protected allocation: whole pages of its own mapping, and the windows open on it.
class ProtectedPages {
 public:
  // `bytes` rounded up to whole pages, inaccessible; c10::Error when the host refuses.
  explicit ProtectedPages(size_t bytes)
      : data_(nullptr), length_((bytes + page_size() - 1) / page_size() * page_size()) {
    data_ = page_cache().take(length_);
  }
  ~ProtectedPages() { page_cache().give(data_, length_); }
  ProtectedPages(const ProtectedPages&) = delete;
  ProtectedPages& operator=(const ProtectedPages&) = delete;

  void* data() const { return data_; }

  // The first window makes the pages readable and writable.
  void open() {
    std::lock_guard<std::mutex> lock(mutex());
    if (windows_++ == 0 && mprotect(data_, length_, PROT_READ | PROT_WRITE) != 0) {
      windows_ -= 1;
      TORCH_CHECK(false, "the emulated ", backend_name(), " device could not open its memory "
                  "to a kernel (mprotect: ", std::strerror(errno), "); strict memory maps "
                  "each allocation on its own, so the process may have hit vm.max_map_count");
    }
  }

  // The last window to close makes them inaccessible again.
  void close() noexcept {
    std::lock_guard<std::mutex> lock(mutex());
    if (--windows_ == 0) mprotect(data_, length_, PROT_NONE);
  }

 private:
  // One mutex for every allocation: a window's count and its mprotect change together, so a
  // thread closing the last window cannot protect pages another thread has just opened.
  static std::mutex& mutex() {
    static std::mutex shared;
    return shared;
  }

  void* data_;
  size_t length_;
  int64_t windows_ = 0;
};

// A window on one allocation for as long as it lives (none for unprotected memory).
class MemoryWindow {
 public:
  MemoryWindow() = default;
  explicit MemoryWindow(std::shared_ptr<ProtectedPages> pages) : pages_(std::move(pages)) {
    if (pages_) pages_->open();
  }
  ~MemoryWindow() {
    if (pages_) pages_->close();
  }
  MemoryWindow(const MemoryWindow&) = delete;
  MemoryWindow& operator=(const MemoryWindow&) = delete;

 private:
  std::shared_ptr<ProtectedPages> pages_;  // keeps the mapping while the window is open
};

}  // namespace
}  // namespace emulated
}  // namespace anyaccel
