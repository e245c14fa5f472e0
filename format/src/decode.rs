//! The decoder: a zero-copy one over `&[u8]` ([`Decoder`]) and a streaming one over
//! `io::Read` ([`StreamDecoder`]), sharing one record decoder.
//!
//! The reader keeps state per provider (string table, thread table, ticks per second) and
//! switches it on provider info and provider section metadata, as the spec requires.
//! Unknown record, metadata, event, scheduling, large record and argument types are skipped
//! by their size and counted ([`SkipCounts`]). The first malformed record ends decoding with
//! an error carrying its byte offset, after everything before it has been yielded. No input
//! makes it panic.
//!
//! Reading a record has two steps. The decoder first *checks* it: framing, every field and
//! string, thread and argument reference it holds, and what it changes in the tables; that
//! yields a [`RecordHead`] (kind, provider, time), enough to count records or to choose them.
//! Then, for the records a reader wants, it *decodes* it into a [`Decoded`] record. The
//! iterators do both for every record; [`Decoder::next_head`] with [`Decoder::decode_head`],
//! and [`StreamDecoder::visit`] with a [`Visitor`], let a reader decode only what it reads.
//!
//! Each table string is kept once: borrowed from the input by [`Decoder`], copied once when
//! its string record is read by [`StreamDecoder`]. A lent record's strings borrow the input or
//! that table, never copied at a reference, and its arguments go into a list reused from
//! record to record: a reader allocates nothing per record. The tables are bounded whatever
//! the input ([`TABLE_BUDGET_BYTES`], [`MAX_PROVIDER_TABLES`]): what does not fit is counted,
//! and a reference to it reads as [`STRING_NOT_KEPT`].

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::{self, Read};

use super::decoded::{
    Decoded, DecodedArg, DecodedArgs, DecodedEvent, DecodedEventKind, DecodedRecord, DecodedValue,
    LargeBlobEvent, RecordKind, Thread, Timestamp,
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

/// Most memory the string tables of all providers may take, in bytes: each entry counts
/// [`TABLE_ENTRY_COST`], and a string the decoder had to copy (every string of a
/// [`StreamDecoder`], a string that is not UTF-8) its length too. A string record beyond it is
/// not kept (counted in [`SkipCounts::table_entries_not_kept`]); a real trace holds a few thousand
/// strings per provider, a crafted one 32 767 strings of 32 000 bytes for each of any number
/// of providers.
pub const TABLE_BUDGET_BYTES: usize = 24 << 20;

/// What one slot of a string or thread table costs against [`TABLE_BUDGET_BYTES`] (tables
/// are indexed directly: a provider whose highest string index is N holds N slots).
pub const TABLE_ENTRY_COST: usize = 24;

/// Most providers whose tables (strings, threads, tick rate) the decoder keeps at once. A
/// provider beyond them is read with tables of its own that are emptied whenever another
/// such provider's section starts (counted in [`SkipCounts::providers_not_kept`]).
pub const MAX_PROVIDER_TABLES: usize = 65_536;

/// What a reference to a string the decoder did not keep reads as (see
/// [`TABLE_BUDGET_BYTES`]).
pub const STRING_NOT_KEPT: &str =
    "<string not kept: the trace's string tables exceed the reader's budget>";

/// Records and arguments skipped so far, by reason, and table entries not kept.
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
    /// String and thread records decoded but not kept in their table
    /// ([`TABLE_BUDGET_BYTES`]): references to them read as [`STRING_NOT_KEPT`] (a thread as
    /// pid and tid 0).
    pub table_entries_not_kept: u64,
    /// Provider sections read without tables of their own ([`MAX_PROVIDER_TABLES`]).
    pub providers_not_kept: u64,
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

    /// One line saying what was skipped or not kept, if anything was (a reader prints it on
    /// stderr).
    pub fn summary(&self) -> Option<String> {
        let mut line = (self.records() > 0 || self.unknown_arg_type > 0).then(|| {
            format!(
                "skipped {} records and {} arguments of unknown types (run `fxtrace stats` for \
                 details)",
                self.records(),
                self.unknown_arg_type
            )
        });
        if self.table_entries_not_kept > 0 || self.providers_not_kept > 0 {
            let kept = format!(
                "{} string or thread records and {} provider sections were read without \
                 keeping their tables (beyond the reader's bound of {} MiB; references to them \
                 read as \"<string not kept…>\" and thread 0)",
                self.table_entries_not_kept,
                self.providers_not_kept,
                TABLE_BUDGET_BYTES >> 20
            );
            line = Some(match line {
                Some(l) => format!("{l}; {kept}"),
                None => kept,
            });
        }
        line
    }
}

// === impl State ===

/// The tables of one provider, indexed directly (string indices are dense in practice: a
/// writer numbers its strings from 1); what they cost is charged against
/// [`TABLE_BUDGET_BYTES`], so a sparse crafted table costs the budget, not memory.
#[derive(Debug)]
struct ProviderState<'t> {
    strings: Vec<Option<Cow<'t, str>>>,
    threads: Vec<Option<Thread>>,
    ticks_per_second: u64,
    /// A string record of this provider was not kept, or its tables were emptied: an index
    /// not in the table reads as [`STRING_NOT_KEPT`] (a thread as pid and tid 0) instead of
    /// ending the decode.
    lost: bool,
}

impl Default for ProviderState<'_> {
    fn default() -> Self {
        ProviderState {
            strings: Vec::new(),
            threads: Vec::new(),
            ticks_per_second: DEFAULT_TICKS_PER_SECOND,
            lost: false,
        }
    }
}

impl<'t> ProviderState<'t> {
    #[inline]
    fn time(&self, ticks: u64) -> Timestamp {
        Timestamp {
            ticks,
            ns: ticks_to_ns(ticks, self.ticks_per_second),
        }
    }

    #[inline]
    fn string(&self, index: u16) -> Option<&Cow<'t, str>> {
        self.strings.get(usize::from(index))?.as_ref()
    }

    #[inline]
    fn thread(&self, index: u8) -> Option<Thread> {
        *self.threads.get(usize::from(index))?
    }

    /// Nothing to remember: no string, no thread, the default tick rate.
    fn is_pristine(&self) -> bool {
        self.strings.is_empty()
            && self.threads.is_empty()
            && self.ticks_per_second == DEFAULT_TICKS_PER_SECOND
            && !self.lost
    }

    /// What the tables cost against the budget.
    fn cost(&self) -> usize {
        let owned: usize = self.strings.iter().flatten().map(owned_len).sum();
        (self.strings.capacity() + self.threads.capacity()) * TABLE_ENTRY_COST + owned
    }
}

/// Bytes a table string holds of its own (0 when it borrows the input).
#[allow(clippy::ptr_arg)] // which variant the string is, is the question
fn owned_len(s: &Cow<'_, str>) -> usize {
    match s {
        Cow::Borrowed(_) => 0,
        Cow::Owned(s) => s.len(),
    }
}

