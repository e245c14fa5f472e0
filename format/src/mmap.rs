//! The payload of an fxtrace mapping blob: one executable memory mapping of one process, so
//! that a reader can turn run-time addresses (LBR branches) into file offsets and symbols.
//!
//! FXT has no record for memory mappings (the profiler record type 10 exists only in the
//! newest spec and Perfetto does not read it). fxtrace writes each mapping as a Blob record
//! (type 5) of blob type [`DATA`](super::BlobType::DATA) named [`MMAP_BLOB_NAME`]
//! (`"fxtrace:mmap"`). Perfetto's importer skips every blob type but 3 (`kPerfettoBlob`), so
//! these records cost it nothing (see `docs/perfetto.md`).
//!
//! Layout, little-endian, version [`MMAP_VERSION`] (1):
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 2 | `u16 version` (1) |
//! | 2 | 2 | `u16 path_len`: bytes of `path` (at most [`MMAP_MAX_PATH`]) |
//! | 4 | 4 | `u32 pid`: the process whose address space holds the mapping |
//! | 8 | 8 | `u64 time`: when the mapping was seen, in trace ticks |
//! | 16 | 8 | `u64 start`: first mapped address |
//! | 24 | 8 | `u64 len`: mapped bytes |
//! | 32 | 8 | `u64 pgoff`: file offset of `start`, in bytes |
//! | 40 | 1 | `u8 build_id_len`: 0 (unknown) ..= [`MMAP_MAX_BUILD_ID`] |
//! | 41 | 7 | reserved, zero |
//! | 48 | `build_id_len` | build-id bytes (ELF `NT_GNU_BUILD_ID` note) |
//! | 48 + `build_id_len` | `path_len` | path bytes as the kernel gave them (a file path, or a name like `[vdso]`); not NUL-terminated |
//!
//! The payload is exactly `48 + build_id_len + path_len` bytes; anything else is an error.

use std::fmt;

/// Name of the blobs that carry a mapping.
pub const MMAP_BLOB_NAME: &str = "fxtrace:mmap";
/// The payload version this module writes and reads.
pub const MMAP_VERSION: u16 = 1;
/// Size of the fixed header in bytes.
pub const MMAP_HEADER_BYTES: usize = 48;
/// Longest build-id kept (GNU build-ids are 20 bytes; 32 leaves room for other hashes).
pub const MMAP_MAX_BUILD_ID: usize = 32;
/// Longest path kept (Linux `PATH_MAX`).
pub const MMAP_MAX_PATH: usize = 4096;
/// Offset of `path_len`.
const AT_PATH_LEN: usize = 2;
/// Offset of `pid`.
const AT_PID: usize = 4;
/// Offset of `time`.
const AT_TIME: usize = 8;
/// Offset of `start`.
const AT_START: usize = 16;
/// Offset of `len`.
const AT_LEN: usize = 24;
/// Offset of `pgoff`.
const AT_PGOFF: usize = 32;
/// Offset of `build_id_len`.
const AT_BUILD_ID_LEN: usize = 40;

/// Size in bytes of a payload with a build-id of `build_id_len` and a path of `path_len` bytes.
pub const fn mmap_payload_len(build_id_len: usize, path_len: usize) -> usize {
    MMAP_HEADER_BYTES + build_id_len + path_len
}

/// Why a mapping payload could not be built or read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MmapError {
    /// The path is longer than [`MMAP_MAX_PATH`].
    #[error("mapping path of {len} bytes exceeds {MMAP_MAX_PATH}")]
    PathTooLong {
        /// Path length in bytes.
        len: usize,
    },
    /// The build-id is longer than [`MMAP_MAX_BUILD_ID`].
    #[error("build-id of {len} bytes exceeds {MMAP_MAX_BUILD_ID}")]
    BuildIdTooLong {
        /// Build-id length in bytes.
        len: usize,
    },
    /// The payload is shorter than its header.
    #[error("mapping payload of {len} bytes is shorter than its {MMAP_HEADER_BYTES}-byte header")]
    TooShort {
        /// Payload length in bytes.
        len: usize,
    },
    /// A version this reader does not know.
    #[error("mapping payload version {version} (this reader knows {MMAP_VERSION})")]
    Version {
        /// The payload's version.
        version: u16,
    },
    /// The payload length does not match `48 + build_id_len + path_len`.
    #[error("mapping payload of {len} bytes does not match its header ({expected} bytes)")]
    LengthMismatch {
        /// Payload length in bytes.
        len: usize,
        /// Length the header announces.
        expected: usize,
    },
}

