#!/usr/bin/env bash
# Streaming saves at the disk's speed (issue 34 item 18), measured in one run, alternating:
#   - dd writing zeros to the file system the trace goes to, in 1 MiB and in 128 KiB blocks:
#     CPU time (user + system) per MiB, after each recording, as much as it wrote;
#   - `fxtrace record -m streaming` saving a flat-out writer's records (examples/provider_probe,
#     one thread): the recorder's CPU time per MiB of trace written, and the records dropped;
#   - the same recorder with the writer paced (a pause every 1000 events): records dropped.
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
# Needs GNU time (/usr/bin/time, Debian package `time`); prints one line per measurement and
# the medians.
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

if [ ! -x /usr/bin/time ]; then
    echo "bench-streaming: skipped (GNU time missing: apt-get install time)"
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

# CPU seconds (user + system) in a GNU time output file "%U %S".
cpu_of() { awk '{ printf "%.4f", $1 + $2 }' "$1"; }

# dd of $1 MiB in blocks of $2 KiB: CPU ms per MiB.
measure_dd() {
    local mib=$1 kib=$2
    settle
    /usr/bin/time -f "%U %S" -o "$dir/dd.time" \
        dd if=/dev/zero of="$dir/dd.bin" bs="${kib}K" count="$((mib * 1024 / kib))" 2>/dev/null
    rm -f "$dir/dd.bin"
    awk -v c="$(cpu_of "$dir/dd.time")" -v m="$mib" 'BEGIN { printf "%.4f", c * 1000 / m }'
}

# One recording by recorder $1 (label $2) of the writer with arguments $3...: prints
# "label cpu_ms_per_mib mib dropped written seconds".
measure_record() {
    local recorder=$1 label=$2
    shift 2
    local sock="$dir/s.sock" out="$dir/t.fxt"
    rm -f "$sock" "$out"
    settle
    /usr/bin/time -f "%U %S" -o "$dir/rec.time" \
        "$recorder" record -m streaming -b "$buffer" --socket "$sock" -o "$out" \
        2>"$dir/rec.err" &
    local timer=$!
    for _ in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
    local started ended
    started=$(date +%s%N)
    FXTRACE_SOCKET="$sock" "$probe" "$@" >"$dir/probe.out"
    ended=$(date +%s%N)
    # The recorder is GNU time's child (time itself ignores SIGINT).
    kill -INT "$(pgrep -P "$timer")"
    wait "$timer"
    local mib written dropped
    mib=$(stat -c %s "$out" | awk '{ printf "%.1f", $1 / 1048576 }')
    written=$(sed -n 's/.*written=\([0-9]*\).*/\1/p' "$dir/probe.out")
    dropped=$(sed -n 's/.*dropped=\([0-9]*\).*/\1/p' "$dir/probe.out")
    awk -v l="$label" -v c="$(cpu_of "$dir/rec.time")" -v m="$mib" -v d="$dropped" \
        -v w="$written" -v s="$(( (ended - started) / 1000000 ))" \
        'BEGIN { printf "%s %.4f %s %s %s %.3f\n", l, c * 1000 / m, m, d, w, s / 1000 }'
    rm -f "$out"
}

echo "bench-streaming: $rounds rounds, writer $events events, -b $buffer, in $dir ($(df -T "$dir" | awk 'NR == 2 { print $2 }')); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "columns: what, CPU ms per MiB, MiB, dropped, written, writer seconds"
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
    done
    echo "round $round done; load $(cut -d' ' -f1-3 /proc/loadavg)"
done

# Medians (and ranges) of CPU ms per MiB and of the drops, by label.
echo "medians (min..max):"
for label in $(awk '{ print $1 }' "$results" | sort -u); do
    cpu=$(awk -v l="$label" '$1 == l { print $2 }' "$results" | sort -g | awk '{ v[NR] = $1 } END { printf "%.3f (%.3f..%.3f)", v[int((NR + 1) / 2)], v[1], v[NR] }')
    drops=$(awk -v l="$label" '$1 == l && $4 != "-" { print $4 }' "$results" | sort -g | awk '{ v[NR] = $1 } END { if (NR) printf "%d (%d..%d)", v[int((NR + 1) / 2)], v[1], v[NR]; else printf "-" }')
    echo "  $label: CPU ms/MiB $cpu; dropped $drops"
done