/// Everything the decoder remembers between records.
#[derive(Debug, Default)]
struct State<'t> {
    /// Slot 0: records before any provider metadata; then one slot per provider seen.
    tables: Vec<ProviderState<'t>>,
    /// Provider id → slot in `tables`.
    slots: HashMap<u32, usize>,
    /// Slots given back by providers that left nothing to remember.
    free: Vec<usize>,
    /// The slot shared by the providers beyond [`MAX_PROVIDER_TABLES`], and whose it is now.
    overflow: Option<(usize, u32)>,
    /// The current provider id and its slot (slot 0 while `None`).
    current: Option<u32>,
    current_slot: usize,
    /// What the tables cost against [`TABLE_BUDGET_BYTES`].
    table_bytes: usize,
    /// Bytes of table strings handed out in decoded records so far.
    resolved_bytes: u64,
    /// The input was checked by an earlier reading ([`Decoder::trusting`]).
    trusted: bool,
    skipped: SkipCounts,
}

impl<'t> State<'t> {
    fn new() -> Self {
        State {
            tables: vec![ProviderState::default()],
            ..State::default()
        }
    }

    #[inline]
    fn provider(&self) -> &ProviderState<'t> {
        &self.tables[self.current_slot]
    }

    fn switch_to(&mut self, provider_id: u32) {
        // A provider left with nothing to remember gives its slot back (met again, it starts
        // from the same empty tables): memory follows the providers that registered
        // something, not the number of provider sections (a million one-word sections).
        if let Some(current) = self.current {
            let slot = self.current_slot;
            let in_overflow = self.overflow.is_some_and(|(o, _)| o == slot);
            if current != provider_id
                && slot != 0
                && !in_overflow
                && self.tables[slot].is_pristine()
            {
                self.slots.remove(&current);
                self.free.push(slot);
            }
        }
        let slot = match self.slots.get(&provider_id) {
            Some(&slot) => slot,
            None if self.slots.len() >= MAX_PROVIDER_TABLES => self.overflow_slot(provider_id),
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

    /// The shared slot of the providers beyond [`MAX_PROVIDER_TABLES`], emptied when it
    /// passes to another of them.
    fn overflow_slot(&mut self, provider_id: u32) -> usize {
        let emptied = ProviderState {
            lost: true,
            ..ProviderState::default()
        };
        match self.overflow {
            Some((slot, owner)) if owner == provider_id => return slot,
            Some((slot, _)) => {
                self.table_bytes -= self.tables[slot].cost();
                self.tables[slot] = emptied;
            }
            None => self.tables.push(emptied),
        }
        let slot = self
            .overflow
            .map_or(self.tables.len() - 1, |(slot, _)| slot);
        self.overflow = Some((slot, provider_id));
        self.skipped.providers_not_kept += 1;
        slot
    }

    /// Registers string `index` of the current provider, within the budget.
    fn set_string(&mut self, index: u16, value: Cow<'t, str>) {
        let provider = &mut self.tables[self.current_slot];
        let at = usize::from(index);
        let old_cost = provider
            .strings
            .get(at)
            .and_then(Option::as_ref)
            .map_or(0, owned_len);
        let old_capacity = provider.strings.capacity();
        let grow = (at + 1).saturating_sub(provider.strings.len());
        // What the table would cost: a doubled capacity when it grows.
        let new_capacity = if grow > 0 {
            (at + 1)
                .max(2 * old_capacity)
                .min(usize::from(u16::MAX) + 1)
        } else {
            old_capacity
        };
        let new_owned = owned_len(&value);
        let after = self.table_bytes - old_cost
            + new_owned
            + (new_capacity - old_capacity) * TABLE_ENTRY_COST;
        if after > TABLE_BUDGET_BYTES {
            // The old string of that index is gone too: its index must not name it.
            if let Some(old) = provider.strings.get_mut(at).and_then(Option::take) {
                self.table_bytes -= owned_len(&old);
            }
            provider.lost = true;
            self.skipped.table_entries_not_kept += 1;
            return;
        }
        if grow > 0 {
            provider
                .strings
                .reserve_exact(new_capacity - provider.strings.len());
            provider.strings.resize(at + 1, None);
        }
        provider.strings[at] = Some(value);
        self.table_bytes = self.table_bytes - old_cost
            + new_owned
            + (provider.strings.capacity() - old_capacity) * TABLE_ENTRY_COST;
    }

    /// Registers thread `index` of the current provider, within the budget.
    fn set_thread(&mut self, index: u8, thread: Thread) {
        let provider = &mut self.tables[self.current_slot];
        let at = usize::from(index);
        if at >= provider.threads.len() {
            let old_capacity = provider.threads.capacity();
            let new_capacity = (at + 1).max(old_capacity);
            let cost = (new_capacity - old_capacity) * TABLE_ENTRY_COST;
            if self.table_bytes + cost > TABLE_BUDGET_BYTES {
                provider.lost = true;
                self.skipped.table_entries_not_kept += 1;
                return;
            }
            provider
                .threads
                .reserve_exact(new_capacity - provider.threads.len());
            provider.threads.resize(at + 1, None);
            self.table_bytes += (provider.threads.capacity() - old_capacity) * TABLE_ENTRY_COST;
        }
        provider.threads[at] = Some(thread);
    }
}

/// How the bytes of the input become the decoder's table strings and a record's strings:
/// borrowed from a slice the decoder reads ([`Borrow`]), or copied into the table once and
/// lent from there and from the record's buffer ([`Lend`]). `'s` is the tables' borrow while
/// the record is decoded, `'b` the record's bytes, `'t` what the tables hold, `'o` the
/// decoded record.
trait Lift<'s, 'b, 't, 'o> {
    /// A text of the record itself.
    fn text(bytes: &'b [u8]) -> Cow<'o, str>;
    /// A payload of the record itself.
    fn bytes(bytes: &'b [u8]) -> Cow<'o, [u8]>;
    /// A table string as the record hands it out.
    #[allow(clippy::ptr_arg)] // a borrowed table string is handed out as a pointer copy
    fn table(s: &'s Cow<'t, str>) -> Cow<'o, str>;
}

/// How a string record's text (`'b`) becomes a table string (`'t`).
trait Keep<'b, 't> {
    /// The text as the table keeps it.
    fn keep(bytes: &'b [u8]) -> Cow<'t, str>;
}

/// Everything borrows the input (`'a`); a table string is a pointer copy (or, not UTF-8,
/// a copy of its repaired text).
enum Borrow {}

impl<'a> Keep<'a, 'a> for Borrow {
    fn keep(bytes: &'a [u8]) -> Cow<'a, str> {
        String::from_utf8_lossy(bytes)
    }
}

impl<'s, 'a> Lift<'s, 'a, 'a, 'a> for Borrow {
    fn text(bytes: &'a [u8]) -> Cow<'a, str> {
        String::from_utf8_lossy(bytes)
    }

    fn bytes(bytes: &'a [u8]) -> Cow<'a, [u8]> {
        Cow::Borrowed(bytes)
    }

    fn table(s: &'s Cow<'a, str>) -> Cow<'a, str> {
        s.clone()
    }
}

/// Table strings are copied once; a record borrows its buffer and the tables (`'o`).
enum Lend {}

impl<'b> Keep<'b, 'static> for Lend {
    fn keep(bytes: &'b [u8]) -> Cow<'static, str> {
        Cow::Owned(String::from_utf8_lossy(bytes).into_owned())
    }
}

impl<'o> Lift<'o, 'o, 'static, 'o> for Lend {
    fn text(bytes: &'o [u8]) -> Cow<'o, str> {
        String::from_utf8_lossy(bytes)
    }

    fn bytes(bytes: &'o [u8]) -> Cow<'o, [u8]> {
        Cow::Borrowed(bytes)
    }

    fn table(s: &'o Cow<'static, str>) -> Cow<'o, str> {
        Cow::Borrowed(s.as_ref())
    }
}

// === impl Reader ===

/// Reads the atoms of one record (already framed: `rec` is exactly the record's bytes).
#[derive(Clone, Copy)]
struct Reader<'b> {
    rec: &'b [u8],
    pos: usize,
    record: &'static str,
    header: u64,
}

#[inline]
fn word_at(bytes: &[u8], at: usize) -> Option<u64> {
    let w = bytes.get(at..at.checked_add(8)?)?;
    Some(u64::from_ne_bytes([
        w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7],
    ]))
}

impl<'b> Reader<'b> {
    /// A reader positioned after the header word.
    #[inline]
    fn new(rec: &'b [u8], record: &'static str) -> Self {
        Reader {
            rec,
            pos: 8,
            record,
            header: word_at(rec, 0).unwrap_or(0),
        }
    }

    #[cold]
    fn malformed(&self, problem: &'static str) -> DecodeErrorKind {
        DecodeErrorKind::Malformed {
            record: self.record,
            header: self.header,
            problem,
        }
    }

    #[inline]
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
    #[inline]
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

    // --- checking ---

    #[inline]
    fn check_string(
        &mut self,
        string_ref: u64,
        provider: &ProviderState<'_>,
    ) -> Result<(), DecodeErrorKind> {
        let string_ref = string_ref as u16;
        if string_ref == 0 {
            Ok(())
        } else if string_ref & STRING_REF_INLINE_FLAG != 0 {
            self.stream(u64::from(string_ref & !STRING_REF_INLINE_FLAG))
                .map(drop)
        } else if provider.string(string_ref).is_some() || provider.lost {
            Ok(())
        } else {
            Err(DecodeErrorKind::UnknownStringIndex {
                record: self.record,
                index: string_ref,
            })
        }
    }

    #[inline]
    fn check_thread(
        &mut self,
        thread_ref: u64,
        provider: &ProviderState<'_>,
    ) -> Result<(), DecodeErrorKind> {
        let thread_ref = thread_ref as u8;
        if thread_ref == 0 {
            self.word()?;
            self.word().map(drop)
        } else if provider.thread(thread_ref).is_some() || provider.lost {
            Ok(())
        } else {
            Err(DecodeErrorKind::UnknownThreadIndex {
                record: self.record,
                index: thread_ref,
            })
        }
    }

    /// The next argument's header and a reader bounded to it (positioned after its header),
    /// or `None` for an argument of an unknown type (skipped and counted).
    #[inline]
    fn next_arg(
        &mut self,
        skipped: Option<&mut SkipCounts>,
    ) -> Result<Option<(u64, ArgType, Reader<'b>)>, DecodeErrorKind> {
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
        // The argument is read inside its own bounds, then the record continues after it.
        let arg = Reader {
            rec: &self.rec[..end],
            pos: self.pos,
            ..*self
        };
        self.pos = end;
        match ArgType::from_raw(ArgumentHeader::TYPE.get(header) as u8) {
            Some(arg_type) => Ok(Some((header, arg_type, arg))),
            None => {
                if let Some(skipped) = skipped {
                    skipped.unknown_arg_type += 1;
                }
                Ok(None)
            }
        }
    }

    #[inline]
    fn check_args(
        &mut self,
        count: u64,
        provider: &ProviderState<'_>,
        skipped: &mut SkipCounts,
    ) -> Result<(), DecodeErrorKind> {
        if count == 0 {
            return Ok(());
        }
        self.check_some_args(count, provider, skipped)
    }

    fn check_some_args(
        &mut self,
        count: u64,
        provider: &ProviderState<'_>,
        skipped: &mut SkipCounts,
    ) -> Result<(), DecodeErrorKind> {
        for _ in 0..count {
            let Some((header, arg_type, mut arg)) = self.next_arg(Some(skipped))? else {
                continue;
            };
            arg.check_string(ArgumentHeader::NAME_REF.get(header), provider)?;
            match arg_type {
                ArgType::Null | ArgType::I32 | ArgType::U32 | ArgType::Bool => {}
                ArgType::I64 | ArgType::U64 | ArgType::F64 | ArgType::Pointer | ArgType::Koid => {
                    arg.word()?;
                }
                ArgType::Str => {
                    arg.check_string(StringArgument::VALUE_REF.get(header), provider)?
                }
                ArgType::Blob => {
                    arg.stream(BlobArgument::SIZE.get(header))?;
                }
            }
        }
        Ok(())
    }

    // --- decoding (of a record already checked) ---

    #[inline]
    fn string<'s, 't, 'o, L: Lift<'s, 'b, 't, 'o>>(
        &mut self,
        string_ref: u64,
        provider: &'s ProviderState<'t>,
        resolved_bytes: &mut u64,
    ) -> Result<Cow<'o, str>, DecodeErrorKind> {
        let string_ref = string_ref as u16;
        if string_ref == 0 {
            Ok(Cow::Borrowed(""))
        } else if string_ref & STRING_REF_INLINE_FLAG != 0 {
            let len = string_ref & !STRING_REF_INLINE_FLAG;
            Ok(L::text(self.stream(u64::from(len))?))
        } else {
            match provider.string(string_ref) {
                Some(s) => {
                    *resolved_bytes += s.len() as u64;
                    Ok(L::table(s))
                }
                None if provider.lost => Ok(Cow::Borrowed(STRING_NOT_KEPT)),
                None => Err(DecodeErrorKind::UnknownStringIndex {
                    record: self.record,
                    index: string_ref,
                }),
            }
        }
    }

    #[inline]
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
            match provider.thread(thread_ref) {
                Some(t) => Ok(t),
                None if provider.lost => Ok(Thread::default()),
                None => Err(DecodeErrorKind::UnknownThreadIndex {
                    record: self.record,
                    index: thread_ref,
                }),
            }
        }
    }

    /// Decodes `count` arguments into `out` (cleared first).
    fn args<'s, 't, 'o, L: Lift<'s, 'b, 't, 'o>>(
        &mut self,
        count: u64,
        provider: &'s ProviderState<'t>,
        resolved_bytes: &mut u64,
        out: &mut Vec<DecodedArg<'o>>,
    ) -> Result<(), DecodeErrorKind> {
        out.clear();
        for _ in 0..count {
            let Some((header, arg_type, mut arg)) = self.next_arg(None)? else {
                continue;
            };
            let name = arg.string::<L>(
                ArgumentHeader::NAME_REF.get(header),
                provider,
                resolved_bytes,
            )?;
            let value = match arg_type {
                ArgType::Null => DecodedValue::Null,
                ArgType::I32 => DecodedValue::I32(Int32Argument::VALUE.get(header) as u32 as i32),
                ArgType::U32 => DecodedValue::U32(Int32Argument::VALUE.get(header) as u32),
                ArgType::I64 => DecodedValue::I64(arg.word()? as i64),
                ArgType::U64 => DecodedValue::U64(arg.word()?),
                ArgType::F64 => DecodedValue::F64(f64::from_bits(arg.word()?)),
                ArgType::Str => DecodedValue::Str(arg.string::<L>(
                    StringArgument::VALUE_REF.get(header),
                    provider,
                    resolved_bytes,
                )?),
                ArgType::Pointer => DecodedValue::Pointer(arg.word()?),
                ArgType::Koid => DecodedValue::Koid(arg.word()?),
                ArgType::Bool => DecodedValue::Bool(BoolArgument::VALUE.get(header) != 0),
                ArgType::Blob => {
                    DecodedValue::Blob(L::bytes(arg.stream(BlobArgument::SIZE.get(header))?))
                }
            };
            out.push(DecodedArg { name, value });
        }
        Ok(())
    }
}

