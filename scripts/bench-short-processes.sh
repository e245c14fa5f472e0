#!/usr/bin/env bash
# What a short-lived process costs under `fxtrace record --preload` (issue 37), beside the
# same commands untraced, under `fxtrace record` without --preload and under `perf record`,
# in alternating rounds. Prints Markdown tables for docs/benchmarks/c-api-and-preload.md.
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: scripts/bench-short-processes.sh [-r ROUNDS] [-n COUNT] [-l LONG] [-c CONCURRENT]
                                        [--build LABEL=DIR]... [--perf PATH] [--quick]
                                        [--keep DIR] [--wait-points]

  -r ROUNDS        alternating rounds (default 5)
  -n COUNT         /bin/true runs of the sequential loop (default 100)
  -l LONG          /bin/true runs of the long loop (default 3 × COUNT)
  -c CONCURRENT    /bin/true started at once by the concurrent workload (default 300)
  --build L=DIR    a build to measure: DIR holds `fxtrace` and `libfxtrace_preload.so`
                   (repeat it to compare builds in the same rounds, say before=/tmp/old
                   after=target/release; default: this=target/release, built with
                   cargo build --release -p fxtrace-tools -p fxtrace-preload)
  --perf PATH      perf binary (default: perf on PATH; without one its rows are left out,
                   said once)
  --quick          only the default --preload row and CAPTURE=none (besides untraced and
                   perf)
  --keep DIR       keep each run's stderr (the recorders' summaries) in DIR
  --wait-points    also a --preload row with wait points (FXTRACE_PRELOAD_WAIT_POINTS=1,
                   what --wait-points sets: each process records its call chains and
                   names kernel frames, from the kernel symbols the recorder shares)

Workloads (each /bin/true a process of its own; under --preload each is a provider):
  loop        sh -c 'for i in $(seq COUNT); do /bin/true; done'
  long        the same loop with LONG runs
  concurrent  sh -c 'for i in $(seq CONCURRENT); do /bin/true & done; wait'

Rows, in an order rotated from round to round:
  untraced                      the workload alone
  perf record                   perf record -o FILE -- WORKLOAD (perf's defaults)
  LABEL: fxtrace record         fxtrace record -o FILE -- WORKLOAD (no --preload)
  LABEL: --preload ...          fxtrace record --preload -o FILE -- WORKLOAD, with the
                                FXTRACE_PRELOAD_* options the row names
On a machine shared with other work, run it at a real-time priority so that every row gets
the CPUs when it needs them (the rows are compared with each other, in the same rounds):
  sudo chrt -f 10 scripts/bench-short-processes.sh

Per row: wall time of the whole command / the number of /bin/true runs, in ms: the median
over the rounds and the range; "added" is the median less the untraced median. For the
--preload rows, "providers" is the smallest count of providers in the recorder's summary
over the rounds (COUNT + 2 for the loop: sh and seq too; CONCURRENT + 2 for the concurrent
workload) and "lost" the largest count of providers the summary calls lost.
EOF
}

rounds=5
count=100
long=""
concurrent=300
builds=()
perf_bin=""
quick=no
keep=""
wait_points=no
while [ $# -gt 0 ]; do
    case "$1" in
        -r) rounds="$2"; shift 2 ;;
        -n) count="$2"; shift 2 ;;
        -l) long="$2"; shift 2 ;;
        -c) concurrent="$2"; shift 2 ;;
        --build) builds+=("$2"); shift 2 ;;
        --perf) perf_bin="$2"; shift 2 ;;
        --quick) quick=yes; shift ;;
        --keep) keep="$2"; shift 2 ;;
        --wait-points) wait_points=yes; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done

