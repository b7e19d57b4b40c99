// The Communicator: one process group's shared-memory segment in this process, and the
// collectives run through it (all_reduce, all_gather, reduce_scatter, broadcast, barrier).
// The segment's layout and the protocol: see shm_comm.cpp. One header of shm_comm.cpp's single
// translation unit.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "shm_contract.h"
#include "shm_reduce.h"
#include "shm_wait.h"

namespace anyaccel {
namespace {

constexpr uint64_t kMagic = 0x616e7973686d3032ull;  // "anyshm02"
constexpr int kSlots = 2;
// fp32 all-reduce chunks up to this many bytes go into the slot with streaming stores
// (stream_copy).
constexpr int64_t kStreamBelow = 16 << 10;

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

// Whether [a, a + a_bytes) and [b, b + b_bytes) share a byte.
inline bool overlap(uintptr_t a, int64_t a_bytes, uintptr_t b, int64_t b_bytes) {
  return a_bytes > 0 && b_bytes > 0 && a < b + uintptr_t(b_bytes) && b < a + uintptr_t(a_bytes);
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
    if (dtype_code < 0 || dtype_code >= kDTypes || op_code < 0 || op_code >= kOps || numel < 0) {
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

  // A collective for a caller without Python (anyaccel's c10d Backend), answering as
  // shm_contract.h's NativeResult says: done; unusable (closed or failed, nothing done: the
  // caller's other path says why); or an error, its text in `message`.
  template <typename Call>
  int run_native(Call call, char* message, size_t capacity) noexcept {
    try {
      {
        std::lock_guard<std::mutex> hold(mutex_);
        if (base_ == nullptr || failed_) return kNativeUnusable;
      }
      call();  // takes the lock itself
      return kNativeDone;
    } catch (const std::exception& exc) {
      std::snprintf(message, capacity, "%s", exc.what());
    } catch (...) {
      std::snprintf(message, capacity, "%s", "unknown error");
    }
    return kNativeError;
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
    if (dtype_code < 0 || dtype_code >= kDTypes || op_code < 0 || op_code >= kOps || numel < 0) {
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
            dtype_mismatch("all_reduce", int32_t(dtype), r, peer->dtype[parity]) +
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
    // this core's cache): one stream of memory traffic less (docs/distributed.md has figures).
    for (int r = 0; r < world_size_; ++r) sources_[size_t(r)] = r == rank_ ? data : slot(r, parity);
    reduce_parallel(op, dtype, data, sources_, count, threads);
  }

  // A dtype mismatch said first, as one (its sizes differ too, but the dtype is the bug): ""
  // when the dtypes agree or either is not a reduction dtype (a byte collective's tag, or a
  // rank's announcement that it falls back to gloo).
  std::string dtype_mismatch(const char* collective, int32_t dtype, int peer, int32_t theirs) const {
    if (dtype == theirs || dtype < 0 || dtype >= kDTypes || theirs < 0 || theirs >= kDTypes) {
      return "";
    }
    return std::string("dtype mismatch in ") + collective + ": rank " + std::to_string(rank_) +
           " passes " + dtype_name(dtype) + ", rank " + std::to_string(peer) + " passes " +
           dtype_name(theirs) + "; every rank must pass the same dtype. ";
  }

  static std::string describe(int64_t total, int32_t dtype, int32_t op) {
    const int64_t elem = dtype >= 0 && dtype < kDTypes ? int64_t(element_size(DType(dtype))) : 1;
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
            dtype_mismatch(collective_name(op), dtype, r, peer->dtype[parity]) +
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
  // one, and the next write needs no ownership request. It pays for small fp32 calls only (bf16,
  // slower to reduce per line, then waits on memory; figures in docs/distributed.md), hence
  // fp32 up to kStreamBelow only. `dst` is 64-byte aligned (a slot).
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

}  // namespace
}  // namespace anyaccel
