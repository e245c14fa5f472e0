//! What the parser holds of each round of records, counted before it reads them: where a
//! synthetic round end must go, and what each compressed record holds.
//!
//! The parser holds a round's records (everything up to a `PERF_RECORD_FINISHED_ROUND`) to
//! sort them: [`Rounds`] says where a round end goes so that it holds at most
//! [`MAX_ROUND_BYTES`] at once. A compressed record (`perf record -z`) is counted by what it
//! decompresses to, not by its size: [`Rounds`] runs the zstd stream of the file's compressed
//! records itself (the output is counted and discarded), so that a record decompressing to
//! more than [`MAX_DECOMPRESSED_RECORD`] bytes (perf writes one ring buffer's contents at most,
//! 512 KiB unless recorded with a larger `-m`), zstd data that does not decompress, or a
//! record inside it shorter than its header is found before the parser meets it, which would
//! allocate what it decompresses to, or stop with the records of the round lost.

use zstd_safe::{DCtx, InBuffer, OutBuffer};

/// `PERF_RECORD_FINISHED_ROUND`.
pub(crate) const RECORD_FINISHED_ROUND: u32 = 68;
/// `PERF_RECORD_COMPRESSED`: zstd data of records (`perf record -z`).
pub(crate) const RECORD_COMPRESSED: u32 = 81;
/// `PERF_RECORD_COMPRESSED2`: the same, with the zstd data's size in its first 8 bytes.
pub(crate) const RECORD_COMPRESSED2: u32 = 83;
/// A `PERF_RECORD_FINISHED_ROUND` record.
pub(crate) const FINISHED_ROUND: [u8; 8] = [68, 0, 0, 0, 0, 0, 8, 0];

/// Bytes of records between two round ends at most, each record counted with
/// [`RECORD_OVERHEAD`]: a longer run of records without one (perf writes one per pass over its
/// buffers) gets a synthetic round end, so that the parser, which holds a round to sort it,
/// holds at most this much (perf's own ordering queue does the same when full, flushing what
/// it holds). Records of one perf round that are more than this far apart may come out of
/// time order then; the capture's writer counts them as late.
pub const MAX_ROUND_BYTES: u64 = 8 << 20;

/// What the parser holds for a record beside its bytes (its sort key, its slot in the round,
/// its buffer's allocation): a round of 8-byte records takes some 20 times their bytes.
pub const RECORD_OVERHEAD: u64 = 128;

/// What one compressed record may decompress to at most.
pub const MAX_DECOMPRESSED_RECORD: u64 = 16 << 20;

/// Bytes of a record header.
const RECORD_HEADER: u64 = 8;

/// The records of a file or stream as the parser will hold them (see the module docs).
#[derive(Default)]
pub(crate) struct Rounds {
    /// Bytes held since the last round end.
    held: u64,
    /// The zstd stream of the compressed records so far.
    zstd: Option<Unzstd>,
}

impl std::fmt::Debug for Rounds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rounds")
            .field("held", &self.held)
            .field("framing", &self.zstd.as_ref().map(|z| &z.framing))
            .finish_non_exhaustive()
    }
}

impl Rounds {
    /// Counts the next record: `kind`, `bytes` it holds (its size, and the data that follows an
    /// AUXTRACE record), `body` (after its header; read only for a compressed record). `Ok`:
    /// whether a round end goes before it; `Err`: why the parser must not read it (what is
    /// wrong with its compressed records).
    pub(crate) fn record(&mut self, kind: u32, bytes: u64, body: &[u8]) -> Result<bool, String> {
        let held = match kind {
            RECORD_FINISHED_ROUND => {
                self.held = 0;
                return Ok(false);
            }
            RECORD_COMPRESSED | RECORD_COMPRESSED2 => {
                let (bytes, records) = self
                    .zstd
                    .get_or_insert_with(Unzstd::new)
                    .record(kind, body)?;
                bytes + records * RECORD_OVERHEAD
            }
            _ => bytes + RECORD_OVERHEAD,
        };
        let end = self.held > 0 && self.held.saturating_add(held) > MAX_ROUND_BYTES;
        self.held = if end { held } else { self.held + held };
        Ok(end)
    }

