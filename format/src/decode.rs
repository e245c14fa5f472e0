//! The decoder: a zero-copy iterator over `&[u8]` ([`Decoder`]) and a streaming one over
//! `io::Read` ([`StreamDecoder`]), sharing one record decoder.
//!
//! The reader keeps state per provider (string table, thread table, ticks per second) and
//! switches it on provider info and provider section metadata, as the spec requires.
//! Unknown record, metadata, event, scheduling, large record and argument types are skipped
//! by their size and counted ([`SkipCounts`]). The first malformed record ends decoding with
//! an error carrying its byte offset, after everything before it has been yielded. No input
//! makes it panic.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::{self, Read};

use super::decoded::{
    Decoded, DecodedArg, DecodedEvent, DecodedEventKind, DecodedRecord, DecodedValue,
    LargeBlobEvent, Thread, Timestamp,
};
use super::error::{DecodeError, DecodeErrorKind, FramingErrorKind};
use super::fields::{
    ArgumentHeader, BlobArgument, BlobRecord, BoolArgument, ContextSwitchRecord, EventRecord,
    Int32Argument, KernelObjectRecord, LargeBlobAttachment, LargeBlobWithMetadata,
    LargeRecordHeader, LogRecord, MagicNumberRecord, MetadataRecord, ProviderEventMetadata,
    ProviderInfoMetadata, ProviderSectionMetadata, RecordHeader, SchedContextSwitchRecord,
    SchedThreadWakeupRecord, SchedulingRecord, StringArgument, StringRecord, ThreadRecord,
    TraceInfoMetadata, UserspaceObjectRecord,
};
use super::framing::{check_frame, record_words};
use super::refs::STRING_REF_INLINE_FLAG;
use super::types::{
    ticks_to_ns, ArgType, BlobType, EventType, LargeBlobFormat, MetadataType, ObjectType,
    RecordType, SchedulingType, LARGE_RECORD_TYPE_BLOB, MAGIC_NUMBER, MAGIC_WORD,
    TRACE_INFO_TYPE_MAGIC,
};

/// Ticks per second assumed until an initialization record says otherwise (1 tick = 1 ns).
pub const DEFAULT_TICKS_PER_SECOND: u64 = 1_000_000_000;

/// Records and arguments skipped so far, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SkipCounts {
    /// Records of an unknown record type.
    pub unknown_record_type: u64,
    /// Metadata records of an unknown metadata type or trace info type.
    pub unknown_metadata_type: u64,
    /// Event records of an unknown event type.
    pub unknown_event_type: u64,
    /// Scheduling records of an unknown scheduling type.
    pub unknown_scheduling_type: u64,
    /// Large records of an unknown large type or blob format.
    pub unknown_large_type: u64,
    /// String or thread records for the reserved index 0 (the spec says to ignore them).
    pub reserved_index: u64,
    /// Arguments of an unknown argument type (their record was still decoded).
    pub unknown_arg_type: u64,
}

impl SkipCounts {
    /// Whole records skipped, for any reason.
    pub fn records(&self) -> u64 {
        self.unknown_record_type
            + self.unknown_metadata_type
            + self.unknown_event_type
            + self.unknown_scheduling_type
            + self.unknown_large_type
            + self.reserved_index
    }

    /// One line saying what was skipped, if anything was (a reader prints it on stderr).
    pub fn summary(&self) -> Option<String> {
        (self.records() > 0 || self.unknown_arg_type > 0).then(|| {
            format!(
                "skipped {} records and {} arguments of unknown types (run `fxtrace stats` for \
                 details)",
                self.records(),
                self.unknown_arg_type
            )
        })
    }
}

// === impl State ===

/// A cheap hasher for the tables' small integer keys (multiplicative, Fibonacci hashing).
/// Collision attacks do not matter here: keys are at most 16 bits, so a table holds at most
/// 32768 entries.
#[derive(Debug, Default, Clone, Copy)]
struct IndexHasher(u64);

impl std::hash::Hasher for IndexHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.write_u64(u64::from(i));
    }

    fn write_u16(&mut self, i: u16) {
        self.write_u64(u64::from(i));
    }

    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0 ^ i).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type IndexMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<IndexHasher>>;

