//! [`EngineSink`]: the capture's FXT records ([`KernelTraceWriter`]) written into this
//! process's own engine buffer, next to the records of the program's instrumentation.
//!
//! The kernel trace writer numbers strings and threads in tables of its own, as if it owned a
//! provider section. Here it shares the section with the engine's per-thread caches, which
//! allocate indices from the same two tables; its indices are therefore *virtual*:
//!
//! - A String or Thread record from the writer is not written; the sink remembers what the
//!   virtual index stands for.
//! - A record that refers to a virtual index is written with an engine index, registered (with
//!   an engine-allocated index, durable String or Thread record) the first time it is used in
//!   each trace generation. When the engine's tables are full, the ref is written inline.
//! - Kernel Object records (process and thread names) are written to the durable buffer with
//!   inline refs and kept; when a new trace starts (a new generation: the manager cleared the
//!   buffer) they are written again before anything else, so every trace names its threads.
//! - Metadata (provider info, initialization, provider events) is the manager's and the
//!   engine's to write; it is skipped and counted.
//!
//! Records that arrive while no trace is running are discarded and counted
//! ([`EngineSinkStats::outside_trace`]), as the engine does not count instrumentation calls
//! made while tracing is off. A record the engine refuses while tracing (buffer full, no
//! writer slot) is returned as [`SinkError::Full`], which the kernel trace writer counts as
//! dropped (the engine counts it too, in the buffer header).

use fxtrace::capture::{RecordSink, SinkError};
use fxtrace::engine::{Context, RecordError, TraceWriter};
use fxtrace::format::{
    Arg, ArgValue, Blob, ContextSwitch, Encode, EncodeError, Event, KernelObject, LargeBlob,
    LargeBlobMetadata, Log, ProcessRef, Record, SchedContextSwitch, SchedThreadWakeup,
    StringRecord, StringRef, ThreadRecord, ThreadRef, UserspaceObject, MAX_ARGS, MAX_STRING_INDEX,
};

/// What an [`EngineSink`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct EngineSinkStats {
    /// Records written into the engine buffer (registrations and name replays included).
    pub(crate) written: u64,
    /// Records the engine refused while tracing (full buffer, no writer slot, encode limits).
    pub(crate) dropped: u64,
    /// Records discarded because no trace was running.
    pub(crate) outside_trace: u64,
    /// Metadata records skipped (the manager and the engine write their own).
    pub(crate) metadata_skipped: u64,
    /// String and Thread registrations written with an engine index.
    pub(crate) registrations: u64,
    /// Refs written inline because the engine's string or thread table was full.
    pub(crate) inline_refs: u64,
    /// Refs to a virtual index the writer never defined (written as empty / koid 0), and
    /// definitions of an index out of range (ignored).
    pub(crate) unknown_refs: u64,
    /// Name records written again at the start of a new trace.
    pub(crate) names_replayed: u64,
}

/// An already encoded record (a name record kept for later traces).
#[derive(Debug, Clone, PartialEq, Eq)]
struct EncodedRecord(Box<[u64]>);

impl Encode for EncodedRecord {
    fn words(&self) -> Result<usize, EncodeError> {
        Ok(self.0.len())
    }

    fn write(&self, out: &mut [u64]) -> Result<usize, EncodeError> {
        let (n, available) = (self.0.len(), out.len());
        let dst = out.get_mut(..n).ok_or(EncodeError::BufferTooSmall {
            needed: n,
            available,
        })?;
        dst.copy_from_slice(&self.0);
        Ok(n)
    }

    fn write_body(&self, body: &mut [u64]) -> Result<(u64, usize), EncodeError> {
        let n = self.0.len();
        let (&header, rest) = self.0.split_first().ok_or(EncodeError::BufferTooSmall {
            needed: 1,
            available: 0,
        })?;
        let available = body.len() + 1;
        let dst = body.get_mut(..n - 1).ok_or(EncodeError::BufferTooSmall {
            needed: n,
            available,
        })?;
        dst.copy_from_slice(rest);
        Ok((header, n))
    }
}

/// What the writer's virtual indices stand for.
#[derive(Debug)]
struct Definitions {
    /// Virtual string index → text.
    strings: Vec<Option<Box<str>>>,
    /// Virtual thread index → (pid, tid).
    threads: Vec<Option<(u64, u64)>>,
}

