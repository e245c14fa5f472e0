#!/usr/bin/env bash
# `cargo install --path cli` gives an fxtrace that traces an unmodified program with --preload
# and nothing else installed (issue 14): the preload object is embedded in the binary at build
# time (cli/build.rs) and extracted to a private cache on first use (cli/src/preload_lib.rs).
#
# Usage: scripts/check-install.sh   (debug build, target dir target/install-check, reused)
set -euo pipefail
cd "$(dirname "$0")/.."

root="$(mktemp -d)"
home="$(mktemp -d)"
trap 'rm -rf "$root" "$home"' EXIT

started=$SECONDS
cargo install --quiet --debug --locked --offline --path cli --root "$root" \
    --target-dir target/install-check
echo "check-install: cargo install --path cli took $((SECONDS - started)) s"

# The installed binary alone: a fresh home (empty cache), no FXTRACE_PRELOAD_LIB, no object
# beside it.
if [ -e "$root/bin/libfxtrace_preload.so" ]; then
    echo "check-install: unexpected libfxtrace_preload.so beside the installed binary" >&2
    exit 1
fi
env -u FXTRACE_PRELOAD_LIB -u XDG_CACHE_HOME -u FXTRACE_SOCKET HOME="$home" \
    "$root/bin/fxtrace" record --preload -o "$root/true.fxt" -- /bin/true 2>"$root/record.txt" || {
    cat "$root/record.txt" >&2
    echo "check-install: fxtrace record --preload failed" >&2
    exit 1
}
"$root/bin/fxtrace" stats "$root/true.fxt" >"$root/stats.txt"
if ! grep -q '^providers: 1$' "$root/stats.txt" || ! grep -q '"true"' "$root/stats.txt"; then
    cat "$root/record.txt" "$root/stats.txt" >&2
    echo "check-install: the trace of /bin/true has no provider named \"true\"" >&2
    exit 1
fi
cached="$(find "$home/.cache/fxtrace" -name 'libfxtrace_preload-*.so' | head -n 1)"
mode="$(stat -c %a "$home/.cache/fxtrace")"
if [ -z "$cached" ] || [ "$mode" != 700 ]; then
    echo "check-install: no private cache copy (found '${cached}', directory mode ${mode})" >&2
    exit 1
fi
echo "check-install: ok: the installed fxtrace traced /bin/true with its embedded object ($(stat -c %s "$cached") bytes, cached in a 0700 directory)"
