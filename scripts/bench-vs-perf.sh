#!/usr/bin/env bash
# fxtrace record --system-wide side by side with perf record -e sched:sched_switch -a, on a
# context-switch-heavy workload (examples/pingpong: two threads bouncing a byte through pipes),
# then the pinned case of issues 11 and 31: the same workload pinned to one CPU (the highest
# switch and wake-up rate), untraced and under each recorder in alternating rounds, then CPU
# sampling beside perf record -F 999 -g (examples/contention work).
#
# Needs root (the recorders capture every CPU). Prints Markdown tables for BENCHMARKS.md.
# Without perf it says so in one line and measures fxtrace alone.
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: sudo scripts/bench-vs-perf.sh [-r ROUNDS] [-m PAGES] [-n RUNS] [--fxtrace PATH]
                                     [--pingpong PATH] [--perf PATH] [--keep DIR]
                                     [--pinned-only | --no-pinned] [--pin-cpu CPU]
                                     [--pinned-rounds ROUNDS] [--pinned-runs RUNS]
                                     [--fxtrace-before PATH] [--no-sampling]

  -r ROUNDS        ping-pong round trips per run (default 100000: about 400k switches)
  -m PAGES         ring size per CPU for both recorders, in pages (default 256 = 1 MiB)
  -n RUNS          runs per recorder (default 3)
  --fxtrace PATH   fxtrace binary (default: cargo build --release, target/release/fxtrace)
  --pingpong PATH  workload binary (default: target/release/examples/pingpong)
  --perf PATH      perf binary (default /usr/bin/perf)
  --keep DIR       keep traces, perf.data files and logs in DIR
  --pinned-only    run the pinned case only;  --no-pinned: skip it
  --pin-cpu CPU    the CPU the pinned workload runs on (default 0)
  --pinned-rounds ROUNDS  round trips of the pinned workload (default 200000: 400k switches)
  --pinned-runs RUNS      alternating rounds of the pinned case and the sampling case
                          (default 3)
  --fxtrace-before PATH   also run this (older) fxtrace binary in the pinned rounds, for a
                          before/after comparison in one run
  --no-sampling           skip the CPU-sampling case

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

The pinned case (`taskset -c CPU pingpong ROUNDS`, both threads on one CPU, so every round
trip is two switches and two wake-ups on that CPU with nothing else to run): RUNS rounds,
each running, in an order rotated from round to round, the workload untraced and under each
recorder:
  fxtrace        fxtrace record --system-wide --no-lbr --mmap-pages PAGES (switches, wake-ups)
  fxtrace-nowake the same with --no-wakeups
  fxtrace-waits  the same with --wait-points (call chains of blocked switches), rings 4 x PAGES
  perf-sched-record  perf sched record -m PAGES (switches, wake-ups, and more)
  perf-sched     perf record -e sched:sched_switch -a -m PAGES
  perf-switch    perf record -e dummy --switch-events -a -m PAGES
Each recorder records `sleep D` and the workload starts 1 s into it. Reported per recorder
(median over the rounds, and the range):
  speed          the workload's elapsed time untraced (same round) / traced
  cpu/event      the recorder's user + system CPU (bash `times`, ms resolution; the whole
                 recording: start, idle polling, the workload, the end) / all switches and
                 wake-ups in its output
  bytes/event    output file size / all switches and wake-ups in it
  wake-up bytes  (fxtrace's size - fxtrace-nowake's, same round) / fxtrace's wake-ups
  lost           what the kernel reported lost
Wake-ups are sched_waking events: fxtrace's thread wakeup records, perf's sched_waking samples.

The sampling case (unless --no-sampling): `contention work 2 ITER` (two threads, a fixed
amount of arithmetic each, elapsed time printed), untraced and under
  fxtrace --sample   fxtrace record --system-wide --no-lbr --no-wakeups --sample=999
  perf -F 999 -g     perf record -F 999 -g -a
in RUNS alternating rounds: the workload's slowdown, and the samples each wrote.
EOF
}

