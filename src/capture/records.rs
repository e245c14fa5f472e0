//! Parsing perf ring records into typed values, per the `sample_type` of the event they came from.
//!
//! Layouts (uapi `enum perf_event_type`); `sample_id` is the trailer every side-band record
//! carries when `sample_id_all` is set:
//!
//! | record | body after the header |
//! |---|---|
//! | `SAMPLE` (9) | `IDENTIFIER, IP, TID(pid,tid), TIME, ADDR, ID, STREAM_ID, CPU(cpu,res), PERIOD, CALLCHAIN(nr, ips), RAW(u32 size, data), BRANCH_STACK` — each present per its `sample_type` bit, in this order |
//! | `SWITCH` (14) | `sample_id` |
//! | `SWITCH_CPU_WIDE` (15) | `u32 next_prev_pid, u32 next_prev_tid, sample_id` |
//! | `COMM` (3) | `u32 pid, u32 tid, char comm[] (NUL-padded to 8), sample_id` |
//! | `MMAP` (1) | `u32 pid, tid; u64 addr, len, pgoff; char filename[] (NUL-padded to 8), sample_id` |
//! | `MMAP2` (10) | `u32 pid, tid; u64 addr, len, pgoff;` then 24 bytes: `u32 maj, min; u64 ino, ino_generation` or, with `PERF_RECORD_MISC_MMAP_BUILD_ID`, `u8 build_id_size, u8 res, u16 res, u8 build_id[20]`; `u32 prot, flags; char filename[] (NUL-padded to 8), sample_id` |
//! | `FORK` (7) / `EXIT` (4) | `u32 pid, ppid, tid, ptid; u64 time; sample_id` |
//! | `LOST` (2) | `u64 id, u64 lost, sample_id` |
//! | `LOST_SAMPLES` (13) | `u64 lost, sample_id` |
//! | `THROTTLE` (5) / `UNTHROTTLE` (6) | `u64 time, u64 id, u64 stream_id, sample_id` |
//!
//! `sample_id` is `TID(pid,tid), TIME, ID, STREAM_ID, CPU(cpu,res), IDENTIFIER`, each per its
//! `sample_type` bit. Any other record type is returned as [`PerfRecord::Unknown`] (the caller
//! skips and counts it). A record shorter than its layout is a [`ParseError::Truncated`] (or,
//! for mappings, [`ParseError::TruncatedAt`] with the byte offset), never a panic.

use std::fmt;

use perf_event_open_sys::bindings as b;
use thiserror::Error;

use super::attr::{BranchSampleFormat, EventAttr, SampleFormat};
use super::lbr::{read_branch_stack, BranchStack};
use super::ring::{RawCursor, RawData, RawRecord};

/// `PERF_RECORD_MMAP`.
pub const RECORD_MMAP: u32 = b::PERF_RECORD_MMAP;
/// `PERF_RECORD_MMAP2`.
pub const RECORD_MMAP2: u32 = b::PERF_RECORD_MMAP2;
/// `PERF_RECORD_LOST`.
pub const RECORD_LOST: u32 = b::PERF_RECORD_LOST;
/// `PERF_RECORD_COMM`.
pub const RECORD_COMM: u32 = b::PERF_RECORD_COMM;
/// `PERF_RECORD_EXIT`.
pub const RECORD_EXIT: u32 = b::PERF_RECORD_EXIT;
/// `PERF_RECORD_THROTTLE`.
pub const RECORD_THROTTLE: u32 = b::PERF_RECORD_THROTTLE;
/// `PERF_RECORD_UNTHROTTLE`.
pub const RECORD_UNTHROTTLE: u32 = b::PERF_RECORD_UNTHROTTLE;
/// `PERF_RECORD_FORK`.
pub const RECORD_FORK: u32 = b::PERF_RECORD_FORK;
/// `PERF_RECORD_SAMPLE`.
pub const RECORD_SAMPLE: u32 = b::PERF_RECORD_SAMPLE;
/// `PERF_RECORD_LOST_SAMPLES`.
pub const RECORD_LOST_SAMPLES: u32 = b::PERF_RECORD_LOST_SAMPLES;
/// `PERF_RECORD_SWITCH`.
pub const RECORD_SWITCH: u32 = b::PERF_RECORD_SWITCH;
/// `PERF_RECORD_SWITCH_CPU_WIDE`.
pub const RECORD_SWITCH_CPU_WIDE: u32 = b::PERF_RECORD_SWITCH_CPU_WIDE;

/// `PERF_RECORD_MISC_SWITCH_OUT`: a switch record describes a switch out (else in).
pub const MISC_SWITCH_OUT: u16 = b::PERF_RECORD_MISC_SWITCH_OUT as u16;
/// `PERF_RECORD_MISC_SWITCH_OUT_PREEMPT`: switched out while still runnable (preempted).
pub const MISC_SWITCH_OUT_PREEMPT: u16 = b::PERF_RECORD_MISC_SWITCH_OUT_PREEMPT as u16;
/// `PERF_RECORD_MISC_COMM_EXEC`: the COMM record comes from an `exec`.
pub const MISC_COMM_EXEC: u16 = b::PERF_RECORD_MISC_COMM_EXEC as u16;

