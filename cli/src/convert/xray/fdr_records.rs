//! Wire layouts of the records inside an FDR (Flight Data Recorder) log.
//!
//! Sources: the spec `xray-fdr-format.rst` (version 1) for the bit layouts, and what
//! compiler-rt writes and LLVM's reader accepts for versions 2..=5 (BufferExtents,
//! TypedEventMarker and Pid kinds; custom events with a CPU in version 4 and a TSC
//! delta in version 5). Little-endian only.
//!
//! The first byte of every record says what it is: bit 0 is the discriminant
//! (0 = 8-byte function record, 1 = 16-byte metadata record); for metadata records
//! bits 1..=7 hold the record kind. Function records, read as a little-endian `u32`
//! followed by a `u32`:
//!
//! | bits | field |
//! |---|---|
//! | 0 | discriminant (0) |
//! | 1..=3 | action: 0 entry, 1 exit, 2 tail exit, 3 entry with args |
//! | 4..=31 | function id (28 bits) |
//! | 32..=63 | tsc_delta: ticks since the previous record's TSC |
//!
//! Metadata records have 15 data bytes after the kind byte; offsets below are from
//! the record's start (so data byte 0 is at offset 1). Unused bytes are not zeroed
//! by the writer (compiler-rt leaves stack garbage there) and are never checked.

use super::bytes::{array_at, i32_at, i64_at, u16_at, u32_at, u64_at};
use super::error::XrayErrorKind;

/// Size of a function record.
pub const FUNCTION_RECORD_SIZE: usize = 8;
/// Size of a metadata record.
pub const METADATA_RECORD_SIZE: usize = 16;
/// Mask of the discriminant bit in a record's first byte (set = metadata).
pub const METADATA_DISCRIMINANT: u8 = 0x01;
/// Shift of the metadata record kind in the first byte.
pub const METADATA_KIND_SHIFT: u32 = 1;
/// Shift of the function action in the first 32-bit word.
pub const FUNCTION_ACTION_SHIFT: u32 = 1;
/// Mask of the function action after shifting.
pub const FUNCTION_ACTION_MASK: u32 = 0x7;
/// Shift of the 28-bit function id in the first 32-bit word.
pub const FUNCTION_ID_SHIFT: u32 = 4;
/// Offset of the 32-bit TSC delta in a function record.
pub const FUNCTION_TSC_DELTA_OFFSET: usize = 4;

/// Offset of a metadata record's data (after the kind byte).
pub const DATA: usize = 1;
/// NewBuffer: thread id, 32-bit (the v1 spec's table says 2 bytes; every writer stores a
/// 4-byte `pid_t`/`int32_t`, and LLVM's reader reads 4).
pub const NEW_BUFFER_TID: usize = DATA;
/// WallTimeMarker: seconds, signed 64-bit.
pub const WALLTIME_SECONDS: usize = DATA;
/// WallTimeMarker: microseconds, 32-bit.
pub const WALLTIME_MICROS: usize = DATA + 8;
/// NewCPUId: CPU id, 16-bit.
pub const NEW_CPU_ID: usize = DATA;
/// NewCPUId: absolute TSC, 64-bit.
pub const NEW_CPU_TSC: usize = DATA + 2;
/// TSCWrap: absolute TSC, 64-bit.
pub const TSC_WRAP_TSC: usize = DATA;
/// CustomEventMarker / TypedEventMarker: payload size, signed 32-bit.
pub const EVENT_SIZE: usize = DATA;
/// CustomEventMarker (versions 1..=4): absolute TSC, 64-bit.
pub const CUSTOM_EVENT_TSC: usize = DATA + 4;
/// CustomEventMarker (version 4): CPU id, 16-bit.
pub const CUSTOM_EVENT_CPU_V4: usize = DATA + 12;
/// CustomEventMarker (version 5) / TypedEventMarker: signed 32-bit TSC delta.
pub const EVENT_TSC_DELTA: usize = DATA + 4;
/// TypedEventMarker: event type, 16-bit.
pub const TYPED_EVENT_TYPE: usize = DATA + 8;
/// CallArgument: the argument, 64-bit.
pub const CALL_ARGUMENT: usize = DATA;
/// BufferExtents: bytes of records that follow in this buffer, 64-bit.
pub const BUFFER_EXTENTS_SIZE: usize = DATA;
/// Pid: process id, signed 32-bit.
pub const PID: usize = DATA;

