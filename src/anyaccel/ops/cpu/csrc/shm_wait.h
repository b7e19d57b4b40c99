// How a rank of the shared-memory collectives waits for its peers without blocking forever or
// starving them: spin, yield (unless the machine is oversubscribed), then sleep on a futex, and
// check the peers' processes meanwhile. One header of shm_comm.cpp's single translation unit.
#pragma once

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ANYACCEL_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define ANYACCEL_RELAX() asm volatile("yield" ::: "memory")
#else
#define ANYACCEL_RELAX() asm volatile("" ::: "memory")
#endif

namespace anyaccel {
namespace {

// How long a rank waiting for its peers spins, then yields its core, before it sleeps. A longer
// spin holds the core a peer on a loaded host needs; a quiet host needs a few microseconds of
// spinning to catch a peer of a short call without a futex wake-up, and the yield stage keeps a
// virtual CPU from halting. On an oversubscribed host the yield stage is skipped (see
// wait_for_peers): a yield there gives a whole time slice away per call. The figures behind
// both: docs/distributed.md, "How the shared-memory kernel is tuned".
constexpr std::chrono::microseconds kSpinWait(10);
constexpr std::chrono::microseconds kYieldWait(50);

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

}  // namespace
}  // namespace anyaccel
