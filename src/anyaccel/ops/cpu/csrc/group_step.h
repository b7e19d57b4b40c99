// One optimizer step over a whole parameter group in one native call.
//
// prepare() reads a group's parameters, gradients, states and copies through the torch
// tensors themselves and checks all of them before anything is written, so a bad state,
// gradient or copy raises a Python ValueError/TypeError naming the group, index, key and
// shapes, with nothing changed. Plan::commit() then creates missing states, advances step
// counts and hands each optimizer a list of Tasks; run_group() spreads the group's elements
// (not its tensors) evenly over one OpenMP parallel region.
#pragma once

#include <ATen/ops/full.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cpu_optim.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace anyaccel {
namespace py = pybind11;

enum class DType : int { kF32 = 0, kBF16 = 1, kF16 = 2 };

// The operand dtypes the kernels read and write, or false for any other.
inline bool to_dtype(c10::ScalarType type, DType* out) {
  switch (type) {
    case c10::ScalarType::Float: *out = DType::kF32; return true;
    case c10::ScalarType::BFloat16: *out = DType::kBF16; return true;
    case c10::ScalarType::Half: *out = DType::kF16; return true;
    default: return false;
  }
}

inline std::string shape_str(at::IntArrayRef sizes) {
  std::string out = "(";
  for (size_t i = 0; i < sizes.size(); ++i) {
    out += std::to_string(sizes[i]);
    if (sizes.size() == 1 || i + 1 < sizes.size()) out += sizes.size() == 1 ? "," : ", ";
  }
  return out + ")";
}

// torch's Python name of a dtype, e.g. "torch.float64".
inline std::string dtype_str(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Float: return "torch.float32";
    case c10::ScalarType::Double: return "torch.float64";
    case c10::ScalarType::BFloat16: return "torch.bfloat16";
    case c10::ScalarType::Half: return "torch.float16";
    case c10::ScalarType::Long: return "torch.int64";
    case c10::ScalarType::Int: return "torch.int32";
    case c10::ScalarType::Short: return "torch.int16";
    case c10::ScalarType::Char: return "torch.int8";
    case c10::ScalarType::Byte: return "torch.uint8";
    case c10::ScalarType::Bool: return "torch.bool";
    case c10::ScalarType::ComplexFloat: return "torch.complex64";
    case c10::ScalarType::ComplexDouble: return "torch.complex128";
    default: return std::string("torch.") + c10::toString(type);
  }
}

constexpr int kMaxStates = 3;

// One state tensor an optimizer keeps per parameter: its key and initial value.
struct StateSpec {
  std::string name;
  double initial;
};

// An operand of a task: a contiguous buffer and its dtype.
struct Operand {
  void* data = nullptr;
  DType type = DType::kF32;
};

// One tensor's share of a group step: its operands, element count and step count.
struct Task {
  Operand param, grad;
  Operand states[kMaxStates];
  void* copy = nullptr;
  Copy copy_kind = Copy::kNone;
  int64_t n = 0;
  double step = 0.0;  // this tensor's step count after the increment
};

// A parameter with a gradient, checked, awaiting commit.
struct Entry {
  int64_t index;
  at::Tensor param, grad, copy;
  at::Tensor states[kMaxStates];  // undefined: absent, created at commit
  py::object key;                 // the key of its state in the optimizer's state map
  py::object state;               // its state dict (None: created at commit)
  py::object step;                // its current step value (None: absent)
};

inline PyObject* variable_or_null(PyObject* object) {
  return object != nullptr && THPVariable_Check(object) ? object : nullptr;
}

