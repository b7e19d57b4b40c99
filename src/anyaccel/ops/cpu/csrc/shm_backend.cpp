// anyaccel_shm as a c10d Backend, for device specs that name other backends beside it
// ("cpu:anyaccel_shm,cuda:nccl").
//
// torch keeps a Python ProcessGroup returned by a backend plugin as the whole group, so every
// other device of the spec would be dropped; a c10d Backend is registered for its device only,
// next to the others. Python cannot subclass c10d::Backend (no constructor is bound), hence this
// small C++ class: the collectives anyaccel_shm runs itself are forwarded, with the GIL, to the
// Python ShmProcessGroup (shared memory, and its own gloo fallbacks and checks); every other call
// goes straight to that group's gloo backend, as the Python group's registered backend does.

#include <torch/extension.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <string>
#include <utility>
#include <vector>

namespace anyaccel {
namespace {

using c10d::Backend;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;
using Tensors = std::vector<at::Tensor>;
using TensorLists = std::vector<std::vector<at::Tensor>>;

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
      : Backend(rank, size), group_(std::move(group)), gloo_(std::move(gloo)) {}

  ~ShmBackend() override {
    // The Python group may be released at interpreter exit, when taking the GIL is unsafe.
    if (Py_IsInitialized() && !finalizing()) {
      py::gil_scoped_acquire gil;
      group_ = py::object();
    } else {
      group_.release();  // left to the process's end
    }
  }

  const std::string getBackendName() const override { return "anyaccel_shm"; }

  // -- run by the Python group (shared memory, or its own gloo fallback) --------------------
  WorkPtr broadcast(Tensors& tensors, const c10d::BroadcastOptions& opts) override {
    return call("broadcast", tensors, opts);
  }
  WorkPtr allreduce(Tensors& tensors, const c10d::AllreduceOptions& opts) override {
    return call("allreduce", tensors, opts);
  }
  WorkPtr allgather(TensorLists& outputs, Tensors& inputs,
                    const c10d::AllgatherOptions& opts) override {
    return call("allgather", outputs, inputs, opts);
  }
  WorkPtr _allgather_base(at::Tensor& output, at::Tensor& input,
                          const c10d::AllgatherOptions& opts) override {
    return call("_allgather_base", output, input, opts);
  }
  WorkPtr reduce_scatter(Tensors& outputs, TensorLists& inputs,
                         const c10d::ReduceScatterOptions& opts) override {
    return call("reduce_scatter", outputs, inputs, opts);
  }
  WorkPtr _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                               const c10d::ReduceScatterOptions& opts) override {
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

 private:
  template <typename... Args>
  WorkPtr call(const char* name, Args&... args) {
    py::gil_scoped_acquire gil;
    return group_.attr(name)(args...).template cast<WorkPtr>();
  }

  py::object group_;
  c10::intrusive_ptr<Backend> gloo_;
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
                             "The Python ShmProcessGroup that runs the collectives");
}
