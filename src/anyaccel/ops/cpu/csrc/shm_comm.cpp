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
// The module also carries DeepSpeed's ShareMemCommBuilder interface: initialize(world_size,
// rank) and vector_kernel_level(), and importing it registers torch.ops.deepspeed's
// inference_all_reduce ops (through anyaccel.integrations.deepspeed, named in kDeepSpeedGlue).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ANYACCEL_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define ANYACCEL_RELAX() asm volatile("yield" ::: "memory")
#else
#define ANYACCEL_RELAX() asm volatile("" ::: "memory")
#endif

#include "simd.h"

namespace py = pybind11;

namespace anyaccel {
namespace {

constexpr uint64_t kMagic = 0x616e7973686d3032ull;  // "anyshm02"
constexpr int kSlots = 2;
// How long a rank waiting for its peers spins, then yields its core, before it sleeps. Measured
// on 2 ranks of a loaded 2-core host: spinning 20 us or more doubles a 16 KiB call (the spinner
// holds the core its peer needs), 0 to 10 us are alike; a quiet host needs a few microseconds of
// spinning to catch a peer of a short call without a futex wake-up, and the yield stage keeps a
// virtual CPU from halting. On an oversubscribed host the yield stage is skipped (see
// wait_for_peers): with two busy processes beside the 2 ranks on 2 cores, yielding made 16 KiB
// calls take 0.5 to 1.5 ms (a time slice given away per call), sleeping 60 to 110 us.
constexpr std::chrono::microseconds kSpinWait(10);
constexpr std::chrono::microseconds kYieldWait(50);
// fp32 all-reduce chunks up to this many bytes go into the slot with streaming stores
// (stream_copy).
constexpr int64_t kStreamBelow = 16 << 10;

enum class DType : int { kFloat32 = 0, kBFloat16 = 1, kFloat16 = 2 };
// kAvg sums in double and divides there before rounding to the tensor's dtype (a mean that fits
// is exact even where the dtype's or fp32's sum would overflow). kMin and kMax let
// a NaN from any rank win, as torch.minimum/maximum do; between equal values (-0.0 and +0.0)
// the lower rank's wins, as folding torch.minimum over the ranks in order does.
enum class Op : int { kSum = 0, kProduct = 1, kMin = 2, kMax = 3, kAvg = 4 };
constexpr int32_t kOps = 5;

// What a round's `op` field holds besides the all-reduce ops: which collective (and its
// reduce op or root), so ranks that call different collectives find out like a size mismatch.
constexpr int32_t kAllGather = 16;
constexpr int32_t kReduceScatter = 32;  // + the reduce op
constexpr int32_t kBroadcast = 64;      // + the root
// A `dtype` field of kBytes + tag: a byte collective of a caller's dtype (tag from Python).
constexpr int32_t kBytes = 256;

struct Header {
  uint64_t magic;
  int64_t world_size;
  int64_t slot_bytes;
};

struct alignas(128) Control {
  uint64_t seq;      // the last sequence this rank published (atomic)
  uint32_t word;     // low bits of seq, bumped on abandon: the futex peers sleep on
  uint32_t waiters;  // peers asleep (or about to sleep) on `word`
  int64_t nbytes[kSlots];
  int64_t total[kSlots];  // the whole call's byte count (every chunk of a call repeats it)
  int32_t dtype[kSlots];
  int32_t op[kSlots];
  int32_t failed;  // set (atomic) when this rank gave up on the communicator
};

inline size_t element_size(DType dtype) { return dtype == DType::kFloat32 ? 4 : 2; }

inline std::string dtype_name(int32_t code) {
  switch (code) {
    case 0: return "float32";
    case 1: return "bfloat16";
    case 2: return "float16";
    default:
      return code >= kBytes ? "dtype #" + std::to_string(code - kBytes) : "unknown dtype";
  }
}

inline std::string op_name(int32_t code) {
  switch (code) {
    case 0: return "SUM";
    case 1: return "PRODUCT";
    case 2: return "MIN";
    case 3: return "MAX";
    case 4: return "AVG";
    default: break;
  }
  if (code == kAllGather) return "all_gather";
  if (code >= kReduceScatter && code < kReduceScatter + kOps)
    return "reduce_scatter " + op_name(code - kReduceScatter);
  if (code >= kBroadcast) return "broadcast from rank " + std::to_string(code - kBroadcast);
  return "unknown op";
}

inline const char* collective_name(int32_t op) {
  if (op >= 0 && op < kOps) return "all_reduce";
  if (op == kAllGather) return "all_gather";
  if (op >= kReduceScatter && op < kReduceScatter + kOps) return "reduce_scatter";
  return "broadcast";
}

inline float bf16_to_float(uint16_t bits) {
  const uint32_t wide = uint32_t(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof value);
  return value;
}

inline float fp16_to_float(uint16_t half) {
  const uint32_t sign = uint32_t(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1Fu;
  const uint32_t mantissa = half & 0x3FFu;
  uint32_t bits;
  if (exponent == 0x1Fu) {
    bits = sign | 0x7F800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  } else {  // zero or subnormal: exact in float
    float value = float(mantissa) * 5.9604644775390625e-8f;  // 2^-24
    return sign ? -value : value;
  }
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// `a` (the ranks before) combined with `b` (the next rank). b != b: b is a NaN.
template <Op kOp>
inline float combine(float a, float b) {
  if constexpr (kOp == Op::kSum) return a + b;
  if constexpr (kOp == Op::kProduct) return a * b;
  if constexpr (kOp == Op::kMin) return (b < a || b != b) ? b : a;
  return (b > a || b != b) ? b : a;
}

// out[i] = srcs[0][i] (op) srcs[1][i] (op) ... in rank order, for elements [begin, end). `out`
// may be one of the sources (a rank reduces from its own tensor, not its slot's copy of it: one
// stream of memory traffic less), so every element is read from all sources before it is written.
template <Op kOp>
void reduce_float(float* out, const std::vector<const char*>& srcs, int64_t begin,
                  int64_t end) {
  const float* s0 = reinterpret_cast<const float*>(srcs[0]);
  if (srcs.size() == 2) {
    const float* s1 = reinterpret_cast<const float*>(srcs[1]);
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) out[i] = combine<kOp>(s0[i], s1[i]);
    return;
  }
  constexpr int64_t kBlock = 1024;
  float acc[kBlock];
  for (int64_t start = begin; start < end; start += kBlock) {
    const int64_t count = std::min(kBlock, end - start);
#pragma omp simd
    for (int64_t i = 0; i < count; ++i) acc[i] = s0[start + i];
    for (size_t r = 1; r < srcs.size(); ++r) {
      const float* sr = reinterpret_cast<const float*>(srcs[r]) + start;
#pragma omp simd
      for (int64_t i = 0; i < count; ++i) acc[i] = combine<kOp>(acc[i], sr[i]);
    }
#pragma omp simd
    for (int64_t i = 0; i < count; ++i) out[start + i] = acc[i];
  }
}

template <DType kType>
inline float load(const char* base, int64_t i) {
  if constexpr (kType == DType::kFloat32) return reinterpret_cast<const float*>(base)[i];
  const uint16_t bits = reinterpret_cast<const uint16_t*>(base)[i];
  return kType == DType::kBFloat16 ? bf16_to_float(bits) : fp16_to_float(bits);
}

template <DType kType>
inline void store(char* base, int64_t i, float value) {
  if constexpr (kType == DType::kFloat32) {
    reinterpret_cast<float*>(base)[i] = value;
  } else {
    reinterpret_cast<uint16_t*>(base)[i] =
        kType == DType::kBFloat16 ? float_to_bf16(value) : float_to_fp16(value);
  }
}

// The mean over ranks: summed in double in rank order, divided there, then rounded to float and
// to the dtype (as torch converts a double), so a mean that fits is exact even where the sum
// would overflow the dtype or fp32.
template <DType kType>
void reduce_mean(char* out, const std::vector<const char*>& slots, int64_t begin, int64_t end) {
  constexpr int64_t kBlock = 512;
  double acc[kBlock];
  const double ranks = double(slots.size());
  for (int64_t start = begin; start < end; start += kBlock) {
    const int64_t count = std::min(kBlock, end - start);
#pragma omp simd
    for (int64_t i = 0; i < count; ++i) acc[i] = double(load<kType>(slots[0], start + i));
    for (size_t r = 1; r < slots.size(); ++r) {
#pragma omp simd
      for (int64_t i = 0; i < count; ++i) acc[i] += double(load<kType>(slots[r], start + i));
    }
    for (int64_t i = 0; i < count; ++i) store<kType>(out, start + i, float(acc[i] / ranks));
  }
}

#if defined(__x86_64__) && defined(__AVX512F__) && \
    (defined(__clang__) ? __clang_major__ >= 11 : __GNUC__ >= 10)
#define ANYACCEL_BF16_PAIR 1
// Two ranks' bf16 SUM or PRODUCT with the CPU's own fp32 -> bf16 conversion (AVX512_BF16,
// checked at run time; this build's SIMD level must be AVX-512 already). That instruction rounds
// as float_to_bf16 does for every normal, zero and infinite value, but turns NaNs and subnormals
// its own way, so 16 results holding either take the integer rounding instead. Measured on 2
// ranks (the kernel alone, no Python): 16 KiB 5.7 -> 4.6 us, 64 KiB 10.8 -> 8.9 us, 1 MiB
// 155 -> 135 us. Returns how many elements it did (the rest go to the scalar loop).
template <Op kOp>
__attribute__((target("avx512f,avx512bw,avx512dq,avx512bf16"))) int64_t reduce_bf16_pair(
    uint16_t* out, const uint16_t* s0, const uint16_t* s1, int64_t begin, int64_t end) {
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    const __m512 a = _mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s0 + i))), 16));
    const __m512 b = _mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s1 + i))), 16));
    const __m512 value = kOp == Op::kSum ? _mm512_add_ps(a, b) : _mm512_mul_ps(a, b);
    __m256i bf16;
    if (_mm512_fpclass_ps_mask(value, 0x01 | 0x20 | 0x80) == 0) {  // no NaN, no subnormal
      bf16 = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(value));
    } else {
      const __m512i bits = _mm512_castps_si512(value);
      const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
      __m512i rounded = _mm512_srli_epi32(
          _mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
      rounded = _mm512_mask_mov_epi32(rounded, _mm512_cmp_ps_mask(value, value, _CMP_UNORD_Q),
                                      _mm512_set1_epi32(0x7FC0));
      bf16 = _mm512_cvtepi32_epi16(rounded);
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), bf16);
  }
  return i - begin;
}