/// `PERF_RECORD_MISC_MMAP_DATA`: the mapping is not executable.
pub const MISC_MMAP_DATA: u16 = b::PERF_RECORD_MISC_MMAP_DATA as u16;
/// `PERF_RECORD_MISC_MMAP_BUILD_ID`: an MMAP2 record carries a build-id instead of the
/// device and inode numbers.
pub const MISC_MMAP_BUILD_ID: u16 = b::PERF_RECORD_MISC_MMAP_BUILD_ID as u16;
/// `PROT_EXEC` in an MMAP2 record's `prot`.
pub const PROT_EXEC: u32 = libc::PROT_EXEC as u32;
/// Bytes of the build-id array of an MMAP2 record.
pub const MMAP2_BUILD_ID_BYTES: usize = 20;
/// Size of the perf record header that precedes a record's body.
const HEADER_BYTES: usize = 8;

/// Errors decoding a record.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ParseError {
    /// The record ended before a field.
    #[error("truncated {record} record: missing {field}")]
    Truncated {
        /// Which record.
        record: &'static str,
        /// The first missing field.
        field: &'static str,
    },
    /// The record ended before a field; `offset` is where the field starts, in bytes from the
    /// start of the record (its 8-byte header included).
    #[error("truncated {record} record: missing {field} at byte {offset}")]
    TruncatedAt {
        /// Which record.
        record: &'static str,
        /// The first missing field.
        field: &'static str,
        /// Where it would start.
        offset: usize,
    },
    /// A branch stack claims more entries than the record holds.
    #[error("branch stack claims {nr} entries but only {room} bytes remain")]
    BranchCount {
        /// The claimed count.
        nr: u64,
        /// Bytes left in the record.
        room: usize,
    },
    /// The event's `sample_type` has bits this parser does not lay out.
    #[error("unsupported sample_type bits {0:?}")]
    UnsupportedSampleFormat(SampleFormat),
    /// Tracepoint raw data does not match the parsed format.
    #[error("tracepoint raw data: {0}")]
    Tracepoint(String),
}

/// The sample formats this parser lays out: every field up to the branch stack but
/// `PERF_SAMPLE_READ` (whose layout depends on `read_format`). Fields after the branch stack
/// ([`AFTER_BRANCH_STACK`]) are never read, so they may be present too.
const SUPPORTED: SampleFormat = SampleFormat::from_bits_retain(
    SampleFormat::IDENTIFIER.bits()
        | SampleFormat::IP.bits()
        | SampleFormat::TID.bits()
        | SampleFormat::TIME.bits()
        | SampleFormat::ADDR.bits()
        | SampleFormat::ID.bits()
        | SampleFormat::STREAM_ID.bits()
        | SampleFormat::CPU.bits()
        | SampleFormat::PERIOD.bits()
        | SampleFormat::CALLCHAIN.bits()
        | SampleFormat::RAW.bits()
        | SampleFormat::BRANCH_STACK.bits()
        | AFTER_BRANCH_STACK.bits(),
);

/// The `PERF_SAMPLE_*` bits whose fields come after the branch stack in a sample (user and
/// interrupt registers, user stack, weight, data source, transaction, physical address, AUX
/// data, cgroup, page sizes, weight struct: bits 12 to 24 but 16, `IDENTIFIER`, which comes
/// first): a parser that stops at the branch stack never reads them. The live capture never
/// asks for them; a `perf record` file may have them (`--call-graph dwarf`, `-d`, …).
pub const AFTER_BRANCH_STACK: SampleFormat =
    SampleFormat::from_bits_retain(((1 << 25) - (1 << 12)) & !(1 << 16));

// === impl RecordLayout ===

/// What the records of one event look like (from its attr).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordLayout {
    sample: SampleFormat,
    branch: BranchSampleFormat,
    sample_id_all: bool,
    /// Where a sample's fields are when every one is at a fixed offset (see
    /// [`FixedSample`]).
    fixed: Option<FixedSample>,
}

/// The offsets in a sample's body of the fields the capture thread reads per sample (a
/// context switch, a wake-up, a CPU sample), for sample formats whose fields before the call
/// chain and the raw data are all fixed (no branch stack, no register dumps): computed once
/// per event, so [`RecordLayout::sample_in_place`] reads a sample with a few loads instead of
/// walking the format bit by bit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FixedSample {
    ip: Option<usize>,
    /// `TID`: pid, then tid 4 bytes later.
    tid: Option<usize>,
    time: Option<usize>,
    cpu: Option<usize>,
    /// Where the variable part starts: the call chain's `nr` (with `CALLCHAIN`), then the raw
    /// data's `u32` size (with `RAW`).
    tail: usize,
    callchain: bool,
    raw: bool,
}

impl FixedSample {
    fn of(s: SampleFormat) -> Option<Self> {
        if s.intersects(SampleFormat::BRANCH_STACK)
            || !s.intersects(SampleFormat::RAW | SampleFormat::CALLCHAIN)
        {
            return None;
        }
        // The order of `parse_sample`, every field before the call chain 8 bytes.
        let mut at = 0;
        let mut field = |f: SampleFormat| {
            s.contains(f).then(|| {
                at += 8;
                at - 8
            })
        };
        field(SampleFormat::IDENTIFIER);
        let ip = field(SampleFormat::IP);
        let tid = field(SampleFormat::TID);
        let time = field(SampleFormat::TIME);
        field(SampleFormat::ADDR);
        field(SampleFormat::ID);
        field(SampleFormat::STREAM_ID);
        let cpu = field(SampleFormat::CPU);
        field(SampleFormat::PERIOD);
        Some(Self {
            ip,
            tid,
            time,
            cpu,
            tail: at,
            callchain: s.contains(SampleFormat::CALLCHAIN),
            raw: s.contains(SampleFormat::RAW),
        })
    }
}