/// The action of a function record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FunctionAction {
    /// 0: typical function entry.
    Entry,
    /// 1: typical function exit.
    Exit,
    /// 2: exit through a tail call.
    TailExit,
    /// 3: entry followed by CallArgument records.
    EntryArgs,
}

impl FunctionAction {
    /// The action with wire number `n`, if known.
    pub fn from_wire(n: u8) -> Option<Self> {
        match n {
            0 => Some(Self::Entry),
            1 => Some(Self::Exit),
            2 => Some(Self::TailExit),
            3 => Some(Self::EntryArgs),
            _ => None,
        }
    }
}

/// The kind of a metadata record (7 bits of the first byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetadataKind {
    /// 0: start of a thread buffer, with its thread id.
    NewBuffer,
    /// 1: end of the data in a (version 1) buffer.
    EndOfBuffer,
    /// 2: the thread runs on a new CPU; absolute TSC base.
    NewCpuId,
    /// 3: absolute TSC base, because a delta would not fit.
    TscWrap,
    /// 4: wall-clock time anchoring the buffer.
    WallTimeMarker,
    /// 5: custom event marker, followed by the payload.
    CustomEventMarker,
    /// 6: one argument of the preceding entry-with-args record.
    CallArgument,
    /// 7: number of bytes of records in this buffer (version >= 2).
    BufferExtents,
    /// 8: typed event marker, followed by the payload.
    TypedEventMarker,
    /// 9: process id (version >= 3).
    Pid,
}

impl MetadataKind {
    /// The kind with wire number `n`, if known.
    pub fn from_wire(n: u8) -> Option<Self> {
        Some(match n {
            0 => Self::NewBuffer,
            1 => Self::EndOfBuffer,
            2 => Self::NewCpuId,
            3 => Self::TscWrap,
            4 => Self::WallTimeMarker,
            5 => Self::CustomEventMarker,
            6 => Self::CallArgument,
            7 => Self::BufferExtents,
            8 => Self::TypedEventMarker,
            9 => Self::Pid,
            _ => return None,
        })
    }
}

/// Timing of a custom event marker, which changed with the log version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventTime {
    /// Versions 1..=4: an absolute TSC.
    Absolute(u64),
    /// Version 5 (and typed events): a signed delta from the previous record's TSC.
    Delta(i32),
}

/// One decoded FDR record, borrowing event payloads from the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FdrRecord<'a> {
    /// An 8-byte function record.
    Function {
        /// Entry, exit, tail exit or entry with args.
        action: FunctionAction,
        /// 28-bit function id.
        func_id: u32,
        /// Ticks since the previous record's TSC.
        tsc_delta: u32,
    },
    /// NewBuffer: thread id.
    NewBuffer {
        /// Thread id of the buffer's thread.
        tid: u32,
    },
    /// EndOfBuffer.
    EndOfBuffer,
    /// NewCPUId: CPU and absolute TSC.
    NewCpuId {
        /// CPU the thread now runs on.
        cpu: u16,
        /// Absolute TSC.
        tsc: u64,
    },
    /// TSCWrap: absolute TSC.
    TscWrap {
        /// Absolute TSC.
        tsc: u64,
    },
    /// WallTimeMarker.
    WallTime {
        /// Seconds (clock unspecified; compiler-rt uses CLOCK_MONOTONIC).
        seconds: i64,
        /// Microseconds within the second.
        micros: u32,
    },
    /// CustomEventMarker and its payload.
    CustomEvent {
        /// Absolute TSC (v1..=4) or delta (v5).
        time: EventTime,
        /// CPU recorded in the marker (version 4 only).
        cpu: Option<u16>,
        /// The payload.
        data: &'a [u8],
    },
    /// TypedEventMarker and its payload.
    TypedEvent {
        /// Signed TSC delta.
        tsc_delta: i32,
        /// Application-defined event type.
        event_type: u16,
        /// The payload.
        data: &'a [u8],
    },
    /// CallArgument.
    CallArgument {
        /// The argument value.
        arg: u64,
    },
    /// BufferExtents: size of the records that follow in this buffer.
    BufferExtents {
        /// Bytes.
        size: u64,
    },
    /// Pid.
    Pid {
        /// Process id.
        pid: u32,
    },
}

