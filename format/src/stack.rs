//! The payloads of fxtrace's call-stack blobs: interned call chains (`"fxtrace:stack"`), CPU
//! samples that refer to them (`"fxtrace:sample"`) and the kernel symbols that name their
//! kernel frames (`"fxtrace:ksym"`).
//!
//! FXT has no record for call stacks that Perfetto reads (the profiler record type 10 of the
//! newest spec carries a backtrace inline, never interned, and Perfetto skips it). fxtrace
//! writes each as a Blob record (type 5) of blob type [`DATA`](super::BlobType::DATA), which
//! Perfetto's importer skips without a count (see `docs/perfetto.md`), under the names below.
//! A stack is written once, before the first record that refers to it by id (a context
//! switch's `stack` argument, [`super::sched::STACK_ARG`], or a sample), as Perfetto interns
//! callstacks; a kernel symbol is written once, before the first stack with a frame in it.
//! A reader keeps the three tables (per provider section: ids are a writer's own) and
//! resolves references as they come.
//!
//! All integers little-endian. Each payload is exactly the size its header announces; anything
//! else is an error ([`StackError`]).
//!
//! # `"fxtrace:stack"`, version [`STACK_VERSION`] (1)
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 1 | `u8 version` (1) |
//! | 1 | 1 | reserved, zero |
//! | 2 | 2 | `u16 kernel_frames` |
//! | 4 | 4 | `u32 id` (≥ 1; 0 means "no stack" where an id is referred to) |
//! | 8 | 2 | `u16 user_frames` |
//! | 10 | 6 | reserved, zero |
//! | 16 | 8 × (`kernel_frames` + `user_frames`) | `u64` instruction pointers, innermost first: the kernel frames, then the user frames (perf's `PERF_CONTEXT_*` markers removed) |
//!
//! At most [`STACK_MAX_FRAMES`] frames in all.
//!
//! # `"fxtrace:sample"`, version [`SAMPLE_VERSION`] (1)
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 1 | `u8 version` (1) |
//! | 1 | 1 | reserved, zero |
//! | 2 | 2 | `u16 cpu` |
//! | 4 | 4 | `u32 stack`: the id of the sampled call chain (0: none recorded) |
//! | 8 | 8 | `u64 time`: trace ticks |
//! | 16 | 4 | `u32 pid` |
//! | 20 | 4 | `u32 tid` |
//!
//! 24 bytes: a sample is a 32-byte Blob record with its name indexed.
//!
//! # `"fxtrace:ksym"`, version [`KSYM_VERSION`] (1)
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 1 | `u8 version` (1) |
//! | 1 | 1 | reserved, zero |
//! | 2 | 2 | `u16 name_len` (at most [`KSYM_MAX_NAME`]) |
//! | 4 | 4 | reserved, zero |
//! | 8 | 8 | `u64 start`: the symbol's address |
//! | 16 | 8 | `u64 len`: bytes it covers (up to the next symbol in `/proc/kallsyms`) |
//! | 24 | `name_len` | the name as `/proc/kallsyms` gives it, with ` [module]` when it has one |

use std::fmt;

/// Name of the blobs that carry an interned call stack.
pub const STACK_BLOB_NAME: &str = "fxtrace:stack";
/// Name of the blobs that carry a CPU sample.
pub const SAMPLE_BLOB_NAME: &str = "fxtrace:sample";
/// Name of the blobs that carry a kernel symbol.
pub const KSYM_BLOB_NAME: &str = "fxtrace:ksym";
/// The stack payload version this module writes and reads.
pub const STACK_VERSION: u8 = 1;
/// The sample payload version this module writes and reads.
pub const SAMPLE_VERSION: u8 = 1;
/// The kernel symbol payload version this module writes and reads.
pub const KSYM_VERSION: u8 = 1;
/// Bytes of a stack payload's header.
pub const STACK_HEADER_BYTES: usize = 16;
/// Most frames a stack holds (perf's `kernel.perf_event_max_stack` is 127 by default).
pub const STACK_MAX_FRAMES: usize = 512;
/// Bytes of a sample payload.
pub const SAMPLE_BYTES: usize = 24;
/// Bytes of a kernel symbol payload's header.
pub const KSYM_HEADER_BYTES: usize = 24;
/// Longest kernel symbol name kept (with its module).
pub const KSYM_MAX_NAME: usize = 512;

