/*
 * fxtrace.h: the C API of fxtrace (Fuchsia tracing on Linux).
 *
 * Exported by libfxtrace_preload.so (link with -lfxtrace_preload, or load it with
 * LD_PRELOAD) and by any Rust build of the fxtrace library. Events go to the process's
 * trace buffer when a trace manager is running (`fxtrace record -- ./app`); otherwise every
 * call returns at once.
 *
 *   #include <fxtrace.h>
 *
 *   FXTRACE_DURATION_BEGIN("io", "read_block");
 *   ...
 *   FXTRACE_DURATION_END("io", "read_block");
 *   FXTRACE_COUNTER("io", "queue_depth", depth);
 *   fxtrace_instant("io", request_name);     // any string, copied into the event
 *
 * Cost: with no trace running, each call is one relaxed load and a branch (the strings are
 * not read). With a trace running, a call writes one record into shared memory.
 *
 * Strings:
 *   - NULL is the empty string.
 *   - Text is UTF-8. A string with an invalid sequence is cut before it; a string longer
 *     than 32000 bytes is cut to 32000 bytes.
 *   - The plain functions accept any string (a stack buffer freed right after the call is
 *     fine): the bytes are copied into each event.
 *   - The _static functions require strings that stay valid and unchanged, at the same
 *     address, until the process exits (string literals of the program or of a library that
 *     is never unloaded). They are registered once per thread per trace and then written as
 *     2-byte indices: smaller and faster. The FXTRACE_* macros use them and only accept
 *     string literals.
 *
 * Nothing here ever calls back into the program, blocks, or unwinds. Events that cannot be
 * written (buffer full; a call from a signal handler interrupting another call on the same
 * thread) are counted as dropped in the trace.
 */
#ifndef FXTRACE_H
#define FXTRACE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* An instant event `name` in `category` on the calling thread. */
void fxtrace_instant(const char* category, const char* name);

/* Begin duration `name` on the calling thread; end it with fxtrace_duration_end on the same
 * thread. Durations nest. */
void fxtrace_duration_begin(const char* category, const char* name);

/* End the innermost duration begun on the calling thread. */
void fxtrace_duration_end(const char* category, const char* name);

/* A counter event `name` (counter id 0) whose argument "value" is `value`. */
void fxtrace_counter(const char* category, const char* name, int64_t value);

/* 1 if a trace is running and enables `category`, else 0. Use it to skip work that only
 * builds event names or values. */
int fxtrace_is_category_enabled(const char* category);

/* Raise alert `name` (at most 14 bytes) through this process's provider: a flight recorder
 * (`fxtrace record -m circular --stop-on-alert NAME`) then stops and writes its trace.
 * Returns 1 if sent, 0 if not (no trace manager; or in a child created by fork, which stays
 * silent), -1 if `name` is NULL or not a valid alert name. Never blocks. */
int fxtrace_alert(const char* name);

/* The same, for strings that live unchanged until the process exits (see above). */
void fxtrace_instant_static(const char* category, const char* name);
void fxtrace_duration_begin_static(const char* category, const char* name);
void fxtrace_duration_end_static(const char* category, const char* name);
void fxtrace_counter_static(const char* category, const char* name, int64_t value);

/* Macros over the _static functions: `"" x` only compiles when x is a string literal. */
#define FXTRACE_INSTANT(category, name) fxtrace_instant_static("" category, "" name)
#define FXTRACE_DURATION_BEGIN(category, name) \
    fxtrace_duration_begin_static("" category, "" name)
#define FXTRACE_DURATION_END(category, name) fxtrace_duration_end_static("" category, "" name)
#define FXTRACE_COUNTER(category, name, value) \
    fxtrace_counter_static("" category, "" name, (int64_t)(value))

#ifdef __cplusplus
}
#endif

#endif /* FXTRACE_H */
