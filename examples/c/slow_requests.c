/*
 * slow_requests.c: a server whose requests are sometimes slow because another of its threads
 * holds the lock they need: the example of `fxtrace report sched` (README, "Finding out why
 * it was slow"). Plain C, no fxtrace API: record it with `--preload -a`.
 *
 *   cc -O1 -pthread -o slow_requests examples/c/slow_requests.c
 *   sudo fxtrace record --preload -a -o /tmp/requests.fxt -- ./slow_requests
 *   fxtrace report sched /tmp/requests.fxt --comm slow_requests
 *
 * Four threads `worker-N` serve requests: each takes the table lock, works on the table for
 * about 50 µs, releases it and waits 2 ms for the next request. Every 200 ms the thread
 * `compactor` takes the same lock and keeps it 40 ms while it works: the workers that need
 * the lock meanwhile sleep in pthread_mutex_lock until it lets go. It runs SECONDS (default
 * 1) and prints `compactor_tid=T worker_tids=A,B,C,D` and the slowest request in µs.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define WORKERS 4

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static volatile uint64_t table[1024];
static volatile int running = 1;
static pid_t worker_tids[WORKERS];
static pid_t compactor_tid;
static uint64_t slowest_us[WORKERS];

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Works on the table for about `ns` nanoseconds (on the CPU). */
static void work_on_table(uint64_t ns) {
    uint64_t until = now_ns() + ns;
    uint64_t i = 0;
    while (now_ns() < until) {
        for (int k = 0; k < 64; k++, i++)
            table[i % 1024] = table[(i * 7) % 1024] * 31 + i;
    }
}

static void *worker(void *arg) {
    int n = (int)(intptr_t)arg;
    char name[16];
    snprintf(name, sizeof name, "worker-%d", n);
    pthread_setname_np(pthread_self(), name);
    worker_tids[n] = (pid_t)syscall(SYS_gettid);
    while (running) {
        uint64_t start = now_ns();
        pthread_mutex_lock(&table_lock);
        work_on_table(50000);
        pthread_mutex_unlock(&table_lock);
        uint64_t us = (now_ns() - start) / 1000;
        if (us > slowest_us[n])
            slowest_us[n] = us;
        usleep(2000);
    }
    return NULL;
}

static void *compactor(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "compactor");
    compactor_tid = (pid_t)syscall(SYS_gettid);
    while (running) {
        usleep(200000);
        pthread_mutex_lock(&table_lock);
        work_on_table(40000000);
        pthread_mutex_unlock(&table_lock);
    }
    return NULL;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 1.0;
    pthread_t threads[WORKERS + 1];
    for (int n = 0; n < WORKERS; n++)
        pthread_create(&threads[n], NULL, worker, (void *)(intptr_t)n);
    pthread_create(&threads[WORKERS], NULL, compactor, NULL);
    usleep((useconds_t)(seconds * 1e6));
    running = 0;
    for (int n = 0; n <= WORKERS; n++)
        pthread_join(threads[n], NULL);
    uint64_t slowest = 0;
    for (int n = 0; n < WORKERS; n++)
        if (slowest_us[n] > slowest)
            slowest = slowest_us[n];
    printf("compactor_tid=%d worker_tids=%d,%d,%d,%d\n", compactor_tid, worker_tids[0],
           worker_tids[1], worker_tids[2], worker_tids[3]);
    printf("slowest_request_us=%llu\n", (unsigned long long)slowest);
    return 0;
}
