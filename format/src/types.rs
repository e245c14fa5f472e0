//! The numbered kinds of the format (record, metadata, event, argument, blob and object
//! types, thread states) and its limits.

use std::fmt;

/// The whole magic number record: type 0, size 1, metadata type 4, trace info type 0,
/// magic `0x16547846`. The first 8 bytes of every trace, `10 00 04 46 78 54 16 00` on a
/// little-endian machine.
pub const MAGIC_WORD: u64 = 0x0016_5478_4604_0010;
/// The magic number inside [`MAGIC_WORD`] (`"FxT"` and a random byte).
pub const MAGIC_NUMBER: u32 = 0x1654_7846;

/// Largest record, in 64-bit words, header included (the 12-bit size field).
pub const MAX_RECORD_WORDS: usize = 4095;
/// Largest large record (type 15), in words (its 32-bit size field).
pub const MAX_LARGE_RECORD_WORDS: usize = u32::MAX as usize;
/// Longest string, in bytes, that may be encoded (inline or in a string record).
pub const MAX_STRING_LEN: usize = 32000;
/// Most arguments one record may carry.
pub const MAX_ARGS: usize = 15;
/// Highest string table index (indices run 1..=0x7fff; 0 is the empty string).
pub const MAX_STRING_INDEX: u16 = 0x7fff;
/// Highest thread table index (indices run 1..=255; 0 means an inline thread).
pub const MAX_THREAD_INDEX: u8 = 0xff;
/// Largest blob record payload in bytes (its 15-bit size field); the record size limit
/// usually binds first.
pub const MAX_BLOB_PAYLOAD: usize = 0x7fff;
/// Longest provider name in a provider info record (its 8-bit length field).
pub const MAX_PROVIDER_NAME_LEN: usize = 255;
/// Largest provider event id (its 4-bit field).
pub const MAX_PROVIDER_EVENT: u8 = 15;
/// Provider event id: a buffer filled up and records were likely dropped.
pub const PROVIDER_EVENT_BUFFER_OVERFLOW: u8 = 0;

/// Defines a `repr(u8)` enum with `from_raw`, `name` and `Display`.
macro_rules! numbered {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident = $value:literal => $text:literal,)+ }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[repr(u8)]
        pub enum $name {
            $($(#[$vdoc])* $variant = $value,)+
        }
        impl $name {
            /// Every value, in numeric order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            /// The kind with wire value `raw`, if the format defines one.
            pub const fn from_raw(raw: u8) -> Option<$name> {
                match raw {
                    $($value => Some($name::$variant),)+
                    _ => None,
                }
            }
            /// The wire value.
            pub const fn raw(self) -> u8 {
                self as u8
            }
            /// A short lowercase name, as printed by `fxtrace dump`.
            pub const fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

numbered! {
    /// Record type, header bits `[0 .. 3]`.
    RecordType {
        /// Metadata (provider info/section/event, trace info).
        Metadata = 0 => "metadata",
        /// Initialization (ticks per second).
        Initialization = 1 => "initialization",
        /// String table entry.
        String = 2 => "string",
        /// Thread table entry.
        Thread = 3 => "thread",
        /// Event.
        Event = 4 => "event",
        /// Blob.
        Blob = 5 => "blob",
        /// Userspace object.
        UserspaceObject = 6 => "userspace_object",
        /// Kernel object.
        KernelObject = 7 => "kernel_object",
        /// Scheduling: context switch (legacy layout and newer subtypes) and thread wakeup.
        Scheduling = 8 => "scheduling",
        /// Log message.
        Log = 9 => "log",
        /// Large record (32-bit size field); large type 0 is a large blob.
        LargeRecord = 15 => "large_record",
    }
}

numbered! {
    /// Metadata record type, bits `[16 .. 19]` of a metadata record.
    MetadataType {
        /// Provider info.
        ProviderInfo = 1 => "provider_info",
        /// Provider section.
        ProviderSection = 2 => "provider_section",
        /// Provider event.
        ProviderEvent = 3 => "provider_event",
        /// Trace info (trace info type 0 is the magic number).
        TraceInfo = 4 => "trace_info",
    }
}

numbered! {
    /// Event type, bits `[16 .. 19]` of an event record.
    EventType {
        /// Instant event.
        Instant = 0 => "instant",
        /// Counter event.
        Counter = 1 => "counter",
        /// Duration begin.
        DurationBegin = 2 => "duration_begin",
        /// Duration end.
        DurationEnd = 3 => "duration_end",
        /// Duration complete (begin and end in one record).
        DurationComplete = 4 => "duration_complete",
        /// Async begin.
        AsyncBegin = 5 => "async_begin",
        /// Async instant.
        AsyncInstant = 6 => "async_instant",
        /// Async end.
        AsyncEnd = 7 => "async_end",
        /// Flow begin.
        FlowBegin = 8 => "flow_begin",
        /// Flow step.
        FlowStep = 9 => "flow_step",
        /// Flow end.
        FlowEnd = 10 => "flow_end",
    }
}

numbered! {
    /// Argument type, bits `[0 .. 3]` of an argument header.
    ArgType {
        /// Name only, no value.
        Null = 0 => "null",
        /// 32-bit signed integer.
        I32 = 1 => "i32",
        /// 32-bit unsigned integer.
        U32 = 2 => "u32",
        /// 64-bit signed integer.
        I64 = 3 => "i64",
        /// 64-bit unsigned integer.
        U64 = 4 => "u64",
        /// Double-precision float.
        F64 = 5 => "f64",
        /// String.
        Str = 6 => "str",
        /// Pointer.
        Pointer = 7 => "pointer",
        /// Kernel object id.
        Koid = 8 => "koid",
        /// Boolean (newer writers).
        Bool = 9 => "bool",
        /// Blob (newer writers).
        Blob = 10 => "blob",
    }
}

numbered! {
    /// Scheduling record type, bits `[60 .. 63]` of a record of type 8.
    SchedulingType {
        /// The seed spec's context switch layout (thread refs and priorities).
        LegacyContextSwitch = 0 => "context_switch",
        /// Context switch by thread id, with arguments (newer writers).
        ContextSwitch = 1 => "sched_context_switch",
        /// Thread wakeup (newer writers).
        ThreadWakeup = 2 => "thread_wakeup",
    }
}

numbered! {
    /// Format of a large blob record, bits `[40 .. 43]` of its header.
    LargeBlobFormat {
        /// With metadata: category, name, timestamp, thread and arguments.
        WithMetadata = 0 => "event",
        /// Attachment: category and name only.
        Attachment = 1 => "attachment",
    }
}

numbered! {
    /// Thread state after a context switch (`ZX_THREAD_STATE_*`).
    ThreadState {
        /// New.
        New = 0 => "new",
        /// Running.
        Running = 1 => "running",
        /// Suspended.
        Suspended = 2 => "suspended",
        /// Blocked.
        Blocked = 3 => "blocked",
        /// Dying.
        Dying = 4 => "dying",
        /// Dead.
        Dead = 5 => "dead",
    }
}

/// Large record type `[36 .. 39]` of a blob.
pub const LARGE_RECORD_TYPE_BLOB: u8 = 0;
/// Trace info type of the magic number record.
pub const TRACE_INFO_TYPE_MAGIC: u8 = 0;

/// Blob type of a blob record (`[48 .. 55]`): any byte, with the defined ones as constants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BlobType(pub u8);

impl BlobType {
    /// `TRACE_BLOB_TYPE_DATA`: raw untyped data.
    pub const DATA: BlobType = BlobType(1);
    /// `TRACE_BLOB_TYPE_LAST_BRANCH`: an Intel last branch record sample (see [`super::lbr`]).
    pub const LAST_BRANCH: BlobType = BlobType(2);
    /// `TRACE_BLOB_TYPE_PERFETTO`: Perfetto protobuf data.
    pub const PERFETTO: BlobType = BlobType(3);

    /// A short name for known types, `None` otherwise.
    pub const fn name(self) -> Option<&'static str> {
        match self.0 {
            1 => Some("data"),
            2 => Some("last_branch"),
            3 => Some("perfetto"),
            _ => None,
        }
    }
}

impl fmt::Display for BlobType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => write!(f, "{name}({})", self.0),
            None => write!(f, "{}", self.0),
        }
    }
}

