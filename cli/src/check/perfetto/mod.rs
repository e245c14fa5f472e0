//! Is an FXT archive Perfetto-ready? [`check_for_perfetto`] reads an archive the way
//! Perfetto's FXT importer does and lists every place where that importer would stop, drop,
//! misplace or skip something, with byte offsets ([`PerfettoReport`]).
//!
//! Perfetto's importer (`src/trace_processor/importers/fuchsia/` in google/perfetto:
//! `fuchsia_trace_tokenizer.cc`, `fuchsia_trace_parser.cc`, `fuchsia_trace_utils.cc`) has
//! habits of its own; `docs/perfetto.md` quotes the source for each. The checker keeps the
//! state that importer keeps, as that importer keeps it:
//!
//! - one table of strings, one of threads and one ticks-per-second per provider, replaced
//!   whole by each Provider Info record (`RegisterProvider`), selected by Provider Section
//!   records, with provider 0 registered before the first record;
//! - record sizes read from header bits `[4 .. 15]` for every record type, large records
//!   included (`Parse`), stopping the whole import at a size of 0;
//! - the process koid of each thread as Kernel Object records give it (the `"process"`
//!   argument), which is all the legacy context-switch layout uses for a thread's process
//!   and for telling the idle thread apart;
//! - timestamps converted with `TicksToNs` ([`perfetto_ticks_to_ns`]), which refuses
//!   anything beyond `i64::MAX` nanoseconds and a rate of 0.
//!
//! # Severities
//!
//! | severity | meaning |
//! |---|---|
//! | [`Severity::Error`] | the import stops, or a record or field is lost or misread |
//! | [`Severity::Warning`] | shown, but misattributed or wrong in some Perfetto versions, or a drop Perfetto hides |
//! | [`Severity::Note`] | skipped by design (LBR blobs, logs, unknown argument types, …): informational |
//!
//! Findings of one [`FindingKind`] are gathered into one [`Finding`]: the first offset, the
//! first few others, and how many there were.
//!
//! # Drops must be visible
//!
//! Perfetto ignores Provider Event metadata ("buffer overflow": records were dropped). A
//! provider whose section holds that metadata must also hold an event Perfetto shows that
//! reports the loss ([`DROP_WORDS`]): an event whose name mentions a drop or a loss, or with
//! a nonzero numeric argument whose name does (`"fxtrace: 12 perf records lost"`, a summary
//! with `dropped_records = 3`), or the trace manager's marker about it in the manager's own
//! section (provider 0, an argument `provider` naming it). Otherwise the drop is a
//! [`FindingKind::DropsOnlyInMetadata`] warning.
//!
//! ```
//! use fxtrace_tools::check::perfetto::{check_for_perfetto, FindingKind, Severity};
//! use fxtrace_format::{Blob, BlobType, Initialization, ProviderInfo, RecordWriter};
//!
//! let mut w = RecordWriter::with_magic();
//! w.push(&ProviderInfo { provider_id: 1, name: "kernel" })?;
//! w.push(&Initialization { ticks_per_second: 2_000_000_000 })?;
//! w.push(&Blob { name: "cpu0".into(), blob_type: BlobType::LAST_BRANCH, payload: &[0; 8] })?;
//! let report = check_for_perfetto(&w.to_bytes()[..])?;
//! assert!(!report.has_violations());
//! let lbr = report.find(FindingKind::LbrBlobSkipped).unwrap();
//! assert_eq!((lbr.offset, lbr.kind.severity()), (40, Severity::Note));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod checker;
mod findings;
mod reader;

use std::io::Read;

use checker::Checker;
pub use findings::{Finding, FindingKind, PerfettoCheckError, PerfettoReport, Severity};
use reader::Input;
/// Words of a name or argument name that make an event a visible drop report (compared
/// ASCII case-insensitively): see the module docs.
pub const DROP_WORDS: [&str; 2] = ["dropped", "lost"];

/// How many offsets a [`Finding`] keeps (the first ones); `count` has them all.
pub const MAX_OFFSETS: usize = 8;

/// The weight Perfetto reads as "this side of a context switch is the idle thread"
/// (`kIdleWeight`, `INT32_MIN`), in the `incoming_weight` / `outgoing_weight` / `weight`
/// arguments of scheduling records of types 1 and 2.
pub const PERFETTO_IDLE_WEIGHT: i32 = fxtrace_format::sched::IDLE_WEIGHT;