// === impl RecordHead ===

/// A record the decoder has checked (framing, fields, references) and applied to its tables,
/// before it is decoded: enough to count it, to place it in time, and to choose whether to
/// decode it ([`Decoder::decode_head`], [`Visitor::head`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHead {
    /// Byte offset of the record in the input.
    pub offset: u64,
    /// The record's header word (its type's fields: see [`crate::fields`]).
    pub header: u64,
    /// The provider whose section the record is in (`None` before any provider metadata).
    pub provider: Option<u32>,
    /// That provider's ticks per second when the record was read.
    pub ticks_per_second: u64,
    /// What the record is.
    pub kind: RecordKind,
    /// An event record's type.
    pub event_type: Option<EventType>,
    /// The record's timestamp in ticks, for records that have one.
    pub ticks: Option<u64>,
    /// A duration complete event's end, in ticks.
    pub end_ticks: Option<u64>,
}

impl RecordHead {
    /// The record's timestamp.
    pub fn time(&self) -> Option<Timestamp> {
        self.ticks.map(|ticks| Timestamp {
            ticks,
            ns: ticks_to_ns(ticks, self.ticks_per_second),
        })
    }

    /// The latest time the record covers (a complete duration's end, else its timestamp).
    pub fn end_time(&self) -> Option<Timestamp> {
        let ticks = match (self.ticks, self.end_ticks) {
            (Some(t), Some(end)) => t.max(end),
            (t, _) => t?,
        };
        Some(Timestamp {
            ticks,
            ns: ticks_to_ns(ticks, self.ticks_per_second),
        })
    }
}