inline bool cpu_has_bf16() {
  static const bool has = __builtin_cpu_supports("avx512bf16");
  return has;
}
#endif

template <Op kOp, DType kType>
void reduce_half(uint16_t* out, const std::vector<const char*>& slots, int64_t begin,
                 int64_t end) {
  if (slots.size() == 2) {  // two ranks: one fused pass (no float block), a third fewer stores
    const uint16_t* s0 = reinterpret_cast<const uint16_t*>(slots[0]);
    const uint16_t* s1 = reinterpret_cast<const uint16_t*>(slots[1]);
#if defined(ANYACCEL_BF16_PAIR)
    if constexpr (kType == DType::kBFloat16 && (kOp == Op::kSum || kOp == Op::kProduct)) {
      if (cpu_has_bf16()) begin += reduce_bf16_pair<kOp>(out, s0, s1, begin, end);
    }
#endif
#pragma omp simd
    for (int64_t i = begin; i < end; ++i)
      out[i] = kType == DType::kBFloat16
                   ? float_to_bf16(combine<kOp>(bf16_to_float(s0[i]), bf16_to_float(s1[i])))
                   : float_to_fp16(combine<kOp>(fp16_to_float(s0[i]), fp16_to_float(s1[i])));
    return;
  }
  constexpr int64_t kBlock = 512;
  float acc[kBlock];
  for (int64_t start = begin; start < end; start += kBlock) {
    const int64_t count = std::min(kBlock, end - start);
    for (size_t r = 0; r < slots.size(); ++r) {
      const uint16_t* sr = reinterpret_cast<const uint16_t*>(slots[r]) + start;
      if (r == 0) {
#pragma omp simd
        for (int64_t i = 0; i < count; ++i)
          acc[i] = kType == DType::kBFloat16 ? bf16_to_float(sr[i]) : fp16_to_float(sr[i]);
      } else {
#pragma omp simd
        for (int64_t i = 0; i < count; ++i)
          acc[i] = combine<kOp>(
              acc[i], kType == DType::kBFloat16 ? bf16_to_float(sr[i]) : fp16_to_float(sr[i]));
      }
    }
#pragma omp simd
    for (int64_t i = 0; i < count; ++i)
      out[start + i] = kType == DType::kBFloat16 ? float_to_bf16(acc[i]) : float_to_fp16(acc[i]);
  }
}