/// The tables of one provider. Maps rather than arrays, so memory follows the input's size
/// (a hostile input cannot make each provider cost a 32768-entry array).
#[derive(Debug)]
struct ProviderState<'a> {
    strings: IndexMap<u16, Cow<'a, str>>,
    threads: IndexMap<u8, Thread>,
    ticks_per_second: u64,
}

impl Default for ProviderState<'_> {
    fn default() -> Self {
        ProviderState {
            strings: IndexMap::default(),
            threads: IndexMap::default(),
            ticks_per_second: DEFAULT_TICKS_PER_SECOND,
        }
    }
}

impl<'a> ProviderState<'a> {
    fn time(&self, ticks: u64) -> Timestamp {
        Timestamp {
            ticks,
            ns: ticks_to_ns(ticks, self.ticks_per_second),
        }
    }

    fn string(&self, index: u16) -> Option<&Cow<'a, str>> {
        self.strings.get(&index)
    }

    fn thread(&self, index: u8) -> Option<Thread> {
        self.threads.get(&index).copied()
    }

    /// Nothing to remember: no string, no thread, the default tick rate.
    fn is_pristine(&self) -> bool {
        self.strings.is_empty()
            && self.threads.is_empty()
            && self.ticks_per_second == DEFAULT_TICKS_PER_SECOND
    }

    fn set_string(&mut self, index: u16, value: Cow<'a, str>) {
        self.strings.insert(index, value);
    }

    fn set_thread(&mut self, index: u8, thread: Thread) {
        self.threads.insert(index, thread);
    }
}

/// Everything the decoder remembers between records.
#[derive(Debug, Default)]
struct State<'a> {
    /// Slot 0: records before any provider metadata; then one slot per provider seen.
    tables: Vec<ProviderState<'a>>,
    /// Provider id → slot in `tables`.
    slots: HashMap<u32, usize>,
    /// Slots given back by providers that left nothing to remember.
    free: Vec<usize>,
    /// The current provider id and its slot (slot 0 while `None`).
    current: Option<u32>,
    current_slot: usize,
    skipped: SkipCounts,
}

impl<'a> State<'a> {
    fn parts(&mut self) -> (&mut ProviderState<'a>, &mut SkipCounts) {
        if self.tables.is_empty() {
            self.tables.push(ProviderState::default());
        }
        (&mut self.tables[self.current_slot], &mut self.skipped)
    }

    fn current_ticks_per_second(&self) -> u64 {
        self.tables
            .get(self.current_slot)
            .map_or(DEFAULT_TICKS_PER_SECOND, |p| p.ticks_per_second)
    }

    fn switch_to(&mut self, provider_id: u32) {
        if self.tables.is_empty() {
            self.tables.push(ProviderState::default());
        }
        // A provider left with nothing to remember gives its slot back (met again, it starts
        // from the same empty tables): memory follows the providers that registered
        // something, not the number of provider sections (a million one-word sections).
        if let Some(current) = self.current {
            let slot = self.current_slot;
            if current != provider_id && slot != 0 && self.tables[slot].is_pristine() {
                self.slots.remove(&current);
                self.free.push(slot);
            }
        }
        let slot = match self.slots.get(&provider_id) {
            Some(&slot) => slot,
            None => {
                let slot = match self.free.pop() {
                    Some(slot) => slot,
                    None => {
                        self.tables.push(ProviderState::default());
                        self.tables.len() - 1
                    }
                };
                self.slots.insert(provider_id, slot);
                slot
            }
        };
        self.current = Some(provider_id);
        self.current_slot = slot;
    }
}

