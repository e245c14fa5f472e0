//! The payload of a `LAST_BRANCH` blob (blob type 2): Fuchsia's
//! `perfmon::LastBranchRecordBlob`, one last-branch-record sample of one CPU.
//!
//! Layout (little-endian, as the writer's machine): a 24-byte header
//! `{ u16 cpu, u16 num_branches, u32 reserved = 0, u64 event_time (ticks), u64 aspace }`
//! followed by `num_branches` 24-byte entries `{ u64 from, u64 to, u64 info }`, most recent
//! branch first. `info` bits `[0 .. 15]` are the cycles since the previous branch (0 =
//! unknown), bit 16 is set when the branch was mispredicted. At most 32 entries.

use std::fmt;

use super::fields::Field;
use super::types::ticks_to_ns;

/// Size of the payload header in bytes.
pub const LBR_HEADER_BYTES: usize = 24;
/// Size of one branch entry in bytes.
pub const LBR_ENTRY_BYTES: usize = 24;
/// Most branches one payload may carry (`kMaxNumLastBranch`).
pub const LBR_MAX_BRANCHES: usize = 32;
/// Largest payload in bytes (792).
pub const LBR_MAX_PAYLOAD_BYTES: usize = LBR_HEADER_BYTES + LBR_MAX_BRANCHES * LBR_ENTRY_BYTES;
/// Cycles since the previous branch, bits `[0 .. 15]` of an entry's `info`.
pub const LBR_INFO_CYCLES: Field = Field::new(0, 15);
/// Mispredicted flag, bit 16 of an entry's `info`.
pub const LBR_INFO_MISPREDICTED: Field = Field::new(16, 16);

/// Size in bytes of a payload with `num_branches` entries.
pub const fn lbr_payload_len(num_branches: usize) -> usize {
    LBR_HEADER_BYTES + num_branches * LBR_ENTRY_BYTES
}

/// Why an LBR payload could not be built or read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LbrError {
    /// More than 32 branches.
    #[error("{count} branches exceed the limit of {LBR_MAX_BRANCHES}")]
    TooManyBranches {
        /// Number of branches given.
        count: usize,
    },
    /// The payload is shorter than its header.
    #[error("LBR payload of {len} bytes is shorter than its {LBR_HEADER_BYTES}-byte header")]
    TooShort {
        /// Payload length in bytes.
        len: usize,
    },
    /// The payload length does not match `24 + 24 * num_branches`.
    #[error("LBR payload of {len} bytes does not match {num_branches} branches ({} bytes)", lbr_payload_len(*.num_branches as usize))]
    LengthMismatch {
        /// Payload length in bytes.
        len: usize,
        /// Branch count from the header.
        num_branches: u16,
    },
}

/// The header of an LBR payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LbrHeader {
    /// CPU the sample was taken on.
    pub cpu: u16,
    /// Number of branch entries.
    pub num_branches: u16,
    /// Time of the sample, in trace ticks.
    pub event_time: u64,
    /// Address-space id at sample time (x86: CR3; 0 when unknown).
    pub aspace: u64,
}

/// One branch entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LbrBranch {
    /// Branch source address.
    pub from: u64,
    /// Branch target address.
    pub to: u64,
    /// Cycles (bits 0..=15) and mispredicted flag (bit 16).
    pub info: u64,
}

impl LbrBranch {
    /// A branch with its cycle count (saturated to 16 bits) and mispredicted flag.
    pub const fn new(from: u64, to: u64, cycles: u64, mispredicted: bool) -> LbrBranch {
        let cycles = if LBR_INFO_CYCLES.fits(cycles) {
            cycles
        } else {
            LBR_INFO_CYCLES.max()
        };
        LbrBranch {
            from,
            to,
            info: LBR_INFO_CYCLES.make(cycles) | LBR_INFO_MISPREDICTED.make(mispredicted as u64),
        }
    }

    /// Cycles since the previous branch (0 = unknown).
    pub const fn cycles(&self) -> u16 {
        LBR_INFO_CYCLES.get(self.info) as u16
    }

    /// Whether the branch was mispredicted.
    pub const fn mispredicted(&self) -> bool {
        LBR_INFO_MISPREDICTED.get(self.info) != 0
    }
}

/// An encoded LBR payload held inline (no allocation), ready to be a blob's payload.
#[derive(Clone)]
pub struct LbrPayload {
    bytes: [u8; LBR_MAX_PAYLOAD_BYTES],
    len: usize,
}

