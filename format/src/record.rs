//! Record descriptions for encoding, one type per record, each with `words()` and `write()`
//! derived from the same description (see [`Encode`]).
//!
//! The encode path never allocates: records borrow their strings, arguments and payloads,
//! and write into a caller-provided `&mut [u64]`. The in-process engine calls
//! [`Encode::words`], reserves that many words in shared memory, then calls
//! [`Encode::write`] on the slot.

use super::args::{check_arg_count, emit_args, Arg};
use super::error::EncodeError;
use super::fields::{
    BlobRecord, ContextSwitchRecord, EventRecord, KernelObjectRecord, LargeBlobAttachment,
    LargeBlobWithMetadata, LargeRecordHeader, LogRecord, MetadataRecord, ProviderEventMetadata,
    ProviderInfoMetadata, ProviderSectionMetadata, RecordHeader, SchedContextSwitchRecord,
    SchedThreadWakeupRecord, SchedulingRecord, UserspaceObjectRecord,
};
// The bit layouts of String and Thread records share their names with the record types below.
use super::fields;
use super::refs::{ProcessRef, StringRef, ThreadRef};
use super::sink::{Counter, Cursor, Sink, SplitCursor};
use super::types::{
    BlobType, EventType, LargeBlobFormat, MetadataType, ObjectType, RecordType, SchedulingType,
    ThreadState, LARGE_RECORD_TYPE_BLOB, MAGIC_WORD, MAX_BLOB_PAYLOAD, MAX_LARGE_RECORD_WORDS,
    MAX_PROVIDER_EVENT, MAX_PROVIDER_NAME_LEN, MAX_RECORD_WORDS, MAX_STRING_INDEX, MAX_STRING_LEN,
};

/// A record that can be encoded: its exact size first, then its words.
pub trait Encode {
    /// Exact size of the encoded record in 64-bit words, after checking every limit.
    fn words(&self) -> Result<usize, EncodeError>;

    /// Writes the record at the start of `out` and returns the number of words written
    /// (equal to [`Encode::words`]). Never writes past `out`; never allocates. On error the
    /// contents of `out` are unspecified (possibly partly written).
    fn write(&self, out: &mut [u64]) -> Result<usize, EncodeError>;

    /// Writes the record like [`Encode::write`], except that its first word, the header, is
    /// returned instead of stored: `body[i]` receives word `i + 1`. Returns the header and the
    /// number of words of the record (header included). For writers that must publish the
    /// header after the rest of the record: the engine reserves [`Encode::words`] words,
    /// encodes the body in place, then stores the header with `Release`.
    fn write_body(&self, body: &mut [u64]) -> Result<(u64, usize), EncodeError>;
}

/// Implements [`Encode`] for a type with an `emit` description. `counted` types size
/// themselves by running `emit` against a [`Counter`]; `sized` types have a closed-form
/// `size()` (the hot event path), checked against the counted size in debug builds.
macro_rules! encode_via_emit {
    (@words counted, $this:ident) => {{
        let mut counter = Counter::default();
        $this.emit(&mut counter)?;
        Ok(counter.pos())
    }};
    (@words sized, $this:ident) => {{
        let words = $this.size();
        debug_assert_eq!(
            words,
            {
                let mut counter = Counter::default();
                $this.emit(&mut counter).map(|()| counter.pos())
            },
            "size() and the counted emit disagree"
        );
        words
    }};
    ($how:ident: $($ty:ident $(<$lt:lifetime>)?),+ $(,)?) => {$(
        impl $(<$lt>)? Encode for $ty $(<$lt>)? {
            // `sized` records are the engine's hot path: always inline their sizing and body
            // writing so that nothing round-trips through memory.
            #[cfg_attr(not(debug_assertions), inline(always))]
            fn words(&self) -> Result<usize, EncodeError> {
                encode_via_emit!(@words $how, self)
            }

            #[inline]
            fn write(&self, out: &mut [u64]) -> Result<usize, EncodeError> {
                let available = out.len();
                let mut cursor = Cursor::new(out);
                self.emit(&mut cursor)?;
                let written = cursor
                    .finish()
                    .map_err(|needed| EncodeError::BufferTooSmall { needed, available })?;
                debug_assert_eq!(Ok(written), self.words(), "words() and write() disagree");
                Ok(written)
            }

            #[cfg_attr(not(debug_assertions), inline(always))]
            fn write_body(&self, body: &mut [u64]) -> Result<(u64, usize), EncodeError> {
                let available = body.len() + 1;
                let mut cursor = SplitCursor::new(body);
                self.emit(&mut cursor)?;
                let (header, written) = cursor
                    .finish()
                    .map_err(|needed| EncodeError::BufferTooSmall { needed, available })?;
                debug_assert_eq!(Ok(written), self.words(), "words() and write_body() disagree");
                Ok((header, written))
            }
        }
    )+};
}