/// Turns bytes of the input into the decoded record's lifetime: borrowed for the slice
/// decoder, owned for the streaming one.
trait Lift<'b, 'a> {
    fn text(bytes: &'b [u8]) -> Cow<'a, str>;
    fn bytes(bytes: &'b [u8]) -> Cow<'a, [u8]>;
}

/// Borrows from the input.
enum Borrow {}

impl<'a> Lift<'a, 'a> for Borrow {
    fn text(bytes: &'a [u8]) -> Cow<'a, str> {
        String::from_utf8_lossy(bytes)
    }

    fn bytes(bytes: &'a [u8]) -> Cow<'a, [u8]> {
        Cow::Borrowed(bytes)
    }
}

/// Copies out of a transient buffer.
enum Own {}

impl<'b> Lift<'b, 'static> for Own {
    fn text(bytes: &'b [u8]) -> Cow<'static, str> {
        Cow::Owned(String::from_utf8_lossy(bytes).into_owned())
    }

    fn bytes(bytes: &'b [u8]) -> Cow<'static, [u8]> {
        Cow::Owned(bytes.to_vec())
    }
}

// === impl Reader ===

/// Reads the atoms of one record (already framed: `rec` is exactly the record's bytes).
struct Reader<'b> {
    rec: &'b [u8],
    pos: usize,
    record: &'static str,
    header: u64,
}

fn word_at(bytes: &[u8], at: usize) -> Option<u64> {
    let w = bytes.get(at..at.checked_add(8)?)?;
    Some(u64::from_ne_bytes([
        w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7],
    ]))
}

impl<'b> Reader<'b> {
    /// A reader positioned after the header word.
    fn new(rec: &'b [u8], record: &'static str) -> Self {
        Reader {
            rec,
            pos: 8,
            record,
            header: word_at(rec, 0).unwrap_or(0),
        }
    }

    fn malformed(&self, problem: &'static str) -> DecodeErrorKind {
        DecodeErrorKind::Malformed {
            record: self.record,
            header: self.header,
            problem,
        }
    }

    fn word(&mut self) -> Result<u64, DecodeErrorKind> {
        match word_at(self.rec, self.pos) {
            Some(w) => {
                self.pos += 8;
                Ok(w)
            }
            None => Err(self.malformed("record ends before its last field")),
        }
    }

    /// A stream of `len` bytes, padded to 8; returns the unpadded bytes.
    fn stream(&mut self, len: u64) -> Result<&'b [u8], DecodeErrorKind> {
        let end = usize::try_from(len)
            .ok()
            .and_then(|len| self.pos.checked_add(len));
        let padded = end.and_then(|end| end.checked_next_multiple_of(8));
        match (end, padded) {
            (Some(end), Some(padded)) if padded <= self.rec.len() => {
                let bytes = &self.rec[self.pos..end];
                self.pos = padded;
                Ok(bytes)
            }
            _ => Err(self.malformed("a string or payload runs past the end of the record")),
        }
    }

    fn string<'a, L: Lift<'b, 'a>>(
        &mut self,
        string_ref: u64,
        provider: &ProviderState<'a>,
    ) -> Result<Cow<'a, str>, DecodeErrorKind> {
        let string_ref = string_ref as u16;
        if string_ref == 0 {
            Ok(Cow::Borrowed(""))
        } else if string_ref & STRING_REF_INLINE_FLAG != 0 {
            let len = string_ref & !STRING_REF_INLINE_FLAG;
            Ok(L::text(self.stream(u64::from(len))?))
        } else {
            provider
                .string(string_ref)
                .cloned()
                .ok_or(DecodeErrorKind::UnknownStringIndex {
                    record: self.record,
                    index: string_ref,
                })
        }
    }

    fn thread(
        &mut self,
        thread_ref: u64,
        provider: &ProviderState<'_>,
    ) -> Result<Thread, DecodeErrorKind> {
        let thread_ref = thread_ref as u8;
        if thread_ref == 0 {
            Ok(Thread {
                pid: self.word()?,
                tid: self.word()?,
            })
        } else {
            provider
                .thread(thread_ref)
                .ok_or(DecodeErrorKind::UnknownThreadIndex {
                    record: self.record,
                    index: thread_ref,
                })
        }
    }

    fn args<'a, L: Lift<'b, 'a>>(
        &mut self,
        count: u64,
        provider: &ProviderState<'a>,
        skipped: &mut SkipCounts,
    ) -> Result<Vec<DecodedArg<'a>>, DecodeErrorKind> {
        let mut args = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let start = self.pos;
            let header = self.word()?;
            let words = ArgumentHeader::SIZE.get(header) as usize;
            if words == 0 {
                return Err(self.malformed("an argument has size 0"));
            }
            let end = start + words * 8;
            if end > self.rec.len() {
                return Err(self.malformed("an argument runs past the end of the record"));
            }
            // Decode the argument inside its own bounds, then continue after it.
            let mut arg = Reader {
                rec: &self.rec[..end],
                pos: self.pos,
                ..*self
            };
            self.pos = end;
            let Some(arg_type) = ArgType::from_raw(ArgumentHeader::TYPE.get(header) as u8) else {
                skipped.unknown_arg_type += 1;
                continue;
            };
            let name = arg.string::<L>(ArgumentHeader::NAME_REF.get(header), provider)?;
            let value = match arg_type {
                ArgType::Null => DecodedValue::Null,
                ArgType::I32 => DecodedValue::I32(Int32Argument::VALUE.get(header) as u32 as i32),
                ArgType::U32 => DecodedValue::U32(Int32Argument::VALUE.get(header) as u32),
                ArgType::I64 => DecodedValue::I64(arg.word()? as i64),
                ArgType::U64 => DecodedValue::U64(arg.word()?),
                ArgType::F64 => DecodedValue::F64(f64::from_bits(arg.word()?)),
                ArgType::Str => DecodedValue::Str(
                    arg.string::<L>(StringArgument::VALUE_REF.get(header), provider)?,
                ),
                ArgType::Pointer => DecodedValue::Pointer(arg.word()?),
                ArgType::Koid => DecodedValue::Koid(arg.word()?),
                ArgType::Bool => DecodedValue::Bool(BoolArgument::VALUE.get(header) != 0),
                ArgType::Blob => {
                    DecodedValue::Blob(L::bytes(arg.stream(BlobArgument::SIZE.get(header))?))
                }
            };
            args.push(DecodedArg { name, value });
        }
        Ok(args)
    }
}