/// What a checked record is, and where its time is.
struct Checked {
    kind: RecordKind,
    event_type: Option<EventType>,
    ticks: Option<u64>,
    end_ticks: Option<u64>,
}

impl Checked {
    fn untimed(kind: RecordKind) -> Option<Checked> {
        Some(Checked {
            kind,
            event_type: None,
            ticks: None,
            end_ticks: None,
        })
    }

    fn timed(kind: RecordKind, ticks: u64) -> Option<Checked> {
        Some(Checked {
            kind,
            event_type: None,
            ticks: Some(ticks),
            end_ticks: None,
        })
    }
}

// === impl check_record ===

/// Checks one framed record and applies what it changes to the tables (string, thread,
/// tick rate, current provider). `Ok(None)` means it was skipped (and counted). A record
/// checked here decodes without error ([`decode_record`]).
fn check_record<'b, 't, L: Keep<'b, 't>>(
    state: &mut State<'t>,
    rec: &'b [u8],
) -> Result<Option<Checked>, DecodeErrorKind> {
    let header = word_at(rec, 0).unwrap_or(0);
    let Some(record_type) = RecordType::from_raw(RecordHeader::TYPE.get(header) as u8) else {
        state.skipped.unknown_record_type += 1;
        return Ok(None);
    };
    let mut r = Reader::new(rec, record_type.name());
    if state.trusted {
        if let Some(checked) = trusted(state, record_type, &mut r)? {
            return Ok(checked);
        }
    }
    Ok(match record_type {
        RecordType::Metadata => return check_metadata(state, r),
        RecordType::Initialization => {
            let ticks_per_second = r.word()?;
            if ticks_per_second == 0 {
                return Err(r.malformed("ticks per second is 0"));
            }
            state.tables[state.current_slot].ticks_per_second = ticks_per_second;
            Checked::untimed(RecordKind::Initialization)
        }
        RecordType::String => {
            let index = StringRecord::INDEX.get(header) as u16;
            let bytes = r.stream(StringRecord::LENGTH.get(header))?;
            if index == 0 {
                state.skipped.reserved_index += 1;
                return Ok(None);
            }
            state.set_string(index, L::keep(bytes));
            Checked::untimed(RecordKind::String)
        }
        RecordType::Thread => {
            let index = ThreadRecord::INDEX.get(header) as u8;
            let thread = Thread {
                pid: r.word()?,
                tid: r.word()?,
            };
            if index == 0 {
                state.skipped.reserved_index += 1;
                return Ok(None);
            }
            state.set_thread(index, thread);
            Checked::untimed(RecordKind::Thread)
        }
        RecordType::Event => {
            let provider = &state.tables[state.current_slot];
            let Some(event_type) = EventType::from_raw(EventRecord::EVENT_TYPE.get(header) as u8)
            else {
                state.skipped.unknown_event_type += 1;
                return Ok(None);
            };
            let ticks = r.word()?;
            r.check_thread(EventRecord::THREAD_REF.get(header), provider)?;
            r.check_string(EventRecord::CATEGORY_REF.get(header), provider)?;
            r.check_string(EventRecord::NAME_REF.get(header), provider)?;
            let count = EventRecord::ARGUMENT_COUNT.get(header);
            r.check_args(count, provider, &mut state.skipped)?;
            let end_ticks = match event_type {
                EventType::Instant | EventType::DurationBegin | EventType::DurationEnd => None,
                EventType::DurationComplete => Some(r.word()?),
                _ => {
                    r.word()?;
                    None
                }
            };
            Some(Checked {
                kind: RecordKind::Event,
                event_type: Some(event_type),
                ticks: Some(ticks),
                end_ticks,
            })
        }
        RecordType::Blob => {
            r.check_string(BlobRecord::NAME_REF.get(header), state.provider())?;
            r.stream(BlobRecord::PAYLOAD_SIZE.get(header))?;
            Checked::untimed(RecordKind::Blob)
        }
        RecordType::UserspaceObject => {
            let provider = &state.tables[state.current_slot];
            r.word()?;
            let process_ref = UserspaceObjectRecord::PROCESS_REF.get(header);
            if process_ref == 0 {
                r.word()?;
            } else {
                r.check_thread(process_ref, provider)?;
            }
            r.check_string(UserspaceObjectRecord::NAME_REF.get(header), provider)?;
            let count = UserspaceObjectRecord::ARGUMENT_COUNT.get(header);
            r.check_args(count, provider, &mut state.skipped)?;
            Checked::untimed(RecordKind::UserspaceObject)
        }
        RecordType::KernelObject => {
            let provider = &state.tables[state.current_slot];
            r.word()?;
            r.check_string(KernelObjectRecord::NAME_REF.get(header), provider)?;
            let count = KernelObjectRecord::ARGUMENT_COUNT.get(header);
            r.check_args(count, provider, &mut state.skipped)?;
            Checked::untimed(RecordKind::KernelObject)
        }
        RecordType::Scheduling => {
            let provider = &state.tables[state.current_slot];
            let raw = SchedulingRecord::SCHEDULING_TYPE.get(header) as u8;
            let Some(kind) = SchedulingType::from_raw(raw) else {
                state.skipped.unknown_scheduling_type += 1;
                return Ok(None);
            };
            r.record = kind.name();
            let ticks = r.word()?;
            match kind {
                SchedulingType::LegacyContextSwitch => {
                    r.check_thread(
                        ContextSwitchRecord::OUTGOING_THREAD_REF.get(header),
                        provider,
                    )?;
                    r.check_thread(
                        ContextSwitchRecord::INCOMING_THREAD_REF.get(header),
                        provider,
                    )?;
                    Checked::timed(RecordKind::ContextSwitch, ticks)
                }
                SchedulingType::ContextSwitch => {
                    r.word()?;
                    r.word()?;
                    let count = SchedContextSwitchRecord::ARGUMENT_COUNT.get(header);
                    r.check_args(count, provider, &mut state.skipped)?;
                    Checked::timed(RecordKind::SchedContextSwitch, ticks)
                }
                SchedulingType::ThreadWakeup => {
                    r.word()?;
                    let count = SchedThreadWakeupRecord::ARGUMENT_COUNT.get(header);
                    r.check_args(count, provider, &mut state.skipped)?;
                    Checked::timed(RecordKind::SchedThreadWakeup, ticks)
                }
            }
        }
        RecordType::Log => {
            let provider = &state.tables[state.current_slot];
            let ticks = r.word()?;
            r.check_thread(LogRecord::THREAD_REF.get(header), provider)?;
            r.stream(LogRecord::MESSAGE_LENGTH.get(header))?;
            Checked::timed(RecordKind::Log, ticks)
        }
        RecordType::LargeRecord => {
            let provider = &state.tables[state.current_slot];
            let format =
                LargeBlobFormat::from_raw(LargeRecordHeader::BLOB_FORMAT.get(header) as u8);
            let (true, Some(format)) = (
                LargeRecordHeader::LARGE_TYPE.get(header) == u64::from(LARGE_RECORD_TYPE_BLOB),
                format,
            ) else {
                state.skipped.unknown_large_type += 1;
                return Ok(None);
            };
            r.record = "large blob";
            let format_word = r.word()?;
            match format {
                LargeBlobFormat::WithMetadata => {
                    r.check_string(
                        LargeBlobWithMetadata::CATEGORY_REF.get(format_word),
                        provider,
                    )?;
                    r.check_string(LargeBlobWithMetadata::NAME_REF.get(format_word), provider)?;
                    let ticks = r.word()?;
                    r.check_thread(LargeBlobWithMetadata::THREAD_REF.get(format_word), provider)?;
                    let count = LargeBlobWithMetadata::ARGUMENT_COUNT.get(format_word);
                    r.check_args(count, provider, &mut state.skipped)?;
                    let size = r.word()?;
                    r.stream(size)?;
                    Checked::timed(RecordKind::LargeBlob, ticks)
                }
                LargeBlobFormat::Attachment => {
                    r.check_string(LargeBlobAttachment::CATEGORY_REF.get(format_word), provider)?;
                    r.check_string(LargeBlobAttachment::NAME_REF.get(format_word), provider)?;
                    let size = r.word()?;
                    r.stream(size)?;
                    Checked::untimed(RecordKind::LargeBlob)
                }
            }
        }
    })
}