/// The header word's type bits.
const fn record_type_bits(t: RecordType) -> u64 {
    RecordHeader::TYPE.make(t as u64)
}

/// Checks the finished record's size and patches it into the header at `start`.
#[inline]
fn finish_record<S: Sink>(s: &mut S, start: usize) -> Result<(), EncodeError> {
    let words = s.pos() - start;
    if words > MAX_RECORD_WORDS {
        return Err(EncodeError::RecordTooLarge { words });
    }
    s.patch(start, RecordHeader::SIZE, words as u64);
    Ok(())
}

/// Checks the length of a string written as a bare stream (not through a string ref).
fn check_string(s: &str) -> Result<u64, EncodeError> {
    if s.len() > MAX_STRING_LEN {
        Err(EncodeError::StringTooLong { len: s.len() })
    } else {
        Ok(s.len() as u64)
    }
}

// === impl metadata records ===

/// The magic number record, `0x0016547846040010`: the first word of every trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MagicNumber;

impl MagicNumber {
    fn emit<S: Sink>(&self, s: &mut S) -> Result<(), EncodeError> {
        s.word(MAGIC_WORD);
        Ok(())
    }
}

/// Provider info metadata: a provider's id and name. Begins that provider's section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProviderInfo<'a> {
    /// Provider id (assigned by the trace manager).
    pub provider_id: u32,
    /// Provider name, at most 255 bytes.
    pub name: &'a str,
}

impl ProviderInfo<'_> {
    fn emit<S: Sink>(&self, s: &mut S) -> Result<(), EncodeError> {
        if self.name.len() > MAX_PROVIDER_NAME_LEN {
            return Err(EncodeError::ProviderNameTooLong {
                len: self.name.len(),
            });
        }
        let start = s.pos();
        s.word(
            record_type_bits(RecordType::Metadata)
                | MetadataRecord::METADATA_TYPE.make(MetadataType::ProviderInfo as u64)
                | ProviderInfoMetadata::PROVIDER_ID.make(u64::from(self.provider_id))
                | ProviderInfoMetadata::NAME_LENGTH.make(self.name.len() as u64),
        );
        s.stream(self.name.as_bytes());
        finish_record(s, start)
    }
}

/// Provider section metadata: the records that follow come from this provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProviderSection {
    /// Provider id.
    pub provider_id: u32,
}

impl ProviderSection {
    fn emit<S: Sink>(&self, s: &mut S) -> Result<(), EncodeError> {
        let start = s.pos();
        s.word(
            record_type_bits(RecordType::Metadata)
                | MetadataRecord::METADATA_TYPE.make(MetadataType::ProviderSection as u64)
                | ProviderSectionMetadata::PROVIDER_ID.make(u64::from(self.provider_id)),
        );
        finish_record(s, start)
    }
}

/// Provider event metadata: something happened to a provider (event 0: a buffer filled up
/// and records were likely dropped, [`super::types::PROVIDER_EVENT_BUFFER_OVERFLOW`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProviderEvent {
    /// Provider id.
    pub provider_id: u32,
    /// Event id, 0..=15.
    pub event: u8,
}