/// What the capture thread reads of a sample (see [`RecordLayout::sample_in_place`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct InPlaceSample<'a> {
    pub(crate) ip: Option<u64>,
    pub(crate) pid: Option<u32>,
    pub(crate) tid: Option<u32>,
    pub(crate) time: Option<u64>,
    pub(crate) cpu: Option<u32>,
    /// The call chain's instruction pointers as the ring holds them (`nr` native-endian
    /// `u64`s; empty without `CALLCHAIN`).
    pub(crate) callchain: &'a [u8],
    /// The raw data, in the ring (empty without `RAW`).
    pub(crate) raw: &'a [u8],
}

impl RecordLayout {
    /// The layout of `attr`'s records.
    pub fn new(attr: &EventAttr) -> Result<Self, ParseError> {
        Self::from_formats(
            attr.sample_format(),
            attr.branch_format(),
            attr.sample_id_all(),
        )
    }

    /// The layout for explicit formats; fails on `sample_type` bits it cannot lay out.
    pub fn from_formats(
        sample: SampleFormat,
        branch: BranchSampleFormat,
        sample_id_all: bool,
    ) -> Result<Self, ParseError> {
        let unsupported = sample.bits() & !SUPPORTED.bits();
        if unsupported != 0 {
            return Err(ParseError::UnsupportedSampleFormat(
                SampleFormat::from_bits_retain(unsupported),
            ));
        }
        Ok(Self {
            sample,
            branch,
            sample_id_all,
            fixed: FixedSample::of(sample),
        })
    }