// === impl decode_record ===

/// Decodes one framed record. `Ok(None)` means it was skipped (and counted).
fn decode_record<'a, 'b, L: Lift<'b, 'a>>(
    state: &mut State<'a>,
    rec: &'b [u8],
) -> Result<Option<DecodedRecord<'a>>, DecodeErrorKind> {
    let header = word_at(rec, 0).unwrap_or(0);
    let Some(record_type) = RecordType::from_raw(RecordHeader::TYPE.get(header) as u8) else {
        state.skipped.unknown_record_type += 1;
        return Ok(None);
    };
    let mut r = Reader::new(rec, record_type.name());
    let record = match record_type {
        RecordType::Metadata => return decode_metadata::<L>(state, r),
        RecordType::Initialization => {
            let ticks_per_second = r.word()?;
            if ticks_per_second == 0 {
                return Err(r.malformed("ticks per second is 0"));
            }
            state.parts().0.ticks_per_second = ticks_per_second;
            DecodedRecord::Initialization { ticks_per_second }
        }
        RecordType::String => {
            let index = StringRecord::INDEX.get(header) as u16;
            let value = L::text(r.stream(StringRecord::LENGTH.get(header))?);
            let (provider, skipped) = state.parts();
            if index == 0 {
                skipped.reserved_index += 1;
                return Ok(None);
            }
            provider.set_string(index, value.clone());
            DecodedRecord::String { index, value }
        }
        RecordType::Thread => {
            let index = ThreadRecord::INDEX.get(header) as u8;
            let thread = Thread {
                pid: r.word()?,
                tid: r.word()?,
            };
            let (provider, skipped) = state.parts();
            if index == 0 {
                skipped.reserved_index += 1;
                return Ok(None);
            }
            provider.set_thread(index, thread);
            DecodedRecord::Thread { index, thread }
        }
        RecordType::Event => {
            let (provider, skipped) = state.parts();
            let Some(event_type) = EventType::from_raw(EventRecord::EVENT_TYPE.get(header) as u8)
            else {
                skipped.unknown_event_type += 1;
                return Ok(None);
            };
            let time = provider.time(r.word()?);
            let thread = r.thread(EventRecord::THREAD_REF.get(header), provider)?;
            let category = r.string::<L>(EventRecord::CATEGORY_REF.get(header), provider)?;
            let name = r.string::<L>(EventRecord::NAME_REF.get(header), provider)?;
            let args = r.args::<L>(EventRecord::ARGUMENT_COUNT.get(header), provider, skipped)?;
            let kind = match event_type {
                EventType::Instant => DecodedEventKind::Instant,
                EventType::DurationBegin => DecodedEventKind::DurationBegin,
                EventType::DurationEnd => DecodedEventKind::DurationEnd,
                EventType::Counter => DecodedEventKind::Counter { id: r.word()? },
                EventType::DurationComplete => DecodedEventKind::DurationComplete {
                    end: provider.time(r.word()?),
                },
                EventType::AsyncBegin => DecodedEventKind::AsyncBegin { id: r.word()? },
                EventType::AsyncInstant => DecodedEventKind::AsyncInstant { id: r.word()? },
                EventType::AsyncEnd => DecodedEventKind::AsyncEnd { id: r.word()? },
                EventType::FlowBegin => DecodedEventKind::FlowBegin { id: r.word()? },
                EventType::FlowStep => DecodedEventKind::FlowStep { id: r.word()? },
                EventType::FlowEnd => DecodedEventKind::FlowEnd { id: r.word()? },
            };
            DecodedRecord::Event(DecodedEvent {
                time,
                thread,
                category,
                name,
                args,
                kind,
            })
        }
        RecordType::Blob => {
            let (provider, _) = state.parts();
            let name = r.string::<L>(BlobRecord::NAME_REF.get(header), provider)?;
            let payload = L::bytes(r.stream(BlobRecord::PAYLOAD_SIZE.get(header))?);
            let blob_type = BlobType(BlobRecord::BLOB_TYPE.get(header) as u8);
            DecodedRecord::Blob {
                name,
                blob_type,
                payload,
            }
        }
        RecordType::UserspaceObject => {
            let (provider, skipped) = state.parts();
            let pointer = r.word()?;
            let process_ref = UserspaceObjectRecord::PROCESS_REF.get(header) as u8;
            let pid = if process_ref == 0 {
                r.word()?
            } else {
                r.thread(u64::from(process_ref), provider)?.pid
            };
            let name = r.string::<L>(UserspaceObjectRecord::NAME_REF.get(header), provider)?;
            let args = r.args::<L>(
                UserspaceObjectRecord::ARGUMENT_COUNT.get(header),
                provider,
                skipped,
            )?;
            DecodedRecord::UserspaceObject {
                pointer,
                pid,
                name,
                args,
            }
        }
        RecordType::KernelObject => {
            let (provider, skipped) = state.parts();
            let koid = r.word()?;
            let object_type = ObjectType(KernelObjectRecord::OBJECT_TYPE.get(header) as u8);
            let name = r.string::<L>(KernelObjectRecord::NAME_REF.get(header), provider)?;
            let args = r.args::<L>(
                KernelObjectRecord::ARGUMENT_COUNT.get(header),
                provider,
                skipped,
            )?;
            DecodedRecord::KernelObject {
                koid,
                object_type,
                name,
                args,
            }
        }
        RecordType::Scheduling => return decode_scheduling::<L>(state, r),
        RecordType::Log => {
            let (provider, _) = state.parts();
            let time = provider.time(r.word()?);
            let thread = r.thread(LogRecord::THREAD_REF.get(header), provider)?;
            let message = L::text(r.stream(LogRecord::MESSAGE_LENGTH.get(header))?);
            DecodedRecord::Log {
                time,
                thread,
                message,
            }
        }
        RecordType::LargeRecord => return decode_large::<L>(state, r),
    };
    Ok(Some(record))
}