impl ProviderEvent {
    fn emit<S: Sink>(&self, s: &mut S) -> Result<(), EncodeError> {
        if self.event > MAX_PROVIDER_EVENT {
            return Err(EncodeError::ProviderEventOutOfRange { event: self.event });
        }
        let start = s.pos();
        s.word(
            record_type_bits(RecordType::Metadata)
                | MetadataRecord::METADATA_TYPE.make(MetadataType::ProviderEvent as u64)
                | ProviderEventMetadata::PROVIDER_ID.make(u64::from(self.provider_id))
                | ProviderEventMetadata::EVENT.make(u64::from(self.event)),
        );
        finish_record(s, start)
    }
}

// === impl Initialization, StringRecord, ThreadRecord ===

/// Initialization record: the number of timestamp ticks per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Initialization {
    /// Ticks per second of the timestamps that follow.
    pub ticks_per_second: u64,
}

impl Initialization {
    fn emit<S: Sink>(&self, s: &mut S) -> Result<(), EncodeError> {
        let start = s.pos();
        s.word(record_type_bits(RecordType::Initialization));
        s.word(self.ticks_per_second);
        finish_record(s, start)
    }
}

/// String record: registers `value` at `index` in the string table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StringRecord<'a> {
    /// Index, 1..=0x7fff.
    pub index: u16,
    /// The string, at most 32000 bytes.
    pub value: &'a str,
}

impl StringRecord<'_> {
    fn emit<S: Sink>(&self, s: &mut S) -> Result<(), EncodeError> {
        if self.index == 0 || self.index > MAX_STRING_INDEX {
            return Err(EncodeError::StringIndexOutOfRange { index: self.index });
        }
        let len = check_string(self.value)?;
        let start = s.pos();
        s.word(
            record_type_bits(RecordType::String)
                | fields::StringRecord::INDEX.make(u64::from(self.index))
                | fields::StringRecord::LENGTH.make(len),
        );
        s.stream(self.value.as_bytes());
        finish_record(s, start)
    }
}

/// Thread record: registers a (process, thread) koid pair at `index` in the thread table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadRecord {
    /// Index, 1..=255.
    pub index: u8,
    /// Process koid (pid).
    pub pid: u64,
    /// Thread koid (tid).
    pub tid: u64,
}

impl ThreadRecord {
    fn emit<S: Sink>(&self, s: &mut S) -> Result<(), EncodeError> {
        if self.index == 0 {
            return Err(EncodeError::ThreadIndexZero);
        }
        let start = s.pos();
        s.word(
            record_type_bits(RecordType::Thread)
                | fields::ThreadRecord::INDEX.make(u64::from(self.index)),
        );
        s.word(self.pid);
        s.word(self.tid);
        finish_record(s, start)
    }
}

// === impl Event ===

/// What kind of event, with its type-specific word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// Instant event.
    Instant,
    /// Counter event; the arguments are the sampled values.
    Counter {
        /// Counter id.
        id: u64,
    },
    /// Duration begin.
    DurationBegin,
    /// Duration end.
    DurationEnd,
    /// Duration complete.
    DurationComplete {
        /// End time in ticks.
        end_ticks: u64,
    },
    /// Async begin.
    AsyncBegin {
        /// Async correlation id.
        id: u64,
    },
    /// Async instant.
    AsyncInstant {
        /// Async correlation id.
        id: u64,
    },
    /// Async end.
    AsyncEnd {
        /// Async correlation id.
        id: u64,
    },
    /// Flow begin.
    FlowBegin {
        /// Flow correlation id.
        id: u64,
    },
    /// Flow step.
    FlowStep {
        /// Flow correlation id.
        id: u64,
    },
    /// Flow end.
    FlowEnd {
        /// Flow correlation id.
        id: u64,
    },
}