/// One mapping, borrowing its build-id and path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MmapRecord<'a> {
    /// The process.
    pub pid: u32,
    /// When the mapping was seen, in trace ticks.
    pub time: u64,
    /// First mapped address.
    pub start: u64,
    /// Mapped bytes.
    pub len: u64,
    /// File offset of `start`.
    pub pgoff: u64,
    /// The file's build-id, if known.
    pub build_id: Option<&'a [u8]>,
    /// The file's path (or a kernel name like `[vdso]`), as bytes.
    pub path: &'a [u8],
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

impl<'a> MmapRecord<'a> {
    /// The encoded size in bytes.
    pub fn payload_len(&self) -> usize {
        mmap_payload_len(self.build_id.map_or(0, <[u8]>::len), self.path.len())
    }

    /// Encodes the payload.
    pub fn encode(&self) -> Result<Vec<u8>, MmapError> {
        if self.path.len() > MMAP_MAX_PATH {
            return Err(MmapError::PathTooLong {
                len: self.path.len(),
            });
        }
        let build_id = self.build_id.unwrap_or(&[]);
        if build_id.len() > MMAP_MAX_BUILD_ID {
            return Err(MmapError::BuildIdTooLong {
                len: build_id.len(),
            });
        }
        let mut out = vec![0u8; self.payload_len()];
        out[0..AT_PATH_LEN].copy_from_slice(&MMAP_VERSION.to_le_bytes());
        // Both lengths were checked against their limits above.
        out[AT_PATH_LEN..AT_PID].copy_from_slice(&(self.path.len() as u16).to_le_bytes());
        out[AT_PID..AT_TIME].copy_from_slice(&self.pid.to_le_bytes());
        out[AT_TIME..AT_START].copy_from_slice(&self.time.to_le_bytes());
        out[AT_START..AT_LEN].copy_from_slice(&self.start.to_le_bytes());
        out[AT_LEN..AT_PGOFF].copy_from_slice(&self.len.to_le_bytes());
        out[AT_PGOFF..AT_BUILD_ID_LEN].copy_from_slice(&self.pgoff.to_le_bytes());
        out[AT_BUILD_ID_LEN] = build_id.len() as u8;
        let path_at = MMAP_HEADER_BYTES + build_id.len();
        out[MMAP_HEADER_BYTES..path_at].copy_from_slice(build_id);
        out[path_at..].copy_from_slice(self.path);
        Ok(out)
    }

    /// Reads a payload (see the module docs for what is checked).
    pub fn decode(payload: &'a [u8]) -> Result<MmapRecord<'a>, MmapError> {
        if payload.len() < MMAP_HEADER_BYTES {
            return Err(MmapError::TooShort { len: payload.len() });
        }
        let version = u16::from_le_bytes([payload[0], payload[1]]);
        if version != MMAP_VERSION {
            return Err(MmapError::Version { version });
        }
        let path_len = usize::from(u16::from_le_bytes([payload[2], payload[3]]));
        let build_id_len = usize::from(payload[AT_BUILD_ID_LEN]);
        if build_id_len > MMAP_MAX_BUILD_ID {
            return Err(MmapError::BuildIdTooLong { len: build_id_len });
        }
        if path_len > MMAP_MAX_PATH {
            return Err(MmapError::PathTooLong { len: path_len });
        }
        let expected = mmap_payload_len(build_id_len, path_len);
        if payload.len() != expected {
            return Err(MmapError::LengthMismatch {
                len: payload.len(),
                expected,
            });
        }
        let path_at = MMAP_HEADER_BYTES + build_id_len;
        let mut pid = [0u8; 4];
        pid.copy_from_slice(&payload[AT_PID..AT_TIME]);
        Ok(MmapRecord {
            pid: u32::from_le_bytes(pid),
            time: u64_at(payload, AT_TIME),
            start: u64_at(payload, AT_START),
            len: u64_at(payload, AT_LEN),
            pgoff: u64_at(payload, AT_PGOFF),
            build_id: (build_id_len > 0).then(|| &payload[MMAP_HEADER_BYTES..path_at]),
            path: &payload[path_at..],
        })
    }

    /// The path as text (invalid UTF-8 replaced).
    pub fn path_lossy(&self) -> String {
        String::from_utf8_lossy(self.path).into_owned()
    }

    /// One past the last mapped address (saturating).
    pub fn end(&self) -> u64 {
        self.start.saturating_add(self.len)
    }

    /// One line of text: `mmap pid=… time=…ns 0x…-0x… pgoff=0x… build_id=… path`, with the
    /// time converted at `ticks_per_second`.
    pub fn display(&self, ticks_per_second: u64) -> impl fmt::Display + '_ {
        MmapDisplay {
            record: *self,
            ticks_per_second,
        }
    }
}