    /// A sample's fixed fields, call chain and raw data read in place from its contiguous
    /// body, when the layout allows (see [`FixedSample`]). `None` when it does not, or when
    /// the body is too short for them: [`Self::parse`] then gives the same record or the
    /// error.
    #[inline]
    pub(crate) fn sample_in_place<'a>(&self, body: &'a [u8]) -> Option<InPlaceSample<'a>> {
        let f = self.fixed.as_ref()?;
        let u32_at = |at: usize| -> Option<u32> {
            Some(u32::from_ne_bytes(body.get(at..at + 4)?.try_into().ok()?))
        };
        let u64_at = |at: usize| -> Option<u64> {
            Some(u64::from_ne_bytes(body.get(at..at + 8)?.try_into().ok()?))
        };
        let (pid, tid) = match f.tid {
            Some(at) => (Some(u32_at(at)?), Some(u32_at(at + 4)?)),
            None => (None, None),
        };
        let ip = match f.ip {
            Some(at) => Some(u64_at(at)?),
            None => None,
        };
        let time = match f.time {
            Some(at) => Some(u64_at(at)?),
            None => None,
        };
        let cpu = match f.cpu {
            Some(at) => Some(u32_at(at)?),
            None => None,
        };
        let mut at = f.tail;
        let mut callchain: &[u8] = &[];
        if f.callchain {
            let nr = usize::try_from(u64_at(at)?).ok()?;
            let start = at + 8;
            let end = start.checked_add(nr.checked_mul(8)?)?;
            callchain = body.get(start..end)?;
            at = end;
        }
        let mut raw: &[u8] = &[];
        if f.raw {
            let size = u32_at(at)? as usize;
            let start = at + 4;
            raw = body.get(start..start.checked_add(size)?)?;
        }
        Some(InPlaceSample {
            ip,
            pid,
            tid,
            time,
            cpu,
            callchain,
            raw,
        })
    }

    /// A sample's `IDENTIFIER` (first in its body: the event that wrote it, for an inherited
    /// one its parent), when the layout has it; 0 otherwise.
    #[inline]
    pub(crate) fn identifier_in_place(&self, body: &[u8]) -> u64 {
        match body.get(..8) {
            Some(id) if self.sample.contains(SampleFormat::IDENTIFIER) => {
                u64::from_ne_bytes(id.try_into().unwrap_or_default())
            }
            _ => 0,
        }
    }

    /// The `sample_type` the records were written with.
    pub fn sample_format(&self) -> SampleFormat {
        self.sample
    }

    /// Side-band records end with a `sample_id` trailer ([`Self::sample_id_len`] bytes).
    pub fn has_sample_id(&self) -> bool {
        self.sample_id_all
    }

    /// Bytes of the `sample_id` trailer on side-band records.
    pub fn sample_id_len(&self) -> usize {
        if !self.sample_id_all {
            return 0;
        }
        let s = self.sample;
        [
            (SampleFormat::TID, 8),
            (SampleFormat::TIME, 8),
            (SampleFormat::ID, 8),
            (SampleFormat::STREAM_ID, 8),
            (SampleFormat::CPU, 8),
            (SampleFormat::IDENTIFIER, 8),
        ]
        .iter()
        .filter(|(f, _)| s.contains(*f))
        .map(|(_, n)| n)
        .sum()
    }

    /// Parses one record.
    pub fn parse<'a>(&self, rec: &RawRecord<'a>) -> Result<PerfRecord<'a>, ParseError> {
        let body = rec.body;
        match rec.kind {
            RECORD_SAMPLE => self.parse_sample(body).map(PerfRecord::Sample),
            RECORD_SWITCH | RECORD_SWITCH_CPU_WIDE => {
                let cpu_wide = rec.kind == RECORD_SWITCH_CPU_WIDE;
                let (fixed, sample_id) = self.split_trailer(body, "switch")?;
                let next_prev = if cpu_wide {
                    let mut c = RawCursor::new(fixed);
                    let t = |field| ParseError::Truncated {
                        record: "switch_cpu_wide",
                        field,
                    };
                    Some((
                        c.u32().ok_or(t("next_prev_pid"))?,
                        c.u32().ok_or(t("next_prev_tid"))?,
                    ))
                } else {
                    None
                };
                let out = rec.misc & MISC_SWITCH_OUT != 0;
                Ok(PerfRecord::Switch(SwitchRecord {
                    out,
                    preempt: out && rec.misc & MISC_SWITCH_OUT_PREEMPT != 0,
                    next_prev,
                    sample_id,
                }))
            }
            RECORD_COMM => {
                let (fixed, sample_id) = self.split_trailer(body, "comm")?;
                let mut c = RawCursor::new(fixed);
                let t = |field| ParseError::Truncated {
                    record: "comm",
                    field,
                };
                let pid = c.u32().ok_or(t("pid"))?;
                let tid = c.u32().ok_or(t("tid"))?;
                let name_bytes = c.take(c.remaining()).ok_or(t("comm"))?;
                Ok(PerfRecord::Comm(CommRecord {
                    pid,
                    tid,
                    exec: rec.misc & MISC_COMM_EXEC != 0,
                    name: TaskName::from_raw(&name_bytes),
                    sample_id,
                }))
            }
            RECORD_MMAP | RECORD_MMAP2 => self.parse_mmap(rec).map(PerfRecord::Mmap),
            RECORD_FORK | RECORD_EXIT => {
                let what = if rec.kind == RECORD_FORK {
                    "fork"
                } else {
                    "exit"
                };
                let (fixed, sample_id) = self.split_trailer(body, what)?;
                let mut c = RawCursor::new(fixed);
                let t = |field| ParseError::Truncated {
                    record: what,
                    field,
                };
                let task = TaskRecord {
                    pid: c.u32().ok_or(t("pid"))?,
                    ppid: c.u32().ok_or(t("ppid"))?,
                    tid: c.u32().ok_or(t("tid"))?,
                    ptid: c.u32().ok_or(t("ptid"))?,
                    time: c.u64().ok_or(t("time"))?,
                    sample_id,
                };
                Ok(if rec.kind == RECORD_FORK {
                    PerfRecord::Fork(task)
                } else {
                    PerfRecord::Exit(task)
                })
            }
            RECORD_LOST => {
                let (fixed, sample_id) = self.split_trailer(body, "lost")?;
                let mut c = RawCursor::new(fixed);
                let t = |field| ParseError::Truncated {
                    record: "lost",
                    field,
                };
                let id = c.u64().ok_or(t("id"))?;
                let lost = c.u64().ok_or(t("lost"))?;
                Ok(PerfRecord::Lost {
                    id,
                    lost,
                    sample_id,
                })
            }
            RECORD_LOST_SAMPLES => {
                let (fixed, sample_id) = self.split_trailer(body, "lost_samples")?;
                let lost = RawCursor::new(fixed).u64().ok_or(ParseError::Truncated {
                    record: "lost_samples",
                    field: "lost",
                })?;
                Ok(PerfRecord::LostSamples { lost, sample_id })
            }
            RECORD_THROTTLE | RECORD_UNTHROTTLE => {
                let (fixed, sample_id) = self.split_trailer(body, "throttle")?;
                let time = RawCursor::new(fixed).u64().ok_or(ParseError::Truncated {
                    record: "throttle",
                    field: "time",
                })?;
                Ok(PerfRecord::Throttle {
                    unthrottle: rec.kind == RECORD_UNTHROTTLE,
                    time,
                    sample_id,
                })
            }
            kind => Ok(PerfRecord::Unknown {
                kind,
                len: body.len(),
            }),
        }
    }

    /// An MMAP or MMAP2 record (layouts in the module table).
    fn parse_mmap(&self, rec: &RawRecord<'_>) -> Result<PerfMmap, ParseError> {
        let v2 = rec.kind == RECORD_MMAP2;
        let record = if v2 { "mmap2" } else { "mmap" };
        let (fixed, sample_id) = self.split_trailer(rec.body, record)?;
        let mut c = RawCursor::new(fixed);
        fn at(c: &RawCursor<'_>, record: &'static str, field: &'static str) -> ParseError {
            ParseError::TruncatedAt {
                record,
                field,
                offset: HEADER_BYTES + c.position(),
            }
        }
        let pid = c.u32().ok_or_else(|| at(&c, record, "pid"))?;
        let tid = c.u32().ok_or_else(|| at(&c, record, "tid"))?;
        let addr = c.u64().ok_or_else(|| at(&c, record, "addr"))?;
        let len = c.u64().ok_or_else(|| at(&c, record, "len"))?;
        let pgoff = c.u64().ok_or_else(|| at(&c, record, "pgoff"))?;
        let mut file = MmapFile::Unknown;
        let mut prot = None;
        let mut flags = None;
        if v2 {
            if rec.misc & MISC_MMAP_BUILD_ID != 0 {
                let raw = c
                    .take(4 + MMAP2_BUILD_ID_BYTES)
                    .ok_or_else(|| at(&c, record, "build_id"))?;
                let mut bytes = [0u8; 4 + MMAP2_BUILD_ID_BYTES];
                raw.copy_to(0, &mut bytes)
                    .ok_or_else(|| at(&c, record, "build_id"))?;
                let size = usize::from(bytes[0]).min(MMAP2_BUILD_ID_BYTES);
                file = MmapFile::BuildId(bytes[4..4 + size].to_vec());
            } else {
                let maj = c.u32().ok_or_else(|| at(&c, record, "maj"))?;
                let min = c.u32().ok_or_else(|| at(&c, record, "min"))?;
                let ino = c.u64().ok_or_else(|| at(&c, record, "ino"))?;
                let ino_generation = c.u64().ok_or_else(|| at(&c, record, "ino_generation"))?;
                file = MmapFile::Inode {
                    maj,
                    min,
                    ino,
                    ino_generation,
                };
            }
            prot = Some(c.u32().ok_or_else(|| at(&c, record, "prot"))?);
            flags = Some(c.u32().ok_or_else(|| at(&c, record, "flags"))?);
        }
        let name = c
            .take(c.remaining())
            .ok_or_else(|| at(&c, record, "filename"))?
            .to_vec();
        if name.is_empty() {
            return Err(at(&c, record, "filename"));
        }
        let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        let mut filename = name;
        filename.truncate(end);
        Ok(PerfMmap {
            pid,
            tid,
            addr,
            len,
            pgoff,
            file,
            prot,
            flags,
            data: rec.misc & MISC_MMAP_DATA != 0,
            filename,
            sample_id,
        })
    }

    /// Splits a side-band body into its fixed part and its parsed `sample_id` trailer.
    fn split_trailer<'a>(
        &self,
        body: RawData<'a>,
        record: &'static str,
    ) -> Result<(RawData<'a>, SampleId), ParseError> {
        let trailer = self.sample_id_len();
        let fixed_len = body
            .len()
            .checked_sub(trailer)
            .ok_or(ParseError::Truncated {
                record,
                field: "sample_id",
            })?;
        let fixed = body.get(0, fixed_len).ok_or(ParseError::Truncated {
            record,
            field: "body",
        })?;
        let mut id = SampleId::default();
        if self.sample_id_all {
            let mut c =
                RawCursor::new(body.get(fixed_len, trailer).ok_or(ParseError::Truncated {
                    record,
                    field: "sample_id",
                })?);
            // The trailer length was computed from the same bits, so these reads cannot fail;
            // `Option` chaining keeps that a non-panicking fact.
            let s = self.sample;
            if s.contains(SampleFormat::TID) {
                id.pid = c.u32();
                id.tid = c.u32();
            }
            if s.contains(SampleFormat::TIME) {
                id.time = c.u64();
            }
            if s.contains(SampleFormat::ID) {
                id.id = c.u64();
            }
            if s.contains(SampleFormat::STREAM_ID) {
                id.stream_id = c.u64();
            }
            if s.contains(SampleFormat::CPU) {
                id.cpu = c.u32();
                c.u32();
            }
            if s.contains(SampleFormat::IDENTIFIER) {
                id.id = c.u64();
            }
        }
        Ok((fixed, id))
    }

    fn parse_sample<'a>(&self, body: RawData<'a>) -> Result<Sample<'a>, ParseError> {
        let s = self.sample;
        let mut c = RawCursor::new(body);
        let t = |field| ParseError::Truncated {
            record: "sample",
            field,
        };
        let mut out = Sample::default();
        if s.contains(SampleFormat::IDENTIFIER) {
            out.id = Some(c.u64().ok_or(t("identifier"))?);
        }
        if s.contains(SampleFormat::IP) {
            out.ip = Some(c.u64().ok_or(t("ip"))?);
        }
        if s.contains(SampleFormat::TID) {
            out.pid = Some(c.u32().ok_or(t("pid"))?);
            out.tid = Some(c.u32().ok_or(t("tid"))?);
        }
        if s.contains(SampleFormat::TIME) {
            out.time = Some(c.u64().ok_or(t("time"))?);
        }
        if s.contains(SampleFormat::ADDR) {
            out.addr = Some(c.u64().ok_or(t("addr"))?);
        }
        if s.contains(SampleFormat::ID) {
            out.id = Some(c.u64().ok_or(t("id"))?);
        }
        if s.contains(SampleFormat::STREAM_ID) {
            out.stream_id = Some(c.u64().ok_or(t("stream_id"))?);
        }
        if s.contains(SampleFormat::CPU) {
            out.cpu = Some(c.u32().ok_or(t("cpu"))?);
            c.u32().ok_or(t("cpu reserved"))?;
        }
        if s.contains(SampleFormat::PERIOD) {
            out.period = Some(c.u64().ok_or(t("period"))?);
        }
        if s.contains(SampleFormat::CALLCHAIN) {
            let nr = c.u64().ok_or(t("callchain nr"))?;
            let len = usize::try_from(nr)
                .ok()
                .and_then(|n| n.checked_mul(8))
                .ok_or(t("callchain"))?;
            out.callchain = Some(c.take(len).ok_or(t("callchain"))?);
        }
        if s.contains(SampleFormat::RAW) {
            let size = c.u32().ok_or(t("raw size"))?;
            out.raw = Some(c.take(size as usize).ok_or(t("raw data"))?);
        }
        if s.contains(SampleFormat::BRANCH_STACK) {
            out.branch_stack = Some(read_branch_stack(&mut c, self.branch)?);
        }
        Ok(out)
    }
}

