// The Plan of one group step: every parameter, gradient, state and copy read and checked before
// anything is written; commit() then creates missing states, advances step counts and hands
// out the Tasks. Part of group_step.h.
#pragma once

#include <ATen/MemoryOverlap.h>
#include <ATen/ops/full.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstdio>
#include <deque>
#include <string>
#include <vector>

#include "group_task.h"
#include "python_refs.h"

namespace anyaccel {
namespace py = pybind11;

// A parameter with a gradient, checked, awaiting commit. Tensors are borrowed from Python
// objects the plan holds references to: copying an at::Tensor that has a Python object costs
// a GIL round trip in torch's reference counting, which would dominate a small parameter.
struct Entry {
  int64_t index = 0;
  const at::Tensor* param = nullptr;      // the parameter object's tensor
  const at::Tensor* grad_slot = nullptr;  // the parameter's .grad slot, re-read at commit
  c10::TensorImpl* grad_seen = nullptr;   // the gradient that slot held when checked
  const at::Tensor* states[kMaxStates] = {nullptr, nullptr, nullptr};  // null: created at commit
  const at::Tensor* copy = nullptr;
  PyObject* key = nullptr;    // the key of its state in the optimizer's state map
  PyObject* state = nullptr;  // its state dict (null: created at commit)
  PyObject* step = nullptr;   // its current step value (null: absent)
  // What commit() needs, read while add() has the tensors in cache: commit() then touches only
  // the gradient slot and the step count, not every tensor's metadata again.
  int64_t n = 0;
  Operand param_op, grad_op;           // valid when the tensor is contiguous
  Operand state_ops[kMaxStates];       // valid when state_ready
  bool param_contiguous = false;
  bool grad_contiguous = false;
  bool state_ready[kMaxStates] = {false, false, false};  // present and contiguous
  void* copy_data = nullptr;
  Copy copy_kind = Copy::kNone;
  void* step_data = nullptr;  // a step count kept in a tensor: its element
  c10::ScalarType step_type = c10::ScalarType::Undefined;
};

// Everything one group step needs, validated; commit() applies the bookkeeping.
class Plan {
 public:
  Plan(py::list params, py::dict state_map, py::object shared_key, py::object copies,
       py::tuple specs, bool low_precision_states, int group)
      : state_map_(state_map), group_(group), low_precision_(low_precision_states) {
    for (auto item : specs) {
      auto pair = item.cast<py::tuple>();
      const std::string name = pair[0].cast<std::string>();
      PyObject* key = PyUnicode_InternFromString(name.c_str());
      if (key == nullptr) throw py::error_already_set();
      specs_.push_back({name, pair[1].cast<double>(), py::reinterpret_steal<py::object>(key)});
    }
    if (specs_.size() > kMaxStates) throw std::logic_error("too many optimizer states");
    step_key_ = py::reinterpret_steal<py::object>(PyUnicode_InternFromString("step"));
    if (!step_key_) throw py::error_already_set();
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
    held_.reserve(count * (3 + specs_.size()));
    if (!shared_key.is_none()) shared_key_ = hold(shared_key.ptr());
    for (int64_t i = 0; i < count; ++i) {
      if (i % kPrefetchBlock == 0) {
        prefetch_block(params.ptr(), has_copies ? copy_list.ptr() : nullptr, i,
                       std::min(count, i + kPrefetchBlock));
      }
      PyObject* object = PyList_GET_ITEM(params.ptr(), i);
      if (variable_or_null(object) == nullptr) {
        throw py::type_error(where(i) + "is a " + std::string(Py_TYPE(object)->tp_name) +
                             ", not a tensor; param groups hold tensors");
      }
      const at::Tensor& param = THPVariable_Unpack(object);
      // The .grad slot itself (TensorBase::grad() adds a non-leaf warning check).
      const at::Tensor& grad = param.unsafeGetTensorImpl()->grad();
      if (!grad.defined()) continue;
      PyObject* copy = has_copies ? PyList_GET_ITEM(copy_list.ptr(), i) : Py_None;
      add(i, hold(object), param, grad, copy);
    }
    if (shared_key_ == nullptr) duplicates_ = find_duplicates();
  }

  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  int64_t size() const { return static_cast<int64_t>(entries_.size()); }

