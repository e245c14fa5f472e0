//! The import itself: open and check the input, read it with `linux-perf-data`, replay its
//! records through the capture's decoding, write them with the capture's writer (see the
//! module docs of [`super`]).

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::{self, BufReader, Read, Seek, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::Rc;

use fxtrace::capture::{BranchSampleFormat as CaptureBranch, SampleFormat as CaptureSample};
use fxtrace::capture::{
    CaptureEvent, FxtStreamSink, KernelSymbolsState, KernelTraceConfig, KernelTraceStats,
    KernelTraceWriter, RecordLayout, Replay, ReplayEventKind, ReplaySkip, ReplayStats, Replayed,
    SchedSwitchFormat, SchedWakingFormat, SinkError, TaskComm, KERNEL_MAP,
};
use fxtrace_format::{truncate_str, Arg, ArgValue, Event, EventKind, Record, StringRef, ThreadRef};
use linux_perf_data::linux_perf_event_reader::{
    AttrFlags, PerfEventAttr, PerfEventType, RawEventRecord, SampleFormat, SamplingPolicy,
    SoftwareCounterType,
};
use linux_perf_data::{Feature, PerfFile, PerfFileReader, PerfFileRecord};

use super::input::{
    check_file, kind_of, Damage, FileCheck, Kind, PipeFilter, PipeState, PIPE_HEADER_LEN,
};
use super::kallsyms::{find_kallsyms, KallsymsChoice};
use super::tracing_data::event_formats;
use super::PerfSource;

/// The pid and tid of the import's own thread (a koid no Linux pid reaches: `pid_max` ≤ 2²²),
/// the thread of the header events and of the capture writer's own events.
pub const IMPORT_KOID: u32 = 0xffff_fffe;

/// `PERF_RECORD_SAMPLE`.
const RECORD_SAMPLE: u32 = 9;
/// `PERF_RECORD_HEADER_BUILD_ID`.
const RECORD_HEADER_BUILD_ID: u32 = 67;

/// perf's timestamps are nanoseconds.
const NANOSECONDS: u64 = 1_000_000_000;

/// Text arguments of the header events are cut at this many bytes.
const MAX_TEXT: usize = 1024;

/// Events described by a `perf.data event` instant event, at most.
const MAX_DESCRIBED_EVENTS: usize = 256;

/// How to write the import.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportOptions {
    /// The provider's name in the trace (`perf:<file name>`).
    pub provider_name: String,
    /// Where the kernel symbols of call chains come from ([`super::kallsyms`]).
    pub kallsyms: KallsymsChoice,
}

impl ImportOptions {
    /// The provider `provider_name`, kernel symbols found by the recording's build-id.
    pub fn new(provider_name: impl Into<String>) -> Self {
        Self {
            provider_name: provider_name.into(),
            kallsyms: KallsymsChoice::Auto,
        }
    }
}

/// Why nothing could be imported, or the output could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The input could not be opened or read.
    #[error("cannot read: {0}")]
    Read(#[source] io::Error),
    /// The input is not a perf.data fxtrace can read, or its header lies: nothing written.
    #[error("{0}")]
    Unreadable(Damage),
    /// The parser refused the header, attributes or feature sections: nothing written.
    #[error("the perf.data header cannot be read: {0}")]
    Parser(String),
    /// Writing the trace failed.
    #[error("writing the trace: {0}")]
    Write(#[source] io::Error),
}

/// Kinds a [`Skipped`] names at most; records of further kinds are counted together, as
/// [`FURTHER_KINDS`] (a crafted file can hold as many kinds as records).
pub const MAX_SKIPPED_KINDS: usize = 64;

/// The kind records of kinds past [`MAX_SKIPPED_KINDS`] are counted under.
pub const FURTHER_KINDS: &str = "records of further kinds";

/// Record kinds not converted, with their counts, in order of first appearance.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Skipped {
    kinds: Vec<(String, u64)>,
    index: HashMap<String, usize>,
}

impl Skipped {
    /// Counts one record of `kind`.
    pub fn add(&mut self, kind: &str) {
        self.add_n(kind, 1);
    }

    /// Counts `n` records of `kind`.
    pub fn add_n(&mut self, kind: &str, n: u64) {
        if n == 0 {
            return;
        }
        let kind = if self.index.len() < MAX_SKIPPED_KINDS || self.index.contains_key(kind) {
            kind
        } else {
            FURTHER_KINDS
        };
        match self.index.get(kind) {
            Some(&i) => self.kinds[i].1 += n,
            None => {
                self.index.insert(kind.to_owned(), self.kinds.len());
                self.kinds.push((kind.to_owned(), n));
            }
        }
    }

    /// The count of `kind`.
    pub fn count(&self, kind: &str) -> u64 {
        self.index.get(kind).map_or(0, |&i| self.kinds[i].1)
    }