fn decode_metadata<'a, 'b, L: Lift<'b, 'a>>(
    state: &mut State<'a>,
    mut r: Reader<'b>,
) -> Result<Option<DecodedRecord<'a>>, DecodeErrorKind> {
    let header = r.header;
    let metadata_type = MetadataRecord::METADATA_TYPE.get(header) as u8;
    let Some(metadata_type) = MetadataType::from_raw(metadata_type) else {
        state.skipped.unknown_metadata_type += 1;
        return Ok(None);
    };
    r.record = metadata_type.name();
    let record = match metadata_type {
        MetadataType::ProviderInfo => {
            let provider_id = ProviderInfoMetadata::PROVIDER_ID.get(header) as u32;
            let name = L::text(r.stream(ProviderInfoMetadata::NAME_LENGTH.get(header))?);
            state.switch_to(provider_id);
            DecodedRecord::ProviderInfo { provider_id, name }
        }
        MetadataType::ProviderSection => {
            let provider_id = ProviderSectionMetadata::PROVIDER_ID.get(header) as u32;
            state.switch_to(provider_id);
            DecodedRecord::ProviderSection { provider_id }
        }
        MetadataType::ProviderEvent => DecodedRecord::ProviderEvent {
            provider_id: ProviderEventMetadata::PROVIDER_ID.get(header) as u32,
            event: ProviderEventMetadata::EVENT.get(header) as u8,
        },
        MetadataType::TraceInfo => {
            if TraceInfoMetadata::TRACE_INFO_TYPE.get(header) as u8 != TRACE_INFO_TYPE_MAGIC {
                state.skipped.unknown_metadata_type += 1;
                return Ok(None);
            }
            r.record = "magic number";
            if MagicNumberRecord::MAGIC.get(header) != u64::from(MAGIC_NUMBER) {
                return Err(r.malformed("wrong magic number"));
            }
            if header != MAGIC_WORD {
                return Err(r.malformed("the magic number record must be exactly one word"));
            }
            DecodedRecord::Magic
        }
    };
    Ok(Some(record))
}