rounds=100000
pages=256
runs=3
fxtrace_bin=""
fxtrace_before_bin=""
pingpong_bin=""
perf_bin=/usr/bin/perf
keep=""
pinned=yes
compare=yes
pin_cpu=0
pinned_rounds=200000
pinned_runs=3
sampling=yes
while [ $# -gt 0 ]; do
    case "$1" in
        -r) rounds="$2"; shift 2 ;;
        -m) pages="$2"; shift 2 ;;
        -n) runs="$2"; shift 2 ;;
        --fxtrace) fxtrace_bin="$2"; shift 2 ;;
        --fxtrace-before) fxtrace_before_bin="$2"; shift 2 ;;
        --pingpong) pingpong_bin="$2"; shift 2 ;;
        --perf) perf_bin="$2"; shift 2 ;;
        --keep) keep="$2"; shift 2 ;;
        --pinned-only) compare=no; shift ;;
        --no-pinned) pinned=no; shift ;;
        --pin-cpu) pin_cpu="$2"; shift 2 ;;
        --pinned-rounds) pinned_rounds="$2"; shift 2 ;;
        --pinned-runs) pinned_runs="$2"; shift 2 ;;
        --no-sampling) sampling=no; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "bench-vs-perf.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done

if [ "$(id -u)" != 0 ]; then
    echo "bench-vs-perf.sh: both recorders capture every CPU: run as root (sudo)" >&2
    exit 1
fi
[ -x /usr/bin/time ] || { echo "bench-vs-perf.sh: /usr/bin/time not found" >&2; exit 1; }
if [ -x "$perf_bin" ]; then
    have_perf=yes
else
    have_perf=no
    echo "bench-vs-perf.sh: perf is missing ($perf_bin; apt-get install linux-perf): measuring fxtrace alone"
fi
if [ "$pinned" = yes ] && ! command -v taskset >/dev/null 2>&1; then
    echo "bench-vs-perf.sh: taskset (util-linux) not found: the pinned case needs it" >&2
    exit 1
fi

here="$(cd "$(dirname "$0")/.." && pwd)"
if [ -z "$fxtrace_bin" ] || [ -z "$pingpong_bin" ]; then
    (cd "$here" && cargo build --release --quiet --bin fxtrace --example pingpong --example contention)
    fxtrace_bin="${fxtrace_bin:-$here/target/release/fxtrace}"
    pingpong_bin="${pingpong_bin:-$here/target/release/examples/pingpong}"
fi
contention_bin="$(dirname "$pingpong_bin")/contention"

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

# Workload and total switch counts in an fxtrace trace, then workload and total wake-ups:
# "workload total wworkload wtotal" (a switch of either layout; a wake-up's woken tid).
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
        / sched_context_switch / {
            total++
            for (i = 1; i <= NF; i++) {
                if ($i ~ /^out_tid=/) ot = substr($i, 9)
                if ($i ~ /^in_tid=/) it = substr($i, 8)
            }
            if (ot == a || ot == b || it == a || it == b) mine++
        }
        / thread_wakeup / {
            wtotal++
            for (i = 1; i <= NF; i++) if ($i ~ /^tid=/) w = substr($i, 5)
            if (w == a || w == b) wmine++
        }
        END { printf "%d %d %d %d\n", mine, total, wmine, wtotal }'
}

# Lost records in fxtrace's summary (stderr): "lost: N records, M samples".
fxtrace_lost() { sed -n 's/^ *lost: \([0-9]*\) records, \([0-9]*\) samples.*/\1 \2/p' "$1" | awk '{ print $1 + $2 }'; }

# Workload and total switch counts in a perf.data, then workload and total sched_waking
# samples: "workload total wworkload wtotal".
perf_counts() {
    "$perf_bin" script -i "$1" -F event,trace 2>/dev/null | awk -v a="$2" -v b="$3" '
        /prev_pid=/ {
            total++
            for (i = 1; i <= NF; i++) {
                if ($i ~ /^prev_pid=/) p = substr($i, 10)
                if ($i ~ /^next_pid=/) q = substr($i, 10)
            }
            if (p == a || p == b || q == a || q == b) mine++
        }
        /sched:sched_waking:/ {
            wtotal++
            for (i = 1; i <= NF; i++) if ($i ~ /^pid=/) w = substr($i, 5)
            if (w == a || w == b) wmine++
        }
        END { printf "%d %d %d %d\n", mine, total, wmine, wtotal }'
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
            "$fxtrace_bin" record --system-wide --no-lbr --no-wakeups --mmap-pages "$pages" -o "$2" -- sleep "$duration" 2>"$4" ;;
        perf) /usr/bin/time -f '%U %S' -o "$3" \
            "$perf_bin" record -q -e sched:sched_switch -a -m "$pages" -o "$2" -- sleep "$duration" 2>"$4" ;;
    esac
}

# --- the comparison on every CPU ------------------------------------------------------------