impl EventKind {
    /// The event type number.
    pub const fn event_type(&self) -> EventType {
        match self {
            EventKind::Instant => EventType::Instant,
            EventKind::Counter { .. } => EventType::Counter,
            EventKind::DurationBegin => EventType::DurationBegin,
            EventKind::DurationEnd => EventType::DurationEnd,
            EventKind::DurationComplete { .. } => EventType::DurationComplete,
            EventKind::AsyncBegin { .. } => EventType::AsyncBegin,
            EventKind::AsyncInstant { .. } => EventType::AsyncInstant,
            EventKind::AsyncEnd { .. } => EventType::AsyncEnd,
            EventKind::FlowBegin { .. } => EventType::FlowBegin,
            EventKind::FlowStep { .. } => EventType::FlowStep,
            EventKind::FlowEnd { .. } => EventType::FlowEnd,
        }
    }

    /// The event-type specific word written after the arguments, if any.
    pub const fn data_word(&self) -> Option<u64> {
        match *self {
            EventKind::Instant | EventKind::DurationBegin | EventKind::DurationEnd => None,
            EventKind::Counter { id }
            | EventKind::AsyncBegin { id }
            | EventKind::AsyncInstant { id }
            | EventKind::AsyncEnd { id }
            | EventKind::FlowBegin { id }
            | EventKind::FlowStep { id }
            | EventKind::FlowEnd { id } => Some(id),
            EventKind::DurationComplete { end_ticks } => Some(end_ticks),
        }
    }

    /// The kind for event type `t` with its type-specific word (ignored by kinds without one).
    pub const fn from_parts(t: EventType, data: u64) -> EventKind {
        match t {
            EventType::Instant => EventKind::Instant,
            EventType::Counter => EventKind::Counter { id: data },
            EventType::DurationBegin => EventKind::DurationBegin,
            EventType::DurationEnd => EventKind::DurationEnd,
            EventType::DurationComplete => EventKind::DurationComplete { end_ticks: data },
            EventType::AsyncBegin => EventKind::AsyncBegin { id: data },
            EventType::AsyncInstant => EventKind::AsyncInstant { id: data },
            EventType::AsyncEnd => EventKind::AsyncEnd { id: data },
            EventType::FlowBegin => EventKind::FlowBegin { id: data },
            EventType::FlowStep => EventKind::FlowStep { id: data },
            EventType::FlowEnd => EventKind::FlowEnd { id: data },
        }
    }
}

/// Event record: a timestamped event on a thread, with category, name and arguments.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Event<'a> {
    /// Timestamp in ticks.
    pub ticks: u64,
    /// The thread the event happened on.
    pub thread: ThreadRef,
    /// Category.
    pub category: StringRef<'a>,
    /// Name.
    pub name: StringRef<'a>,
    /// Arguments, at most 15.
    pub args: &'a [Arg<'a>],
    /// Event type and its type-specific data.
    pub kind: EventKind,
}

impl Event<'_> {
    /// The encoded size without a counting pass: the same checks, in the same order, as
    /// `emit`.
    #[inline(always)]
    fn size(&self) -> Result<usize, EncodeError> {
        self.thread.encode()?;
        self.category.encode()?;
        self.name.encode()?;
        check_arg_count(self.args)?;
        let mut words = 2
            + self.thread.inline_words()
            + self.category.stream_words()
            + self.name.stream_words()
            + usize::from(self.kind.data_word().is_some());
        for arg in self.args {
            words += arg.words()?;
        }
        if words > MAX_RECORD_WORDS {
            return Err(EncodeError::RecordTooLarge { words });
        }
        Ok(words)
    }

    #[inline(always)]
    fn emit<S: Sink>(&self, s: &mut S) -> Result<(), EncodeError> {
        let thread = self.thread.encode()?;
        let category = self.category.encode()?;
        let name = self.name.encode()?;
        let count = check_arg_count(self.args)?;
        let start = s.pos();
        s.word(
            record_type_bits(RecordType::Event)
                | EventRecord::EVENT_TYPE.make(self.kind.event_type() as u64)
                | EventRecord::ARGUMENT_COUNT.make(count)
                | EventRecord::THREAD_REF.make(u64::from(thread))
                | EventRecord::CATEGORY_REF.make(u64::from(category))
                | EventRecord::NAME_REF.make(u64::from(name)),
        );
        s.word(self.ticks);
        self.thread.emit_inline(s);
        self.category.emit_stream(s);
        self.name.emit_stream(s);
        emit_args(self.args, s)?;
        if let Some(word) = self.kind.data_word() {
            s.word(word);
        }
        finish_record(s, start)
    }
}