impl FdrRecord<'_> {
    /// Short name for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Function { .. } => "Function",
            Self::NewBuffer { .. } => "NewBuffer",
            Self::EndOfBuffer => "EndOfBuffer",
            Self::NewCpuId { .. } => "NewCPUId",
            Self::TscWrap { .. } => "TSCWrap",
            Self::WallTime { .. } => "WallTimeMarker",
            Self::CustomEvent { .. } => "CustomEventMarker",
            Self::TypedEvent { .. } => "TypedEventMarker",
            Self::CallArgument { .. } => "CallArgument",
            Self::BufferExtents { .. } => "BufferExtents",
            Self::Pid { .. } => "Pid",
        }
    }
}

/// Decodes the function record in `rec` (8 bytes).
pub fn decode_function(
    rec: [u8; FUNCTION_RECORD_SIZE],
) -> Result<FdrRecord<'static>, XrayErrorKind> {
    let word = u32::from_le_bytes([rec[0], rec[1], rec[2], rec[3]]);
    let action_bits = ((word >> FUNCTION_ACTION_SHIFT) & FUNCTION_ACTION_MASK) as u8;
    let action =
        FunctionAction::from_wire(action_bits).ok_or(XrayErrorKind::UnknownFunctionAction {
            action: action_bits,
        })?;
    let tsc_delta = u32::from_le_bytes([rec[4], rec[5], rec[6], rec[7]]);
    Ok(FdrRecord::Function {
        action,
        func_id: word >> FUNCTION_ID_SHIFT,
        tsc_delta,
    })
}