/// The head of a record of an input checked by an earlier reading, for the records that
/// change no table: framed and typed, not checked again (its time read where it is the
/// first word). `None` for the records that change the tables, checked as always.
#[allow(clippy::option_option)] // none: not taken here; some none: skipped
fn trusted(
    state: &mut State<'_>,
    record_type: RecordType,
    r: &mut Reader<'_>,
) -> Result<Option<Option<Checked>>, DecodeErrorKind> {
    let header = r.header;
    Ok(Some(match record_type {
        RecordType::Metadata
        | RecordType::Initialization
        | RecordType::String
        | RecordType::Thread => return Ok(None),
        RecordType::Event => {
            let Some(event_type) = EventType::from_raw(EventRecord::EVENT_TYPE.get(header) as u8)
            else {
                state.skipped.unknown_event_type += 1;
                return Ok(Some(None));
            };
            Some(Checked {
                kind: RecordKind::Event,
                event_type: Some(event_type),
                ticks: Some(r.word()?),
                end_ticks: None,
            })
        }
        RecordType::Scheduling => {
            let raw = SchedulingRecord::SCHEDULING_TYPE.get(header) as u8;
            let kind = match SchedulingType::from_raw(raw) {
                Some(SchedulingType::LegacyContextSwitch) => RecordKind::ContextSwitch,
                Some(SchedulingType::ContextSwitch) => RecordKind::SchedContextSwitch,
                Some(SchedulingType::ThreadWakeup) => RecordKind::SchedThreadWakeup,
                None => {
                    state.skipped.unknown_scheduling_type += 1;
                    return Ok(Some(None));
                }
            };
            Checked::timed(kind, r.word()?)
        }
        RecordType::Log => Checked::timed(RecordKind::Log, r.word()?),
        RecordType::Blob => Checked::untimed(RecordKind::Blob),
        RecordType::UserspaceObject => Checked::untimed(RecordKind::UserspaceObject),
        RecordType::KernelObject => Checked::untimed(RecordKind::KernelObject),
        RecordType::LargeRecord => {
            let known = LargeRecordHeader::LARGE_TYPE.get(header)
                == u64::from(LARGE_RECORD_TYPE_BLOB)
                && LargeBlobFormat::from_raw(LargeRecordHeader::BLOB_FORMAT.get(header) as u8)
                    .is_some();
            if !known {
                state.skipped.unknown_large_type += 1;
                return Ok(Some(None));
            }
            Checked::untimed(RecordKind::LargeBlob)
        }
    }))
}

fn check_metadata(
    state: &mut State<'_>,
    mut r: Reader<'_>,
) -> Result<Option<Checked>, DecodeErrorKind> {
    let header = r.header;
    let metadata_type = MetadataRecord::METADATA_TYPE.get(header) as u8;
    let Some(metadata_type) = MetadataType::from_raw(metadata_type) else {
        state.skipped.unknown_metadata_type += 1;
        return Ok(None);
    };
    r.record = metadata_type.name();
    Ok(match metadata_type {
        MetadataType::ProviderInfo => {
            r.stream(ProviderInfoMetadata::NAME_LENGTH.get(header))?;
            state.switch_to(ProviderInfoMetadata::PROVIDER_ID.get(header) as u32);
            Checked::untimed(RecordKind::ProviderInfo)
        }
        MetadataType::ProviderSection => {
            state.switch_to(ProviderSectionMetadata::PROVIDER_ID.get(header) as u32);
            Checked::untimed(RecordKind::ProviderSection)
        }
        MetadataType::ProviderEvent => Checked::untimed(RecordKind::ProviderEvent),
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
            Checked::untimed(RecordKind::Magic)
        }
    })
}