/// Why a payload could not be built or read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StackError {
    /// Shorter than its header.
    #[error("{what} payload of {len} bytes is shorter than its header")]
    TooShort {
        /// Which payload.
        what: &'static str,
        /// Its length.
        len: usize,
    },
    /// A version this reader does not know.
    #[error("{what} payload version {version} (this reader knows 1)")]
    Version {
        /// Which payload.
        what: &'static str,
        /// The payload's version.
        version: u8,
    },
    /// The length does not match what the header announces.
    #[error("{what} payload of {len} bytes does not match its header ({expected} bytes)")]
    LengthMismatch {
        /// Which payload.
        what: &'static str,
        /// Its length.
        len: usize,
        /// What the header announces.
        expected: usize,
    },
    /// More frames than [`STACK_MAX_FRAMES`], or a name longer than [`KSYM_MAX_NAME`].
    #[error("{what}: {len} is more than the {max} allowed")]
    TooLong {
        /// What.
        what: &'static str,
        /// How many.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A stack of id 0 (which means "no stack").
    #[error("a stack of id 0 (0 means no stack)")]
    ZeroId,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(word)
}

fn check_version(what: &'static str, payload: &[u8], version: u8) -> Result<(), StackError> {
    match payload.first() {
        Some(&v) if v == version => Ok(()),
        Some(&v) => Err(StackError::Version { what, version: v }),
        None => Err(StackError::TooShort { what, len: 0 }),
    }
}

// === impl StackRecord ===

/// An interned call stack: its id and frames, innermost first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackRecord {
    /// The id records refer to it by (≥ 1).
    pub id: u32,
    /// How many of `frames` (the first ones) are kernel frames.
    pub kernel_frames: usize,
    /// Instruction pointers, innermost first: kernel, then user.
    pub frames: Vec<u64>,
}

impl StackRecord {
    /// The kernel frames.
    pub fn kernel(&self) -> &[u64] {
        &self.frames[..self.kernel_frames.min(self.frames.len())]
    }

    /// The user frames.
    pub fn user(&self) -> &[u64] {
        &self.frames[self.kernel_frames.min(self.frames.len())..]
    }

    /// Encodes the payload of `id` with `kernel` then `user` frames (innermost first).
    pub fn encode(id: u32, kernel: &[u64], user: &[u64]) -> Result<Vec<u8>, StackError> {
        if id == 0 {
            return Err(StackError::ZeroId);
        }
        let frames = kernel.len() + user.len();
        if frames > STACK_MAX_FRAMES {
            return Err(StackError::TooLong {
                what: "stack frames",
                len: frames,
                max: STACK_MAX_FRAMES,
            });
        }
        let mut out = Vec::with_capacity(STACK_HEADER_BYTES + 8 * frames);
        out.push(STACK_VERSION);
        out.push(0);
        // Both counts are at most STACK_MAX_FRAMES (checked above).
        out.extend_from_slice(&(kernel.len() as u16).to_le_bytes());
        out.extend_from_slice(&id.to_le_bytes());
        out.extend_from_slice(&(user.len() as u16).to_le_bytes());
        out.extend_from_slice(&[0; 6]);
        for ip in kernel.iter().chain(user) {
            out.extend_from_slice(&ip.to_le_bytes());
        }
        Ok(out)
    }

