#!/usr/bin/env bash
# The trace readers on a large streaming trace, beside `cat FILE > /dev/null` in the same run:
# wall time, CPU time (user + system) and peak resident memory of each, the median of ROUNDS
# rounds that alternate the commands (docs/benchmarks/readers.md has the runs).
#
#   scripts/bench-readers.sh [TRACE]
#
# Without TRACE it records one (≥ 500 MB): `fxtrace record -a -m streaming -b 512` of
# `examples/threads` (4 threads, 1.5 M iterations each), with the system's context switches.
# FXTRACE (default target/release/fxtrace) is the build measured; FXTRACE_BEFORE, when set,
# an older build measured beside it (its rows are marked "before"). ROUNDS defaults to 3.
set -euo pipefail
cd "$(dirname "$0")/.."

FXTRACE=${FXTRACE:-target/release/fxtrace}
BEFORE=${FXTRACE_BEFORE:-}
ROUNDS=${ROUNDS:-3}
TRACE=${1:-}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

if [ -z "$TRACE" ]; then
    cargo build --release --quiet -p fxtrace-tools --bin fxtrace -p fxtrace --example threads
    TRACE=$WORK/readers.fxt
    "$FXTRACE" record -a -m streaming -b 512 -o "$TRACE" -- \
        target/release/examples/threads --threads 4 --events 1500000 > /dev/null 2>&1
fi
BYTES=$(stat -c %s "$TRACE")

# name|command (FILE and BIN are substituted)
COMMANDS=(
    "cat|cat FILE"
    "stats|BIN stats FILE"
    "report spans|BIN report spans FILE"
    "report sched|BIN report sched FILE"
    "check|BIN check FILE"
    "dump|BIN dump FILE"
    "convert|BIN convert --to chrome-json FILE -o -"
)

run() { # label command → appends "label wall cpu rss" to $WORK/times
    local label=$1 cmd=$2
    /usr/bin/time -f "%e %U %S %M" -o "$WORK/one" sh -c "$cmd > /dev/null 2>&1" || true
    # (A failing command adds a line first: the figures are the last line.)
    read -r wall user sys rss < <(tail -n 1 "$WORK/one")
    echo "$label|$wall|$(echo "$user + $sys" | bc)|$rss" >> "$WORK/times"
}

: > "$WORK/times"
for _ in $(seq "$ROUNDS"); do
    for entry in "${COMMANDS[@]}"; do
        name=${entry%%|*}
        cmd=${entry#*|}
        cmd=${cmd//FILE/$TRACE}
        run "$name" "${cmd//BIN/$FXTRACE}"
        # The older build has no reports but lbr: the readers it has are compared.
        if [ -n "$BEFORE" ] && [ "$name" != cat ] && [ "${name#report}" = "$name" ]; then
            run "$name (before)" "${cmd//BIN/$BEFORE}"
        fi
    done
done

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

echo "trace: $TRACE, $BYTES bytes; $ROUNDS rounds; load $(cut -d' ' -f1-3 /proc/loadavg); $(date -u '+%Y-%m-%d %H:%M UTC')"
printf '| %-22s | %8s | %10s | %8s | %10s | %9s |\n' reader "wall s" "MB/s" "CPU s" "MB/s CPU" "peak MiB"
printf '|%s|%s|%s|%s|%s|%s|\n' ------------------------ ---------- ------------ ---------- ------------ -----------
cut -d'|' -f1 "$WORK/times" | awk '!seen[$0]++' | while read -r label; do
    wall=$(grep -F "$label|" "$WORK/times" | grep -v "^$label (before)" | cut -d'|' -f2 | median)
    cpu=$(grep -F "$label|" "$WORK/times" | grep -v "^$label (before)" | cut -d'|' -f3 | median)
    rss=$(grep -F "$label|" "$WORK/times" | grep -v "^$label (before)" | cut -d'|' -f4 | median)
    printf '| %-22s | %8.2f | %10.0f | %8.2f | %10.0f | %9.1f |\n' "$label" "$wall" \
        "$(echo "$BYTES / $wall / 1000000" | bc -l)" "$cpu" \
        "$(echo "$BYTES / ($cpu + 0.0001) / 1000000" | bc -l)" "$(echo "$rss / 1024" | bc -l)"
done
