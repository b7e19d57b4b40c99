// An accelerator that computes without hardware: torch's PrivateUse1 device, backed by host memory.
//
// Tensors live in host memory owned by this device's allocator (counted per device index,
// optionally capped). Every ATen op without a PrivateUse1 kernel reaches one boxed fallback that
// hands the CPU kernel CPU tensors aliasing the same memory (no copy), then wraps the results
// back: results that alias an input share its device storage; new results are adopted into
// device storage. Factories, copies, resize_ and set_ have their own kernels, as a real backend's.
// The pieces keep torch's shapes and names: an Allocator, a DeviceGuardImplInterface, the
// PrivateUse1 hooks, a GeneratorImpl.

#include <torch/extension.h>

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
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

// Written against torch 2.13's interfaces (the Python side refuses older torch). Where a later
// release changes one, test ANYACCEL_TORCH_AT_LEAST(major, minor) around it.
#if !defined(ANYACCEL_TORCH_MAJOR) || !defined(ANYACCEL_TORCH_MINOR)
#error "the builder passes ANYACCEL_TORCH_MAJOR and ANYACCEL_TORCH_MINOR"
#endif
#define ANYACCEL_TORCH_AT_LEAST(major, minor) \
  (ANYACCEL_TORCH_MAJOR > (major) ||          \
   (ANYACCEL_TORCH_MAJOR == (major) && ANYACCEL_TORCH_MINOR >= (minor)))

namespace anyaccel {
namespace emulated {
namespace {

using c10::DeviceIndex;
constexpr c10::DeviceType kDevice = c10::DeviceType::PrivateUse1;
constexpr int kMaxDevices = 64;

// ------------------------------------------------------------------------------------------
// Devices and their memory accounting
// ------------------------------------------------------------------------------------------

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

DeviceIndex resolve_index(std::optional<c10::Device> device) {
  if (device.has_value() && device->has_index()) {
    check_index(device->index());
    return device->index();
  }
  return t_current_device;
}

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
};

void free_allocation(void* context) {
  auto* allocation = static_cast<Allocation*>(context);
  release_bytes(allocation->device, allocation->bytes);
  if (!allocation->adopted) {
    c10::free_cpu(allocation->data);
  }
  delete allocation;  // an adopted DataPtr frees its memory here
}

at::DataPtr allocate_on(DeviceIndex index, size_t bytes) {
  reserve(index, bytes);
  void* data = nullptr;
  if (bytes > 0) {
    try {
      data = c10::alloc_cpu(bytes);
    } catch (...) {
      release_bytes(index, bytes);
      throw;
    }
  }
  auto* allocation = new Allocation{index, bytes, data, at::DataPtr()};
  return {data, allocation, &free_allocation, c10::Device(kDevice, index)};
}

// Host memory from a CPU DataPtr becomes device memory of `index`, counted there.
at::DataPtr adopt(DeviceIndex index, at::DataPtr host, size_t bytes) {
  reserve(index, bytes);
  void* data = host.get();
  auto* allocation = new Allocation{index, bytes, data, std::move(host)};
  return {data, allocation, &free_allocation, c10::Device(kDevice, index)};
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
    std::memcpy(fresh.get(), storage->data(), kept);
  }
  storage->set_data_ptr_noswap(std::move(fresh));
  storage->set_nbytes(bytes);
}

// Pinned host memory: ordinary host memory this device remembers as page-locked.
std::mutex g_pinned_mutex;
std::unordered_set<const void*> g_pinned;

void free_pinned(void* data) {
  {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    g_pinned.erase(data);
  }
  c10::free_cpu(data);
}

struct PinnedAllocator final : public c10::Allocator {
  at::DataPtr allocate(size_t bytes) override {
    void* data = bytes > 0 ? c10::alloc_cpu(bytes) : nullptr;
    if (data != nullptr) {
      std::lock_guard<std::mutex> lock(g_pinned_mutex);
      g_pinned.insert(data);
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
  std::lock_guard<std::mutex> lock(g_pinned_mutex);
  return g_pinned.count(data) > 0;
}

// ------------------------------------------------------------------------------------------
// Generators: each device's wraps a CPU generator, which the CPU kernels draw from
// ------------------------------------------------------------------------------------------

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

// ------------------------------------------------------------------------------------------
// Device guard: the current device (per thread, as CUDA's), streams and events
// ------------------------------------------------------------------------------------------

std::atomic<int64_t> g_next_stream{1};
thread_local std::unordered_map<DeviceIndex, c10::StreamId> t_current_stream;

struct DeviceEvent {
  DeviceIndex device = -1;
  bool recorded = false;
  bool timing = false;
  std::chrono::steady_clock::time_point when;
};

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
  }
  void block(void* /*event*/, const c10::Stream& /*stream*/) const override {}
  bool queryEvent(void* /*event*/) const override { return true; }
  DeviceIndex deviceCount() const noexcept override {
    return static_cast<DeviceIndex>(g_device_count.load());
  }
  bool queryStream(const c10::Stream& /*stream*/) const override { return true; }
  void synchronizeStream(const c10::Stream& /*stream*/) const override {}
  void synchronizeEvent(void* /*event*/) const override {}
  void recordDataPtrOnStream(const c10::DataPtr& /*data*/, const c10::Stream& /*stream*/) const override {}
  void synchronizeDevice(const DeviceIndex index) const override { check_index(index); }
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

// ------------------------------------------------------------------------------------------
// PrivateUse1 hooks: availability, generators, pinned memory, storage resizing
// ------------------------------------------------------------------------------------------

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

// ------------------------------------------------------------------------------------------
// Device tensors and their host aliases
// ------------------------------------------------------------------------------------------

bool is_device_tensor(const at::Tensor& tensor) {
  return tensor.defined() && tensor.device().type() == kDevice;
}

void copy_flags(const at::Tensor& from, at::Tensor& to) {
  if (from.is_conj()) to._set_conj(true);
  if (from.is_neg()) to._set_neg(true);
}

// A tensor with `storage` and `geometry`'s sizes, strides, offset, dtype and conj/neg bits.
at::Tensor with_geometry(c10::Storage storage, c10::DispatchKey key, const at::Tensor& geometry) {
  at::Tensor made = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(key), geometry.dtype());
  made.unsafeGetTensorImpl()->set_sizes_and_strides(geometry.sizes(), geometry.strides(),
                                                    geometry.storage_offset());
  copy_flags(geometry, made);
  return made;
}

void drop_storage_reference(void* context) { delete static_cast<c10::Storage*>(context); }

// A CPU storage over a device storage's memory; it keeps the device storage alive.
c10::Storage host_storage_of(const c10::Storage& device_storage) {
  auto* holder = new c10::Storage(device_storage);
  at::DataPtr data(const_cast<void*>(device_storage.data_ptr().get()), holder,
                   &drop_storage_reference, c10::Device(c10::DeviceType::CPU));
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), device_storage.nbytes(), std::move(data),
      c10::GetCPUAllocator(), /*resizable=*/true));
}