compare_all_cpus() {
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
        read -r mine total _ <<<"$counts"
        bytes="$(stat -c %s "$out")"
        cpu="$(cpu_seconds "$work/$tool.$i.time")"
        rows+=("$(printf '| %s | %d | %d | %d | %s | %s | %d | %.1f |' \
            "$tool" "$i" "$mine" "$total" "$lost" "$cpu" "$bytes" \
            "$(awk -v b="$bytes" -v t="$total" 'BEGIN { print (t > 0 ? b / t : 0) }')")")
        echo "bench-vs-perf.sh: $tool run $i: workload $mine, total $total, lost $lost, cpu ${cpu}s, $bytes bytes" >&2
    }

    for i in $(seq 1 "$runs"); do
        run_one fxtrace "$i"
        [ "$have_perf" = no ] || run_one perf "$i"
    done

    if [ "$have_perf" = no ]; then
        echo "Workload: examples/pingpong $rounds rounds (${alone_ms} ms untraced); ring: $pages pages per CPU; fxtrace with --no-lbr; recordings of ${duration} s; perf missing."
        echo
        echo "| recorder | run | workload switches | all switches | lost | CPU s (user+sys) | output bytes | bytes/switch |"
        echo "|---|---|---|---|---|---|---|---|"
        printf '%s\n' "${rows[@]}"
        return
    fi

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
    read -r fx_mine _ <<<"$fx_counts"
    read -r perf_mine _ <<<"$perf_counts_both"
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
}

# --- the pinned case (issue 11) ---------------------------------------------------------------

# Children's user + system seconds from bash's `times` output (its second line).
children_cpu() {
    sed -n 2p "$1" | awk '{
        t = 0
        for (i = 1; i <= 2; i++) { split($i, p, "m"); sub(/s$/, "", p[2]); t += p[1] * 60 + p[2] }
        printf "%.3f", t }'
}

# Workload and total switches in a `perf record --switch-events` file: "workload total" (a
# switch is its switch-out record; the task is the sample's, the next one is in the record).
perf_switch_counts() {
    "$perf_bin" script -i "$1" --show-switch-events 2>/dev/null | awk -v a="$2" -v b="$3" '
        /PERF_RECORD_SWITCH_CPU_WIDE OUT/ {
            total++
            tid = ""
            for (i = 2; i <= NF; i++) if ($i ~ /^\[[0-9]+\]$/) { tid = $(i - 1); break }
            split($NF, n, "/")
            if (tid == a || tid == b || n[2] == a || n[2] == b) mine++
        }
        END { printf "%d %d\n", mine, total }'
}

# One recorder of the pinned case over `sleep D`; bash's `times` (the recorder's CPU, as the
# subshell's child) goes to the time file.
pinned_record() { # config output time-file err-file
    local cmd
    case "$1" in
        fxtrace) cmd=("$fxtrace_bin" record --system-wide --no-lbr --mmap-pages "$pages" -o "$2") ;;
        fxtrace-nowake) cmd=("$fxtrace_bin" record --system-wide --no-lbr --no-wakeups --mmap-pages "$pages" -o "$2") ;;
        fxtrace-waits) cmd=("$fxtrace_bin" record --system-wide --no-lbr --wait-points --mmap-pages "$((pages * 4))" -o "$2") ;;
        fxtrace-before) cmd=("$fxtrace_before_bin" record --system-wide --no-lbr --mmap-pages "$pages" -o "$2") ;;
        perf-sched-record) cmd=("$perf_bin" sched record -q -m "$pages" -o "$2") ;;
        perf-sched) cmd=("$perf_bin" record -q -e sched:sched_switch -a -m "$pages" -o "$2") ;;
        perf-switch) cmd=("$perf_bin" record -q -e dummy --switch-events -a -m "$pages" -o "$2") ;;
    esac
    ( "${cmd[@]}" -- sleep "$pinned_duration" 2>"$4"; times >"$3" )
}

pinned_workload() { taskset -c "$pin_cpu" "$pingpong_bin" "$pinned_rounds" >"$1"; }