  // Whether one parameter object appears more than once (with its gradient) in the group: such
  // a plan must not be committed, since its entries would share one state and one tensor.
  bool duplicates() const { return duplicates_; }

  // Creates missing states, advances step counts and returns one Task per parameter.
  // Non-contiguous parameters and gradients are stepped through contiguous copies; `after`
  // collects the parameters to copy back once the kernel has run.
  std::vector<Task> commit(std::vector<std::pair<at::Tensor, at::Tensor>>* after) {
    std::vector<Task> tasks;
    tasks.reserve(entries_.size());
    const size_t count = entries_.size();
    for (size_t k = 0; k < std::min<size_t>(count, kAhead); ++k) prefetch_entry(entries_[k]);
    for (size_t k = 0; k < count; ++k) {
      if (k + kAhead < count) prefetch_entry(entries_[k + kAhead]);
      Entry& entry = entries_[k];
      const at::Tensor& grad = *entry.grad_slot;
      if (grad.unsafeGetTensorImpl() != entry.grad_seen) {
        throw std::runtime_error(where(entry.index) +
                                 "had its gradient replaced while the step was prepared");
      }
      if (entry.state == nullptr) {
        PyObject* created = PyDict_New();
        if (created == nullptr) throw py::error_already_set();
        held_.adopt(created);  // the plan's reference
        entry.state = created;
        if (PyDict_SetItem(state_map_.ptr(), entry.key, created) != 0) {
          throw py::error_already_set();
        }
      }
      Task task;
      task.n = entry.n;
      for (size_t s = 0; s < specs_.size(); ++s) {
        if (entry.state_ready[s]) {
          task.states[s] = entry.state_ops[s];
          continue;
        }
        const at::Tensor& param_in = *entry.param;
        const at::Tensor* value = entry.states[s];
        if (value == nullptr || !value->is_contiguous()) {
          created_.push_back(value != nullptr
                                 ? value->contiguous()
                                 : at::full(param_in.sizes(), specs_[s].initial,
                                            at::TensorOptions().dtype(state_dtype(param_in))));
          value = &created_.back();
          set_item(entry.state, specs_[s].key.ptr(), *value);
        }
        to_dtype(value->scalar_type(), &task.states[s].type);
        task.states[s].data = value->data_ptr();
      }
      task.step = advance_step(entry);
      if (entry.param_contiguous) {
        task.param = entry.param_op;
      } else {  // stepped through a contiguous copy, written back after the kernel
        const at::Tensor& param_in = *entry.param;
        at::Tensor work = param_in.contiguous();
        after->emplace_back(param_in, work);
        to_dtype(work.scalar_type(), &task.param.type);
        task.param.data = work.data_ptr();
      }
      if (entry.grad_contiguous) {
        task.grad = entry.grad_op;
      } else {
        keep_.push_back(grad.contiguous());
        to_dtype(keep_.back().scalar_type(), &task.grad.type);
        task.grad.data = keep_.back().data_ptr();
      }
      task.copy = entry.copy_data;
      task.copy_kind = entry.copy_kind;
      tasks.push_back(task);
    }
    return tasks;
  }

 private:
  static constexpr size_t kAhead = 8;  // entries commit() prefetches ahead