void check_strided(const at::Tensor& tensor) {
  TORCH_CHECK(tensor.layout() == c10::kStrided, "the emulated ", backend_name(),
              " device holds strided tensors only, got layout ", tensor.layout());
}

at::Tensor host_view(const at::Tensor& tensor) {
  TORCH_CHECK(is_device_tensor(tensor), "host_view expects a tensor on the emulated ",
              backend_name(), " device, got one on ", tensor.device());
  check_strided(tensor);
  return with_geometry(host_storage_of(tensor.storage()), c10::DispatchKey::CPU, tensor);
}

// A device tensor sharing `host`'s memory (kept alive by it), counted on device `index`.
at::Tensor device_tensor_from_host(const at::Tensor& host, int64_t index) {
  TORCH_CHECK(host.defined() && host.device().is_cpu(),
              "device_tensor_from_host expects a CPU tensor, got one on ", host.device());
  check_strided(host);
  check_index(index);
  const c10::Storage& storage = host.storage();
  auto* holder = new c10::Storage(storage);
  at::DataPtr kept(const_cast<void*>(storage.data_ptr().get()), holder, &drop_storage_reference,
                   c10::Device(c10::DeviceType::CPU));
  at::DataPtr device_data = adopt(static_cast<DeviceIndex>(index), std::move(kept), storage.nbytes());
  c10::Storage device_storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), storage.nbytes(), std::move(device_data),
      &g_allocators[index], /*resizable=*/false));
  return with_geometry(std::move(device_storage), c10::DispatchKey::PrivateUse1, host);
}

// ------------------------------------------------------------------------------------------
// The boxed fallback: any ATen op on CPU kernels over aliases of the device memory
// ------------------------------------------------------------------------------------------

struct AliasedStorage {
  c10::Storage device;
  c10::Storage host;
  const void* data;
  size_t bytes;
};

struct AliasedTensor {
  at::Tensor device;
  at::Tensor host;
};