// === records ===

/// The `sample_id` trailer of a side-band record (fields per the event's `sample_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SampleId {
    /// Process id.
    pub pid: Option<u32>,
    /// Thread id.
    pub tid: Option<u32>,
    /// perf timestamp.
    pub time: Option<u64>,
    /// Event id (`ID` or `IDENTIFIER`).
    pub id: Option<u64>,
    /// Stream id.
    pub stream_id: Option<u64>,
    /// CPU.
    pub cpu: Option<u32>,
}

/// A `PERF_RECORD_SAMPLE`.
#[derive(Debug, Clone, Default)]
pub struct Sample<'a> {
    /// `IDENTIFIER` or `ID`.
    pub id: Option<u64>,
    /// Instruction pointer.
    pub ip: Option<u64>,
    /// Process id.
    pub pid: Option<u32>,
    /// Thread id.
    pub tid: Option<u32>,
    /// perf timestamp.
    pub time: Option<u64>,
    /// Data address.
    pub addr: Option<u64>,
    /// Stream id.
    pub stream_id: Option<u64>,
    /// CPU.
    pub cpu: Option<u32>,
    /// Sample period.
    pub period: Option<u64>,
    /// Call chain instruction pointers (`nr` u64s), unparsed.
    pub callchain: Option<RawData<'a>>,
    /// Tracepoint raw data (zero-copy; includes the kernel's alignment padding).
    pub raw: Option<RawData<'a>>,
    /// LBR branch stack.
    pub branch_stack: Option<BranchStack>,
}

