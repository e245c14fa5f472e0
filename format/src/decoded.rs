//! Decoded records: strings and threads resolved, timestamps in ticks and nanoseconds.
//!
//! Strings are `Cow<str>`: borrowed from the input (or the decoder's tables) when valid
//! UTF-8, owned otherwise (invalid bytes are replaced, as kernel object names may not be
//! UTF-8), and owned in the records the streaming decoder's iterator yields
//! ([`Decoded::into_owned`]). Argument lists are [`DecodedArgs`]: lent from a list the decoder
//! reuses, or owned.

use std::borrow::Cow;
use std::fmt;

use super::lbr::LbrSample;
use super::mmap::{MmapRecord, MMAP_BLOB_NAME};
use super::stack::{
    KernelSymbolRecord, SampleRecord, StackRecord, KSYM_BLOB_NAME, SAMPLE_BLOB_NAME,
    STACK_BLOB_NAME,
};
use super::types::{BlobType, EventType, ObjectType, ThreadState, PROVIDER_EVENT_BUFFER_OVERFLOW};

/// What a record is: one value per [`DecodedRecord`] variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum RecordKind {
    /// [`DecodedRecord::Magic`].
    Magic,
    /// [`DecodedRecord::ProviderInfo`].
    ProviderInfo,
    /// [`DecodedRecord::ProviderSection`].
    ProviderSection,
    /// [`DecodedRecord::ProviderEvent`].
    ProviderEvent,
    /// [`DecodedRecord::Initialization`].
    Initialization,
    /// [`DecodedRecord::String`].
    String,
    /// [`DecodedRecord::Thread`].
    Thread,
    /// [`DecodedRecord::Event`].
    Event,
    /// [`DecodedRecord::Blob`].
    Blob,
    /// [`DecodedRecord::UserspaceObject`].
    UserspaceObject,
    /// [`DecodedRecord::KernelObject`].
    KernelObject,
    /// [`DecodedRecord::ContextSwitch`].
    ContextSwitch,
    /// [`DecodedRecord::SchedContextSwitch`].
    SchedContextSwitch,
    /// [`DecodedRecord::SchedThreadWakeup`].
    SchedThreadWakeup,
    /// [`DecodedRecord::Log`].
    Log,
    /// [`DecodedRecord::LargeBlob`].
    LargeBlob,
}

impl RecordKind {
    /// Every kind, in order.
    pub const ALL: [RecordKind; 16] = [
        RecordKind::Magic,
        RecordKind::ProviderInfo,
        RecordKind::ProviderSection,
        RecordKind::ProviderEvent,
        RecordKind::Initialization,
        RecordKind::String,
        RecordKind::Thread,
        RecordKind::Event,
        RecordKind::Blob,
        RecordKind::UserspaceObject,
        RecordKind::KernelObject,
        RecordKind::ContextSwitch,
        RecordKind::SchedContextSwitch,
        RecordKind::SchedThreadWakeup,
        RecordKind::Log,
        RecordKind::LargeBlob,
    ];

    /// A short name, as `dump` and `stats` print it (`dump --type` takes it).
    pub const fn name(self) -> &'static str {
        match self {
            RecordKind::Magic => "magic",
            RecordKind::ProviderInfo => "provider_info",
            RecordKind::ProviderSection => "provider_section",
            RecordKind::ProviderEvent => "provider_event",
            RecordKind::Initialization => "initialization",
            RecordKind::String => "string",
            RecordKind::Thread => "thread",
            RecordKind::Event => "event",
            RecordKind::Blob => "blob",
            RecordKind::UserspaceObject => "userspace_object",
            RecordKind::KernelObject => "kernel_object",
            RecordKind::ContextSwitch => "context_switch",
            RecordKind::SchedContextSwitch => "sched_context_switch",
            RecordKind::SchedThreadWakeup => "thread_wakeup",
            RecordKind::Log => "log",
            RecordKind::LargeBlob => "large_blob",
        }
    }

    /// The kind named `name` ([`RecordKind::name`]).
    pub fn from_name(name: &str) -> Option<RecordKind> {
        RecordKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// A timestamp: the raw ticks and their value in nanoseconds at the provider's ticks per
/// second (1 tick = 1 ns when no initialization record was seen).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp {
    /// Raw ticks as written.
    pub ticks: u64,
    /// Nanoseconds.
    pub ns: u64,
}