// The aliases made for one call: each device storage gets one host storage, so aliasing
// between arguments is kept.
class Aliases {
 public:
  at::Tensor host_of(const at::Tensor& tensor) {
    check_strided(tensor);
    c10::StorageImpl* key = tensor.storage().unsafeGetStorageImpl();
    auto found = by_device_.find(key);
    size_t slot;
    if (found == by_device_.end()) {
      slot = storages_.size();
      storages_.push_back({tensor.storage(), host_storage_of(tensor.storage()),
                           tensor.storage().data_ptr().get(), tensor.storage().nbytes()});
      by_device_.emplace(key, slot);
      by_host_.emplace(storages_.back().host.unsafeGetStorageImpl(), slot);
    } else {
      slot = found->second;
    }
    at::Tensor host = with_geometry(storages_[slot].host, c10::DispatchKey::CPU, tensor);
    tensors_.push_back({tensor, host});
    return host;
  }

  // After the CPU kernel: storages it reallocated (a resizing out=) become device memory again,
  // and inputs whose geometry it changed take the new geometry.
  void write_back(DeviceIndex index) {
    for (AliasedStorage& aliased : storages_) {
      c10::StorageImpl* host = aliased.host.unsafeGetStorageImpl();
      if (host->data_ptr().get() == aliased.data && host->nbytes() == aliased.bytes) continue;
      const size_t bytes = host->nbytes();
      at::DataPtr moved = host->set_data_ptr(at::DataPtr());
      DeviceIndex owner = aliased.device.device().index();
      aliased.device.unsafeGetStorageImpl()->set_data_ptr_noswap(
          adopt(owner >= 0 ? owner : index, std::move(moved), bytes));
      aliased.device.unsafeGetStorageImpl()->set_nbytes(bytes);
      // the host storage now aliases the new device memory, for results that point at it
      host->set_data_ptr_noswap(at::DataPtr(aliased.device.data_ptr().get(), host_holder(aliased.device),
                                            &drop_storage_reference, c10::Device(c10::DeviceType::CPU)));
    }
    for (AliasedTensor& aliased : tensors_) {
      const at::Tensor& host = aliased.host;
      c10::TensorImpl* device = aliased.device.unsafeGetTensorImpl();
      if (host.unsafeGetTensorImpl()->storage().unsafeGetStorageImpl() !=
          storages_[by_device_.at(device->storage().unsafeGetStorageImpl())].host.unsafeGetStorageImpl()) {
        continue;  // the kernel pointed it at other memory: left as the input was
      }
      if (host.sizes() != device->sizes() || host.strides() != device->strides() ||
          host.storage_offset() != device->storage_offset()) {
        device->set_sizes_and_strides(host.sizes(), host.strides(), host.storage_offset());
      }
    }
  }

  // The device tensor for one CPU result.
  at::Tensor device_of(const at::Tensor& result, DeviceIndex index,
                       std::unordered_map<c10::StorageImpl*, c10::Storage>& adopted,
                       const std::unordered_map<c10::StorageImpl*, int64_t>& result_uses) {
    if (!result.defined() || !result.device().is_cpu()) return result;
    for (const AliasedTensor& aliased : tensors_) {
      if (aliased.host.unsafeGetTensorImpl() == result.unsafeGetTensorImpl()) {
        return aliased.device;  // in place, or out=: the input itself
      }
    }
    check_strided(result);
    c10::StorageImpl* storage = result.storage().unsafeGetStorageImpl();
    auto aliased = by_host_.find(storage);
    if (aliased != by_host_.end()) {  // a view of an input
      return with_geometry(storages_[aliased->second].device, c10::DispatchKey::PrivateUse1, result);
    }
    auto done = adopted.find(storage);
    if (done == adopted.end()) {
      done = adopted.emplace(storage, adopt_storage(result, index, result_uses)).first;
    }
    return with_geometry(done->second, c10::DispatchKey::PrivateUse1, result);
  }

 private:
  static c10::Storage* host_holder(const c10::Storage& device) { return new c10::Storage(device); }