/// Kernel object type (`ZX_OBJ_TYPE_*`): any byte, with the ones fxtrace uses as constants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectType(pub u8);

impl ObjectType {
    /// `ZX_OBJ_TYPE_PROCESS` (on Linux: a process, koid = pid).
    pub const PROCESS: ObjectType = ObjectType(1);
    /// `ZX_OBJ_TYPE_THREAD` (on Linux: a thread, koid = tid).
    pub const THREAD: ObjectType = ObjectType(2);

    /// A short name for known types, `None` otherwise.
    pub const fn name(self) -> Option<&'static str> {
        match self.0 {
            1 => Some("process"),
            2 => Some("thread"),
            _ => None,
        }
    }
}

impl fmt::Display for ObjectType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => write!(f, "{name}({})", self.0),
            None => write!(f, "{}", self.0),
        }
    }
}

/// Converts `ticks` to nanoseconds at `ticks_per_second` (saturating; 0 ticks/s is treated
/// as 1 tick = 1 ns).
pub const fn ticks_to_ns(ticks: u64, ticks_per_second: u64) -> u64 {
    if ticks_per_second == 0 || ticks_per_second == 1_000_000_000 {
        return ticks;
    }
    let ns = (ticks as u128) * 1_000_000_000 / (ticks_per_second as u128);
    if ns > u64::MAX as u128 {
        u64::MAX
    } else {
        ns as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbering_matches_spec() {
        assert_eq!(RecordType::from_raw(15), Some(RecordType::LargeRecord));
        assert_eq!(RecordType::from_raw(10), None);
        assert_eq!(EventType::FlowEnd.raw(), 10);
        assert_eq!(ArgType::Blob.raw(), 10);
        assert_eq!(ArgType::from_raw(11), None);
        assert_eq!(ThreadState::Dead.raw(), 5);
        assert_eq!(BlobType::LAST_BRANCH.to_string(), "last_branch(2)");
        assert_eq!(BlobType(9).to_string(), "9");
    }

    #[test]
    fn tick_conversion() {
        assert_eq!(ticks_to_ns(5, 1_000_000_000), 5);
        assert_eq!(ticks_to_ns(3_000, 3_000_000_000), 1_000);
        assert_eq!(ticks_to_ns(u64::MAX, 1), u64::MAX);
        assert_eq!(ticks_to_ns(7, 0), 7);
    }
}