  // Requests, level by level, the metadata add() reads for params [begin, end): objects,
  // tensors, autograd metas and state-map entries, then grads, state dicts and state tensors.
  // The state map is looked up here once; add() takes the answer from found_.
  void prefetch_block(PyObject* params, PyObject* copies, int64_t begin, int64_t end) {
    const int64_t n = end - begin;
    const c10::TensorImpl* impls[kPrefetchBlock] = {};
    for (int64_t k = 0; k < n; ++k) {
      prefetch_lines(PyList_GET_ITEM(params, begin + k), 64);
      if (copies != nullptr) prefetch_lines(PyList_GET_ITEM(copies, begin + k), 64);
    }
    for (int64_t k = 0; k < n; ++k) {
      PyObject* object = PyList_GET_ITEM(params, begin + k);
      if (THPVariable_CheckExact(object)) {
        impls[k] = THPVariable_Unpack(object).unsafeGetTensorImpl();
        prefetch_impl(impls[k]);
      }
      if (copies != nullptr && THPVariable_CheckExact(PyList_GET_ITEM(copies, begin + k))) {
        prefetch_impl(THPVariable_Unpack(PyList_GET_ITEM(copies, begin + k)).unsafeGetTensorImpl());
      }
    }
    found_begin_ = begin;
    for (int64_t k = 0; k < n; ++k) {
      PyObject* key = shared_key_ != nullptr ? shared_key_ : PyList_GET_ITEM(params, begin + k);
      found_[k] = kLookUpAgain;
      if (impls[k] == nullptr) continue;  // not a tensor: add() reports it
      try {
        found_[k] = lookup_.get(state_map_.ptr(), key);
      } catch (py::error_already_set&) {
        continue;  // add() looks up again and raises in parameter order
      }
      if (found_[k] != nullptr) prefetch_lines(found_[k], 64);
    }
    for (int64_t k = 0; k < n; ++k) {
      if (impls[k] != nullptr) prefetch_lines(impls[k]->autograd_meta(), 128);
      if (found_[k] != nullptr && found_[k] != kLookUpAgain && PyDict_Check(found_[k])) {
        prefetch_lines(reinterpret_cast<PyDictObject*>(found_[k])->ma_keys, 192);
      }
    }
    PyObject* (&values)[kPrefetchBlock][kMaxStates + 1] = values_;  // add() reads them back
    for (int64_t k = 0; k < n; ++k) {
      if (impls[k] != nullptr) prefetch_impl(impls[k]->grad().unsafeGetTensorImpl());
      values_known_[k] = false;
      for (PyObject*& value : values[k]) value = nullptr;
      PyObject* found = found_[k];
      if (found == nullptr || found == kLookUpAgain || !PyDict_CheckExact(found)) continue;
      bool known = scan_state(found, values[k]);
      if (!known) {  // a state dict scan_state() does not read: one lookup per key
        known = true;
        for (size_t s = 0; s <= specs_.size(); ++s) {
          values[k][s] = PyDict_GetItemWithError(found, key_at(s));
          if (values[k][s] == nullptr && PyErr_Occurred()) {
            PyErr_Clear();  // add() looks up again and raises in parameter order
            known = false;
          }
        }
      }
      for (PyObject* value : values[k]) {
        if (value != nullptr) prefetch_lines(value, 64);
      }
      values_known_[k] = known;
    }
    const c10::TensorImpl* value_impls[kPrefetchBlock][kMaxStates + 1] = {};
    for (int64_t k = 0; k < n; ++k) {
      for (size_t s = 0; s <= specs_.size(); ++s) {
        PyObject* value = values[k][s];
        if (value != nullptr && THPVariable_CheckExact(value)) {
          value_impls[k][s] = THPVariable_Unpack(value).unsafeGetTensorImpl();
          prefetch_impl(value_impls[k][s]);
        }
      }
    }
    // The storage records add() reads the data pointers from.
    for (int64_t k = 0; k < n; ++k) {
      if (impls[k] == nullptr) continue;
      prefetch_storage(impls[k]);
      prefetch_storage(impls[k]->grad().unsafeGetTensorImpl());
      for (size_t s = 0; s <= specs_.size(); ++s) prefetch_storage(value_impls[k][s]);
    }
  }