  // A new CPU result's memory becomes device memory: taken over when only the results hold it,
  // copied otherwise.
  static c10::Storage adopt_storage(const at::Tensor& result, DeviceIndex index,
                                    const std::unordered_map<c10::StorageImpl*, int64_t>& result_uses) {
    c10::StorageImpl* storage = result.storage().unsafeGetStorageImpl();
    const size_t bytes = storage->nbytes();
    auto uses = result_uses.find(storage);
    const int64_t held_by_results = uses == result_uses.end() ? 0 : uses->second;
    at::DataPtr data;
    if (static_cast<int64_t>(c10::raw::intrusive_ptr::use_count(storage)) <= held_by_results) {
      data = adopt(index, storage->set_data_ptr(at::DataPtr()), bytes);
      storage->set_nbytes(0);
    } else {
      data = allocate_on(index, bytes);
      if (bytes > 0) std::memcpy(data.get(), storage->data(), bytes);
    }
    return c10::Storage(c10::make_intrusive<c10::StorageImpl>(
        c10::StorageImpl::use_byte_size_t(), bytes, std::move(data), &g_allocators[index],
        /*resizable=*/true));
  }

  std::vector<AliasedStorage> storages_;
  std::vector<AliasedTensor> tensors_;
  std::unordered_map<c10::StorageImpl*, size_t> by_device_;
  std::unordered_map<c10::StorageImpl*, size_t> by_host_;
};

[[noreturn]] void mixed_devices(const c10::OperatorHandle& op, const c10::Device& first,
                                const c10::Device& second) {
  TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two "
              "devices, ", first, " and ", second, "! (in ", op.schema().operator_name(),
              ", run on the emulated device)");
}

// Device of the call, checking that its tensors agree (0-dim CPU tensors may join, as on CUDA).
std::optional<DeviceIndex> call_device(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args) {
  std::optional<c10::Device> device;
  auto note = [&](const at::Tensor& tensor, bool cpu_allowed) {
    if (!tensor.defined()) return;
    const c10::Device here = tensor.device();
    if (here.type() == kDevice) {
      if (!device.has_value() || device->type() != kDevice) {
        if (device.has_value()) mixed_devices(op, here, *device);
        device = here;
      } else if (device->index() != here.index()) {
        mixed_devices(op, *device, here);
      }
    } else if (here.is_cpu()) {
      if (cpu_allowed || tensor.dim() == 0) return;
      if (device.has_value() && device->type() == kDevice) mixed_devices(op, *device, here);
      if (!device.has_value()) device = here;
    }
  };
  for (const c10::IValue& arg : args) {
    if (arg.isTensor()) {
      note(arg.toTensor(), false);
    } else if (arg.isTensorList()) {
      for (const at::Tensor& tensor : arg.toTensorList()) note(tensor, false);
    } else if (arg.isList()) {
      for (const c10::IValue& item : arg.toListRef()) {
        if (item.isTensor()) note(item.toTensor(), true);  // Tensor?[] (indices may stay on the host)
      }
    } else if (arg.isDevice() && arg.toDevice().type() == kDevice && !device.has_value()) {
      device = c10::Device(kDevice, resolve_index(arg.toDevice()));
    }
  }
  if (device.has_value() && device->type() == kDevice) return device->index();
  return std::nullopt;
}

bool is_generator_argument(const c10::Argument& argument) {
  const c10::TypePtr& type = argument.type();
  if (type->kind() == c10::TypeKind::GeneratorType) return true;
  if (auto optional = type->cast<c10::OptionalType>()) {
    return optional->getElementType()->kind() == c10::TypeKind::GeneratorType;
  }
  return false;
}

// Draws a seeded op makes from the CPU default generator come from the device's instead.
class DefaultGeneratorSwap {
 public:
  explicit DefaultGeneratorSwap(const at::Generator& device_host)
      : device_host_(device_host), cpu_(at::detail::getDefaultCPUGenerator()) {
    saved_ = cpu_.get_state();
    cpu_.set_state(device_host_.get_state());
  }
  ~DefaultGeneratorSwap() {
    device_host_.set_state(cpu_.get_state());
    cpu_.set_state(saved_);
  }

 private:
  at::Generator device_host_;
  at::Generator cpu_;
  at::Tensor saved_;
};

