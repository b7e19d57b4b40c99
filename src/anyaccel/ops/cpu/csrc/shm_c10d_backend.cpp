// anyaccel_shm as a c10d Backend: the form torch registers for the CPU, alone or beside other
// devices' backends ("cpu:anyaccel_shm,cuda:nccl").
//
// torch keeps a Python ProcessGroup returned by a backend plugin as the whole group, so every
// other device of the spec would be dropped; a c10d Backend is registered for its device only,
// next to the others. Python cannot subclass c10d::Backend (no constructor is bound), hence this
// small C++ class. all_reduce (every DDP bucket), all_gather_into_tensor and
// reduce_scatter_tensor (every ZeRO-3 and FSDP step) and broadcast run here without Python:
// straight into the shared-memory communicator (through the C entries its module hands over)
// and back with a completed Work. The list forms of all_gather and reduce_scatter, barrier, and
// every call the kernel cannot take as it comes (other dtypes and ops, several or
// non-contiguous tensors, no segment) are forwarded with the GIL to the Python ShmProcessGroup
// (shared memory, and its own gloo fallbacks and checks); every other call goes straight to
// that group's gloo backend, as the Python group's registered backend does.

#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <array>
#include <iterator>
#include <atomic>
#include <chrono>
#include <map>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "shm_contract.h"

namespace anyaccel {
namespace {

using c10d::Backend;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;
using Tensors = std::vector<at::Tensor>;
using TensorLists = std::vector<std::vector<at::Tensor>>;

// A CPU tensor the kernel can read or write as one block of memory.
bool plain(const at::Tensor& tensor) {
  return tensor.device().is_cpu() && tensor.layout() == at::kStrided && tensor.is_contiguous();
}

// A collective that already ran (synchronously): wait() returns at once, the future holds the
// outputs (DDP's comm hooks read it).
class CompletedWork : public c10d::Work {
 public:
  CompletedWork(Tensors outputs, c10d::OpType type)
      : Work(-1, type), outputs_(std::move(outputs)) {}
  bool isCompleted() override { return true; }
  bool wait(std::chrono::milliseconds /*timeout*/) override { return true; }
  Tensors result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    auto future = c10::make_intrusive<c10::ivalue::Future>(
        c10::ListType::create(c10::TensorType::get()));
    future->markCompleted(c10::IValue(outputs_));
    return future;
  }

 private:
  Tensors outputs_;
};

// The kernel's dtype code (shm_contract.h's DType), or -1 where it has none.
int dtype_code(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return int(DType::kFloat32);
    case at::kBFloat16: return int(DType::kBFloat16);
    case at::kHalf: return int(DType::kFloat16);
    default: return -1;
  }
}

// The kernel's op code (shm_contract.h's Op), or -1 (PREMUL_SUM, bitwise ops: the Python path).
int op_code(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return int(Op::kSum);
    case c10d::ReduceOp::PRODUCT: return int(Op::kProduct);
    case c10d::ReduceOp::MIN: return int(Op::kMin);
    case c10d::ReduceOp::MAX: return int(Op::kMax);
    case c10d::ReduceOp::AVG: return int(Op::kAvg);
    default: return -1;
  }
}

bool finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