template <Op kOp>
void reduce_dispatch_type(DType dtype, char* out, const std::vector<const char*>& slots,
                          int64_t begin, int64_t end) {
  switch (dtype) {
    case DType::kFloat32:
      return reduce_float<kOp>(reinterpret_cast<float*>(out), slots, begin, end);
    case DType::kBFloat16:
      return reduce_half<kOp, DType::kBFloat16>(reinterpret_cast<uint16_t*>(out), slots, begin,
                                                 end);
    case DType::kFloat16:
      return reduce_half<kOp, DType::kFloat16>(reinterpret_cast<uint16_t*>(out), slots, begin,
                                                end);
  }
}

void reduce(Op op, DType dtype, char* out, const std::vector<const char*>& slots, int64_t begin,
            int64_t end) {
  switch (op) {
    case Op::kSum: return reduce_dispatch_type<Op::kSum>(dtype, out, slots, begin, end);
    case Op::kProduct: return reduce_dispatch_type<Op::kProduct>(dtype, out, slots, begin, end);
    case Op::kMin: return reduce_dispatch_type<Op::kMin>(dtype, out, slots, begin, end);
    case Op::kMax: return reduce_dispatch_type<Op::kMax>(dtype, out, slots, begin, end);
    case Op::kAvg:
      switch (dtype) {
        case DType::kFloat32: return reduce_mean<DType::kFloat32>(out, slots, begin, end);
        case DType::kBFloat16: return reduce_mean<DType::kBFloat16>(out, slots, begin, end);
        case DType::kFloat16: return reduce_mean<DType::kFloat16>(out, slots, begin, end);
      }
  }
}

// Whether this machine has more runnable tasks than online CPUs right now: the fourth field of
// /proc/loadavg ("runnable/total", the caller included). False where it cannot tell. Opened and
// closed each time, so the library holds no descriptor between calls.
bool oversubscribed() {
  static const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  const int fd = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char text[128];
  const ssize_t got = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  if (got <= 0 || cpus <= 0) return false;
  text[got] = '\0';
  const char* field = text;
  for (int skip = 0; skip < 3 && field != nullptr; ++skip) {
    field = std::strchr(field, ' ');
    if (field != nullptr) ++field;
  }
  return field != nullptr && std::strtol(field, nullptr, 10) > cpus;
}

// oversubscribed(), read at most once a millisecond per process (a wait that outlasts the spin
// then costs a clock read, not a file read, and one passing task does not decide every wait).
bool oversubscribed_lately() {
  static std::atomic<int64_t> next_read{0};
  static std::atomic<bool> answer{false};
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  int64_t due = next_read.load(std::memory_order_relaxed);
  if (now >= due && next_read.compare_exchange_strong(due, now + 1000000)) {
    answer.store(oversubscribed(), std::memory_order_relaxed);
  }
  return answer.load(std::memory_order_relaxed);
}

