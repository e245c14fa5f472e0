//! Branch stacks (LBR) from `PERF_SAMPLE_BRANCH_STACK` samples.
//!
//! The sample part is (uapi `enum perf_event_type`, `PERF_RECORD_SAMPLE`):
//!
//! ```text
//! u64 nr;
//! u64 hw_idx;                          if branch_sample_type has PERF_SAMPLE_BRANCH_HW_INDEX
//! struct perf_branch_entry lbr[nr];    24 bytes each: u64 from, u64 to, u64 flags
//! u64 counters[nr];                    if branch_sample_type has PERF_SAMPLE_BRANCH_COUNTERS
//! ```
//!
//! and the flags word of `perf_branch_entry` is the bitfield
//! `mispred:1, predicted:1, in_tx:1, abort:1, cycles:16, type:4, spec:2, new_type:4, priv:3,
//! reserved:31` (bit 0 first on little-endian). It is decoded with the accessors that
//! `perf-event-open-sys` generates for `perf_branch_entry`, and tested against those bit
//! positions. Entries are newest first, as the kernel writes them (and as the FXT LAST_BRANCH
//! blob wants them).

use perf_event_open_sys::bindings as b;

use super::attr::BranchSampleFormat;
use super::records::ParseError;
use super::ring::RawCursor;

/// Size of one `struct perf_branch_entry`.
pub const BRANCH_ENTRY_SIZE: usize = 24;

/// One taken branch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BranchEntry {
    /// Source address.
    pub from: u64,
    /// Target address.
    pub to: u64,
    /// The branch was mispredicted.
    pub mispred: bool,
    /// The branch was predicted (both false: prediction unknown).
    pub predicted: bool,
    /// The branch was inside a transaction.
    pub in_tx: bool,
    /// The branch aborted a transaction.
    pub abort: bool,
    /// Cycles since the previous branch entry (0: unknown); unit is CPU-specific.
    pub cycles: u16,
    /// `PERF_BR_*` branch type (only with `PERF_SAMPLE_BRANCH_TYPE_SAVE`).
    pub branch_type: u8,
    /// `PERF_BR_SPEC_*` speculation outcome.
    pub spec: u8,
    /// `PERF_BR_NEW_*` extended branch type.
    pub new_type: u8,
    /// `PERF_BR_PRIV_*` privilege level of the target.
    pub privilege: u8,
}

impl BranchEntry {
    /// Decodes the kernel's three words (`from`, `to`, flags).
    pub fn from_kernel(from: u64, to: u64, flags: u64) -> Self {
        let mut raw = b::perf_branch_entry::default();
        raw.from = from;
        raw.to = to;
        raw._bitfield_1 = b::__BindgenBitfieldUnit::new(flags.to_ne_bytes());
        Self {
            from: raw.from,
            to: raw.to,
            mispred: raw.mispred() != 0,
            predicted: raw.predicted() != 0,
            in_tx: raw.in_tx() != 0,
            abort: raw.abort() != 0,
            cycles: raw.cycles() as u16,
            branch_type: raw.type_() as u8,
            spec: raw.spec() as u8,
            new_type: raw.new_type() as u8,
            privilege: raw.priv_() as u8,
        }
    }
}

/// The branch stack of one sample.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BranchStack {
    /// The hardware LBR index, with `PERF_SAMPLE_BRANCH_HW_INDEX`.
    pub hw_idx: Option<u64>,
    /// Entries, newest first.
    pub entries: Vec<BranchEntry>,
}

/// Reads a branch stack at the cursor (the `PERF_SAMPLE_BRANCH_STACK` part of a sample).
pub fn read_branch_stack(
    cur: &mut RawCursor<'_>,
    format: BranchSampleFormat,
) -> Result<BranchStack, ParseError> {
    let truncated = |field| ParseError::Truncated {
        record: "branch stack",
        field,
    };
    let nr = cur.u64().ok_or(truncated("nr"))?;
    let hw_idx = if format.contains(BranchSampleFormat::HW_INDEX) {
        Some(cur.u64().ok_or(truncated("hw_idx"))?)
    } else {
        None
    };
    let counters = format.contains(BranchSampleFormat::COUNTERS);
    let per_entry = BRANCH_ENTRY_SIZE + if counters { 8 } else { 0 };
    let room = cur.remaining();
    let needed = usize::try_from(nr)
        .ok()
        .and_then(|n| n.checked_mul(per_entry))
        .filter(|&n| n <= room)
        .ok_or(ParseError::BranchCount { nr, room })?;
    debug_assert!(needed <= room);
    let mut entries = Vec::with_capacity(nr as usize);
    for _ in 0..nr {
        let (Some(from), Some(to), Some(flags)) = (cur.u64(), cur.u64(), cur.u64()) else {
            return Err(truncated("entries"));
        };
        entries.push(BranchEntry::from_kernel(from, to, flags));
    }
    if counters {
        cur.skip(nr as usize * 8).ok_or(truncated("counters"))?;
    }
    Ok(BranchStack { hw_idx, entries })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flags word built from the kernel header's bit positions (in_tx set, abort clear).
    fn flags(
        mispred: u64,
        predicted: u64,
        cycles: u64,
        ty: u64,
        spec: u64,
        new: u64,
        pr: u64,
    ) -> u64 {
        let in_tx = 1;
        mispred
            | (predicted << 1)
            | (in_tx << 2)
            | (cycles << 4)
            | (ty << 20)
            | (spec << 24)
            | (new << 26)
            | (pr << 30)
    }

    #[test]
    fn flag_bits_follow_the_kernel_bitfield() {
        let e = BranchEntry::from_kernel(0x1000, 0x2000, flags(1, 0, 0xBEEF, 0xA, 2, 0x9, 5));
        assert_eq!((e.from, e.to), (0x1000, 0x2000));
        assert!(e.mispred && !e.predicted && e.in_tx && !e.abort);
        assert_eq!(e.cycles, 0xBEEF);
        assert_eq!(e.branch_type, 0xA);
        assert_eq!(e.spec, 2);
        assert_eq!(e.new_type, 0x9);
        assert_eq!(e.privilege, 5);
        let abort = BranchEntry::from_kernel(0, 0, 1 << 3 | 1 << 1);
        assert!(abort.abort && abort.predicted && !abort.mispred && !abort.in_tx);
        // Reserved bits (33..63) do not leak into any field.
        assert_eq!(
            BranchEntry::from_kernel(0, 0, !0u64 << 33),
            BranchEntry::default()
        );
    }
}
