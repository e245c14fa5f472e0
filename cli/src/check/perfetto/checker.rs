//! The checker: the state Perfetto's importer keeps (per-provider string and thread tables,
//! clock, thread slices), record by record, and the findings it adds.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::read::bounded::BoundedMap;
use std::io::Read;

use fxtrace_format::fields::{
    ArgumentHeader, BlobRecord, ContextSwitchRecord, EventRecord, Int32Argument,
    KernelObjectRecord, MetadataRecord, ProviderEventMetadata, ProviderInfoMetadata,
    ProviderSectionMetadata, RecordHeader, SchedContextSwitchRecord, SchedThreadWakeupRecord,
    SchedulingRecord, StringArgument, StringRecord, ThreadRecord,
};
use fxtrace_format::{
    record_words, ArgType, BlobType, EventType, MetadataType, ObjectType, RecordType,
    SchedulingType, ThreadState, MAGIC_WORD, PROVIDER_EVENT_BUFFER_OVERFLOW,
};

use super::findings::*;
use super::reader::*;
use super::*;

/// Bytes after a zero-size record (where Perfetto stops) counted for the report, at most.
const UNREAD_COUNTED: u64 = 256 << 20;

/// Threads with open slices, and open async slices, the check follows at once.
pub(super) const CHECK_BOUND: usize = 65_536;
/// Threads whose process the check remembers.
pub(super) const PROCESS_BOUND: usize = 1 << 18;

/// What a string means to Perfetto's importer: only these strings change how it reads a
/// record, so only the tag is kept (memory stays bounded by the table size, not the text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StringTag {
    /// `"process"` (the thread name's process koid argument).
    Process,
    /// `"incoming_weight"`.
    IncomingWeight,
    /// `"outgoing_weight"`.
    OutgoingWeight,
    /// `"weight"`.
    Weight,
    /// `"waker"`.
    Waker,
    /// `"provider"` (the provider a trace manager's marker is about).
    Provider,
    /// Mentions a drop or a loss ([`DROP_WORDS`]).
    Drop,
    /// Anything else.
    Other,
}

impl StringTag {
    pub(super) fn of(bytes: &[u8]) -> StringTag {
        use fxtrace_format::sched::{
            INCOMING_WEIGHT_ARG, OUTGOING_WEIGHT_ARG, WAKER_ARG, WEIGHT_ARG,
        };
        match bytes {
            b"process" => StringTag::Process,
            _ if bytes == INCOMING_WEIGHT_ARG.as_bytes() => StringTag::IncomingWeight,
            _ if bytes == OUTGOING_WEIGHT_ARG.as_bytes() => StringTag::OutgoingWeight,
            _ if bytes == WEIGHT_ARG.as_bytes() => StringTag::Weight,
            _ if bytes == WAKER_ARG.as_bytes() => StringTag::Waker,
            b"provider" => StringTag::Provider,
            _ if DROP_WORDS
                .iter()
                .any(|w| contains_ignore_case(bytes, w.as_bytes())) =>
            {
                StringTag::Drop
            }
            _ => StringTag::Other,
        }
    }
}

/// A hash of a string's text (FNV-1a): async tracks are told apart by their name's text.
pub(super) fn text_hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

pub(super) fn contains_ignore_case(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle))
}

/// One provider as Perfetto's tokenizer keeps it (`FuchsiaTraceTokenizer::ProviderInfo`).
#[derive(Debug, Default)]
pub(super) struct Provider {
    /// Each string's tag and a hash of its text (async tracks are keyed by the name's text).
    pub(super) strings: HashMap<u16, (StringTag, u64)>,
    pub(super) threads: HashMap<u8, (u64, u64)>,
    /// `None` until an Initialization record (Perfetto then uses 1e9).
    pub(super) ticks_per_second: Option<u64>,
    pub(super) warned_uninitialized: bool,
}

impl Provider {
    pub(super) fn rate(&self) -> u64 {
        self.ticks_per_second.unwrap_or(1_000_000_000)
    }

    /// As a Provider Info leaves it: nothing registered, nothing said.
    fn is_pristine(&self) -> bool {
        self.strings.is_empty()
            && self.threads.is_empty()
            && self.ticks_per_second.is_none()
            && !self.warned_uninitialized
    }
}

/// What the checker remembers per provider id across its sections.
#[derive(Debug, Default)]
pub(super) struct Tally {
    /// Latest scheduling record so far: (ns, offset).
    pub(super) last_sched: Option<(i64, u64)>,
    /// First Provider Event "buffer overflow" for this provider.
    pub(super) overflow_at: Option<u64>,
    /// An event in this provider's sections reports a drop.
    pub(super) drop_shown: bool,
}

/// The duration slices open on one thread track.
#[derive(Debug, Default)]
pub(super) struct ThreadSlices {
    /// Duration begins not yet ended.
    pub(super) open_begins: u32,
    /// Duration-complete slices not yet over.
    pub(super) completes: OpenCompletes,
}

/// Duration-complete slices not yet over on one thread, by end (the next to close first)
/// and by start: each event closes the ones it reaches and asks whether one encloses it, in
/// logarithmic time (a thread with many overlapping slices made a scan of all of them per
/// event quadratic).
#[derive(Debug, Default)]
pub(super) struct OpenCompletes {
    /// (end, start) in ns, smallest end first.
    by_end: std::collections::BinaryHeap<std::cmp::Reverse<(i64, i64)>>,
    /// Start → how many open slices start there.
    starts: BTreeMap<i64, u32>,
}

impl OpenCompletes {
    /// Closes the slices over at `ts` (a slice is closed by the first event at or after its
    /// end).
    fn close_reached(&mut self, ts: i64) {
        while let Some(&std::cmp::Reverse((end, start))) = self.by_end.peek() {
            if end > ts {
                break;
            }
            self.by_end.pop();
            if let Some(n) = self.starts.get_mut(&start) {
                *n -= 1;
                if *n == 0 {
                    self.starts.remove(&start);
                }
            }
        }
    }

    fn push(&mut self, start: i64, end: i64) {
        self.by_end.push(std::cmp::Reverse((end, start)));
        *self.starts.entry(start).or_default() += 1;
    }

    /// No slice open.
    fn is_empty(&self) -> bool {
        self.by_end.is_empty()
    }