    /// Reads a payload.
    pub fn decode(payload: &[u8]) -> Result<Self, StackError> {
        const WHAT: &str = "stack";
        check_version(WHAT, payload, STACK_VERSION)?;
        if payload.len() < STACK_HEADER_BYTES {
            return Err(StackError::TooShort {
                what: WHAT,
                len: payload.len(),
            });
        }
        let kernel = usize::from(u16_at(payload, 2));
        let user = usize::from(u16_at(payload, 8));
        let id = u32_at(payload, 4);
        if id == 0 {
            return Err(StackError::ZeroId);
        }
        if kernel + user > STACK_MAX_FRAMES {
            return Err(StackError::TooLong {
                what: "stack frames",
                len: kernel + user,
                max: STACK_MAX_FRAMES,
            });
        }
        let expected = STACK_HEADER_BYTES + 8 * (kernel + user);
        if payload.len() != expected {
            return Err(StackError::LengthMismatch {
                what: WHAT,
                len: payload.len(),
                expected,
            });
        }
        let frames = payload[STACK_HEADER_BYTES..]
            .chunks_exact(8)
            .map(|w| u64_at(w, 0))
            .collect();
        Ok(StackRecord {
            id,
            kernel_frames: kernel,
            frames,
        })
    }
}

impl fmt::Display for StackRecord {
    /// `stack id=3 kernel=[0x…, …] user=[0x…]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |f: &mut fmt::Formatter<'_>, frames: &[u64]| {
            f.write_str("[")?;
            for (i, ip) in frames.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{ip:#x}")?;
            }
            f.write_str("]")
        };
        write!(f, "stack id={} kernel=", self.id)?;
        list(f, self.kernel())?;
        f.write_str(" user=")?;
        list(f, self.user())
    }
}

// === impl SampleRecord ===

/// One CPU sample: where a thread was running when the sampling timer fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleRecord {
    /// When, in trace ticks.
    pub time: u64,
    /// The CPU.
    pub cpu: u16,
    /// The process.
    pub pid: u32,
    /// The thread.
    pub tid: u32,
    /// The call chain's stack id (0: none recorded).
    pub stack: u32,
}

impl SampleRecord {
    /// Encodes the payload.
    pub fn encode(&self) -> [u8; SAMPLE_BYTES] {
        let mut out = [0u8; SAMPLE_BYTES];
        out[0] = SAMPLE_VERSION;
        out[2..4].copy_from_slice(&self.cpu.to_le_bytes());
        out[4..8].copy_from_slice(&self.stack.to_le_bytes());
        out[8..16].copy_from_slice(&self.time.to_le_bytes());
        out[16..20].copy_from_slice(&self.pid.to_le_bytes());
        out[20..24].copy_from_slice(&self.tid.to_le_bytes());
        out
    }

    /// Reads a payload.
    pub fn decode(payload: &[u8]) -> Result<Self, StackError> {
        const WHAT: &str = "sample";
        check_version(WHAT, payload, SAMPLE_VERSION)?;
        if payload.len() != SAMPLE_BYTES {
            return Err(StackError::LengthMismatch {
                what: WHAT,
                len: payload.len(),
                expected: SAMPLE_BYTES,
            });
        }
        Ok(SampleRecord {
            cpu: u16_at(payload, 2),
            stack: u32_at(payload, 4),
            time: u64_at(payload, 8),
            pid: u32_at(payload, 16),
            tid: u32_at(payload, 20),
        })
    }

    /// One line of text, the time converted at `ticks_per_second`.
    pub fn display(&self, ticks_per_second: u64) -> impl fmt::Display + '_ {
        SampleDisplay {
            record: *self,
            ticks_per_second,
        }
    }
}

struct SampleDisplay {
    record: SampleRecord,
    ticks_per_second: u64,
}

impl fmt::Display for SampleDisplay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = &self.record;
        write!(
            f,
            "sample t={}ns cpu={} pid={} tid={} stack={}",
            super::types::ticks_to_ns(r.time, self.ticks_per_second),
            r.cpu,
            r.pid,
            r.tid,
            r.stack
        )
    }
}