fn decode_scheduling<'a, 'b, L: Lift<'b, 'a>>(
    state: &mut State<'a>,
    mut r: Reader<'b>,
) -> Result<Option<DecodedRecord<'a>>, DecodeErrorKind> {
    let header = r.header;
    let (provider, skipped) = state.parts();
    let Some(kind) = SchedulingType::from_raw(SchedulingRecord::SCHEDULING_TYPE.get(header) as u8)
    else {
        skipped.unknown_scheduling_type += 1;
        return Ok(None);
    };
    r.record = kind.name();
    let time = provider.time(r.word()?);
    let record = match kind {
        SchedulingType::LegacyContextSwitch => {
            let outgoing = r.thread(
                ContextSwitchRecord::OUTGOING_THREAD_REF.get(header),
                provider,
            )?;
            let incoming = r.thread(
                ContextSwitchRecord::INCOMING_THREAD_REF.get(header),
                provider,
            )?;
            DecodedRecord::ContextSwitch {
                time,
                cpu: ContextSwitchRecord::CPU.get(header) as u8,
                outgoing_state: ContextSwitchRecord::OUTGOING_STATE.get(header) as u8,
                outgoing,
                incoming,
                outgoing_priority: ContextSwitchRecord::OUTGOING_PRIORITY.get(header) as u8,
                incoming_priority: ContextSwitchRecord::INCOMING_PRIORITY.get(header) as u8,
            }
        }
        SchedulingType::ContextSwitch => {
            let outgoing_tid = r.word()?;
            let incoming_tid = r.word()?;
            let count = SchedContextSwitchRecord::ARGUMENT_COUNT.get(header);
            DecodedRecord::SchedContextSwitch {
                time,
                cpu: SchedContextSwitchRecord::CPU.get(header) as u16,
                outgoing_state: SchedContextSwitchRecord::OUTGOING_STATE.get(header) as u8,
                outgoing_tid,
                incoming_tid,
                args: r.args::<L>(count, provider, skipped)?,
            }
        }
        SchedulingType::ThreadWakeup => {
            let waking_tid = r.word()?;
            let count = SchedThreadWakeupRecord::ARGUMENT_COUNT.get(header);
            DecodedRecord::SchedThreadWakeup {
                time,
                cpu: SchedThreadWakeupRecord::CPU.get(header) as u16,
                waking_tid,
                args: r.args::<L>(count, provider, skipped)?,
            }
        }
    };
    Ok(Some(record))
}