    /// Whether an open slice started at or before `ts`.
    fn any_started_by(&self, ts: i64) -> bool {
        self.starts.keys().next().is_some_and(|&start| start <= ts)
    }
}

/// An argument as far as the checker needs it.
#[derive(Debug, Clone, Copy)]
pub(super) struct ArgInfo {
    pub(super) name: StringTag,
    pub(super) kind: Option<ArgType>,
    /// The i32 value (type 1).
    pub(super) i32_value: Option<i32>,
    /// The koid value (type 8).
    pub(super) koid: Option<u64>,
    /// The value of an unsigned integer (types 2 and 4).
    pub(super) unsigned: Option<u64>,
    /// Numeric (types 1..=5) and nonzero.
    pub(super) nonzero_number: bool,
}

impl ArgInfo {
    pub(super) fn numeric(&self) -> bool {
        matches!(
            self.kind,
            Some(ArgType::I32 | ArgType::U32 | ArgType::I64 | ArgType::U64 | ArgType::F64)
        )
    }
}

/// Perfetto's importer state plus the findings.
#[derive(Debug)]
pub(super) struct Checker {
    pub(super) findings: BTreeMap<FindingKind, Finding>,
    /// `providers_`: an id a Provider Section named before any Provider Info is Perfetto's
    /// null provider, here absent (or `None`): not inserted, so that sections of many unknown
    /// ids cost nothing.
    pub(super) providers: HashMap<u32, Option<Provider>>,
    /// Ids a Provider Info record introduced (provider 0 is registered implicitly).
    pub(super) introduced: HashSet<u32>,
    /// The current provider id, and the offset of the section record that selected it.
    pub(super) current: u32,
    pub(super) section_at: u64,
    pub(super) tallies: HashMap<u32, Tally>,
    /// Process koid of each thread koid, from Kernel Object records (Perfetto's
    /// `FuchsiaTraceParser::Thread::info.pid`).
    pub(super) process_of: BoundedMap<u64, u64>,
    /// Threads already reported without a process.
    pub(super) reported_without_process: BoundedMap<u64, ()>,
    /// Duration slices open per thread track (Perfetto's `(tid, pid)` as 32 bits); a track
    /// with nothing open is not kept.
    pub(super) slices: BoundedMap<(u32, u32), ThreadSlices>,
    /// Async slices open per track (a hash of the name, process, correlation id): how many,
    /// and the offset of the first begin.
    pub(super) asyncs: BoundedMap<(u64, u64, u64), (u64, u64)>,
    pub(super) records: u64,
    pub(super) import_stops_at: Option<u64>,
}

/// The two sides of a context switch.
pub(super) const SIDES: [&str; 2] = ["outgoing", "incoming"];

impl Checker {
    pub(super) fn new() -> Self {
        let mut providers = HashMap::new();
        providers.insert(0, Some(Provider::default()));
        Checker {
            findings: BTreeMap::new(),
            providers,
            introduced: HashSet::new(),
            current: 0,
            section_at: 0,
            tallies: HashMap::new(),
            process_of: BoundedMap::new(PROCESS_BOUND),
            reported_without_process: BoundedMap::new(PROCESS_BOUND),
            slices: BoundedMap::new(CHECK_BOUND),
            asyncs: BoundedMap::new(CHECK_BOUND),
            records: 0,
            import_stops_at: None,
        }
    }

    pub(super) fn add(&mut self, kind: FindingKind, offset: u64, message: impl FnOnce() -> String) {
        add(&mut self.findings, kind, offset, message);
    }

    pub(super) fn finish(mut self, bytes: u64) -> PerfettoReport {
        let mut unended: Vec<(u64, u64, u64)> = self
            .asyncs
            .iter()
            .map(|(&(_, pid, id), &(_, at))| (at, pid, id))
            .collect();
        unended.sort();
        for (at, pid, id) in unended {
            self.add(FindingKind::UnendedAsyncBegin, at, || {
                format!(
                    "an async begin (process {pid}, id {id}) never ended: Perfetto shows a slice \
                     that did not end (the trace stopped, or a wrapped buffer lost the end)"
                )
            });
        }
        let refused = self.slices.refused() + self.asyncs.refused() + self.process_of.refused();
        if refused > 0 {
            self.add(FindingKind::NotFollowed, bytes, || {
                format!(
                    "the check keeps at most {} threads with open slices, {} open async slices \
                     and {} thread processes: {refused} record(s) beyond those were not followed \
                     (unmatched ends and threads without a process among them are not reported)",
                    CHECK_BOUND, CHECK_BOUND, PROCESS_BOUND
                )
            });
        }
        let mut unreported: Vec<(u32, u64)> = self
            .tallies
            .iter()
            .filter_map(|(&id, t)| Some((id, t.overflow_at?)).filter(|_| !t.drop_shown))
            .collect();
        unreported.sort_by_key(|&(_, at)| at);
        for (id, at) in unreported {
            self.add(FindingKind::DropsOnlyInMetadata, at, || {
                format!(
                    "provider {id} reports a buffer overflow only as Provider Event metadata, \
                     which Perfetto ignores; no event of provider {id} names the drop \
                     (a name or a nonzero numeric argument containing \"dropped\" or \"lost\")"
                )
            });
        }
        let mut findings: Vec<Finding> = self.findings.into_values().collect();
        findings.sort_by_key(|f| (f.offset, f.kind));
        PerfettoReport {
            findings,
            bytes,
            records: self.records,
            import_stops_at: self.import_stops_at,
        }
    }