void device_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  const size_t argument_count = schema.arguments().size();
  const size_t first = stack->size() - argument_count;
  const std::optional<DeviceIndex> found =
      call_device(op, c10::ArrayRef<c10::IValue>(stack->data() + first, argument_count));
  const DeviceIndex index = found.value_or(t_current_device);
  check_index(index);
  const DeviceIndex previous = t_current_device;
  t_current_device = index;
  struct Restore {
    DeviceIndex previous;
    ~Restore() { t_current_device = previous; }
  } restore{previous};

  Aliases aliases;
  bool generator_given = false;
  for (size_t i = 0; i < argument_count; ++i) {
    c10::IValue& arg = (*stack)[first + i];
    if (arg.isTensor()) {
      const at::Tensor& tensor = arg.toTensor();
      if (is_device_tensor(tensor)) arg = aliases.host_of(tensor);
    } else if (arg.isTensorList()) {
      c10::List<at::Tensor> hosts;
      for (const at::Tensor& tensor : arg.toTensorList()) {
        hosts.push_back(is_device_tensor(tensor) ? aliases.host_of(tensor) : tensor);
      }
      arg = std::move(hosts);
    } else if (arg.isList() && schema.arguments()[i].type()->kind() == c10::TypeKind::ListType) {
      const auto element = schema.arguments()[i].type()->castRaw<c10::ListType>()->getElementType();
      if (element->kind() == c10::TypeKind::OptionalType &&
          element->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::TensorType) {
        c10::List<std::optional<at::Tensor>> hosts;
        for (const c10::IValue& item : arg.toListRef()) {
          if (item.isTensor() && is_device_tensor(item.toTensor())) {
            hosts.push_back(aliases.host_of(item.toTensor()));
          } else if (item.isTensor()) {
            hosts.push_back(item.toTensor());
          } else {
            hosts.push_back(std::nullopt);
          }
        }
        arg = std::move(hosts);
      }
    } else if (arg.isDevice() && arg.toDevice().type() == kDevice) {
      arg = c10::Device(c10::DeviceType::CPU);
    } else if (is_generator_argument(schema.arguments()[i])) {
      if (arg.isNone()) {
        arg = host_generator(default_generator(index));
        generator_given = true;
      } else if (arg.isGenerator() && arg.toGenerator().device().type() == kDevice) {
        arg = host_generator(arg.toGenerator());
        generator_given = true;
      } else if (arg.isGenerator()) {  // a CPU generator for device tensors: refused, as on CUDA
        TORCH_CHECK(false, "Expected a '", backend_name(), "' device type for generator but found '",
                    c10::DeviceTypeName(arg.toGenerator().device().type(), /*lower_case=*/true),
                    "'");
      }
    }
  }

  {
    std::optional<DefaultGeneratorSwap> swap;
    if (!generator_given && op.hasTag(at::Tag::nondeterministic_seeded)) {
      swap.emplace(host_generator(default_generator(index)));
    }
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  }
  aliases.write_back(index);

  const size_t return_count = schema.returns().size();
  const size_t results = stack->size() - return_count;
  std::unordered_map<c10::StorageImpl*, int64_t> result_uses;
  auto count_use = [&](const at::Tensor& tensor) {
    if (tensor.defined() && tensor.device().is_cpu() && tensor.has_storage()) {
      result_uses[tensor.storage().unsafeGetStorageImpl()] += 1;
    }
  };
  for (size_t i = results; i < stack->size(); ++i) {
    const c10::IValue& value = (*stack)[i];
    if (value.isTensor()) {
      count_use(value.toTensor());
    } else if (value.isTensorList()) {
      for (const at::Tensor& tensor : value.toTensorList()) count_use(tensor);
    }
  }
  std::unordered_map<c10::StorageImpl*, c10::Storage> adopted;
  for (size_t i = results; i < stack->size(); ++i) {
    c10::IValue& value = (*stack)[i];
    if (value.isTensor()) {
      const at::Tensor result = value.toTensor();
      value = aliases.device_of(result, index, adopted, result_uses);
    } else if (value.isTensorList()) {
      c10::List<at::Tensor> devices;
      for (const at::Tensor& tensor : value.toTensorList()) {
        devices.push_back(aliases.device_of(tensor, index, adopted, result_uses));
      }
      value = std::move(devices);
    }
  }
}

