#!/usr/bin/env bash
# Streaming saves at the disk's speed (issue 34 item 18), measured in one run, alternating:
#   - dd writing zeros to the file system the trace goes to, in 1 MiB and in 128 KiB blocks:
#     CPU time (user + system) per MiB, after each recording, as much as it wrote;
#   - `fxtrace record -m streaming` saving a flat-out writer's records (examples/provider_probe,
#     one thread): the recorder's CPU time per MiB of trace written, and the records dropped;
#   - the same recorder with the writer paced (a pause every 1000 events): records dropped;
#   - the same recorder recording one event: its fixed cost (start, clock calibration, end),
#     which the medians take out of each recording's CPU time ("net"): dd has none to speak of.
# With BEFORE_FXTRACE set, that build's recorder is measured in the same rounds (the same
# writer binary for both: the comparison is the manager's).
#
# Usage: scripts/bench-streaming.sh [ROUNDS]        (default 5)
# Env:   FXTRACE, PROBE          the build measured (default target/release/fxtrace and
#                                target/release/examples/provider_probe)
#        BEFORE_FXTRACE          a recorder to compare (optional)
#        DIR                     where the files go (default target/bench-streaming)
#        EVENTS                  events the writer writes (default 4000000, ~290 MB)
#        BUFFER                  -b of the recordings (default 8M, record's default)
#        PAUSE_US                the paced writer's pause per 1000 events (default 20)
# Needs python3 (its os.wait4 gives CPU time in microseconds; GNU time prints 10 ms steps, a
# tenth of a recording's CPU time); prints one line per measurement and the medians.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-5}
fxtrace=${FXTRACE:-target/release/fxtrace}
probe=${PROBE:-target/release/examples/provider_probe}
before=${BEFORE_FXTRACE:-}
dir=${DIR:-target/bench-streaming}
events=${EVENTS:-4000000}
buffer=${BUFFER:-8M}
pause_us=${PAUSE_US:-20}

if ! command -v python3 >/dev/null; then
    echo "bench-streaming: skipped (python3 missing: apt-get install python3)"
    exit 0
fi
for f in "$fxtrace" "$probe" ${before:+"$before"}; do
    [ -x "$f" ] || { echo "bench-streaming: $f is not built (cargo build --release --bin fxtrace --example provider_probe)" >&2; exit 1; }
done
mkdir -p "$dir"
results="$dir/results.txt"
: >"$results"

# Every measurement starts alike: the previous output removed (its pages freed) and the
# file system's dirty pages written back, so that none pays for another's writeback.
settle() {
    rm -f "$dir/dd.bin" "$dir/t.fxt"
    sync
}