/// A thread resolved from a thread ref: process and thread koids (pid and tid on Linux).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Thread {
    /// Process koid.
    pub pid: u64,
    /// Thread koid.
    pub tid: u64,
}

impl fmt::Display for Thread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pid={} tid={}", self.pid, self.tid)
    }
}

/// A decoded argument value.
#[derive(Debug, Clone, PartialEq)]
pub enum DecodedValue<'a> {
    /// Type 0.
    Null,
    /// Type 1.
    I32(i32),
    /// Type 2.
    U32(u32),
    /// Type 3.
    I64(i64),
    /// Type 4.
    U64(u64),
    /// Type 5.
    F64(f64),
    /// Type 6, resolved.
    Str(Cow<'a, str>),
    /// Type 7.
    Pointer(u64),
    /// Type 8.
    Koid(u64),
    /// Type 9.
    Bool(bool),
    /// Type 10.
    Blob(Cow<'a, [u8]>),
}

impl DecodedValue<'_> {
    /// The argument type's name (`i32`, `str`, …).
    pub fn type_name(&self) -> &'static str {
        match self {
            DecodedValue::Null => "null",
            DecodedValue::I32(_) => "i32",
            DecodedValue::U32(_) => "u32",
            DecodedValue::I64(_) => "i64",
            DecodedValue::U64(_) => "u64",
            DecodedValue::F64(_) => "f64",
            DecodedValue::Str(_) => "str",
            DecodedValue::Pointer(_) => "pointer",
            DecodedValue::Koid(_) => "koid",
            DecodedValue::Bool(_) => "bool",
            DecodedValue::Blob(_) => "blob",
        }
    }
}

impl fmt::Display for DecodedValue<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodedValue::Null => f.write_str("null"),
            DecodedValue::I32(v) => write!(f, "i32({v})"),
            DecodedValue::U32(v) => write!(f, "u32({v})"),
            DecodedValue::I64(v) => write!(f, "i64({v})"),
            DecodedValue::U64(v) => write!(f, "u64({v})"),
            DecodedValue::F64(v) => write!(f, "f64({v:?})"),
            DecodedValue::Str(v) => write!(f, "str({v:?})"),
            DecodedValue::Pointer(v) => write!(f, "pointer({v:#x})"),
            DecodedValue::Koid(v) => write!(f, "koid({v})"),
            DecodedValue::Bool(v) => write!(f, "bool({v})"),
            DecodedValue::Blob(v) => write!(f, "blob({} bytes: {})", v.len(), Hex(v)),
        }
    }
}

/// A decoded argument.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedArg<'a> {
    /// Name, resolved.
    pub name: Cow<'a, str>,
    /// Value.
    pub value: DecodedValue<'a>,
}

/// A record's arguments: lent by the decoder (a list it reuses from record to record) or
/// owned. Reads as a slice (`Deref<Target = [DecodedArg]>`).
#[derive(Debug, Clone)]
pub enum DecodedArgs<'a> {
    /// Borrowed from the decoder.
    Lent(&'a [DecodedArg<'a>]),
    /// The record's own.
    Owned(Vec<DecodedArg<'a>>),
}

impl Default for DecodedArgs<'_> {
    fn default() -> Self {
        DecodedArgs::Lent(&[])
    }
}

impl<'a> std::ops::Deref for DecodedArgs<'a> {
    type Target = [DecodedArg<'a>];

    fn deref(&self) -> &[DecodedArg<'a>] {
        match self {
            DecodedArgs::Lent(args) => args,
            DecodedArgs::Owned(args) => args,
        }
    }
}

/// The arguments by value (a lent list is copied).
impl<'a> IntoIterator for DecodedArgs<'a> {
    type Item = DecodedArg<'a>;
    type IntoIter = std::vec::IntoIter<DecodedArg<'a>>;

    fn into_iter(self) -> Self::IntoIter {
        match self {
            // One iterator type for both: the lent list copied into a vector.
            #[allow(clippy::unnecessary_to_owned)]
            DecodedArgs::Lent(args) => args.to_vec().into_iter(),
            DecodedArgs::Owned(args) => args.into_iter(),
        }
    }
}

impl<'a> From<Vec<DecodedArg<'a>>> for DecodedArgs<'a> {
    fn from(args: Vec<DecodedArg<'a>>) -> Self {
        DecodedArgs::Owned(args)
    }
}