impl fmt::Debug for LbrPayload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LbrPayload")
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl LbrPayload {
    /// Encodes a sample taken on `cpu` at `event_time` ticks in address space `aspace`;
    /// `branches` most recent first, at most 32.
    pub fn new(
        cpu: u16,
        event_time: u64,
        aspace: u64,
        branches: &[LbrBranch],
    ) -> Result<LbrPayload, LbrError> {
        let mut payload = LbrPayload {
            bytes: [0; LBR_MAX_PAYLOAD_BYTES],
            len: 0,
        };
        payload.len = encode_lbr(cpu, event_time, aspace, branches, &mut payload.bytes)?;
        Ok(payload)
    }

    /// The encoded bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// Encodes a payload into `out` and returns its length. `out` must hold
/// [`lbr_payload_len`]`(branches.len())` bytes.
pub fn encode_lbr(
    cpu: u16,
    event_time: u64,
    aspace: u64,
    branches: &[LbrBranch],
    out: &mut [u8],
) -> Result<usize, LbrError> {
    if branches.len() > LBR_MAX_BRANCHES {
        return Err(LbrError::TooManyBranches {
            count: branches.len(),
        });
    }
    let len = lbr_payload_len(branches.len());
    let Some(out) = out.get_mut(..len) else {
        return Err(LbrError::TooShort { len: out.len() });
    };
    out[0..2].copy_from_slice(&cpu.to_le_bytes());
    out[2..4].copy_from_slice(&(branches.len() as u16).to_le_bytes());
    out[4..8].copy_from_slice(&0u32.to_le_bytes());
    out[8..16].copy_from_slice(&event_time.to_le_bytes());
    out[16..24].copy_from_slice(&aspace.to_le_bytes());
    for (branch, entry) in branches
        .iter()
        .zip(out[LBR_HEADER_BYTES..].chunks_exact_mut(24))
    {
        entry[0..8].copy_from_slice(&branch.from.to_le_bytes());
        entry[8..16].copy_from_slice(&branch.to.to_le_bytes());
        entry[16..24].copy_from_slice(&branch.info.to_le_bytes());
    }
    Ok(len)
}

/// A decoded view of an LBR payload, borrowing its entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LbrSample<'a> {
    /// The header.
    pub header: LbrHeader,
    entries: &'a [u8],
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

impl<'a> LbrSample<'a> {
    /// Reads a payload; its length must be exactly `24 + 24 * num_branches`.
    pub fn decode(payload: &'a [u8]) -> Result<LbrSample<'a>, LbrError> {
        if payload.len() < LBR_HEADER_BYTES {
            return Err(LbrError::TooShort { len: payload.len() });
        }
        let cpu = u16::from_le_bytes([payload[0], payload[1]]);
        let num_branches = u16::from_le_bytes([payload[2], payload[3]]);
        if payload.len() != lbr_payload_len(usize::from(num_branches)) {
            return Err(LbrError::LengthMismatch {
                len: payload.len(),
                num_branches,
            });
        }
        Ok(LbrSample {
            header: LbrHeader {
                cpu,
                num_branches,
                event_time: u64_at(payload, 8),
                aspace: u64_at(payload, 16),
            },
            entries: &payload[LBR_HEADER_BYTES..],
        })
    }

    /// The branches, most recent first.
    pub fn branches(&self) -> impl ExactSizeIterator<Item = LbrBranch> + 'a {
        self.entries
            .chunks_exact(LBR_ENTRY_BYTES)
            .map(|e| LbrBranch {
                from: u64_at(e, 0),
                to: u64_at(e, 8),
                info: u64_at(e, 16),
            })
    }

    /// One line of text: `lbr cpu=… time=…ns aspace=0x… branches=N [from->to cycles=… mispredicted, …]`,
    /// with the time converted at `ticks_per_second`.
    pub fn display(&self, ticks_per_second: u64) -> impl fmt::Display + '_ {
        LbrDisplay {
            sample: *self,
            ticks_per_second,
        }
    }
}

struct LbrDisplay<'a> {
    sample: LbrSample<'a>,
    ticks_per_second: u64,
}

impl fmt::Display for LbrDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let h = &self.sample.header;
        write!(
            f,
            "lbr cpu={} time={}ns aspace={:#x} branches={} [",
            h.cpu,
            ticks_to_ns(h.event_time, self.ticks_per_second),
            h.aspace,
            h.num_branches
        )?;
        for (i, b) in self.sample.branches().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{:#x}->{:#x} cycles={}", b.from, b.to, b.cycles())?;
            if b.mispredicted() {
                f.write_str(" mispredicted")?;
            }
        }
        f.write_str("]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_writer_h() {
        let branches = [
            LbrBranch::new(0x1000, 0x2000, 5, true),
            LbrBranch::new(0x3000, 0x4000, 0, false),
        ];
        let p = LbrPayload::new(3, 0x1122_3344_5566_7788, 0xabc, &branches).unwrap();
        let b = p.as_bytes();
        assert_eq!(b.len(), 72);
        assert_eq!(&b[0..8], &[3, 0, 2, 0, 0, 0, 0, 0]);
        assert_eq!(&b[8..16], &0x1122_3344_5566_7788u64.to_le_bytes());
        assert_eq!(&b[16..24], &0xabcu64.to_le_bytes());
        assert_eq!(&b[24..32], &0x1000u64.to_le_bytes());
        assert_eq!(&b[40..48], &(5u64 | 1 << 16).to_le_bytes());
        let s = LbrSample::decode(b).unwrap();
        assert_eq!(s.header.cpu, 3);
        assert_eq!(s.branches().collect::<Vec<_>>(), branches);
        assert_eq!(
            s.display(1_000_000_000).to_string(),
            "lbr cpu=3 time=1234605616436508552ns aspace=0xabc branches=2 \
             [0x1000->0x2000 cycles=5 mispredicted, 0x3000->0x4000 cycles=0]"
        );
    }

    #[test]
    fn limits() {
        let many = [LbrBranch::new(0, 0, 0, false); 33];
        assert_eq!(
            LbrPayload::new(0, 0, 0, &many).unwrap_err(),
            LbrError::TooManyBranches { count: 33 }
        );
        assert_eq!(
            LbrPayload::new(0, 0, 0, &many[..32])
                .unwrap()
                .as_bytes()
                .len(),
            792
        );
        assert_eq!(
            LbrSample::decode(&[0; 10]),
            Err(LbrError::TooShort { len: 10 })
        );
        let mut bad = [0u8; 48];
        bad[2] = 2;
        assert_eq!(
            LbrSample::decode(&bad),
            Err(LbrError::LengthMismatch {
                len: 48,
                num_branches: 2
            })
        );
        assert_eq!(LbrBranch::new(0, 0, 1 << 20, false).cycles(), u16::MAX);
    }
}