  // Reads a small state dict's values for the spec keys and "step" (null where absent) in one
  // walk over its entries instead of a hash lookup per key. Keys are matched by identity (the
  // interned keys commit() stores) or, for exact str keys (a loaded checkpoint's), by content,
  // which finds what a lookup would. False, with nothing read, for any other dict.
  bool scan_state(PyObject* dict, PyObject* (&values)[kMaxStates + 1]) const {
    const size_t keys = specs_.size() + 1;
    if (PyDict_GET_SIZE(dict) > Py_ssize_t(keys + 4)) return false;
    for (size_t s = 0; s < keys; ++s) values[s] = nullptr;
    Py_ssize_t position = 0;
    PyObject* key = nullptr;
    PyObject* value = nullptr;
    while (PyDict_Next(dict, &position, &key, &value)) {
      size_t s = 0;
      while (s < keys && key != key_at(s)) ++s;
      if (s == keys) {  // not one of ours by identity: by content, if it is an exact str
        if (!PyUnicode_CheckExact(key)) return false;
        s = 0;
        while (s < keys && PyUnicode_Compare(key, key_at(s)) != 0) ++s;
        if (PyErr_Occurred()) {
          PyErr_Clear();
          return false;
        }
        if (s == keys) continue;  // another key the optimizer does not read
      }
      values[s] = value;
    }
    return true;
  }

  // The key of spec `s`, or "step" for s == specs_.size().
  PyObject* key_at(size_t s) const {
    return s < specs_.size() ? specs_[s].key.ptr() : step_key_.ptr();
  }

  // Requests what commit() reads of an entry: its gradient slot and its step count.
  void prefetch_entry(const Entry& entry) const {
    prefetch_lines(entry.grad_slot, 64);
    if (entry.step_data != nullptr) prefetch_lines(entry.step_data, 8);
  }

  // One state tensor an optimizer keeps per parameter: its key (interned) and initial value.
  struct Spec {
    std::string name;
    double initial;
    py::object key;
  };

  // Keeps `object` alive as long as the plan; returns it.
  PyObject* hold(PyObject* object) {
    Py_INCREF(object);
    held_.adopt(object);
    return object;
  }

  // An open-addressing set of the entries' parameter objects (a few ns per parameter).
  bool find_duplicates() const {
    if (entries_.size() < 2) return false;
    size_t capacity = 4;
    while (capacity < 2 * entries_.size()) capacity *= 2;
    std::vector<const void*> slots(capacity, nullptr);
    for (const Entry& entry : entries_) {
      const void* key = entry.param;
      size_t at = (reinterpret_cast<uintptr_t>(key) >> 4) * 0x9E3779B97F4A7C15ull >> 7;
      for (;; ++at) {
        const void*& slot = slots[at & (capacity - 1)];
        if (slot == nullptr) {
          slot = key;
          break;
        }
        if (slot == key) return true;
      }
    }
    return false;
  }

  std::string where(int64_t index) const {
    return "group " + std::to_string(group_) + " param " + std::to_string(index) + " ";
  }

  c10::ScalarType state_dtype(const at::Tensor& param) const {
    return low_precision_ ? param.scalar_type() : c10::ScalarType::Float;
  }