// Whether [a, a + a_bytes) and [b, b + b_bytes) share a byte.
inline bool overlap(uintptr_t a, int64_t a_bytes, uintptr_t b, int64_t b_bytes) {
  return a_bytes > 0 && b_bytes > 0 && a < b + uintptr_t(b_bytes) && b < a + uintptr_t(a_bytes);
}

long futex(uint32_t* word, int operation, uint32_t value, const struct timespec* timeout) {
  return syscall(SYS_futex, word, operation, value, timeout, nullptr, 0);
}

// Whether process `pid` still runs: it exists and is not a zombie waiting to be reaped.
bool process_alive(int pid) {
  if (pid <= 0) return true;  // unknown: rely on the deadline
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  std::ifstream stat(path);
  if (!stat) return true;  // no /proc: trust kill()
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return true;
  const char state = text[close + 2];
  return state != 'Z' && state != 'X';
}

class Communicator {
 public:
  Communicator(int fd, int64_t segment_bytes, int world_size, int rank, int64_t slot_bytes,
               bool create)
      : world_size_(world_size), rank_(rank), slot_bytes_(slot_bytes), bytes_(segment_bytes) {
    if (world_size < 1 || rank < 0 || rank >= world_size || slot_bytes <= 0 ||
        slot_bytes % 64 != 0 || segment_bytes < required_bytes(world_size, slot_bytes)) {
      throw std::invalid_argument("shared-memory communicator: inconsistent layout arguments");
    }
    void* base = mmap(nullptr, size_t(segment_bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
      throw std::runtime_error(std::string("cannot map the shared-memory segment: ") +
                               std::strerror(errno));
    }
    base_ = static_cast<char*>(base);
    Header* header = reinterpret_cast<Header*>(base_);
    if (create) {
      header->world_size = world_size;
      header->slot_bytes = slot_bytes;
      __atomic_store_n(&header->magic, kMagic, __ATOMIC_RELEASE);
    } else if (__atomic_load_n(&header->magic, __ATOMIC_ACQUIRE) != kMagic ||
               header->world_size != world_size || header->slot_bytes != slot_bytes) {
      munmap(base_, size_t(bytes_));
      base_ = nullptr;
      throw std::runtime_error("the shared-memory segment does not hold this group's layout");
    }
    seq_ = __atomic_load_n(&control(rank)->seq, __ATOMIC_ACQUIRE);
    pids_.assign(size_t(world_size), 0);
    sources_.assign(size_t(world_size), nullptr);
  }

  ~Communicator() { close(); }

  static int64_t required_bytes(int64_t world_size, int64_t slot_bytes) {
    return header_bytes(world_size) + world_size * kSlots * slot_bytes;
  }

  void set_peer_pids(const std::vector<int>& pids) {
    if (int(pids.size()) != world_size_) throw std::invalid_argument("one pid per rank expected");
    pids_ = pids;
  }

  void close() {
    std::lock_guard<std::mutex> hold(mutex_);
    if (base_ != nullptr) {
      munmap(base_, size_t(bytes_));
      base_ = nullptr;
    }
  }

  bool failed() const { return failed_; }

  // Mark this communicator unusable here and tell the peers, so they stop waiting at once.
  void abandon() {
    failed_ = true;
    if (base_ == nullptr) return;
    Control* mine = control(rank_);
    __atomic_store_n(&mine->failed, 1, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&mine->word, 1u, __ATOMIC_SEQ_CST);
    futex(&mine->word, FUTEX_WAKE, INT_MAX, nullptr);
  }

  void all_reduce(uintptr_t address, int64_t numel, int dtype_code, int op_code, double timeout,
                  int threads) {
    std::lock_guard<std::mutex> hold(mutex_);
    check_usable();
    if (dtype_code < 0 || dtype_code > 2 || op_code < 0 || op_code >= kOps || numel < 0) {
      throw std::invalid_argument("all_reduce: unknown dtype or op code, or negative size");
    }
    const DType dtype = DType(dtype_code);
    const Op op = Op(op_code);
    const int64_t elem = int64_t(element_size(dtype));
    const int64_t chunk_elems = slot_bytes_ / elem;
    char* data = reinterpret_cast<char*>(address);
    const auto deadline = deadline_after(timeout);
    const int64_t total = numel * elem;
    int64_t offset = 0;
    do {  // an empty tensor still takes one round, so every rank agrees on the sequence
      const int64_t count = std::min(chunk_elems, numel - offset);
      run_round(data + offset * elem, count, total, dtype, op, deadline, timeout, threads);
      offset += count;
    } while (offset < numel);
  }

  // all_reduce for a caller without Python (anyaccel's c10d Backend), answering as run_native.
  int all_reduce_native(void* data, int64_t numel, int dtype_code, int op_code, double timeout,
                        int threads, char* message, size_t capacity) noexcept {
    return run_native(
        [&] {
          all_reduce(reinterpret_cast<uintptr_t>(data), numel, dtype_code, op_code, timeout,
                     threads);
        },
        message, capacity);
  }

  std::uintptr_t handle() { return reinterpret_cast<std::uintptr_t>(this); }
  int world_size() const { return world_size_; }

  // A collective for a caller without Python (anyaccel's c10d Backend): 0 when done; 1 when
  // this communicator is closed or has failed, and nothing was done (the caller's other path
  // says why); 2 on an error, its text in `message` (`capacity` bytes, always terminated).
  template <typename Call>
  int run_native(Call call, char* message, size_t capacity) noexcept {
    try {
      {
        std::lock_guard<std::mutex> hold(mutex_);
        if (base_ == nullptr || failed_) return 1;
      }
      call();  // takes the lock itself
      return 0;
    } catch (const std::exception& exc) {
      std::snprintf(message, capacity, "%s", exc.what());
    } catch (...) {
      std::snprintf(message, capacity, "%s", "unknown error");
    }
    return 2;
  }

  // outputs[r] (nbytes each) = rank r's `nbytes` bytes at `in`.
  void all_gather(uintptr_t in, const std::vector<uintptr_t>& outputs, int64_t nbytes, int tag,
                  double timeout, int threads) {
    std::lock_guard<std::mutex> hold(mutex_);
    check_bytes_call(nbytes, tag);
    if (int(outputs.size()) != world_size_) {
      throw std::invalid_argument("all_gather: one output address per rank expected");
    }
    // An input sharing memory with an output other than exactly as this rank's own output (a
    // shifted view) would be overwritten before a later chunk reads it: such a call gathers
    // from a copy of its input, so its result is gloo's. Exactly in place, or apart, needs none.
    const char* src = reinterpret_cast<const char*>(in);
    std::vector<char> staging;
    bool overlapping = false;
    for (int r = 0; r < world_size_; ++r) {
      const uintptr_t output = outputs[size_t(r)];
      overlapping |= overlap(output, nbytes, in, nbytes) && !(r == rank_ && output == in);
    }
    if (overlapping) {
      staging.assign(src, src + nbytes);
      src = staging.data();
    }
    const auto deadline = deadline_after(timeout);
    int64_t offset = 0;
    do {
      const int64_t count = std::min(slot_bytes_, nbytes - offset);
      exchange(nbytes, count, kBytes + tag, kAllGather, deadline, timeout,
               [&](char* mine) { parallel_copy(mine, src + offset, count, threads); },
               [&](int parity) {
                 for (int r = 0; r < world_size_; ++r)
                   parallel_copy(reinterpret_cast<char*>(outputs[size_t(r)]) + offset,
                                 slot(r, parity), count, threads);
               });
      offset += count;
    } while (offset < nbytes);
  }

  // `nbytes` bytes at `address` on every rank = those of rank `root`.
  void broadcast(uintptr_t address, int64_t nbytes, int root, int tag, double timeout,
                 int threads) {
    std::lock_guard<std::mutex> hold(mutex_);
    check_bytes_call(nbytes, tag);
    if (root < 0 || root >= world_size_) throw std::invalid_argument("broadcast: bad root");
    char* data = reinterpret_cast<char*>(address);
    const auto deadline = deadline_after(timeout);
    int64_t offset = 0;
    do {
      const int64_t count = std::min(slot_bytes_, nbytes - offset);
      exchange(nbytes, count, kBytes + tag, kBroadcast + root, deadline, timeout,
               [&](char* mine) {
                 if (rank_ == root) parallel_copy(mine, data + offset, count, threads);
               },
               [&](int parity) {
                 if (rank_ != root) parallel_copy(data + offset, slot(root, parity), count, threads);
               });
      offset += count;
    } while (offset < nbytes);
  }

  // out (numel) = the reduction over ranks of their in[rank_ * numel .. (rank_ + 1) * numel).
  void reduce_scatter(uintptr_t in, uintptr_t out, int64_t numel, int dtype_code, int op_code,
                      double timeout, int threads) {
    std::lock_guard<std::mutex> hold(mutex_);
    check_usable();
    if (dtype_code < 0 || dtype_code > 2 || op_code < 0 || op_code >= kOps || numel < 0) {
      throw std::invalid_argument("reduce_scatter: unknown dtype or op code, or negative size");
    }
    const DType dtype = DType(dtype_code);
    const int64_t elem = int64_t(element_size(dtype));
    const int64_t chunk = std::max<int64_t>(1, slot_bytes_ / (elem * world_size_));
    const char* src = reinterpret_cast<const char*>(in);
    const auto deadline = deadline_after(timeout);
    const int64_t total = numel * elem * world_size_;
    // An output sharing memory with the input other than as this rank's own part exactly (a
    // shifted view) would overwrite input that a later chunk still reads: such a call reduces
    // into a buffer of its own and copies it out at the end, so its sums are gloo's. Exactly in
    // place, or apart, needs none.
    const int64_t out_bytes = numel * elem;
    const bool staged =
        overlap(out, out_bytes, in, total) && out != in + uintptr_t(rank_ * out_bytes);
    std::vector<char> staging(staged ? size_t(out_bytes) : 0);
    char* dst = staged ? staging.data() : reinterpret_cast<char*>(out);
    int64_t offset = 0;
    do {
      const int64_t count = std::min(chunk, numel - offset);
      exchange(total, count * elem * world_size_, dtype_code, kReduceScatter + op_code, deadline,
               timeout,
               [&](char* mine) {
                 for (int r = 0; r < world_size_; ++r)
                   std::memcpy(mine + r * count * elem, src + (r * numel + offset) * elem,
                               size_t(count * elem));
               },
               [&](int parity) {
                 // this rank's own part straight from its input, as all_reduce does
                 for (int r = 0; r < world_size_; ++r)
                   sources_[size_t(r)] = r == rank_ ? src + (rank_ * numel + offset) * elem
                                                    : slot(r, parity) + rank_ * count * elem;
                 reduce_parallel(Op(op_code), dtype, dst + offset * elem, sources_, count,
                                 threads);
               });
      offset += count;
    } while (offset < numel);
    if (staged) std::memcpy(reinterpret_cast<char*>(out), staging.data(), size_t(out_bytes));
  }

  void barrier(double timeout) {
    std::lock_guard<std::mutex> hold(mutex_);
    check_usable();
    run_round(nullptr, 0, 0, DType::kFloat32, Op::kSum, deadline_after(timeout), timeout, 1);
  }

 private:
  using Clock = std::chrono::steady_clock;

  static int64_t header_bytes(int64_t world_size) {
    return 128 + world_size * int64_t(sizeof(Control));
  }

  static Clock::time_point deadline_after(double timeout) {
    return Clock::now() + std::chrono::microseconds(int64_t(timeout * 1e6));
  }

  Control* control(int rank) const {
    return reinterpret_cast<Control*>(base_ + 128) + rank;
  }

  char* slot(int rank, int parity) const {
    return base_ + header_bytes(world_size_) + (int64_t(rank) * kSlots + parity) * slot_bytes_;
  }

  void check_usable() const {
    if (base_ == nullptr) throw std::runtime_error("the shared-memory communicator is closed");
    if (failed_) {
      throw std::runtime_error(
          "the shared-memory communicator failed earlier (a rank died or timed out); "
          "its process group is no longer usable: restart the job");
    }
  }

  // One chunk of `count` elements of a call of `total` bytes: publish, wait, check, reduce.
  void run_round(char* data, int64_t count, int64_t total, DType dtype, Op op,
                 Clock::time_point deadline, double timeout, int threads) {
    const uint64_t seq = ++seq_;
    const int parity = int(seq & 1);
    const int64_t nbytes = count * int64_t(element_size(dtype));
    Control* mine = control(rank_);
    if (dtype == DType::kFloat32 && nbytes > 0 && nbytes <= kStreamBelow) {
      stream_copy(slot(rank_, parity), data, nbytes);
    } else if (nbytes > 0) {
      parallel_copy(slot(rank_, parity), data, nbytes, threads);
    }
    mine->nbytes[parity] = nbytes;
    mine->total[parity] = total;
    mine->dtype[parity] = int32_t(dtype);
    mine->op[parity] = int32_t(op);
    publish(mine, seq);
    wait_for_peers(seq, deadline, timeout);
    for (int r = 0; r < world_size_; ++r) {
      const Control* peer = control(r);
      if (peer->total[parity] != total || peer->nbytes[parity] != nbytes ||
          peer->dtype[parity] != int32_t(dtype) || peer->op[parity] != int32_t(op)) {
        abandon();
        throw std::runtime_error(
            "ranks called all_reduce with different tensors: rank " + std::to_string(rank_) +
            " passes " + describe(total, int32_t(dtype), int32_t(op)) + ", rank " +
            std::to_string(r) + " passes " +
            describe(peer->total[parity], peer->dtype[parity], peer->op[parity]) +
            "; every rank must pass the same number of elements, dtype and op. Nothing was "
            "reduced, and this group's shared-memory path is now unusable: fix the call and "
            "restart the job");
      }
    }
    if (nbytes == 0) return;
    // This rank's own part comes from its tensor (the same bits as its slot, and already in
    // this core's cache): measured on 2 ranks, a quarter to a third less time from 64 KiB up.
    for (int r = 0; r < world_size_; ++r) sources_[size_t(r)] = r == rank_ ? data : slot(r, parity);
    reduce_parallel(op, dtype, data, sources_, count, threads);
  }

  static std::string describe(int64_t total, int32_t dtype, int32_t op) {
    const int64_t elem = dtype >= 0 && dtype <= 2 ? int64_t(element_size(DType(dtype))) : 1;
    return std::to_string(total / elem) + " " + dtype_name(dtype) + " elements (" +
           std::to_string(total) + " bytes, op " + op_name(op) + ")";
  }

  void check_bytes_call(int64_t nbytes, int tag) const {
    check_usable();
    if (nbytes < 0 || tag < 0) throw std::invalid_argument("negative size or dtype tag");
  }

  void reduce_parallel(Op op, DType dtype, char* out, const std::vector<const char*>& slots,
                       int64_t count, int threads) {
    const int64_t grain = 65536;
    if (threads > 1 && count >= 2 * grain) {
#pragma omp parallel for num_threads(threads) schedule(static)
      for (int64_t begin = 0; begin < count; begin += grain) {
        reduce(op, dtype, out, slots, begin, std::min(count, begin + grain));
      }
    } else if (count > 0) {
      reduce(op, dtype, out, slots, 0, count);
    }
  }

  // One round of a collective other than all_reduce: `fill` writes this rank's slot, then
  // every rank publishes, waits, checks that all describe the same call, and runs `consume`.
  template <typename Fill, typename Consume>
  void exchange(int64_t total, int64_t nbytes, int32_t dtype, int32_t op,
                Clock::time_point deadline, double timeout, Fill fill, Consume consume) {
    const uint64_t seq = ++seq_;
    const int parity = int(seq & 1);
    Control* mine = control(rank_);
    if (nbytes > 0) fill(slot(rank_, parity));
    mine->nbytes[parity] = nbytes;
    mine->total[parity] = total;
    mine->dtype[parity] = dtype;
    mine->op[parity] = op;
    publish(mine, seq);
    wait_for_peers(seq, deadline, timeout);
    check_same_call(parity, total, nbytes, dtype, op);
    if (nbytes > 0) consume(parity);
  }

  void check_same_call(int parity, int64_t total, int64_t nbytes, int32_t dtype, int32_t op) {
    for (int r = 0; r < world_size_; ++r) {
      const Control* peer = control(r);
      if (peer->total[parity] != total || peer->nbytes[parity] != nbytes ||
          peer->dtype[parity] != dtype || peer->op[parity] != op) {
        abandon();
        throw std::runtime_error(
            std::string("ranks called ") + collective_name(op) + " with different tensors: rank " +
            std::to_string(rank_) + " passes " + describe(total, dtype, op) + ", rank " +
            std::to_string(r) + " passes " +
            describe(peer->total[parity], peer->dtype[parity], peer->op[parity]) +
            "; every rank must call the same collective with the same number of elements, "
            "dtype and op. Nothing was written, and this group's shared-memory path is now "
            "unusable: fix the call and restart the job");
      }
    }
  }

  // A small fp32 all_reduce's copy into its slot, with streaming stores where the CPU has them:
  // the lines leave this core's cache, so peers read them without asking this core for each
  // one, and the next write needs no ownership request. Measured on 2 ranks (Xeon, 2 cores, the
  // kernel alone): 2.1 -> 1.8 us at 8 KiB, 3.8 -> 3.1 us at 16 KiB; the same at 32 KiB, and
  // bf16 got slower (4.9 -> 6.5 us at 16 KiB: its reduction, slower per line, then waits on
  // memory), hence fp32 up to kStreamBelow only. `dst` is 64-byte aligned (a slot).
  static void stream_copy(char* dst, const char* src, int64_t nbytes) {
#if defined(__AVX512F__)
    int64_t done = 0;
    for (; done + 64 <= nbytes; done += 64) {
      _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + done),
                          _mm512_loadu_si512(reinterpret_cast<const void*>(src + done)));
    }
    _mm_sfence();  // the streamed lines are visible before the sequence that publishes them
    if (done < nbytes) std::memcpy(dst + done, src + done, size_t(nbytes - done));
#else
    std::memcpy(dst, src, size_t(nbytes));
#endif
  }

  static void parallel_copy(char* dst, const char* src, int64_t nbytes, int threads) {
    const int64_t grain = 256 * 1024;
    if (threads > 1 && nbytes >= 2 * grain) {
#pragma omp parallel for num_threads(threads) schedule(static)
      for (int64_t begin = 0; begin < nbytes; begin += grain) {
        std::memcpy(dst + begin, src + begin, size_t(std::min(grain, nbytes - begin)));
      }
    } else {
      std::memcpy(dst, src, size_t(nbytes));
    }
  }

  bool peers_reached(uint64_t seq) const {
    for (int r = 0; r < world_size_; ++r) {
      if (__atomic_load_n(&control(r)->seq, __ATOMIC_ACQUIRE) < seq) return false;
    }
    return true;
  }

  // Publish `seq` and wake any peer asleep on this rank's futex word.
  static void publish(Control* mine, uint64_t seq) {
    __atomic_store_n(&mine->seq, seq, __ATOMIC_SEQ_CST);
    __atomic_store_n(&mine->word, uint32_t(seq), __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&mine->waiters, __ATOMIC_SEQ_CST) != 0) {
      futex(&mine->word, FUTEX_WAKE, INT_MAX, nullptr);
    }
  }

  // Three stages, so that a short call is never slept through and a descheduled peer is never
  // starved of the core it needs: spin with a pause for up to kSpinWait (peers of a short call
  // arrive within microseconds), then, unless more tasks are runnable than there are CPUs,
  // yield the core for up to kYieldWait (a peer that shares this core runs at once; with
  // nothing else to run, yield returns at once), then sleep on the futex word of the first
  // peer still behind, waking every 2 ms to check deadlines and liveness.
  void wait_for_peers(uint64_t seq, Clock::time_point deadline, double timeout) {
    if (peers_reached(seq)) return;
    const auto start = Clock::now();
    for (;;) {
      for (int spin = 0; spin < 64; ++spin) {
        if (peers_reached(seq)) return;
        ANYACCEL_RELAX();
      }
      if (Clock::now() - start >= kSpinWait) break;
    }
    // Yielding only where no task waits for a core: there sched_yield returns at once (a
    // spin that lets a peer sharing this core run), but on an oversubscribed machine it hands
    // the core to another task for a whole time slice, with no wake-up when the peer arrives.
    for (bool yielding = !oversubscribed_lately(); yielding;) {
      sched_yield();
      if (peers_reached(seq)) return;
      yielding = Clock::now() - start < kSpinWait + kYieldWait;
    }
    auto next_check = Clock::now();
    const struct timespec slice = {0, 2000000};
    for (;;) {
      int behind = -1;
      for (int r = 0; r < world_size_ && behind < 0; ++r) {
        if (__atomic_load_n(&control(r)->seq, __ATOMIC_SEQ_CST) < seq) behind = r;
      }
      if (behind < 0) return;
      const auto now = Clock::now();
      if (now >= next_check) {
        next_check = now + std::chrono::milliseconds(2);
        check_peers(seq, now >= deadline, timeout);
      }
      Control* peer = control(behind);
      const uint32_t observed = __atomic_load_n(&peer->word, __ATOMIC_SEQ_CST);
      __atomic_fetch_add(&peer->waiters, 1u, __ATOMIC_SEQ_CST);
      if (__atomic_load_n(&peer->seq, __ATOMIC_SEQ_CST) < seq &&
          __atomic_load_n(&peer->failed, __ATOMIC_SEQ_CST) == 0) {
        futex(&peer->word, FUTEX_WAIT, observed, &slice);
      }
      __atomic_fetch_sub(&peer->waiters, 1u, __ATOMIC_SEQ_CST);
    }
  }

  void check_peers(uint64_t seq, bool expired, double timeout) {
    std::string late;
    for (int r = 0; r < world_size_; ++r) {
      if (r == rank_) continue;
      const Control* peer = control(r);
      bool behind = __atomic_load_n(&peer->seq, __ATOMIC_ACQUIRE) < seq;
      if (__atomic_load_n(&peer->failed, __ATOMIC_ACQUIRE) != 0) {
        abandon();
        throw std::runtime_error("rank " + std::to_string(r) +
                                 " of the shared-memory group gave up on a collective (it "
                                 "failed or timed out); this collective cannot finish");
      }
      if (behind && !process_alive(pids_[size_t(r)])) {
        // Gone: re-read its progress, since a peer that published and then exited between
        // the first read and the liveness check finished this collective correctly.
        behind = __atomic_load_n(&peer->seq, __ATOMIC_ACQUIRE) < seq;
        if (behind && __atomic_load_n(&peer->failed, __ATOMIC_ACQUIRE) == 0) {
          abandon();
          throw std::runtime_error("rank " + std::to_string(r) + " (pid " +
                                   std::to_string(pids_[size_t(r)]) +
                                   ") died during a shared-memory all_reduce; the other ranks "
                                   "cannot finish it: restart the job");
        }
      }
      if (behind) late += (late.empty() ? "" : ", ") + std::to_string(r);
    }
    if (expired && !late.empty()) {  // all arrived meanwhile: the wait loop sees it next
      abandon();
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%.1f", timeout);
      throw std::runtime_error("shared-memory all_reduce timed out after " +
                               std::string(seconds) + " s (the process group's timeout) "
                               "waiting for rank(s) " + late +
                               ", which are alive but did not enter the same collective");
    }
  }

  int world_size_;
  int rank_;
  int64_t slot_bytes_;
  int64_t bytes_;
  char* base_ = nullptr;
  uint64_t seq_ = 0;
  bool failed_ = false;
  std::vector<int> pids_;
  std::vector<const char*> sources_;  // run_round's per-rank sources (held: no allocation a call)
  std::mutex mutex_;  // one collective at a time, whether called from Python or from C++
};

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

