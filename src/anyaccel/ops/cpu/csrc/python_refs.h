// Reading a group's Python objects without per-parameter overhead: a tensor-keyed dict lookup
// that skips Tensor.__hash__, and the references a plan holds. Part of group_step.h.
#pragma once

#include <pybind11/pybind11.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>
#include <vector>

namespace anyaccel {
namespace py = pybind11;

inline PyObject* variable_or_null(PyObject* object) {
  return object != nullptr && THPVariable_Check(object) ? object : nullptr;
}

// Looks up a tensor-keyed dict without running Tensor.__hash__ (Python code) per parameter.
// torch's Tensor.__hash__ returns id(self), so a dict hashes a tensor key to its address; a
// key type whose __hash__ is that function (checked once per type, against hash() itself) is
// looked up with its address as the known hash, any other key through PyDict_GetItemWithError.
class TensorKeyLookup {
 public:
  // The value for `key` (borrowed), or nullptr when absent; throws on a Python error.
  PyObject* get(PyObject* dict, PyObject* key) {
    // _PyDict_GetItem_KnownHash is CPython's own (checked in the 3.10-3.13 headers); elsewhere,
    // and on releases not checked yet, the public lookup is used.
#if defined(PYPY_VERSION) || defined(Py_GIL_DISABLED) || PY_VERSION_HEX >= 0x030E0000
    PyObject* found = PyDict_GetItemWithError(dict, key);
#else
    PyObject* found =
        hashes_by_address(key)
            ? _PyDict_GetItem_KnownHash(dict, key, static_cast<Py_hash_t>(
                                                       reinterpret_cast<uintptr_t>(key)))
            : PyDict_GetItemWithError(dict, key);
#endif
    if (found == nullptr && PyErr_Occurred()) throw py::error_already_set();
    return found;
  }

 private:
  bool hashes_by_address(PyObject* key) {
    if (reinterpret_cast<uintptr_t>(key) > uintptr_t(PY_SSIZE_T_MAX)) return false;
    PyTypeObject* type = Py_TYPE(key);
    if (type != checked_type_) {
      checked_type_ = type;
      type_ok_ = false;
      if (THPVariableClass != nullptr && PyType_IsSubtype(type, reinterpret_cast<PyTypeObject*>(
                                                                    THPVariableClass))) {
        py::object ours = py::reinterpret_steal<py::object>(
            PyObject_GetAttrString(reinterpret_cast<PyObject*>(type), "__hash__"));
        py::object tensors = py::reinterpret_steal<py::object>(
            PyObject_GetAttrString(THPVariableClass, "__hash__"));
        if (!ours || !tensors) throw py::error_already_set();
        const Py_hash_t hash = PyObject_Hash(key);
        if (hash == -1) throw py::error_already_set();
        type_ok_ = ours.ptr() == tensors.ptr() &&
                   hash == static_cast<Py_hash_t>(reinterpret_cast<uintptr_t>(key));
      }
    }
    return type_ok_;
  }

  PyTypeObject* checked_type_ = nullptr;  // alive: a key of this type is alive in the plan
  bool type_ok_ = false;
};

// References a plan owns, released when it dies (also when its constructor throws).
class HeldReferences {
 public:
  HeldReferences() = default;
  HeldReferences(const HeldReferences&) = delete;
  HeldReferences& operator=(const HeldReferences&) = delete;
  ~HeldReferences() {
    for (PyObject* object : objects_) Py_DECREF(object);
  }
  void reserve(size_t count) { objects_.reserve(count); }
  // Adopts a reference the caller owns.
  void adopt(PyObject* object) { objects_.push_back(object); }

 private:
  std::vector<PyObject*> objects_;
};

}  // namespace anyaccel