    pub(super) fn run<R: Read>(&mut self, input: &mut Input<R>) -> Result<(), PerfettoCheckError> {
        let mut head = [0u8; 8];
        let n = input.read_full(&mut head)?;
        if n < 8 || u64::from_ne_bytes(head) != MAGIC_WORD {
            let first = u64::from_ne_bytes(head);
            self.add(FindingKind::NotFxt, 0, || match n {
                0 => "the file is empty".to_owned(),
                n if n < 8 => format!("the file is {n} bytes long, shorter than one word"),
                _ => format!(
                    "the first word is {first:#018x}, not the magic number record \
                     {MAGIC_WORD:#018x}: Perfetto does not open it as an FXT trace"
                ),
            });
            self.import_stops_at = Some(0);
            return Ok(());
        }
        self.records += 1;
        let mut buf = Vec::new();
        loop {
            let offset = input.offset;
            let n = input.read_full(&mut head)?;
            if n == 0 {
                return Ok(());
            }
            if n < 8 {
                self.add(FindingKind::TruncatedRecord, offset, || {
                    format!("{n} trailing byte(s) after the last record, less than a header word")
                });
                return Ok(());
            }
            let header = u64::from_ne_bytes(head);
            let words = record_words(header);
            let perfetto_words = RecordHeader::SIZE.get(header) as usize;
            let is_large = RecordHeader::TYPE.get(header) == RecordType::LargeRecord as u64;
            if perfetto_words == 0 {
                // Counted up to a bound: an endless input (a pipe from /dev/zero) must not keep
                // the check reading.
                let rest = input.skip(UNREAD_COUNTED + 1)?;
                let rest = match rest {
                    n if n > UNREAD_COUNTED => format!("more than {}", UNREAD_COUNTED + 8),
                    n => format!("the {}", n + 8),
                };
                self.add(FindingKind::ZeroSizeRecord, offset, || {
                    let what = if header == 0 {
                        "a zero header word".to_owned()
                    } else if is_large {
                        format!(
                            "a large record of {words} words, whose size Perfetto reads from \
                             bits 4..15 only (0)"
                        )
                    } else {
                        format!("header {header:#018x} with size 0")
                    };
                    format!(
                        "{what}: Perfetto stops the whole import here; {rest} bytes from here \
                         on are never read"
                    )
                });
                self.import_stops_at = Some(offset);
                return Ok(());
            }
            self.records += 1;
            let rest = (words as u64 - 1) * 8;
            if is_large {
                // Only the header matters; the payload may be gigabytes.
                let got = input.skip(rest)?;
                if got < rest {
                    self.truncated(offset, words, got);
                    return Ok(());
                }
                self.large_record(offset, words, perfetto_words);
                continue;
            }
            buf.clear();
            buf.extend_from_slice(&head);
            let got = input.read_into(rest, &mut buf)?;
            if got < rest {
                self.truncated(offset, words, got);
                return Ok(());
            }
            self.record(offset, &buf);
        }
    }

    pub(super) fn truncated(&mut self, offset: u64, words: usize, got: u64) {
        self.add(FindingKind::TruncatedRecord, offset, || {
            format!(
                "a record of {words} words but only {} bytes left: Perfetto keeps them as \
                 leftovers and never imports the record",
                got + 8
            )
        });
    }

    pub(super) fn large_record(&mut self, offset: u64, words: usize, perfetto_words: usize) {
        if words == perfetto_words {
            self.add(FindingKind::LargeRecordSkipped, offset, || {
                format!("a large record ({words} words): Perfetto skips record type 15")
            });
        } else {
            self.add(FindingKind::LargeRecordMisframed, offset, || {
                format!(
                    "a large record of {words} words: Perfetto reads its size from bits 4..15 \
                     only ({perfetto_words} words) and reads the rest of its payload as \
                     records; what it imports after this point is unreliable (the checker \
                     goes on with the true size)"
                )
            });
        }
    }

    /// The current provider, or `None` where Perfetto has none.
    pub(super) fn provider(&mut self) -> Option<&mut Provider> {
        self.providers.get_mut(&self.current)?.as_mut()
    }

    pub(super) fn tally(&mut self) -> &mut Tally {
        self.tallies.entry(self.current).or_default()
    }

    pub(super) fn record(&mut self, offset: u64, bytes: &[u8]) {
        let mut c = Cursor::new(bytes);
        let header = c.header();
        let record_type = RecordType::from_raw(RecordHeader::TYPE.get(header) as u8);
        if record_type == Some(RecordType::Metadata) {
            return self.metadata(offset, &mut c);
        }
        if self.provider().is_none() {
            let (id, at) = (self.current, self.section_at);
            self.add(FindingKind::RecordWithoutProvider, offset, || {
                format!(
                    "the provider section at @{at} selects provider {id}, which no Provider \
                     Info record introduced: Perfetto has no current provider and drops this \
                     record and the others up to the next provider metadata"
                )
            });
            return;
        }
        // A dropped record has its finding already.
        let _ = match record_type {
            Some(RecordType::Initialization) => self.initialization(offset, &mut c),
            Some(RecordType::String) => self.string_record(offset, &mut c),
            Some(RecordType::Thread) => self.thread_record(offset, &mut c),
            Some(RecordType::Event) => self.event(offset, &mut c),
            Some(RecordType::Blob) => {
                self.blob(offset, header);
                Ok(())
            }
            Some(RecordType::UserspaceObject) => {
                self.add(FindingKind::UserspaceObjectSkipped, offset, || {
                    "a Userspace Object record: Perfetto does not import record type 6".into()
                });
                Ok(())
            }
            Some(RecordType::KernelObject) => self.kernel_object(offset, &mut c),
            Some(RecordType::Scheduling) => self.scheduling(offset, &mut c),
            Some(RecordType::Log) => {
                self.add(FindingKind::LogSkipped, offset, || {
                    "a Log record: Perfetto does not import record type 9 (the message does \
                     not appear)"
                        .into()
                });
                Ok(())
            }
            // Large records are handled before the record is read.
            Some(RecordType::Metadata | RecordType::LargeRecord) => Ok(()),
            None => {
                let t = RecordHeader::TYPE.get(header);
                self.add(FindingKind::UnknownRecordType, offset, || {
                    format!("a record of type {t}, which the format does not define: skipped")
                });
                Ok(())
            }
        };
    }

    pub(super) fn malformed(&mut self, offset: u64, what: &str) -> Dropped {
        self.add(FindingKind::MalformedRecord, offset, || {
            format!("{what}: the record ends before its fields do; Perfetto drops it")
        });
        Dropped
    }

    /// The stream leaves the current provider: one an Info introduced that holds nothing
    /// (no string, thread or rate) is dropped from the table, to come back as it was if
    /// selected again (a million one-word Provider Info records cost no table each).
    fn leave_current(&mut self) {
        let current = self.current;
        if current != 0
            && self.introduced.contains(&current)
            && matches!(self.providers.get(&current), Some(Some(p)) if p.is_pristine())
        {
            self.providers.remove(&current);
        }
    }