/// Decodes the record starting at `at` in `data` for log `version`.
///
/// Returns the record and its total length (8, 16, or 16 + payload). Errors say what
/// is wrong; the caller attaches the offset.
pub fn decode_record(
    data: &[u8],
    at: usize,
    version: u16,
) -> Result<(FdrRecord<'_>, usize), XrayErrorKind> {
    let available = data.len().saturating_sub(at) as u64;
    let truncated = |record: &'static str, needed: usize| XrayErrorKind::Truncated {
        record,
        needed: needed as u64,
        available,
    };
    let Some(&first) = data.get(at) else {
        return Err(truncated("record", 1));
    };
    if first & METADATA_DISCRIMINANT == 0 {
        let rec = array_at::<FUNCTION_RECORD_SIZE>(data, at)
            .ok_or_else(|| truncated("Function", FUNCTION_RECORD_SIZE))?;
        return Ok((decode_function(rec)?, FUNCTION_RECORD_SIZE));
    }
    let kind_bits = first >> METADATA_KIND_SHIFT;
    let kind = MetadataKind::from_wire(kind_bits)
        .ok_or(XrayErrorKind::UnknownMetadataKind { kind: kind_bits })?;
    let rec = data.get(at..).unwrap_or(&[]);
    if rec.len() < METADATA_RECORD_SIZE {
        return Err(truncated(metadata_name(kind), METADATA_RECORD_SIZE));
    }
    // All reads below are inside the 16 bytes checked above, so they cannot fail;
    // `unwrap_or(0)` keeps this total without a panic path.
    let r64 = |o| u64_at(rec, o).unwrap_or(0);
    let r32 = |o| u32_at(rec, o).unwrap_or(0);
    let r16 = |o| u16_at(rec, o).unwrap_or(0);
    let record = match kind {
        MetadataKind::NewBuffer => FdrRecord::NewBuffer {
            tid: r32(NEW_BUFFER_TID),
        },
        MetadataKind::EndOfBuffer => FdrRecord::EndOfBuffer,
        MetadataKind::NewCpuId => FdrRecord::NewCpuId {
            cpu: r16(NEW_CPU_ID),
            tsc: r64(NEW_CPU_TSC),
        },
        MetadataKind::TscWrap => FdrRecord::TscWrap {
            tsc: r64(TSC_WRAP_TSC),
        },
        MetadataKind::WallTimeMarker => FdrRecord::WallTime {
            seconds: i64_at(rec, WALLTIME_SECONDS).unwrap_or(0),
            micros: r32(WALLTIME_MICROS),
        },
        MetadataKind::CallArgument => FdrRecord::CallArgument {
            arg: r64(CALL_ARGUMENT),
        },
        MetadataKind::BufferExtents => FdrRecord::BufferExtents {
            size: r64(BUFFER_EXTENTS_SIZE),
        },
        MetadataKind::Pid => FdrRecord::Pid { pid: r32(PID) },
        MetadataKind::CustomEventMarker | MetadataKind::TypedEventMarker => {
            let name = metadata_name(kind);
            let size = i32_at(rec, EVENT_SIZE).unwrap_or(0);
            if size <= 0 {
                return Err(XrayErrorKind::BadEventSize { record: name, size });
            }
            let total = METADATA_RECORD_SIZE + size as usize;
            let payload = rec
                .get(METADATA_RECORD_SIZE..total)
                .ok_or_else(|| truncated(name, total))?;
            let record = if kind == MetadataKind::TypedEventMarker {
                FdrRecord::TypedEvent {
                    tsc_delta: i32_at(rec, EVENT_TSC_DELTA).unwrap_or(0),
                    event_type: r16(TYPED_EVENT_TYPE),
                    data: payload,
                }
            } else if version >= 5 {
                FdrRecord::CustomEvent {
                    time: EventTime::Delta(i32_at(rec, EVENT_TSC_DELTA).unwrap_or(0)),
                    cpu: None,
                    data: payload,
                }
            } else {
                FdrRecord::CustomEvent {
                    time: EventTime::Absolute(r64(CUSTOM_EVENT_TSC)),
                    cpu: (version == 4).then(|| r16(CUSTOM_EVENT_CPU_V4)),
                    data: payload,
                }
            };
            return Ok((record, total));
        }
    };
    Ok((record, METADATA_RECORD_SIZE))
}

/// Name of a metadata kind, for messages.
pub fn metadata_name(kind: MetadataKind) -> &'static str {
    match kind {
        MetadataKind::NewBuffer => "NewBuffer",
        MetadataKind::EndOfBuffer => "EndOfBuffer",
        MetadataKind::NewCpuId => "NewCPUId",
        MetadataKind::TscWrap => "TSCWrap",
        MetadataKind::WallTimeMarker => "WallTimeMarker",
        MetadataKind::CustomEventMarker => "CustomEventMarker",
        MetadataKind::CallArgument => "CallArgument",
        MetadataKind::BufferExtents => "BufferExtents",
        MetadataKind::TypedEventMarker => "TypedEventMarker",
        MetadataKind::Pid => "Pid",
    }
}

/// Encoders of FDR records, for tests that build synthetic logs.
#[cfg(test)]
pub(crate) mod encode {
    use super::*;

