//! Every bit field of the FXT wire format, as a typed descriptor named after the spec.
//!
//! Each field is a [`Field`] `{ lo, hi }` with both bit positions inclusive, exactly as the
//! spec writes `[lo .. hi]`. The holders (`EventRecord`, `BlobRecord`, …) are zero-sized
//! namespaces, so a field reads like the spec's table: `EventRecord::THREAD_REF` is bits
//! `[24 .. 31]` of an event record's header word. Every field is checked at compile time to
//! lie inside a 64-bit word, and the fields of each word are checked not to overlap.
//!
//! Modelled on Fuchsia's `trace-engine/fields.h` (`Field<begin, end>` with `static_assert`s).

/// A bit field `[lo ..= hi]` of a 64-bit word (both ends inclusive, like the spec).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// Least significant bit of the field.
    pub lo: u32,
    /// Most significant bit of the field (inclusive).
    pub hi: u32,
}

impl Field {
    /// A field covering bits `lo ..= hi`. Fails to compile (in a `const`) when `lo > hi` or
    /// `hi > 63`.
    pub const fn new(lo: u32, hi: u32) -> Field {
        assert!(lo <= hi, "field: lo must not exceed hi");
        assert!(hi < 64, "field: bits must lie inside a 64-bit word");
        Field { lo, hi }
    }

    /// Number of bits in the field.
    pub const fn width(self) -> u32 {
        self.hi - self.lo + 1
    }

    /// Largest value the field can hold.
    pub const fn max(self) -> u64 {
        if self.width() == 64 {
            u64::MAX
        } else {
            (1u64 << self.width()) - 1
        }
    }

    /// The field's bits in place inside a word.
    pub const fn mask(self) -> u64 {
        self.max() << self.lo
    }

    /// Whether `value` fits in the field without losing bits.
    pub const fn fits(self, value: u64) -> bool {
        value <= self.max()
    }

    /// `value` shifted into place. Callers check [`Field::fits`] first: bits beyond the
    /// field are masked off here, never allowed to spill into a neighbouring field.
    pub const fn make(self, value: u64) -> u64 {
        (value & self.max()) << self.lo
    }

    /// The field's value extracted from `word`.
    pub const fn get(self, word: u64) -> u64 {
        (word >> self.lo) & self.max()
    }

    /// `word` with this field replaced by `value` (masked to the field's width).
    pub const fn set(self, word: u64, value: u64) -> u64 {
        (word & !self.mask()) | self.make(value)
    }

    /// Whether two fields share no bit.
    pub const fn disjoint(self, other: Field) -> bool {
        self.hi < other.lo || other.hi < self.lo
    }
}

/// True when no two fields in `fields` overlap (used by the compile-time checks below).
pub const fn all_disjoint(fields: &[Field]) -> bool {
    let mut i = 0;
    while i < fields.len() {
        let mut j = i + 1;
        while j < fields.len() {
            if !fields[i].disjoint(fields[j]) {
                return false;
            }
            j += 1;
        }
        i += 1;
    }
    true
}

/// `[lo .. hi]`, shorthand used by the tables below.
const fn f(lo: u32, hi: u32) -> Field {
    Field::new(lo, hi)
}

