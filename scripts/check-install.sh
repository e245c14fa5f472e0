#!/usr/bin/env bash
# The README's install gives an fxtrace that traces an unmodified program with --preload and
# nothing else installed: the preload object is embedded in the binary at build time
# (cli/build.rs) and extracted to a private cache on first use (cli/src/preload_lib.rs).
#
# Exactly as a new user meets it: a clean clone of this repository's HEAD, the README's quick
# start run there first (its release build fills the default target/), then the README's
# install command, word for word, in the same clone and target directory. Only where the
# binary goes (CARGO_INSTALL_ROOT: a temporary root, not ~/.cargo/bin) and network use
# (CARGO_NET_OFFLINE) are set, through the environment. Both commands are read from README.md,
# so the check follows the README.
#
# Usage: scripts/check-install.sh          (commits only: uncommitted changes are not in the clone)
#        scripts/check-install.sh --here   (this tree is the clean clone and the README's quick
#                                           start already ran in it: .ci/run, whose smoke test is
#                                           that quick start, so CI builds it once)
set -euo pipefail
cd "$(dirname "$0")/.."
here=0
if [ "${1:-}" = "--here" ]; then
    here=1
fi

quick_start="$(grep -m1 '^cargo build --release' README.md)" || {
    echo "check-install: README.md has no quick start line starting with 'cargo build --release'" >&2
    exit 1
}
install="$(grep -o -m1 '`cargo install [^`]*`' README.md | tr -d '`')" || {
    echo "check-install: README.md names no \`cargo install …\` command" >&2
    exit 1
}

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
root="$work/root"
home="$work/home"
mkdir -p "$home"
export CARGO_NET_OFFLINE=true
unset CARGO_TARGET_DIR CARGO_BUILD_TARGET_DIR FXTRACE_EMBED_PRELOAD
if [ "$here" = 1 ]; then
    clone="$PWD"
    if [ ! -x target/release/fxtrace ]; then
        echo "check-install --here: the README's quick start has not run here (no target/release/fxtrace)" >&2
        exit 1
    fi
    echo "check-install: this tree, after its quick start"
else
    clone="$work/fxtrace"
    git clone --quiet "$PWD" "$clone"
    echo "check-install: a clean clone of $(git -C "$clone" rev-parse --short HEAD)"
    started=$SECONDS
    (cd "$clone" && eval "$quick_start") >"$work/quick-start.txt" 2>&1 || {
        cat "$work/quick-start.txt" >&2
        echo "check-install: the README's quick start failed: $quick_start" >&2
        exit 1
    }
    echo "check-install: the quick start took $((SECONDS - started)) s"
fi

started=$SECONDS
(cd "$clone" && export CARGO_INSTALL_ROOT="$root" && eval "$install") >"$work/install.txt" 2>&1 || {
    cat "$work/install.txt" >&2
    echo "check-install: the README's install failed: $install" >&2
    exit 1
}
echo "check-install: $install took $((SECONDS - started)) s"

# The installed binary alone: a fresh home (empty cache), no FXTRACE_PRELOAD_LIB, no object
# beside it.
if [ -e "$root/bin/libfxtrace_preload.so" ]; then
    echo "check-install: unexpected libfxtrace_preload.so beside the installed binary" >&2
    exit 1
fi
env -u FXTRACE_PRELOAD_LIB -u XDG_CACHE_HOME -u FXTRACE_SOCKET HOME="$home" \
    "$root/bin/fxtrace" record --preload -o "$work/true.fxt" -- /bin/true 2>"$work/record.txt" || {
    cat "$work/record.txt" >&2
    echo "check-install: fxtrace record --preload failed" >&2
    exit 1
}
"$root/bin/fxtrace" stats "$work/true.fxt" >"$work/stats.txt"
if ! grep -q '^providers: 1$' "$work/stats.txt" || ! grep -q '"true"' "$work/stats.txt"; then
    cat "$work/record.txt" "$work/stats.txt" >&2
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