    pub(super) fn metadata(&mut self, offset: u64, c: &mut Cursor<'_>) {
        let header = c.header();
        let metadata_type = MetadataRecord::METADATA_TYPE.get(header) as u8;
        match MetadataType::from_raw(metadata_type) {
            Some(MetadataType::ProviderInfo) => {
                let id = ProviderInfoMetadata::PROVIDER_ID.get(header) as u32;
                let len = ProviderInfoMetadata::NAME_LENGTH.get(header) as usize;
                if c.stream(len).is_none() {
                    self.malformed(offset, "a Provider Info record");
                    return;
                }
                if !self.introduced.insert(id) {
                    self.add(FindingKind::ProviderInfoRepeated, offset, || {
                        format!(
                            "a second Provider Info for provider {id}: Perfetto replaces the \
                             provider, emptying its string and thread tables and resetting its \
                             ticks per second to 1e9"
                        )
                    });
                }
                self.leave_current();
                self.providers.insert(id, Some(Provider::default()));
                self.current = id;
                self.section_at = offset;
            }
            Some(MetadataType::ProviderSection) => {
                let id = ProviderSectionMetadata::PROVIDER_ID.get(header) as u32;
                // `providers_[provider_id]` inserts a null provider for an unknown id: here an
                // absent id is that null provider (not inserted: a million one-word sections
                // of unknown ids must not cost an entry each). An introduced provider left
                // pristine was given back (`leave_current`): it comes back as it was.
                self.leave_current();
                if self.introduced.contains(&id) {
                    self.providers
                        .entry(id)
                        .or_insert_with(|| Some(Provider::default()));
                }
                self.current = id;
                self.section_at = offset;
            }
            Some(MetadataType::ProviderEvent) => {
                let id = ProviderEventMetadata::PROVIDER_ID.get(header) as u32;
                let event = ProviderEventMetadata::EVENT.get(header) as u8;
                self.add(FindingKind::ProviderEventIgnored, offset, || {
                    format!("Provider Event metadata (provider {id}, event {event}): ignored")
                });
                // (Remembered for the first providers only: one-word records of a million ids
                // must not cost a tally each.)
                let listed = self.tallies.len() < fxtrace_format::MAX_PROVIDERS_LISTED
                    || self.tallies.contains_key(&id);
                if event == PROVIDER_EVENT_BUFFER_OVERFLOW && listed {
                    self.tallies
                        .entry(id)
                        .or_default()
                        .overflow_at
                        .get_or_insert(offset);
                }
            }
            // Trace info (the magic number again, in concatenated archives) and unknown
            // metadata types: Perfetto ignores them without a trace.
            Some(MetadataType::TraceInfo) | None => {}
        }
    }

    pub(super) fn initialization(
        &mut self,
        offset: u64,
        c: &mut Cursor<'_>,
    ) -> Result<(), Dropped> {
        let Some(rate) = c.word() else {
            return Err(self.malformed(offset, "an Initialization record"));
        };
        if rate == 0 {
            let id = self.current;
            self.add(FindingKind::ZeroTicksPerSecond, offset, || {
                format!(
                    "provider {id} declares 0 ticks per second: Perfetto refuses every later \
                     timestamp of this provider"
                )
            });
        }
        if let Some(p) = self.provider() {
            p.ticks_per_second = Some(rate);
        }
        Ok(())
    }

    pub(super) fn string_record(&mut self, offset: u64, c: &mut Cursor<'_>) -> Result<(), Dropped> {
        let header = c.header();
        let index = StringRecord::INDEX.get(header) as u16;
        if index == 0 {
            return Ok(());
        }
        let len = StringRecord::LENGTH.get(header) as usize;
        let Some(bytes) = c.stream(len) else {
            return Err(self.malformed(offset, "a String record"));
        };
        let tag = StringTag::of(bytes);
        let hash = text_hash(bytes);
        if let Some(p) = self.provider() {
            p.strings.insert(index, (tag, hash));
        }
        Ok(())
    }

    pub(super) fn thread_record(&mut self, offset: u64, c: &mut Cursor<'_>) -> Result<(), Dropped> {
        let index = ThreadRecord::INDEX.get(c.header()) as u8;
        if index == 0 {
            return Ok(());
        }
        let (Some(pid), Some(tid)) = (c.word(), c.word()) else {
            return Err(self.malformed(offset, "a Thread record"));
        };
        self.koid(offset, "process", pid);
        self.koid(offset, "thread", tid);
        if let Some(p) = self.provider() {
            p.threads.insert(index, (pid, tid));
        }
        Ok(())
    }

    pub(super) fn koid(&mut self, offset: u64, what: &str, koid: u64) {
        if koid > u64::from(u32::MAX) {
            self.add(FindingKind::KoidTooWide, offset, || {
                format!(
                    "{what} koid {koid} does not fit 32 bits: Perfetto truncates it to {}",
                    koid as u32
                )
            });
        }
    }

    /// A string ref as Perfetto resolves it: inline (or 0, the empty string) from the
    /// record, else from the provider's table.
    pub(super) fn string_ref(
        &mut self,
        offset: u64,
        c: &mut Cursor<'_>,
        string_ref: u64,
        field: &str,
        effect: &str,
    ) -> Result<StringTag, Dropped> {
        self.string(offset, c, string_ref, field, effect)
            .map(|(tag, _)| tag)
    }

    /// [`Self::string_ref`] with a hash of the string's text.
    pub(super) fn string(
        &mut self,
        offset: u64,
        c: &mut Cursor<'_>,
        string_ref: u64,
        field: &str,
        effect: &str,
    ) -> Result<(StringTag, u64), Dropped> {
        let string_ref = string_ref as u16;
        if string_ref == 0 || string_ref & 0x8000 != 0 {
            return match c.stream(usize::from(string_ref & 0x7fff)) {
                Some(bytes) => Ok((StringTag::of(bytes), text_hash(bytes))),
                None => Err(self.malformed(offset, field)),
            };
        }
        if let Some(found) = self.provider().and_then(|p| p.strings.get(&string_ref)) {
            return Ok(*found);
        }
        let id = self.current;
        self.add(FindingKind::UnknownStringRef, offset, || {
            format!(
                "{field} refers to string index {string_ref}, which provider {id}'s table does \
                 not hold in Perfetto's view: {effect}"
            )
        });
        Err(Dropped)
    }