// DeepSpeed's ShareMemCommBuilder interface ---------------------------------------------------
// The Python module that implements it (it runs anyaccel.distributed's all_reduce).
constexpr const char* kDeepSpeedGlue = "anyaccel.integrations.deepspeed";

void initialize(int world_size, int rank) {
  py::module_::import(kDeepSpeedGlue).attr("shm_comm_initialize")(world_size, rank);
}

// DeepSpeed's scale: 1 = fp32 kernels usable, 2 = bf16/fp16 too. These kernels are portable
// C++ compiled for this CPU's own SIMD level, so every dtype is usable wherever they load.
int vector_kernel_level() { return 2; }

}  // namespace
}  // namespace anyaccel

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using anyaccel::Communicator;
  m.doc() = "anyaccel shared-memory all-reduce (DeepSpeed ShareMemCommBuilder interface)";
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
  m.def(
      "native_entry_addresses",
      []() {
        return std::map<std::string, std::uintptr_t>{
            {"all_reduce", reinterpret_cast<std::uintptr_t>(&anyaccel::native_all_reduce)},
            {"all_gather", reinterpret_cast<std::uintptr_t>(&anyaccel::native_all_gather)},
            {"broadcast", reinterpret_cast<std::uintptr_t>(&anyaccel::native_broadcast)},
            {"reduce_scatter",
             reinterpret_cast<std::uintptr_t>(&anyaccel::native_reduce_scatter)},
        };
      },
      "The C entries of the collectives for the c10d Backend, by name (their arguments: see "
      "native_all_reduce, native_all_gather, native_broadcast, native_reduce_scatter; each "
      "returns 0 done, 1 communicator unusable, 2 error)");
  m.def("initialize", &anyaccel::initialize, py::arg("world_size"), py::arg("rank"),
        "Set up the shared-memory all-reduce for the default process group (DeepSpeed's name).");
  m.def("vector_kernel_level", &anyaccel::vector_kernel_level,
        "2: the fp32, bf16 and fp16 kernels all run on this CPU (DeepSpeed's scale).");
  m.def("simd_level", &anyaccel::simd_level, "The SIMD level this build targets.");
  m.def("oversubscribed", &anyaccel::oversubscribed,
        "Whether more tasks are runnable than CPUs are online (then waiting skips yielding).");
  py::module_::import(anyaccel::kDeepSpeedGlue).attr("register_shm_comm_ops")();
}