  void add(int64_t i, PyObject* object, const at::Tensor& param, const at::Tensor& grad,
           PyObject* copy) {
    const at::IntArrayRef sizes = param.sizes();
    auto shape = [&sizes] { return shape_str(sizes); };  // only on errors
    DType type;
    // torch's fused optimizers raise RuntimeError with this wording; ours is a TypeError that
    // Python re-raises as anyaccel's OptimizerTypeRuntimeError, both.
    if (!param.device().is_cpu() || !to_dtype(param.scalar_type(), &type)) {
      throw py::type_error(where(i) + "is " + dtype_str(param.scalar_type()) + " on " +
                           param.device().str() +
                           ": anyaccel's CPU optimizers always step fused, and `fused=True` "
                           "requires all the params to be floating point Tensors of supported "
                           "devices and dtypes (float32, bfloat16 or float16 on the CPU); move "
                           "the parameter to the CPU in one of those dtypes, or use a torch.optim "
                           "optimizer for it");
    }
    if (!param.is_contiguous() && at::has_internal_overlap(param) == at::MemOverlap::Yes) {
      throw std::runtime_error(
          where(i) + "of shape " + shape() + " and strides " + shape_str(param.strides()) +
          " is an expanded view (a stride of 0): unsupported operation: more than one element "
          "of the written-to tensor refers to a single memory location. Please clone() the "
          "tensor before performing the operation (make the parameter a tensor of its own, "
          "e.g. nn.Parameter(t.expand(...).clone())); nothing was stepped");
    }
    if (grad.layout() != c10::kStrided) {
      throw py::type_error(where(i) + "has a sparse gradient: this optimizer does not support "
                           "sparse gradients, please consider SparseAdam instead (or CPUAdagrad, "
                           "which steps the rows a sparse gradient touches)");
    }
    if (!grad.device().is_cpu() || !to_dtype(grad.scalar_type(), &type)) {
      throw py::type_error(where(i) + "has a gradient of " + dtype_str(grad.scalar_type()) +
                           " on " + grad.device().str() +
                           "; gradients must be float32, bfloat16 or float16 CPU tensors");
    }
    if (!same_sizes(grad.sizes(), sizes)) {
      throw py::value_error(where(i) + "has shape " + shape() + " but its gradient has shape " +
                            shape_str(grad.sizes()));
    }
    Entry entry;
    entry.index = i;
    entry.param = &param;
    entry.grad_slot = &grad;
    entry.grad_seen = grad.unsafeGetTensorImpl();
    entry.key = shared_key_ != nullptr ? shared_key_ : object;
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
      hold(copy);
      entry.copy = &tensor;
    }
    const int64_t slot = i - found_begin_;
    PyObject* found = found_[slot];
    // The state's values as prefetch_block() found them (nothing has run since), or a lookup.
    const bool known = found != kLookUpAgain && values_known_[slot];
    auto value_of = [&](PyObject* dict, size_t s) {
      if (known) return values_[slot][s];
      PyObject* value = PyDict_GetItemWithError(dict, key_at(s));
      if (value == nullptr && PyErr_Occurred()) throw py::error_already_set();
      return value;
    };
    if (found == kLookUpAgain) found = lookup_.get(state_map_.ptr(), entry.key);
    if (found != nullptr) {
      if (!PyDict_Check(found)) {
        throw py::type_error(where(i) + "has a state of type " +
                             std::string(Py_TYPE(found)->tp_name) + "; optimizer states are dicts");
      }
      entry.state = hold(found);
      for (size_t s = 0; s < specs_.size(); ++s) {
        PyObject* value = value_of(found, s);
        if (value == nullptr || value == Py_None) continue;  // absent: created at commit
        auto key = [this, s] { return "state '" + specs_[s].name + "' "; };
        if (variable_or_null(value) == nullptr) {
          throw py::type_error(where(i) + key() + "is a " +
                               std::string(Py_TYPE(value)->tp_name) + ", not a tensor");
        }
        const at::Tensor& tensor = THPVariable_Unpack(value);
        if (!same_sizes(tensor.sizes(), sizes)) {
          throw py::value_error(where(i) + key() + "has shape " + shape_str(tensor.sizes()) +
                                " but the parameter has shape " + shape() +
                                "; the state belongs to another parameter (was a state dict "
                                "loaded after the parameters changed or were re-ordered?)");
        }
        const auto expected = state_dtype(param);
        if (tensor.scalar_type() != expected || !tensor.device().is_cpu() ||
            tensor.layout() != c10::kStrided) {
          throw py::type_error(
              where(i) + key() + "is " + dtype_str(tensor.scalar_type()) + " on " +
              tensor.device().str() + "; expected a dense " + dtype_str(expected) +
              " CPU tensor" +
              (low_precision_ ? " (fp32_optimizer_states=False keeps states in the parameter's "
                                "dtype)"
                              : " (optimizer states are float32 unless fp32_optimizer_states="
                                "False)"));
        }
        hold(value);
        entry.states[s] = &tensor;
      }
      PyObject* step = value_of(found, specs_.size());
      if (step != nullptr && step != Py_None) {  // None: no count yet, as 0
        check_step(i, step);
        entry.step = hold(step);
      }
    }
    record(entry, param, grad);
    entries_.push_back(entry);
  }