    /// A function record.
    pub(crate) fn function(action: u8, func_id: u32, tsc_delta: u32) -> Vec<u8> {
        let word = ((action as u32 & FUNCTION_ACTION_MASK) << FUNCTION_ACTION_SHIFT)
            | (func_id << FUNCTION_ID_SHIFT);
        let mut v = word.to_le_bytes().to_vec();
        v.extend_from_slice(&tsc_delta.to_le_bytes());
        v
    }

    /// A metadata record of `kind` with `data` at offset 1, the rest filled with `fill`.
    pub(crate) fn metadata_filled(kind: u8, data: &[u8], fill: u8) -> Vec<u8> {
        let mut v = vec![fill; METADATA_RECORD_SIZE];
        v[0] = (kind << METADATA_KIND_SHIFT) | METADATA_DISCRIMINANT;
        v[1..1 + data.len()].copy_from_slice(data);
        v
    }

    /// A metadata record of `kind` with `data` at offset 1, zero padded.
    pub(crate) fn metadata(kind: u8, data: &[u8]) -> Vec<u8> {
        metadata_filled(kind, data, 0)
    }

    /// Concatenates little-endian field bytes.
    pub(crate) fn fields(parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }
}

#[cfg(test)]
mod tests {
    use super::encode::*;
    use super::*;

    #[test]
    fn function_record_bits_match_spec() {
        // Spec: "read an 8 bit value and apply the mask 0x01 for the discriminant ... read 32
        // bits and unsigned shift right by 0x04 to obtain the function_id field."
        let rec = function(3, 0x0ABC_DEF1, 0x8765_4321);
        assert_eq!(rec.len(), FUNCTION_RECORD_SIZE);
        assert_eq!(rec[0] & 0x01, 0, "function records have discriminant 0");
        let (r, len) = decode_record(&rec, 0, 1).unwrap();
        assert_eq!(len, 8);
        assert_eq!(
            r,
            FdrRecord::Function {
                action: FunctionAction::EntryArgs,
                func_id: 0x0ABC_DEF1,
                tsc_delta: 0x8765_4321
            }
        );
        // The action table: Entry 0, Exit 1, Tail_Exit 2, Entry_Args 3.
        for (n, want) in [
            (0, FunctionAction::Entry),
            (1, FunctionAction::Exit),
            (2, FunctionAction::TailExit),
        ] {
            let rec = function(n, 7, 0);
            let (r, _) = decode_record(&rec, 0, 5).unwrap();
            assert_eq!(
                r,
                FdrRecord::Function {
                    action: want,
                    func_id: 7,
                    tsc_delta: 0
                }
            );
        }
        // Raw bytes written by compiler-rt (fixture): 0x26 = action 3, id 2; delta 0xc364.
        let (r, _) = decode_record(&[0x26, 0, 0, 0, 0x64, 0xc3, 0, 0], 0, 5).unwrap();
        assert_eq!(
            r,
            FdrRecord::Function {
                action: FunctionAction::EntryArgs,
                func_id: 2,
                tsc_delta: 0xc364
            }
        );
    }

    #[test]
    fn unknown_function_action_is_an_error() {
        for action in 4..8 {
            assert_eq!(
                decode_record(&function(action, 1, 0), 0, 5),
                Err(XrayErrorKind::UnknownFunctionAction { action })
            );
        }
    }

    #[test]
    fn metadata_kinds_match_spec_table() {
        // Spec table: NewBuffer 0, EndOfBuffer 1, NewCPUId 2, TSCWrap 3, WallTimeMarker 4,
        // CustomEventMarker 5, CallArgument 6; LLVM adds BufferExtents 7, TypedEventMarker 8, Pid 9.
        let names: Vec<_> = (0..10)
            .map(|k| metadata_name(MetadataKind::from_wire(k).unwrap()))
            .collect();
        assert_eq!(
            names,
            [
                "NewBuffer",
                "EndOfBuffer",
                "NewCPUId",
                "TSCWrap",
                "WallTimeMarker",
                "CustomEventMarker",
                "CallArgument",
                "BufferExtents",
                "TypedEventMarker",
                "Pid"
            ]
        );
        assert_eq!(MetadataKind::from_wire(10), None);
        assert_eq!(
            decode_record(&metadata(10, &[]), 0, 5),
            Err(XrayErrorKind::UnknownMetadataKind { kind: 10 })
        );
        assert_eq!(
            decode_record(&metadata(127, &[]), 0, 5),
            Err(XrayErrorKind::UnknownMetadataKind { kind: 127 })
        );
    }