impl<'a> PartialEq for DecodedArgs<'a> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl<'a> PartialEq<[DecodedArg<'a>]> for DecodedArgs<'a> {
    fn eq(&self, other: &[DecodedArg<'a>]) -> bool {
        **self == *other
    }
}

impl<'a> PartialEq<Vec<DecodedArg<'a>>> for DecodedArgs<'a> {
    fn eq(&self, other: &Vec<DecodedArg<'a>>) -> bool {
        **self == **other
    }
}

impl<'a, const N: usize> PartialEq<[DecodedArg<'a>; N]> for DecodedArgs<'a> {
    fn eq(&self, other: &[DecodedArg<'a>; N]) -> bool {
        **self == other[..]
    }
}

impl DecodedValue<'_> {
    /// The value with owned strings and bytes.
    pub fn into_owned(self) -> DecodedValue<'static> {
        match self {
            DecodedValue::Null => DecodedValue::Null,
            DecodedValue::I32(v) => DecodedValue::I32(v),
            DecodedValue::U32(v) => DecodedValue::U32(v),
            DecodedValue::I64(v) => DecodedValue::I64(v),
            DecodedValue::U64(v) => DecodedValue::U64(v),
            DecodedValue::F64(v) => DecodedValue::F64(v),
            DecodedValue::Str(v) => DecodedValue::Str(Cow::Owned(v.into_owned())),
            DecodedValue::Pointer(v) => DecodedValue::Pointer(v),
            DecodedValue::Koid(v) => DecodedValue::Koid(v),
            DecodedValue::Bool(v) => DecodedValue::Bool(v),
            DecodedValue::Blob(v) => DecodedValue::Blob(Cow::Owned(v.into_owned())),
        }
    }
}

impl DecodedArg<'_> {
    /// The argument with owned strings and bytes.
    pub fn into_owned(self) -> DecodedArg<'static> {
        DecodedArg {
            name: Cow::Owned(self.name.into_owned()),
            value: self.value.into_owned(),
        }
    }
}

fn owned_str(s: Cow<'_, str>) -> Cow<'static, str> {
    Cow::Owned(s.into_owned())
}

fn owned_args(args: DecodedArgs<'_>) -> DecodedArgs<'static> {
    let owned = match args {
        DecodedArgs::Lent(args) => args.iter().map(|a| a.clone().into_owned()).collect(),
        DecodedArgs::Owned(args) => args.into_iter().map(DecodedArg::into_owned).collect(),
    };
    DecodedArgs::Owned(owned)
}

/// Event type with its type-specific data, end time converted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodedEventKind {
    /// Instant.
    Instant,
    /// Counter with its id.
    Counter {
        /// Counter id.
        id: u64,
    },
    /// Duration begin.
    DurationBegin,
    /// Duration end.
    DurationEnd,
    /// Duration complete with its end time.
    DurationComplete {
        /// End time.
        end: Timestamp,
    },
    /// Async begin.
    AsyncBegin {
        /// Correlation id.
        id: u64,
    },
    /// Async instant.
    AsyncInstant {
        /// Correlation id.
        id: u64,
    },
    /// Async end.
    AsyncEnd {
        /// Correlation id.
        id: u64,
    },
    /// Flow begin.
    FlowBegin {
        /// Correlation id.
        id: u64,
    },
    /// Flow step.
    FlowStep {
        /// Correlation id.
        id: u64,
    },
    /// Flow end.
    FlowEnd {
        /// Correlation id.
        id: u64,
    },
}

impl DecodedEventKind {
    /// The event type.
    pub const fn event_type(&self) -> EventType {
        match self {
            DecodedEventKind::Instant => EventType::Instant,
            DecodedEventKind::Counter { .. } => EventType::Counter,
            DecodedEventKind::DurationBegin => EventType::DurationBegin,
            DecodedEventKind::DurationEnd => EventType::DurationEnd,
            DecodedEventKind::DurationComplete { .. } => EventType::DurationComplete,
            DecodedEventKind::AsyncBegin { .. } => EventType::AsyncBegin,
            DecodedEventKind::AsyncInstant { .. } => EventType::AsyncInstant,
            DecodedEventKind::AsyncEnd { .. } => EventType::AsyncEnd,
            DecodedEventKind::FlowBegin { .. } => EventType::FlowBegin,
            DecodedEventKind::FlowStep { .. } => EventType::FlowStep,
            DecodedEventKind::FlowEnd { .. } => EventType::FlowEnd,
        }
    }

    /// The correlation or counter id, for kinds that have one.
    pub const fn id(&self) -> Option<u64> {
        match *self {
            DecodedEventKind::Counter { id }
            | DecodedEventKind::AsyncBegin { id }
            | DecodedEventKind::AsyncInstant { id }
            | DecodedEventKind::AsyncEnd { id }
            | DecodedEventKind::FlowBegin { id }
            | DecodedEventKind::FlowStep { id }
            | DecodedEventKind::FlowEnd { id } => Some(id),
            _ => None,
        }
    }
}

/// A decoded event record.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedEvent<'a> {
    /// Timestamp.
    pub time: Timestamp,
    /// Thread.
    pub thread: Thread,
    /// Category.
    pub category: Cow<'a, str>,
    /// Name.
    pub name: Cow<'a, str>,
    /// Arguments (unknown argument types skipped and counted).
    pub args: DecodedArgs<'a>,
    /// Event type and data.
    pub kind: DecodedEventKind,
}