// Everything one group step needs, validated; commit() applies the bookkeeping.
class Plan {
 public:
  Plan(py::list params, py::dict state_map, py::object shared_key, py::object copies,
       py::tuple specs, bool low_precision_states, int group)
      : state_map_(state_map), group_(group), low_precision_(low_precision_states) {
    for (auto item : specs) {
      auto pair = item.cast<py::tuple>();
      specs_.push_back({pair[0].cast<std::string>(), pair[1].cast<double>()});
    }
    if (specs_.size() > kMaxStates) throw std::logic_error("too many optimizer states");
    const bool has_copies = !copies.is_none();
    py::list copy_list;
    if (has_copies) {
      copy_list = copies.cast<py::list>();
      if (py::len(copy_list) != py::len(params)) {
        throw py::value_error("group " + std::to_string(group) + ": " +
                              std::to_string(py::len(copy_list)) + " copies for " +
                              std::to_string(py::len(params)) + " parameters");
      }
    }
    const int64_t count = static_cast<int64_t>(py::len(params));
    entries_.reserve(count);
    for (int64_t i = 0; i < count; ++i) {
      PyObject* object = PyList_GET_ITEM(params.ptr(), i);
      if (variable_or_null(object) == nullptr) {
        throw py::type_error(where(i) + "is a " + std::string(Py_TYPE(object)->tp_name) +
                             ", not a tensor; param groups hold tensors");
      }
      const at::Tensor& param = THPVariable_Unpack(object);
      const at::Tensor& grad = param.grad();
      if (!grad.defined()) continue;
      PyObject* copy = has_copies ? PyList_GET_ITEM(copy_list.ptr(), i) : Py_None;
      add(i, object, param, grad, copy, shared_key);
    }
  }

  int64_t size() const { return static_cast<int64_t>(entries_.size()); }

  // Creates missing states, advances step counts and returns one Task per parameter.
  // Non-contiguous parameters and gradients are stepped through contiguous copies; `after`
  // collects the parameters to copy back once the kernel has run.
  std::vector<Task> commit(std::vector<std::pair<at::Tensor, at::Tensor>>* after) {
    std::vector<Task> tasks;
    tasks.reserve(entries_.size());
    for (Entry& entry : entries_) {
      if (entry.state.is_none()) {
        entry.state = py::dict();
        if (PyDict_SetItem(state_map_.ptr(), entry.key.ptr(), entry.state.ptr()) != 0) {
          throw py::error_already_set();
        }
      }
      Task task;
      task.n = entry.param.numel();
      for (size_t s = 0; s < specs_.size(); ++s) {
        at::Tensor& value = entry.states[s];
        if (!value.defined() || !value.is_contiguous()) {
          value = value.defined() ? value.contiguous()
                                  : at::full(entry.param.sizes(), specs_[s].initial,
                                             at::TensorOptions().dtype(state_dtype(entry.param)));
          set_item(entry.state, specs_[s].name.c_str(), value);
        }
        to_dtype(value.scalar_type(), &task.states[s].type);
        task.states[s].data = value.data_ptr();
      }
      task.step = advance_step(entry);
      at::Tensor param = entry.param;
      if (!param.is_contiguous()) {
        at::Tensor work = param.contiguous();
        after->emplace_back(param, work);
        param = work;
      }
      at::Tensor grad = entry.grad.is_contiguous() ? entry.grad : entry.grad.contiguous();
      keep_.push_back(grad);
      to_dtype(param.scalar_type(), &task.param.type);
      task.param.data = param.data_ptr();
      to_dtype(grad.scalar_type(), &task.grad.type);
      task.grad.data = grad.data_ptr();
      if (entry.copy.defined()) {
        task.copy = entry.copy.data_ptr();
        task.copy_kind = entry.copy.scalar_type() == c10::ScalarType::BFloat16 ? Copy::kBF16
                                                                             : Copy::kFP16;
      }
      tasks.push_back(task);
    }
    return tasks;
  }

 private:
  std::string where(int64_t index) const {
    return "group " + std::to_string(group_) + " param " + std::to_string(index) + " ";
  }

  c10::ScalarType state_dtype(const at::Tensor& param) const {
    return low_precision_ ? param.scalar_type() : c10::ScalarType::Float;
  }