fn decode_large<'a, 'b, L: Lift<'b, 'a>>(
    state: &mut State<'a>,
    mut r: Reader<'b>,
) -> Result<Option<DecodedRecord<'a>>, DecodeErrorKind> {
    let header = r.header;
    let (provider, skipped) = state.parts();
    let format = LargeBlobFormat::from_raw(LargeRecordHeader::BLOB_FORMAT.get(header) as u8);
    let (true, Some(format)) = (
        LargeRecordHeader::LARGE_TYPE.get(header) == u64::from(LARGE_RECORD_TYPE_BLOB),
        format,
    ) else {
        skipped.unknown_large_type += 1;
        return Ok(None);
    };
    r.record = "large blob";
    let format_word = r.word()?;
    let record = match format {
        LargeBlobFormat::WithMetadata => {
            let category = r.string::<L>(
                LargeBlobWithMetadata::CATEGORY_REF.get(format_word),
                provider,
            )?;
            let name = r.string::<L>(LargeBlobWithMetadata::NAME_REF.get(format_word), provider)?;
            let time = provider.time(r.word()?);
            let thread = r.thread(LargeBlobWithMetadata::THREAD_REF.get(format_word), provider)?;
            let count = LargeBlobWithMetadata::ARGUMENT_COUNT.get(format_word);
            let args = r.args::<L>(count, provider, skipped)?;
            let size = r.word()?;
            let payload = L::bytes(r.stream(size)?);
            DecodedRecord::LargeBlob {
                category,
                name,
                metadata: Some(LargeBlobEvent { time, thread, args }),
                payload,
            }
        }
        LargeBlobFormat::Attachment => {
            let category =
                r.string::<L>(LargeBlobAttachment::CATEGORY_REF.get(format_word), provider)?;
            let name = r.string::<L>(LargeBlobAttachment::NAME_REF.get(format_word), provider)?;
            let size = r.word()?;
            let payload = L::bytes(r.stream(size)?);
            DecodedRecord::LargeBlob {
                category,
                name,
                metadata: None,
                payload,
            }
        }
    };
    Ok(Some(record))
}

/// Checks the first word of a trace.
fn check_magic(first: &[u8]) -> Result<(), DecodeErrorKind> {
    match word_at(first, 0) {
        _ if first.is_empty() => Err(DecodeErrorKind::Empty),
        None => Err(DecodeErrorKind::TooShort { len: first.len() }),
        Some(MAGIC_WORD) => Ok(()),
        Some(first_word) => Err(DecodeErrorKind::NotFxt { first_word }),
    }
}

// === impl Decoder ===

/// Zero-copy decoder over a byte slice. Iterates `Result<Decoded<'a>, DecodeError>`; after
/// an error (or the end) it yields `None` forever.
#[derive(Debug)]
pub struct Decoder<'a> {
    bytes: &'a [u8],
    pos: usize,
    state: State<'a>,
    check_magic: bool,
    done: bool,
}

impl<'a> Decoder<'a> {
    /// A decoder for a trace file: the input must start with the magic number record.
    pub fn new(bytes: &'a [u8]) -> Self {
        Decoder {
            bytes,
            pos: 0,
            state: State::default(),
            check_magic: true,
            done: false,
        }
    }

    /// A decoder for a bare sequence of records (e.g. a provider's buffer), no magic needed.
    pub fn bare(bytes: &'a [u8]) -> Self {
        Decoder {
            check_magic: false,
            ..Decoder::new(bytes)
        }
    }

    /// Bytes consumed: the end of the last record decoded or skipped.
    pub fn offset(&self) -> u64 {
        self.pos as u64
    }

    /// What was skipped so far.
    pub fn skipped(&self) -> SkipCounts {
        self.state.skipped
    }

    fn fail(&mut self, kind: DecodeErrorKind) -> Option<Result<Decoded<'a>, DecodeError>> {
        self.done = true;
        Some(Err(DecodeError {
            offset: self.pos as u64,
            kind,
        }))
    }
}

impl<'a> Iterator for Decoder<'a> {
    type Item = Result<Decoded<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if self.check_magic {
            self.check_magic = false;
            if let Err(kind) = check_magic(self.bytes) {
                return self.fail(kind);
            }
        }
        loop {
            let rest = &self.bytes[self.pos..];
            if rest.is_empty() {
                self.done = true;
                return None;
            }
            let Some(header) = word_at(rest, 0) else {
                return self.fail(DecodeErrorKind::Framing(FramingErrorKind::TrailingBytes {
                    len: rest.len(),
                }));
            };
            let len = match check_frame(header, rest.len()) {
                Ok(len) => len,
                Err(kind) => return self.fail(DecodeErrorKind::Framing(kind)),
            };
            let rec: &'a [u8] = &self.bytes[self.pos..self.pos + len];
            match decode_record::<Borrow>(&mut self.state, rec) {
                Ok(Some(record)) => {
                    let offset = self.pos as u64;
                    self.pos += len;
                    return Some(Ok(Decoded {
                        offset,
                        provider: self.state.current,
                        ticks_per_second: self.state.current_ticks_per_second(),
                        record,
                    }));
                }
                Ok(None) => self.pos += len,
                Err(kind) => return self.fail(kind),
            }
        }
    }
}