pinned_case() {
    local configs=(untraced fxtrace fxtrace-nowake fxtrace-waits)
    [ -z "$fxtrace_before_bin" ] || configs+=(fxtrace-before)
    [ "$have_perf" = no ] || configs+=(perf-sched-record perf-sched perf-switch)
    local started load_before
    started="$(date -u '+%Y-%m-%d %H:%M UTC')"
    load_before="$(uptime | sed 's/.*load average: //')"
    pinned_workload "$work/pinned.calibrate.pp"
    local alone_ms
    alone_ms="$(pp_field "$work/pinned.calibrate.pp" elapsed_ms)"
    pinned_duration=$(( (alone_ms * 3 + 999) / 1000 + 2 ))
    echo "bench-vs-perf.sh: pinned: $pinned_rounds rounds on CPU $pin_cpu take ${alone_ms} ms untraced; recordings of ${pinned_duration} s" >&2
    local rows_file="$work/pinned.rows"
    : >"$rows_file"
    local r k n="${#configs[@]}"
    for r in $(seq 1 "$pinned_runs"); do
        local untraced_ms="" order=()
        for k in $(seq 0 $((n - 1))); do order+=("${configs[$(((k + r - 1) % n))]}"); done
        local results=()
        for c in "${order[@]}"; do
            local base="$work/pinned.$r.$c" out pp="$work/pinned.$r.$c.pp"
            if [ "$c" = untraced ]; then
                pinned_workload "$pp"
                untraced_ms="$(pp_field "$pp" elapsed_ms)"
                echo "bench-vs-perf.sh: pinned round $r: untraced ${untraced_ms} ms" >&2
                continue
            fi
            out="$base.$(case "$c" in fxtrace*) echo fxt ;; *) echo data ;; esac)"
            pinned_record "$c" "$out" "$base.times" "$base.err" &
            local recorder=$!
            sleep 1
            pinned_workload "$pp"
            wait "$recorder"
            results+=("$c")
        done
        # The speeds need this round's untraced time, which may come last.
        for c in "${results[@]}"; do
            local base="$work/pinned.$r.$c" out pp="$work/pinned.$r.$c.pp" a b counts lost
            out="$base.$(case "$c" in fxtrace*) echo fxt ;; *) echo data ;; esac)"
            a="$(pp_field "$pp" ping_tid)"
            b="$(pp_field "$pp" pong_tid)"
            case "$c" in
                fxtrace*) counts="$(fxtrace_counts "$out" "$a" "$b")"; lost="$(fxtrace_lost "$base.err")" ;;
                perf-sched*) counts="$(perf_counts "$out" "$a" "$b")"; lost="$(perf_lost "$out")" ;;
                perf-switch) counts="$(perf_switch_counts "$out" "$a" "$b") 0 0"; lost="$(perf_lost "$out")" ;;
            esac
            local ms cpu bytes stacks=0 mine total wmine wtotal
            read -r mine total wmine wtotal <<<"$counts"
            ms="$(pp_field "$pp" elapsed_ms)"
            cpu="$(children_cpu "$base.times")"
            bytes="$(stat -c %s "$out")"
            [ "$c" != fxtrace-waits ] || stacks="$("$fxtrace_bin" dump "$out" | grep -c 'name="fxtrace:stack"' || true)"
            printf '%s %d %d %d %s %s %s %s %s %s %s %s\n' "$c" "$r" "$ms" "$untraced_ms" \
                "$mine" "$total" "${lost:-0}" "$cpu" "$bytes" "$wmine" "$wtotal" "$stacks" >>"$rows_file"
            echo "bench-vs-perf.sh: pinned round $r: $c ${ms} ms, switches $total (workload $mine), wake-ups $wtotal (workload $wmine), lost ${lost:-0}, cpu ${cpu}s, $bytes bytes" >&2
        done
    done
    # fxtrace and perf sched record at once on one workload run: the same switches and
    # wake-ups, when neither lost any.
    local both=""
    if [ "$have_perf" = yes ]; then
        pinned_record fxtrace "$work/pinned.both.fxt" "$work/pinned.both.fx.times" "$work/pinned.both.fx.err" &
        local fx_pid=$!
        pinned_record perf-sched-record "$work/pinned.both.data" "$work/pinned.both.perf.times" "$work/pinned.both.perf.err" &
        local perf_pid=$!
        sleep 1.5
        pinned_workload "$work/pinned.both.pp"
        wait "$fx_pid" "$perf_pid"
        local a b fx perf
        a="$(pp_field "$work/pinned.both.pp" ping_tid)"
        b="$(pp_field "$work/pinned.both.pp" pong_tid)"
        read -r -a fx <<<"$(fxtrace_counts "$work/pinned.both.fxt" "$a" "$b")"
        read -r -a perf <<<"$(perf_counts "$work/pinned.both.data" "$a" "$b")"
        both="Both fxtrace and \`perf sched record\` on the same pinned run: the workload's switches ${fx[0]} and ${perf[0]}, its wake-ups ${fx[2]} and ${perf[2]}; lost $(fxtrace_lost "$work/pinned.both.fx.err") and $(perf_lost "$work/pinned.both.data")."
    fi
    local load_after
    load_after="$(uptime | sed 's/.*load average: //')"

    echo "Pinned case, run of $started: examples/pingpong $pinned_rounds rounds pinned to CPU $pin_cpu (taskset; ${alone_ms} ms untraced at calibration), $pinned_runs rounds alternating ${configs[*]}$([ "$have_perf" = yes ] || echo " (perf missing)"); ring $pages pages per CPU; recordings of ${pinned_duration} s; load average (uptime) $load_before before, $load_after after; $(nproc) CPUs."
    echo
    echo "| recorder | workload speed vs untraced | recorder CPU per switch+wake-up | bytes per switch+wake-up | wake-ups | lost |"
    echo "|---|---|---|---|---|---|"
    local label
    for c in "${configs[@]}"; do
        [ "$c" = untraced ] && continue
        case "$c" in
            fxtrace) label="fxtrace (\`--mmap-pages $pages\`: switches, wake-ups)" ;;
            fxtrace-nowake) label="fxtrace \`--no-wakeups\`" ;;
            fxtrace-waits) label="fxtrace \`--wait-points\` (rings of $((pages * 4)) pages, as its default)" ;;
            fxtrace-before) label="fxtrace before ($fxtrace_before_bin)" ;;
            perf-sched-record) label="\`perf sched record\`" ;;
            perf-sched) label="\`perf record -e sched:sched_switch -a\`" ;;
            perf-switch) label="\`perf record -e dummy --switch-events -a\`" ;;
        esac
        awk -v c="$c" -v label="$label" '
            function median(v, m,    i, j, t) {
                for (i = 2; i <= m; i++) { t = v[i]; for (j = i - 1; j >= 1 && v[j] > t; j--) v[j + 1] = v[j]; v[j + 1] = t }
                return m % 2 ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2
            }
            function range(v, m, fmt,    i, lo, hi) {
                lo = hi = v[1]
                for (i = 2; i <= m; i++) { if (v[i] < lo) lo = v[i]; if (v[i] > hi) hi = v[i] }
                return sprintf(fmt "–" fmt, lo, hi)
            }
            $1 == c {
                m++
                ev = $6 + $11
                speed[m] = $4 / $3; cpu[m] = 1e6 * $8 / ev; bps[m] = $9 / ev; lost = lost (m > 1 ? ", " : "") $7
                wake = wake (m > 1 ? ", " : "") $11
            }
            END {
                printf "| %s | %.2f (%s) | %.2f µs (%s) | %.1f | %s | %s |\n", label,
                    median(speed, m), range(speed, m, "%.2f"), median(cpu, m), range(cpu, m, "%.2f"),
                    median(bps, m), wake, lost
            }' "$rows_file"
    done
    echo
    # Bytes per wake-up: fxtrace's size less fxtrace --no-wakeups' in the same round, per
    # switch of each, over fxtrace's wake-ups; wait points: bytes and CPU per blocked switch
    # (ping-pong's switch-outs nearly all block) against plain fxtrace, same round.
    awk '
        { key = $2; if ($1 == "fxtrace") { fb[key] = $9; fs[key] = $6; fw[key] = $11; fc[key] = $8 }
          if ($1 == "fxtrace-nowake") { nb[key] = $9; ns[key] = $6; nc[key] = $8 }
          if ($1 == "fxtrace-waits") { wb[key] = $9; ws[key] = $6; wc[key] = $8; st[key] = $12 } }
        END {
            for (k in fb) if (k in nb && fw[k] > 0)
                printf "Round %s: %.1f bytes per wake-up (%d wake-ups; %.2f vs %.2f bytes per switch with and without)\n",
                    k, (fb[k] - nb[k] * fs[k] / ns[k]) / fw[k], fw[k], fb[k] / fs[k], nb[k] / ns[k]
            for (k in wb) if (k in nb)
                printf "Round %s: --wait-points %.1f bytes and %.2f µs recorder CPU per switch (without: %.1f, %.2f µs); %d distinct stacks for %d switches\n",
                    k, wb[k] / ws[k], 1e6 * wc[k] / ws[k], nb[k] / ns[k], 1e6 * nc[k] / ns[k], st[k], ws[k]
        }' "$rows_file" | sort
    echo
    [ -z "$both" ] || { echo "$both"; echo; }
    echo "Medians over the rounds (range in brackets); wake-ups and lost per round. Per run:"
    echo
    echo "| recorder | round | workload ms | untraced ms (same round) | workload switches | all switches | workload wake-ups | all wake-ups | lost | CPU s | output bytes |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|"
    awk '{ printf "| %s | %d | %d | %d | %d | %d | %d | %d | %s | %s | %d |\n", $1, $2, $3, $4, $5, $6, $10, $11, $7, $8, $9 }' "$rows_file"
}