/// A `PERF_RECORD_SWITCH` or `PERF_RECORD_SWITCH_CPU_WIDE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SwitchRecord {
    /// Switch out (else in) of the task in `sample_id`.
    pub out: bool,
    /// Switched out while still runnable (`PERF_RECORD_MISC_SWITCH_OUT_PREEMPT`).
    pub preempt: bool,
    /// CPU-wide records: `(pid, tid)` of the next task (switch out) or previous task (switch in).
    pub next_prev: Option<(u32, u32)>,
    /// The task switched in or out, time and CPU.
    pub sample_id: SampleId,
}

/// A `PERF_RECORD_COMM`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommRecord {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// The name changed because of an `exec`.
    pub exec: bool,
    /// The new name.
    pub name: TaskName,
    /// Trailer.
    pub sample_id: SampleId,
}

/// A `PERF_RECORD_FORK` or `PERF_RECORD_EXIT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskRecord {
    /// Process id.
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// Thread id.
    pub tid: u32,
    /// Parent thread id.
    pub ptid: u32,
    /// perf timestamp.
    pub time: u64,
    /// Trailer.
    pub sample_id: SampleId,
}

/// What identifies the file of an MMAP2 record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MmapFile {
    /// An MMAP record: nothing.
    Unknown,
    /// Device and inode (the default MMAP2 layout).
    Inode {
        /// Device major number.
        maj: u32,
        /// Device minor number.
        min: u32,
        /// Inode number.
        ino: u64,
        /// Inode generation.
        ino_generation: u64,
    },
    /// The file's build-id (`PERF_RECORD_MISC_MMAP_BUILD_ID`, at most 20 bytes).
    BuildId(Vec<u8>),
}

/// A `PERF_RECORD_MMAP` or `PERF_RECORD_MMAP2`: a mapping was created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PerfMmap {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// First mapped address.
    pub addr: u64,
    /// Mapped bytes.
    pub len: u64,
    /// File offset of `addr`.
    pub pgoff: u64,
    /// Device and inode, or build-id (MMAP2 only).
    pub file: MmapFile,
    /// `PROT_*` bits (MMAP2 only).
    pub prot: Option<u32>,
    /// `MAP_*` flags (MMAP2 only).
    pub flags: Option<u32>,
    /// `PERF_RECORD_MISC_MMAP_DATA`: not an executable mapping.
    pub data: bool,
    /// The file's path (or a name like `[vdso]`, `//anon`), up to its first NUL.
    pub filename: Vec<u8>,
    /// Trailer.
    pub sample_id: SampleId,
}

impl PerfMmap {
    /// Whether the mapping is executable: `PROT_EXEC` in an MMAP2 record, else not flagged as
    /// data.
    pub fn executable(&self) -> bool {
        match self.prot {
            Some(p) => p & PROT_EXEC != 0,
            None => !self.data,
        }
    }
}

/// One parsed ring record.
#[derive(Debug, Clone)]
pub enum PerfRecord<'a> {
    /// A sample.
    Sample(Sample<'a>),
    /// A context switch.
    Switch(SwitchRecord),
    /// A task name change.
    Comm(CommRecord),
    /// A new mapping.
    Mmap(PerfMmap),
    /// A new task.
    Fork(TaskRecord),
    /// A task exited.
    Exit(TaskRecord),
    /// The kernel dropped `lost` records: the ring was full.
    Lost {
        /// The event whose records were lost.
        id: u64,
        /// How many.
        lost: u64,
        /// Trailer.
        sample_id: SampleId,
    },
    /// The kernel dropped `lost` samples before they reached the ring.
    LostSamples {
        /// How many.
        lost: u64,
        /// Trailer.
        sample_id: SampleId,
    },
    /// Sampling was throttled (too many interrupts) or resumed.
    Throttle {
        /// Resumed (else throttled).
        unthrottle: bool,
        /// perf timestamp.
        time: u64,
        /// Trailer.
        sample_id: SampleId,
    },
    /// A record type fxtrace does not request; skipped.
    Unknown {
        /// `header.type`.
        kind: u32,
        /// Body bytes.
        len: usize,
    },
}

// === impl TaskName ===