/// The event part of a large blob with metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct LargeBlobEvent<'a> {
    /// Timestamp.
    pub time: Timestamp,
    /// Thread.
    pub thread: Thread,
    /// Arguments.
    pub args: DecodedArgs<'a>,
}

/// One decoded record.
#[derive(Debug, Clone, PartialEq)]
pub enum DecodedRecord<'a> {
    /// The magic number record.
    Magic,
    /// Provider info metadata.
    ProviderInfo {
        /// Provider id.
        provider_id: u32,
        /// Provider name.
        name: Cow<'a, str>,
    },
    /// Provider section metadata.
    ProviderSection {
        /// Provider id.
        provider_id: u32,
    },
    /// Provider event metadata.
    ProviderEvent {
        /// Provider id.
        provider_id: u32,
        /// Event id (0 = buffer overflow).
        event: u8,
    },
    /// Initialization record.
    Initialization {
        /// Ticks per second from now on, for this provider.
        ticks_per_second: u64,
    },
    /// String record.
    String {
        /// Index registered.
        index: u16,
        /// The string.
        value: Cow<'a, str>,
    },
    /// Thread record.
    Thread {
        /// Index registered.
        index: u8,
        /// The thread.
        thread: Thread,
    },
    /// Event record.
    Event(DecodedEvent<'a>),
    /// Blob record.
    Blob {
        /// Blob name.
        name: Cow<'a, str>,
        /// Blob type.
        blob_type: BlobType,
        /// Payload (exactly the declared size, padding removed).
        payload: Cow<'a, [u8]>,
    },
    /// Userspace object record.
    UserspaceObject {
        /// Pointer value.
        pointer: u64,
        /// Process koid (resolved from the process thread ref).
        pid: u64,
        /// Name.
        name: Cow<'a, str>,
        /// Arguments.
        args: DecodedArgs<'a>,
    },
    /// Kernel object record.
    KernelObject {
        /// Koid.
        koid: u64,
        /// Object type.
        object_type: ObjectType,
        /// Name.
        name: Cow<'a, str>,
        /// Arguments.
        args: DecodedArgs<'a>,
    },
    /// Context switch, seed layout (scheduling type 0).
    ContextSwitch {
        /// Timestamp.
        time: Timestamp,
        /// CPU number.
        cpu: u8,
        /// Outgoing thread state (see [`ThreadState`]).
        outgoing_state: u8,
        /// Outgoing thread.
        outgoing: Thread,
        /// Incoming thread.
        incoming: Thread,
        /// Outgoing priority.
        outgoing_priority: u8,
        /// Incoming priority.
        incoming_priority: u8,
    },
    /// Context switch by tid (scheduling type 1).
    SchedContextSwitch {
        /// Timestamp.
        time: Timestamp,
        /// CPU number.
        cpu: u16,
        /// Outgoing thread state (see [`ThreadState`]).
        outgoing_state: u8,
        /// Outgoing tid.
        outgoing_tid: u64,
        /// Incoming tid.
        incoming_tid: u64,
        /// Arguments.
        args: DecodedArgs<'a>,
    },
    /// Thread wakeup (scheduling type 2).
    SchedThreadWakeup {
        /// Timestamp.
        time: Timestamp,
        /// CPU number.
        cpu: u16,
        /// Woken tid.
        waking_tid: u64,
        /// Arguments.
        args: DecodedArgs<'a>,
    },
    /// Log record.
    Log {
        /// Timestamp.
        time: Timestamp,
        /// Thread.
        thread: Thread,
        /// Message.
        message: Cow<'a, str>,
    },
    /// Large blob record (type 15, large type 0).
    LargeBlob {
        /// Category.
        category: Cow<'a, str>,
        /// Name.
        name: Cow<'a, str>,
        /// Timestamp, thread and arguments (format 0), or `None` (format 1, attachment).
        metadata: Option<LargeBlobEvent<'a>>,
        /// Payload.
        payload: Cow<'a, [u8]>,
    },
}