/// Engine indices registered for virtual ones, each valid in one generation.
#[derive(Debug)]
struct Registrations {
    /// Virtual string index → (generation, engine index); generation 0 = none.
    strings: Vec<(u32, u16)>,
    /// Virtual thread index → (generation, engine index).
    threads: Vec<(u32, u8)>,
}

/// A [`RecordSink`] writing into `context` (see the module docs).
#[derive(Debug)]
pub(crate) struct EngineSink {
    context: Context,
    defs: Definitions,
    regs: Registrations,
    /// Name records, by (koid, object type), encoded with inline refs.
    names: Vec<((u64, u8), EncodedRecord)>,
    /// The generation whose trace has the names written (0 = none yet).
    named_generation: u32,
    stats: EngineSinkStats,
}

impl EngineSink {
    /// A sink writing into `context`.
    pub(crate) fn new(context: Context) -> Self {
        Self {
            context,
            defs: Definitions {
                strings: Vec::new(),
                threads: Vec::new(),
            },
            regs: Registrations {
                strings: Vec::new(),
                threads: Vec::new(),
            },
            names: Vec::new(),
            named_generation: 0,
            stats: EngineSinkStats::default(),
        }
    }

    /// The counters.
    pub(crate) fn stats(&self) -> EngineSinkStats {
        self.stats
    }

    /// Keep a name record (replacing the previous one for the same object).
    fn keep_name(&mut self, key: (u64, u8), record: EncodedRecord) {
        match self.names.iter_mut().find(|(k, _)| *k == key) {
            Some((_, kept)) => *kept = record,
            None => self.names.push((key, record)),
        }
    }

    /// A kernel object record: resolve its refs, keep it, write it (durable).
    fn kernel_object(&mut self, object: &KernelObject<'_>) -> Result<usize, SinkError> {
        let mut args = [EMPTY_ARG; MAX_ARGS];
        let n = object.args.len().min(MAX_ARGS);
        for (slot, arg) in args.iter_mut().zip(&object.args[..n]) {
            *slot = Arg {
                name: self.defs.text_ref(arg.name, &mut self.stats),
                value: match arg.value {
                    ArgValue::Str(s) => ArgValue::Str(self.defs.text_ref(s, &mut self.stats)),
                    other => other,
                },
            };
        }
        let resolved = KernelObject {
            koid: object.koid,
            object_type: object.object_type,
            name: self.defs.text_ref(object.name, &mut self.stats),
            args: &args[..n],
        };
        let mut words = vec![0u64; resolved.words()?];
        resolved.write(&mut words)?;
        let record = EncodedRecord(words.into_boxed_slice());
        let size = record.0.len();
        self.keep_name((object.koid, object.object_type.0), record);

        let Self {
            context,
            names,
            named_generation,
            stats,
            ..
        } = self;
        let Some(mut writer) = writer_or_reason(context, stats)? else {
            return Ok(0);
        };
        if *named_generation != writer.generation() {
            // The replay writes the record just kept, with every other one.
            replay_names(names, named_generation, stats, &mut writer);
            return Ok(size);
        }
        let Some((_, record)) = names
            .iter()
            .find(|(k, _)| *k == (object.koid, object.object_type.0))
        else {
            return Ok(0);
        };
        let written = writer.write_durable(record);
        count(stats, written)
    }

    /// Any other record: refs translated, written to the rolling buffer.
    fn rolling(&mut self, record: &Record<'_>) -> Result<usize, SinkError> {
        let Self {
            context,
            defs,
            regs,
            names,
            named_generation,
            stats,
        } = self;
        let Some(mut writer) = writer_or_reason(context, stats)? else {
            return Ok(0);
        };
        replay_names(names, named_generation, stats, &mut writer);
        let mut remap = Remap {
            defs,
            regs,
            stats,
            writer: &mut writer,
        };
        let written = remap.write(record);
        drop(writer);
        count(stats, written)
    }
}

/// A writer section on `context`; `None` (counted) if no trace is running; `Full` if the
/// engine refused while tracing (it counted the drop).
fn writer_or_reason<'c>(
    context: &'c Context,
    stats: &mut EngineSinkStats,
) -> Result<Option<TraceWriter<'c>>, SinkError> {
    match context.trace_writer() {
        Some(writer) => Ok(Some(writer)),
        None if context.started_generation().is_none() => {
            stats.outside_trace += 1;
            Ok(None)
        }
        None => {
            stats.dropped += 1;
            Err(SinkError::Full)
        }
    }
}

