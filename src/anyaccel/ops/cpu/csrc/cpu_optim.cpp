// anyaccel's CPU optimizers in one library: Adam/AdamW, Adagrad and Lion share the group-step
// machinery and torch's headers, so one translation unit compiles them all once per SIMD level
// (the headers dominate a build: three separate libraries took about three times as long).
#include "adagrad.h"
#include "adam.h"
#include "lion.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  namespace py = pybind11;
  m.doc() = "anyaccel CPU optimizer kernels (use anyaccel.ops.adam, .adagrad and .lion)";
  anyaccel::bind_plan(m);
  m.def("adam_step", &anyaccel::adam::adam_step,
        "One fused Adam(W) step over a prepared param group (see prepare()).", py::arg("plan"),
        py::arg("lr"), py::arg("beta1"), py::arg("beta2"), py::arg("eps"),
        py::arg("weight_decay"), py::arg("adamw_mode"), py::arg("bias_correction"),
        py::arg("maximize"), py::arg("amsgrad"), py::arg("threads"));
  m.def("adagrad_step", &anyaccel::adagrad::adagrad_step,
        "One fused Adagrad step over a prepared param group (see prepare()).", py::arg("plan"),
        py::arg("lr"), py::arg("lr_decay"), py::arg("eps"), py::arg("weight_decay"),
        py::arg("maximize"), py::arg("threads"));
  m.def("lion_step", &anyaccel::lion::lion_step,
        "One fused Lion step over a prepared param group (see prepare()).", py::arg("plan"),
        py::arg("lr"), py::arg("beta1"), py::arg("beta2"), py::arg("weight_decay"),
        py::arg("maximize"), py::arg("threads"));
}