/// A task name (`comm`) as the kernel stores it: at most 15 bytes, not necessarily UTF-8.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TaskName {
    bytes: [u8; TaskName::CAPACITY],
    len: u8,
}

impl TaskName {
    /// Bytes kept (the kernel's `TASK_COMM_LEN` is 16 including the NUL; longer names from
    /// future kernels are cut here).
    pub const CAPACITY: usize = 32;

    /// From bytes up to the first NUL (or the end), cut at [`Self::CAPACITY`].
    pub fn from_bytes(raw: &[u8]) -> Self {
        let end = raw.iter().position(|&c| c == 0).unwrap_or(raw.len());
        let len = end.min(Self::CAPACITY);
        let mut bytes = [0u8; Self::CAPACITY];
        bytes[..len].copy_from_slice(&raw[..len]);
        Self {
            bytes,
            len: len as u8,
        }
    }

    /// From a view in the ring.
    pub fn from_raw(raw: &RawData<'_>) -> Self {
        // The usual case, a `comm[16]` field (TASK_COMM_LEN): one fixed-size copy, no `memcpy`
        // call.
        if raw.len() == 16 {
            if let Some(comm) = raw.array_at::<16>(0) {
                return Self::from_bytes(&comm);
            }
        }
        let mut buf = [0u8; Self::CAPACITY];
        let len = raw.len().min(Self::CAPACITY);
        // In range by construction.
        let _ = raw.copy_to(0, &mut buf[..len]);
        Self::from_bytes(&buf[..len])
    }

    /// The name's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// The name as text, invalid UTF-8 replaced.
    pub fn to_string_lossy(&self) -> String {
        String::from_utf8_lossy(self.as_bytes()).into_owned()
    }
}

impl fmt::Debug for TaskName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.as_bytes()))
    }
}