/// In a new generation, write every kept name record (before anything else of this sink).
fn replay_names(
    names: &[((u64, u8), EncodedRecord)],
    named_generation: &mut u32,
    stats: &mut EngineSinkStats,
    writer: &mut TraceWriter<'_>,
) {
    let generation = writer.generation();
    if *named_generation == generation {
        return;
    }
    *named_generation = generation;
    for (_, record) in names {
        match writer.write_durable(record) {
            Ok(_) => {
                stats.names_replayed += 1;
                stats.written += 1;
            }
            Err(_) => stats.dropped += 1,
        }
    }
}

/// Count a write's outcome; a refusal becomes the sink error the writer counts.
fn count(
    stats: &mut EngineSinkStats,
    written: Result<usize, RecordError>,
) -> Result<usize, SinkError> {
    match written {
        Ok(words) => {
            stats.written += 1;
            Ok(words)
        }
        Err(RecordError::Dropped) => {
            stats.dropped += 1;
            Err(SinkError::Full)
        }
        Err(RecordError::Encode(e)) => {
            stats.dropped += 1;
            Err(SinkError::Encode(e))
        }
    }
}

const EMPTY_ARG: Arg<'static> = Arg {
    name: StringRef::Empty,
    value: ArgValue::Null,
};

impl Definitions {
    /// The text a ref stands for, inline (virtual indices resolved).
    fn text_ref<'a>(&'a self, r: StringRef<'a>, stats: &mut EngineSinkStats) -> StringRef<'a> {
        match r {
            StringRef::Index(i) => {
                match self.strings.get(usize::from(i)).and_then(|s| s.as_deref()) {
                    Some(text) => StringRef::Inline(text),
                    None => {
                        stats.unknown_refs += 1;
                        StringRef::Empty
                    }
                }
            }
            other => other,
        }
    }
}

/// Translation of one record's refs to engine refs, registering them as needed.
struct Remap<'d, 'w, 'c> {
    defs: &'d Definitions,
    regs: &'d mut Registrations,
    stats: &'d mut EngineSinkStats,
    writer: &'w mut TraceWriter<'c>,
}