    #[test]
    fn new_buffer_and_pid() {
        // NewBuffer: thread id in the first data bytes; the rest is unused (and may be garbage).
        let rec = metadata_filled(0, &4242u32.to_le_bytes(), 0xAA);
        assert_eq!(rec[0], 0x01, "kind 0 with the metadata discriminant");
        assert_eq!(
            decode_record(&rec, 0, 1).unwrap(),
            (FdrRecord::NewBuffer { tid: 4242 }, 16)
        );
        let rec = metadata_filled(9, &77u32.to_le_bytes(), 0x55);
        assert_eq!(
            decode_record(&rec, 0, 5).unwrap(),
            (FdrRecord::Pid { pid: 77 }, 16)
        );
    }

    #[test]
    fn wall_time_new_cpu_tsc_wrap() {
        // WallClockTime: seconds (8 bytes), microseconds (4), reserved (3).
        let rec = metadata_filled(
            4,
            &fields(&[&1_700_000_000i64.to_le_bytes(), &999_999u32.to_le_bytes()]),
            0xEE,
        );
        assert_eq!(
            decode_record(&rec, 0, 1).unwrap().0,
            FdrRecord::WallTime {
                seconds: 1_700_000_000,
                micros: 999_999
            }
        );
        // NewCpuId: cpu_id (2 bytes), absolute_tsc (8), reserved (5).
        let rec = metadata_filled(
            2,
            &fields(&[&3u16.to_le_bytes(), &0x0102_0304_0506_0708u64.to_le_bytes()]),
            0xEE,
        );
        assert_eq!(
            decode_record(&rec, 0, 1).unwrap().0,
            FdrRecord::NewCpuId {
                cpu: 3,
                tsc: 0x0102_0304_0506_0708
            }
        );
        // TSCWrap: absolute_tsc (8), reserved (7).
        let rec = metadata_filled(3, &u64::MAX.to_le_bytes(), 0xEE);
        assert_eq!(
            decode_record(&rec, 0, 1).unwrap().0,
            FdrRecord::TscWrap { tsc: u64::MAX }
        );
        // Raw NewCPUId written by compiler-rt (fixture): cpu 0, tsc 0x18ea37bbf97e6789, garbage tail.
        let raw = [
            0x05, 0x00, 0x00, 0x89, 0x67, 0x7e, 0xf9, 0xbb, 0x37, 0xea, 0x18, 0x0b, 0, 0, 0, 0,
        ];
        assert_eq!(
            decode_record(&raw, 0, 5).unwrap().0,
            FdrRecord::NewCpuId {
                cpu: 0,
                tsc: 0x18ea_37bb_f97e_6789
            }
        );
    }

    #[test]
    fn call_argument_extents_end_of_buffer() {
        // CallArgument: argument (8), reserved (7).
        let rec = metadata(6, &0xDEAD_BEEF_u64.to_le_bytes());
        assert_eq!(
            decode_record(&rec, 0, 1).unwrap().0,
            FdrRecord::CallArgument { arg: 0xDEAD_BEEF }
        );
        let rec = metadata(7, &4096u64.to_le_bytes());
        assert_eq!(
            decode_record(&rec, 0, 5).unwrap().0,
            FdrRecord::BufferExtents { size: 4096 }
        );
        assert_eq!(
            decode_record(&metadata_filled(1, &[], 0x77), 0, 1).unwrap(),
            (FdrRecord::EndOfBuffer, 16)
        );
    }

