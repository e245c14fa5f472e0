#!/usr/bin/env bash
# The trace service's figures for BENCHMARKS.md ("The trace service"):
#   1. the idle cost in a registered provider: ns per disabled call site (examples/service
#      with FXTRACE_MEASURE_IDLE=1, beside an empty loop), and the wake-ups and syscalls per
#      second of its fxtrace-service thread while it waits for a service that is not there
#      (strace -c over 10 s, and the thread's voluntary context switches);
#   2. `fxtrace start --detach` with N (default 50) already-running providers: time until every
#      provider acknowledged the start (tracing), 3 rounds;
#   3. `fxtrace stop`: time until the archive is written and flushed, 3 rounds.
# Usage: scripts/bench-service.sh [-n PROVIDERS] [--fxtrace PATH] [--service PATH]
set -euo pipefail

n=50
fxtrace=""
service=""
while [ $# -gt 0 ]; do
    case "$1" in
        -n) n="$2"; shift 2 ;;
        --fxtrace) fxtrace="$2"; shift 2 ;;
        --service) service="$2"; shift 2 ;;
        -h|--help) sed -n 2,12p "$0"; exit 0 ;;
        *) echo "bench-service.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ -z "$fxtrace" ] || [ -z "$service" ]; then
    (cd "$root" && cargo build --release --quiet -p fxtrace-tools --bin fxtrace \
        && cargo build --release --quiet -p fxtrace --example service)
    fxtrace="${fxtrace:-$root/target/release/fxtrace}"
    service="${service:-$root/target/release/examples/service}"
fi
work="$(mktemp -d)"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
sock="$work/fxtrace.sock"
export XDG_RUNTIME_DIR="$work"
unset FXTRACE_SOCKET

echo "machine: $(nproc) CPUs, $(uptime | sed 's/.*load average/load average/'), $(date -u +%F)"

echo
echo "## idle cost in a registered provider"
"$fxtrace" daemon --socket "$sock" 2>"$work/daemon.log" &
pids+=($!)
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
FXTRACE_MEASURE_IDLE=1 "$service" 0 2>&1 | grep -E "idle|registration"
kill "${pids[0]}"; wait "${pids[0]}" 2>/dev/null || true; pids=()

echo
echo "## waiting for a service that is not there (10 s)"
"$service" 30 >/dev/null 2>&1 &
svc=$!; pids+=($svc)
sleep 1
tid=$(grep -l fxtrace-service /proc/$svc/task/*/comm | head -1 | cut -d/ -f5)
# Wake-ups first, untouched (strace's attach and detach wake the thread themselves).
before=$(awk '/^voluntary_ctxt_switches/ {print $2}' /proc/$svc/task/$tid/status)
sleep 10
after=$(awk '/^voluntary_ctxt_switches/ {print $2}' /proc/$svc/task/$tid/status)
echo "fxtrace-service thread: $((after - before)) wake-ups in 10 s (voluntary context switches)"
if command -v strace >/dev/null; then
    timeout -s INT 10 strace -c -p "$tid" -o "$work/strace.txt" 2>/dev/null || true
    calls=$(awk '$NF=="total" {print $(NF-1)}' "$work/strace.txt")
    echo "fxtrace-service thread: ${calls:-0} syscalls in 10 s (strace -c; attaching restarts the blocked read)"
else
    sleep 10
    echo "strace not installed: syscall count not measured"
fi
"$fxtrace" daemon --socket "$sock" 2>>"$work/daemon.log" &
daemon=$!; pids+=($daemon)
t0=$(date +%s.%N)
for _ in $(seq 200); do
    "$fxtrace" providers --socket "$sock" 2>/dev/null | grep -q service-example && break
    sleep 0.01
done
t1=$(date +%s.%N)
echo "the service appeared: the waiting provider registered within $(echo "($t1 - $t0) * 1000" | bc -l | cut -d. -f1) ms"
kill $svc; wait $svc 2>/dev/null || true

echo
echo "## $n already-running providers"
for i in $(seq "$n"); do "$service" 120 >/dev/null 2>&1 & pids+=($!); done
for _ in $(seq 200); do
    c=$("$fxtrace" providers --socket "$sock" 2>/dev/null | grep -c service-example || true)
    [ "$c" -ge "$n" ] && break
    sleep 0.05
done
echo "registered: $c providers"
echo "| round | start --detach → all tracing (ms) | stop → archive written (ms) | archive bytes |"
echo "|---|---|---|---|"
for round in 1 2 3; do
    # Every provider registers again after a session: wait for all of them.
    for _ in $(seq 200); do
        c=$("$fxtrace" providers --socket "$sock" 2>/dev/null | grep -c idle || true)
        [ "$c" -ge "$n" ] && break
        sleep 0.05
    done
    t0=$(date +%s%N)
    "$fxtrace" start --socket "$sock" --detach -o "$work/r$round.fxt" >/dev/null 2>&1
    t1=$(date +%s%N)
    sleep 0.5
    t2=$(date +%s%N)
    "$fxtrace" stop --socket "$sock" >/dev/null 2>&1
    t3=$(date +%s%N)
    "$fxtrace" terminate --socket "$sock" >/dev/null 2>&1
    echo "| $round | $(( (t1 - t0) / 1000000 )) | $(( (t3 - t2) / 1000000 )) | $(stat -c %s "$work/r$round.fxt") |"
done
echo
echo "daemon RSS with $n providers: $(awk '/^VmRSS/ {print $2, $3}' /proc/$daemon/status 2>/dev/null || echo '?')"