    /// A thread ref: inline (pid, tid) from the record, else from the provider's table
    /// (Perfetto uses (0, 0) for an unknown index).
    pub(super) fn thread_ref(
        &mut self,
        offset: u64,
        c: &mut Cursor<'_>,
        thread_ref: u64,
        field: &str,
    ) -> Result<(u64, u64), Dropped> {
        let thread_ref = thread_ref as u8;
        if thread_ref == 0 {
            let (Some(pid), Some(tid)) = (c.word(), c.word()) else {
                return Err(self.malformed(offset, field));
            };
            self.koid(offset, "process", pid);
            self.koid(offset, "thread", tid);
            return Ok((pid, tid));
        }
        if let Some(t) = self.provider().and_then(|p| p.threads.get(&thread_ref)) {
            return Ok(*t);
        }
        let id = self.current;
        self.add(FindingKind::UnknownThreadRef, offset, || {
            format!(
                "{field} refers to thread index {thread_ref}, which provider {id}'s table does \
                 not hold: Perfetto puts it on pid 0, tid 0"
            )
        });
        Ok((0, 0))
    }

    /// The record's timestamp in Perfetto's nanoseconds; warns once per provider when no
    /// Initialization record set the rate.
    pub(super) fn timestamp(
        &mut self,
        offset: u64,
        c: &mut Cursor<'_>,
        field: &str,
    ) -> Result<i64, Dropped> {
        let Some(ticks) = c.word() else {
            return Err(self.malformed(offset, field));
        };
        let id = self.current;
        let Some(p) = self.provider() else {
            return Err(Dropped);
        };
        let rate = p.rate();
        if p.ticks_per_second.is_none() && !p.warned_uninitialized {
            p.warned_uninitialized = true;
            self.add(FindingKind::MissingInitialization, offset, || {
                format!(
                    "provider {id} has timestamped records but no Initialization record: \
                     Perfetto takes 1 tick = 1 ns"
                )
            });
        }
        match perfetto_ticks_to_ns(ticks, rate) {
            Some(ns) => Ok(ns),
            None => {
                self.add(FindingKind::TimestampOverflow, offset, || {
                    format!(
                        "{field}: {ticks} ticks at {rate} ticks/s is not a nanosecond count \
                         Perfetto accepts (0..=i64::MAX, rate > 0): the record is dropped"
                    )
                });
                Err(Dropped)
            }
        }
    }

    /// Reads `count` arguments as Perfetto's `ParseArgs` does.
    pub(super) fn args(
        &mut self,
        offset: u64,
        c: &mut Cursor<'_>,
        count: u64,
        what: &str,
        effect: &str,
    ) -> Result<Vec<ArgInfo>, Dropped> {
        let mut args = Vec::with_capacity(count as usize);
        for i in 0..count {
            let field = format!("{what}, argument {i}");
            let base = c.word;
            let Some(header) = c.word() else {
                return Err(self.malformed(offset, &field));
            };
            let size = ArgumentHeader::SIZE.get(header) as usize;
            if size == 0 {
                self.add(FindingKind::MalformedRecord, offset, || {
                    format!(
                        "{field} has size 0: Perfetto reads the same argument again and \
                         misreads the record"
                    )
                });
                return Err(Dropped);
            }
            let name = self.string_ref(
                offset,
                c,
                ArgumentHeader::NAME_REF.get(header),
                &format!("{field}'s name"),
                effect,
            )?;
            let raw_type = ArgumentHeader::TYPE.get(header) as u8;
            let kind = ArgType::from_raw(raw_type);
            let mut arg = ArgInfo {
                name,
                kind,
                i32_value: None,
                koid: None,
                unsigned: None,
                nonzero_number: false,
            };
            match kind {
                Some(ArgType::I32 | ArgType::U32) => {
                    let v = Int32Argument::VALUE.get(header);
                    arg.i32_value = Some(v as u32 as i32);
                    arg.unsigned = (kind == Some(ArgType::U32)).then_some(v);
                    arg.nonzero_number = v != 0;
                }
                Some(ArgType::I64 | ArgType::U64) => match c.word() {
                    Some(v) => {
                        arg.unsigned = (kind == Some(ArgType::U64)).then_some(v);
                        arg.nonzero_number = v != 0;
                    }
                    None => return Err(self.malformed(offset, &field)),
                },
                Some(ArgType::F64) => match c.word() {
                    Some(v) => arg.nonzero_number = f64::from_bits(v) != 0.0,
                    None => return Err(self.malformed(offset, &field)),
                },
                Some(ArgType::Pointer) => {
                    if c.word().is_none() {
                        return Err(self.malformed(offset, &field));
                    }
                }
                Some(ArgType::Koid) => match c.word() {
                    Some(v) => arg.koid = Some(v),
                    None => return Err(self.malformed(offset, &field)),
                },
                Some(ArgType::Str) => {
                    self.string_ref(
                        offset,
                        c,
                        StringArgument::VALUE_REF.get(header),
                        &format!("{field}'s value"),
                        effect,
                    )?;
                }
                Some(ArgType::Null | ArgType::Bool) => {}
                Some(ArgType::Blob) | None => {
                    let shown = if kind == Some(ArgType::Blob) {
                        "a blob argument (type 10)".to_owned()
                    } else {
                        format!("an argument of unknown type {raw_type}")
                    };
                    self.add(FindingKind::ArgTypeUnknown, offset, || {
                        format!("{field} is {shown}: Perfetto shows its value as \"unknown\"")
                    });
                }
            }
            c.word = base + size;
            if c.word > c.words() {
                return Err(self.malformed(offset, &field));
            }
            args.push(arg);
        }
        Ok(args)
    }