// ------------------------------------------------------------------------------------------
// Kernels where a fallback cannot be right: factories, copies, resize_, set_
// ------------------------------------------------------------------------------------------

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<at::Device> device,
                               std::optional<bool> /*pin_memory*/,
                               std::optional<at::MemoryFormat> memory_format) {
  TORCH_CHECK(!layout.has_value() || *layout == c10::kStrided, "the emulated ", backend_name(),
              " device holds strided tensors only, got layout ", *layout);
  const DeviceIndex index = resolve_index(device);
  return at::detail::empty_generic(size, allocator_for(index),
                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                         std::optional<at::Device> device, std::optional<bool> /*pin_memory*/) {
  TORCH_CHECK(!layout.has_value() || *layout == c10::kStrided, "the emulated ", backend_name(),
              " device holds strided tensors only, got layout ", *layout);
  const DeviceIndex index = resolve_index(device);
  return at::detail::empty_strided_generic(size, stride, allocator_for(index),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

// The CPU side of a copy: the tensor itself on the host, an alias on the device.
at::Tensor copy_side(const at::Tensor& tensor, Aliases& aliases, const char* role) {
  if (is_device_tensor(tensor)) return aliases.host_of(tensor);
  TORCH_CHECK(tensor.device().is_cpu(), "copy between the emulated ", backend_name(),
              " device and ", tensor.device(), " is not supported (", role,
              "); copy through the CPU");
  return tensor;
}

at::Tensor& copy_(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  Aliases aliases;
  at::Tensor host_self = copy_side(self, aliases, "destination");
  const at::Tensor host_src = copy_side(src, aliases, "source");
  host_self.copy_(host_src, non_blocking);  // synchronous: non_blocking has nothing to overlap
  return self;
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  at::Tensor target = dst;
  copy_(target, self, non_blocking);
  return dst;
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<at::MemoryFormat> memory_format);

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (is_device_tensor(dst)) {
    resize_(dst, self.sizes(), std::nullopt);
  } else {
    dst.resize_(self.sizes());
  }
  at::Tensor target = dst;
  copy_(target, self, false);
  return dst;
}

void ensure_storage_holds(c10::TensorImpl* impl) {
  const size_t needed = at::detail::computeStorageNbytes(
      impl->sizes(), impl->strides(), impl->dtype().itemsize(),
      static_cast<size_t>(impl->storage_offset()));
  if (impl->numel() > 0 && needed > impl->storage().nbytes()) {
    resize_storage_bytes(impl->storage().unsafeGetStorageImpl(), needed);
  }
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<at::MemoryFormat> memory_format) {
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  impl->set_sizes_contiguous(size);
  if (memory_format.has_value()) {
    TORCH_CHECK(*memory_format != at::MemoryFormat::Preserve,
                "Unsupported memory format ", *memory_format);
    impl->empty_tensor_restride(*memory_format);
  }
  ensure_storage_holds(impl);
  return self;
}

at::Tensor& set_storage_offset(at::Tensor& self, at::Storage source, int64_t storage_offset,
                               c10::IntArrayRef size, c10::IntArrayRef stride) {
  TORCH_CHECK(source.device().type() == kDevice, "set_: expected a storage on the emulated ",
              backend_name(), " device, got one on ", source.device());
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  impl->set_storage_keep_dtype(std::move(source));
  if (stride.empty()) {
    impl->set_sizes_contiguous(size);
    impl->set_storage_offset(storage_offset);
  } else {
    impl->set_sizes_and_strides(size, stride, storage_offset);
  }
  ensure_storage_holds(impl);
  return self;
}

at::Tensor& set_storage(at::Tensor& self, at::Storage source) {
  const int64_t elements = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return set_storage_offset(self, std::move(source), 0, {elements}, {});
}

at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source) {
  TORCH_CHECK(is_device_tensor(source), "set_: expected a tensor on the emulated ", backend_name(),
              " device, got one on ", source.device());
  if (self.unsafeGetTensorImpl() == source.unsafeGetTensorImpl()) return self;
  return set_storage_offset(self, source.storage(), source.storage_offset(), source.sizes(),
                            source.strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  const DeviceIndex index = self.device().has_index() ? self.device().index() : t_current_device;
  c10::Storage storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), 0, allocate_on(index, 0), &g_allocators[index],
      /*resizable=*/true));
  return set_storage_offset(self, std::move(storage), 0, {0}, {});
}

// Convolutions: torch sends a PrivateUse1 convolution to convolution_overrideable (no CPU
// kernel exists for it, so the fallback cannot serve it); run the CPU's convolution instead.
at::Tensor host_result(Aliases& aliases, const at::Tensor& result, DeviceIndex index) {
  std::unordered_map<c10::StorageImpl*, c10::Storage> adopted;
  std::unordered_map<c10::StorageImpl*, int64_t> uses;
  if (result.defined() && result.has_storage()) uses[result.storage().unsafeGetStorageImpl()] = 1;
  return aliases.device_of(result, index, adopted, uses);
}

void check_same_device(const at::Tensor& first, const at::Tensor& other) {
  TORCH_CHECK(!other.defined() || other.device() == first.device(),
              "Expected all tensors to be on the same device, but found at least two devices, ",
              first.device(), " and ", other.device(), "!");
}

at::Tensor host_optional(Aliases& aliases, const std::optional<at::Tensor>& tensor) {
  if (!tensor.has_value() || !tensor->defined()) return at::Tensor();
  return is_device_tensor(*tensor) ? aliases.host_of(*tensor) : *tensor;
}

