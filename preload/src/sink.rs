//! [`EngineSink`]: the capture's FXT records ([`KernelTraceWriter`]) written into this
//! process's own engine buffer, next to the records of the program's instrumentation, and
//! [`EngineRefs`]: the engine's string and thread tables as the writer's [`RefTable`].
//!
//! The writer shares the section with the engine's per-thread caches, so it takes its string
//! and thread indices from the engine's two tables (`Context::alloc_string_index`,
//! `Context::alloc_thread_index`), and its records refer to engine indices as they are: no
//! record is translated. An index belongs to one trace generation: the table's epoch is the
//! generation, and the writer registers again (and names its threads and processes again)
//! when a new trace starts. Every registration and record is written in a writer section of
//! the generation the writer observed at its last epoch check; one that finds another
//! generation (a trace restarted in between) is not written (counted in
//! [`EngineSinkStats::stale_generation`]), as its indices would mean nothing there.
//!
//! - Kernel Object records (process and thread names) and registrations go to the durable
//!   buffer, everything else to the rolling buffer.
//! - Metadata (provider info, initialization, provider events) is the manager's and the
//!   engine's to write; it is skipped and counted. String and Thread records pushed as records
//!   (not registered through [`EngineRefs`]) would claim indices the engine did not hand out:
//!   they are refused and counted as dropped.
//!
//! Records that arrive while no trace is running are discarded and counted
//! ([`EngineSinkStats::outside_trace`]), as the engine does not count instrumentation calls
//! made while tracing is off. A record the engine refuses while tracing (buffer full, no
//! writer slot) is returned as [`SinkError::Full`], which the kernel trace writer counts as
//! dropped (the engine counts it too, in the buffer header).

#[cfg(doc)]
use fxtrace::capture::KernelTraceWriter;
use fxtrace::capture::{RecordSink, RefTable, Registration, SinkError};
use fxtrace::engine::{Context, RecordError, TraceWriter};
use fxtrace_format::{Record, StringRecord, ThreadRecord};

/// What an [`EngineSink`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct EngineSinkStats {
    /// Records written into the engine buffer (registrations included).
    pub(crate) written: u64,
    /// Records the engine refused while tracing (full buffer, no writer slot, encode limits).
    pub(crate) dropped: u64,
    /// Records discarded because no trace was running.
    pub(crate) outside_trace: u64,
    /// Records and registrations not written because a new trace started after the writer's
    /// last epoch check (their indices belong to the previous one).
    pub(crate) stale_generation: u64,
    /// Metadata records skipped (the manager and the engine write their own).
    pub(crate) metadata_skipped: u64,
    /// String and Thread registrations written with an engine index.
    pub(crate) registrations: u64,
}

/// A [`RecordSink`] writing into `context` (see the module docs).
#[derive(Debug)]
pub(crate) struct EngineSink {
    context: Context,
    /// The generation the writer's indices belong to (its last epoch check).
    generation: Option<u32>,
    stats: EngineSinkStats,
}

/// The engine's string and thread tables as a [`RefTable`] of an [`EngineSink`].
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct EngineRefs;

/// Where one record goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Buffer {
    Durable,
    Rolling,
}

impl EngineSink {
    /// A sink writing into `context`.
    pub(crate) fn new(context: Context) -> Self {
        Self {
            context,
            generation: None,
            stats: EngineSinkStats::default(),
        }
    }

    /// The counters.
    pub(crate) fn stats(&self) -> EngineSinkStats {
        self.stats
    }

