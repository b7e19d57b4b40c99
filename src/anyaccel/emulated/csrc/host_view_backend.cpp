// A c10d Backend for a device whose memory is host memory (anyaccel's emulated accelerator):
// the collectives run on CPU views of the device tensors, through a CPU Backend.
//
// torch registers it for the device only (Backend.register_backend(name, creator,
// devices=[type])), as a vendor's own backend (hccl for npu) is registered: torch's dispatcher
// hands it the device's tensors, it checks that they are the device's, makes each a CPU tensor
// over the same memory (same sizes, strides and offset), and calls the same collective of the
// CPU Backend it wraps (anyaccel_shm's: shared memory, and gloo for the rest). The results land
// in the device tensors' memory; the returned Work's future holds the device tensors, as DDP
// needs. Collectives the CPU Backend may lack (the coalesced forms, the list all_to_all) are
// composed here from the ones every CPU Backend has, so none fails as "not supported".

#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>

#include "ddp_timer.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

namespace anyaccel {
namespace {

using c10d::Backend;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;
using FuturePtr = c10::intrusive_ptr<c10::ivalue::Future>;
using Tensors = std::vector<at::Tensor>;
using TensorLists = std::vector<std::vector<at::Tensor>>;

// A collective's Work over the CPU Backend's Works: done when they all are; its future holds
// the device tensors (the CPU views stay with the inner Works until those finish).
class HostViewWork : public c10d::Work {
 public:
  HostViewWork(std::vector<WorkPtr> inner, Tensors results)
      : inner_(std::move(inner)), results_(std::move(results)) {}

  bool isCompleted() override {
    for (auto& work : inner_) {
      if (!work->isCompleted()) return false;
    }
    return true;
  }

  std::exception_ptr exception() const override {
    for (const auto& work : inner_) {
      if (auto error = work->exception()) return error;
    }
    return nullptr;
  }

  int sourceRank() const override {  // recv from any source: the one inner recv's
    TORCH_CHECK(inner_.size() == 1, "sourceRank: this work is not a single receive");
    return inner_.front()->sourceRank();
  }

  Tensors result() override { return results_; }

  bool wait(std::chrono::milliseconds timeout) override {
    bool done = true;
    for (auto& work : inner_) done = work->wait(timeout) && done;
    return done;
  }

  void synchronize() override {
    for (auto& work : inner_) work->synchronize();
  }

  void abort() override {
    for (auto& work : inner_) work->abort();
  }

  FuturePtr getFuture() override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (future_) return future_;
    future_ = c10::make_intrusive<c10::ivalue::Future>(
        c10::ListType::create(c10::TensorType::get()));
    if (inner_.empty()) {
      future_->markCompleted(c10::IValue(results_));
      return future_;
    }
    // Completed with the device tensors when every inner future is, or with the first error.
    auto left = std::make_shared<std::atomic<size_t>>(inner_.size());
    auto error = std::make_shared<std::pair<std::mutex, std::exception_ptr>>();
    FuturePtr done = future_;
    Tensors results = results_;
    for (auto& work : inner_) {
      work->getFuture()->addCallback([left, error, done, results](c10::ivalue::Future& each) {
        if (each.hasError()) {
          std::lock_guard<std::mutex> guard(error->first);
          if (!error->second) error->second = each.exception_ptr();
        }
        if (left->fetch_sub(1) != 1) return;
        if (error->second) {
          done->setError(error->second);
        } else {
          done->markCompleted(c10::IValue(results));
        }
      });
    }
    return future_;
  }

