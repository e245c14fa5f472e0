#!/bin/sh
# Load Chrome JSON traces (`fxtrace convert --to chrome-json`) in the trace engine of Chrome
# DevTools' Performance panel (`@paulirish/trace_engine` on npm, run in Node), as a user opening
# them in DevTools would. Fails, naming the file and the engine's error, when one does not load.
#
#   scripts/check-devtools.sh trace.json [more.json ...]
#
# Needs node (>= 18) and npm. The engine is installed once, at a pinned version (its two
# dependencies pinned too), into a cache directory: $FXTRACE_DEVTOOLS_CACHE, else
# ${XDG_CACHE_HOME:-$HOME/.cache}/fxtrace/trace_engine-VERSION.
set -eu

VERSION=0.0.65
# The engine's package.json asks for "latest" of these: pinned to what was checked.
THIRD_PARTY_WEB=0.30.0
LEGACY_JAVASCRIPT=0.0.1

if [ "$#" -eq 0 ]; then
    echo "usage: $0 TRACE.json..." >&2
    exit 2
fi
for tool in node npm; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "$0: $tool not found: install Node.js (with npm) to run this check" >&2
        exit 3
    fi
done

cache=${FXTRACE_DEVTOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fxtrace/trace_engine-$VERSION}
engine="$cache/node_modules/@paulirish/trace_engine/analyze-trace.mjs"
if [ ! -f "$engine" ]; then
    parent=$(dirname "$cache")
    mkdir -p "$parent"
    # Install beside the cache, then move it in place: concurrent runs never see half of it.
    tmp=$(mktemp -d "$parent/.install.XXXXXX")
    cat >"$tmp/package.json" <<JSON
{
  "private": true,
  "dependencies": { "@paulirish/trace_engine": "$VERSION" },
  "overrides": {
    "third-party-web": "$THIRD_PARTY_WEB",
    "legacy-javascript": "$LEGACY_JAVASCRIPT"
  }
}
JSON
    echo "installing @paulirish/trace_engine@$VERSION into $cache" >&2
    if ! (cd "$tmp" && npm install --no-audit --no-fund --silent >&2); then
        rm -rf "$tmp"
        echo "$0: npm install @paulirish/trace_engine@$VERSION failed (is the npm registry reachable?)" >&2
        exit 3
    fi
    if ! mv -T "$tmp" "$cache" 2>/dev/null; then
        rm -rf "$tmp" # another run installed it first
    fi
fi

exec node "$(dirname "$0")/check-devtools.mjs" "$engine" "$VERSION" "$@"