    /// Whether the record needs its body read (a compressed record).
    pub(crate) fn reads_body(kind: u32) -> bool {
        matches!(kind, RECORD_COMPRESSED | RECORD_COMPRESSED2)
    }

    /// At the end of the records: the bytes of a record the compressed records began and did
    /// not finish (the parser drops them), if any.
    pub(crate) fn unfinished(&self) -> Option<u64> {
        self.zstd
            .as_ref()
            .map(|z| z.framing.unfinished())
            .filter(|&n| n > 0)
    }
}

/// The zstd stream across the compressed records, decompressed to count what each holds and
/// to check the framing of the records inside (the output is not kept).
struct Unzstd {
    dctx: DCtx<'static>,
    out: Box<[u8]>,
    framing: Framing,
}

impl Unzstd {
    fn new() -> Self {
        Self {
            dctx: DCtx::create(),
            out: vec![0; 1 << 16].into_boxed_slice(),
            framing: Framing::default(),
        }
    }

    /// What a compressed record's body decompresses to, as the parser decompresses it: its
    /// bytes, and the records begun in them.
    fn record(&mut self, kind: u32, body: &[u8]) -> Result<(u64, u64), String> {
        let data = if kind == RECORD_COMPRESSED2 {
            // `u64 data_size`, then that many bytes of zstd data, then padding.
            let size = body
                .get(..8)
                .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
            size.and_then(|s| body.get(8..8usize.checked_add(usize::try_from(s).ok()?)?))
                .ok_or_else(|| {
                    format!(
                        "a compressed record's data size ({size:?}) exceeds its {} bytes",
                        body.len()
                    )
                })?
        } else {
            body
        };
        let Self { dctx, out, framing } = self;
        let mut input = InBuffer::around(data);
        let mut total = 0u64;
        let records = framing.records;
        loop {
            let mut output = OutBuffer::around(&mut out[..]);
            dctx.decompress_stream(&mut output, &mut input)
                .map_err(|code| {
                    format!(
                        "a compressed record's zstd data does not decompress ({})",
                        zstd_safe::get_error_name(code)
                    )
                })?;
            let n = output.pos();
            total += n as u64;
            if total > MAX_DECOMPRESSED_RECORD {
                return Err(format!(
                    "a compressed record decompresses to more than {MAX_DECOMPRESSED_RECORD} \
                     bytes (perf writes one ring buffer's contents in one)"
                ));
            }
            framing.walk(&out[..n])?;
            if n < out.len() && input.pos() == data.len() {
                return Ok((total, framing.records - records));
            }
        }
    }
}

/// The record framing of decompressed bytes, across chunks: each record at least its header.
#[derive(Debug, Default)]
struct Framing {
    /// The header being read, `have` bytes of it so far.
    header: [u8; RECORD_HEADER as usize],
    have: usize,
    /// Bytes of the current record's body still to pass.
    body_left: u64,
    /// Records begun so far.
    records: u64,
}

impl Framing {
    fn walk(&mut self, mut bytes: &[u8]) -> Result<(), String> {
        while !bytes.is_empty() {
            if self.body_left > 0 {
                let n = self.body_left.min(bytes.len() as u64);
                self.body_left -= n;
                bytes = &bytes[n as usize..];
                continue;
            }
            let n = (self.header.len() - self.have).min(bytes.len());
            self.header[self.have..self.have + n].copy_from_slice(&bytes[..n]);
            self.have += n;
            bytes = &bytes[n..];
            if self.have == self.header.len() {
                self.have = 0;
                let kind = u32::from_le_bytes(self.header[..4].try_into().expect("4 bytes"));
                let size = u64::from(u16::from_le_bytes([self.header[6], self.header[7]]));
                if size < RECORD_HEADER {
                    return Err(format!(
                        "a compressed record holds a record of type {kind} of size {size}, less \
                         than its 8-byte header"
                    ));
                }
                self.body_left = size - RECORD_HEADER;
                self.records += 1;
            }
        }
        Ok(())
    }