    pub(super) fn event(&mut self, offset: u64, c: &mut Cursor<'_>) -> Result<(), Dropped> {
        let header = c.header();
        let ts = self.timestamp(offset, c, "an event's timestamp")?;
        let thread = self.thread_ref(
            offset,
            c,
            EventRecord::THREAD_REF.get(header),
            "an event's thread",
        )?;
        let drop = "Perfetto drops the event";
        self.string_ref(
            offset,
            c,
            EventRecord::CATEGORY_REF.get(header),
            "an event's category",
            drop,
        )?;
        let (name, name_hash) = self.string(
            offset,
            c,
            EventRecord::NAME_REF.get(header),
            "an event's name",
            drop,
        )?;
        let args = self.args(
            offset,
            c,
            EventRecord::ARGUMENT_COUNT.get(header),
            "an event",
            drop,
        )?;
        let raw_type = EventRecord::EVENT_TYPE.get(header) as u8;
        let event_type = EventType::from_raw(raw_type);
        let mut complete_end = None;
        match event_type {
            Some(EventType::Instant | EventType::DurationBegin | EventType::DurationEnd) => {}
            Some(EventType::Counter) => {
                if c.word().is_none() {
                    return Err(self.malformed(offset, "a counter event's id"));
                }
                let non_numeric = args.iter().filter(|a| !a.numeric()).count();
                if non_numeric > 0 {
                    self.add(FindingKind::NonNumericCounterArg, offset, || {
                        format!(
                            "a counter event with {non_numeric} non-numeric argument(s): \
                             Perfetto plots only i32, u32, i64, u64 and f64 values"
                        )
                    });
                }
            }
            Some(EventType::DurationComplete) => {
                let Some(end_ticks) = c.word() else {
                    return Err(self.malformed(offset, "a duration-complete event's end"));
                };
                let rate = self.provider().map_or(1_000_000_000, |p| p.rate());
                match perfetto_ticks_to_ns(end_ticks, rate) {
                    Some(end) if end < ts => {
                        self.add(FindingKind::NegativeDuration, offset, || {
                            format!(
                                "a duration-complete event ends at {end} ns, before it begins \
                                 ({ts} ns): Perfetto drops it"
                            )
                        });
                        return Err(Dropped);
                    }
                    Some(end) => complete_end = Some(end),
                    None => {
                        self.add(FindingKind::TimestampOverflow, offset, || {
                            format!(
                                "a duration-complete event's end ({end_ticks} ticks) is not a \
                                 nanosecond count Perfetto accepts: the event is dropped"
                            )
                        });
                        return Err(Dropped);
                    }
                }
            }
            Some(
                t @ (EventType::AsyncBegin
                | EventType::AsyncInstant
                | EventType::AsyncEnd
                | EventType::FlowBegin
                | EventType::FlowStep
                | EventType::FlowEnd),
            ) => {
                let Some(id) = c.word() else {
                    return Err(self.malformed(offset, "an async or flow event's id"));
                };
                if matches!(t, EventType::AsyncBegin | EventType::AsyncEnd) {
                    self.async_slice(offset, t, (name_hash, thread.0, id), ts);
                }
            }
            None => {
                self.add(FindingKind::UnknownEventType, offset, || {
                    format!("an event of type {raw_type}: Perfetto's parser does nothing with it")
                });
            }
        }
        if let Some(event_type) = event_type {
            self.thread_slices(offset, thread, ts, event_type, complete_end);
        }
        let reports_drop = name == StringTag::Drop
            || args
                .iter()
                .any(|a| a.name == StringTag::Drop && a.nonzero_number);
        // The trace manager's markers, in its own section, report a drop of the provider
        // their argument names.
        let about = args
            .iter()
            .find(|a| a.name == StringTag::Provider)
            .and_then(|a| a.unsigned)
            .and_then(|id| u32::try_from(id).ok())
            .filter(|_| self.current == fxtrace_format::MANAGER_PROVIDER_ID);
        if let (true, Some(id)) = (reports_drop, about) {
            self.tallies.entry(id).or_default().drop_shown = true;
        }
        if reports_drop {
            self.tally().drop_shown = true;
        }
        Ok(())
    }

    /// Follows the duration slices open on each thread track, as far as flow events need
    /// them. Perfetto sorts events by time; a thread's events are taken in file order, which
    /// is time order for a thread written by one provider.
    pub(super) fn thread_slices(
        &mut self,
        offset: u64,
        (pid, tid): (u64, u64),
        ts: i64,
        event_type: EventType,
        complete_end: Option<i64>,
    ) {
        // Perfetto's thread track: UpdateThread(uint32 tid, uint32 pid). A track with nothing
        // open is not kept (memory follows the slices open, not the threads seen).
        let key = (pid as u32, tid as u32);
        let Some(slices) = self.slices.entry(key) else {
            return;
        };
        // A complete slice is closed by the first event at or after its end.
        slices.completes.close_reached(ts);
        match event_type {
            EventType::DurationBegin => slices.open_begins += 1,
            EventType::DurationEnd => {
                if slices.open_begins == 0 {
                    self.add(FindingKind::UnmatchedDurationEnd, offset, || {
                        format!(
                            "a duration end on thread {tid} (pid {pid}) at {ts} ns with no \
                             duration begin open: Perfetto drops it"
                        )
                    });
                } else {
                    slices.open_begins -= 1;
                }
            }
            EventType::DurationComplete => {
                if let Some(end) = complete_end.filter(|&end| end > ts) {
                    slices.completes.push(ts, end);
                }
            }
            EventType::FlowBegin | EventType::FlowStep | EventType::FlowEnd => {
                let enclosed = slices.open_begins > 0 || slices.completes.any_started_by(ts);
                if !enclosed {
                    self.add(FindingKind::FlowWithoutEnclosingSlice, offset, || {
                        format!(
                            "a flow event on thread {tid} (pid {pid}) at {ts} ns with no \
                             duration slice open there: Perfetto binds flows to the enclosing \
                             slice and drops this one (flow_no_enclosing_slice)"
                        )
                    });
                }
            }
            _ => {}
        }
        if self
            .slices
            .get(&key)
            .is_some_and(|s| s.open_begins == 0 && s.completes.is_empty())
        {
            self.slices.remove(&key);
        }
    }

    /// An async begin or end on its track (name, process, correlation id): an end with no
    /// begin open there is dropped by Perfetto's slice tracker, a begin never ended is a
    /// slice that "did not end".
    pub(super) fn async_slice(
        &mut self,
        offset: u64,
        event_type: EventType,
        track: (u64, u64, u64),
        ts: i64,
    ) {
        let (_, pid, id) = track;
        if event_type == EventType::AsyncBegin {
            if let Some(open) = self.asyncs.entry(track) {
                open.0 += 1;
                if open.0 == 1 {
                    open.1 = offset;
                }
            }
            return;
        }
        let refused = self.asyncs.refused();
        match self.asyncs.get_mut(&track) {
            Some(open) if open.0 > 0 => {
                open.0 -= 1;
                if open.0 == 0 {
                    self.asyncs.remove(&track);
                }
            }
            // A begin beyond the bound was not followed: no finding either way.
            _ if refused > 0 => {}
            _ => self.add(FindingKind::UnmatchedAsyncEnd, offset, || {
                format!(
                    "an async end (process {pid}, id {id}) at {ts} ns with no async begin of \
                     that name open on its track: Perfetto drops it (a wrapped or cut trace \
                     lost the begin)"
                )
            }),
        }
    }