    /// A writer section of the writer's generation; `None` if no trace is running (counted
    /// when `record` says the caller is a record, not a registration) or another one is
    /// (counted); `Full` if the engine refused while tracing (it counted the drop).
    fn section(&mut self, record: bool) -> Result<Option<TraceWriter<'_>>, SinkError> {
        match self.context.trace_writer() {
            Some(writer) if Some(writer.generation()) == self.generation => Ok(Some(writer)),
            Some(_) => {
                self.stats.stale_generation += 1;
                Ok(None)
            }
            None if self.context.started_generation().is_none() => {
                self.stats.outside_trace += u64::from(record);
                Ok(None)
            }
            None => {
                self.stats.dropped += 1;
                Err(SinkError::Full)
            }
        }
    }

    /// Writes `record` into `buffer` of the writer's generation (0 words when it was
    /// discarded, see [`Self::section`]).
    fn write(&mut self, buffer: Buffer, record: &Record<'_>) -> Result<usize, SinkError> {
        let Some(mut writer) = self.section(true)? else {
            return Ok(0);
        };
        let written = match buffer {
            Buffer::Durable => writer.write_durable(record),
            Buffer::Rolling => writer.write(record),
        };
        drop(writer);
        count(&mut self.stats, written)
    }
}

impl RefTable<EngineSink> for EngineRefs {
    fn epoch(&mut self, sink: &mut EngineSink) -> Option<u64> {
        let generation = sink.context.started_generation()?;
        sink.generation = Some(generation);
        Some(u64::from(generation))
    }

    fn register_string(
        &mut self,
        sink: &mut EngineSink,
        value: &str,
    ) -> Result<Registration<u16>, SinkError> {
        let Some(mut writer) = sink.section(false)? else {
            return Ok(Registration::Discarded);
        };
        let Some(index) = writer.context().alloc_string_index() else {
            return Ok(Registration::TableFull);
        };
        let written = writer.write_durable(&StringRecord { index, value });
        drop(writer);
        Ok(registered(&mut sink.stats, index, written))
    }

    fn register_thread(
        &mut self,
        sink: &mut EngineSink,
        pid: u64,
        tid: u64,
    ) -> Result<Registration<u8>, SinkError> {
        let Some(mut writer) = sink.section(false)? else {
            return Ok(Registration::Discarded);
        };
        let Some(index) = writer.context().alloc_thread_index() else {
            return Ok(Registration::TableFull);
        };
        let written = writer.write_durable(&ThreadRecord { index, pid, tid });
        drop(writer);
        Ok(registered(&mut sink.stats, index, written))
    }

    /// Engine indices are not reused within a trace: nothing to give back.
    fn release_thread(&mut self, _index: u8) {}
}