/// A build-id as lowercase hex.
pub fn build_id_hex(id: &[u8]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

struct MmapDisplay<'a> {
    record: MmapRecord<'a>,
    ticks_per_second: u64,
}

impl fmt::Display for MmapDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = &self.record;
        write!(
            f,
            "mmap pid={} time={}ns {:#x}-{:#x} pgoff={:#x} build_id={} {}",
            r.pid,
            super::types::ticks_to_ns(r.time, self.ticks_per_second),
            r.start,
            r.end(),
            r.pgoff,
            r.build_id.map_or_else(|| "-".to_string(), build_id_hex),
            r.path_lossy()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> MmapRecord<'static> {
        MmapRecord {
            pid: 0x0102_0304,
            time: 0x1122_3344_5566_7788,
            start: 0x5555_5555_4000,
            len: 0x2000,
            pgoff: 0x1000,
            build_id: Some(&[0xde, 0xad, 0xbe]),
            path: b"/bin/x",
        }
    }

    #[test]
    fn golden_bytes() {
        let bytes = sample().encode().unwrap();
        let mut want = Vec::new();
        want.extend([1, 0, 6, 0]); // version 1, path_len 6
        want.extend([4, 3, 2, 1]); // pid
        want.extend(0x1122_3344_5566_7788u64.to_le_bytes());
        want.extend(0x5555_5555_4000u64.to_le_bytes());
        want.extend(0x2000u64.to_le_bytes());
        want.extend(0x1000u64.to_le_bytes());
        want.extend([3, 0, 0, 0, 0, 0, 0, 0]); // build_id_len 3, reserved
        want.extend([0xde, 0xad, 0xbe]);
        want.extend(b"/bin/x");
        assert_eq!(bytes, want);
        assert_eq!(bytes.len(), mmap_payload_len(3, 6));
        assert_eq!(MmapRecord::decode(&bytes).unwrap(), sample());
        assert_eq!(
            sample().display(1_000_000_000).to_string(),
            "mmap pid=16909060 time=1234605616436508552ns 0x555555554000-0x555555556000 \
             pgoff=0x1000 build_id=deadbe /bin/x"
        );
    }

    #[test]
    fn no_build_id_and_empty_path() {
        let r = MmapRecord {
            build_id: None,
            path: b"",
            ..sample()
        };
        let bytes = r.encode().unwrap();
        assert_eq!(bytes.len(), MMAP_HEADER_BYTES);
        assert_eq!(bytes[AT_BUILD_ID_LEN], 0);
        assert_eq!(MmapRecord::decode(&bytes).unwrap(), r);
    }

    #[test]
    fn bad_payloads_are_typed_errors() {
        let good = sample().encode().unwrap();
        assert_eq!(
            MmapRecord::decode(&good[..47]),
            Err(MmapError::TooShort { len: 47 })
        );
        assert_eq!(
            MmapRecord::decode(&good[..good.len() - 1]),
            Err(MmapError::LengthMismatch {
                len: good.len() - 1,
                expected: good.len()
            })
        );
        let mut v2 = good.clone();
        v2[0] = 2;
        assert_eq!(
            MmapRecord::decode(&v2),
            Err(MmapError::Version { version: 2 })
        );
        let mut big_id = good.clone();
        big_id[AT_BUILD_ID_LEN] = 33;
        assert_eq!(
            MmapRecord::decode(&big_id),
            Err(MmapError::BuildIdTooLong { len: 33 })
        );
        let long = vec![b'a'; MMAP_MAX_PATH + 1];
        let r = MmapRecord {
            path: &long,
            ..sample()
        };
        assert_eq!(
            r.encode(),
            Err(MmapError::PathTooLong {
                len: MMAP_MAX_PATH + 1
            })
        );
        let id = [0u8; 33];
        let r = MmapRecord {
            build_id: Some(&id),
            ..sample()
        };
        assert_eq!(r.encode(), Err(MmapError::BuildIdTooLong { len: 33 }));
    }
}
