#!/usr/bin/env bash
# fxtrace record --system-wide side by side with perf record -e sched:sched_switch -a, on a
# context-switch-heavy workload (examples/pingpong: two threads bouncing a byte through pipes).
#
# Needs root (both recorders capture every CPU). Prints a Markdown table for BENCHMARKS.md.
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: sudo scripts/bench-vs-perf.sh [-r ROUNDS] [-m PAGES] [-n RUNS] [--fxtrace PATH]
                                     [--pingpong PATH] [--perf PATH] [--keep DIR]

  -r ROUNDS        ping-pong round trips per run (default 100000: about 400k switches)
  -m PAGES         ring size per CPU for both recorders, in pages (default 256 = 1 MiB)
  -n RUNS          runs per recorder (default 3)
  --fxtrace PATH   fxtrace binary (default: cargo build --release, target/release/fxtrace)
  --pingpong PATH  workload binary (default: target/release/examples/pingpong)
  --perf PATH      perf binary (default /usr/bin/perf)
  --keep DIR       keep traces, perf.data files and logs in DIR

Each recorder runs alone over `sleep D` (D covers the workload with room to spare) while the
workload runs beside it, so /usr/bin/time measures the recorder's CPU only. Per run:
  switches   sched_switch records whose outgoing or incoming thread is a pingpong thread
  total      all context switches in the output
  lost       records the kernel reported lost (fxtrace: its summary; perf: PERF_RECORD_LOST
             and PERF_RECORD_LOST_SAMPLES in `perf report -D`)
  cpu        user + system seconds of the recorder process (and its `sleep`)
  bytes/sw   output file size / total switches
Then one run with both recorders attached at once to the same workload run, where the
workload's switch counts should agree exactly (separate runs differ by the workload's own
run-to-run variation).
EOF
}

rounds=100000
pages=256
runs=3
fxtrace_bin=""
pingpong_bin=""
perf_bin=/usr/bin/perf
keep=""
while [ $# -gt 0 ]; do
    case "$1" in
        -r) rounds="$2"; shift 2 ;;
        -m) pages="$2"; shift 2 ;;
        -n) runs="$2"; shift 2 ;;
        --fxtrace) fxtrace_bin="$2"; shift 2 ;;
        --pingpong) pingpong_bin="$2"; shift 2 ;;
        --perf) perf_bin="$2"; shift 2 ;;
        --keep) keep="$2"; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "bench-vs-perf.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done

if [ "$(id -u)" != 0 ]; then
    echo "bench-vs-perf.sh: both recorders capture every CPU: run as root (sudo)" >&2
    exit 1
fi
for tool in "$perf_bin" /usr/bin/time; do
    [ -x "$tool" ] || { echo "bench-vs-perf.sh: $tool not found" >&2; exit 1; }
done

here="$(cd "$(dirname "$0")/.." && pwd)"
if [ -z "$fxtrace_bin" ] || [ -z "$pingpong_bin" ]; then
    (cd "$here" && cargo build --release --quiet --bin fxtrace --example pingpong)
    fxtrace_bin="${fxtrace_bin:-$here/target/release/fxtrace}"
    pingpong_bin="${pingpong_bin:-$here/target/release/examples/pingpong}"
fi

if [ -n "$keep" ]; then
    work="$keep"
    mkdir -p "$work"
else
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
fi

# --- helpers -------------------------------------------------------------------------------

# Field KEY of pingpong's "rounds=N pid=P ping_tid=A pong_tid=B elapsed_ms=E" line.
pp_field() { tr ' ' '\n' <"$1" | sed -n "s/^$2=//p"; }

# "user sys" from /usr/bin/time -f '%U %S' (last line; an earlier one may report the status).
cpu_seconds() { tail -n 1 "$1" | awk '{ printf "%.2f", $1 + $2 }'; }

# Workload and total switch counts in an fxtrace trace: "workload total".
fxtrace_counts() {
    "$fxtrace_bin" dump "$1" | awk -v a="$2" -v b="$3" '
        / context_switch / {
            total++
            for (i = 1; i <= NF; i++) {
                if ($i ~ /^out=/) { split(substr($i, 5), o, "/") }
                if ($i ~ /^in=/) { split(substr($i, 4), n, "/") }
            }
            if (o[2] == a || o[2] == b || n[2] == a || n[2] == b) mine++
        }
        END { printf "%d %d\n", mine, total }'
}

# Lost records in fxtrace's summary (stderr): "lost: N records, M samples".
fxtrace_lost() { sed -n 's/^ *lost: \([0-9]*\) records, \([0-9]*\) samples.*/\1 \2/p' "$1" | awk '{ print $1 + $2 }'; }

# Workload and total switch counts in a perf.data: "workload total".
perf_counts() {
    "$perf_bin" script -i "$1" -F trace 2>/dev/null | awk -v a="$2" -v b="$3" '
        /prev_pid=/ {
            total++
            for (i = 1; i <= NF; i++) {
                if ($i ~ /^prev_pid=/) p = substr($i, 10)
                if ($i ~ /^next_pid=/) q = substr($i, 10)
            }
            if (p == a || p == b || q == a || q == b) mine++
        }
        END { printf "%d %d\n", mine, total }'
}