at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                                    c10::IntArrayRef padding, c10::IntArrayRef dilation,
                                    bool transposed, c10::IntArrayRef output_padding,
                                    int64_t groups) {
  check_same_device(input, weight);
  if (bias.has_value()) check_same_device(input, *bias);
  Aliases aliases;
  const DeviceIndex index = input.device().index();
  const at::Tensor host_input = copy_side(input, aliases, "convolution input");
  const at::Tensor host_weight = copy_side(weight, aliases, "convolution weight");
  at::Tensor result;
  {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    result = at::convolution(host_input, host_weight, host_optional(aliases, bias), stride,
                             padding, dilation, transposed, output_padding, groups);
  }
  return host_result(aliases, result, index);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
    c10::IntArrayRef output_padding, int64_t groups, std::array<bool, 3> output_mask) {
  check_same_device(input, weight);
  check_same_device(input, grad_output);
  Aliases aliases;
  const DeviceIndex index = input.device().index();
  const at::Tensor host_grad = copy_side(grad_output, aliases, "convolution gradient");
  const at::Tensor host_input = copy_side(input, aliases, "convolution input");
  const at::Tensor host_weight = copy_side(weight, aliases, "convolution weight");
  const int64_t bias_size = transposed ? weight.size(1) * groups : weight.size(0);
  std::tuple<at::Tensor, at::Tensor, at::Tensor> grads;
  {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    grads = at::convolution_backward(host_grad, host_input, host_weight,
                                     std::vector<int64_t>{bias_size}, stride, padding, dilation,
                                     transposed, output_padding, groups, output_mask);
  }
  return {host_result(aliases, std::get<0>(grads), index),
          host_result(aliases, std::get<1>(grads), index),
          host_result(aliases, std::get<2>(grads), index)};
}

void record_stream(at::Tensor& /*self*/, c10::Stream /*stream*/) {}  // memory is never reused early

// A dense CPU tensor and a dense device tensor may share a TensorImpl (`param.data = moved`), as
// for torch's own devices, so `module.to(device)` keeps each Parameter object and an optimizer
// built before the move steps the moved weights. torch leaves this answer to a PrivateUse1
// backend (c10/core/TensorImpl.h); without it every Parameter was replaced by a new one.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  const auto dense = [](c10::DispatchKeySet keys) {
    constexpr auto backends = c10::DispatchKeySet(
        {c10::BackendComponent::CPUBit, c10::BackendComponent::PrivateUse1Bit});
    return keys.has_any(c10::DispatchKeySet(c10::DispatchKey::Dense)) && keys.has_any(backends);
  };
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set()) ||
         (dense(self.key_set()) && dense(from.key_set()));
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&device_fallback>());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("copy_", TORCH_FN(copy_));
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage_offset));
  m.impl("set_.source_Storage", TORCH_FN(set_storage));
  m.impl("set_.source_Tensor", TORCH_FN(set_tensor));
  m.impl("set_", TORCH_FN(set_empty));
  m.impl("record_stream", TORCH_FN(record_stream));
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
  m.impl("convolution_overrideable", TORCH_FN(convolution_overrideable));
  m.impl("convolution_backward_overrideable", TORCH_FN(convolution_backward_overrideable));
}

// ------------------------------------------------------------------------------------------
// Autocast: CUDA's op lists (torch's own macros) for AutocastPrivateUse1, where torch has none
// ------------------------------------------------------------------------------------------