impl<'a> DecodedRecord<'a> {
    /// The record's argument list, for records that have one.
    #[inline]
    pub fn args_mut(&mut self) -> Option<&mut DecodedArgs<'a>> {
        match self {
            DecodedRecord::Event(DecodedEvent { args, .. })
            | DecodedRecord::UserspaceObject { args, .. }
            | DecodedRecord::KernelObject { args, .. }
            | DecodedRecord::SchedContextSwitch { args, .. }
            | DecodedRecord::SchedThreadWakeup { args, .. }
            | DecodedRecord::LargeBlob {
                metadata: Some(LargeBlobEvent { args, .. }),
                ..
            } => Some(args),
            _ => None,
        }
    }

    /// The record with owned strings, bytes and arguments.
    pub fn into_owned(self) -> DecodedRecord<'static> {
        match self {
            DecodedRecord::Magic => DecodedRecord::Magic,
            DecodedRecord::ProviderInfo { provider_id, name } => DecodedRecord::ProviderInfo {
                provider_id,
                name: owned_str(name),
            },
            DecodedRecord::ProviderSection { provider_id } => {
                DecodedRecord::ProviderSection { provider_id }
            }
            DecodedRecord::ProviderEvent { provider_id, event } => {
                DecodedRecord::ProviderEvent { provider_id, event }
            }
            DecodedRecord::Initialization { ticks_per_second } => {
                DecodedRecord::Initialization { ticks_per_second }
            }
            DecodedRecord::String { index, value } => DecodedRecord::String {
                index,
                value: owned_str(value),
            },
            DecodedRecord::Thread { index, thread } => DecodedRecord::Thread { index, thread },
            DecodedRecord::Event(e) => DecodedRecord::Event(DecodedEvent {
                time: e.time,
                thread: e.thread,
                category: owned_str(e.category),
                name: owned_str(e.name),
                args: owned_args(e.args),
                kind: e.kind,
            }),
            DecodedRecord::Blob {
                name,
                blob_type,
                payload,
            } => DecodedRecord::Blob {
                name: owned_str(name),
                blob_type,
                payload: Cow::Owned(payload.into_owned()),
            },
            DecodedRecord::UserspaceObject {
                pointer,
                pid,
                name,
                args,
            } => DecodedRecord::UserspaceObject {
                pointer,
                pid,
                name: owned_str(name),
                args: owned_args(args),
            },
            DecodedRecord::KernelObject {
                koid,
                object_type,
                name,
                args,
            } => DecodedRecord::KernelObject {
                koid,
                object_type,
                name: owned_str(name),
                args: owned_args(args),
            },
            DecodedRecord::ContextSwitch {
                time,
                cpu,
                outgoing_state,
                outgoing,
                incoming,
                outgoing_priority,
                incoming_priority,
            } => DecodedRecord::ContextSwitch {
                time,
                cpu,
                outgoing_state,
                outgoing,
                incoming,
                outgoing_priority,
                incoming_priority,
            },
            DecodedRecord::SchedContextSwitch {
                time,
                cpu,
                outgoing_state,
                outgoing_tid,
                incoming_tid,
                args,
            } => DecodedRecord::SchedContextSwitch {
                time,
                cpu,
                outgoing_state,
                outgoing_tid,
                incoming_tid,
                args: owned_args(args),
            },
            DecodedRecord::SchedThreadWakeup {
                time,
                cpu,
                waking_tid,
                args,
            } => DecodedRecord::SchedThreadWakeup {
                time,
                cpu,
                waking_tid,
                args: owned_args(args),
            },
            DecodedRecord::Log {
                time,
                thread,
                message,
            } => DecodedRecord::Log {
                time,
                thread,
                message: owned_str(message),
            },
            DecodedRecord::LargeBlob {
                category,
                name,
                metadata,
                payload,
            } => DecodedRecord::LargeBlob {
                category: owned_str(category),
                name: owned_str(name),
                metadata: metadata.map(|m| LargeBlobEvent {
                    time: m.time,
                    thread: m.thread,
                    args: owned_args(m.args),
                }),
                payload: Cow::Owned(payload.into_owned()),
            },
        }
    }

    /// The record's kind.
    pub fn kind(&self) -> RecordKind {
        match self {
            DecodedRecord::Magic => RecordKind::Magic,
            DecodedRecord::ProviderInfo { .. } => RecordKind::ProviderInfo,
            DecodedRecord::ProviderSection { .. } => RecordKind::ProviderSection,
            DecodedRecord::ProviderEvent { .. } => RecordKind::ProviderEvent,
            DecodedRecord::Initialization { .. } => RecordKind::Initialization,
            DecodedRecord::String { .. } => RecordKind::String,
            DecodedRecord::Thread { .. } => RecordKind::Thread,
            DecodedRecord::Event(_) => RecordKind::Event,
            DecodedRecord::Blob { .. } => RecordKind::Blob,
            DecodedRecord::UserspaceObject { .. } => RecordKind::UserspaceObject,
            DecodedRecord::KernelObject { .. } => RecordKind::KernelObject,
            DecodedRecord::ContextSwitch { .. } => RecordKind::ContextSwitch,
            DecodedRecord::SchedContextSwitch { .. } => RecordKind::SchedContextSwitch,
            DecodedRecord::SchedThreadWakeup { .. } => RecordKind::SchedThreadWakeup,
            DecodedRecord::Log { .. } => RecordKind::Log,
            DecodedRecord::LargeBlob { .. } => RecordKind::LargeBlob,
        }
    }

    /// A short name of the record kind, as `dump` and `stats` print it.
    pub fn kind_name(&self) -> &'static str {
        self.kind().name()
    }

    /// The record's timestamp, for records that have one.
    pub fn time(&self) -> Option<Timestamp> {
        match self {
            DecodedRecord::Event(e) => Some(e.time),
            DecodedRecord::ContextSwitch { time, .. }
            | DecodedRecord::SchedContextSwitch { time, .. }
            | DecodedRecord::SchedThreadWakeup { time, .. }
            | DecodedRecord::Log { time, .. } => Some(*time),
            DecodedRecord::LargeBlob {
                metadata: Some(m), ..
            } => Some(m.time),
            _ => None,
        }
    }

    /// The latest time the record covers (a complete duration's end, else its timestamp).
    pub fn end_time(&self) -> Option<Timestamp> {
        match self {
            DecodedRecord::Event(DecodedEvent {
                kind: DecodedEventKind::DurationComplete { end },
                time,
                ..
            }) => Some((*end).max(*time)),
            _ => self.time(),
        }
    }
}

