#!/usr/bin/env bash
# Builds the XRay test fixtures of fxtrace's `import-xray` from a real program.
#
# Usage: scripts/make-xray-fixtures.sh [OUT_DIR]
#        scripts/make-xray-fixtures.sh --check
#
# Compiles scripts/xray-fixture/xray_fixture.cc with
# `clang++ -fxray-instrument -fxray-instruction-threshold=1`, runs it in
# FDR mode (log version 5) and basic mode (naive log, version 3), and writes to
# OUT_DIR (default: tests/fixtures/xray):
#
#   fdr-v5.xray        FDR log: two worker threads, args, tail exits, custom events, a TSC wrap
#   fdr-v5.yaml        `llvm-xray convert --output-format=yaml --symbolize --instr_map=BIN` of it
#   basic-v3.xray      basic-mode log of the same program
#   basic-v3.yaml      its llvm-xray YAML
#   instr-map.yaml     `llvm-xray extract --symbolize BIN`: function ids -> addresses, names
#
# Timestamps, thread and process ids change on every run, so the logs are not
# byte-for-byte reproducible; the binary is (same clang, same bytes), and so is
# instr-map.yaml. `--check` (for CI) regenerates everything into a temporary
# directory and runs the cross-check tests on the fresh logs against fresh
# llvm-xray output (FXTRACE_XRAY_FIXTURES=DIR, see cli/tests/xray/fixtures.rs); it
# prints "skipped: ..." and succeeds when clang or llvm-xray is missing, unless
# FXTRACE_TEST_REQUIRE lists `clang` (.ci/run does; the list is the tests' own,
# src/test_support.rs): there a missing tool fails the check.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
src="$here/xray-fixture/xray_fixture.cc"
committed="$root/tests/fixtures/xray"

find_tool() {
  local t
  for t in "$@"; do
    if command -v "$t" >/dev/null 2>&1; then
      command -v "$t"
      return 0
    fi
  done
  return 1
}
# A missing tool: exit 2 when generating; under --check a skip (exit 0), except in CI.
missing() {
  # Unset (not CI): nothing is required. The list's spaces do not count.
  local required="${FXTRACE_TEST_REQUIRE:-}"
  if [ "${1:-}" != "--check" ]; then
    echo "make-xray-fixtures: $2 not found ($3)" >&2
    exit 2
  elif [[ ",${required// /}," == *,clang,* ]]; then
    echo "make-xray-fixtures: FAIL: $2 not found ($3); FXTRACE_TEST_REQUIRE lists clang" >&2
    exit 1
  fi
  echo "skipped: $2 not found ($3)"
  exit 0
}
CXX="$(find_tool clang++ clang++-14)" || missing "${1:-}" clang++ "apt-get install clang"
XRAY="$(find_tool llvm-xray llvm-xray-14)" || missing "${1:-}" llvm-xray "apt-get install llvm"

if [ "${1:-}" = "--check" ]; then
  fresh="$(mktemp -d)"
  trap 'rm -rf "$fresh"' EXIT
  "$0" "$fresh"
  (cd "$root" && FXTRACE_XRAY_FIXTURES="$fresh" cargo test --quiet -p fxtrace-tools --test xray fixtures::) |
    tee "$fresh/test.log"
  # A filter that matches no test passes too: the cross-check ran only if tests passed.
  if ! grep -Eq '^test result: ok\. [1-9][0-9]* passed' "$fresh/test.log"; then
    echo "make-xray-fixtures: FAIL: no cross-check test ran (cargo test --test xray fixtures::)" >&2
    exit 1
  fi
  if ! cmp -s "$fresh/instr-map.yaml" "$committed/instr-map.yaml"; then
    echo "make-xray-fixtures: note: instr-map.yaml differs from the committed one (another clang version?)"
  fi
  exit 0
fi
out="${1:-$committed}"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"

flags=(-O2 -g0 -fxray-instrument -fxray-instruction-threshold=1 -pthread)
"$CXX" "${flags[@]}" -o "$work/xray_fixture" "$src"

# run BINARY MODE NAME: runs one mode with its own log directory, copies the
# single log it wrote to OUT_DIR/NAME.
run() {
  local bin="$1" mode="$2" name="$3" dir="$work/log-$3"
  mkdir -p "$dir"
  XRAY_OPTIONS="patch_premain=false verbosity=0 xray_logfile_base=$dir/" "$bin" "$mode"
  local logs=("$dir"/*)
  if [ "${#logs[@]}" -ne 1 ] || [ ! -s "${logs[0]}" ]; then
    echo "make-xray-fixtures: expected one non-empty log from $mode, got: ${logs[*]}" >&2
    exit 1
  fi
  cp "${logs[0]}" "$out/$name.xray"
}

run "$work/xray_fixture" fdr fdr-v5
run "$work/xray_fixture" basic basic-v3

"$XRAY" extract --symbolize "$work/xray_fixture" >"$out/instr-map.yaml"
"$XRAY" convert --output-format=yaml --symbolize --instr_map="$work/xray_fixture" "$out/fdr-v5.xray" >"$out/fdr-v5.yaml"
"$XRAY" convert --output-format=yaml --symbolize --instr_map="$work/xray_fixture" "$out/basic-v3.xray" >"$out/basic-v3.yaml"

# Keep the fixtures small: every committed file must stay under 200 KiB.
for f in "$out"/*.xray "$out"/*.yaml; do
  size=$(stat -c %s "$f")
  if [ "$size" -ge $((200 * 1024)) ]; then
    echo "make-xray-fixtures: $f is $size bytes (limit 200 KiB)" >&2
    exit 1
  fi
done
echo "make-xray-fixtures: wrote $(ls "$out" | tr '\n' ' ')to $out"