  void add(int64_t i, PyObject* object, const at::Tensor& param, const at::Tensor& grad,
           PyObject* copy, py::object shared_key) {
    auto shape = [&param] { return shape_str(param.sizes()); };  // only on errors
    DType type;
    if (!param.device().is_cpu() || !to_dtype(param.scalar_type(), &type)) {
      throw py::type_error(where(i) + "is " + dtype_str(param.scalar_type()) + " on " +
                           param.device().str() +
                           "; anyaccel CPU optimizers update float32, bfloat16 or float16 "
                           "parameters on the CPU");
    }
    if (grad.layout() != c10::kStrided) {
      throw py::type_error(where(i) + "has a sparse gradient; anyaccel CPU optimizers take "
                           "dense gradients (use torch.optim.SparseAdam for sparse embeddings)");
    }
    if (!grad.device().is_cpu() || !to_dtype(grad.scalar_type(), &type)) {
      throw py::type_error(where(i) + "has a gradient of " + dtype_str(grad.scalar_type()) +
                           " on " + grad.device().str() +
                           "; gradients must be float32, bfloat16 or float16 CPU tensors");
    }
    if (!grad.sizes().equals(param.sizes())) {
      throw py::value_error(where(i) + "has shape " + shape() + " but its gradient has shape " +
                            shape_str(grad.sizes()));
    }
    Entry entry;
    entry.index = i;
    entry.param = param;
    entry.grad = grad;
    entry.key = shared_key.is_none() ? py::reinterpret_borrow<py::object>(object) : shared_key;
    entry.state = py::none();
    entry.step = py::none();
    if (copy != Py_None) {
      if (variable_or_null(copy) == nullptr) {
        throw py::type_error(where(i) + "has a copy of type " +
                             std::string(Py_TYPE(copy)->tp_name) + "; pass a tensor or None");
      }
      const at::Tensor& tensor = THPVariable_Unpack(copy);
      const auto kind = tensor.scalar_type();
      if (!tensor.device().is_cpu() ||
          (kind != c10::ScalarType::BFloat16 && kind != c10::ScalarType::Half)) {
        throw py::type_error(where(i) + "has a copy of " + dtype_str(kind) + " on " +
                             tensor.device().str() +
                             "; parameter copies must be bfloat16 or float16 CPU tensors");
      }
      if (tensor.numel() != param.numel() || !tensor.is_contiguous()) {
        throw py::value_error(
            where(i) + "copy of shape " + shape_str(tensor.sizes()) +
            (tensor.is_contiguous() ? "" : " (not contiguous)") +
            " does not match parameter of shape " + shape() +
            "; allocate it with torch.empty_like(param, dtype=torch.bfloat16)");
      }
      entry.copy = tensor;
    }
    PyObject* found = PyDict_GetItemWithError(state_map_.ptr(), entry.key.ptr());
    if (found == nullptr && PyErr_Occurred()) throw py::error_already_set();
    if (found != nullptr) {
      if (!PyDict_Check(found)) {
        throw py::type_error(where(i) + "has a state of type " +
                             std::string(Py_TYPE(found)->tp_name) + "; optimizer states are dicts");
      }
      entry.state = py::reinterpret_borrow<py::object>(found);
      for (size_t s = 0; s < specs_.size(); ++s) {
        PyObject* value = PyDict_GetItemString(found, specs_[s].name.c_str());
        if (value == nullptr || value == Py_None) continue;  // absent: created at commit
        const std::string key = "state '" + specs_[s].name + "' ";
        if (variable_or_null(value) == nullptr) {
          throw py::type_error(where(i) + key + "is a " + std::string(Py_TYPE(value)->tp_name) +
                               ", not a tensor");
        }
        const at::Tensor& tensor = THPVariable_Unpack(value);
        if (!tensor.sizes().equals(param.sizes())) {
          throw py::value_error(where(i) + key + "has shape " + shape_str(tensor.sizes()) +
                                " but the parameter has shape " + shape() +
                                "; the state belongs to another parameter (was a state dict "
                                "loaded after the parameters changed or were re-ordered?)");
        }
        const auto expected = state_dtype(param);
        if (tensor.scalar_type() != expected || !tensor.device().is_cpu() ||
            tensor.layout() != c10::kStrided) {
          throw py::type_error(
              where(i) + key + "is " + dtype_str(tensor.scalar_type()) + " on " +
              tensor.device().str() + "; expected a dense " + dtype_str(expected) +
              " CPU tensor" +
              (low_precision_ ? " (fp32_optimizer_states=False keeps states in the parameter's "
                                "dtype)"
                              : " (optimizer states are float32 unless fp32_optimizer_states="
                                "False)"));
        }
        entry.states[s] = tensor;
      }
      PyObject* step = PyDict_GetItemString(found, "step");
      if (step != nullptr && step != Py_None) {  // None: no count yet, as 0
        check_step(i, step);
        entry.step = py::reinterpret_borrow<py::object>(step);
      }
    }
    entries_.push_back(std::move(entry));
  }