// === impl KernelSymbolRecord ===

/// A kernel symbol: the addresses `[start, start + len)` are in `name`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelSymbolRecord<'a> {
    /// The symbol's address.
    pub start: u64,
    /// Bytes it covers.
    pub len: u64,
    /// Its name (with ` [module]`), as bytes.
    pub name: &'a [u8],
}

impl<'a> KernelSymbolRecord<'a> {
    /// Whether `address` is inside the symbol.
    pub fn contains(&self, address: u64) -> bool {
        address >= self.start && address - self.start < self.len
    }

    /// The name as text (invalid UTF-8 replaced).
    pub fn name_lossy(&self) -> String {
        String::from_utf8_lossy(self.name).into_owned()
    }

    /// Encodes the payload.
    pub fn encode(&self) -> Result<Vec<u8>, StackError> {
        if self.name.len() > KSYM_MAX_NAME {
            return Err(StackError::TooLong {
                what: "kernel symbol name",
                len: self.name.len(),
                max: KSYM_MAX_NAME,
            });
        }
        let mut out = Vec::with_capacity(KSYM_HEADER_BYTES + self.name.len());
        out.push(KSYM_VERSION);
        out.push(0);
        out.extend_from_slice(&(self.name.len() as u16).to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&self.start.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(self.name);
        Ok(out)
    }

    /// Reads a payload.
    pub fn decode(payload: &'a [u8]) -> Result<Self, StackError> {
        const WHAT: &str = "kernel symbol";
        check_version(WHAT, payload, KSYM_VERSION)?;
        if payload.len() < KSYM_HEADER_BYTES {
            return Err(StackError::TooShort {
                what: WHAT,
                len: payload.len(),
            });
        }
        let name_len = usize::from(u16_at(payload, 2));
        if name_len > KSYM_MAX_NAME {
            return Err(StackError::TooLong {
                what: "kernel symbol name",
                len: name_len,
                max: KSYM_MAX_NAME,
            });
        }
        let expected = KSYM_HEADER_BYTES + name_len;
        if payload.len() != expected {
            return Err(StackError::LengthMismatch {
                what: WHAT,
                len: payload.len(),
                expected,
            });
        }
        Ok(KernelSymbolRecord {
            start: u64_at(payload, 8),
            len: u64_at(payload, 16),
            name: &payload[KSYM_HEADER_BYTES..],
        })
    }
}

impl fmt::Display for KernelSymbolRecord<'_> {
    /// `ksym 0x…-0x… name`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ksym {:#x}-{:#x} {}",
            self.start,
            self.start.saturating_add(self.len),
            self.name_lossy()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stack_golden_bytes_and_round_trip() {
        let bytes = StackRecord::encode(
            0x0102_0304,
            &[0xffff_ffff_8100_0000],
            &[0x40_1000, 0x40_2000],
        )
        .unwrap();
        let mut want = vec![1, 0, 1, 0, 4, 3, 2, 1, 2, 0, 0, 0, 0, 0, 0, 0];
        want.extend(0xffff_ffff_8100_0000u64.to_le_bytes());
        want.extend(0x40_1000u64.to_le_bytes());
        want.extend(0x40_2000u64.to_le_bytes());
        assert_eq!(bytes, want);
        let r = StackRecord::decode(&bytes).unwrap();
        assert_eq!(
            (r.id, r.kernel(), r.user()),
            (
                0x0102_0304,
                &[0xffff_ffff_8100_0000][..],
                &[0x40_1000, 0x40_2000][..]
            )
        );
        assert_eq!(
            r.to_string(),
            "stack id=16909060 kernel=[0xffffffff81000000] user=[0x401000, 0x402000]"
        );
    }