impl fmt::Display for TaskName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&String::from_utf8_lossy(self.as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_type_numbers_match_the_uapi() {
        assert_eq!(
            (
                RECORD_LOST,
                RECORD_COMM,
                RECORD_EXIT,
                RECORD_FORK,
                RECORD_SAMPLE
            ),
            (2, 3, 4, 7, 9)
        );
        assert_eq!(
            (RECORD_LOST_SAMPLES, RECORD_SWITCH, RECORD_SWITCH_CPU_WIDE),
            (13, 14, 15)
        );
        assert_eq!(
            (MISC_SWITCH_OUT, MISC_SWITCH_OUT_PREEMPT),
            (1 << 13, 1 << 14)
        );
        assert_eq!(MISC_COMM_EXEC, 1 << 13);
        assert_eq!((RECORD_MMAP, RECORD_MMAP2), (1, 10));
        assert_eq!((MISC_MMAP_DATA, MISC_MMAP_BUILD_ID), (1 << 13, 1 << 14));
    }

    #[test]
    fn sample_id_len_counts_each_field() {
        let tid_time_cpu = SampleFormat::TID | SampleFormat::TIME | SampleFormat::CPU;
        let l =
            RecordLayout::from_formats(tid_time_cpu, BranchSampleFormat::empty(), true).unwrap();
        assert_eq!(l.sample_id_len(), 24);
        let l =
            RecordLayout::from_formats(tid_time_cpu, BranchSampleFormat::empty(), false).unwrap();
        assert_eq!(l.sample_id_len(), 0);
    }

    #[test]
    fn unsupported_sample_bits_are_rejected() {
        // PERF_SAMPLE_READ comes before the call chain, in a layout of its own; bit 25 is
        // unknown.
        for bad in [1 << 4, 1 << 25] {
            let bad = SampleFormat::from_bits_retain(bad);
            let err = RecordLayout::from_formats(
                SampleFormat::TID | bad,
                BranchSampleFormat::empty(),
                true,
            )
            .unwrap_err();
            assert_eq!(err, ParseError::UnsupportedSampleFormat(bad));
        }
    }

    /// Fields after the branch stack (here user registers and weight) are never read: the
    /// sample parses up to its branch stack whatever follows it.
    #[test]
    fn fields_after_the_branch_stack_are_accepted_and_not_read() {
        let regs_user = SampleFormat::from_bits_retain(1 << 12);
        let weight = SampleFormat::from_bits_retain(1 << 14);
        assert!(AFTER_BRANCH_STACK.contains(regs_user | weight));
        assert!(
            !AFTER_BRANCH_STACK.intersects(SampleFormat::IDENTIFIER | SampleFormat::BRANCH_STACK)
        );
        let layout = RecordLayout::from_formats(
            SampleFormat::TID | SampleFormat::BRANCH_STACK | regs_user | weight,
            BranchSampleFormat::empty(),
            true,
        )
        .unwrap();
        let mut body = Vec::new();
        for w in [
            7u64 | 8 << 32,
            1,
            0x10,
            0x20,
            0,
            /* regs abi, weight */ 0,
            99,
        ] {
            body.extend_from_slice(&w.to_ne_bytes());
        }
        let rec = RawRecord {
            kind: RECORD_SAMPLE,
            misc: 0,
            body: RawData::Single(&body),
        };
        let PerfRecord::Sample(s) = layout.parse(&rec).unwrap() else {
            panic!("not a sample");
        };
        assert_eq!((s.pid, s.tid), (Some(7), Some(8)));
        let stack = s.branch_stack.unwrap();
        assert_eq!((stack.entries[0].from, stack.entries[0].to), (0x10, 0x20));
    }

    fn parse_sample<'a>(layout: &RecordLayout, body: &'a [u8]) -> Sample<'a> {
        match layout.parse(&RawRecord {
            kind: RECORD_SAMPLE,
            misc: 0,
            body: RawData::Single(body),
        }) {
            Ok(PerfRecord::Sample(s)) => s,
            other => panic!("{other:?}"),
        }
    }

    /// The in-place sample read gives the fields `parse` gives, for every fixed layout, and
    /// declines variable layouts and short bodies.
    #[test]
    fn in_place_sample_matches_parse() {
        let optional = [
            SampleFormat::IDENTIFIER,
            SampleFormat::IP,
            SampleFormat::TID,
            SampleFormat::TIME,
            SampleFormat::ADDR,
            SampleFormat::ID,
            SampleFormat::STREAM_ID,
            SampleFormat::CPU,
            SampleFormat::PERIOD,
        ];
        for bits in 0u32..(1 << optional.len()) {
            let mut format = SampleFormat::RAW;
            for (i, f) in optional.iter().enumerate() {
                if bits & (1 << i) != 0 {
                    format |= *f;
                }
            }
            let layout =
                RecordLayout::from_formats(format, BranchSampleFormat::empty(), true).unwrap();
            // Each optional field 8 bytes of distinct values, then the raw size and data.
            let mut body = Vec::new();
            for i in 0..bits.count_ones() as u64 {
                body.extend_from_slice(&(0x0101_0101_0000_0000 * (i + 1) + i).to_ne_bytes());
            }
            body.extend_from_slice(&12u32.to_ne_bytes());
            body.extend_from_slice(b"raw-data-123");
            let parsed = parse_sample(&layout, &body);
            let fast = layout.sample_in_place(&body).unwrap();
            assert_eq!(
                (fast.pid, fast.tid, fast.time, fast.cpu),
                (parsed.pid, parsed.tid, parsed.time, parsed.cpu),
                "{format:?}"
            );
            assert_eq!(fast.raw, &parsed.raw.unwrap().to_vec()[..]);
            assert!(layout.sample_in_place(&body[..body.len() - 1]).is_none());
        }
        let branches = RecordLayout::from_formats(
            SampleFormat::RAW | SampleFormat::BRANCH_STACK,
            BranchSampleFormat::ANY,
            true,
        )
        .unwrap();
        assert!(
            branches.sample_in_place(&[0; 64]).is_none(),
            "variable: parsed"
        );
    }

    /// With a call chain (before the raw data, or alone as a CPU sample's), the in-place read
    /// gives what `parse` gives; a chain longer than the body is declined.
    #[test]
    fn in_place_call_chains_match_parse() {
        for format in [
            SampleFormat::TID
                | SampleFormat::TIME
                | SampleFormat::CPU
                | SampleFormat::CALLCHAIN
                | SampleFormat::RAW,
            SampleFormat::IP
                | SampleFormat::TID
                | SampleFormat::TIME
                | SampleFormat::CPU
                | SampleFormat::CALLCHAIN,
        ] {
            let layout =
                RecordLayout::from_formats(format, BranchSampleFormat::empty(), true).unwrap();
            let chain = [
                0xffff_ffff_ffff_ff80u64,
                0xffff_ffff_8100_0010,
                0xffff_ffff_8100_0020,
            ];
            let mut body = Vec::new();
            if format.contains(SampleFormat::IP) {
                body.extend_from_slice(&0x40_1234u64.to_ne_bytes());
            }
            body.extend_from_slice(&7u32.to_ne_bytes());
            body.extend_from_slice(&8u32.to_ne_bytes());
            body.extend_from_slice(&99u64.to_ne_bytes());
            body.extend_from_slice(&1u32.to_ne_bytes());
            body.extend_from_slice(&0u32.to_ne_bytes());
            body.extend_from_slice(&(chain.len() as u64).to_ne_bytes());
            for ip in chain {
                body.extend_from_slice(&ip.to_ne_bytes());
            }
            if format.contains(SampleFormat::RAW) {
                body.extend_from_slice(&4u32.to_ne_bytes());
                body.extend_from_slice(b"abcd");
            }
            let parsed = parse_sample(&layout, &body);
            let fast = layout.sample_in_place(&body).unwrap();
            assert_eq!(
                (fast.ip, fast.pid, fast.tid, fast.time, fast.cpu),
                (parsed.ip, parsed.pid, parsed.tid, parsed.time, parsed.cpu)
            );
            assert_eq!(fast.callchain, &parsed.callchain.unwrap().to_vec()[..]);
            assert_eq!(
                fast.raw,
                &parsed.raw.map(|r| r.to_vec()).unwrap_or_default()[..]
            );
            // A chain claiming more frames than the body holds.
            let nr_at = body.len()
                - 8 * chain.len()
                - 8
                - if format.contains(SampleFormat::RAW) {
                    8
                } else {
                    0
                };
            let mut long = body.clone();
            long[nr_at..nr_at + 8].copy_from_slice(&1000u64.to_ne_bytes());
            assert!(layout.sample_in_place(&long).is_none());
        }
    }

    #[test]
    fn task_name_stops_at_nul() {
        let n = TaskName::from_bytes(b"worker-1\0\0\0garbage");
        assert_eq!(n.as_bytes(), b"worker-1");
        assert_eq!(n.to_string(), "worker-1");
        let long = TaskName::from_bytes(&[b'a'; 40]);
        assert_eq!(long.as_bytes().len(), TaskName::CAPACITY);
    }
}