// === impl Blob ===

/// Blob record: bulk data of some [`BlobType`], named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blob<'a> {
    /// Blob name (blobs with the same name form one stream).
    pub name: StringRef<'a>,
    /// Blob type ([`BlobType::DATA`], [`BlobType::LAST_BRANCH`], or any other byte).
    pub blob_type: BlobType,
    /// Payload, at most 32767 bytes and within the record size limit.
    pub payload: &'a [u8],
}

impl Blob<'_> {
    fn emit<S: Sink>(&self, s: &mut S) -> Result<(), EncodeError> {
        if self.payload.len() > MAX_BLOB_PAYLOAD {
            return Err(EncodeError::BlobTooLarge {
                len: self.payload.len(),
            });
        }
        let name = self.name.encode()?;
        let start = s.pos();
        s.word(
            record_type_bits(RecordType::Blob)
                | BlobRecord::NAME_REF.make(u64::from(name))
                | BlobRecord::PAYLOAD_SIZE.make(self.payload.len() as u64)
                | BlobRecord::BLOB_TYPE.make(u64::from(self.blob_type.0)),
        );
        self.name.emit_stream(s);
        s.stream(self.payload);
        finish_record(s, start)
    }
}

// === impl UserspaceObject, KernelObject ===

/// Userspace object record: labels a pointer-like value in a process.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UserspaceObject<'a> {
    /// The pointer value.
    pub pointer: u64,
    /// The process the pointer belongs to.
    pub process: ProcessRef,
    /// Label.
    pub name: StringRef<'a>,
    /// Arguments, at most 15.
    pub args: &'a [Arg<'a>],
}

impl UserspaceObject<'_> {
    fn emit<S: Sink>(&self, s: &mut S) -> Result<(), EncodeError> {
        let process = self.process.encode()?;
        let name = self.name.encode()?;
        let count = check_arg_count(self.args)?;
        let start = s.pos();
        s.word(
            record_type_bits(RecordType::UserspaceObject)
                | UserspaceObjectRecord::PROCESS_REF.make(u64::from(process))
                | UserspaceObjectRecord::NAME_REF.make(u64::from(name))
                | UserspaceObjectRecord::ARGUMENT_COUNT.make(count),
        );
        s.word(self.pointer);
        self.process.emit_inline(s);
        self.name.emit_stream(s);
        emit_args(self.args, s)?;
        finish_record(s, start)
    }
}

/// Kernel object record: labels a koid (on Linux: a process by pid or a thread by tid,
/// with a `"process"` koid argument for threads).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KernelObject<'a> {
    /// The koid.
    pub koid: u64,
    /// Object type ([`ObjectType::PROCESS`], [`ObjectType::THREAD`], …).
    pub object_type: ObjectType,
    /// Name.
    pub name: StringRef<'a>,
    /// Arguments, at most 15.
    pub args: &'a [Arg<'a>],
}

impl KernelObject<'_> {
    fn emit<S: Sink>(&self, s: &mut S) -> Result<(), EncodeError> {
        let name = self.name.encode()?;
        let count = check_arg_count(self.args)?;
        let start = s.pos();
        s.word(
            record_type_bits(RecordType::KernelObject)
                | KernelObjectRecord::OBJECT_TYPE.make(u64::from(self.object_type.0))
                | KernelObjectRecord::NAME_REF.make(u64::from(name))
                | KernelObjectRecord::ARGUMENT_COUNT.make(count),
        );
        s.word(self.koid);
        self.name.emit_stream(s);
        emit_args(self.args, s)?;
        finish_record(s, start)
    }
}

// === impl scheduling records ===