    /// Bytes of a record begun and not finished.
    fn unfinished(&self) -> u64 {
        if self.body_left > 0 {
            // The header was whole: its size says how much of the record came.
            let size = u64::from(u16::from_le_bytes([self.header[6], self.header[7]]));
            size - self.body_left
        } else {
            self.have as u64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A zstd frame (window 128 KiB) of `blocks` RLE blocks of `len` (at most 128 KiB)
    /// `byte`s.
    fn rle_frame(byte: u8, blocks: usize, len: u32) -> Vec<u8> {
        let mut f = 0xFD2F_B528u32.to_le_bytes().to_vec();
        f.extend_from_slice(&[0x00, 7 << 3]);
        for i in 0..blocks {
            let last = u32::from(i + 1 == blocks);
            let header = last | 1 << 1 | len << 3;
            f.extend_from_slice(&header.to_le_bytes()[..3]);
            f.push(byte);
        }
        f
    }

    #[test]
    fn rounds_end_before_the_record_that_passes_the_bound() {
        let mut r = Rounds::default();
        let big = MAX_ROUND_BYTES / 2 - RECORD_OVERHEAD;
        assert_eq!(r.record(9, big, &[]), Ok(false));
        assert_eq!(r.record(9, big, &[]), Ok(false));
        assert_eq!(r.record(9, 8, &[]), Ok(true), "past the bound");
        // 8-byte records: each counted with what the parser holds for it.
        let mut r = Rounds::default();
        let fit = MAX_ROUND_BYTES / (8 + RECORD_OVERHEAD);
        for _ in 0..fit {
            assert_eq!(r.record(82, 8, &[]), Ok(false));
        }
        assert_eq!(r.record(82, 8, &[]), Ok(true), "{fit} records of 8 bytes");
        assert_eq!(r.record(RECORD_FINISHED_ROUND, 8, &[]), Ok(false));
        assert_eq!(r.record(9, MAX_ROUND_BYTES * 2, &[]), Ok(false), "alone");
        assert_eq!(r.unfinished(), None);
    }

    #[test]
    fn compressed_records_count_what_they_decompress_to() {
        // 63 records of 0x808 bytes (every byte 8), the zstd data in two records.
        let len = 63 * 0x808;
        let frame = rle_frame(8, 1, len);
        let mut r = Rounds::default();
        let (a, b) = frame.split_at(6);
        assert_eq!(
            r.record(RECORD_COMPRESSED, 8 + a.len() as u64, a),
            Ok(false)
        );
        assert_eq!(r.held, 0);
        assert_eq!(
            r.record(RECORD_COMPRESSED, 8 + b.len() as u64, b),
            Ok(false)
        );
        let held = u64::from(len) + 63 * RECORD_OVERHEAD;
        assert_eq!(r.held, held);
        assert_eq!(r.unfinished(), None);
        // COMPRESSED2: the size first, padding after.
        let mut r = Rounds::default();
        let mut body = (frame.len() as u64).to_le_bytes().to_vec();
        body.extend_from_slice(&frame);
        body.extend_from_slice(&[0; 5]);
        assert_eq!(r.record(RECORD_COMPRESSED2, 0, &body), Ok(false));
        assert_eq!(r.held, held);
        body[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(r.record(RECORD_COMPRESSED2, 0, &body).is_err());
    }

    #[test]
    fn a_bomb_bad_data_or_bad_framing_inside_is_refused() {
        let blocks = (MAX_DECOMPRESSED_RECORD >> 17) as usize + 1;
        let err = Rounds::default()
            .record(RECORD_COMPRESSED, 0, &rle_frame(8, blocks, 128 << 10))
            .unwrap_err();
        assert!(err.contains("decompresses to more than"), "{err}");
        let err = Rounds::default()
            .record(RECORD_COMPRESSED, 0, b"not zstd data")
            .unwrap_err();
        assert!(err.contains("does not decompress"), "{err}");
        // Zeros: a record of size 0.
        let err = Rounds::default()
            .record(RECORD_COMPRESSED, 0, &rle_frame(0, 1, 64))
            .unwrap_err();
        assert!(err.contains("of size 0"), "{err}");
    }

    #[test]
    fn a_record_left_unfinished_is_said() {
        let mut f = Framing::default();
        f.walk(&[1, 0, 0, 0, 0, 0, 24, 0, 1, 2]).unwrap();
        assert_eq!(f.unfinished(), 10);
        f.walk(&[0; 14]).unwrap();
        assert_eq!(f.unfinished(), 0);
        f.walk(&[1, 0, 0]).unwrap();
        assert_eq!(f.unfinished(), 3);
    }
}