/// A decoded record with where it was and whose it is.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded<'a> {
    /// Byte offset of the record in the input.
    pub offset: u64,
    /// The provider whose section the record is in (`None` before any provider metadata).
    pub provider: Option<u32>,
    /// That provider's ticks per second when the record was read.
    pub ticks_per_second: u64,
    /// The record.
    pub record: DecodedRecord<'a>,
}

impl Decoded<'_> {
    /// The record with owned strings, bytes and arguments (what the streaming decoder's
    /// iterator yields).
    pub fn into_owned(self) -> Decoded<'static> {
        Decoded {
            offset: self.offset,
            provider: self.provider,
            ticks_per_second: self.ticks_per_second,
            record: self.record.into_owned(),
        }
    }
}

/// Hex bytes, at most 64 shown, then the count of the rest.
struct Hex<'b>(&'b [u8]);

impl fmt::Display for Hex<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOWN: usize = 64;
        for (i, b) in self.0.iter().take(SHOWN).enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{b:02x}")?;
        }
        if self.0.len() > SHOWN {
            write!(f, " …(+{} bytes)", self.0.len() - SHOWN)?;
        }
        Ok(())
    }
}

/// ` args={a: i32(1), b: str("x")}`, or nothing when there are none.
struct Args<'b, 'a>(&'b [DecodedArg<'a>]);