impl<'d> Remap<'d, '_, '_> {
    /// The engine ref for a (possibly virtual) string ref.
    fn string<'a>(&mut self, r: StringRef<'a>) -> StringRef<'a>
    where
        'd: 'a,
    {
        let StringRef::Index(virtual_index) = r else {
            return r;
        };
        let Some(text) = self
            .defs
            .strings
            .get(usize::from(virtual_index))
            .and_then(|s| s.as_deref())
        else {
            self.stats.unknown_refs += 1;
            return StringRef::Empty;
        };
        let generation = self.writer.generation();
        let (registered_in, index) = self.regs.strings[usize::from(virtual_index)];
        if registered_in == generation {
            return StringRef::Index(index);
        }
        let registered = self.writer.context().alloc_string_index().filter(|&index| {
            self.writer
                .write_durable(&StringRecord { index, value: text })
                .is_ok()
        });
        match registered {
            Some(index) => {
                self.stats.registrations += 1;
                self.stats.written += 1;
                self.regs.strings[usize::from(virtual_index)] = (generation, index);
                StringRef::Index(index)
            }
            None => {
                self.stats.inline_refs += 1;
                StringRef::Inline(text)
            }
        }
    }

    /// The engine ref for a (possibly virtual) thread ref.
    fn thread(&mut self, r: ThreadRef) -> ThreadRef {
        let ThreadRef::Index(virtual_index) = r else {
            return r;
        };
        let Some((pid, tid)) = self
            .defs
            .threads
            .get(usize::from(virtual_index))
            .copied()
            .flatten()
        else {
            self.stats.unknown_refs += 1;
            return ThreadRef::Inline { pid: 0, tid: 0 };
        };
        let generation = self.writer.generation();
        let (registered_in, index) = self.regs.threads[usize::from(virtual_index)];
        if registered_in == generation {
            return ThreadRef::Index(index);
        }
        let registered = self.writer.context().alloc_thread_index().filter(|&index| {
            self.writer
                .write_durable(&ThreadRecord { index, pid, tid })
                .is_ok()
        });
        match registered {
            Some(index) => {
                self.stats.registrations += 1;
                self.stats.written += 1;
                self.regs.threads[usize::from(virtual_index)] = (generation, index);
                ThreadRef::Index(index)
            }
            None => {
                self.stats.inline_refs += 1;
                ThreadRef::Inline { pid, tid }
            }
        }
    }

    fn process(&mut self, r: ProcessRef) -> ProcessRef {
        match r {
            ProcessRef::Index(i) => match self.thread(ThreadRef::Index(i)) {
                ThreadRef::Index(index) => ProcessRef::Index(index),
                ThreadRef::Inline { pid, .. } => ProcessRef::Inline(pid),
            },
            inline => inline,
        }
    }

    /// `args` translated into `out`; returns the translated slice.
    fn args<'a, 'o>(&mut self, args: &[Arg<'a>], out: &'o mut [Arg<'a>; MAX_ARGS]) -> &'o [Arg<'a>]
    where
        'd: 'a,
    {
        let n = args.len().min(MAX_ARGS);
        for (slot, arg) in out.iter_mut().zip(&args[..n]) {
            *slot = Arg {
                name: self.string(arg.name),
                value: match arg.value {
                    ArgValue::Str(s) => ArgValue::Str(self.string(s)),
                    other => other,
                },
            };
        }
        &out[..n]
    }

    /// Translate `record` and write it into the rolling buffer.
    fn write<'a>(&mut self, record: &Record<'a>) -> Result<usize, RecordError>
    where
        'd: 'a,
    {
        let mut buf = [EMPTY_ARG; MAX_ARGS];
        let translated: Record<'_> = match *record {
            Record::Event(ref e) => Record::Event(Event {
                ticks: e.ticks,
                thread: self.thread(e.thread),
                category: self.string(e.category),
                name: self.string(e.name),
                args: self.args(e.args, &mut buf),
                kind: e.kind,
            }),
            Record::Blob(ref b) => Record::Blob(Blob {
                name: self.string(b.name),
                blob_type: b.blob_type,
                payload: b.payload,
            }),
            Record::UserspaceObject(ref u) => Record::UserspaceObject(UserspaceObject {
                pointer: u.pointer,
                process: self.process(u.process),
                name: self.string(u.name),
                args: self.args(u.args, &mut buf),
            }),
            Record::ContextSwitch(ref c) => Record::ContextSwitch(ContextSwitch {
                outgoing: self.thread(c.outgoing),
                incoming: self.thread(c.incoming),
                ..*c
            }),
            Record::SchedContextSwitch(ref c) => Record::SchedContextSwitch(SchedContextSwitch {
                args: self.args(c.args, &mut buf),
                ..*c
            }),
            Record::SchedThreadWakeup(ref w) => Record::SchedThreadWakeup(SchedThreadWakeup {
                args: self.args(w.args, &mut buf),
                ..*w
            }),
            Record::Log(ref l) => Record::Log(Log {
                ticks: l.ticks,
                thread: self.thread(l.thread),
                message: l.message,
            }),
            Record::LargeBlob(ref l) => {
                let category = self.string(l.category);
                let name = self.string(l.name);
                let metadata = l.metadata.as_ref().map(|m| LargeBlobMetadata {
                    ticks: m.ticks,
                    thread: self.thread(m.thread),
                    args: self.args(m.args, &mut buf),
                });
                Record::LargeBlob(LargeBlob {
                    category,
                    name,
                    metadata,
                    payload: l.payload,
                })
            }
            // Handled by `EngineSink::push` before translation.
            Record::KernelObject(_)
            | Record::String(_)
            | Record::Thread(_)
            | Record::MagicNumber(_)
            | Record::ProviderInfo(_)
            | Record::ProviderSection(_)
            | Record::ProviderEvent(_)
            | Record::Initialization(_) => return Ok(0),
        };
        self.writer.write(&translated)
    }
}

impl RecordSink for EngineSink {
    fn push(&mut self, record: &Record<'_>) -> Result<usize, SinkError> {
        match *record {
            Record::String(StringRecord { index, value }) => {
                if index == 0 || index > MAX_STRING_INDEX {
                    self.stats.unknown_refs += 1;
                    return Ok(0);
                }
                let i = usize::from(index);
                // The writer numbers strings 1, 2, ...: the tables grow one entry at a time.
                if self.defs.strings.len() <= i {
                    self.defs.strings.resize(i + 1, None);
                    self.regs.strings.resize(i + 1, (0, 0));
                }
                self.defs.strings[i] = Some(value.into());
                self.regs.strings[i] = (0, 0);
                Ok(0)
            }
            Record::Thread(ThreadRecord { index, pid, tid }) => {
                // (A u8 index is at most MAX_THREAD_INDEX.)
                if index == 0 {
                    self.stats.unknown_refs += 1;
                    return Ok(0);
                }
                let i = usize::from(index);
                if self.defs.threads.len() <= i {
                    self.defs.threads.resize(i + 1, None);
                    self.regs.threads.resize(i + 1, (0, 0));
                }
                // The writer reuses the indices of exited threads: a new registration each time.
                self.defs.threads[i] = Some((pid, tid));
                self.regs.threads[i] = (0, 0);
                Ok(0)
            }
            Record::MagicNumber(_)
            | Record::ProviderInfo(_)
            | Record::ProviderSection(_)
            | Record::ProviderEvent(_)
            | Record::Initialization(_) => {
                self.stats.metadata_skipped += 1;
                Ok(0)
            }
            Record::KernelObject(ref object) => self.kernel_object(object),
            ref other => self.rolling(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Mutex, MutexGuard};

    use fxtrace::buffer::header::BufferingMode;
    use fxtrace::capture::{
        CaptureEvent, KernelTraceConfig, KernelTraceWriter, LinuxThreadState, SwitchEvent,
        SwitchSides, TaskComm, ThreadInfo, Unsupported,
    };
    use fxtrace::engine::standalone::{self, StandaloneConfig};
    use fxtrace::engine::{Context, StartMode};
    use fxtrace::format::{Decoded, DecodedRecord, Decoder};

    use super::*;

    /// One current context per process: standalone sessions take turns.
    static SERIAL: Mutex<()> = Mutex::new(());

    fn serial() -> MutexGuard<'static, ()> {
        SERIAL.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn config() -> KernelTraceConfig {
        KernelTraceConfig {
            provider_id: 7,
            provider_name: "app".into(),
            ticks_per_second: fxtrace::clock::info().ticks_per_second,
            start_ticks: 1,
            recorder: (100, 100),
        }
    }

    fn thread(tid: u32, name: &str) -> CaptureEvent {
        CaptureEvent::Thread(ThreadInfo {
            time: 2,
            tid,
            pid: Some(100),
            name: Some(name.into()),
            process_name: Some("app".into()),
        })
    }

    fn switch(time: u64, prev: u32, next: u32) -> CaptureEvent {
        CaptureEvent::ContextSwitch(SwitchEvent {
            time,
            cpu: 1,
            prev_tid: prev,
            prev_pid: Some(100),
            next_tid: next,
            next_pid: Some(100),
            prev_state: LinuxThreadState::Blocked,
            prev_prio: 120,
            next_prio: 120,
            sides: SwitchSides::Both,
        })
    }

    fn decode(bytes: &[u8]) -> Vec<Decoded<'_>> {
        Decoder::new(bytes)
            .collect::<Result<Vec<_>, _>>()
            .expect("the archive decodes")
    }

    /// (outgoing tid, incoming tid) of every context switch, resolved by the decoder.
    fn switches(records: &[Decoded<'_>]) -> Vec<(u64, u64)> {
        records
            .iter()
            .filter_map(|d| match &d.record {
                DecodedRecord::ContextSwitch {
                    outgoing, incoming, ..
                } => Some((outgoing.tid, incoming.tid)),
                _ => None,
            })
            .collect()
    }

    fn thread_names(records: &[Decoded<'_>]) -> Vec<(u64, String)> {
        records
            .iter()
            .filter_map(|d| match &d.record {
                DecodedRecord::KernelObject {
                    koid,
                    object_type,
                    name,
                    ..
                } if *object_type == ObjectType::THREAD => Some((*koid, name.to_string())),
                _ => None,
            })
            .collect()
    }

    use fxtrace::format::ObjectType;

    #[test]
    fn capture_records_share_the_engine_tables_and_decode() {
        let _s = serial();
        let session = standalone::start(BufferingMode::Oneshot, 1 << 20).unwrap();
        let context: Context = session.context().clone();
        // The engine registers strings and threads of its own first (indices 1, 2, ...).
        fxtrace::instant("app", "before", fxtrace::Scope::Thread, &[]);
        let mut writer = KernelTraceWriter::new(EngineSink::new(context), config()).unwrap();
        for event in [
            thread(101, "main"),
            thread(102, "worker"),
            switch(10, 101, 102),
            CaptureEvent::Comm(TaskComm {
                time: 11,
                pid: 100,
                tid: 102,
                name: "renamed".into(),
                exec: false,
            }),
            switch(12, 102, 101),
            CaptureEvent::Unsupported(Unsupported {
                what: "LBR".into(),
                errno: Some(2),
                hint: "no PMU".into(),
            }),
        ] {
            writer.handle(&event).unwrap();
        }
        fxtrace::instant("app", "after", fxtrace::Scope::Thread, &[]);
        let (sink, ktw) = writer.finish().unwrap();
        let stats = sink.stats();
        assert_eq!(ktw.dropped_records, 0, "{ktw:?}");
        assert_eq!(stats.dropped, 0, "{stats:?}");
        assert_eq!(stats.outside_trace, 0);
        assert_eq!(
            stats.metadata_skipped, 2,
            "provider info and initialization"
        );
        assert!(stats.registrations >= 2, "{stats:?}");
        let (bytes, _) = session.finish_to_vec().unwrap();
        let records = decode(&bytes);
        // Thread refs resolve to the right tids although both tables were shared.
        assert_eq!(switches(&records), vec![(101, 102), (102, 101)]);
        let names = thread_names(&records);
        assert!(names.contains(&(101, "main".into())), "{names:?}");
        assert!(names.contains(&(102, "renamed".into())), "{names:?}");
        // The engine's own events still resolve their (indexed) strings.
        let events: Vec<String> = records
            .iter()
            .filter_map(|d| match &d.record {
                DecodedRecord::Event(e) => Some(format!("{}:{}", e.category, e.name)),
                _ => None,
            })
            .collect();
        assert!(events.contains(&"app:before".into()), "{events:?}");
        assert!(events.contains(&"app:after".into()), "{events:?}");
        assert!(
            events
                .iter()
                .any(|e| e.starts_with("fxtrace:fxtrace: LBR unavailable")),
            "{events:?}"
        );
        assert!(records.iter().any(|d| matches!(
            &d.record,
            DecodedRecord::Log { message, .. } if message.contains("no PMU")
        )));
    }

    #[test]
    fn records_outside_a_trace_are_counted_and_names_come_back_in_the_next_trace() {
        let _s = serial();
        let session =
            standalone::start_with(StandaloneConfig::new(BufferingMode::Oneshot, 1 << 20)).unwrap();
        let context = session.context().clone();
        let mut writer =
            KernelTraceWriter::new(EngineSink::new(context.clone()), config()).unwrap();
        writer.handle(&thread(101, "main")).unwrap();
        writer.handle(&switch(10, 101, 0)).unwrap();
        // Stop, then switches arrive while no trace runs.
        context.stop(std::time::Duration::from_secs(1)).unwrap();
        writer.handle(&thread(102, "late")).unwrap();
        writer.handle(&switch(11, 101, 102)).unwrap();
        assert_eq!(writer.sink().stats().outside_trace, 2);
        assert_eq!(writer.stats().dropped_records, 0);
        // A new trace (the manager cleared the buffer): names are written again, and the
        // threads get engine indices of the new generation.
        fxtrace::engine::start_trace(&context, StartMode::ClearEntire, Default::default()).unwrap();
        writer.handle(&switch(12, 102, 101)).unwrap();
        let (sink, _) = writer.finish().unwrap();
        assert!(sink.stats().names_replayed >= 3, "{:?}", sink.stats());
        let (bytes, _) = session.finish_to_vec().unwrap();
        let records = decode(&bytes);
        assert_eq!(switches(&records), vec![(102, 101)]);
        let names = thread_names(&records);
        assert!(names.contains(&(101, "main".into())), "{names:?}");
        assert!(names.contains(&(102, "late".into())), "{names:?}");
    }

    #[test]
    fn encoded_records_copy_exactly() {
        let record = EncodedRecord(vec![1, 2, 3].into_boxed_slice());
        assert_eq!(record.words(), Ok(3));
        let mut out = [0u64; 4];
        assert_eq!(record.write(&mut out), Ok(3));
        assert_eq!(out, [1, 2, 3, 0]);
        let mut body = [0u64; 2];
        assert_eq!(record.write_body(&mut body), Ok((1, 3)));
        assert_eq!(body, [2, 3]);
        assert!(record.write(&mut [0u64; 2]).is_err());
        assert!(record.write_body(&mut [0u64; 1]).is_err());
    }
}