    pub(super) fn blob(&mut self, offset: u64, header: u64) {
        let blob_type = BlobType(BlobRecord::BLOB_TYPE.get(header) as u8);
        match blob_type {
            BlobType::LAST_BRANCH => self.add(FindingKind::LbrBlobSkipped, offset, || {
                "a LAST_BRANCH blob: Perfetto skips it (`fxtrace report lbr` reads it)".into()
            }),
            BlobType::PERFETTO => self.add(FindingKind::PerfettoBlob, offset, || {
                "a blob of type 3 (Perfetto): Perfetto parses its payload as protobuf \
                 TracePackets at the end of each chunk; anything else there is an import error"
                    .into()
            }),
            other => self.add(FindingKind::BlobSkipped, offset, || {
                format!("a blob of type {other}: Perfetto skips it")
            }),
        }
    }

    pub(super) fn kernel_object(&mut self, offset: u64, c: &mut Cursor<'_>) -> Result<(), Dropped> {
        let header = c.header();
        let Some(koid) = c.word() else {
            return Err(self.malformed(offset, "a Kernel Object record"));
        };
        self.string_ref(
            offset,
            c,
            KernelObjectRecord::NAME_REF.get(header),
            "a Kernel Object's name",
            "Perfetto drops the record (the name is lost)",
        )?;
        let object_type = ObjectType(KernelObjectRecord::OBJECT_TYPE.get(header) as u8);
        match object_type {
            ObjectType::PROCESS => self.koid(offset, "process", koid),
            ObjectType::THREAD => {
                self.koid(offset, "thread", koid);
                let count = KernelObjectRecord::ARGUMENT_COUNT.get(header);
                let args = self.args(
                    offset,
                    c,
                    count,
                    "a thread's Kernel Object record",
                    "Perfetto loses the argument (a lost \"process\" leaves the thread in \
                     process 0)",
                )?;
                let mut pid = 0;
                for a in args.iter().filter(|a| a.name == StringTag::Process) {
                    let Some(p) = a.koid else {
                        let kind = a.kind.map_or("unknown", ArgType::name);
                        self.add(FindingKind::WrongArgType, offset, || {
                            format!(
                                "thread {koid}'s \"process\" argument is of type {kind}, not \
                                 koid: Perfetto drops the record (the thread's name is lost)"
                            )
                        });
                        return Err(Dropped);
                    };
                    pid = p;
                }
                self.koid(offset, "process", pid);
                if let Some(p) = self.process_of.entry(koid) {
                    *p = pid;
                }
                if pid == 0 && koid != 0 {
                    self.without_process(offset, koid, "its name record has no \"process\" koid");
                }
            }
            other => self.add(FindingKind::KernelObjectSkipped, offset, || {
                format!(
                    "a Kernel Object of type {other}: Perfetto imports only processes and threads"
                )
            }),
        }
        Ok(())
    }

    pub(super) fn without_process(&mut self, offset: u64, tid: u64, why: &str) {
        if self.reported_without_process.get(&tid).is_some() {
            return;
        }
        // (Beyond the bound, a thread is reported again: counted, never lost.)
        self.reported_without_process.entry(tid);
        self.add(FindingKind::ThreadWithoutProcess, offset, || {
            format!(
                "thread {tid}: {why}; Perfetto attributes it to process 0, apart from the \
                 events that carry its real pid"
            )
        });
    }

    pub(super) fn scheduling(&mut self, offset: u64, c: &mut Cursor<'_>) -> Result<(), Dropped> {
        let header = c.header();
        let raw = SchedulingRecord::SCHEDULING_TYPE.get(header) as u8;
        let Some(kind) = SchedulingType::from_raw(raw) else {
            self.add(FindingKind::UnknownEventType, offset, || {
                format!("a scheduling record of type {raw}: Perfetto skips it")
            });
            return Ok(());
        };
        let ts = self.timestamp(offset, c, "a scheduling record's timestamp")?;
        match kind {
            SchedulingType::LegacyContextSwitch => {
                let refs = [
                    ContextSwitchRecord::OUTGOING_THREAD_REF.get(header),
                    ContextSwitchRecord::INCOMING_THREAD_REF.get(header),
                ];
                let priorities = [
                    ContextSwitchRecord::OUTGOING_PRIORITY.get(header),
                    ContextSwitchRecord::INCOMING_PRIORITY.get(header),
                ];
                let mut tids = [0; 2];
                for (i, side) in SIDES.iter().enumerate() {
                    let field = format!("a context switch's {side} thread");
                    tids[i] = self.thread_ref(offset, c, refs[i], &field)?.1;
                }
                for i in 0..2 {
                    self.legacy_side(offset, SIDES[i], tids[i], priorities[i]);
                }
                self.outgoing_state(offset, ContextSwitchRecord::OUTGOING_STATE.get(header));
            }
            SchedulingType::ContextSwitch => {
                let (Some(outgoing), Some(incoming)) = (c.word(), c.word()) else {
                    return Err(self.malformed(offset, "a context switch (type 1)"));
                };
                let count = SchedContextSwitchRecord::ARGUMENT_COUNT.get(header);
                let args = self.args(
                    offset,
                    c,
                    count,
                    "a context switch (type 1)",
                    "Perfetto drops the record",
                )?;
                let mut weights = [0i32; 2];
                for a in &args {
                    let i = match a.name {
                        StringTag::OutgoingWeight => 0,
                        StringTag::IncomingWeight => 1,
                        _ => continue,
                    };
                    weights[i] = self.i32_weight(offset, a, SIDES[i])?;
                }
                for (i, tid) in [outgoing, incoming].into_iter().enumerate() {
                    self.koid(offset, "thread", tid);
                    self.weighted_side(offset, SIDES[i], tid, weights[i]);
                }
                if weights[0] != PERFETTO_IDLE_WEIGHT {
                    self.outgoing_state(
                        offset,
                        SchedContextSwitchRecord::OUTGOING_STATE.get(header),
                    );
                }
            }
            SchedulingType::ThreadWakeup => {
                let Some(tid) = c.word() else {
                    return Err(self.malformed(offset, "a thread wakeup"));
                };
                let count = SchedThreadWakeupRecord::ARGUMENT_COUNT.get(header);
                let args = self.args(
                    offset,
                    c,
                    count,
                    "a thread wakeup",
                    "Perfetto drops the record",
                )?;
                let mut weight = 0;
                let mut waker = false;
                for a in &args {
                    match a.name {
                        StringTag::Weight => weight = self.i32_weight(offset, a, "woken")?,
                        StringTag::Waker => match a.koid {
                            Some(koid) => {
                                waker = true;
                                self.koid(offset, "waker", koid)
                            }
                            None => {
                                self.add(FindingKind::WrongArgType, offset, || {
                                    "a thread wakeup's \"waker\" argument is not a koid: \
                                     Perfetto drops the record"
                                        .into()
                                });
                                return Err(Dropped);
                            }
                        },
                        _ => {}
                    }
                }
                self.koid(offset, "thread", tid);
                if weight != PERFETTO_IDLE_WEIGHT && tid != 0 {
                    self.check_process(offset, tid);
                    if !waker {
                        self.add(FindingKind::WakeupWithoutWaker, offset, || {
                            format!(
                                "a wakeup of thread {tid} without a \"waker\" koid: Perfetto \
                                 records the thread as its own waker"
                            )
                        });
                    }
                }
            }
        }
        let id = self.current;
        match self.tally().last_sched {
            Some((last, at)) if ts < last => {
                self.add(FindingKind::SchedOutOfOrder, offset, || {
                    format!(
                        "a scheduling record at {ts} ns comes after one at {last} ns (@{at}) in \
                         provider {id}: Perfetto versions that apply context switches in file \
                         order (the tokenizer, before they went through the sorter) get \
                         negative durations and unsorted scheduling tables"
                    )
                });
            }
            _ => self.tally().last_sched = Some((ts, offset)),
        }
        Ok(())
    }