class ShmBackend : public Backend {
 public:
  ShmBackend(int rank, int size, py::object group, c10::intrusive_ptr<Backend> gloo)
      : Backend(rank, size), group_(std::move(group)), gloo_(std::move(gloo)) {
    // The group's communicator (None: no shared segment, every call goes to the group), held
    // so that it outlives this backend's calls; the group closes it on shutdown, after which
    // the entry answers "unusable" and the group says why.
    py::object shm = group_.attr("shm");
    communicator_ = shm.attr("communicator");
    tags_.fill(-1);
    if (!communicator_.is_none()) {
      handle_ = reinterpret_cast<void*>(communicator_.attr("handle").cast<std::uintptr_t>());
      timeout_ = shm.attr("timeout").cast<double>();
      threads_ = shm.attr("threads").cast<int>();
      // the kernel's C entries, and the group's dtype tags (so both paths tag a call alike)
      auto entries =
          group_.attr("native_entry_addresses").cast<std::map<std::string, std::uintptr_t>>();
      entry_ = reinterpret_cast<NativeAllReduce>(entries.at(name_of(kAllReduce)));
      all_gather_ = reinterpret_cast<NativeAllGather>(entries.at(name_of(kAllGather)));
      broadcast_ = reinterpret_cast<NativeBroadcast>(entries.at(name_of(kBroadcast)));
      reduce_scatter_ =
          reinterpret_cast<NativeReduceScatter>(entries.at(name_of(kReduceScatter)));
      for (py::handle item : group_.attr("native_dtype_tags")) {
        auto pair = item.cast<std::pair<at::Tensor, int>>();
        tags_[static_cast<size_t>(pair.first.scalar_type())] = pair.second;
      }
    }
  }

  ~ShmBackend() override {
    // The Python group may be released at interpreter exit, when taking the GIL is unsafe.
    if (Py_IsInitialized() && !finalizing()) {
      py::gil_scoped_acquire gil;
      communicator_ = py::object();
      group_ = py::object();
    } else {
      communicator_.release();  // left to the process's end
      group_.release();
    }
  }

  const std::string getBackendName() const override { return "anyaccel_shm"; }