impl fmt::Display for Args<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return Ok(());
        }
        f.write_str(" args={")?;
        for (i, a) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{:?}: {}", a.name, a.value)?;
        }
        f.write_str("}")
    }
}

/// A side of a legacy context switch: `pid/tid`, or `unknown` for the side the source did
/// not know ([`super::sched::Side::Unknown`]: never shown as a thread 0).
struct SwitchSide(Thread);

impl fmt::Display for SwitchSide {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match super::sched::Side::of_thread(self.0) {
            super::sched::Side::Unknown => f.write_str("unknown"),
            _ => write!(f, "{}/{}", self.0.pid, self.0.tid),
        }
    }
}

/// A thread state number as `fxtrace dump` prints it: its name when known (`blocked`), else
/// `stateN`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadStateName(pub u8);

impl fmt::Display for ThreadStateName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match ThreadState::from_raw(self.0) {
            Some(s) => write!(f, "{s}"),
            None => write!(f, "state{}", self.0),
        }
    }
}

/// One line per record: `@OFFSET [pPROVIDER] KIND fields…`, strings quoted and escaped so a
/// record never spans lines.
impl fmt::Display for Decoded<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_line(f, 0)
    }
}

/// A record's dump line with its times relative to an origin ([`Decoded::relative_to`]).
#[derive(Debug)]
pub struct RelativeLine<'d, 'a> {
    record: &'d Decoded<'a>,
    origin_ns: u64,
}

impl fmt::Display for RelativeLine<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.record.write_line(f, self.origin_ns)
    }
}

impl<'a> Decoded<'a> {
    /// The record's dump line (as its `Display`) with the times of its fields counted from
    /// `origin_ns` (a trace's first timestamp): `t=`, `end=` (times inside blob payloads stay
    /// absolute).
    pub fn relative_to(&self, origin_ns: u64) -> RelativeLine<'_, 'a> {
        RelativeLine {
            record: self,
            origin_ns,
        }
    }