    /// Every kind and count.
    pub fn kinds(&self) -> &[(String, u64)] {
        &self.kinds
    }

    /// Records skipped in all.
    pub fn total(&self) -> u64 {
        self.kinds.iter().map(|(_, n)| n).sum()
    }
}

impl fmt::Display for Skipped {
    /// `1 234 PERF_RECORD_THROTTLE, 5 PERF_RECORD_SAMPLE of …` (nothing when none).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (kind, n)) in self.kinds.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{} {kind}", grouped(*n))?;
        }
        Ok(())
    }
}

/// `n` with a space between groups of three digits (`1 234 567`).
pub(crate) fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

/// What an import wrote and everything it did not.
#[derive(Debug, Clone, Default)]
pub struct ImportSummary {
    /// Records the parser gave (kernel and perf's own).
    pub records: u64,
    /// What the capture's writer wrote.
    pub written: KernelTraceStats,
    /// Threads and pid resolution.
    pub replay: ReplayStats,
    /// Record kinds not converted.
    pub skipped: Skipped,
    /// Records whose body did not decode (counted in `skipped` too); the first one's error.
    pub first_unreadable: Option<String>,
    /// Everything wrong with the input; the import is partial when it is not empty.
    pub damage: Vec<Damage>,
    /// How the kernel frames of call chains were named (`None`: the recording has no call
    /// chains): `Ok(where the symbols came from)`, or `Err(why they stay addresses)`.
    pub kernel_symbols: Option<Result<String, String>>,
    /// Bytes of FXT written.
    pub bytes: u64,
}

impl fmt::Display for ImportSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let w = &self.written;
        write!(
            f,
            "{} perf records: {} branch samples, {} CPU samples, {} context switches ({} with \
             a wait point), {} wake-ups, {} mappings, {} threads ({} of unknown process), {} \
             stacks, {} FXT records ({} bytes)",
            grouped(self.records),
            grouped(w.branch_blobs),
            grouped(w.samples),
            grouped(w.context_switches),
            grouped(w.wait_points),
            grouped(w.wakeups),
            grouped(w.mmap_blobs),
            grouped(self.replay.threads),
            grouped(self.replay.unknown_process_threads),
            grouped(w.stack_blobs),
            grouped(w.records),
            grouped(self.bytes),
        )?;
        match &self.kernel_symbols {
            Some(Ok(from)) => write!(
                f,
                "; kernel frames named from {from}: {} kernel symbols written",
                grouped(w.kernel_symbols)
            )?,
            Some(Err(why)) => write!(f, "; kernel frames kept as addresses: {why}")?,
            None => {}
        }
        if w.lost_records > 0 || w.lost_samples > 0 {
            write!(
                f,
                "; perf lost {} records and {} samples while recording",
                grouped(w.lost_records),
                grouped(w.lost_samples)
            )?;
        }
        if w.dropped_records > 0 {
            write!(
                f,
                "; {} records could not be encoded",
                grouped(w.dropped_records)
            )?;
        }
        if w.late > 0 {
            // Records perf wrote after a later round of the other CPUs' (perf's own "out of
            // order events"), and the thread announcements before them.
            write!(
                f,
                "; {} events written out of time order, as the recording has them",
                grouped(w.late)
            )?;
        }
        if self.skipped.total() > 0 {
            write!(f, "\nskipped: {}", self.skipped)?;
        }
        if let Some(first) = &self.first_unreadable {
            write!(f, "\nfirst unreadable record: {first}")?;
        }
        Ok(())
    }
}

/// The name of a perf record type (`PERF_RECORD_*`).
pub(crate) fn record_name(kind: u32) -> String {
    const KERNEL: [&str; 23] = [
        "",
        "MMAP",
        "LOST",
        "COMM",
        "EXIT",
        "THROTTLE",
        "UNTHROTTLE",
        "FORK",
        "READ",
        "SAMPLE",
        "MMAP2",
        "AUX",
        "ITRACE_START",
        "LOST_SAMPLES",
        "SWITCH",
        "SWITCH_CPU_WIDE",
        "NAMESPACES",
        "KSYMBOL",
        "BPF_EVENT",
        "CGROUP",
        "TEXT_POKE",
        "AUX_OUTPUT_HW_ID",
        "CALLCHAIN_DEFERRED",
    ];
    const USER: [&str; 20] = [
        "HEADER_ATTR",
        "HEADER_EVENT_TYPE",
        "HEADER_TRACING_DATA",
        "HEADER_BUILD_ID",
        "FINISHED_ROUND",
        "ID_INDEX",
        "AUXTRACE_INFO",
        "AUXTRACE",
        "AUXTRACE_ERROR",
        "THREAD_MAP",
        "CPU_MAP",
        "STAT_CONFIG",
        "STAT",
        "STAT_ROUND",
        "EVENT_UPDATE",
        "TIME_CONV",
        "HEADER_FEATURE",
        "COMPRESSED",
        "FINISHED_INIT",
        "COMPRESSED2",
    ];
    let name = match kind {
        1..=22 => KERNEL.get(kind as usize).copied(),
        64..=83 => USER.get(kind as usize - 64).copied(),
        _ => None,
    };
    match name {
        Some(n) => format!("PERF_RECORD_{n}"),
        None => format!("perf record type {kind}"),
    }
}