/// Converts ticks to nanoseconds exactly as Perfetto's `fuchsia_trace_utils::TicksToNs`
/// does: the high 32 bits of `ticks` through a truncated `(1e9 << 32) / ticks_per_second`,
/// the low 32 bits exactly. `None` where Perfetto returns -1 (a rate of 0, a result beyond
/// `i64::MAX`): Perfetto drops such records (`fuchsia_timestamp_overflow`).
pub const fn perfetto_ticks_to_ns(ticks: u64, ticks_per_second: u64) -> Option<i64> {
    const NS_PER_SEC: u64 = 1_000_000_000;
    if ticks_per_second == 0 {
        return None;
    }
    let hi = ticks >> 32;
    let lo = ticks & 0xffff_ffff;
    let per_hi = (NS_PER_SEC << 32) / ticks_per_second;
    let Some(result_hi) = hi.checked_mul(per_hi) else {
        return None;
    };
    // lo < 2^32 and 1e9 < 2^30: no overflow.
    let result_lo = lo * NS_PER_SEC / ticks_per_second;
    // Perfetto adds as unsigned (wrapping), then rejects a negative int64.
    let sum = result_hi.wrapping_add(result_lo) as i64;
    if sum < 0 {
        None
    } else {
        Some(sum)
    }
}

/// Reads an FXT archive as Perfetto's FXT importer would and reports every place where the
/// importer stops, drops, misattributes or skips something (see the module docs). Reads one
/// record at a time: memory stays bounded by the largest record (large records are skipped,
/// not held) plus the per-provider tables.
pub fn check_for_perfetto<R: Read>(reader: R) -> Result<PerfettoReport, PerfettoCheckError> {
    let mut input = Input { reader, offset: 0 };
    let mut checker = Checker::new();
    checker.run(&mut input)?;
    Ok(checker.finish(input.offset))
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::checker::StringTag;
    use super::*;

    #[test]
    fn ticks_to_ns_matches_perfetto_arithmetic() {
        // 1 tick = 1 ns: identity, up to i64::MAX.
        assert_eq!(perfetto_ticks_to_ns(12_345, 1_000_000_000), Some(12_345));
        assert_eq!(
            perfetto_ticks_to_ns(i64::MAX as u64, 1_000_000_000),
            Some(i64::MAX)
        );
        assert_eq!(perfetto_ticks_to_ns(1 << 63, 1_000_000_000), None);
        assert_eq!(perfetto_ticks_to_ns(5, 0), None);
        // 2 GHz: exact below 2^32 ticks.
        assert_eq!(perfetto_ticks_to_ns(4_000, 2_000_000_000), Some(2_000));
        // 3 GHz above 2^32 ticks: the high part goes through the truncated factor
        // floor(1e9 * 2^32 / 3e9) = 1431655765, not 1431655765.33.
        let ticks = (5u64 << 32) + 3_000;
        assert_eq!(
            perfetto_ticks_to_ns(ticks, 3_000_000_000),
            Some(5 * 1_431_655_765 + 1_000)
        );
        // A slow clock overflows the high part's multiplication.
        assert_eq!(perfetto_ticks_to_ns(u64::MAX, 1_000), None);
    }

    #[test]
    fn string_tags() {
        assert_eq!(StringTag::of(b"process"), StringTag::Process);
        assert_eq!(StringTag::of(b"processes"), StringTag::Other);
        assert_eq!(
            StringTag::of(b"fxtrace: 3 records Dropped"),
            StringTag::Drop
        );
        assert_eq!(StringTag::of(b"lost_samples"), StringTag::Drop);
        assert_eq!(StringTag::of(b""), StringTag::Other);
    }

    #[test]
    fn kinds_are_named_and_sourced() {
        let mut names = HashSet::new();
        for kind in FindingKind::ALL {
            assert!(names.insert(kind.name()), "{kind:?}");
            assert!(!kind.perfetto_source().is_empty());
        }
        assert_eq!(FindingKind::ZeroSizeRecord.severity(), Severity::Error);
        assert_eq!(FindingKind::SchedOutOfOrder.severity(), Severity::Warning);
        assert_eq!(FindingKind::LbrBlobSkipped.severity(), Severity::Note);
        assert!(Severity::Note < Severity::Warning && Severity::Warning < Severity::Error);
    }
}
