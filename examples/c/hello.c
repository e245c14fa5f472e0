/*
 * hello.c: the fxtrace C API in a small threaded program.
 *
 * Build (after `cargo build --release -p fxtrace-preload`):
 *   cc -O2 -pthread -Iinclude examples/c/hello.c -Ltarget/release -lfxtrace_preload \
 *      -Wl,-rpath,"$PWD/target/release" -o hello
 * Trace:
 *   fxtrace record -o hello.fxt -- ./hello
 *   fxtrace dump hello.fxt          # or: fxtrace convert --to chrome-json, then Perfetto
 *
 * Run without `fxtrace record`, it prints the same and every trace call is a no-op.
 */
#include <fxtrace.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

/* Sum of i*i below n, inside a duration whose name is a literal (indexed string). */
static uint64_t sum_squares(uint64_t n) {
    FXTRACE_DURATION_BEGIN("hello", "sum_squares");
    uint64_t sum = 0;
    for (uint64_t i = 0; i < n; i++) {
        sum += i * i;
    }
    FXTRACE_DURATION_END("hello", "sum_squares");
    return sum;
}

static void* worker(void* arg) {
    uint64_t* result = arg;
    char name[32];
    for (int round = 0; round < 3; round++) {
        /* A name built at run time: the plain functions copy it into the event. */
        snprintf(name, sizeof name, "round %d", round);
        fxtrace_duration_begin("hello", name);
        *result += sum_squares(100000);
        fxtrace_duration_end("hello", name);
        FXTRACE_COUNTER("hello", "worker_rounds", round + 1);
    }
    return NULL;
}

int main(void) {
    pthread_t thread;
    uint64_t from_worker = 0;
    FXTRACE_INSTANT("hello", "start");
    if (pthread_create(&thread, NULL, worker, &from_worker) != 0) {
        return 1;
    }
    uint64_t from_main = sum_squares(200000);
    pthread_join(thread, NULL);
    if (fxtrace_is_category_enabled("hello")) {
        /* Only work that exists for the trace goes here. */
        fxtrace_counter("hello", "result_low_bits", (int64_t)((from_main + from_worker) & 0xffff));
    }
    FXTRACE_INSTANT("hello", "done");
    printf("hello: %llu %llu\n", (unsigned long long)from_main, (unsigned long long)from_worker);
    return 0;
}