/// What the import does with an event's samples.
#[derive(Debug, Clone)]
struct EventPlan {
    /// The event's name (`cycles:u`, `sched:sched_switch`).
    name: String,
    /// How its records are decoded.
    kind: ReplayEventKind,
    /// The skipped-kind key its unconverted samples are counted under.
    sample_key: String,
    /// Its samples carry call chains (`PERF_SAMPLE_CALLCHAIN`).
    callchains: bool,
}

/// The records of perf's own that carry no data to convert (structure of the file).
fn is_structure(kind: u32) -> bool {
    // FINISHED_ROUND, FINISHED_INIT.
    matches!(kind, 68 | 82)
}

/// Imports `source` into `out` (see the module docs): the writer back, and what was done.
/// An input damaged after its header is imported up to the damage, reported in
/// [`ImportSummary::damage`].
pub fn import_perf<W: Write>(
    source: &PerfSource,
    out: W,
    options: &ImportOptions,
) -> Result<(W, ImportSummary), ImportError> {
    match open(source)? {
        Opened::File(check, file) => {
            let view = check.view(BufReader::with_capacity(1 << 16, file));
            let position = view.position();
            let reader = catch_parser(|| PerfFileReader::parse_file(view))?;
            let tracing = reader
                .perf_file
                .feature_section_data(Feature::TRACING_DATA)
                .map(<[u8]>::to_vec);
            let (out, mut summary) = convert(reader, tracing, &|| position.get(), out, options)?;
            summary.damage.splice(0..0, check.damage);
            Ok((out, summary))
        }
        Opened::Stream(stream) => {
            let state = Rc::new(RefCell::new(PipeState::default()));
            let filter = PipeFilter::new(stream, state.clone());
            let reader = catch_parser(|| PerfFileReader::parse_pipe(filter)).map_err(|e| {
                // The filter's own finding says more than the parser's end of stream.
                match state.borrow().damage.first() {
                    Some(d) => ImportError::Unreadable(d.clone()),
                    None => e,
                }
            })?;
            let tracing = state.borrow_mut().tracing_data.take();
            let offset = {
                let state = state.clone();
                move || state.borrow().offset
            };
            let (out, mut summary) = convert(reader, tracing, &offset, out, options)?;
            let state = state.borrow();
            summary.skipped.add_n(
                &record_name(super::input::RECORD_AUXTRACE),
                state.auxtrace_records,
            );
            summary.damage.extend(state.damage.iter().cloned());
            Ok((out, summary))
        }
    }
}

/// Runs the parser, its panics (a bug of its own on an input the checks let through) made an
/// error rather than an abort of the import.
fn catch_parser<T>(
    parse: impl FnOnce() -> Result<T, linux_perf_data::Error>,
) -> Result<T, ImportError> {
    match catch_unwind(AssertUnwindSafe(parse)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(ImportError::Parser(e.to_string())),
        Err(_) => Err(ImportError::Parser(
            "the perf.data parser failed (it panicked)".into(),
        )),
    }
}

enum Opened {
    /// A regular file in file mode, checked.
    File(FileCheck, File),
    /// A stream (standard input, a FIFO, or a file in stream format).
    Stream(Box<dyn Read>),
}

fn open(source: &PerfSource) -> Result<Opened, ImportError> {
    let file = match source {
        PerfSource::File(path) => File::open(path).map_err(ImportError::Read)?,
        PerfSource::Stdin => {
            use std::os::fd::AsFd;
            let fd = io::stdin()
                .as_fd()
                .try_clone_to_owned()
                .map_err(ImportError::Read)?;
            File::from(fd)
        }
    };
    let regular = file.metadata().map_err(ImportError::Read)?;
    if !regular.is_file() {
        return Ok(Opened::Stream(Box::new(BufReader::with_capacity(
            1 << 16,
            file,
        ))));
    }
    let len = regular.len();
    let mut reader = BufReader::with_capacity(1 << 16, file);
    let mut first = Vec::with_capacity(PIPE_HEADER_LEN as usize);
    (&mut reader)
        .take(PIPE_HEADER_LEN)
        .read_to_end(&mut first)
        .map_err(ImportError::Read)?;
    match kind_of(&first).map_err(ImportError::Unreadable)? {
        Kind::Pipe => {
            reader.rewind().map_err(ImportError::Read)?;
            Ok(Opened::Stream(Box::new(reader)))
        }
        Kind::File => {
            let check = check_file(&mut reader, len).map_err(ImportError::Unreadable)?;
            Ok(Opened::File(check, reader.into_inner()))
        }
    }
}

