// Small two-thread program that exercises the XRay records fxtrace's importer
// reads: function entry/exit, tail exit, entry with an argument, custom events,
// CPU pinning changes and (in FDR mode) a TSC wrap. No typed events: with
// LLVM 14 on x86-64, `__xray_typedevent` crashes the FDR runtime inside
// FDRController::typedEvent, and its sleds (kind 5) make `llvm-xray extract`
// reject the instrumentation map; typed events are tested on synthetic bytes.
//
// Built and run by scripts/make-xray-fixtures.sh; argv[1] selects the mode:
// "fdr" (flight data recorder, log version 5) or "basic" (naive log, version 3).
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <cstdio>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>
#include <xray/xray_interface.h>
#include <xray/xray_log_interface.h>

#define NOINLINE __attribute__((noinline))
#define NEVER __attribute__((xray_never_instrument))

static volatile uint64_t sink;
static int ncpu = 1;

NOINLINE int leaf(int x) {
  sink += (uint64_t)x;
  return x + 1;
}

// Logged with its first argument: an Entry_Args record plus a CallArgument.
[[clang::xray_always_instrument, clang::xray_log_args(1)]] NOINLINE int with_arg(uint64_t v) {
  sink += v;
  return leaf((int)v);
}

NOINLINE int tail_callee(int x) {
  sink ^= (uint64_t)x;
  return x * 3;
}

// At -O2 this ends in a jump to tail_callee: a tail-exit sled.
NOINLINE int tail_caller(int x) {
  sink += 1;
  return tail_callee(x + 1);
}

NOINLINE void recurse(int depth) {
  if (depth > 0) recurse(depth - 1);
  sink++;
}

NOINLINE void emit_events(int id) {
  char custom[32];
  int n = std::snprintf(custom, sizeof custom, "custom event from thread %d", id);
  __xray_customevent(custom, (size_t)n);
}

NEVER static void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu % ncpu, &set);
  sched_setaffinity(0, sizeof set, &set);
}

// Waits until the next FDR function record cannot carry its TSC delta in 31
// bits, so the runtime writes a TSCWrap record. Without an invariant TSC the
// runtime emulates the TSC with CLOCK_REALTIME nanoseconds, so both clocks
// must move past 2^31 units.
NEVER static void wait_past_tsc_delta_limit(void) {
  uint64_t start = __rdtsc();
  struct timespec t0, now;
  clock_gettime(CLOCK_REALTIME, &t0);
  struct timespec step = {0, 20 * 1000 * 1000};
  for (;;) {
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t ns = (int64_t)(now.tv_sec - t0.tv_sec) * 1000000000 + (now.tv_nsec - t0.tv_nsec);
    if (ns > (1ll << 31) + (1ll << 28) && __rdtsc() - start > (1ull << 31) + (1ull << 28)) break;
    nanosleep(&step, NULL);
  }
}

NOINLINE void *worker(void *arg) {
  int id = (int)(intptr_t)arg;
  pin(id);
  for (int i = 0; i < 3; i++) {
    with_arg((uint64_t)(id * 100 + i));
    tail_caller(i);
  }
  emit_events(id);
  pin(id + 1);  // migrate: the FDR runtime writes a NewCPUId record
  leaf(id);
  if (id == 0) {
    wait_past_tsc_delta_limit();
    leaf(1000);
  }
  recurse(3);
  return NULL;
}

NEVER int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "fdr";
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  ncpu = n > 0 ? (int)n : 1;
  const char *impl = strcmp(mode, "basic") == 0 ? "xray-basic" : "xray-fdr";
  // LLVM 14's __xray_log_init_mode only initializes the *selected* mode.
  if (__xray_log_select_mode(impl) != XRAY_REGISTRATION_OK) {
    fprintf(stderr, "xray_fixture: mode %s is not registered\n", impl);
    return 1;
  }
  XRayLogInitStatus st;
  if (strcmp(mode, "basic") == 0) {
    static char opts[] =
        "func_duration_threshold_us=0:max_stack_depth=64:thread_buffer_size=1024";
    st = __xray_log_init_mode("xray-basic", opts);
  } else {
    static char opts[] =
        "buffer_size=16384:buffer_max=16:func_duration_threshold_us=0";
    st = __xray_log_init_mode("xray-fdr", opts);
  }
  if (st != XRAY_LOG_INITIALIZED) {
    fprintf(stderr, "xray_fixture: init of mode %s failed (%d)\n", mode, (int)st);
    return 1;
  }
  if (__xray_patch() != SUCCESS) {
    fprintf(stderr, "xray_fixture: __xray_patch failed\n");
    return 1;
  }
  pthread_t t[2];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  __xray_log_finalize();
  __xray_log_flushLog();
  __xray_unpatch();
  return 0;
}