 private:
  std::vector<WorkPtr> inner_;
  Tensors results_;
  std::mutex mutex_;
  FuturePtr future_;
};

// Backend::shutdown() is virtual on newer torch only: call the inner one's where it exists.
template <typename B>
auto shutdown_of(B& backend, int) -> decltype(backend.shutdown(), void()) {
  backend.shutdown();
}
template <typename B>
void shutdown_of(B&, long) {}

class HostViewBackend : public Backend {
 public:
  HostViewBackend(int rank, int size, const std::string& device_type, std::string name,
                  c10::intrusive_ptr<Backend> host, const std::string& node)
      : Backend(rank, size),
        device_type_(c10::Device(device_type).type()),
        device_name_(device_type),
        name_(std::move(name)),
        host_(std::move(host)),
        node_(static_cast<int64_t>(std::hash<std::string>{}(node))),
        // the host is one device that every rank shares (the class on CPU tensors, in tests)
        placement_checked_(device_type_ == c10::DeviceType::CPU) {}

  const std::string getBackendName() const override { return name_; }

  // -- one tensor (list) in, the same collective of the CPU Backend -------------------------
  WorkPtr broadcast(Tensors& tensors, const c10d::BroadcastOptions& opts) override {
    auto views = host_views("broadcast", tensors);
    return record(one(host_->broadcast(views, opts), tensors));
  }
  WorkPtr allreduce(Tensors& tensors, const c10d::AllreduceOptions& opts) override {
    auto views = host_views("allreduce", tensors);
    return record(one(host_->allreduce(views, opts), tensors));
  }
  WorkPtr reduce(Tensors& tensors, const c10d::ReduceOptions& opts) override {
    auto views = host_views("reduce", tensors);
    return record(one(host_->reduce(views, opts), tensors));
  }
  WorkPtr allgather(TensorLists& outputs, Tensors& inputs,
                    const c10d::AllgatherOptions& opts) override {
    auto out = host_views("allgather", outputs);
    auto in = host_views("allgather", inputs);
    return record(one(host_->allgather(out, in, opts), flat(outputs)));
  }
  WorkPtr _allgather_base(at::Tensor& output, at::Tensor& input,
                          const c10d::AllgatherOptions& opts) override {
    auto out = host_view("all_gather_into_tensor", output, "output");
    auto in = host_view("all_gather_into_tensor", input, "input");
    return record(one(host_->_allgather_base(out, in, opts), {output}));
  }
  WorkPtr gather(TensorLists& outputs, Tensors& inputs, const c10d::GatherOptions& opts) override {
    auto out = host_views("gather", outputs);
    auto in = host_views("gather", inputs);
    return record(one(host_->gather(out, in, opts), flat(outputs)));
  }
  WorkPtr scatter(Tensors& outputs, TensorLists& inputs,
                  const c10d::ScatterOptions& opts) override {
    auto out = host_views("scatter", outputs);
    auto in = host_views("scatter", inputs);
    return record(one(host_->scatter(out, in, opts), outputs));
  }
  WorkPtr reduce_scatter(Tensors& outputs, TensorLists& inputs,
                         const c10d::ReduceScatterOptions& opts) override {
    auto out = host_views("reduce_scatter", outputs);
    auto in = host_views("reduce_scatter", inputs);
    return record(one(host_->reduce_scatter(out, in, opts), outputs));
  }
  WorkPtr _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                               const c10d::ReduceScatterOptions& opts) override {
    auto out = host_view("reduce_scatter_tensor", output, "output");
    auto in = host_view("reduce_scatter_tensor", input, "input");
    return record(one(host_->_reduce_scatter_base(out, in, opts), {output}));
  }
  WorkPtr alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
                        std::vector<int64_t>& input_splits,
                        const c10d::AllToAllOptions& opts) override {
    auto out = host_view("all_to_all_single", output, "output");
    auto in = host_view("all_to_all_single", input, "input");
    return record(
        one(host_->alltoall_base(out, in, output_splits, input_splits, opts), {output}));
  }
  WorkPtr barrier(const c10d::BarrierOptions& opts) override {
    return record(c10::make_intrusive<HostViewWork>(std::vector<WorkPtr>{host_->barrier(opts)},
                                                    Tensors{}));
  }
  WorkPtr send(Tensors& tensors, int dst, int tag) override {
    auto views = host_views("send", tensors);
    return record(one(host_->send(views, dst, tag), tensors));
  }
  WorkPtr recv(Tensors& tensors, int src, int tag) override {
    auto views = host_views("recv", tensors);
    return record(one(host_->recv(views, src, tag), tensors));
  }
  WorkPtr recvAnysource(Tensors& tensors, int tag) override {
    auto views = host_views("recv", tensors);
    return record(one(host_->recvAnysource(views, tag), tensors));
  }
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override {
    host_->monitoredBarrier(opts, wait_all_ranks);
  }
  void setSequenceNumberForGroup() override { host_->setSequenceNumberForGroup(); }
  uint64_t getSequenceNumberForGroup() override { return host_->getSequenceNumberForGroup(); }

  // -- composed from the single collectives (a CPU Backend may not have these forms) ---------
  WorkPtr allreduce_coalesced(Tensors& tensors,
                              const c10d::AllreduceCoalescedOptions& opts) override {
    std::vector<WorkPtr> works;
    for (auto& tensor : tensors) {
      c10d::AllreduceOptions single;
      single.reduceOp = opts.reduceOp;
      single.timeout = opts.timeout;
      Tensors views{host_view("allreduce_coalesced", tensor, nth("tensor", works.size()))};
      works.push_back(host_->allreduce(views, single));
    }
    return record(c10::make_intrusive<HostViewWork>(std::move(works), tensors));
  }
  WorkPtr allgather_coalesced(TensorLists& outputs, Tensors& inputs,
                              const c10d::AllgatherOptions& opts) override {
    TORCH_CHECK(outputs.size() == inputs.size(), name_, " allgather_coalesced: ",
                outputs.size(), " output lists for ", inputs.size(), " inputs");
    std::vector<WorkPtr> works;
    for (size_t i = 0; i < inputs.size(); ++i) {
      TensorLists out{host_views("allgather_coalesced", outputs[i])};
      Tensors in{host_view("allgather_coalesced", inputs[i], nth("input", i))};
      works.push_back(host_->allgather(out, in, opts));
    }
    return record(c10::make_intrusive<HostViewWork>(std::move(works), flat(outputs)));
  }
  WorkPtr allgather_into_tensor_coalesced(Tensors& outputs, Tensors& inputs,
                                          const c10d::AllgatherOptions& opts) override {
    TORCH_CHECK(outputs.size() == inputs.size(), name_, " allgather_into_tensor_coalesced: ",
                outputs.size(), " outputs for ", inputs.size(), " inputs");
    std::vector<WorkPtr> works;
    for (size_t i = 0; i < inputs.size(); ++i) {
      auto out = host_view("allgather_into_tensor_coalesced", outputs[i], nth("output", i));
      auto in = host_view("allgather_into_tensor_coalesced", inputs[i], nth("input", i));
      works.push_back(host_->_allgather_base(out, in, opts));
    }
    return record(c10::make_intrusive<HostViewWork>(std::move(works), outputs));
  }
  WorkPtr reduce_scatter_tensor_coalesced(Tensors& outputs, Tensors& inputs,
                                          const c10d::ReduceScatterOptions& opts) override {
    TORCH_CHECK(outputs.size() == inputs.size(), name_, " reduce_scatter_tensor_coalesced: ",
                outputs.size(), " outputs for ", inputs.size(), " inputs");
    std::vector<WorkPtr> works;
    for (size_t i = 0; i < inputs.size(); ++i) {
      auto out = host_view("reduce_scatter_tensor_coalesced", outputs[i], nth("output", i));
      auto in = host_view("reduce_scatter_tensor_coalesced", inputs[i], nth("input", i));
      works.push_back(host_->_reduce_scatter_base(out, in, opts));
    }
    return record(c10::make_intrusive<HostViewWork>(std::move(works), outputs));
  }
  // The list all_to_all (gloo has none): one all_to_all_single over the flattened tensors,
  // split by their sizes, then copied into the outputs (a collective: every rank waits here).
  WorkPtr alltoall(Tensors& outputs, Tensors& inputs, const c10d::AllToAllOptions& opts) override {
    auto out_views = host_views("all_to_all", outputs);
    auto in_views = host_views("all_to_all", inputs);
    TORCH_CHECK(!inputs.empty() && !outputs.empty(), name_, " all_to_all: no tensors");
    std::vector<int64_t> in_splits, out_splits;
    Tensors flat_in;
    for (auto& view : in_views) {
      TORCH_CHECK(view.scalar_type() == in_views.front().scalar_type(), name_,
                  " all_to_all: the input tensors have different dtypes");
      in_splits.push_back(view.numel());
      flat_in.push_back(view.reshape({-1}));
    }
    for (auto& view : out_views) out_splits.push_back(view.numel());
    auto source = at::cat(flat_in);
    auto target = at::empty({std::accumulate(out_splits.begin(), out_splits.end(), int64_t{0})},
                            out_views.front().options());
    // copies: gloo keeps the split vectors by moving them out of the caller's
    std::vector<int64_t> out_counts = out_splits, in_counts = in_splits;
    host_->alltoall_base(target, source, out_counts, in_counts, opts)->wait();
    int64_t offset = 0;
    for (size_t i = 0; i < out_views.size(); ++i) {
      out_views[i].copy_(target.narrow(0, offset, out_splits[i]).view(out_views[i].sizes()));
      offset += out_splits[i];
    }
    return record(c10::make_intrusive<HostViewWork>(std::vector<WorkPtr>{}, outputs));
  }

  // -- coalescing: the Works issued between start and end, as one ---------------------------
  void startCoalescing() override {
    std::lock_guard<std::mutex> lock(mutex_);
    coalescing_ = true;
    coalesced_.clear();
  }
  WorkPtr endCoalescing() override {
    std::vector<WorkPtr> works;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      coalescing_ = false;
      works.swap(coalesced_);
    }
    return c10::make_intrusive<HostViewWork>(std::move(works), Tensors{});
  }

  // Virtual in newer torch's Backend (destroy_process_group calls it), absent in older torch:
  // no `override`, so the same source builds on both.
  void shutdown() { shutdown_of(*host_, 0); }

  c10::intrusive_ptr<Backend> host() const { return host_; }
  std::string device_type() const { return device_name_; }

 private:
  // The CPU tensor over a device tensor's memory (same geometry); keeps that memory alive.
  at::Tensor host_view(const char* op, const at::Tensor& tensor, const std::string& which) {
    TORCH_CHECK(tensor.device().type() == device_type_, name_, " ", op, ": the ", which,
                " is on ", tensor.device(), ", not on the ", device_name_, " device: the ", name_,
                " backend takes ", device_name_, " tensors, as on the real hardware. Move it with "
                ".to('", device_name_, "'), or give the group a CPU backend for CPU tensors "
                "(init_process_group('cpu:gloo,", device_name_, ":", name_, "'))");
    TORCH_CHECK(tensor.layout() == at::kStrided, name_, " ", op, ": the ", which,
                " has layout ", tensor.layout(), "; the emulated ", device_name_,
                " collectives take dense (strided) tensors");
    if (!placement_checked_.load(std::memory_order_acquire)) check_placement(op, tensor);
    // The device's own host view keeps strict device memory open while the view lives.
    if (device_type_ != c10::DeviceType::CPU) {
      const auto device_view =
          c10::Dispatcher::singleton().findSchema({"anyaccel_emulated::host_view", ""});
      if (device_view.has_value()) {
        return device_view->typed<at::Tensor(const at::Tensor&)>().redispatch(
            c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), tensor);
      }
    }
    c10::Storage storage = tensor.storage();
    return at::from_blob(
        tensor.data_ptr(), tensor.sizes(), tensor.strides(), [storage](void*) {},
        tensor.options().device(at::kCPU));
  }
  // Two ranks of one node on one device: refused at the group's first collective, as NCCL
  // refuses it ("Duplicate GPU detected") when it builds the communicator. The ranks exchange
  // (node, device index) once through the CPU Backend; every rank sees the same table, so every
  // rank raises the same error (none is left waiting). Point-to-point calls are not collective
  // (a rank's peer may not be sending yet): they leave the check to the first collective.
  void check_placement(const char* op, const at::Tensor& tensor) {
    const std::string name(op);
    if (name == "send" || name == "recv") return;
    std::lock_guard<std::mutex> lock(placement_mutex_);
    if (placement_checked_.load(std::memory_order_relaxed)) return;
    const int64_t index = tensor.device().index();
    Tensors mine{at::tensor(std::vector<int64_t>{node_, index}, at::kLong)};
    TensorLists all(1);
    for (int r = 0; r < size_; ++r) all[0].push_back(at::empty({2}, at::kLong));
    host_->allgather(all, mine, c10d::AllgatherOptions())->wait();
    for (int first = 0; first < size_; ++first) {
      const int64_t* a = all[0][first].const_data_ptr<int64_t>();
      for (int second = first + 1; second < size_; ++second) {
        const int64_t* b = all[0][second].const_data_ptr<int64_t>();
        TORCH_CHECK(a[0] != b[0] || a[1] != b[1], name_, " ", op,
                    ": duplicate device detected: rank ", second, " and rank ", first,
                    " both on ", device_name_, ":", a[1],
                    " of one node (NCCL refuses this: \"Duplicate GPU detected\"). Give each "
                    "rank of a node a device of its own: torch.", device_name_,
                    ".set_device(local_rank) and DDP(model.to(f'", device_name_,
                    ":{local_rank}'), device_ids=[local_rank])");
      }
    }
    placement_checked_.store(true, std::memory_order_release);
  }
  static std::string nth(const char* what, size_t index) {
    return std::string(what) + " " + std::to_string(index);
  }
  Tensors host_views(const char* op, const Tensors& tensors) {
    Tensors views;
    views.reserve(tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      views.push_back(host_view(op, tensors[i], nth("tensor", i)));
    }
    return views;
  }
  TensorLists host_views(const char* op, const TensorLists& lists) {
    TensorLists views;
    views.reserve(lists.size());
    for (const auto& list : lists) views.push_back(host_views(op, list));
    return views;
  }
  static Tensors flat(const TensorLists& lists) {
    Tensors all;
    for (const auto& list : lists) all.insert(all.end(), list.begin(), list.end());
    return all;
  }
  static WorkPtr one(WorkPtr inner, Tensors results) {
    return c10::make_intrusive<HostViewWork>(std::vector<WorkPtr>{std::move(inner)},
                                             std::move(results));
  }
  WorkPtr record(WorkPtr work) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (coalescing_) coalesced_.push_back(work);
    return work;
  }

  c10::DeviceType device_type_;
  std::string device_name_;
  std::string name_;
  c10::intrusive_ptr<Backend> host_;
  int64_t node_;  // a hash of the node's identity (host, boot, launcher node)
  std::mutex placement_mutex_;
  std::atomic<bool> placement_checked_;
  std::mutex mutex_;
  bool coalescing_ = false;
  std::vector<WorkPtr> coalesced_;
};

}  // namespace
}  // namespace anyaccel

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "A c10d Backend for a host-memory device: collectives on CPU views of its tensors";
  py::class_<anyaccel::HostViewBackend, c10d::Backend,
             c10::intrusive_ptr<anyaccel::HostViewBackend>>(m, "HostViewBackend")
      .def(py::init<int, int, const std::string&, std::string, c10::intrusive_ptr<c10d::Backend>,
                    const std::string&>(),
           py::arg("rank"), py::arg("size"), py::arg("device_type"), py::arg("name"),
           py::arg("host"), py::arg("node") = std::string())
      .def_property_readonly("host", &anyaccel::HostViewBackend::host,
                             "The CPU Backend that runs the collectives")
      .def_property_readonly("device_type", &anyaccel::HostViewBackend::device_type,
                             "The device type whose tensors it takes");
  m.def("register_ddp_timer", &anyaccel::register_ddp_timer,
        "Give DDP a timer for PrivateUse1 tensors (its runtime statistics); false if one was "
        "registered already");
  anyaccel::register_ddp_timer();
}
