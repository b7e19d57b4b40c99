// One optimizer step over a whole parameter group in one native call.
//
// prepare() reads a group's parameters, gradients, states and copies through the torch
// tensors themselves and checks all of them before anything is written, so a bad state,
// gradient or copy raises a Python ValueError/TypeError naming the group, index, key and
// shapes, with nothing changed. Plan::commit() then creates missing states, advances step
// counts and hands each optimizer a list of Tasks; run_group() spreads the group's elements
// (not its tensors) evenly over one OpenMP parallel region.
//
// One header per concern, all in the optimizers' one translation unit (cpu_optim.cpp):
//   group_task.h   a Task and its Operands; dtypes, shapes and prefetching of tensor metadata
//   python_refs.h  tensor-keyed dict lookups and the references a plan holds
//   group_plan.h   the Plan: prepare() and commit()
//   group_run.h    run_group() and step_group(): the kernel over a committed plan
// This header adds bind_plan(), which binds the Plan into an optimizer's module.
#pragma once

#include <pybind11/pybind11.h>
#include <torch/csrc/autograd/python_variable.h>

#include <memory>

#include "group_plan.h"
#include "group_run.h"
#include "group_task.h"
#include "simd.h"

namespace anyaccel {
namespace py = pybind11;

// Binds the Plan type and prepare() into an optimizer's module.
inline void bind_plan(py::module_& m) {
  py::class_<Plan>(m, "Plan", py::module_local())
      .def("__len__", &Plan::size, "How many parameters (with a gradient) the plan steps.")
      .def_property_readonly("duplicates", &Plan::duplicates,
                             "Whether a parameter appears twice: step the group in rounds.");
  m.def(
      "prepare",
      [](py::list params, py::dict state, py::object shared_key, py::object copies,
         py::tuple specs, bool low_precision_states, int group) {
        return std::make_unique<Plan>(params, state, shared_key, copies, specs,
                                      low_precision_states, group);
      },
      "Check one param group's parameters, gradients, states and copies; write nothing.",
      py::arg("params"), py::arg("state"), py::arg("shared_key"), py::arg("copies"),
      py::arg("specs"), py::arg("low_precision_states"), py::arg("group"));
  m.def(
      "sparse_grad_indices",
      [](py::list params) {
        py::list found;
        const Py_ssize_t count = PyList_GET_SIZE(params.ptr());
        for (Py_ssize_t i = 0; i < count; ++i) {
          PyObject* object = PyList_GET_ITEM(params.ptr(), i);
          if (variable_or_null(object) == nullptr) continue;  // prepare() reports it
          const at::Tensor& grad = THPVariable_Unpack(object).unsafeGetTensorImpl()->grad();
          if (grad.defined() && grad.layout() == c10::kSparse) found.append(i);
        }
        return found;
      },
      "Indices of the parameters in `params` whose gradient is a sparse COO tensor.",
      py::arg("params"));
  m.def("simd_level", &simd_level, "The vector instruction set compiled in.");
  m.def(
      "one_pass_dtypes",
      [] {
        py::list dtypes;
        dtypes.append("bfloat16");
        if (kFp16OnePass) dtypes.append("float16");
        return dtypes;
      },
      "The low-precision parameter dtypes stepped in one pass (with fp32 states, no copy).");
}

}  // namespace anyaccel
