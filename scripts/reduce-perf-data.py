#!/usr/bin/env python3
"""Cut a perf.data file (file mode, little-endian) after its first records, keeping every
feature section: how tests/fixtures/perf/propeller_sample_1.perf.data was made from the
3.1 MB original (see tests/fixtures/perf/README.md).

    scripts/reduce-perf-data.py IN OUT MAX_DATA_BYTES

The header, the attributes and whatever lies before the data section are copied as they are;
the data section keeps the whole records that fit in MAX_DATA_BYTES; the feature table and
sections follow it, their offsets rewritten. `perf report --header-only -i OUT` and
`perf script -i OUT` read the result.
"""

import struct
import sys

HEADER = struct.Struct("<8sQQ2Q2Q2Q4Q")


def main(src, dst, budget):
    data = open(src, "rb").read()
    (magic, header_size, attr_size, attrs_off, attrs_size, data_off, data_size, et_off,
     et_size, f0, f1, f2, f3) = HEADER.unpack_from(data, 0)
    if magic != b"PERFILE2":
        sys.exit(f"{src}: not a little-endian perf.data file")
    features = [bit for bit in range(256) if (f0, f1, f2, f3)[bit // 64] >> (bit % 64) & 1]
    table_at = data_off + data_size
    sections = [struct.unpack_from("<QQ", data, table_at + 16 * i) for i in range(len(features))]

    kept = 0
    while kept + 8 <= min(data_size, budget):
        size = struct.unpack_from("<H", data, data_off + kept + 6)[0]
        if size < 8 or kept + size > min(data_size, budget):
            break
        kept += size

    out = bytearray(data[:data_off + kept])
    struct.pack_into("<Q", out, 48, kept)  # data section size
    new_table_at = len(out)
    out += bytes(16 * len(features))
    for i, (offset, size) in enumerate(sections):
        struct.pack_into("<QQ", out, new_table_at + 16 * i, len(out), size)
        out += data[offset:offset + size]
    open(dst, "wb").write(out)
    print(f"{dst}: {len(out)} bytes, {kept} of {data_size} data bytes, "
          f"{len(features)} feature sections")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
