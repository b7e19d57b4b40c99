// Running a committed plan: each task's elements through fp32 chunk buffers (or an optimizer's
// fused loop), spread evenly over one OpenMP parallel region. Part of group_step.h.
#pragma once

#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "group_plan.h"
#include "group_task.h"
#include "simd.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace anyaccel {
namespace py = pybind11;

// fp32 view of `n` elements of an operand from `offset`: the operand itself when it is fp32,
// otherwise `buffer` filled by conversion.
inline float* load_f32(const Operand& op, int64_t offset, int64_t n, float* buffer) {
  switch (op.type) {
    case DType::kFloat32: return static_cast<float*>(op.data) + offset;
    case DType::kBFloat16:
      bf16_to_f32(static_cast<const uint16_t*>(op.data) + offset, buffer, n);
      break;
    case DType::kFloat16:
      fp16_to_f32(static_cast<const uint16_t*>(op.data) + offset, buffer, n);
      break;
  }
  return buffer;
}

// Writes an updated fp32 chunk back to a low-precision operand (rounded to nearest even).
inline void store_f32(const Operand& op, int64_t offset, int64_t n, const float* values) {
  if (op.type == DType::kFloat32) return;
  uint16_t* dst = static_cast<uint16_t*>(op.data) + offset;
  if (op.type == DType::kBFloat16) {
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
      const float* src = task.param.type == DType::kFloat32 ? p : load_f32(task.param, offset, n, p);
      write_copy(task.copy_kind, src, task.copy, offset, n);
    }
  }
}

// Whether a task is a `type` (bf16 or fp16) parameter and gradient with `states` fp32 states
// and no copy: the case the optimizers' one-pass loops take whole (DeepSpeed's default for
// low-precision models). fp16 needs F16C (kFp16OnePass); without it, fp16 takes chunk buffers.
inline bool one_pass(const Task& task, int states, DType type) {
  if (type == DType::kFloat16 && !kFp16OnePass) return false;
  if (task.param.type != type || task.grad.type != type || task.copy_kind != Copy::kNone) {
    return false;
  }
  for (int k = 0; k < states; ++k) {
    if (task.states[k].type != DType::kFloat32) return false;
  }
  return true;
}

constexpr size_t kTaskAhead = 4;  // tasks whose data run_group() requests ahead

inline void prefetch_task(const Task& task) {
  prefetch_lines(task.param.data, 64);
  prefetch_lines(task.grad.data, 64);
  for (const Operand& state : task.states) {
    if (state.data != nullptr) prefetch_lines(state.data, 64);
  }
}

// Spreads all tasks' elements evenly over one parallel region (by element count, so a group of
// many small tensors balances as well as one big tensor), calling math on each thread's part.
template <typename Range>
inline void run_group(const std::vector<Task>& tasks, int threads, const Range& range) {
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
      // Small tensors: the next tasks' first lines are requested while this one runs.
      if (t + kTaskAhead < tasks.size() && tasks[t].n < kChunk) prefetch_task(tasks[t + kTaskAhead]);
      const int64_t end = std::min(hi, offsets[t + 1]);
      if (end > lo) range(tasks[t], lo - offsets[t], end - offsets[t]);
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

// Runs a prepared group: commit (with the GIL), kernel (without), copy-backs (with). `direct`
// may take a task's range whole (a fused loop for one combination of operand dtypes) and return
// true; any other range is run through fp32 chunk buffers by `math`.
template <int kStates, typename Scalars, typename Math, typename Direct>
inline void step_group(Plan& plan, int threads, const Scalars& per_task, const Math& math,
                       const Direct& direct) {
  std::vector<std::pair<at::Tensor, at::Tensor>> after;
  std::vector<Task> tasks = plan.commit(&after);
  std::vector<decltype(per_task(tasks[0]))> scalars;
  scalars.reserve(tasks.size());
  for (const Task& task : tasks) scalars.push_back(per_task(task));
  {
    py::gil_scoped_release release;
    const Task* first = tasks.data();
    run_group(tasks, threads, [&](const Task& task, int64_t begin, int64_t end) {
      const auto& scalar = scalars[&task - first];
      if (direct(task, begin, end, scalar)) return;
      run_task_range<kStates>(
          task, begin, end,
          [&](float* p, const float* g, float* const* s, int64_t n, const Task&) {
            math(p, g, s, n, scalar);
          });
    });
  }
  for (auto& [param, work] : after) param.copy_(work);
}

template <int kStates, typename Scalars, typename Math>
inline void step_group(Plan& plan, int threads, const Scalars& per_task, const Math& math) {
  step_group<kStates>(plan, threads, per_task, math,
                      [](const Task&, int64_t, int64_t, const auto&) { return false; });
}

}  // namespace anyaccel