// === impl decode_record ===

/// No arguments (yet: the caller attaches the list [`decode_record`] filled).
const NO_ARGS: DecodedArgs<'static> = DecodedArgs::Lent(&[]);

/// Decodes one record that [`check_record`] accepted, against the tables as they were right
/// after its check; its arguments, if it has any, go into `args` and the record holds
/// [`NO_ARGS`] until the caller attaches them ([`DecodedRecord::args_mut`]).
#[inline]
fn decode_record<'s, 'b, 't, 'o, L: Lift<'s, 'b, 't, 'o>>(
    provider: &'s ProviderState<'t>,
    resolved_bytes: &mut u64,
    rec: &'b [u8],
    kind: RecordKind,
    args: &mut Vec<DecodedArg<'o>>,
) -> Result<DecodedRecord<'o>, DecodeErrorKind> {
    let header = word_at(rec, 0).unwrap_or(0);
    let mut r = Reader::new(rec, kind.name());
    let resolved = resolved_bytes;
    Ok(match kind {
        RecordKind::Magic => DecodedRecord::Magic,
        RecordKind::ProviderInfo => DecodedRecord::ProviderInfo {
            provider_id: ProviderInfoMetadata::PROVIDER_ID.get(header) as u32,
            name: L::text(r.stream(ProviderInfoMetadata::NAME_LENGTH.get(header))?),
        },
        RecordKind::ProviderSection => DecodedRecord::ProviderSection {
            provider_id: ProviderSectionMetadata::PROVIDER_ID.get(header) as u32,
        },
        RecordKind::ProviderEvent => DecodedRecord::ProviderEvent {
            provider_id: ProviderEventMetadata::PROVIDER_ID.get(header) as u32,
            event: ProviderEventMetadata::EVENT.get(header) as u8,
        },
        RecordKind::Initialization => DecodedRecord::Initialization {
            ticks_per_second: r.word()?,
        },
        RecordKind::String => DecodedRecord::String {
            index: StringRecord::INDEX.get(header) as u16,
            value: L::text(r.stream(StringRecord::LENGTH.get(header))?),
        },
        RecordKind::Thread => DecodedRecord::Thread {
            index: ThreadRecord::INDEX.get(header) as u8,
            thread: Thread {
                pid: r.word()?,
                tid: r.word()?,
            },
        },
        RecordKind::Event => {
            let raw = EventRecord::EVENT_TYPE.get(header) as u8;
            let event_type = EventType::from_raw(raw).unwrap_or(EventType::Instant);
            let time = provider.time(r.word()?);
            let thread = r.thread(EventRecord::THREAD_REF.get(header), provider)?;
            let category =
                r.string::<L>(EventRecord::CATEGORY_REF.get(header), provider, resolved)?;
            let name = r.string::<L>(EventRecord::NAME_REF.get(header), provider, resolved)?;
            let count = EventRecord::ARGUMENT_COUNT.get(header);
            r.args::<L>(count, provider, resolved, args)?;
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
                args: NO_ARGS,
                kind,
            })
        }
        RecordKind::Blob => DecodedRecord::Blob {
            name: r.string::<L>(BlobRecord::NAME_REF.get(header), provider, resolved)?,
            blob_type: BlobType(BlobRecord::BLOB_TYPE.get(header) as u8),
            payload: L::bytes(r.stream(BlobRecord::PAYLOAD_SIZE.get(header))?),
        },
        RecordKind::UserspaceObject => {
            let pointer = r.word()?;
            let process_ref = UserspaceObjectRecord::PROCESS_REF.get(header);
            let pid = if process_ref == 0 {
                r.word()?
            } else {
                r.thread(process_ref, provider)?.pid
            };
            let name = r.string::<L>(
                UserspaceObjectRecord::NAME_REF.get(header),
                provider,
                resolved,
            )?;
            let count = UserspaceObjectRecord::ARGUMENT_COUNT.get(header);
            r.args::<L>(count, provider, resolved, args)?;
            DecodedRecord::UserspaceObject {
                pointer,
                pid,
                name,
                args: NO_ARGS,
            }
        }
        RecordKind::KernelObject => {
            let koid = r.word()?;
            let object_type = ObjectType(KernelObjectRecord::OBJECT_TYPE.get(header) as u8);
            let name =
                r.string::<L>(KernelObjectRecord::NAME_REF.get(header), provider, resolved)?;
            let count = KernelObjectRecord::ARGUMENT_COUNT.get(header);
            r.args::<L>(count, provider, resolved, args)?;
            DecodedRecord::KernelObject {
                koid,
                object_type,
                name,
                args: NO_ARGS,
            }
        }
        RecordKind::ContextSwitch => {
            let time = provider.time(r.word()?);
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
        RecordKind::SchedContextSwitch => {
            let time = provider.time(r.word()?);
            let outgoing_tid = r.word()?;
            let incoming_tid = r.word()?;
            let count = SchedContextSwitchRecord::ARGUMENT_COUNT.get(header);
            r.args::<L>(count, provider, resolved, args)?;
            DecodedRecord::SchedContextSwitch {
                time,
                cpu: SchedContextSwitchRecord::CPU.get(header) as u16,
                outgoing_state: SchedContextSwitchRecord::OUTGOING_STATE.get(header) as u8,
                outgoing_tid,
                incoming_tid,
                args: NO_ARGS,
            }
        }
        RecordKind::SchedThreadWakeup => {
            let time = provider.time(r.word()?);
            let waking_tid = r.word()?;
            let count = SchedThreadWakeupRecord::ARGUMENT_COUNT.get(header);
            r.args::<L>(count, provider, resolved, args)?;
            DecodedRecord::SchedThreadWakeup {
                time,
                cpu: SchedThreadWakeupRecord::CPU.get(header) as u16,
                waking_tid,
                args: NO_ARGS,
            }
        }
        RecordKind::Log => {
            let time = provider.time(r.word()?);
            let thread = r.thread(LogRecord::THREAD_REF.get(header), provider)?;
            let message = L::text(r.stream(LogRecord::MESSAGE_LENGTH.get(header))?);
            DecodedRecord::Log {
                time,
                thread,
                message,
            }
        }
        RecordKind::LargeBlob => {
            let raw_format = LargeRecordHeader::BLOB_FORMAT.get(header) as u8;
            let format_word = r.word()?;
            if LargeBlobFormat::from_raw(raw_format) == Some(LargeBlobFormat::WithMetadata) {
                let category = r.string::<L>(
                    LargeBlobWithMetadata::CATEGORY_REF.get(format_word),
                    provider,
                    resolved,
                )?;
                let name = r.string::<L>(
                    LargeBlobWithMetadata::NAME_REF.get(format_word),
                    provider,
                    resolved,
                )?;
                let time = provider.time(r.word()?);
                let thread =
                    r.thread(LargeBlobWithMetadata::THREAD_REF.get(format_word), provider)?;
                let count = LargeBlobWithMetadata::ARGUMENT_COUNT.get(format_word);
                r.args::<L>(count, provider, resolved, args)?;
                let size = r.word()?;
                DecodedRecord::LargeBlob {
                    category,
                    name,
                    metadata: Some(LargeBlobEvent {
                        time,
                        thread,
                        args: NO_ARGS,
                    }),
                    payload: L::bytes(r.stream(size)?),
                }
            } else {
                let category = r.string::<L>(
                    LargeBlobAttachment::CATEGORY_REF.get(format_word),
                    provider,
                    resolved,
                )?;
                let name = r.string::<L>(
                    LargeBlobAttachment::NAME_REF.get(format_word),
                    provider,
                    resolved,
                )?;
                let size = r.word()?;
                DecodedRecord::LargeBlob {
                    category,
                    name,
                    metadata: None,
                    payload: L::bytes(r.stream(size)?),
                }
            }
        }
    })
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