  void check_step(int64_t i, PyObject* step) const {
    if (PyLong_Check(step) && !PyBool_Check(step)) return;
    if (PyFloat_Check(step)) return;
    if (variable_or_null(step) != nullptr) {
      const at::Tensor& tensor = THPVariable_Unpack(step);
      const auto kind = tensor.scalar_type();
      if (tensor.numel() == 1 && tensor.device().is_cpu() && tensor.layout() == c10::kStrided &&
          (kind == c10::ScalarType::Float || kind == c10::ScalarType::Double ||
           kind == c10::ScalarType::Long || kind == c10::ScalarType::Int)) {
        return;
      }
      throw py::type_error(where(i) + "state 'step' is a " + dtype_str(kind) + " tensor of shape " +
                           shape_str(tensor.sizes()) + " on " + tensor.device().str() +
                           "; expected a one-element CPU tensor or a number");
    }
    throw py::type_error(where(i) + "state 'step' is a " + std::string(Py_TYPE(step)->tp_name) +
                         "; expected a number or a one-element tensor");
  }

  static void set_item(const py::object& dict, const char* name, const at::Tensor& value) {
    PyObject* wrapped = THPVariable_Wrap(value);
    if (wrapped == nullptr) throw py::error_already_set();
    const int failed = PyDict_SetItemString(dict.ptr(), name, wrapped);
    Py_DECREF(wrapped);
    if (failed != 0) throw py::error_already_set();
  }

  // Adds one to the step count, keeping its kind (torch's float tensor, DeepSpeed's int).
  double advance_step(Entry& entry) {
    if (entry.step.is_none()) {
      set_item(entry.state, "step", at::full({}, 1.0, at::TensorOptions().dtype(at::kFloat)));
      return 1.0;
    }
    PyObject* step = entry.step.ptr();
    if (variable_or_null(step) != nullptr) {
      const at::Tensor& tensor = THPVariable_Unpack(step);
      void* data = tensor.data_ptr();
      switch (tensor.scalar_type()) {
        case c10::ScalarType::Float: return *static_cast<float*>(data) += 1.0f;
        case c10::ScalarType::Double: return *static_cast<double*>(data) += 1.0;
        case c10::ScalarType::Long: return double(*static_cast<int64_t*>(data) += 1);
        default: return double(*static_cast<int32_t*>(data) += 1);
      }
    }
    py::object next = entry.step + py::int_(1);
    if (PyDict_SetItemString(entry.state.ptr(), "step", next.ptr()) != 0) {
      throw py::error_already_set();
    }
    return next.cast<double>();
  }

  py::dict state_map_;
  int group_;
  bool low_precision_;
  std::vector<StateSpec> specs_;
  std::vector<Entry> entries_;
  std::vector<at::Tensor> keep_;  // contiguous gradient copies, alive until the plan dies
};

// fp32 view of `n` elements of an operand from `offset`: the operand itself when it is fp32,
// otherwise `buffer` filled by conversion.
inline float* load_f32(const Operand& op, int64_t offset, int64_t n, float* buffer) {
  switch (op.type) {
    case DType::kF32: return static_cast<float*>(op.data) + offset;
    case DType::kBF16: bf16_to_f32(static_cast<const uint16_t*>(op.data) + offset, buffer, n); break;
    case DType::kF16: fp16_to_f32(static_cast<const uint16_t*>(op.data) + offset, buffer, n); break;
  }
  return buffer;
}

// Writes an updated fp32 chunk back to a low-precision operand (rounded to nearest even).
inline void store_f32(const Operand& op, int64_t offset, int64_t n, const float* values) {
  if (op.type == DType::kF32) return;
  uint16_t* dst = static_cast<uint16_t*>(op.data) + offset;
  if (op.type == DType::kBF16) {
    convert_bf16(values, dst, n);
  } else {
    convert_fp16(values, dst, n);
  }
}