/// The import proper, over either reader: plan the events, start the section, take every
/// record, end the section.
fn convert<R: Read, W: Write>(
    reader: PerfFileReader<R>,
    tracing_data: Option<Vec<u8>>,
    position: &dyn Fn() -> u64,
    out: W,
    options: &ImportOptions,
) -> Result<(W, ImportSummary), ImportError> {
    let PerfFileReader {
        mut perf_file,
        mut record_iter,
    } = reader;
    let mut summary = ImportSummary::default();
    let sched_formats = recorded_sched_formats(tracing_data.as_deref(), &mut summary);
    let mut replay = Replay::nanoseconds();
    let plans = plan_events(&perf_file, &sched_formats, &mut replay, &mut summary);
    let mut kernel_build_id = None;
    if let Ok(build_ids) = perf_file.build_ids() {
        for info in build_ids.into_values() {
            if info.path == KERNEL_MAP {
                kernel_build_id = Some(info.build_id.clone());
            }
            replay.add_build_id(info.path, info.build_id);
        }
    }
    let stacks = plans.iter().any(|p| match p.kind {
        ReplayEventKind::CpuSampling => true,
        ReplayEventKind::SchedSwitch(_) => p.callchains,
        _ => false,
    });
    if stacks {
        summary.kernel_symbols = Some(kernel_symbols(
            &mut replay,
            &options.kallsyms,
            kernel_build_id.as_deref(),
        ));
    }
    let writer = start_section(&perf_file, &plans, out, options)?;
    let mut import = Import {
        replay,
        writer,
        plans,
        summary,
    };
    loop {
        let (iter, file) = (&mut record_iter, &mut perf_file);
        let next = catch_unwind(AssertUnwindSafe(move || {
            // Moved in (not reborrowed), so the record may borrow the iterator past the call.
            let iter = iter;
            iter.next_record(file)
        }));
        let failure = match next {
            Ok(Ok(Some(record))) => {
                import.record(record)?;
                continue;
            }
            Ok(Ok(None)) => break,
            Ok(Err(e)) => format!("the perf.data parser stopped: {e}"),
            Err(_) => "the perf.data parser failed (it panicked)".to_string(),
        };
        let records = import.summary.records;
        import.summary.damage.push(Damage {
            offset: position(),
            what: format!("{failure}, after {records} records"),
        });
        break;
    }
    import.finish()
}

/// Gives `replay` the recording kernel's symbols (see [`super::kallsyms`]): where they came
/// from, or why there are none.
fn kernel_symbols(
    replay: &mut Replay,
    choice: &KallsymsChoice,
    build_id: Option<&[u8]>,
) -> Result<String, String> {
    let found = find_kallsyms(choice, build_id)?;
    if replay.set_kernel_symbols(found.text) {
        Ok(found.from)
    } else {
        Err(format!(
            "{} lists no symbol with an address (kernel.kptr_restrict hides them from this \
             user)",
            found.from
        ))
    }
}

/// The `sched` tracepoint formats of the recording kernel, from the tracing data; none (and
/// a damage) when it cannot be read.
fn recorded_sched_formats(
    tracing_data: Option<&[u8]>,
    summary: &mut ImportSummary,
) -> Vec<super::tracing_data::RecordedFormat> {
    let Some(data) = tracing_data else {
        return Vec::new();
    };
    event_formats(data, |system| system == "sched").unwrap_or_else(|e| {
        summary.damage.push(Damage {
            offset: 0,
            what: format!("{e}: tracepoint samples are not decoded"),
        });
        Vec::new()
    })
}

/// A sink error as the import's.
fn write_error(e: SinkError) -> ImportError {
    match e {
        SinkError::Io(e) => ImportError::Write(e),
        other => ImportError::Write(io::Error::other(other.to_string())),
    }
}

/// The section's start: provider, clock (perf's nanoseconds), the import's thread named, the
/// header events.
fn start_section<W: Write>(
    perf_file: &PerfFile,
    plans: &[EventPlan],
    out: W,
    options: &ImportOptions,
) -> Result<KernelTraceWriter<FxtStreamSink<W>>, ImportError> {
    let start = perf_file
        .sample_time_range()
        .ok()
        .flatten()
        .map_or(0, |r| r.first_sample_time);
    let config = KernelTraceConfig {
        provider_id: 1,
        provider_name: options.provider_name.clone(),
        ticks_per_second: NANOSECONDS,
        // The writer counts events older than this as late: perf's synthesized records (the
        // tasks and mappings alive when it started) are stamped 0.
        start_ticks: 0,
        recorder: (IMPORT_KOID, IMPORT_KOID),
    };
    let mut writer =
        KernelTraceWriter::new(FxtStreamSink::with_magic(out), config).map_err(write_error)?;
    writer
        .handle(&CaptureEvent::Comm(TaskComm {
            // Before every record (perf's synthesized ones are stamped 0): a name has no time.
            time: 0,
            pid: IMPORT_KOID,
            tid: IMPORT_KOID,
            name: "perf.data import".into(),
            exec: false,
        }))
        .map_err(write_error)?;
    write_header_events(&mut writer, perf_file, plans, start).map_err(write_error)?;
    Ok(writer)
}