    fn write_line(&self, f: &mut fmt::Formatter<'_>, origin: u64) -> fmt::Result {
        let rel = |t: Timestamp| t.ns.saturating_sub(origin);
        write!(f, "@{} ", self.offset)?;
        match self.provider {
            Some(p) => write!(f, "[p{p}] ")?,
            None => f.write_str("[-] ")?,
        }
        f.write_str(self.record.kind_name())?;
        match &self.record {
            DecodedRecord::Magic => Ok(()),
            DecodedRecord::ProviderInfo { provider_id, name } => {
                write!(f, " id={provider_id} name={name:?}")
            }
            DecodedRecord::ProviderSection { provider_id } => write!(f, " id={provider_id}"),
            DecodedRecord::ProviderEvent { provider_id, event } => {
                write!(f, " id={provider_id} event={event}")?;
                if *event == PROVIDER_EVENT_BUFFER_OVERFLOW {
                    f.write_str(" (buffer overflow: records likely dropped)")?;
                }
                Ok(())
            }
            DecodedRecord::Initialization { ticks_per_second } => {
                write!(f, " ticks_per_second={ticks_per_second}")
            }
            DecodedRecord::String { index, value } => write!(f, " index={index} value={value:?}"),
            DecodedRecord::Thread { index, thread } => write!(f, " index={index} {thread}"),
            DecodedRecord::Event(e) => {
                write!(
                    f,
                    " {} t={}ns {} cat={:?} name={:?}",
                    e.kind.event_type(),
                    rel(e.time),
                    e.thread,
                    e.category,
                    e.name
                )?;
                match e.kind {
                    DecodedEventKind::DurationComplete { end } => write!(
                        f,
                        " end={}ns dur={}ns",
                        rel(end),
                        end.ns.saturating_sub(e.time.ns)
                    )?,
                    kind => {
                        if let Some(id) = kind.id() {
                            write!(f, " id={id}")?;
                        }
                    }
                }
                write!(f, "{}", Args(&e.args))
            }
            DecodedRecord::Blob {
                name,
                blob_type,
                payload,
            } => {
                write!(f, " name={name:?} type={blob_type} size={}", payload.len())?;
                if *blob_type == BlobType::LAST_BRANCH {
                    match LbrSample::decode(payload) {
                        Ok(sample) => write!(f, " {}", sample.display(self.ticks_per_second)),
                        Err(e) => {
                            write!(f, " lbr_error={:?} bytes={}", e.to_string(), Hex(payload))
                        }
                    }
                } else if *blob_type == BlobType::DATA && *name == MMAP_BLOB_NAME {
                    match MmapRecord::decode(payload) {
                        Ok(m) => write!(f, " {}", m.display(self.ticks_per_second)),
                        Err(e) => {
                            write!(f, " mmap_error={:?} bytes={}", e.to_string(), Hex(payload))
                        }
                    }
                } else if *blob_type == BlobType::DATA && *name == STACK_BLOB_NAME {
                    match StackRecord::decode(payload) {
                        Ok(s) => write!(f, " {s}"),
                        Err(e) => {
                            write!(f, " stack_error={:?} bytes={}", e.to_string(), Hex(payload))
                        }
                    }
                } else if *blob_type == BlobType::DATA && *name == SAMPLE_BLOB_NAME {
                    match SampleRecord::decode(payload) {
                        Ok(s) => write!(f, " {}", s.display(self.ticks_per_second)),
                        Err(e) => {
                            write!(
                                f,
                                " sample_error={:?} bytes={}",
                                e.to_string(),
                                Hex(payload)
                            )
                        }
                    }
                } else if *blob_type == BlobType::DATA && *name == KSYM_BLOB_NAME {
                    match KernelSymbolRecord::decode(payload) {
                        Ok(k) => write!(f, " {k}"),
                        Err(e) => {
                            write!(f, " ksym_error={:?} bytes={}", e.to_string(), Hex(payload))
                        }
                    }
                } else {
                    write!(f, " bytes={}", Hex(payload))
                }
            }
            DecodedRecord::UserspaceObject {
                pointer,
                pid,
                name,
                args,
            } => {
                write!(
                    f,
                    " pointer={pointer:#x} pid={pid} name={name:?}{}",
                    Args(args)
                )
            }
            DecodedRecord::KernelObject {
                koid,
                object_type,
                name,
                args,
            } => {
                write!(
                    f,
                    " koid={koid} type={object_type} name={name:?}{}",
                    Args(args)
                )
            }
            DecodedRecord::ContextSwitch {
                time,
                cpu,
                outgoing_state,
                outgoing,
                incoming,
                outgoing_priority,
                incoming_priority,
            } => write!(
                f,
                " t={}ns cpu={cpu} out={} out_state={} out_prio={outgoing_priority} \
                 in={} in_prio={incoming_priority}",
                rel(*time),
                SwitchSide(*outgoing),
                ThreadStateName(*outgoing_state),
                SwitchSide(*incoming),
            ),
            DecodedRecord::SchedContextSwitch {
                time,
                cpu,
                outgoing_state,
                outgoing_tid,
                incoming_tid,
                args,
            } => write!(
                f,
                " t={}ns cpu={cpu} out_tid={outgoing_tid} out_state={} in_tid={incoming_tid}{}",
                rel(*time),
                ThreadStateName(*outgoing_state),
                Args(args)
            ),
            DecodedRecord::SchedThreadWakeup {
                time,
                cpu,
                waking_tid,
                args,
            } => {
                write!(
                    f,
                    " t={}ns cpu={cpu} tid={waking_tid}{}",
                    rel(*time),
                    Args(args)
                )
            }
            DecodedRecord::Log {
                time,
                thread,
                message,
            } => {
                write!(f, " t={}ns {thread} message={message:?}", rel(*time))
            }
            DecodedRecord::LargeBlob {
                category,
                name,
                metadata,
                payload,
            } => {
                match metadata {
                    Some(m) => write!(
                        f,
                        " event t={}ns {} cat={category:?} name={name:?}{}",
                        rel(m.time),
                        m.thread,
                        Args(&m.args)
                    )?,
                    None => write!(f, " attachment cat={category:?} name={name:?}")?,
                }
                write!(f, " size={} bytes={}", payload.len(), Hex(payload))
            }
        }
    }
}