    #[test]
    fn sample_golden_bytes_and_round_trip() {
        let s = SampleRecord {
            time: 0x1122_3344_5566_7788,
            cpu: 3,
            pid: 10,
            tid: 11,
            stack: 7,
        };
        let bytes = s.encode();
        let mut want = vec![1, 0, 3, 0, 7, 0, 0, 0];
        want.extend(0x1122_3344_5566_7788u64.to_le_bytes());
        want.extend([10, 0, 0, 0, 11, 0, 0, 0]);
        assert_eq!(&bytes[..], &want[..]);
        assert_eq!(SampleRecord::decode(&bytes), Ok(s));
        assert_eq!(
            SampleRecord { time: 2_000, ..s }
                .display(1_000_000_000)
                .to_string(),
            "sample t=2000ns cpu=3 pid=10 tid=11 stack=7"
        );
    }

    #[test]
    fn ksym_golden_bytes_and_round_trip() {
        let k = KernelSymbolRecord {
            start: 0xffff_ffff_8143_fc90,
            len: 0x120,
            name: b"futex_wait",
        };
        let bytes = k.encode().unwrap();
        let mut want = vec![1, 0, 10, 0, 0, 0, 0, 0];
        want.extend(0xffff_ffff_8143_fc90u64.to_le_bytes());
        want.extend(0x120u64.to_le_bytes());
        want.extend(b"futex_wait");
        assert_eq!(bytes, want);
        let r = KernelSymbolRecord::decode(&bytes).unwrap();
        assert_eq!(r, k);
        assert!(r.contains(0xffff_ffff_8143_fc90) && r.contains(0xffff_ffff_8143_fdaf));
        assert!(!r.contains(0xffff_ffff_8143_fdb0) && !r.contains(0xffff_ffff_8143_fc8f));
        assert_eq!(
            r.to_string(),
            "ksym 0xffffffff8143fc90-0xffffffff8143fdb0 futex_wait"
        );
    }

    #[test]
    fn bad_payloads_are_typed_errors() {
        let good = StackRecord::encode(1, &[1, 2], &[]).unwrap();
        assert_eq!(
            StackRecord::decode(&good[..good.len() - 8]),
            Err(StackError::LengthMismatch {
                what: "stack",
                len: 24,
                expected: 32
            })
        );
        assert_eq!(
            StackRecord::decode(&good[..8]),
            Err(StackError::TooShort {
                what: "stack",
                len: 8
            })
        );
        let mut zero = good.clone();
        zero[4] = 0;
        assert_eq!(StackRecord::decode(&zero), Err(StackError::ZeroId));
        assert_eq!(StackRecord::encode(0, &[], &[]), Err(StackError::ZeroId));
        let mut v2 = good.clone();
        v2[0] = 2;
        assert_eq!(
            StackRecord::decode(&v2),
            Err(StackError::Version {
                what: "stack",
                version: 2
            })
        );
        let many = vec![0u64; STACK_MAX_FRAMES + 1];
        assert!(matches!(
            StackRecord::encode(1, &many, &[]),
            Err(StackError::TooLong { .. })
        ));
        assert_eq!(
            SampleRecord::decode(&[1; 23]),
            Err(StackError::LengthMismatch {
                what: "sample",
                len: 23,
                expected: 24
            })
        );
        assert_eq!(
            SampleRecord::decode(&[]),
            Err(StackError::TooShort {
                what: "sample",
                len: 0
            })
        );
        let long = vec![b'a'; KSYM_MAX_NAME + 1];
        let k = KernelSymbolRecord {
            start: 0,
            len: 1,
            name: &long,
        };
        assert!(matches!(k.encode(), Err(StackError::TooLong { .. })));
        let ok = KernelSymbolRecord {
            start: 0,
            len: 1,
            name: b"x",
        }
        .encode()
        .unwrap();
        assert!(matches!(
            KernelSymbolRecord::decode(&ok[..24]),
            Err(StackError::LengthMismatch { .. })
        ));
    }
}
