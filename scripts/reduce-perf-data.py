#!/usr/bin/env python3
"""Cut a perf.data file (file mode, little-endian) after its first records, keeping every
feature section: how tests/fixtures/perf/propeller_sample_1.perf.data was made from the
3.1 MB original (see tests/fixtures/perf/README.md). With --repeat, the opposite: the data
section repeated until it holds at least DATA_BYTES, a round end after each copy (the input
of scripts/bench-import-perf.sh).

    scripts/reduce-perf-data.py IN OUT MAX_DATA_BYTES
    scripts/reduce-perf-data.py --repeat IN OUT DATA_BYTES

The header, the attributes and whatever lies before the data section are copied as they are;
the data section keeps the whole records that fit in MAX_DATA_BYTES; the feature table and
sections follow it, their offsets rewritten. `perf report --header-only -i OUT` and
`perf script -i OUT` read the result.
"""

import struct
import sys

HEADER = struct.Struct("<8sQQ2Q2Q2Q4Q")


FINISHED_ROUND = struct.pack("<IHH", 68, 0, 8)


def main(src, dst, budget, repeat=False):
    data = open(src, "rb").read()
    (magic, header_size, attr_size, attrs_off, attrs_size, data_off, data_size, et_off,
     et_size, f0, f1, f2, f3) = HEADER.unpack_from(data, 0)
    if magic != b"PERFILE2":
        sys.exit(f"{src}: not a little-endian perf.data file")
    features = [bit for bit in range(256) if (f0, f1, f2, f3)[bit // 64] >> (bit % 64) & 1]
    table_at = data_off + data_size
    sections = [struct.unpack_from("<QQ", data, table_at + 16 * i) for i in range(len(features))]

    limit = data_size if repeat else min(data_size, budget)
    kept = 0
    while kept + 8 <= limit:
        size = struct.unpack_from("<H", data, data_off + kept + 6)[0]
        if size < 8 or kept + size > limit:
            break
        kept += size

    records = data[data_off:data_off + kept]
    if repeat:
        records = (records + FINISHED_ROUND) * -(-budget // (kept + 8))
    out = bytearray(data[:data_off]) + records
    struct.pack_into("<Q", out, 48, len(records))  # data section size
    new_table_at = len(out)
    out += bytes(16 * len(features))
    for i, (offset, size) in enumerate(sections):
        struct.pack_into("<QQ", out, new_table_at + 16 * i, len(out), size)
        out += data[offset:offset + size]
    open(dst, "wb").write(out)
    print(f"{dst}: {len(out)} bytes, {len(records)} data bytes from {kept} of {data_size}, "
          f"{len(features)} feature sections")


if __name__ == "__main__":
    args = sys.argv[1:]
    repeat = args[:1] == ["--repeat"]
    if repeat:
        args = args[1:]
    if len(args) != 3:
        sys.exit(__doc__)
    main(args[0], args[1], int(args[2]), repeat)