/// An import under way: the records go through `replay` into `writer`.
struct Import<W: Write> {
    replay: Replay,
    writer: KernelTraceWriter<FxtStreamSink<W>>,
    plans: Vec<EventPlan>,
    summary: ImportSummary,
}

impl<W: Write> Import<W> {
    /// Takes one record; only a write error is returned.
    fn record(&mut self, record: PerfFileRecord<'_>) -> Result<(), ImportError> {
        self.summary.records += 1;
        match record {
            PerfFileRecord::EventRecord { attr_index, record } => {
                self.event_record(attr_index, &record);
                for event in self.replay.take_events() {
                    self.writer.handle(&event).map_err(write_error)?;
                }
            }
            PerfFileRecord::UserRecord(user) => {
                let kind = user.record_type.record_type().0;
                if kind == RECORD_HEADER_BUILD_ID {
                    // A stream's build-id record: the build-id of a mapped file.
                    match build_id_record(&user.data.as_slice()) {
                        Some((path, id)) => self.replay.add_build_id(path, id),
                        None => self
                            .summary
                            .skipped
                            .add("PERF_RECORD_HEADER_BUILD_ID unreadable"),
                    }
                } else if !is_structure(kind) {
                    self.summary.skipped.add(&record_name(kind));
                }
            }
        }
        Ok(())
    }

    /// A kernel record of event `attr_index` through the replay; what it skips, counted.
    fn event_record(&mut self, attr_index: usize, record: &RawEventRecord<'_>) {
        let kind = record.record_type.0;
        let plan = self.plans.get(attr_index);
        let skipped = &mut self.summary.skipped;
        if kind == RECORD_SAMPLE
            && plan.is_some_and(|p| matches!(p.kind, ReplayEventKind::SideBand))
        {
            // The capture's decoder would skip it too (a sample of an event it writes nothing
            // for): counted without decoding it.
            skipped.add(plan.map_or("", |p| &p.sample_key));
            return;
        }
        let cpu = record.common_data().ok().and_then(|c| c.cpu);
        let body = record.data.as_slice();
        match self
            .replay
            .record(attr_index, cpu, kind, record.misc, &body)
        {
            Ok(Replayed::Event) | Ok(Replayed::Skipped(ReplaySkip::SwitchInPair)) => {}
            Ok(Replayed::Skipped(ReplaySkip::Sample)) => match plan {
                Some(plan) => skipped.add(&plan.sample_key),
                None => skipped.add(&record_name(kind)),
            },
            Ok(Replayed::Skipped(ReplaySkip::DataMapping)) => {
                skipped.add(&format!("{} of data (not executable)", record_name(kind)))
            }
            Ok(Replayed::Skipped(_)) => skipped.add(&record_name(kind)),
            Err(e) => {
                let name = record_name(kind);
                skipped.add(&format!("{name} unreadable"));
                self.summary
                    .first_unreadable
                    .get_or_insert_with(|| format!("{name}: {e}"));
            }
        }
    }

    /// Delivers what the replay still holds, writes the summary event, ends the section.
    fn finish(mut self) -> Result<(W, ImportSummary), ImportError> {
        self.replay.finish();
        for event in self.replay.take_events() {
            self.writer.handle(&event).map_err(write_error)?;
        }
        self.summary.replay = self.replay.stats();
        if let (Some(Ok(from)), KernelSymbolsState::Relocated(by)) = (
            &mut self.summary.kernel_symbols,
            self.replay.kernel_symbols(),
        ) {
            if by != 0 {
                let sign = if by < 0 { '-' } else { '+' };
                from.push_str(&format!(
                    ", moved by {sign}{:#x} to where the recording's kernel was (its modules' \
                     frames stay addresses)",
                    by.unsigned_abs()
                ));
            }
        }
        write_summary_event(&mut self.writer, &self.summary).map_err(write_error)?;
        let (sink, written) = self.writer.finish().map_err(write_error)?;
        self.summary.written = written;
        self.summary.bytes = sink.bytes();
        let out = sink.finish().map_err(ImportError::Write)?;
        Ok((out, self.summary))
    }
}