[ -n "$long" ] || long=$((3 * count))
if [ "$long" -le "$count" ]; then
    echo "-l LONG ($long) must be more than -n COUNT ($count)" >&2
    exit 2
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ ${#builds[@]} -eq 0 ]; then
    (cd "$root" && cargo build --release -q -p fxtrace-tools -p fxtrace-preload)
    builds=("this=$root/target/release")
fi
for b in "${builds[@]}"; do
    dir="${b#*=}"
    for f in fxtrace libfxtrace_preload.so; do
        if [ ! -x "$dir/$f" ] && [ ! -f "$dir/$f" ]; then
            echo "build ${b%%=*}: $dir/$f not found" >&2
            exit 2
        fi
    done
done
if [ -z "$perf_bin" ]; then
    perf_bin="$(command -v perf || true)"
fi
if [ -n "$perf_bin" ] && ! "$perf_bin" --version >/dev/null 2>&1; then
    perf_bin=""
fi
[ -n "$perf_bin" ] || echo "perf not found: its rows are left out" >&2

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
[ -z "$keep" ] || mkdir -p "$keep"

# The rows: "label|kind|build dir|env assignments".
rows=("untraced|plain||")
[ -z "$perf_bin" ] || rows+=("perf record|perf||")
for b in "${builds[@]}"; do
    label="${b%%=*}"
    dir="$(cd "${b#*=}" && pwd)"
    if [ "$wait_points" = yes ]; then
        rows+=("$label: --preload WAIT_POINTS=1|preload|$dir|FXTRACE_PRELOAD_WAIT_POINTS=1")
    fi
    if [ "$quick" = yes ]; then
        rows+=("$label: --preload (defaults)|preload|$dir|")
        rows+=("$label: --preload CAPTURE=none|preload|$dir|FXTRACE_PRELOAD_CAPTURE=none")
        continue
    fi
    rows+=("$label: fxtrace record|record|$dir|")
    rows+=("$label: --preload (defaults)|preload|$dir|")
    rows+=("$label: --preload LBR=0|preload|$dir|FXTRACE_PRELOAD_LBR=0")
    rows+=("$label: --preload START_WAIT_MS=0|preload|$dir|FXTRACE_PRELOAD_START_WAIT_MS=0")
    rows+=("$label: --preload CAPTURE=none|preload|$dir|FXTRACE_PRELOAD_CAPTURE=none")
    rows+=("$label: --preload CAPTURE=none START_WAIT_MS=0 FLUSH_MS=0|preload|$dir|FXTRACE_PRELOAD_CAPTURE=none FXTRACE_PRELOAD_START_WAIT_MS=0 FXTRACE_PRELOAD_FLUSH_MS=0")
done

workload() {
    case "$1" in
        loop) echo "for i in \$(seq $count); do /bin/true; done" ;;
        long) echo "for i in \$(seq $long); do /bin/true; done" ;;
        concurrent) echo "for i in \$(seq $concurrent); do /bin/true & done; wait" ;;
    esac
}

now_ns() { date +%s%N; }

# run ROW WORKLOAD TAG: prints "ns providers lost".
run() {
    local kind dir envs script err start end providers lost
    IFS='|' read -r _ kind dir envs <<<"$1"
    script="$(workload "$2")"
    err="$work/$3.err"
    rm -f "$work/out.fxt" "$work/out.fxt.old" "$work/perf.data" "$work/perf.data.old"
    # What the previous run left to the kernel is done before this one starts: a recorder's
    # tracepoint holder closes its events after the recorder exited (grace periods of ~80 ms,
    # under the kernel's event_mutex, which a tracepoint open right then would wait for).
    sleep 0.3
    start=$(now_ns)
    case "$kind" in
        plain) sh -c "$script" 2>"$err" ;;
        perf) "$perf_bin" record -q -o "$work/perf.data" -- sh -c "$script" >/dev/null 2>"$err" ;;
        record) "$dir/fxtrace" record -o "$work/out.fxt" -- sh -c "$script" >/dev/null 2>"$err" ;;
        preload)
            # shellcheck disable=SC2086 # the assignments are words of their own
            env $envs FXTRACE_PRELOAD_LIB="$dir/libfxtrace_preload.so" \
                "$dir/fxtrace" record --preload -o "$work/out.fxt" -- sh -c "$script" \
                >/dev/null 2>"$err"
            ;;
    esac
    end=$(now_ns)
    providers=-
    lost=-
    if [ "$kind" = preload ]; then
        # The summary table: "  id  pid  name  records  bytes  dropped  mode  lost".
        providers=$(awk '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && NF >= 8 { n++ } END { print n + 0 }' "$err")
        lost=$(awk '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && NF >= 8 && $NF != "no" { n++ } END { print n + 0 }' "$err")
    fi
    [ -z "$keep" ] || cp "$err" "$keep/$3.err"
    echo "$((end - start)) $providers $lost"
}

