#!/usr/bin/env python3
"""Lists the longest functions of Rust files (rustfmt layout): a function runs from its `fn`
line to the first line that closes it at the same indentation (test functions count too).

Usage: scripts/long-functions.py [--max N] [--top K] PATH...   (files or directories)
Prints the K (10) longest, lines first; exits 1 when one is longer than N lines. Issue 30 holds
cli/src/manager to 120: scripts/long-functions.py --max 120 cli/src/manager"""
import os, re, sys

FN = re.compile(r'^(\s*)(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?(?:extern\s+"[^"]*"\s+)?fn\s+(\w+)')

def functions(path):
    lines = open(path, encoding='utf-8').read().split('\n')
    for i, line in enumerate(lines):
        m = FN.match(line)
        if not m:
            continue
        indent = m.group(1)
        # The signature ends at the first line ending in `{` or `;` (a declaration) from here.
        j = i
        while j < len(lines) and not lines[j].rstrip().endswith(('{', ';', '}')):
            j += 1
        if j >= len(lines) or lines[j].rstrip().endswith(';'):
            continue
        if lines[j].rstrip().endswith('}') and lines[j].count('{') and j == i:
            yield (1, path, i + 1, m.group(2))
            continue
        end = j + 1
        while end < len(lines) and lines[end].rstrip() != indent + '}':
            end += 1
        yield (end - i + 1, path, i + 1, m.group(2))

def main():
    args = sys.argv[1:]
    limit, top = None, 10
    if '--max' in args:
        k = args.index('--max'); limit = int(args[k + 1]); del args[k:k + 2]
    if '--top' in args:
        k = args.index('--top'); top = int(args[k + 1]); del args[k:k + 2]
    found = []
    for root in args:
        walk = [(root, [], [os.path.basename(root)])] if os.path.isfile(root) else os.walk(root)
        for d, _, files in walk:
            for f in files:
                if f.endswith('.rs'):
                    p = d if os.path.isfile(d) else os.path.join(d, f)
                    found.extend(functions(p))
    found.sort(reverse=True)
    for n, p, line, name in found[:top]:
        print(f'{n:5} {p}:{line} {name}')
    if limit is not None:
        over = [f for f in found if f[0] > limit]
        if over:
            print(f'{len(over)} functions longer than {limit} lines', file=sys.stderr)
            sys.exit(1)

main()