/// Context switch record in the seed spec's layout (record type 8, scheduling type 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextSwitch {
    /// Timestamp in ticks.
    pub ticks: u64,
    /// CPU number (8 bits in this layout).
    pub cpu: u8,
    /// State of the outgoing thread after the switch.
    pub outgoing_state: ThreadState,
    /// The thread switched out.
    pub outgoing: ThreadRef,
    /// The thread switched in.
    pub incoming: ThreadRef,
    /// Priority of the outgoing thread.
    pub outgoing_priority: u8,
    /// Priority of the incoming thread.
    pub incoming_priority: u8,
}

impl ContextSwitch {
    fn emit<S: Sink>(&self, s: &mut S) -> Result<(), EncodeError> {
        let outgoing = self.outgoing.encode()?;
        let incoming = self.incoming.encode()?;
        let start = s.pos();
        s.word(
            record_type_bits(RecordType::Scheduling)
                | ContextSwitchRecord::CPU.make(u64::from(self.cpu))
                | ContextSwitchRecord::OUTGOING_STATE.make(self.outgoing_state as u64)
                | ContextSwitchRecord::OUTGOING_THREAD_REF.make(u64::from(outgoing))
                | ContextSwitchRecord::INCOMING_THREAD_REF.make(u64::from(incoming))
                | ContextSwitchRecord::OUTGOING_PRIORITY.make(u64::from(self.outgoing_priority))
                | ContextSwitchRecord::INCOMING_PRIORITY.make(u64::from(self.incoming_priority))
                | SchedulingRecord::SCHEDULING_TYPE
                    .make(SchedulingType::LegacyContextSwitch as u64),
        );
        s.word(self.ticks);
        self.outgoing.emit_inline(s);
        self.incoming.emit_inline(s);
        finish_record(s, start)
    }
}

/// Context switch by thread id (record type 8, scheduling type 1), as newer Fuchsia writers
/// emit it. Conventional arguments: `incoming_weight`, `outgoing_weight` (i32).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SchedContextSwitch<'a> {
    /// Timestamp in ticks.
    pub ticks: u64,
    /// CPU number (16 bits).
    pub cpu: u16,
    /// State of the outgoing thread after the switch.
    pub outgoing_state: ThreadState,
    /// Outgoing thread koid (tid).
    pub outgoing_tid: u64,
    /// Incoming thread koid (tid).
    pub incoming_tid: u64,
    /// Arguments, at most 15.
    pub args: &'a [Arg<'a>],
}

impl SchedContextSwitch<'_> {
    fn emit<S: Sink>(&self, s: &mut S) -> Result<(), EncodeError> {
        let count = check_arg_count(self.args)?;
        let start = s.pos();
        s.word(
            record_type_bits(RecordType::Scheduling)
                | SchedContextSwitchRecord::ARGUMENT_COUNT.make(count)
                | SchedContextSwitchRecord::CPU.make(u64::from(self.cpu))
                | SchedContextSwitchRecord::OUTGOING_STATE.make(self.outgoing_state as u64)
                | SchedulingRecord::SCHEDULING_TYPE.make(SchedulingType::ContextSwitch as u64),
        );
        s.word(self.ticks);
        s.word(self.outgoing_tid);
        s.word(self.incoming_tid);
        emit_args(self.args, s)?;
        finish_record(s, start)
    }
}

/// Thread wakeup (record type 8, scheduling type 2), as newer Fuchsia writers emit it.
/// Conventional arguments: `waker` (koid), `weight` (i32).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SchedThreadWakeup<'a> {
    /// Timestamp in ticks.
    pub ticks: u64,
    /// CPU number (16 bits).
    pub cpu: u16,
    /// The woken thread's koid (tid).
    pub waking_tid: u64,
    /// Arguments, at most 15.
    pub args: &'a [Arg<'a>],
}

impl SchedThreadWakeup<'_> {
    fn emit<S: Sink>(&self, s: &mut S) -> Result<(), EncodeError> {
        let count = check_arg_count(self.args)?;
        let start = s.pos();
        s.word(
            record_type_bits(RecordType::Scheduling)
                | SchedThreadWakeupRecord::ARGUMENT_COUNT.make(count)
                | SchedThreadWakeupRecord::CPU.make(u64::from(self.cpu))
                | SchedulingRecord::SCHEDULING_TYPE.make(SchedulingType::ThreadWakeup as u64),
        );
        s.word(self.ticks);
        s.word(self.waking_tid);
        emit_args(self.args, s)?;
        finish_record(s, start)
    }
}