echo "# bench-short-processes: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, $(uname -r), scheduling: $(chrt -p $$ 2>/dev/null | head -1 | sed 's/.*: //')"
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for w in loop long concurrent; do
    case "$w" in
        loop) n=$count ;;
        long) n=$long ;;
        concurrent) n=$concurrent ;;
    esac
    results="$work/$w.results"
    : >"$results"
    for ((r = 0; r < rounds; r++)); do
        k=${#rows[@]}
        for ((j = 0; j < k; j++)); do
            i=$(((j + r) % k))
            read -r ns providers lost < <(run "${rows[$i]}" "$w" "$w-r$r-row$i")
            echo "$i $ns $providers $lost" >>"$results"
        done
    done
    echo
    echo "## $w: $(workload "$w") ($rounds rounds, load average after: $(cut -d' ' -f1-3 /proc/loadavg))"
    echo
    echo "| how it ran | ms per /bin/true, median (range) | added | providers | lost |"
    echo "|---|---|---|---|---|"
    for ((i = 0; i < ${#rows[@]}; i++)); do
        label="${rows[$i]%%|*}"
        awk -v row="$i" -v n="$n" -v label="$label" -v base_row=0 '
            function median(a, k,    s, t, x, y) {
                # insertion sort of a[1..k]
                for (x = 2; x <= k; x++) { t = a[x]; y = x - 1
                    while (y >= 1 && a[y] > t) { a[y + 1] = a[y]; y-- }
                    a[y + 1] = t }
                return (k % 2) ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
            }
            $1 == base_row { b[++nb] = $2 / n / 1e6 }
            $1 == row {
                v[++nv] = $2 / n / 1e6
                if ($3 != "-") { if (p == "" || $3 < p) p = $3; if ($4 > l) l = $4 }
            }
            END {
                lo = v[1]; hi = v[1]
                for (x = 1; x <= nv; x++) { if (v[x] < lo) lo = v[x]; if (v[x] > hi) hi = v[x] }
                m = median(v, nv); mb = median(b, nb)
                printf "| %s | %.2f (%.2f–%.2f) | %s | %s | %s |\n", label, m, lo, hi,
                    (row == base_row) ? "" : sprintf("%+.2f", m - mb),
                    (p == "") ? "" : p, (p == "") ? "" : l + 0
            }' "$results"
    done
done

# The marginal cost of a process: from the medians of the two loops of each row.
echo
echo "## per process: (long − loop) / ($long − $count), and what the session costs once"
echo
echo "| how it ran | ms per /bin/true, marginal | added | once per session, ms | added |"
echo "|---|---|---|---|---|"
for ((i = 0; i < ${#rows[@]}; i++)); do
    label="${rows[$i]%%|*}"
    awk -v row="$i" -v n="$count" -v l="$long" -v label="$label" '
        function median(a, k,    t, x, y) {
            for (x = 2; x <= k; x++) { t = a[x]; y = x - 1
                while (y >= 1 && a[y] > t) { a[y + 1] = a[y]; y-- }
                a[y + 1] = t }
            return (k % 2) ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
        }
        FILENAME ~ /loop.results$/ && $1 == 0 { s0[++ns0] = $2 / 1e6 }
        FILENAME ~ /long.results$/ && $1 == 0 { l0[++nl0] = $2 / 1e6 }
        FILENAME ~ /loop.results$/ && $1 == row { s[++ns] = $2 / 1e6 }
        FILENAME ~ /long.results$/ && $1 == row { g[++ng] = $2 / 1e6 }
        END {
            per = (median(g, ng) - median(s, ns)) / (l - n)
            per0 = (median(l0, nl0) - median(s0, ns0)) / (l - n)
            once = median(s, ns) - per * n
            once0 = median(s0, ns0) - per0 * n
            printf "| %s | %.2f | %s | %.0f | %s |\n", label, per,
                (row == 0) ? "" : sprintf("%+.2f", per - per0), once,
                (row == 0) ? "" : sprintf("%+.0f", once - once0)
        }' "$work/loop.results" "$work/long.results"
done