# --- CPU sampling beside perf record -F 999 -g ----------------------------------------------

sampling_case() {
    [ -x "$contention_bin" ] || { echo "bench-vs-perf.sh: $contention_bin missing: no sampling case" >&2; return; }
    local iterations=100000 started load_before
    started="$(date -u '+%Y-%m-%d %H:%M UTC')"
    load_before="$(uptime | sed 's/.*load average: //')"
    local configs=(untraced fxtrace-sample)
    [ "$have_perf" = no ] || configs+=(perf-g)
    local rows_file="$work/sampling.rows" n="${#configs[@]}" r k c
    : >"$rows_file"
    "$contention_bin" work 2 "$iterations" >"$work/sampling.calibrate"
    local alone_ms duration
    alone_ms="$(pp_field "$work/sampling.calibrate" elapsed_ms)"
    duration=$(( (alone_ms * 3 + 999) / 1000 + 2 ))
    for r in $(seq 1 "$pinned_runs"); do
        local untraced_ms="" order=() done_configs=()
        for k in $(seq 0 $((n - 1))); do order+=("${configs[$(((k + r - 1) % n))]}"); done
        for c in "${order[@]}"; do
            local base="$work/sampling.$r.$c" cmd=()
            case "$c" in
                untraced) "$contention_bin" work 2 "$iterations" >"$base.out"
                    untraced_ms="$(pp_field "$base.out" elapsed_ms)"; continue ;;
                fxtrace-sample) cmd=("$fxtrace_bin" record --system-wide --no-lbr --no-wakeups --sample=999 --mmap-pages "$pages" -o "$base.fxt") ;;
                perf-g) cmd=("$perf_bin" record -q -F 999 -g -a -m "$pages" -o "$base.data") ;;
            esac
            ( "${cmd[@]}" -- sleep "$duration" 2>"$base.err"; times >"$base.times" ) &
            local recorder=$!
            sleep 1
            "$contention_bin" work 2 "$iterations" >"$base.out"
            wait "$recorder"
            done_configs+=("$c")
        done
        # The slowdowns need this round's untraced time, which may come last.
        for c in "${done_configs[@]}"; do
            local base="$work/sampling.$r.$c" samples
            case "$c" in
                fxtrace-sample) samples="$(sed -n 's/^ *CPU samples: \([0-9]*\).*/\1/p' "$base.err")" ;;
                perf-g) samples="$("$perf_bin" report -D -i "$base.data" 2>/dev/null | grep -c 'PERF_RECORD_SAMPLE' || true)" ;;
            esac
            printf '%s %d %d %d %s %s\n' "$c" "$r" "$(pp_field "$base.out" elapsed_ms)" "$untraced_ms" \
                "${samples:-0}" "$(children_cpu "$base.times")" >>"$rows_file"
            echo "bench-vs-perf.sh: sampling round $r: $c $(pp_field "$base.out" elapsed_ms) ms (untraced $untraced_ms), ${samples:-0} samples" >&2
        done
    done
    local load_after
    load_after="$(uptime | sed 's/.*load average: //')"
    echo "Sampling case, run of $started: examples/contention work 2 $iterations (${alone_ms} ms untraced at calibration), $pinned_runs rounds alternating ${configs[*]}; load average $load_before before, $load_after after; $(nproc) CPUs."
    echo
    echo "| recorder | workload time / untraced (same round) | samples | recorder CPU s |"
    echo "|---|---|---|---|"
    awk '{ printf "| %s (round %d) | %.3f | %d | %s |\n", $1, $2, $3 / $4, $5, $6 }' "$rows_file"
}

# --- main ------------------------------------------------------------------------------------

if [ "$compare" = yes ]; then
    compare_all_cpus
fi
if [ "$pinned" = yes ]; then
    [ "$compare" = no ] || echo
    pinned_case
fi
if [ "$sampling" = yes ]; then
    echo
    sampling_case
fi