// === impl Log ===

/// Log record: a message written at a moment on a thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Log<'a> {
    /// Timestamp in ticks.
    pub ticks: u64,
    /// The thread that logged.
    pub thread: ThreadRef,
    /// The message, at most 32000 bytes.
    pub message: &'a str,
}

impl Log<'_> {
    fn emit<S: Sink>(&self, s: &mut S) -> Result<(), EncodeError> {
        let thread = self.thread.encode()?;
        let len = check_string(self.message)?;
        let start = s.pos();
        s.word(
            record_type_bits(RecordType::Log)
                | LogRecord::MESSAGE_LENGTH.make(len)
                | LogRecord::THREAD_REF.make(u64::from(thread)),
        );
        s.word(self.ticks);
        self.thread.emit_inline(s);
        s.stream(self.message.as_bytes());
        finish_record(s, start)
    }
}

// === impl LargeBlob ===

/// The event part of a large blob with metadata (large blob format 0).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LargeBlobMetadata<'a> {
    /// Timestamp in ticks.
    pub ticks: u64,
    /// The thread.
    pub thread: ThreadRef,
    /// Arguments, at most 15.
    pub args: &'a [Arg<'a>],
}

/// Large blob record (record type 15, large type 0), as newer writers emit it: with
/// metadata (format 0) when `metadata` is set, else an attachment (format 1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LargeBlob<'a> {
    /// Category.
    pub category: StringRef<'a>,
    /// Name.
    pub name: StringRef<'a>,
    /// Timestamp, thread and arguments (format 0), or none (format 1).
    pub metadata: Option<LargeBlobMetadata<'a>>,
    /// Payload; the record may be up to 2^32 − 1 words.
    pub payload: &'a [u8],
}

impl LargeBlob<'_> {
    fn emit<S: Sink>(&self, s: &mut S) -> Result<(), EncodeError> {
        let category = u64::from(self.category.encode()?);
        let name = u64::from(self.name.encode()?);
        let (format, format_word) = match &self.metadata {
            Some(meta) => (
                LargeBlobFormat::WithMetadata,
                LargeBlobWithMetadata::CATEGORY_REF.make(category)
                    | LargeBlobWithMetadata::NAME_REF.make(name)
                    | LargeBlobWithMetadata::ARGUMENT_COUNT.make(check_arg_count(meta.args)?)
                    | LargeBlobWithMetadata::THREAD_REF.make(u64::from(meta.thread.encode()?)),
            ),
            None => (
                LargeBlobFormat::Attachment,
                LargeBlobAttachment::CATEGORY_REF.make(category)
                    | LargeBlobAttachment::NAME_REF.make(name),
            ),
        };
        let payload_words = super::sink::stream_words(self.payload.len());
        if payload_words > MAX_LARGE_RECORD_WORDS {
            return Err(EncodeError::LargeRecordTooLarge {
                words: payload_words,
            });
        }
        let start = s.pos();
        s.word(
            LargeRecordHeader::TYPE.make(RecordType::LargeRecord as u64)
                | LargeRecordHeader::LARGE_TYPE.make(u64::from(LARGE_RECORD_TYPE_BLOB))
                | LargeRecordHeader::BLOB_FORMAT.make(format as u64),
        );
        s.word(format_word);
        self.category.emit_stream(s);
        self.name.emit_stream(s);
        if let Some(meta) = &self.metadata {
            s.word(meta.ticks);
            meta.thread.emit_inline(s);
            emit_args(meta.args, s)?;
        }
        s.word(self.payload.len() as u64);
        s.stream(self.payload);
        let words = s.pos() - start;
        if words > MAX_LARGE_RECORD_WORDS {
            return Err(EncodeError::LargeRecordTooLarge { words });
        }
        s.patch(start, LargeRecordHeader::SIZE, words as u64);
        Ok(())
    }
}

