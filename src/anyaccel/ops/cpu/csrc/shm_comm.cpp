// anyaccel shared-memory collectives for the ranks of one node: all-reduce, and (on the same
// slots and sequence) all-gather, reduce-scatter and broadcast.
//
// One segment per process group (a memfd the Python side creates and shares), laid out as a
// header, one control block per rank, then two data slots per rank. A collective moves the
// tensor through the slots chunk by chunk: each rank copies its chunk into its slot, publishes
// a sequence number, waits until every rank has published it, then reduces all slots into its
// own tensor in rank order (so every rank gets the same bits). Two slots per rank alternate, so
// a rank that runs ahead writes the other slot while its peers still read this one; a rank
// reaches slot reuse only after every peer published the next sequence, i.e. finished reading.
//
// Each round also publishes the whole call's size, dtype and op, so ranks that disagree find
// out in the first round, before anything is reduced into a tensor (a call that agreed on the
// first chunk only would otherwise pair its rest with a peer's next call).
//
// Waiting never blocks forever: it checks a deadline, the peers' "failed" flags, and whether
// each peer process still exists (re-reading the peer's progress after finding it gone: a
// peer that published and then exited finished correctly), and throws an error naming the
// rank otherwise. One Communicator runs one collective at a time: every call holds its mutex,
// whether it comes from Python or from anyaccel's c10d Backend (native_all_reduce, no Python).
//
// Kernels take raw addresses (validated on the Python side), so the build needs only pybind11.
// The module knows nothing of Python above it: it exports the codes of shm_contract.h and the C
// entries for anyaccel's c10d Backend; DeepSpeed's ShareMemCommBuilder interface is Python's
// (anyaccel.ops.cpu.shm_comm and anyaccel.integrations.deepspeed).
//
// One translation unit, one header per concern:
//   shm_contract.h      the codes and C entries shared with Python and shm_c10d_backend.cpp
//   shm_reduce.h        the reductions (fp32, bf16, fp16; each op), in rank order
//   shm_wait.h          waiting for peers: spin, yield, futex; peer liveness
//   shm_communicator.h  the segment's layout and the Communicator running each collective
// Why the waits and copies are tuned as they are, with the figures: docs/distributed.md,
// "How the shared-memory kernel is tuned".
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "shm_communicator.h"
#include "shm_contract.h"
#include "simd.h"

namespace py = pybind11;