    /// The outgoing state of a (non-idle) switch: Perfetto names states 0 to 5 only.
    pub(super) fn outgoing_state(&mut self, offset: u64, state: u64) {
        if state > ThreadState::Dead as u64 {
            self.add(FindingKind::UnknownThreadState, offset, || {
                format!(
                    "a context switch with outgoing state {state}: Perfetto knows 0 to 5 (new and \
                     running → R, suspended → T, blocked → S, dying → Z, dead → X) and gives this \
                     one no state"
                )
            });
        }
    }

    pub(super) fn i32_weight(
        &mut self,
        offset: u64,
        a: &ArgInfo,
        side: &str,
    ) -> Result<i32, Dropped> {
        match (a.kind, a.i32_value) {
            (Some(ArgType::I32), Some(v)) => Ok(v),
            _ => {
                let kind = a.kind.map_or("unknown", ArgType::name);
                self.add(FindingKind::WrongArgType, offset, || {
                    format!(
                        "the {side} weight argument is of type {kind}, not i32: Perfetto drops \
                         the record"
                    )
                });
                Err(Dropped)
            }
        }
    }

    /// One side of a legacy context switch: Perfetto calls it idle when the thread's process
    /// (from Kernel Object records, not from the record) is 0 and its priority is 0.
    pub(super) fn legacy_side(&mut self, offset: u64, side: &str, tid: u64, priority: u64) {
        let pid = self.process_of.get(&tid).copied().unwrap_or(0);
        let idle = pid == 0 && priority == 0;
        if tid == 0 {
            if !idle {
                self.add(FindingKind::IdleNotRecognized, offset, || {
                    format!(
                        "the {side} thread is tid 0 (idle) with priority {priority}: Perfetto \
                         recognises the idle thread in this layout only by priority 0 and no \
                         process, so it records tid 0 as a thread that runs (no CPU idle \
                         transitions)"
                    )
                });
            }
        } else if idle {
            self.add(FindingKind::ThreadTakenForIdle, offset, || {
                format!(
                    "the {side} thread {tid} has priority 0 and no Kernel Object record with \
                     its \"process\" koid before this point: Perfetto takes it for the idle \
                     thread and drops this side of the switch"
                )
            });
        } else {
            self.check_process(offset, tid);
        }
    }

    /// One side of a type-1 context switch: idle when its weight is INT32_MIN.
    pub(super) fn weighted_side(&mut self, offset: u64, side: &str, tid: u64, weight: i32) {
        let idle = weight == PERFETTO_IDLE_WEIGHT;
        if tid == 0 && !idle {
            self.add(FindingKind::IdleNotRecognized, offset, || {
                format!(
                    "the {side} thread is tid 0 (idle) without an {side}_weight of INT32_MIN: \
                     Perfetto records tid 0 as a thread that runs (no CPU idle transitions)"
                )
            });
        } else if tid != 0 && !idle {
            self.check_process(offset, tid);
        }
    }

    pub(super) fn check_process(&mut self, offset: u64, tid: u64) {
        if self.process_of.get(&tid).copied().unwrap_or(0) == 0 {
            self.without_process(
                offset,
                tid,
                "it is switched or woken before any Kernel Object record gives its \"process\" \
                 koid (Perfetto takes a switched thread's process only from there)",
            );
        }
    }
}

fn add(
    findings: &mut BTreeMap<FindingKind, Finding>,
    kind: FindingKind,
    offset: u64,
    message: impl FnOnce() -> String,
) {
    let finding = findings.entry(kind).or_insert_with(|| Finding {
        kind,
        offset,
        offsets: Vec::new(),
        count: 0,
        message: message(),
    });
    finding.count += 1;
    if finding.offsets.len() < MAX_OFFSETS && finding.offsets.last() != Some(&offset) {
        finding.offsets.push(offset);
    }
}

#[cfg(test)]
mod tests {
    use super::OpenCompletes;

    #[test]
    fn open_completes_close_at_their_end_and_say_whether_one_encloses() {
        let mut open = OpenCompletes::default();
        open.push(10, 100);
        open.push(20, 50);
        open.push(20, 60);
        assert!(open.any_started_by(10));
        assert!(!open.any_started_by(9));
        open.close_reached(60);
        // (20, 50) and (20, 60) closed: only the one starting at 10 is left.
        assert!(open.any_started_by(15));
        open.close_reached(100);
        assert!(!open.any_started_by(1000), "all closed");
    }
}