/// A stream's `PERF_RECORD_HEADER_BUILD_ID` body: `i32 pid, u8 build_id[24], char
/// filename[]`; with `PERF_RECORD_MISC_BUILD_ID_SIZE` the id's length is byte 20 of the id.
fn build_id_record(body: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let id = body.get(4..28)?;
    let path = body.get(28..)?;
    let path = &path[..path.iter().position(|&b| b == 0).unwrap_or(path.len())];
    // Without the size byte, trailing zero words are not part of the id (as perf reads it).
    let len = match id[20] {
        n @ 1..=20 => usize::from(n),
        _ => {
            let mut len = 20;
            while len >= 4 && id[len - 4..len] == [0; 4] {
                len -= 4;
            }
            len
        }
    };
    Some((path.to_vec(), id[..len].to_vec()))
}

/// How each event of the file is decoded, registered with the replay in the file's order.
fn plan_events(
    perf_file: &PerfFile,
    sched_formats: &[super::tracing_data::RecordedFormat],
    replay: &mut Replay,
    summary: &mut ImportSummary,
) -> Vec<EventPlan> {
    let events = perf_file.event_attributes();
    let tracepoint_of = |attr: &PerfEventAttr| match attr.type_ {
        PerfEventType::Tracepoint(id) => sched_formats.iter().find(|f| f.format.id == Some(id)),
        _ => None,
    };
    // `sched_wakeup` repeats the wake-ups `sched_waking` recorded (later, on the woken
    // thread's CPU): with both, only `sched_waking`'s are written.
    let waking_recorded = events.iter().any(|d| {
        tracepoint_of(&d.attr).is_some_and(|f| f.format.name == "sched_waking")
            && layout_of(&d.attr).1.is_none()
    });
    let mut sampled: Option<String> = None;
    let mut plans = Vec::new();
    for desc in events {
        let attr = &desc.attr;
        let tracepoint = tracepoint_of(attr);
        let name = desc
            .name()
            .map(str::to_owned)
            .or_else(|| tracepoint.map(|f| format!("{}:{}", f.system, f.format.name)))
            .unwrap_or_else(|| format!("{:?}", attr.type_));
        let (layout, unreadable) = layout_of(attr);
        let sample = |why: &str| format!("PERF_RECORD_SAMPLE of {name}{why}");
        let side_band = |why: &str| (ReplayEventKind::SideBand, sample(why));
        let (kind, sample_key) = if let Some(why) = unreadable {
            side_band(&format!(" (not decoded: {why})"))
        } else if attr.sample_format.contains(SampleFormat::BRANCH_STACK) {
            (ReplayEventKind::BranchSampling, String::new())
        } else if let Some(f) = tracepoint {
            let mut damage = |what: String| {
                summary.damage.push(Damage { offset: 0, what });
                side_band(" (format unreadable)")
            };
            match f.format.name.as_str() {
                "sched_switch" => match SchedSwitchFormat::from_format(&f.format) {
                    Ok(format) => (
                        ReplayEventKind::SchedSwitch(Box::new(format)),
                        String::new(),
                    ),
                    Err(e) => damage(format!("the recorded sched_switch format: {e}")),
                },
                "sched_wakeup" if waking_recorded => {
                    side_band(" (the wake-ups of sched:sched_waking, again)")
                }
                tp @ ("sched_waking" | "sched_wakeup" | "sched_wakeup_new") => {
                    match SchedWakingFormat::from_format(&f.format) {
                        Ok(format) => (
                            ReplayEventKind::SchedWaking(Box::new(format)),
                            String::new(),
                        ),
                        Err(e) => damage(format!("the recorded {tp} format: {e}")),
                    }
                }
                _ => side_band(""),
            }
        } else if is_sampling(attr) {
            // fxtrace's CPU samples name no event: one event's samples are written.
            match &sampled {
                None => {
                    sampled = Some(name.clone());
                    (ReplayEventKind::CpuSampling, String::new())
                }
                Some(first) => side_band(&format!(
                    " (CPU samples are {first}'s: fxtrace's samples name no event)"
                )),
            }
        } else {
            side_band("")
        };
        replay.add_event(kind.clone(), layout);
        plans.push(EventPlan {
            name,
            kind,
            sample_key,
            callchains: attr.sample_format.contains(SampleFormat::CALLCHAIN),
        });
    }
    plans
}

/// Whether `attr` samples (with a period or a frequency) an event that is neither a
/// tracepoint nor perf's side-band dummy: a `cpu-clock`, `cycles`, … profile.
fn is_sampling(attr: &PerfEventAttr) -> bool {
    !matches!(
        attr.type_,
        PerfEventType::Tracepoint(_) | PerfEventType::Software(SoftwareCounterType::Dummy)
    ) && !matches!(attr.sampling_policy, SamplingPolicy::NoSampling)
}