  // -- run by the Python group (shared memory, or its own gloo fallback) --------------------
  WorkPtr broadcast(Tensors& tensors, const c10d::BroadcastOptions& opts) override {
    if (broadcast_ != nullptr && tensors.size() == 1 && plain(tensors[0]) &&
        opts.rootTensor == 0 && opts.rootRank >= 0 && opts.rootRank < size_) {
      at::Tensor& tensor = tensors[0];
      const int tag = tag_of(tensor);
      if (tag >= 0) {
        char message[1024];
        const int done = broadcast_(handle_, tensor.data_ptr(),
                                    tensor.numel() * int64_t(tensor.element_size()),
                                    int(opts.rootRank), tag, timeout_, threads_, message,
                                    sizeof message);
        if (done == kNativeDone) {
          return completed(kBroadcast, tensors, c10d::OpType::BROADCAST);
        }
        if (done == kNativeError) fail("broadcast", message);
      }
    }
    return call("broadcast", tensors, opts);
  }
  WorkPtr allreduce(Tensors& tensors, const c10d::AllreduceOptions& opts) override {
    if (entry_ != nullptr && tensors.size() == 1) {
      at::Tensor& tensor = tensors[0];
      const int dtype = dtype_code(tensor.scalar_type());
      const int op = op_code(opts.reduceOp);
      if (dtype >= 0 && op >= 0 && tensor.device().is_cpu() && tensor.layout() == at::kStrided &&
          tensor.is_contiguous()) {
        char message[1024];
        const int done = entry_(handle_, tensor.data_ptr(), tensor.numel(), dtype, op, timeout_,
                                threads_, message, sizeof message);
        if (done == kNativeDone) return completed(kAllReduce, tensors, c10d::OpType::ALLREDUCE);
        if (done == kNativeError) fail("all_reduce", message);
        // kNativeUnusable: closed or failed before the call; the group says which
      }
    }
    return call("allreduce", tensors, opts);
  }
  WorkPtr allgather(TensorLists& outputs, Tensors& inputs,
                    const c10d::AllgatherOptions& opts) override {
    return call("allgather", outputs, inputs, opts);
  }
  WorkPtr _allgather_base(at::Tensor& output, at::Tensor& input,
                          const c10d::AllgatherOptions& opts) override {
    const int tag = tag_of(input);
    if (all_gather_ != nullptr && tag >= 0 && plain(input) && plain(output) &&
        output.scalar_type() == input.scalar_type() &&
        output.numel() == input.numel() * int64_t(size_)) {
      char message[1024];
      const int done = all_gather_(handle_, input.data_ptr(), output.data_ptr(),
                                   input.numel() * int64_t(input.element_size()), tag, timeout_,
                                   threads_, message, sizeof message);
      if (done == kNativeDone) {
        return completed(kAllGather, {output}, c10d::OpType::_ALLGATHER_BASE);
      }
      if (done == kNativeError) fail("all_gather", message);
    }
    return call("_allgather_base", output, input, opts);
  }
  WorkPtr reduce_scatter(Tensors& outputs, TensorLists& inputs,
                         const c10d::ReduceScatterOptions& opts) override {
    return call("reduce_scatter", outputs, inputs, opts);
  }
  WorkPtr _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                               const c10d::ReduceScatterOptions& opts) override {
    const int dtype = dtype_code(input.scalar_type());
    const int op = op_code(opts.reduceOp);
    if (reduce_scatter_ != nullptr && dtype >= 0 && op >= 0 && plain(input) && plain(output) &&
        output.scalar_type() == input.scalar_type() &&
        input.numel() == output.numel() * int64_t(size_)) {
      char message[1024];
      const int done = reduce_scatter_(handle_, input.data_ptr(), output.data_ptr(),
                                       output.numel(), dtype, op, timeout_, threads_, message,
                                       sizeof message);
      if (done == kNativeDone) {
        return completed(kReduceScatter, {output}, c10d::OpType::_REDUCE_SCATTER_BASE);
      }
      if (done == kNativeError) fail("reduce_scatter", message);
    }
    return call("_reduce_scatter_base", output, input, opts);
  }
  WorkPtr barrier(const c10d::BarrierOptions& opts) override { return call("barrier", opts); }

  // -- everything else: the group's gloo backend --------------------------------------------
  WorkPtr allreduce_coalesced(Tensors& tensors,
                              const c10d::AllreduceCoalescedOptions& opts) override {
    return gloo_->allreduce_coalesced(tensors, opts);
  }
  WorkPtr reduce(Tensors& tensors, const c10d::ReduceOptions& opts) override {
    return gloo_->reduce(tensors, opts);
  }
  WorkPtr allgather_coalesced(TensorLists& outputs, Tensors& inputs,
                              const c10d::AllgatherOptions& opts) override {
    return gloo_->allgather_coalesced(outputs, inputs, opts);
  }
  WorkPtr allgather_into_tensor_coalesced(Tensors& outputs, Tensors& inputs,
                                          const c10d::AllgatherOptions& opts) override {
    return gloo_->allgather_into_tensor_coalesced(outputs, inputs, opts);
  }
  WorkPtr gather(TensorLists& outputs, Tensors& inputs, const c10d::GatherOptions& opts) override {
    return gloo_->gather(outputs, inputs, opts);
  }
  WorkPtr scatter(Tensors& outputs, TensorLists& inputs,
                  const c10d::ScatterOptions& opts) override {
    return gloo_->scatter(outputs, inputs, opts);
  }
  WorkPtr reduce_scatter_tensor_coalesced(Tensors& outputs, Tensors& inputs,
                                          const c10d::ReduceScatterOptions& opts) override {
    return gloo_->reduce_scatter_tensor_coalesced(outputs, inputs, opts);
  }
  WorkPtr alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
                        std::vector<int64_t>& input_splits,
                        const c10d::AllToAllOptions& opts) override {
    return gloo_->alltoall_base(output, input, output_splits, input_splits, opts);
  }
  WorkPtr alltoall(Tensors& outputs, Tensors& inputs, const c10d::AllToAllOptions& opts) override {
    return gloo_->alltoall(outputs, inputs, opts);
  }
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override {
    gloo_->monitoredBarrier(opts, wait_all_ranks);
  }
  void setSequenceNumberForGroup() override { gloo_->setSequenceNumberForGroup(); }
  uint64_t getSequenceNumberForGroup() override { return gloo_->getSequenceNumberForGroup(); }
  WorkPtr send(Tensors& tensors, int dst, int tag) override { return gloo_->send(tensors, dst, tag); }
  WorkPtr recv(Tensors& tensors, int src, int tag) override { return gloo_->recv(tensors, src, tag); }
  WorkPtr recvAnysource(Tensors& tensors, int tag) override {
    return gloo_->recvAnysource(tensors, tag);
  }

  // Virtual in newer torch's Backend (destroy_process_group calls it), absent in older torch:
  // no `override`, so the same source builds on both.
  void shutdown() {
    if (!Py_IsInitialized()) return;
    py::gil_scoped_acquire gil;
    if (group_) group_.attr("shutdown")();
  }

  py::object group() const { return group_; }
  int64_t native_all_reduces() const {
    return native_[counter(kAllReduce)].load(std::memory_order_relaxed);
  }
  std::map<std::string, int64_t> native_calls() const {
    std::map<std::string, int64_t> counts;
    for (size_t kind = 0; kind < kKinds; ++kind)
      counts[kCollectives[kind].name] = native_[kind].load(std::memory_order_relaxed);
    return counts;
  }

 private:
  static constexpr size_t kKinds = std::size(kCollectives);

  // The counter of collective `code` (its place in shm_contract.h's kCollectives).
  static size_t counter(int32_t code) {
    size_t kind = 0;
    while (kind + 1 < kKinds && kCollectives[kind].code != code) ++kind;
    return kind;
  }

  // The name of collective `code`, which keys its C entry.
  static std::string name_of(int32_t code) { return kCollectives[counter(code)].name; }

  // A native call that ran: counted, and a completed Work holding its outputs.
  WorkPtr completed(int32_t collective, Tensors outputs, c10d::OpType type) {
    native_[counter(collective)].fetch_add(1, std::memory_order_relaxed);
    return c10::make_intrusive<CompletedWork>(std::move(outputs), type);
  }

  // The group's byte-collective tag of `tensor`'s dtype, or -1 (then the group's path).
  int tag_of(const at::Tensor& tensor) const {
    const auto index = static_cast<size_t>(tensor.scalar_type());
    return index < tags_.size() ? tags_[index] : -1;
  }

  // The group's CollectiveError for a failed native call, raised into the caller's Python.
  [[noreturn]] void fail(const char* name, const char* message) {
    py::gil_scoped_acquire gil;
    group_.attr("native_failure")(name, message);  // raises
    throw std::runtime_error(std::string("anyaccel_shm ") + name + " failed: " + message);
  }

  template <typename... Args>
  WorkPtr call(const char* name, Args&... args) {
    py::gil_scoped_acquire gil;
    return group_.attr(name)(args...).template cast<WorkPtr>();
  }

  py::object group_;
  c10::intrusive_ptr<Backend> gloo_;
  py::object communicator_;
  void* handle_ = nullptr;
  NativeAllReduce entry_ = nullptr;
  double timeout_ = 0;
  int threads_ = 1;
  NativeAllGather all_gather_ = nullptr;
  NativeBroadcast broadcast_ = nullptr;
  NativeReduceScatter reduce_scatter_ = nullptr;
  // byte-collective tag by ScalarType; -1: none, the group's path
  std::array<int, static_cast<size_t>(at::ScalarType::NumOptions)> tags_{};
  // calls run here, without Python, by kind (atomic: threads may call the group at once)
  std::atomic<int64_t> native_[kKinds] = {};
};

}  // namespace
}  // namespace anyaccel

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "anyaccel_shm as a c10d Backend beside other devices' backends";
  py::class_<anyaccel::ShmBackend, c10d::Backend, c10::intrusive_ptr<anyaccel::ShmBackend>>(
      m, "ShmBackend")
      .def(py::init<int, int, py::object, c10::intrusive_ptr<c10d::Backend>>(), py::arg("rank"),
           py::arg("size"), py::arg("group"), py::arg("gloo"))
      .def_property_readonly("group", &anyaccel::ShmBackend::group,
                             "The Python ShmProcessGroup that runs the other collectives")
      .def_property_readonly("native_calls", &anyaccel::ShmBackend::native_calls,
                             "How many calls of each collective ran in C++, without Python")
      .def_property_readonly("native_all_reduces", &anyaccel::ShmBackend::native_all_reduces,
                             "How many all_reduce calls ran in C++, without Python");
}