# Run a command, writing its CPU seconds "user system" to file $1 (as GNU time's "%U %S", in
# microseconds) and its pid to $1.pid. The command gets SIGINT's default action back; this
# wrapper ignores it.
cpu_time() {
    local out=$1
    shift
    python3 -c '
import os, signal, subprocess, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
child = subprocess.Popen(sys.argv[2:], preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
with open(sys.argv[1] + ".pid", "w") as f:
    f.write("%d\n" % child.pid)
_, status, usage = os.wait4(child.pid, 0)
with open(sys.argv[1], "w") as f:
    f.write("%.6f %.6f\n" % (usage.ru_utime, usage.ru_stime))
sys.exit(os.waitstatus_to_exitcode(status) & 0xff)
' "$out" "$@"
}

# CPU seconds (user + system) in a file written by cpu_time.
cpu_of() { awk '{ printf "%.6f", $1 + $2 }' "$1"; }

# dd of $1 MiB in blocks of $2 KiB: CPU ms per MiB.
measure_dd() {
    local mib=$1 kib=$2
    settle
    cpu_time "$dir/dd.time" dd if=/dev/zero of="$dir/dd.bin" bs="${kib}K" count="$((mib * 1024 / kib))" 2>/dev/null
    rm -f "$dir/dd.bin"
    awk -v c="$(cpu_of "$dir/dd.time")" -v m="$mib" 'BEGIN { printf "%.4f", c * 1000 / m }'
}

# One recording by recorder $1 (label $2) of the writer with arguments $3...: prints
# "label cpu_ms_per_mib mib dropped written seconds cpu_ms".
measure_record() {
    local recorder=$1 label=$2
    shift 2
    local sock="$dir/s.sock" out="$dir/t.fxt"
    rm -f "$sock" "$out"
    settle
    cpu_time "$dir/rec.time" "$recorder" record -m streaming -b "$buffer" --socket "$sock" -o "$out" \
        2>"$dir/rec.err" &
    local timer=$!
    for _ in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
    local started ended
    started=$(date +%s%N)
    FXTRACE_SOCKET="$sock" "$probe" "$@" >"$dir/probe.out"
    ended=$(date +%s%N)
    # The recorder is the wrapper's child (the wrapper ignores SIGINT).
    kill -INT "$(cat "$dir/rec.time.pid")"
    wait "$timer"
    local mib written dropped
    mib=$(stat -c %s "$out" | awk '{ printf "%.1f", $1 / 1048576 }')
    written=$(sed -n 's/.*written=\([0-9]*\).*/\1/p' "$dir/probe.out")
    dropped=$(sed -n 's/.*dropped=\([0-9]*\).*/\1/p' "$dir/probe.out")
    awk -v l="$label" -v c="$(cpu_of "$dir/rec.time")" -v m="$mib" -v d="$dropped" \
        -v w="$written" -v s="$(( (ended - started) / 1000000 ))" \
        'BEGIN { printf "%s %s %s %s %s %.3f %.2f\n", l, (m > 0 ? sprintf("%.4f", c * 1000 / m) : "-"), m, d, w, s / 1000, c * 1000 }'
    rm -f "$out"
}

echo "bench-streaming: $rounds rounds, writer $events events, -b $buffer, in $dir ($(df -T "$dir" | awk 'NR == 2 { print $2 }')); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "columns: what, CPU ms per MiB, MiB, dropped, written, writer seconds, CPU ms"
recorders=("$fxtrace:after")
if [ -n "$before" ]; then
    recorders=("$before:before" "${recorders[@]}")
fi
for round in $(seq "$rounds"); do
    for entry in "${recorders[@]}"; do
        recorder=${entry%:*}
        label=${entry##*:}
        line=$(measure_record "$recorder" "$label-flat" --events "$events")
        echo "$line" | tee -a "$results"
        mib=$(echo "$line" | awk '{ printf "%d", $3 }')
        # dd's usual 1 MiB blocks, and the manager's 128 KiB windows.
        echo "dd-1M $(measure_dd "$mib" 1024) $mib - - -" | tee -a "$results"
        echo "dd-128K $(measure_dd "$mib" 128) $mib - - -" | tee -a "$results"
        measure_record "$recorder" "$label-paced" --events "$events" \
            --pause-every 1000 --pause-us "$pause_us" | tee -a "$results"
        # What a recording costs whatever it saves (start, clock, end): one event.
        measure_record "$recorder" "$label-fixed" --events 1 | tee -a "$results"
    done
    echo "round $round done; load $(cut -d' ' -f1-3 /proc/loadavg)"
done

# Median (min..max) of the numbers on standard input.
median() { sort -g | awk -v f="$1" '{ v[NR] = $1 } END { if (NR) printf f " (" f ".." f ")", v[int((NR + 1) / 2)], v[1], v[NR]; else printf "-" }'; }

# Medians (and ranges) of CPU ms per MiB and of the drops, by label; for the recordings, also
# per MiB net of the recorder's fixed cost (its median CPU time for one event).
echo "medians (min..max):"
for label in $(awk '$1 !~ /-fixed$/ { print $1 }' "$results" | sort -u); do
    cpu=$(awk -v l="$label" '$1 == l { print $2 }' "$results" | median %.3f)
    drops=$(awk -v l="$label" '$1 == l && $4 != "-" { print $4 }' "$results" | median %d)
    net=""
    recorder=${label%-*}
    if grep -q "^$recorder-fixed " "$results"; then
        fixed=$(awk -v l="$recorder-fixed" '$1 == l { print $7 }' "$results" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
        net="; net of its fixed $fixed ms: $(awk -v l="$label" -v f="$fixed" '$1 == l && $3 > 0 { print ($7 - f) / $3 }' "$results" | median %.3f)"
    fi
    echo "  $label: CPU ms/MiB $cpu$net; dropped $drops"
done