/// An empty list for arguments of another lifetime, reusing `list`'s allocation (argument
/// lists borrow each record's strings; one allocation serves every record).
fn recycle<'x, 'y>(mut list: Vec<DecodedArg<'x>>) -> Vec<DecodedArg<'y>> {
    list.clear();
    // Same size and alignment: the standard library collects in place, keeping the
    // allocation (checked by a test). (`filter` would keep the item type: the lifetime
    // changes.)
    #[allow(clippy::unnecessary_filter_map)]
    list.into_iter().filter_map(|_| None).collect()
}

/// `record` with `args` attached (to the records that have arguments).
#[inline(always)]
fn with_args<'o>(mut record: DecodedRecord<'o>, args: DecodedArgs<'o>) -> DecodedRecord<'o> {
    if let Some(slot) = record.args_mut() {
        *slot = args;
    }
    record
}

/// What a reader does with each record of a [`StreamDecoder::visit`] or [`Decoder::visit`].
pub trait Visitor {
    /// What stops a visit early.
    type Error;

    /// Every record, checked: returns whether to decode it and hand it to
    /// [`Visitor::record`] (by default, all of them).
    fn head(&mut self, head: &RecordHead) -> bool {
        let _ = head;
        true
    }

    /// A record [`Visitor::head`] chose, decoded.
    fn record(&mut self, head: &RecordHead, record: &Decoded<'_>) -> Result<(), Self::Error>;
}

// === impl Decoder ===

/// Zero-copy decoder over a byte slice. Iterates `Result<Decoded<'a>, DecodeError>`; after
/// an error (or the end) it yields `None` forever. [`Decoder::next_head`] checks the next
/// record without decoding it, [`Decoder::decode_current`] decodes it without allocating.
#[derive(Debug)]
pub struct Decoder<'a> {
    bytes: &'a [u8],
    pos: usize,
    state: State<'a>,
    /// The arguments of the record decoded last.
    args: Vec<DecodedArg<'a>>,
    /// The record checked last: where it starts and ends, and what it is.
    current: Option<(usize, usize, RecordKind)>,
    check_magic: bool,
    done: bool,
}

impl<'a> Decoder<'a> {
    /// A decoder for a trace file: the input must start with the magic number record.
    pub fn new(bytes: &'a [u8]) -> Self {
        Decoder {
            bytes,
            pos: 0,
            state: State::new(),
            args: Vec::new(),
            current: None,
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

    /// A decoder for a trace an earlier reading checked whole (a reader's second pass over
    /// the same bytes): the records that change no table are framed and typed but not
    /// checked again ([`RecordHead::end_ticks`] and a large blob's time are not read). A
    /// record decoded from it is still decoded in full, its errors reported.
    pub fn trusting(bytes: &'a [u8]) -> Self {
        let mut decoder = Decoder::new(bytes);
        decoder.state.trusted = true;
        decoder
    }

    /// Bytes consumed: the end of the last record checked or skipped.
    pub fn offset(&self) -> u64 {
        self.pos as u64
    }

    /// What was skipped so far.
    pub fn skipped(&self) -> SkipCounts {
        self.state.skipped
    }

    /// Bytes of table strings the records decoded so far referred to (each reference
    /// counted): a reader over a mapping gives back the pages it has read as this grows, as
    /// well as when its position moves on.
    pub fn table_bytes_resolved(&self) -> u64 {
        self.state.resolved_bytes
    }

    fn fail(&mut self, kind: DecodeErrorKind) -> DecodeError {
        self.done = true;
        self.current = None;
        DecodeError {
            offset: self.pos as u64,
            kind,
        }
    }

    /// Checks the next record (skipping and counting those of unknown types) and applies it
    /// to the tables: its head, or the error that ends decoding (everything before it was
    /// yielded). `None` after the end or an error.
    pub fn next_head(&mut self) -> Option<Result<RecordHead, DecodeError>> {
        self.current = None;
        if self.done {
            return None;
        }
        if self.check_magic {
            self.check_magic = false;
            if let Err(kind) = check_magic(self.bytes) {
                return Some(Err(self.fail(kind)));
            }
        }
        loop {
            let rest = &self.bytes[self.pos..];
            if rest.is_empty() {
                self.done = true;
                return None;
            }
            let Some(header) = word_at(rest, 0) else {
                let kind =
                    DecodeErrorKind::Framing(FramingErrorKind::TrailingBytes { len: rest.len() });
                return Some(Err(self.fail(kind)));
            };
            let len = match check_frame(header, rest.len()) {
                Ok(len) => len,
                Err(kind) => return Some(Err(self.fail(DecodeErrorKind::Framing(kind)))),
            };
            let rec: &'a [u8] = &self.bytes[self.pos..self.pos + len];
            match check_record::<Borrow>(&mut self.state, rec) {
                Ok(Some(checked)) => {
                    let kind = checked.kind;
                    let head = head(&self.state, self.pos as u64, header, checked);
                    self.current = Some((self.pos, self.pos + len, kind));
                    self.pos += len;
                    return Some(Ok(head));
                }
                Ok(None) => self.pos += len,
                Err(kind) => return Some(Err(self.fail(kind))),
            }
        }
    }

    /// Decodes the record [`Decoder::next_head`] returned last, its arguments into the
    /// decoder's list.
    fn decode_into_args(&mut self) -> Option<Result<Decoded<'a>, DecodeError>> {
        let (start, end, kind) = self.current?;
        let rec: &'a [u8] = &self.bytes[start..end];
        let provider = &self.state.tables[self.state.current_slot];
        let resolved = &mut self.state.resolved_bytes;
        match decode_record::<Borrow>(provider, resolved, rec, kind, &mut self.args) {
            Ok(record) => Some(Ok(Decoded {
                offset: start as u64,
                provider: self.state.current,
                ticks_per_second: provider.ticks_per_second,
                record,
            })),
            Err(kind) => {
                self.pos = start;
                Some(Err(self.fail(kind)))
            }
        }
    }

    /// Decodes the record [`Decoder::next_head`] returned last (`None` when it returned
    /// none), its arguments lent from a list the decoder reuses: no allocation.
    pub fn decode_current(&mut self) -> Option<Result<Decoded<'_>, DecodeError>> {
        let decoded = match self.decode_into_args()? {
            Ok(d) => d,
            Err(e) => return Some(Err(e)),
        };
        Some(Ok(Decoded {
            record: with_args(decoded.record, DecodedArgs::Lent(&self.args)),
            ..decoded
        }))
    }

    /// The next record, checked and decoded, its arguments lent as by
    /// [`Decoder::decode_current`]. `None` after the end or an error.
    pub fn next_lent(&mut self) -> Option<Result<Decoded<'_>, DecodeError>> {
        if let Err(e) = self.next_head()? {
            return Some(Err(e));
        }
        self.decode_current()
    }

    /// Hands every record left to `visitor` (its head, then, when it asks, the record
    /// decoded and lent). Returns how reading ended: `Ok(None)` at the end of the input,
    /// `Ok(Some(error))` at a damaged record (everything before it was handed over), `Err`
    /// with what the visitor returned when it stopped the visit.
    pub fn visit<V: Visitor>(&mut self, visitor: &mut V) -> Result<Option<DecodeError>, V::Error> {
        while let Some(head) = self.next_head() {
            let head = match head {
                Ok(head) => head,
                Err(e) => return Ok(Some(e)),
            };
            if visitor.head(&head) {
                match self.decode_current() {
                    Some(Ok(record)) => visitor.record(&head, &record)?,
                    Some(Err(e)) => return Ok(Some(e)),
                    None => {}
                }
            }
        }
        Ok(None)
    }
}