// === impl Record ===

/// Any record.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Record<'a> {
    /// Magic number.
    MagicNumber(MagicNumber),
    /// Provider info metadata.
    ProviderInfo(ProviderInfo<'a>),
    /// Provider section metadata.
    ProviderSection(ProviderSection),
    /// Provider event metadata.
    ProviderEvent(ProviderEvent),
    /// Initialization.
    Initialization(Initialization),
    /// String table entry.
    String(StringRecord<'a>),
    /// Thread table entry.
    Thread(ThreadRecord),
    /// Event.
    Event(Event<'a>),
    /// Blob.
    Blob(Blob<'a>),
    /// Userspace object.
    UserspaceObject(UserspaceObject<'a>),
    /// Kernel object.
    KernelObject(KernelObject<'a>),
    /// Context switch, seed layout.
    ContextSwitch(ContextSwitch),
    /// Context switch by tid (scheduling type 1).
    SchedContextSwitch(SchedContextSwitch<'a>),
    /// Thread wakeup (scheduling type 2).
    SchedThreadWakeup(SchedThreadWakeup<'a>),
    /// Log.
    Log(Log<'a>),
    /// Large blob.
    LargeBlob(LargeBlob<'a>),
}

impl Record<'_> {
    fn emit<S: Sink>(&self, s: &mut S) -> Result<(), EncodeError> {
        match self {
            Record::MagicNumber(r) => r.emit(s),
            Record::ProviderInfo(r) => r.emit(s),
            Record::ProviderSection(r) => r.emit(s),
            Record::ProviderEvent(r) => r.emit(s),
            Record::Initialization(r) => r.emit(s),
            Record::String(r) => r.emit(s),
            Record::Thread(r) => r.emit(s),
            Record::Event(r) => r.emit(s),
            Record::Blob(r) => r.emit(s),
            Record::UserspaceObject(r) => r.emit(s),
            Record::KernelObject(r) => r.emit(s),
            Record::ContextSwitch(r) => r.emit(s),
            Record::SchedContextSwitch(r) => r.emit(s),
            Record::SchedThreadWakeup(r) => r.emit(s),
            Record::Log(r) => r.emit(s),
            Record::LargeBlob(r) => r.emit(s),
        }
    }
}

/// `From<T> for Record` for each record type.
macro_rules! into_record {
    ($($variant:ident($ty:ident $(<$lt:lifetime>)?)),+ $(,)?) => {$(
        impl<'a> From<$ty $(<$lt>)?> for Record<'a> {
            fn from(r: $ty $(<$lt>)?) -> Self {
                Record::$variant(r)
            }
        }
    )+};
}

into_record!(
    MagicNumber(MagicNumber),
    ProviderInfo(ProviderInfo<'a>),
    ProviderSection(ProviderSection),
    ProviderEvent(ProviderEvent),
    Initialization(Initialization),
    String(StringRecord<'a>),
    Thread(ThreadRecord),
    Event(Event<'a>),
    Blob(Blob<'a>),
    UserspaceObject(UserspaceObject<'a>),
    KernelObject(KernelObject<'a>),
    ContextSwitch(ContextSwitch),
    SchedContextSwitch(SchedContextSwitch<'a>),
    SchedThreadWakeup(SchedThreadWakeup<'a>),
    Log(Log<'a>),
    LargeBlob(LargeBlob<'a>),
);

encode_via_emit!(sized: Event<'a>);

encode_via_emit!(
    counted: MagicNumber,
    ProviderInfo<'a>,
    ProviderSection,
    ProviderEvent,
    Initialization,
    StringRecord<'a>,
    ThreadRecord,
    Blob<'a>,
    UserspaceObject<'a>,
    KernelObject<'a>,
    ContextSwitch,
    SchedContextSwitch<'a>,
    SchedThreadWakeup<'a>,
    Log<'a>,
    LargeBlob<'a>,
    Record<'a>,
);
