#!/usr/bin/env bash
# fxtrace import-perf beside perf script, on two perf.data files of 100 MB or more:
#   lbr:   the LBR fixture's records repeated to 110 MB, a round end after each copy
#          (scripts/reduce-perf-data.py --repeat; the real samples of an Intel Xeon);
#   sched: `perf sched record` of `perf bench sched messaging` made here (needs root).
# Alternating rounds (perf script, then import-perf), each input read once before (page
# cache warm); wall time and peak resident set by /usr/bin/time; prints each round and the
# median with the range. The release build of the working tree is used.
#
#   scripts/bench-import-perf.sh [ROUNDS]    (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-5}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cargo build --quiet --release -p fxtrace-tools --bin fxtrace
fxtrace="$PWD/target/release/fxtrace"

scripts/reduce-perf-data.py --repeat tests/fixtures/perf/propeller_sample_1.perf.data \
    "$work/lbr.data" 110000000 >/dev/null
inputs=(lbr)
if [ "$(id -u)" -eq 0 ] &&
    (cd "$work" && perf sched record -o sched.data -- \
        perf bench sched messaging -g 10 -l 3000 >/dev/null 2>&1); then
    inputs+=(sched)
else
    echo "note: no sched input (perf sched record needs root and tracefs)"
fi

median() { sort -n | awk '{a[NR]=$1} END {printf "%s (%s-%s)", a[int((NR+1)/2)], a[1], a[NR]}'; }

echo "date: $(date -u '+%Y-%m-%d %H:%M') UTC; load: $(cut -d' ' -f1-3 /proc/loadavg)"
for input in "${inputs[@]}"; do
    data="$work/$input.data"
    bytes=$(stat -c %s "$data")
    cat "$data" >/dev/null
    : >"$work/perf.times"
    : >"$work/fxtrace.times"
    for round in $(seq "$rounds"); do
        # perf script prints the branch stacks of the LBR input (-F brstack, what the tests
        # compare with), its default fields for the sched input.
        fields=()
        [ "$input" = lbr ] && fields=(-F brstack)
        /usr/bin/time -f "%e %M" -o "$work/t" perf script "${fields[@]}" -i "$data" >/dev/null 2>&1
        cat "$work/t" >>"$work/perf.times"
        /usr/bin/time -f "%e %M" -o "$work/t" "$fxtrace" import-perf "$data" \
            -o "$work/out.fxt" >"$work/summary" 2>&1
        cat "$work/t" >>"$work/fxtrace.times"
        echo "$input round $round: perf script $(cat "$work/perf.times" | tail -1 | cut -d' ' -f1) s," \
            "import-perf $(tail -1 "$work/fxtrace.times" | cut -d' ' -f1) s"
    done
    echo "$input: $((bytes / 1000000)) MB; $(head -1 "$work/summary")"
    for tool in perf fxtrace; do
        secs=$(cut -d' ' -f1 "$work/$tool.times" | median)
        rss=$(cut -d' ' -f2 "$work/$tool.times" | median)
        mbps=$(cut -d' ' -f1 "$work/$tool.times" | sort -n |
            awk -v b="$bytes" '{a[NR]=$1} END {printf "%.0f", b / 1e6 / a[int((NR+1)/2)]}')
        echo "  $tool: $secs s, $mbps MB/s, peak $rss KiB"
    done
done