    #[test]
    fn custom_event_layout_per_version() {
        let payload = b"hello";
        // Version 1..=3, spec: event_size (4), absolute_tsc (8), reserved (3); payload follows.
        let mut rec = metadata(
            5,
            &fields(&[&5i32.to_le_bytes(), &123_456u64.to_le_bytes()]),
        );
        rec.extend_from_slice(payload);
        let want = FdrRecord::CustomEvent {
            time: EventTime::Absolute(123_456),
            cpu: None,
            data: payload,
        };
        assert_eq!(decode_record(&rec, 0, 1).unwrap(), (want, 21));
        // Version 4 adds the CPU after the TSC.
        let mut rec = metadata(
            5,
            &fields(&[
                &5i32.to_le_bytes(),
                &123_456u64.to_le_bytes(),
                &9u16.to_le_bytes(),
            ]),
        );
        rec.extend_from_slice(payload);
        let want = FdrRecord::CustomEvent {
            time: EventTime::Absolute(123_456),
            cpu: Some(9),
            data: payload,
        };
        assert_eq!(decode_record(&rec, 0, 4).unwrap().0, want);
        // Version 5: size (4), signed TSC delta (4).
        let mut rec = metadata(5, &fields(&[&5i32.to_le_bytes(), &(-3i32).to_le_bytes()]));
        rec.extend_from_slice(payload);
        let want = FdrRecord::CustomEvent {
            time: EventTime::Delta(-3),
            cpu: None,
            data: payload,
        };
        assert_eq!(decode_record(&rec, 0, 5).unwrap().0, want);
    }

    #[test]
    fn typed_event_layout() {
        // size (4), signed delta (4), type (2); payload follows.
        let mut rec = metadata(
            8,
            &fields(&[
                &3i32.to_le_bytes(),
                &100i32.to_le_bytes(),
                &42u16.to_le_bytes(),
            ]),
        );
        rec.extend_from_slice(b"abcXYZ");
        let want = FdrRecord::TypedEvent {
            tsc_delta: 100,
            event_type: 42,
            data: b"abc",
        };
        assert_eq!(decode_record(&rec, 0, 5).unwrap(), (want, 19));
    }

    #[test]
    fn event_sizes_are_checked() {
        for size in [0i32, -1, i32::MIN] {
            let rec = metadata(5, &fields(&[&size.to_le_bytes(), &0u64.to_le_bytes()]));
            assert_eq!(
                decode_record(&rec, 0, 5),
                Err(XrayErrorKind::BadEventSize {
                    record: "CustomEventMarker",
                    size
                })
            );
        }
        let rec = metadata(8, &fields(&[&100i32.to_le_bytes(), &0u32.to_le_bytes()]));
        assert_eq!(
            decode_record(&rec, 0, 5),
            Err(XrayErrorKind::Truncated {
                record: "TypedEventMarker",
                needed: 116,
                available: 16
            })
        );
    }

    #[test]
    fn truncated_records_are_errors() {
        assert_eq!(
            decode_record(&[0x00, 0, 0], 0, 5),
            Err(XrayErrorKind::Truncated {
                record: "Function",
                needed: 8,
                available: 3
            })
        );
        assert_eq!(
            decode_record(&[0x05, 0, 0], 0, 5),
            Err(XrayErrorKind::Truncated {
                record: "NewCPUId",
                needed: 16,
                available: 3
            })
        );
        assert_eq!(
            decode_record(&[], 0, 5),
            Err(XrayErrorKind::Truncated {
                record: "record",
                needed: 1,
                available: 0
            })
        );
        assert_eq!(
            decode_record(&[1, 2], usize::MAX, 5),
            Err(XrayErrorKind::Truncated {
                record: "record",
                needed: 1,
                available: 0
            })
        );
    }
}