# Sum of PERF_RECORD_LOST and PERF_RECORD_LOST_SAMPLES counts in a perf.data.
perf_lost() {
    "$perf_bin" report -D -i "$1" 2>/dev/null | awk '
        /PERF_RECORD_LOST/ { n = $NF; sub(/.*:/, "", n); lost += n }
        END { print lost + 0 }'
}

# The recorder under /usr/bin/time (which then measures the recorder and its `sleep` only).
timed() { # tool output time-file err-file
    case "$1" in
        fxtrace) /usr/bin/time -f '%U %S' -o "$3" \
            "$fxtrace_bin" record --system-wide --no-lbr --mmap-pages "$pages" -o "$2" -- sleep "$duration" 2>"$4" ;;
        perf) /usr/bin/time -f '%U %S' -o "$3" \
            "$perf_bin" record -q -e sched:sched_switch -a -m "$pages" -o "$2" -- sleep "$duration" 2>"$4" ;;
    esac
}

# --- calibration ---------------------------------------------------------------------------

"$pingpong_bin" "$rounds" >"$work/calibrate.pp"
alone_ms="$(pp_field "$work/calibrate.pp" elapsed_ms)"
# The workload slows down while traced; give it three times its bare time plus margins.
duration=$(( (alone_ms * 3 + 999) / 1000 + 2 ))
echo "bench-vs-perf.sh: $rounds rounds take ${alone_ms} ms untraced; each recording lasts ${duration} s" >&2

# --- runs ----------------------------------------------------------------------------------

rows=()
run_one() { # tool run
    local tool="$1" i="$2" out pp
    out="$work/$tool.$i.$([ "$tool" = fxtrace ] && echo fxt || echo data)"
    pp="$work/$tool.$i.pp"
    timed "$tool" "$out" "$work/$tool.$i.time" "$work/$tool.$i.err" &
    local recorder=$!
    sleep 1
    "$pingpong_bin" "$rounds" >"$pp"
    wait "$recorder"
    local a b counts lost
    a="$(pp_field "$pp" ping_tid)"
    b="$(pp_field "$pp" pong_tid)"
    if [ "$tool" = fxtrace ]; then
        counts="$(fxtrace_counts "$out" "$a" "$b")"
        lost="$(fxtrace_lost "$work/$tool.$i.err")"
    else
        counts="$(perf_counts "$out" "$a" "$b")"
        lost="$(perf_lost "$out")"
    fi
    local mine total bytes cpu
    mine="${counts% *}"
    total="${counts#* }"
    bytes="$(stat -c %s "$out")"
    cpu="$(cpu_seconds "$work/$tool.$i.time")"
    rows+=("$(printf '| %s | %d | %d | %d | %s | %s | %d | %.1f |' \
        "$tool" "$i" "$mine" "$total" "$lost" "$cpu" "$bytes" \
        "$(awk -v b="$bytes" -v t="$total" 'BEGIN { print (t > 0 ? b / t : 0) }')")")
    echo "bench-vs-perf.sh: $tool run $i: workload $mine, total $total, lost $lost, cpu ${cpu}s, $bytes bytes" >&2
}

for i in $(seq 1 "$runs"); do
    run_one fxtrace "$i"
    run_one perf "$i"
done

# Both at once on the same workload run.
timed fxtrace "$work/both.fxt" "$work/both.fxtrace.time" "$work/both.fxtrace.err" &
fx_pid=$!
timed perf "$work/both.data" "$work/both.perf.time" "$work/both.perf.err" &
perf_pid=$!
sleep 1.5
"$pingpong_bin" "$rounds" >"$work/both.pp"
wait "$fx_pid" "$perf_pid"
a="$(pp_field "$work/both.pp" ping_tid)"
b="$(pp_field "$work/both.pp" pong_tid)"
fx_counts="$(fxtrace_counts "$work/both.fxt" "$a" "$b")"
perf_counts_both="$(perf_counts "$work/both.data" "$a" "$b")"
fx_mine="${fx_counts% *}"
perf_mine="${perf_counts_both% *}"
fx_lost_both="$(fxtrace_lost "$work/both.fxtrace.err")"
perf_lost_both="$(perf_lost "$work/both.data")"

# --- report --------------------------------------------------------------------------------

echo "Workload: examples/pingpong $rounds rounds (${alone_ms} ms untraced); ring: $pages pages per CPU for both; fxtrace with --no-lbr; recordings of ${duration} s."
echo
echo "| recorder | run | workload switches | all switches | lost | CPU s (user+sys) | output bytes | bytes/switch |"
echo "|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
echo "Both recorders on the same workload run: fxtrace saw $fx_mine workload switches (lost $fx_lost_both), perf $perf_mine (lost $perf_lost_both): difference $(awk -v f="$fx_mine" -v p="$perf_mine" 'BEGIN { d = f - p; if (d < 0) d = -d; printf "%.3f%%", (p > 0 ? 100 * d / p : 0) }')."