/// Count a registration's outcome.
fn registered<I>(
    stats: &mut EngineSinkStats,
    index: I,
    written: Result<usize, RecordError>,
) -> Registration<I> {
    match written {
        Ok(words) => {
            stats.written += 1;
            stats.registrations += 1;
            Registration::Index { index, words }
        }
        // The index is lost, as when the engine's own registration fails.
        Err(_) => {
            stats.dropped += 1;
            Registration::Refused
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

impl RecordSink for EngineSink {
    fn push(&mut self, record: &Record<'_>) -> Result<usize, SinkError> {
        match record {
            Record::MagicNumber(_)
            | Record::ProviderInfo(_)
            | Record::ProviderSection(_)
            | Record::ProviderEvent(_)
            | Record::Initialization(_) => {
                self.stats.metadata_skipped += 1;
                Ok(0)
            }
            Record::String(_) | Record::Thread(_) => {
                self.stats.dropped += 1;
                Err(SinkError::Full)
            }
            Record::KernelObject(_) => self.write(Buffer::Durable, record),
            _ => self.write(Buffer::Rolling, record),
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
    use fxtrace_format::{Decoded, DecodedRecord, Decoder};

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
            uninterruptible: false,
            stack: None,
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

    use fxtrace_format::ObjectType;

    #[test]
    fn capture_records_share_the_engine_tables_and_decode() {
        let _s = serial();
        let session = standalone::start(BufferingMode::Oneshot, 1 << 20).unwrap();
        let context: Context = session.context().clone();
        // The engine registers strings and threads of its own first (indices 1, 2, ...).
        fxtrace::instant("app", "before", fxtrace::Scope::Thread, &[]);
        let mut writer =
            KernelTraceWriter::with_refs(EngineSink::new(context), EngineRefs, config()).unwrap();
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
                hint: "no PMU here, and the whole story".into(),
                summary: "no PMU".into(),
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
        // Said once: one event with the short reason and the whole text.
        let said: Vec<String> = records
            .iter()
            .filter_map(|d| match &d.record {
                DecodedRecord::Event(e) if e.name.contains("LBR unavailable") => Some(
                    e.args
                        .iter()
                        .map(|a| format!("{}={:?}", a.name, a.value))
                        .collect::<Vec<_>>()
                        .join(" "),
                ),
                _ => None,
            })
            .collect();
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0].contains("reason=Str(\"no PMU\")")
                && said[0].contains("whole story")
                && said[0].contains("errno=I32(2)"),
            "{said:?}"
        );
        assert!(!records.iter().any(|d| matches!(
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
            KernelTraceWriter::with_refs(EngineSink::new(context.clone()), EngineRefs, config())
                .unwrap();
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
        let (_, stats) = writer.finish().unwrap();
        assert_eq!(stats.epochs, 1, "{stats:?}");
        assert!(stats.names_replayed >= 3, "{stats:?}");
        let (bytes, _) = session.finish_to_vec().unwrap();
        let records = decode(&bytes);
        assert_eq!(switches(&records), vec![(102, 101)]);
        let names = thread_names(&records);
        assert!(names.contains(&(101, "main".into())), "{names:?}");
        assert!(names.contains(&(102, "late".into())), "{names:?}");
    }

    #[test]
    fn nothing_is_written_with_indices_of_an_earlier_trace() {
        let _s = serial();
        let session =
            standalone::start_with(StandaloneConfig::new(BufferingMode::Oneshot, 1 << 20)).unwrap();
        let context = session.context().clone();
        let mut sink = EngineSink::new(context.clone());
        let first = EngineRefs.epoch(&mut sink).expect("a trace runs");
        let log = Record::Log(fxtrace_format::Log {
            ticks: 5,
            thread: fxtrace_format::ThreadRef::Inline { pid: 1, tid: 2 },
            message: "kept",
        });
        assert!(sink.push(&log).unwrap() > 0);
        assert!(matches!(
            EngineRefs.register_string(&mut sink, "s").unwrap(),
            Registration::Index { .. }
        ));
        // A new trace starts before the writer checks its epoch again.
        context.stop(std::time::Duration::from_secs(1)).unwrap();
        fxtrace::engine::start_trace(&context, StartMode::ClearEntire, Default::default()).unwrap();
        assert_eq!(sink.push(&log).unwrap(), 0);
        assert_eq!(
            EngineRefs.register_thread(&mut sink, 1, 2).unwrap(),
            Registration::Discarded
        );
        assert_eq!(sink.stats().stale_generation, 2);
        // String and Thread records that did not come from the engine's tables are refused.
        let foreign = Record::String(StringRecord {
            index: 1,
            value: "x",
        });
        assert!(matches!(sink.push(&foreign), Err(SinkError::Full)));
        // After the check, the new trace's indices.
        let second = EngineRefs.epoch(&mut sink).unwrap();
        assert_ne!(first, second);
        assert!(sink.push(&log).unwrap() > 0);
        assert_eq!(sink.stats().written, 3, "{:?}", sink.stats());
    }

    /// Cost of the in-process capture path (kernel writer + engine sink), for callgrind:
    /// `FXTRACE_SWITCHES=N cargo test -p fxtrace-preload --release capture_path_cost -- --ignored`.
    #[test]
    #[ignore]
    fn capture_path_cost() {
        let _s = serial();
        let n: u64 = std::env::var("FXTRACE_SWITCHES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1000);
        let session = standalone::start(BufferingMode::Circular, 1 << 22).unwrap();
        let context: Context = session.context().clone();
        let mut writer =
            KernelTraceWriter::with_refs(EngineSink::new(context), EngineRefs, config()).unwrap();
        writer.handle(&thread(101, "main")).unwrap();
        writer.handle(&thread(102, "worker")).unwrap();
        for i in 0..n {
            let (a, b) = if i % 2 == 0 { (101, 102) } else { (102, 101) };
            writer.handle(&switch(10 + i, a, b)).unwrap();
        }
        let (_, stats) = writer.finish().unwrap();
        assert_eq!(stats.context_switches, n);
        drop(session);
    }
}