// Runs math(P, G, S, n, task) over [begin, end) of one task in L1-sized chunks, converting
// low-precision operands to fp32 and back, then writes the task's copy from the new values.
template <int kStates, typename Math>
inline void run_task_range(const Task& task, int64_t begin, int64_t end, const Math& math) {
  alignas(64) float param_buf[kChunk];
  alignas(64) float grad_buf[kChunk];
  alignas(64) float state_buf[kStates > 0 ? kStates : 1][kChunk];
  float* s[kMaxStates] = {nullptr, nullptr, nullptr};
  for (int64_t offset = begin; offset < end; offset += kChunk) {
    const int64_t n = std::min(kChunk, end - offset);
    float* p = load_f32(task.param, offset, n, param_buf);
    const float* g = load_f32(task.grad, offset, n, grad_buf);
    for (int k = 0; k < kStates; ++k) s[k] = load_f32(task.states[k], offset, n, state_buf[k]);
    math(p, g, s, n, task);
    store_f32(task.param, offset, n, p);
    for (int k = 0; k < kStates; ++k) store_f32(task.states[k], offset, n, s[k]);
    if (task.copy_kind != Copy::kNone) {
      // A low-precision parameter's copy mirrors its rounded values, not the fp32 result.
      const float* src = task.param.type == DType::kF32 ? p : load_f32(task.param, offset, n, p);
      write_copy(task.copy_kind, src, task.copy, offset, n);
    }
  }
}

// Spreads all tasks' elements evenly over one parallel region (by element count, so a group of
// many small tensors balances as well as one big tensor), calling math on each thread's part.
template <int kStates, typename Math>
inline void run_group(const std::vector<Task>& tasks, int threads, const Math& math) {
  std::vector<int64_t> offsets(tasks.size() + 1, 0);
  for (size_t t = 0; t < tasks.size(); ++t) offsets[t + 1] = offsets[t] + tasks[t].n;
  const int64_t total = offsets.back();
  if (total == 0) return;
  const int team = total >= kParallelThreshold ? std::max(threads, 1) : 1;
  auto body = [&](int member, int members) {
    // Split points on 64-element boundaries keep each thread's vectors whole.
    auto split = [&](int k) { return k == members ? total : (total * k / members) / 64 * 64; };
    int64_t lo = split(member);
    const int64_t hi = split(member + 1);
    size_t t = std::upper_bound(offsets.begin(), offsets.end(), lo) - offsets.begin() - 1;
    while (lo < hi && t < tasks.size()) {
      const int64_t end = std::min(hi, offsets[t + 1]);
      if (end > lo) run_task_range<kStates>(tasks[t], lo - offsets[t], end - offsets[t], math);
      lo = std::max(lo, end);
      ++t;
    }
  };
#ifdef _OPENMP
  if (team > 1) {
#pragma omp parallel num_threads(team)
    body(omp_get_thread_num(), omp_get_num_threads());
    return;
  }
#endif
  body(0, 1);
}

// Runs a prepared group: commit (with the GIL), kernel (without), copy-backs (with).
template <int kStates, typename Scalars, typename Math>
inline void step_group(Plan& plan, int threads, const Scalars& per_task, const Math& math) {
  std::vector<std::pair<at::Tensor, at::Tensor>> after;
  std::vector<Task> tasks = plan.commit(&after);
  std::vector<decltype(per_task(tasks[0]))> scalars;
  scalars.reserve(tasks.size());
  for (const Task& task : tasks) scalars.push_back(per_task(task));
  {
    py::gil_scoped_release release;
    const Task* first = tasks.data();
    run_group<kStates>(tasks, threads,
                       [&](float* p, const float* g, float* const* s, int64_t n, const Task& task) {
                         math(p, g, s, n, scalars[&task - first]);
                       });
  }
  for (auto& [param, work] : after) param.copy_(work);
}

// Binds the Plan type and prepare() into an optimizer's module.
inline void bind_plan(py::module_& m) {
  py::class_<Plan>(m, "Plan", py::module_local())
      .def("__len__", &Plan::size, "How many parameters (with a gradient) the plan steps.");
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
  m.def("simd_level", &simd_level, "The vector instruction set compiled in.");
}

}  // namespace anyaccel