/// The head of a record checked at `offset`, the tables as its check left them.
#[inline]
fn head(state: &State<'_>, offset: u64, header: u64, checked: Checked) -> RecordHead {
    RecordHead {
        offset,
        header,
        provider: state.current,
        ticks_per_second: state.tables[state.current_slot].ticks_per_second,
        kind: checked.kind,
        event_type: checked.event_type,
        ticks: checked.ticks,
        end_ticks: checked.end_ticks,
    }
}

impl<'a> Iterator for Decoder<'a> {
    type Item = Result<Decoded<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Err(e) = self.next_head()? {
            return Some(Err(e));
        }
        let decoded = match self.decode_into_args()? {
            Ok(d) => d,
            Err(e) => return Some(Err(e)),
        };
        let args = DecodedArgs::Owned(std::mem::take(&mut self.args));
        Some(Ok(Decoded {
            record: with_args(decoded.record, args),
            ..decoded
        }))
    }
}

// === impl StreamDecoder ===

/// Streaming decoder over any `io::Read` (e.g. stdin). Reads one record at a time, so memory
/// stays bounded by the largest record and the tables. [`StreamDecoder::visit`] lends each
/// record (its strings borrow the decoder's buffer and tables); the iterator gives owned
/// records (a copy of each string).
#[derive(Debug)]
pub struct StreamDecoder<R> {
    reader: R,
    offset: u64,
    buf: Vec<u8>,
    state: State<'static>,
    /// The allocation the argument lists reuse.
    spare: Vec<DecodedArg<'static>>,
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
            state: State::new(),
            spare: Vec::new(),
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

    /// Bytes consumed: the end of the last record checked or skipped.
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

    fn fail(&mut self, kind: DecodeErrorKind) -> DecodeError {
        self.done = true;
        DecodeError {
            offset: self.offset,
            kind,
        }
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

    /// Reads and checks the next record (skipping those of unknown types): its head, the
    /// record's bytes left in `buf`.
    fn next_head(&mut self) -> Option<Result<RecordHead, DecodeError>> {
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
                Err(kind) => return Some(Err(self.fail(kind))),
            }
            let len = self.buf.len();
            match check_record::<Lend>(&mut self.state, &self.buf) {
                Ok(Some(checked)) => {
                    let header = word_at(&self.buf, 0).unwrap_or(0);
                    let head = head(&self.state, self.offset, header, checked);
                    self.offset += len as u64;
                    return Some(Ok(head));
                }
                Ok(None) => self.offset += len as u64,
                Err(kind) => return Some(Err(self.fail(kind))),
            }
        }
    }

    /// Hands every record left to `visitor` (its head, then, when it asks, the record
    /// decoded, its strings borrowing the decoder's buffer and tables and its arguments a
    /// list reused from record to record: no allocation per record). Returns how reading
    /// ended, as [`Decoder::visit`] does.
    pub fn visit<V: Visitor>(&mut self, visitor: &mut V) -> Result<Option<DecodeError>, V::Error> {
        while let Some(head) = self.next_head() {
            let head = match head {
                Ok(head) => head,
                Err(e) => return Ok(Some(e)),
            };
            if !visitor.head(&head) {
                continue;
            }
            let mut args = recycle(std::mem::take(&mut self.spare));
            let provider = &self.state.tables[self.state.current_slot];
            let resolved = &mut self.state.resolved_bytes;
            let outcome =
                match decode_record::<Lend>(provider, resolved, &self.buf, head.kind, &mut args) {
                    Ok(record) => {
                        let decoded = Decoded {
                            offset: head.offset,
                            provider: head.provider,
                            ticks_per_second: head.ticks_per_second,
                            record: with_args(record, DecodedArgs::Lent(&args)),
                        };
                        Ok(visitor.record(&head, &decoded))
                    }
                    Err(kind) => Err(kind),
                };
            self.spare = recycle(args);
            match outcome {
                Ok(handed) => handed?,
                Err(kind) => {
                    self.offset = head.offset;
                    return Ok(Some(self.fail(kind)));
                }
            }
        }
        Ok(None)
    }
}

impl<R: Read> Iterator for StreamDecoder<R> {
    type Item = Result<Decoded<'static>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        let head = match self.next_head()? {
            Ok(head) => head,
            Err(e) => return Some(Err(e)),
        };
        let mut args = Vec::new();
        let provider = &self.state.tables[self.state.current_slot];
        let resolved = &mut self.state.resolved_bytes;
        match decode_record::<Lend>(provider, resolved, &self.buf, head.kind, &mut args) {
            Ok(record) => Some(Ok(Decoded {
                offset: head.offset,
                provider: head.provider,
                ticks_per_second: head.ticks_per_second,
                record: with_args(record, DecodedArgs::Owned(args)).into_owned(),
            })),
            Err(kind) => {
                self.offset = head.offset;
                Some(Err(self.fail(kind)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recycled_argument_lists_keep_their_allocation() {
        let mut list: Vec<DecodedArg<'static>> = Vec::with_capacity(16);
        list.push(DecodedArg {
            name: Cow::Borrowed("a"),
            value: DecodedValue::Null,
        });
        let ptr = list.as_ptr() as usize;
        let text = String::from("borrowed");
        let mut other: Vec<DecodedArg<'_>> = recycle(list);
        other.push(DecodedArg {
            name: Cow::Borrowed(&text),
            value: DecodedValue::Null,
        });
        assert_eq!(other.as_ptr() as usize, ptr);
        let back: Vec<DecodedArg<'static>> = recycle(other);
        assert_eq!((back.as_ptr() as usize, back.capacity()), (ptr, 16));
    }
}