// Registered at configure, and only what this torch lacks: some releases register the lists
// for PrivateUse1 themselves, and a second registration would fail.
void register_autocast() {
  static std::vector<std::unique_ptr<torch::Library>> libraries;
  const c10::DispatchKey key = c10::DispatchKey::AutocastPrivateUse1;
  if (!c10::Dispatcher::singleton().hasBackendFallbackForDispatchKey(key)) {
    libraries.push_back(std::make_unique<torch::Library>(torch::Library::IMPL, "_", key, __FILE__, __LINE__));
    libraries.back()->fallback(torch::CppFunction::makeFallthrough());
  }
  auto mm = c10::Dispatcher::singleton().findSchema({"aten::mm", ""});
  if (mm.has_value() && mm->hasKernelForDispatchKey(key)) return;
  libraries.push_back(std::make_unique<torch::Library>(torch::Library::IMPL, "aten", key, __FILE__, __LINE__));
  torch::Library& m = *libraries.back();
  using at::IntArrayRef;
  using at::Scalar;
  using at::ScalarType;
  using at::Tensor;
#ifndef ADD_NS
#define ADD_NS(RAW_OP) at::RAW_OP
#endif
#define ANYACCEL_LOWER_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define ANYACCEL_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define ANYACCEL_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define ANYACCEL_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_LOWER_PRECISION_FP(ANYACCEL_LOWER_PRECISION_FP)
  AT_FORALL_FP32(ANYACCEL_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(ANYACCEL_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(ANYACCEL_PROMOTE)
#undef ANYACCEL_LOWER_PRECISION_FP
#undef ANYACCEL_FP32
#undef ANYACCEL_FP32_SET_OPT_DTYPE
#undef ANYACCEL_PROMOTE
}

// ------------------------------------------------------------------------------------------
// Ops with a composite kernel: the CPU's own kernels instead, as on the CPU
// ------------------------------------------------------------------------------------------

// An op with a CPU kernel and a composite one reaches a backend without its own kernels through
// the composite: structured ops make the output from the meta function and call the out=
// kernel (some CPU out= kernels then resize it, warning that this is deprecated), others run a
// decomposition (native_layer_norm's rounds differently). Routing them to the fallback runs
// exactly the CPU's kernels, so results are the CPU's bit for bit.
void route_to_cpu_kernels() {
  // Ops whose composite kernel is the right one for a device (they make tensors with keys or
  // memory a CPU kernel would give the host).
  static const std::unordered_set<std::string> kKeepComposite = {
      "aten::_efficientzerotensor", "aten::_pin_memory", "aten::is_pinned", "aten::_to_copy",
      "aten::lift_fresh", "aten::empty_like", "aten::new_empty", "aten::new_empty_strided"};
  static std::unique_ptr<torch::Library> library;
  c10::Dispatcher& dispatcher = c10::Dispatcher::singleton();
  library = std::make_unique<torch::Library>(torch::Library::IMPL, "aten",
                                             c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) continue;
    const std::optional<c10::OperatorHandle> op = dispatcher.findOp(name);
    if (!op.has_value() || !op->hasKernelForDispatchKey(c10::DispatchKey::CPU) ||
        op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1) ||
        kKeepComposite.count(name.name) > 0 ||
        !(op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional) ||
          op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd))) {
      continue;
    }
    const std::string full = name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
    library->impl(full.c_str(), torch::CppFunction::makeFromBoxedFunction<&device_fallback>());
  }
}

// ------------------------------------------------------------------------------------------
// Configuration and the Python face
// ------------------------------------------------------------------------------------------

std::once_flag g_hooks_once;

void configure(int64_t device_count, int64_t capacity) {
  TORCH_CHECK(device_count >= 1 && device_count <= kMaxDevices, "device_count must be 1..",
              kMaxDevices, ", got ", device_count);
  const int current = g_device_count.load();
  if (current != 0) {
    TORCH_CHECK(current == device_count, "the emulated device is already configured with ",
                current, " devices in this process; it cannot become ", device_count);
    return;
  }
  for (int64_t index = 0; index < device_count; ++index) {
    g_allocators[index].index = static_cast<DeviceIndex>(index);
    g_memory[index].capacity = capacity;
    default_generators().push_back(
        at::make_generator<DeviceGeneratorImpl>(static_cast<DeviceIndex>(index)));
  }
  c10::SetAllocator(kDevice, &g_current_allocator);
  std::call_once(g_hooks_once, [] {
    at::RegisterPrivateUse1HooksInterface(new DeviceHooks());
    register_autocast();
    route_to_cpu_kernels();
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
  auto found = t_current_stream.find(static_cast<DeviceIndex>(index));
  return found == t_current_stream.end() ? 0 : found->second;
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

}  // namespace
}  // namespace emulated
}  // namespace anyaccel

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  namespace emulated = anyaccel::emulated;
  m.def("configure", &emulated::configure, "Set the device count and each device's capacity (-1: none)");
  m.def("device_count", [] { return emulated::g_device_count.load(); });
  m.def("set_capacity", &emulated::set_capacity);
  m.def("memory_counters", &emulated::memory_counters);
  m.def("reset_peak", &emulated::reset_peak);
  m.def("default_generator", &emulated::python_default_generator);
  m.def("current_device", &emulated::current_device);
  m.def("set_device", &emulated::set_device);
  m.def("current_stream_id", &emulated::current_stream_id);
  m.def("set_current_stream", &emulated::set_current_stream);
  m.def("host_view", &emulated::host_view);
  m.def("device_tensor_from_host", &emulated::device_tensor_from_host);
  m.def("is_pinned_address", &emulated::is_pinned_address);
}
