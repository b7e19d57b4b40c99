// Which operators may run on the CPU's kernels through the fallback: torch's own (aten, prims),
// torchvision's (it ships kernels for the major devices), and the ops or namespaces a user
// allows (ANYACCEL_EMULATED_CPU_OPS, anyaccel.testing.emulated.allow_cpu_kernels). Any other
// op without a PrivateUse1 kernel fails with torch's NotImplementedError naming the device
// type, as an extension op with a CPU kernel only fails on a GPU. Compiled through
// emulated_device.cpp.
#pragma once

#include "devices.h"

#include <shared_mutex>

namespace anyaccel {
namespace emulated {
namespace {

// torch's own operators, and the libraries whose kernels a GPU has too.
const std::unordered_set<std::string>& default_cpu_kernel_namespaces() {
  static const std::unordered_set<std::string> kNamespaces = {"aten", "prims", "torchvision"};
  return kNamespaces;
}

std::shared_mutex g_allowed_mutex;
std::unordered_set<std::string> g_allowed;  // namespaces ("mylib"), ops ("mylib::op[.overload]")

void allow_cpu_kernels(const std::vector<std::string>& names) {
  std::unique_lock<std::shared_mutex> lock(g_allowed_mutex);
  for (const std::string& name : names) g_allowed.insert(name);
}

std::vector<std::string> allowed_cpu_kernels() {
  std::shared_lock<std::shared_mutex> lock(g_allowed_mutex);
  std::vector<std::string> names(g_allowed.begin(), g_allowed.end());
  std::sort(names.begin(), names.end());
  return names;
}

// Raise torch's error for an op the fallback may not take (aten's path: one compare).
void check_cpu_kernel_allowed(const c10::OperatorHandle& op) {
  const std::string& name = op.schema().name();
  if (name.compare(0, 6, "aten::") == 0) return;
  const std::string::size_type colon = name.find("::");
  const std::string space = colon == std::string::npos ? name : name.substr(0, colon);
  if (default_cpu_kernel_namespaces().count(space) > 0) return;
  const std::string& overload = op.schema().overload_name();
  {
    std::shared_lock<std::shared_mutex> lock(g_allowed_mutex);
    if (g_allowed.count(space) > 0 || g_allowed.count(name) > 0 ||
        (!overload.empty() && g_allowed.count(name + "." + overload) > 0)) {
      return;
    }
  }
  TORCH_CHECK_NOT_IMPLEMENTED(
      false, "Could not run '", name, "' with arguments from the '", backend_name(),
      "' backend. This could be because the operator doesn't exist for this backend: it has "
      "no ", backend_name(), " (PrivateUse1) kernel. The emulated ", backend_name(),
      " device runs torch's own operators (aten, prims) and torchvision's on the CPU's kernels, "
      "and refuses other CPU-only kernels as a GPU does. Register a kernel for the device "
      "(lib.impl(\"", name.substr(colon == std::string::npos ? 0 : colon + 2),
      "\", fn, \"PrivateUse1\")), or allow the CPU kernel explicitly: ANYACCEL_EMULATED_CPU_OPS=",
      name, " (or =", space, " for the namespace), or "
      "anyaccel.testing.emulated.allow_cpu_kernels(\"", name, "\")");
}

}  // namespace
}  // namespace emulated
}  // namespace anyaccel