  // Reads, once, the element counts, data pointers and dtypes commit() hands the kernels.
  static void record(Entry& entry, const at::Tensor& param, const at::Tensor& grad) {
    entry.n = param.numel();
    entry.param_contiguous = param.is_contiguous();
    if (entry.param_contiguous) {
      to_dtype(param.scalar_type(), &entry.param_op.type);
      entry.param_op.data = param.data_ptr();
    }
    entry.grad_contiguous = grad.is_contiguous();
    if (entry.grad_contiguous) {
      to_dtype(grad.scalar_type(), &entry.grad_op.type);
      entry.grad_op.data = grad.data_ptr();
    }
    for (int s = 0; s < kMaxStates; ++s) {
      const at::Tensor* state = entry.states[s];
      entry.state_ready[s] = state != nullptr && state->is_contiguous();
      if (entry.state_ready[s]) {
        to_dtype(state->scalar_type(), &entry.state_ops[s].type);
        entry.state_ops[s].data = state->data_ptr();
      }
    }
    if (entry.copy != nullptr) {
      entry.copy_data = entry.copy->data_ptr();
      entry.copy_kind = entry.copy->scalar_type() == c10::ScalarType::BFloat16 ? Copy::kBF16
                                                                               : Copy::kFP16;
    }
    if (entry.step != nullptr && variable_or_null(entry.step) != nullptr) {
      const at::Tensor& step = THPVariable_Unpack(entry.step);
      entry.step_type = step.scalar_type();
      entry.step_data = step.data_ptr();
    }
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

  static void set_item(PyObject* dict, PyObject* key, const at::Tensor& value) {
    PyObject* wrapped = THPVariable_Wrap(value);
    if (wrapped == nullptr) throw py::error_already_set();
    const int failed = PyDict_SetItem(dict, key, wrapped);
    Py_DECREF(wrapped);
    if (failed != 0) throw py::error_already_set();
  }

  // Adds one to the step count, keeping its kind (torch's float tensor, DeepSpeed's int).
  double advance_step(Entry& entry) {
    if (entry.step == nullptr) {
      set_item(entry.state, step_key_.ptr(),
               at::full({}, 1.0, at::TensorOptions().dtype(at::kFloat)));
      return 1.0;
    }
    PyObject* step = entry.step;
    if (entry.step_data != nullptr) {
      void* data = entry.step_data;
      switch (entry.step_type) {
        case c10::ScalarType::Float: return *static_cast<float*>(data) += 1.0f;
        case c10::ScalarType::Double: return *static_cast<double*>(data) += 1.0;
        case c10::ScalarType::Long: return double(*static_cast<int64_t*>(data) += 1);
        default: return double(*static_cast<int32_t*>(data) += 1);
      }
    }
    py::object next = py::reinterpret_borrow<py::object>(step) + py::int_(1);
    if (PyDict_SetItem(entry.state, step_key_.ptr(), next.ptr()) != 0) {
      throw py::error_already_set();
    }
    return next.cast<double>();
  }

  py::dict state_map_;
  int group_;
  bool low_precision_;
  std::vector<Spec> specs_;
  py::object step_key_;
  PyObject* shared_key_ = nullptr;
  bool duplicates_ = false;
  TensorKeyLookup lookup_;
  // The state-map answers of the block prefetch_block() last read (kLookUpAgain: not looked up).
  static inline PyObject* const kLookUpAgain = reinterpret_cast<PyObject*>(uintptr_t(1));
  PyObject* found_[kPrefetchBlock] = {};
  // Their state values by spec, then the step (borrowed), where every lookup answered.
  PyObject* values_[kPrefetchBlock][kMaxStates + 1] = {};
  bool values_known_[kPrefetchBlock] = {};
  int64_t found_begin_ = 0;
  std::vector<Entry> entries_;
  HeldReferences held_;
  std::deque<at::Tensor> keep_;       // contiguous gradient copies, alive until the plan dies
  std::deque<at::Tensor> created_;    // states created or made contiguous at commit
};

}  // namespace anyaccel