/// Defines a zero-sized holder of named fields and checks at compile time that its fields
/// do not overlap one another.
macro_rules! fields {
    ($(#[$doc:meta])* $holder:ident { $($(#[$fdoc:meta])* $name:ident = $lo:literal ..= $hi:literal;)+ }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy)]
        pub struct $holder;
        impl $holder {
            $($(#[$fdoc])* pub const $name: Field = f($lo, $hi);)+
            /// Every field of this word, in declaration order.
            pub const ALL: &'static [(&'static str, Field)] = &[$((stringify!($name), Self::$name)),+];
        }
        const _: () = assert!(all_disjoint(&[$($holder::$name),+]));
    };
}

fields! {
    /// Header word common to every record.
    RecordHeader {
        /// Record type (`[0 .. 3]`).
        TYPE = 0..=3;
        /// Record size in words, header included (`[4 .. 15]`).
        SIZE = 4..=15;
    }
}

fields! {
    /// Header word of a large record (record type 15), whose size field is 32 bits wide.
    LargeRecordHeader {
        /// Record type, always 15 (`[0 .. 3]`).
        TYPE = 0..=3;
        /// Record size in words, header included (`[4 .. 35]`).
        SIZE = 4..=35;
        /// Large record type: 0 = blob (`[36 .. 39]`).
        LARGE_TYPE = 36..=39;
        /// Large blob format: 0 = with metadata, 1 = attachment (`[40 .. 43]`).
        BLOB_FORMAT = 40..=43;
    }
}

fields! {
    /// Header word of a metadata record (record type 0).
    MetadataRecord {
        /// Record type (0).
        TYPE = 0..=3;
        /// Record size in words.
        SIZE = 4..=15;
        /// Metadata type (`[16 .. 19]`).
        METADATA_TYPE = 16..=19;
    }
}

fields! {
    /// Provider info metadata (metadata type 1).
    ProviderInfoMetadata {
        /// Metadata type (1).
        METADATA_TYPE = 16..=19;
        /// Provider id (`[20 .. 51]`).
        PROVIDER_ID = 20..=51;
        /// Provider name length in bytes (`[52 .. 59]`).
        NAME_LENGTH = 52..=59;
    }
}

fields! {
    /// Provider section metadata (metadata type 2).
    ProviderSectionMetadata {
        /// Metadata type (2).
        METADATA_TYPE = 16..=19;
        /// Provider id (`[20 .. 51]`).
        PROVIDER_ID = 20..=51;
    }
}

fields! {
    /// Provider event metadata (metadata type 3).
    ProviderEventMetadata {
        /// Metadata type (3).
        METADATA_TYPE = 16..=19;
        /// Provider id (`[20 .. 51]`).
        PROVIDER_ID = 20..=51;
        /// Event id (`[52 .. 55]`); 0 = a buffer filled up.
        EVENT = 52..=55;
    }
}

fields! {
    /// Trace info metadata (metadata type 4).
    TraceInfoMetadata {
        /// Metadata type (4).
        METADATA_TYPE = 16..=19;
        /// Trace info type (`[20 .. 23]`); 0 = magic number.
        TRACE_INFO_TYPE = 20..=23;
    }
}

fields! {
    /// Magic number record (trace info type 0): the whole word is `0x0016547846040010`.
    MagicNumberRecord {
        /// Metadata type (4).
        METADATA_TYPE = 16..=19;
        /// Trace info type (0).
        TRACE_INFO_TYPE = 20..=23;
        /// The magic number `0x16547846` (`[24 .. 55]`).
        MAGIC = 24..=55;
    }
}

fields! {
    /// String record (record type 2).
    StringRecord {
        /// String index, 0x0001..=0x7fff (`[16 .. 30]`).
        INDEX = 16..=30;
        /// String length in bytes (`[32 .. 46]`).
        LENGTH = 32..=46;
    }
}

fields! {
    /// Thread record (record type 3).
    ThreadRecord {
        /// Thread index, never 0 (`[16 .. 23]`).
        INDEX = 16..=23;
    }
}

fields! {
    /// Event record (record type 4).
    EventRecord {
        /// Event type (`[16 .. 19]`).
        EVENT_TYPE = 16..=19;
        /// Number of arguments (`[20 .. 23]`).
        ARGUMENT_COUNT = 20..=23;
        /// Thread ref (`[24 .. 31]`).
        THREAD_REF = 24..=31;
        /// Category string ref (`[32 .. 47]`).
        CATEGORY_REF = 32..=47;
        /// Name string ref (`[48 .. 63]`).
        NAME_REF = 48..=63;
    }
}

fields! {
    /// Blob record (record type 5).
    BlobRecord {
        /// Blob name string ref (`[16 .. 31]`).
        NAME_REF = 16..=31;
        /// Payload size in bytes, padding excluded (`[32 .. 46]`).
        PAYLOAD_SIZE = 32..=46;
        /// Blob type (`[48 .. 55]`).
        BLOB_TYPE = 48..=55;
    }
}

fields! {
    /// Userspace object record (record type 6).
    UserspaceObjectRecord {
        /// Process (thread ref) (`[16 .. 23]`).
        PROCESS_REF = 16..=23;
        /// Name string ref (`[24 .. 39]`).
        NAME_REF = 24..=39;
        /// Number of arguments (`[40 .. 43]`).
        ARGUMENT_COUNT = 40..=43;
    }
}

fields! {
    /// Kernel object record (record type 7).
    KernelObjectRecord {
        /// Kernel object type, a `ZX_OBJ_TYPE_*` value (`[16 .. 23]`).
        OBJECT_TYPE = 16..=23;
        /// Name string ref (`[24 .. 39]`).
        NAME_REF = 24..=39;
        /// Number of arguments (`[40 .. 43]`).
        ARGUMENT_COUNT = 40..=43;
    }
}

fields! {
    /// Scheduling record (record type 8): the subtype selector common to all layouts.
    SchedulingRecord {
        /// Scheduling record type (`[60 .. 63]`): 0 legacy context switch, 1 context switch,
        /// 2 thread wakeup.
        SCHEDULING_TYPE = 60..=63;
    }
}

fields! {
    /// Context switch record, the seed spec's layout (record type 8, scheduling type 0).
    ContextSwitchRecord {
        /// CPU number (`[16 .. 23]`).
        CPU = 16..=23;
        /// Outgoing thread state (`[24 .. 27]`).
        OUTGOING_STATE = 24..=27;
        /// Outgoing thread ref (`[28 .. 35]`).
        OUTGOING_THREAD_REF = 28..=35;
        /// Incoming thread ref (`[36 .. 43]`).
        INCOMING_THREAD_REF = 36..=43;
        /// Outgoing thread priority (`[44 .. 51]`).
        OUTGOING_PRIORITY = 44..=51;
        /// Incoming thread priority (`[52 .. 59]`).
        INCOMING_PRIORITY = 52..=59;
        /// Scheduling type, 0 for this layout (`[60 .. 63]`, "reserved" in the seed spec).
        SCHEDULING_TYPE = 60..=63;
    }
}

fields! {
    /// Context switch by thread id (record type 8, scheduling type 1; newer writers).
    SchedContextSwitchRecord {
        /// Number of arguments (`[16 .. 19]`).
        ARGUMENT_COUNT = 16..=19;
        /// CPU number, 16 bits (`[20 .. 35]`).
        CPU = 20..=35;
        /// Outgoing thread state (`[36 .. 39]`).
        OUTGOING_STATE = 36..=39;
        /// Scheduling type, 1 (`[60 .. 63]`).
        SCHEDULING_TYPE = 60..=63;
    }
}

fields! {
    /// Thread wakeup (record type 8, scheduling type 2; newer writers).
    SchedThreadWakeupRecord {
        /// Number of arguments (`[16 .. 19]`).
        ARGUMENT_COUNT = 16..=19;
        /// CPU number, 16 bits (`[20 .. 35]`).
        CPU = 20..=35;
        /// Scheduling type, 2 (`[60 .. 63]`).
        SCHEDULING_TYPE = 60..=63;
    }
}

fields! {
    /// Log record (record type 9).
    LogRecord {
        /// Log message length in bytes (`[16 .. 30]`).
        MESSAGE_LENGTH = 16..=30;
        /// Thread ref (`[32 .. 39]`).
        THREAD_REF = 32..=39;
    }
}

fields! {
    /// The first word of a large blob with metadata (large blob format 0).
    LargeBlobWithMetadata {
        /// Category string ref (`[0 .. 15]`).
        CATEGORY_REF = 0..=15;
        /// Name string ref (`[16 .. 31]`).
        NAME_REF = 16..=31;
        /// Number of arguments (`[32 .. 35]`).
        ARGUMENT_COUNT = 32..=35;
        /// Thread ref (`[36 .. 43]`).
        THREAD_REF = 36..=43;
    }
}

fields! {
    /// The first word of a large blob attachment (large blob format 1).
    LargeBlobAttachment {
        /// Category string ref (`[0 .. 15]`).
        CATEGORY_REF = 0..=15;
        /// Name string ref (`[16 .. 31]`).
        NAME_REF = 16..=31;
    }
}

fields! {
    /// Header word common to every argument.
    ArgumentHeader {
        /// Argument type (`[0 .. 3]`).
        TYPE = 0..=3;
        /// Argument size in words, header included (`[4 .. 15]`).
        SIZE = 4..=15;
        /// Argument name string ref (`[16 .. 31]`).
        NAME_REF = 16..=31;
    }
}

fields! {
    /// 32-bit signed (type 1) and unsigned (type 2) integer arguments.
    Int32Argument {
        /// The value (`[32 .. 63]`).
        VALUE = 32..=63;
    }
}

fields! {
    /// String argument (type 6).
    StringArgument {
        /// Value string ref (`[32 .. 47]`).
        VALUE_REF = 32..=47;
    }
}

fields! {
    /// Bool argument (type 9; newer writers).
    BoolArgument {
        /// The value (`[32]`).
        VALUE = 32..=32;
    }
}

fields! {
    /// Blob argument (type 10; newer writers).
    BlobArgument {
        /// Blob size in bytes (`[32 .. 63]`).
        SIZE = 32..=63;
    }
}

// The per-record fields sit in the 48 data bits above the common header.
const _: () = assert!(all_disjoint(&[
    RecordHeader::TYPE,
    RecordHeader::SIZE,
    EventRecord::EVENT_TYPE,
    EventRecord::ARGUMENT_COUNT,
    EventRecord::THREAD_REF,
    EventRecord::CATEGORY_REF,
    EventRecord::NAME_REF,
]));
const _: () = assert!(all_disjoint(&[
    RecordHeader::TYPE,
    RecordHeader::SIZE,
    ContextSwitchRecord::CPU,
    ContextSwitchRecord::OUTGOING_STATE,
    ContextSwitchRecord::OUTGOING_THREAD_REF,
    ContextSwitchRecord::INCOMING_THREAD_REF,
    ContextSwitchRecord::OUTGOING_PRIORITY,
    ContextSwitchRecord::INCOMING_PRIORITY,
    ContextSwitchRecord::SCHEDULING_TYPE,
]));
const _: () = assert!(all_disjoint(&[
    ArgumentHeader::TYPE,
    ArgumentHeader::SIZE,
    ArgumentHeader::NAME_REF,
    StringArgument::VALUE_REF,
]));
const _: () = assert!(all_disjoint(&[
    RecordHeader::TYPE,
    RecordHeader::SIZE,
    MagicNumberRecord::METADATA_TYPE,
    MagicNumberRecord::TRACE_INFO_TYPE,
    MagicNumberRecord::MAGIC,
]));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_arithmetic() {
        let f = Field::new(24, 31);
        assert_eq!(f.width(), 8);
        assert_eq!(f.max(), 0xff);
        assert_eq!(f.mask(), 0xff00_0000);
        assert_eq!(f.make(0xab), 0xab00_0000);
        assert_eq!(f.get(0x1234_ab00_0000), 0xab);
        assert_eq!(f.set(u64::MAX, 0), 0xffff_ffff_00ff_ffff);
        assert!(f.fits(255) && !f.fits(256));
        // Over-wide values are masked, never spilling into neighbours.
        assert_eq!(f.make(0x1ff), 0xff00_0000);
        let whole = Field::new(0, 63);
        assert_eq!(whole.max(), u64::MAX);
        assert_eq!(whole.get(0xdead_beef), 0xdead_beef);
    }

    #[test]
    fn overlap_detection() {
        assert!(all_disjoint(&[f(0, 3), f(4, 15)]));
        assert!(!all_disjoint(&[f(0, 4), f(4, 15)]));
    }
}