/// The capture's layout of an event's records, and why its samples cannot be decoded when
/// they cannot (a `sample_type` the layout cannot place: its side-band records are then read
/// by their `sample_id` trailer alone, whose fields it can place).
fn layout_of(attr: &PerfEventAttr) -> (RecordLayout, Option<String>) {
    let sample = CaptureSample::from_bits_retain(attr.sample_format.bits());
    let branch = CaptureBranch::from_bits_retain(attr.branch_sample_format.bits());
    let id_all = attr.flags.contains(AttrFlags::SAMPLE_ID_ALL);
    match RecordLayout::from_formats(sample, branch, id_all) {
        Ok(layout) => (layout, None),
        Err(e) => {
            let trailer = SampleFormat::TID
                | SampleFormat::TIME
                | SampleFormat::ID
                | SampleFormat::STREAM_ID
                | SampleFormat::CPU
                | SampleFormat::IDENTIFIER;
            let sideband =
                CaptureSample::from_bits_retain(attr.sample_format.bits() & trailer.bits());
            let layout = RecordLayout::from_formats(sideband, branch, id_all)
                .expect("the sample_id fields are laid out");
            (layout, Some(e.to_string()))
        }
    }
}

/// `perf.data header` (host, perf, CPU, command line, clock) and one `perf.data event` per
/// event (its attributes), on the import's thread at the first sample's time.
fn write_header_events<S: fxtrace::capture::RecordSink>(
    writer: &mut KernelTraceWriter<S>,
    perf_file: &PerfFile,
    plans: &[EventPlan],
    ticks: u64,
) -> Result<(), SinkError> {
    let texts = header_texts(perf_file);
    let mut args: Vec<Arg<'_>> = texts.iter().map(|(n, v)| Arg::new(*n, text(v))).collect();
    if let Ok(Some(cpus)) = perf_file.nr_cpus() {
        args.push(Arg::new(
            "nr_cpus_online",
            ArgValue::U32(cpus.nr_cpus_online),
        ));
    }
    if let Ok(Some(kib)) = perf_file.total_mem() {
        args.push(Arg::new("total_mem_kib", ArgValue::U64(kib)));
    }
    if let Ok(Some(ns)) = perf_file.clock_frequency() {
        args.push(Arg::new("clock_resolution_ns", ArgValue::U64(ns)));
    }
    if let Ok(Some(c)) = perf_file.clock_data() {
        // The same instant on the wall clock and on the events' clock.
        args.push(Arg::new("wall_clock_ns", ArgValue::U64(c.wall_clock_ns)));
        args.push(Arg::new("clock_time_ns", ArgValue::U64(c.clockid_time_ns)));
    }
    let events = perf_file.event_attributes();
    args.push(Arg::new("events", ArgValue::U64(events.len() as u64)));
    // An event record holds 15 arguments at most.
    args.truncate(15);
    instant(writer, ticks, "perf.data header", &args)?;
    for (i, (desc, plan)) in events.iter().zip(plans).enumerate() {
        if i == MAX_DESCRIBED_EVENTS {
            break;
        }
        let converted = match plan.kind {
            ReplayEventKind::BranchSampling => "LAST_BRANCH blobs",
            ReplayEventKind::SchedSwitch(_) if plan.callchains => {
                "context switches (a blocked thread's with its wait point)"
            }
            ReplayEventKind::SchedSwitch(_) => "context switches",
            ReplayEventKind::SchedWaking(_) => "thread wakeups",
            ReplayEventKind::CpuSampling => "CPU samples (fxtrace:sample)",
            ReplayEventKind::SideBand => "side-band records only",
        };
        let described = describe_attr(&desc.attr);
        let args = [
            Arg::new("index", ArgValue::U64(i as u64)),
            Arg::new("name", text(&plan.name)),
            Arg::new("attr", text(&described)),
            Arg::new("ids", ArgValue::U64(desc.ids().len() as u64)),
            Arg::new("converted_to", text(converted)),
        ];
        instant(writer, ticks, "perf.data event", &args)?;
    }
    Ok(())
}

/// The header's text fields the file has, by argument name.
fn header_texts(perf_file: &PerfFile) -> Vec<(&'static str, String)> {
    use linux_perf_data::linux_perf_event_reader::PerfClock;
    let owned = |s: Result<Option<&str>, _>| s.ok().flatten().map(str::to_owned);
    let clock = perf_file
        .event_attributes()
        .first()
        .map(|d| match d.attr.clock {
            PerfClock::Default => "perf_clock (nanoseconds)".to_string(),
            PerfClock::ClockId(id) => format!("{id:?} (nanoseconds)"),
        });
    [
        ("hostname", owned(perf_file.hostname())),
        ("os_release", owned(perf_file.os_release())),
        ("perf_version", owned(perf_file.perf_version())),
        ("arch", owned(perf_file.arch())),
        ("cpu_desc", owned(perf_file.cpu_desc())),
        ("cpu_id", owned(perf_file.cpu_id())),
        (
            "cmdline",
            perf_file.cmdline().ok().flatten().map(|c| c.join(" ")),
        ),
        ("clock", clock),
    ]
    .into_iter()
    .filter_map(|(name, value)| Some((name, value?)))
    .collect()
}

