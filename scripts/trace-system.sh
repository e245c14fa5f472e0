#!/usr/bin/env bash
# System-wide capture with fxtrace: every CPU's context switches (and LBR where the CPU has it).
#
# Needs root. Changes to the machine are recorded and undone on exit, Ctrl-C included.
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: sudo scripts/trace-system.sh [-o FILE] [-d SECONDS] [--fxtrace PATH] [-- CMD ARGS...]

Records a system-wide trace with `fxtrace record --system-wide`: context switches of all
CPUs (and LBR branch stacks where the CPU supports them), plus whatever providers connect.

  -o FILE        output trace (default: trace-system.fxt in the current directory)
  -d SECONDS     stop after SECONDS (default: 10; ignored when CMD is given and ends first)
  --fxtrace PATH the fxtrace binary (default: `fxtrace` on PATH, else target/release/fxtrace
                 next to this script's repository)
  -- CMD ARGS    run CMD as a traced provider while capturing; the trace stops when it exits
  -h, --help     this text

What it does, and undoes on exit (also on Ctrl-C or an error):
  * not root: re-runs itself with sudo (perf needs root or CAP_PERFMON system-wide; sudo keeps
    the invoking user in SUDO_USER so the trace can be handed back to them)
  * tracefs not mounted: mounts it at /sys/kernel/tracing (sched:sched_switch lives there),
    unmounts it afterwards
  * kernel.perf_event_mlock_kb below 2048: raises it so per-CPU rings fit, restores it after
  * the output file is given to SUDO_USER (fxtrace record --output-owner: fxtrace creates it
    with O_EXCL|O_NOFOLLOW under a temporary name, changes its owner through its descriptor and
    renames it into place; a symlink planted under the output's name is moved to FILE.old,
    never followed), so you can open it without root; an existing output is kept as FILE.old
  * Ctrl-C or SIGTERM stops the recording at once (the trace up to then is written)

If the script itself is killed with SIGKILL nothing can be undone: kernel.perf_event_mlock_kb
stays raised (set it back with `sysctl kernel.perf_event_mlock_kb=516`, the kernel default, or
the value printed when it was raised), and a tracefs it mounted stays mounted; fxtrace, killed
or not, stops its own command.

Open the result with `fxtrace stats FILE`, `fxtrace dump FILE`, or in the Perfetto UI
(https://ui.perfetto.dev, "Open trace file").
EOF
}

out="trace-system.fxt"
duration="10"
fxtrace_bin=""
cmd=()
while [ $# -gt 0 ]; do
    case "$1" in
        -o) [ $# -ge 2 ] || { echo "trace-system.sh: -o needs a file name" >&2; exit 2; }; out="$2"; shift 2 ;;
        -d) [ $# -ge 2 ] || { echo "trace-system.sh: -d needs a number of seconds" >&2; exit 2; }
            duration="$2"; shift 2
            case "$duration" in ''|*[!0-9.]*) echo "trace-system.sh: -d takes seconds, got '$duration'" >&2; exit 2 ;; esac ;;
        --fxtrace) [ $# -ge 2 ] || { echo "trace-system.sh: --fxtrace needs a path" >&2; exit 2; }; fxtrace_bin="$2"; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        --) shift; cmd=("$@"); break ;;
        *) echo "trace-system.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done

if [ "$(id -u)" != 0 ]; then
    echo "trace-system.sh: system-wide capture needs root; re-running with sudo" >&2
    exec sudo -E -- "$0" -o "$out" -d "$duration" ${fxtrace_bin:+--fxtrace "$fxtrace_bin"} ${cmd[@]+-- "${cmd[@]}"}
fi

here="$(cd "$(dirname "$0")/.." && pwd)"
if [ -z "$fxtrace_bin" ]; then
    if command -v fxtrace >/dev/null 2>&1; then
        fxtrace_bin="$(command -v fxtrace)"
    elif [ -x "$here/target/release/fxtrace" ]; then
        fxtrace_bin="$here/target/release/fxtrace"
    else
        echo "trace-system.sh: no fxtrace binary found: build it with 'cargo build --release' or pass --fxtrace PATH" >&2
        exit 1
    fi
fi

# Everything changed is undone here, whatever way the script ends.
mounted_tracefs=""
saved_mlock=""
restore() {
    local status=$?
    if [ -n "$saved_mlock" ]; then
        echo "$saved_mlock" > /proc/sys/kernel/perf_event_mlock_kb || echo "trace-system.sh: could not restore perf_event_mlock_kb to $saved_mlock" >&2
        echo "trace-system.sh: restored kernel.perf_event_mlock_kb=$saved_mlock" >&2
    fi
    if [ -n "$mounted_tracefs" ]; then
        umount "$mounted_tracefs" || echo "trace-system.sh: could not unmount $mounted_tracefs" >&2
        echo "trace-system.sh: unmounted $mounted_tracefs" >&2
    fi
    exit "$status"
}
trap restore EXIT
# fxtrace runs in the background so that these traps run at once (bash runs a trap only after
# the foreground command ends): they stop the recorder the way Ctrl-C would, wait for it to
# write the trace, then exit.
recorder=""
stop_recorder() {
    local sig=$1 status=$2
    if [ -n "$recorder" ]; then
        kill "-$sig" "$recorder" 2>/dev/null || true
        wait "$recorder" 2>/dev/null || true
    fi
    exit "$status"
}
trap 'stop_recorder INT 130' INT
trap 'stop_recorder TERM 143' TERM

if [ ! -e /sys/kernel/tracing/events ] && [ ! -e /sys/kernel/debug/tracing/events ]; then
    mount -t tracefs nodev /sys/kernel/tracing
    mounted_tracefs=/sys/kernel/tracing
    echo "trace-system.sh: mounted tracefs at /sys/kernel/tracing (will unmount on exit)" >&2
fi

mlock_now="$(cat /proc/sys/kernel/perf_event_mlock_kb)"
if [ "$mlock_now" -lt 2048 ]; then
    saved_mlock="$mlock_now"
    echo 2048 > /proc/sys/kernel/perf_event_mlock_kb
    echo "trace-system.sh: raised kernel.perf_event_mlock_kb from $mlock_now to 2048 (restored on exit)" >&2
fi

# The trace goes to the sudo user: fxtrace changes the owner of the file it created itself
# (by descriptor), so no path another user can swap is ever chowned.
owner=()
if [ -n "${SUDO_USER:-}" ] && [ "$SUDO_USER" != root ]; then
    uid="${SUDO_UID:-$(id -u "$SUDO_USER")}"
    gid="${SUDO_GID:-$(id -g "$SUDO_USER")}"
    owner=(--output-owner "$uid:$gid")
fi

set +e
"$fxtrace_bin" record --system-wide -o "$out" --duration "$duration" ${owner[@]+"${owner[@]}"} \
    ${cmd[@]+-- "${cmd[@]}"} &
recorder=$!
wait "$recorder"
rc=$?
recorder=""
set -e

if [ ${#owner[@]} -gt 0 ] && [ "$rc" = 0 ]; then
    echo "trace-system.sh: $out belongs to $SUDO_USER" >&2
fi
exit "$rc"