// === impl StreamDecoder ===

/// Streaming decoder over any `io::Read` (e.g. stdin); records are owned. Reads one record
/// at a time, so memory stays bounded by the largest record.
#[derive(Debug)]
pub struct StreamDecoder<R> {
    reader: R,
    offset: u64,
    buf: Vec<u8>,
    state: State<'static>,
    check_magic: bool,
    done: bool,
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
fn read_full<R: Read>(reader: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match reader.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

impl<R: Read> StreamDecoder<R> {
    /// A decoder for a trace: the input must start with the magic number record.
    pub fn new(reader: R) -> Self {
        StreamDecoder {
            reader,
            offset: 0,
            buf: Vec::new(),
            state: State::default(),
            check_magic: true,
            done: false,
        }
    }

    /// A decoder for a bare sequence of records, no magic needed.
    pub fn bare(reader: R) -> Self {
        StreamDecoder {
            check_magic: false,
            ..StreamDecoder::new(reader)
        }
    }

    /// Bytes consumed: the end of the last record decoded or skipped.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// What was skipped so far.
    pub fn skipped(&self) -> SkipCounts {
        self.state.skipped
    }

    /// The underlying reader.
    pub fn get_ref(&self) -> &R {
        &self.reader
    }

    /// Consumes the decoder, returning the underlying reader.
    pub fn into_inner(self) -> R {
        self.reader
    }

    fn fail(&mut self, kind: DecodeErrorKind) -> Option<Result<Decoded<'static>, DecodeError>> {
        self.done = true;
        Some(Err(DecodeError {
            offset: self.offset,
            kind,
        }))
    }

    /// Reads the next record's bytes into `buf`. `Ok(false)` at a clean end of input.
    fn read_record(&mut self) -> Result<bool, DecodeErrorKind> {
        let mut head = [0u8; 8];
        let n = read_full(&mut self.reader, &mut head)?;
        if self.check_magic {
            self.check_magic = false;
            check_magic(&head[..n])?;
        }
        if n == 0 {
            return Ok(false);
        }
        if n < 8 {
            return Err(DecodeErrorKind::Framing(FramingErrorKind::TrailingBytes {
                len: n,
            }));
        }
        let header = u64::from_ne_bytes(head);
        let words = record_words(header);
        if words == 0 {
            return Err(DecodeErrorKind::Framing(FramingErrorKind::ZeroSize {
                header,
            }));
        }
        let len = words.saturating_mul(8);
        self.buf.clear();
        self.buf.extend_from_slice(&head);
        // `take` bounds the read, and read_to_end grows the buffer only as data arrives,
        // so a corrupt size cannot make us allocate more than the input holds.
        (&mut self.reader)
            .take((len - 8) as u64)
            .read_to_end(&mut self.buf)?;
        if self.buf.len() < len {
            return Err(DecodeErrorKind::Framing(FramingErrorKind::PastEnd {
                header,
                words,
                available: self.buf.len(),
            }));
        }
        Ok(true)
    }
}

impl<R: Read> Iterator for StreamDecoder<R> {
    type Item = Result<Decoded<'static>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.done {
                return None;
            }
            match self.read_record() {
                Ok(true) => {}
                Ok(false) => {
                    self.done = true;
                    return None;
                }
                Err(kind) => return self.fail(kind),
            }
            match decode_record::<Own>(&mut self.state, &self.buf) {
                Ok(Some(record)) => {
                    let offset = self.offset;
                    self.offset += self.buf.len() as u64;
                    return Some(Ok(Decoded {
                        offset,
                        provider: self.state.current,
                        ticks_per_second: self.state.current_ticks_per_second(),
                        record,
                    }));
                }
                Ok(None) => self.offset += self.buf.len() as u64,
                Err(kind) => return self.fail(kind),
            }
        }
    }
}
