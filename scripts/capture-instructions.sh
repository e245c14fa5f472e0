#!/usr/bin/env bash
# Instructions per context switch of the system-wide capture pipeline (capture thread: ring
# reader, decoding, merge, delivery, FXT conversion), without a kernel: benches/capture.rs on
# the in-memory perf, under callgrind, counting the capture thread only (`Worker::run`), for
# N and 2N switches; prints (total(2N) - total(N)) / N, then the same with a wake-up per switch,
# and for a process capture's switch records without and with the check for copies.
# Needs valgrind.
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-50000}"
if ! command -v valgrind >/dev/null 2>&1; then
    echo "capture-instructions: skipped (valgrind missing)"
    exit 0
fi
bench="$(cargo bench -p fxtrace-benches --features capture --bench capture --no-run \
    --message-format=json 2>/dev/null |
    grep '"kind":\["bench"\]' | grep '"name":"capture"' |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
total() {
    FXTRACE_BENCH_CALLS="$1" valgrind --tool=callgrind --collect-atstart=no \
        --toggle-collect='*Worker::run*' --callgrind-out-file="$work/cg.$1.%p" "$bench" \
        >"$work/log.$1" 2>&1
    sed -n 's/^summary: *\([0-9]*\).*/\1/p' "$work"/cg."$1".* | sort -n | tail -n 1
}
# Instructions per switch: the difference between N and 2N switches, over N.
per_switch() {
    local small large
    small="$(total "$n")"
    large="$(total $((2 * n)))"
    echo "capture thread: $(((large - small) / n)) instructions per $1"
}
per_switch "context switch"
# Each switch with a wake-up (fxtrace record -a's default): per switch and wake-up pair.
FXTRACE_BENCH_WAKEUPS=1 per_switch "context switch with its wake-up"
# A process capture's switches (two records each), then with a thread made while the events
# were opened: every record checked for a second event's copies (capture::duplicates).
FXTRACE_BENCH_PROCESS=1 per_switch "process switch (out and in records)"
FXTRACE_BENCH_PROCESS=1 FXTRACE_BENCH_LATE=1 per_switch "process switch, copies checked"