/// An instant event of category `perf` on the import's thread.
fn instant<S: fxtrace::capture::RecordSink>(
    writer: &mut KernelTraceWriter<S>,
    ticks: u64,
    name: &str,
    args: &[Arg<'_>],
) -> Result<(), SinkError> {
    writer.write_record(&Record::Event(Event {
        ticks,
        thread: ThreadRef::Inline {
            pid: u64::from(IMPORT_KOID),
            tid: u64::from(IMPORT_KOID),
        },
        category: StringRef::Inline("perf"),
        name: StringRef::Inline(name),
        args,
        kind: EventKind::Instant,
    }))
}

/// A text argument, cut at [`MAX_TEXT`] bytes.
fn text(s: &str) -> ArgValue<'_> {
    ArgValue::Str(StringRef::Inline(truncate_str(s, MAX_TEXT)))
}

/// An event's attributes as perf's header shows them.
fn describe_attr(attr: &PerfEventAttr) -> String {
    let sampling = match attr.sampling_policy {
        SamplingPolicy::NoSampling => "no sampling".to_string(),
        SamplingPolicy::Period(p) => format!("period {p}"),
        SamplingPolicy::Frequency(f) => format!("frequency {f} Hz"),
    };
    format!(
        "type {:?}, {sampling}, sample_type {:?}, branch_sample_type {:?}, read_format {:?}, \
         flags {:?}",
        attr.type_, attr.sample_format, attr.branch_sample_format, attr.read_format, attr.flags
    )
}

/// `perf.data import summary`: what was skipped and damaged, visible in a viewer.
fn write_summary_event<S: fxtrace::capture::RecordSink>(
    writer: &mut KernelTraceWriter<S>,
    summary: &ImportSummary,
) -> Result<(), SinkError> {
    let skipped = summary.skipped.to_string();
    let damage: Vec<String> = summary.damage.iter().map(ToString::to_string).collect();
    let damage = damage.join("; ");
    let args = [
        Arg::new("records", ArgValue::U64(summary.records)),
        Arg::new("skipped_records", ArgValue::U64(summary.skipped.total())),
        Arg::new(
            "skipped",
            ArgValue::Str(StringRef::Inline(truncate_str(&skipped, 4 * MAX_TEXT))),
        ),
        Arg::new(
            "damage",
            ArgValue::Str(StringRef::Inline(truncate_str(&damage, 4 * MAX_TEXT))),
        ),
    ];
    let ticks = writer.last_time();
    instant(writer, ticks, "perf.data import summary", &args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_grouped_by_thousands() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1234), "1 234");
        assert_eq!(grouped(1_234_567), "1 234 567");
        let mut s = Skipped::default();
        s.add_n("PERF_RECORD_LOST", 1234);
        s.add("PERF_RECORD_THROTTLE");
        s.add("PERF_RECORD_THROTTLE");
        assert_eq!(
            s.to_string(),
            "1 234 PERF_RECORD_LOST, 2 PERF_RECORD_THROTTLE"
        );
        assert_eq!(s.total(), 1236);
    }

    /// A file can hold as many kinds as records: past `MAX_SKIPPED_KINDS`, they are counted
    /// together, never dropped.
    #[test]
    fn skipped_kinds_are_bounded_and_all_counted() {
        let mut s = Skipped::default();
        for kind in 0..10_000 {
            s.add(&record_name(1_000 + kind));
        }
        s.add(&record_name(1_000));
        assert_eq!(s.kinds().len(), MAX_SKIPPED_KINDS + 1);
        assert_eq!(s.total(), 10_001);
        assert_eq!(s.count(&record_name(1_000)), 2);
        assert_eq!(s.count(FURTHER_KINDS), 10_000 - MAX_SKIPPED_KINDS as u64);
    }

    #[test]
    fn the_summary_says_records_written_out_of_time_order() {
        let mut summary = ImportSummary::default();
        assert!(!summary.to_string().contains("out of time order"));
        summary.written.late = 1234;
        assert!(
            summary
                .to_string()
                .contains("; 1 234 events written out of time order"),
            "{summary}"
        );
    }

    #[test]
    fn record_names() {
        assert_eq!(record_name(9), "PERF_RECORD_SAMPLE");
        assert_eq!(record_name(79), "PERF_RECORD_TIME_CONV");
        assert_eq!(record_name(500), "perf record type 500");
    }

    #[test]
    fn build_id_records() {
        let mut body = vec![0u8; 4];
        let mut id = [0u8; 24];
        id[..8].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        body.extend_from_slice(&id);
        body.extend_from_slice(b"/bin/x\0\0");
        assert_eq!(
            build_id_record(&body),
            Some((b"/bin/x".to_vec(), vec![1, 2, 3, 4, 5, 6, 7, 8]))
        );
        body[4 + 20] = 3;
        assert_eq!(build_id_record(&body).unwrap().1, vec![1, 2, 3]);
        assert_eq!(build_id_record(&body[..10]), None);
    }
}