namespace anyaccel {
namespace {

// The C function anyaccel's c10d Backend calls (its address handed over by the module, so the
// two extensions share no C++ type): Communicator::all_reduce_native on `communicator`.
int native_all_reduce(void* communicator, void* data, int64_t numel, int dtype_code, int op_code,
                      double timeout, int threads, char* message, size_t capacity) noexcept {
  return static_cast<Communicator*>(communicator)
      ->all_reduce_native(data, numel, dtype_code, op_code, timeout, threads, message, capacity);
}

// all_gather into one output (rank r's `nbytes` at out + r * nbytes), for the c10d Backend.
int native_all_gather(void* communicator, const void* in, void* out, int64_t nbytes, int tag,
                      double timeout, int threads, char* message, size_t capacity) noexcept {
  auto* self = static_cast<Communicator*>(communicator);
  return self->run_native(
      [&] {
        std::vector<uintptr_t> outputs;
        const int64_t ranks = self->world_size();
        outputs.reserve(size_t(ranks));
        for (int64_t r = 0; r < ranks; ++r)
          outputs.push_back(reinterpret_cast<uintptr_t>(out) + uintptr_t(r * nbytes));
        self->all_gather(reinterpret_cast<uintptr_t>(in), outputs, nbytes, tag, timeout, threads);
      },
      message, capacity);
}

// broadcast of `nbytes` at `data` from rank `root`, for the c10d Backend.
int native_broadcast(void* communicator, void* data, int64_t nbytes, int root, int tag,
                     double timeout, int threads, char* message, size_t capacity) noexcept {
  auto* self = static_cast<Communicator*>(communicator);
  return self->run_native(
      [&] {
        self->broadcast(reinterpret_cast<uintptr_t>(data), nbytes, root, tag, timeout, threads);
      },
      message, capacity);
}

// reduce_scatter of `numel` elements per rank into `out`, for the c10d Backend.
int native_reduce_scatter(void* communicator, const void* in, void* out, int64_t numel, int dtype,
                          int op, double timeout, int threads, char* message,
                          size_t capacity) noexcept {
  auto* self = static_cast<Communicator*>(communicator);
  return self->run_native(
      [&] {
        self->reduce_scatter(reinterpret_cast<uintptr_t>(in), reinterpret_cast<uintptr_t>(out),
                             numel, dtype, op, timeout, threads);
      },
      message, capacity);
}

// Each entry has the type shm_contract.h declares (which shm_c10d_backend.cpp casts its address to).
static_assert(std::is_same_v<decltype(&native_all_reduce), NativeAllReduce>);
static_assert(std::is_same_v<decltype(&native_all_gather), NativeAllGather>);
static_assert(std::is_same_v<decltype(&native_broadcast), NativeBroadcast>);
static_assert(std::is_same_v<decltype(&native_reduce_scatter), NativeReduceScatter>);

// The entries by collective name (shm_contract.h's kCollectives), as addresses.
std::map<std::string, std::uintptr_t> native_entry_addresses() {
  std::map<std::string, std::uintptr_t> entries;
  for (const CollectiveCode& collective : kCollectives) {
    std::uintptr_t address = 0;
    switch (collective.code) {
      case kAllReduce: address = reinterpret_cast<std::uintptr_t>(&native_all_reduce); break;
      case kAllGather: address = reinterpret_cast<std::uintptr_t>(&native_all_gather); break;
      case kBroadcast: address = reinterpret_cast<std::uintptr_t>(&native_broadcast); break;
      case kReduceScatter:
        address = reinterpret_cast<std::uintptr_t>(&native_reduce_scatter);
        break;
      default: continue;
    }
    entries[collective.name] = address;
  }
  return entries;
}

// shm_contract.h's codes by name, for Python (anyaccel.distributed.shm.codes reads them).
std::map<std::string, int> dtype_codes() {
  std::map<std::string, int> codes;
  for (int code = 0; code < kDTypes; ++code) codes[kDTypeNames[code]] = code;
  return codes;
}

std::map<std::string, int> op_codes() {
  std::map<std::string, int> codes;
  for (int code = 0; code < kOps; ++code) codes[kOpNames[code]] = code;
  return codes;
}

std::map<std::string, int> collective_codes() {
  std::map<std::string, int> codes;
  for (const CollectiveCode& collective : kCollectives) codes[collective.name] = collective.code;
  return codes;
}

}  // namespace
}  // namespace anyaccel

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using anyaccel::Communicator;
  m.doc() = "anyaccel's shared-memory collectives for the ranks of one node";
  py::class_<Communicator>(m, "Communicator")
      .def(py::init<int, int64_t, int, int, int64_t, bool>(), py::arg("fd"),
           py::arg("segment_bytes"), py::arg("world_size"), py::arg("rank"),
           py::arg("slot_bytes"), py::arg("create"))
      .def_static("required_bytes", &Communicator::required_bytes)
      .def("set_peer_pids", &Communicator::set_peer_pids)
      .def("all_reduce", &Communicator::all_reduce, py::arg("address"), py::arg("numel"),
           py::arg("dtype"), py::arg("op"), py::arg("timeout"), py::arg("threads"),
           py::call_guard<py::gil_scoped_release>())
      .def("all_gather", &Communicator::all_gather, py::arg("input"), py::arg("outputs"),
           py::arg("nbytes"), py::arg("tag"), py::arg("timeout"), py::arg("threads"),
           py::call_guard<py::gil_scoped_release>())
      .def("broadcast", &Communicator::broadcast, py::arg("address"), py::arg("nbytes"),
           py::arg("root"), py::arg("tag"), py::arg("timeout"), py::arg("threads"),
           py::call_guard<py::gil_scoped_release>())
      .def("reduce_scatter", &Communicator::reduce_scatter, py::arg("input"), py::arg("output"),
           py::arg("numel"), py::arg("dtype"), py::arg("op"), py::arg("timeout"),
           py::arg("threads"), py::call_guard<py::gil_scoped_release>())
      .def("barrier", &Communicator::barrier, py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>())
      .def("abandon", &Communicator::abandon)
      .def("failed", &Communicator::failed)
      .def("close", &Communicator::close)
      .def_property_readonly("handle", &Communicator::handle,
                             "This communicator's address, for native_all_reduce's callers");
  m.def("native_entry_addresses", &anyaccel::native_entry_addresses,
        "The C entries of the collectives for the c10d Backend, by name (their types: "
        "shm_contract.h; each answers 0 done, 1 communicator unusable, 2 error)");
  m.attr("DTYPE_CODES") = anyaccel::dtype_codes();
  m.attr("OP_CODES") = anyaccel::op_codes();
  m.attr("COLLECTIVE_CODES") = anyaccel::collective_codes();
  m.def("simd_level", &anyaccel::simd_level, "The SIMD level this build targets.");
  m.def("oversubscribed", &anyaccel::oversubscribed,
        "Whether more tasks are runnable than CPUs are online (then waiting skips yielding).");
}
