//! Recorded perf records (a `perf record` file's) → [`CaptureEvent`]s, through the live
//! capture's own steps.
//!
//! The records in a `perf.data` file are the records the kernel wrote into perf's rings.
//! [`Replay`] runs each one through what the capture thread runs on a ring's records: the
//! record decoder (one per event and CPU, as the capture has one per ring), the pid
//! resolution that holds an event until its threads' processes are known, and the delivery
//! that announces every thread before its first event ([`CaptureEvent::Thread`]). So the
//! events, and the FXT records a [`super::KernelTraceWriter`] makes of them, are the ones the
//! live capture makes of the same records. What differs is only what a recording made
//! elsewhere or earlier cannot give:
//!
//! * nothing is read from this machine: no `/proc` (tasks are known from the records alone:
//!   COMM, FORK, EXIT, samples, mappings) and no mapped file (build-ids come from the
//!   recording, [`Replay::add_build_id`]);
//! * timestamps go through the caller's [`PerfTimeConverter`] ([`Replay::nanoseconds`]: perf's
//!   nanoseconds as they are);
//! * records come already in timestamp order (the file reader sorts them), so there is no
//!   per-CPU merge.
//!
//! A record without a CPU (an event recorded without `PERF_SAMPLE_CPU`) is decoded as CPU 0's.
//!
//! Kernel frames of call chains are named by the symbols the caller gives
//! ([`Replay::set_kernel_symbols`]: a `kallsyms` of the recording kernel), moved to where the
//! recording's kernel mapping says its text was ([`Replay::kernel_symbols`] says how).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::attr::PerfEventKind;
use super::decode::{Decoded, Pending, RawFormat, Skip, StreamDecoder};
use super::events::CaptureEvent;
use super::ids::IdMap;
use super::kernel_symbols::KernelSymbols;
use super::pids::PidResolver;
use super::procfs::TaskRegistry;
use super::records::{ParseError, RecordLayout, RECORD_SAMPLE};
use super::ring::{RawData, RawRecord};
use super::session::Counters;
use super::stacks::{StackInterner, MAX_STACK_BYTES};
use super::switch::SchedSwitchFormat;
use super::time::{PerfTimeConverter, TscConversion};
use super::waking::SchedWakingFormat;
use super::worker::{Delivery, ANNOUNCED_SLOTS};

/// Decoders kept at most (one per event and CPU); records of further (event, CPU) pairs share
/// one decoder per event.
pub const MAX_DECODERS: usize = 4096;

/// The path perf gives the kernel's own mapping, followed by the name of the symbol whose
/// address the mapping's file offset holds (`[kernel.kallsyms]_text`).
pub const KERNEL_MAP: &[u8] = b"[kernel.kallsyms]";

/// Build-ids kept at most ([`Replay::add_build_id`]); further ones are not used.
pub const MAX_BUILD_IDS: usize = 1 << 16;

/// What an event's samples are to the capture.
#[derive(Debug, Clone)]
pub enum ReplayEventKind {
    /// `sched:sched_switch` tracepoint samples, decoded by the recorded format (with a call
    /// chain, a blocked thread's is its wait point).
    SchedSwitch(Box<SchedSwitchFormat>),
    /// Wake-ups: `sched:sched_waking`, `sched_wakeup` or `sched_wakeup_new` tracepoint
    /// samples, decoded by the recorded format.
    SchedWaking(Box<SchedWakingFormat>),
    /// Samples with a branch stack (LBR).
    BranchSampling,
    /// CPU samples (a `cpu-clock`, `cycles`, … sampling event): the sample's call chain, else
    /// its instruction pointer, as an interned stack.
    CpuSampling,
    /// An event whose samples the capture has no records for: only its side-band records
    /// (COMM, MMAP, FORK, EXIT, SWITCH, LOST) are decoded.
    SideBand,
}

/// Why a record gave no event (the capture's reasons).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReplaySkip {
    /// A record type the capture does not decode.
    UnknownRecord,
    /// THROTTLE / UNTHROTTLE.
    Throttle,
    /// The switch-in half of a CPU-wide switch (its switch-out describes the switch).
    SwitchInPair,
    /// A sample of an event the capture writes nothing for.
    Sample,
    /// A mapping that is not executable.
    DataMapping,
    /// A CPU-wide switch between two tasks the kernel no longer identified (both reaped): it
    /// names no task.
    NoKnownTask,
}

/// What [`Replay::record`] did with a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replayed {
    /// It became an event (delivered now, or held until its threads' processes are known).
    Event,
    /// It gave none.
    Skipped(ReplaySkip),
}

/// What the pid resolution did, as the live capture counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReplayStats {
    /// Threads announced.
    pub threads: u64,
    /// Threads announced without a process (their process never appeared in the records).
    pub unknown_process_threads: u64,
    /// Events held until a thread's process was known.
    pub deferred: u64,
    /// Events delivered.
    pub delivered: u64,
}

#[derive(Debug)]
struct EventDesc {
    kind: PerfEventKind,
    layout: RecordLayout,
    format: Option<RawFormat>,
}

/// Where the kernel symbols of a replay stand ([`Replay::kernel_symbols`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KernelSymbolsState {
    /// None given: kernel frames stay addresses.
    #[default]
    None,
    /// Given, not in use yet (no kernel mapping or sample seen).
    Pending,
    /// In use, moved by this many bytes (0: the addresses as given).
    Relocated(i64),
}

/// Kernel symbols given before the recording's kernel mapping was seen.
#[derive(Debug)]
struct PendingSymbols(KernelSymbols);

/// Recorded perf records → [`CaptureEvent`]s (see the module docs).
pub struct Replay {
    events: Vec<EventDesc>,
    decoders: HashMap<(usize, u32), StreamDecoder>,
    delivery: Delivery,
    out: Arc<Mutex<Vec<CaptureEvent>>>,
    counters: Arc<Counters>,
    conv: PerfTimeConverter,
    build_ids: HashMap<Vec<u8>, Vec<u8>>,
    pending_symbols: Option<PendingSymbols>,
    symbols_state: KernelSymbolsState,
}

impl std::fmt::Debug for Replay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replay")
            .field("events", &self.events)
            .field("decoders", &self.decoders.len())
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Replay {
    /// A replay whose timestamps go through `conv`.
    pub fn new(conv: PerfTimeConverter) -> Self {
        let out = Arc::new(Mutex::new(Vec::new()));
        let sink = out.clone();
        let counters = Arc::new(Counters::default());
        Self {
            events: Vec::new(),
            decoders: HashMap::new(),
            delivery: Delivery {
                resolver: PidResolver::new(TaskRegistry::without_proc()),
                build_ids: None,
                announced: IdMap::default(),
                recent: Box::new([None; ANNOUNCED_SLOTS]),
                waiting: IdMap::default(),
                samples: None,
                stacks: StackInterner::new(MAX_STACK_BYTES, None),
                counters: counters.clone(),
                sink: Box::new(move |event| {
                    // A poisoned lock only means a panic elsewhere: the events are still whole.
                    sink.lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(event)
                }),
            },
            out,
            counters,
            conv,
            build_ids: HashMap::new(),
            pending_symbols: None,
            symbols_state: KernelSymbolsState::None,
        }
    }

    /// A replay keeping perf's timestamps as they are (nanoseconds of perf's clock).
    pub fn nanoseconds() -> Self {
        // time_zero 0, mult 1, shift 0: perf time = ticks.
        let identity = TscConversion::new(0, 1, 0).expect("mult 1, shift 0 is a clock");
        Self::new(PerfTimeConverter::MmapPage(identity))
    }

    /// Adds an event of the recording (in the file's order of events); returns its index, the
    /// `event` of [`Self::record`].
    pub fn add_event(&mut self, kind: ReplayEventKind, layout: RecordLayout) -> usize {
        let (kind, format) = match kind {
            ReplayEventKind::SchedSwitch(format) => (
                PerfEventKind::SchedSwitchTracepoint,
                Some(RawFormat::Switch(Arc::from(format))),
            ),
            ReplayEventKind::SchedWaking(format) => (
                PerfEventKind::SchedWakingTracepoint,
                Some(RawFormat::Waking(Arc::from(format))),
            ),
            ReplayEventKind::BranchSampling => (PerfEventKind::BranchSampling, None),
            ReplayEventKind::CpuSampling => (PerfEventKind::CpuClockSampling, None),
            // The capture's side-band event (a dummy whose samples are unexpected).
            ReplayEventKind::SideBand => (PerfEventKind::CpuWideSwitches, None),
        };
        self.events.push(EventDesc {
            kind,
            layout,
            format,
        });
        self.events.len() - 1
    }

    /// The build-id the recording gives for the file at `path`: given to the mappings of that
    /// path that carry none of their own. At most [`MAX_BUILD_IDS`] are kept.
    pub fn add_build_id(&mut self, path: Vec<u8>, build_id: Vec<u8>) {
        if self.build_ids.len() < MAX_BUILD_IDS || self.build_ids.contains_key(&path) {
            self.build_ids.insert(path, build_id);
        }
    }

    /// The recording kernel's symbols, as `/proc/kallsyms` lists them (perf keeps a copy in its
    /// build-id cache): they name the kernel frames of the stacks interned from now on. The
    /// recording's kernel mapping (`[kernel.kallsyms]_text`, whose file offset is where `_text`
    /// was) moves them to that boot's addresses when they are another boot's (KASLR). `false`
    /// when `kallsyms` has no symbol with an address (read where they are hidden).
    pub fn set_kernel_symbols(&mut self, kallsyms: String) -> bool {
        let symbols = KernelSymbols::parse(&kallsyms);
        if symbols.is_empty() {
            return false;
        }
        self.pending_symbols = Some(PendingSymbols(symbols));
        self.symbols_state = KernelSymbolsState::Pending;
        true
    }

    /// Where the kernel symbols stand: none, not yet used, or in use (and moved by how much).
    pub fn kernel_symbols(&self) -> KernelSymbolsState {
        self.symbols_state
    }

    /// Puts the pending kernel symbols in use, moved so that `reference` (a symbol name) is at
    /// `address` when both are given.
    fn use_kernel_symbols(&mut self, reference: Option<(&str, u64)>) {
        let Some(PendingSymbols(mut symbols)) = self.pending_symbols.take() else {
            return;
        };
        let shift = reference
            .and_then(|(name, address)| Some(address.wrapping_sub(symbols.address_of(name)?)))
            .unwrap_or(0);
        symbols.relocate(shift);
        self.symbols_state = KernelSymbolsState::Relocated(shift as i64);
        self.delivery.stacks.set_symbols(symbols);
    }

    /// Decodes one record of event `event` (its type, `misc` and body after the 8-byte
    /// header), recorded on `cpu`; what it becomes is taken with [`Self::take_events`].
    /// Records must come in timestamp order. An event index never added is an error.
    pub fn record(
        &mut self,
        event: usize,
        cpu: Option<u32>,
        kind: u32,
        misc: u16,
        body: &[u8],
    ) -> Result<Replayed, ParseError> {
        if event >= self.events.len() {
            return Err(ParseError::Tracepoint(format!(
                "record of event {event}, of {} events",
                self.events.len()
            )));
        }
        let cpu = cpu.unwrap_or(0);
        let key = if self.decoders.len() < MAX_DECODERS || self.decoders.contains_key(&(event, cpu))
        {
            (event, cpu)
        } else {
            (event, u32::MAX)
        };
        if kind == RECORD_SAMPLE && self.pending_symbols.is_some() {
            // A call chain may come: no kernel mapping said where the kernel was.
            self.use_kernel_symbols(None);
        }
        let desc = &self.events[event];
        let decoder = self.decoders.entry(key).or_insert_with(|| {
            StreamDecoder::new(desc.kind, key.1.min(cpu), desc.layout, desc.format.clone())
        });
        let raw = RawRecord {
            kind,
            misc,
            body: RawData::Single(body),
        };
        match decoder.decode(&raw, &self.conv, &mut self.delivery.stacks)? {
            Decoded::Event {
                perf_time,
                mut pending,
            } => {
                if let Pending::Other(other) = &mut pending {
                    if let CaptureEvent::Mmap(map) = &mut other.event {
                        if map.build_id.is_none() {
                            map.build_id = self.build_ids.get(&map.path).cloned();
                        }
                        // perf's kernel mapping: `[kernel.kallsyms]` and the symbol whose
                        // address its file offset holds (`_text`).
                        if let Some(reference) = map.path.strip_prefix(KERNEL_MAP) {
                            if self.pending_symbols.is_some() {
                                let name = String::from_utf8_lossy(reference).into_owned();
                                self.use_kernel_symbols(Some((&name, map.pgoff)));
                            }
                        }
                    }
                }
                self.delivery.deliver(perf_time, pending);
                Ok(Replayed::Event)
            }
            Decoded::Skipped(skip) => Ok(Replayed::Skipped(match skip {
                Skip::Unknown => ReplaySkip::UnknownRecord,
                Skip::Throttle => ReplaySkip::Throttle,
                Skip::SwitchInPair => ReplaySkip::SwitchInPair,
                Skip::UnexpectedSample => ReplaySkip::Sample,
                Skip::DataMapping => ReplaySkip::DataMapping,
                // Not read from a recording: its switches carry their own call chains.
                Skip::NoWaitPoint => ReplaySkip::Sample,
                // A replay's decoders drop no copies (`perf record` lists a process's threads
                // once: no thread has two events of a kind).
                Skip::Duplicate => ReplaySkip::UnknownRecord,
                Skip::NoKnownTask => ReplaySkip::NoKnownTask,
            })),
        }
    }

    /// The events delivered since the last call, in order.
    pub fn take_events(&mut self) -> Vec<CaptureEvent> {
        std::mem::take(
            &mut *self
                .out
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// Delivers every event still held (their unknown processes stay unknown): call after
    /// the last record, then [`Self::take_events`].
    pub fn finish(&mut self) {
        self.delivery.release(true);
    }

    /// The counters so far.
    pub fn stats(&self) -> ReplayStats {
        use std::sync::atomic::Ordering::Relaxed;
        let c = &self.counters;
        // ATOMICS: statistics written by this thread only (`Counters`).
        ReplayStats {
            threads: c.threads.load(Relaxed),
            unknown_process_threads: c.unknown_process_threads.load(Relaxed),
            deferred: self.delivery.resolver.stats().deferred,
            delivered: c.delivered.load(Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::attr::{BranchSampleFormat, SampleFormat};
    use crate::capture::records::{RECORD_COMM, RECORD_MMAP2, RECORD_SAMPLE};
    use crate::capture::tracepoint::TracepointFormat;

    fn words(w: &[u64]) -> Vec<u8> {
        w.iter().flat_map(|w| w.to_ne_bytes()).collect()
    }

    /// A branch sample of a thread whose process a later COMM names: the thread is announced
    /// with its process and name, in order, and the build-id of its mapping comes from the
    /// recording.
    #[test]
    fn records_become_the_captures_events() {
        let mut r = Replay::nanoseconds();
        let tid_time = SampleFormat::TID | SampleFormat::TIME;
        let lbr = r.add_event(
            ReplayEventKind::BranchSampling,
            RecordLayout::from_formats(
                tid_time | SampleFormat::IP | SampleFormat::BRANCH_STACK,
                BranchSampleFormat::ANY,
                true,
            )
            .unwrap(),
        );
        r.add_build_id(b"/bin/app".to_vec(), vec![0xab; 20]);
        // COMM pid 5 tid 5 "app", sample_id (pid/tid, time).
        let mut comm = words(&[5 | 5 << 32]);
        comm.extend_from_slice(b"app\0\0\0\0\0");
        comm.extend(words(&[5 | 5 << 32, 100]));
        assert_eq!(
            r.record(lbr, None, RECORD_COMM, 0, &comm).unwrap(),
            Replayed::Event
        );
        // MMAP2 of /bin/app, executable, with device and inode.
        let mut mmap = words(&[5 | 5 << 32, 0x1000, 0x2000, 0, 1, 2, 3]);
        mmap.extend_from_slice(&(libc::PROT_EXEC as u32).to_ne_bytes());
        mmap.extend_from_slice(&0u32.to_ne_bytes());
        mmap.extend_from_slice(b"/bin/app");
        mmap.extend(words(&[0, 5 | 5 << 32, 150]));
        r.record(lbr, None, RECORD_MMAP2, 0, &mmap).unwrap();
        // Sample: ip, pid/tid, time, nr 1, from, to, flags (mispredicted, 7 cycles).
        let sample = words(&[0x1010, 5 | 6 << 32, 200, 1, 0x1010, 0x1020, 1 | 7 << 4]);
        r.record(lbr, Some(3), RECORD_SAMPLE, 0, &sample).unwrap();
        r.finish();
        let events = r.take_events();
        let kinds: Vec<&str> = events
            .iter()
            .map(|e| match e {
                CaptureEvent::Comm(_) => "comm",
                CaptureEvent::Mmap(_) => "mmap",
                CaptureEvent::Thread(_) => "thread",
                CaptureEvent::Branch(_) => "branch",
                _ => "other",
            })
            .collect();
        assert_eq!(kinds, ["comm", "mmap", "thread", "branch"]);
        let CaptureEvent::Mmap(m) = &events[1] else {
            unreachable!()
        };
        assert_eq!(m.build_id.as_deref(), Some(&[0xab; 20][..]));
        let CaptureEvent::Thread(t) = &events[2] else {
            unreachable!()
        };
        assert_eq!((t.tid, t.pid, t.time), (6, Some(5), 200));
        assert_eq!(t.process_name.as_deref(), Some("app"));
        let CaptureEvent::Branch(b) = &events[3] else {
            unreachable!()
        };
        assert_eq!((b.cpu, b.time, b.entries.len()), (3, 200, 1));
        assert!(b.entries[0].mispred && b.entries[0].cycles == 7);
        assert_eq!(r.stats().threads, 1);
    }

    /// A `sched_switch` sample decodes by the recorded format; other events' samples are
    /// skipped as the capture skips them.
    #[test]
    fn sched_switch_by_the_recorded_format() {
        let text = "name: sched_switch\nID: 316\nformat:\n\
            \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
            \tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\
            \tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n\
            \tfield:int prev_prio;\toffset:28;\tsize:4;\tsigned:1;\n\
            \tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;\n\
            \tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;\n\
            \tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;\n\
            \tfield:int next_prio;\toffset:60;\tsize:4;\tsigned:1;\n\nprint fmt: \"x\"\n";
        let format =
            SchedSwitchFormat::from_format(&TracepointFormat::parse(text).unwrap()).unwrap();
        let mut r = Replay::nanoseconds();
        let layout = RecordLayout::from_formats(
            SampleFormat::TID | SampleFormat::TIME | SampleFormat::CPU | SampleFormat::RAW,
            BranchSampleFormat::empty(),
            true,
        )
        .unwrap();
        let switch = r.add_event(ReplayEventKind::SchedSwitch(Box::new(format)), layout);
        let other = r.add_event(ReplayEventKind::SideBand, layout);
        let mut raw = vec![0u8; 68];
        raw[8..12].copy_from_slice(b"prev");
        raw[24..28].copy_from_slice(&9i32.to_ne_bytes());
        raw[28..32].copy_from_slice(&120i32.to_ne_bytes());
        raw[32..40].copy_from_slice(&1i64.to_ne_bytes()); // S: blocked
        raw[40..44].copy_from_slice(b"next");
        raw[56..60].copy_from_slice(&0i32.to_ne_bytes());
        let mut body = words(&[9 | 9 << 32, 1_000, 2]);
        body.extend_from_slice(&(raw.len() as u32).to_ne_bytes());
        body.extend_from_slice(&raw);
        assert_eq!(
            r.record(other, Some(2), RECORD_SAMPLE, 0, &body).unwrap(),
            Replayed::Skipped(ReplaySkip::Sample)
        );
        r.record(switch, Some(2), RECORD_SAMPLE, 0, &body).unwrap();
        r.finish();
        let events = r.take_events();
        let switch = events
            .iter()
            .find_map(|e| match e {
                CaptureEvent::ContextSwitch(cs) => Some(*cs),
                _ => None,
            })
            .unwrap();
        assert_eq!((switch.time, switch.cpu), (1_000, 2));
        assert_eq!((switch.prev_tid, switch.prev_pid), (9, Some(9)));
        assert_eq!(
            switch.prev_state,
            crate::capture::state::LinuxThreadState::Blocked
        );
        let named: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                CaptureEvent::Thread(t) => Some((t.tid, t.name.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(
            named,
            [(9, Some("prev".to_string())), (0, Some("next".into()))]
        );
        assert!(r.record(7, None, RECORD_SAMPLE, 0, &body).is_err());
    }

    /// A wake-up names its woken thread and its waker (the sample's own thread); a CPU
    /// sample's call chain is interned and announced before it, its kernel frame named by
    /// the given symbols moved to where the recording's kernel mapping says `_text` was.
    #[test]
    fn wakeups_and_cpu_samples_with_kernel_symbols_moved_to_the_recording() {
        use crate::capture::fake::SCHED_WAKING_FORMAT;
        use crate::capture::records::RECORD_MMAP;
        let mut r = Replay::nanoseconds();
        let tid_time_cpu = SampleFormat::TID | SampleFormat::TIME | SampleFormat::CPU;
        let waking =
            SchedWakingFormat::from_format(&TracepointFormat::parse(SCHED_WAKING_FORMAT).unwrap())
                .unwrap();
        let layout = |extra| {
            RecordLayout::from_formats(tid_time_cpu | extra, BranchSampleFormat::empty(), true)
                .unwrap()
        };
        let wake = r.add_event(
            ReplayEventKind::SchedWaking(Box::new(waking)),
            layout(SampleFormat::RAW),
        );
        let cpu = r.add_event(
            ReplayEventKind::CpuSampling,
            layout(SampleFormat::IP | SampleFormat::CALLCHAIN),
        );
        assert_eq!(r.kernel_symbols(), KernelSymbolsState::None);
        assert!(!r.set_kernel_symbols("0000000000000000 T hidden\n".into()));
        assert!(r.set_kernel_symbols(
            "ffffffff81000000 T _text\nffffffff81000100 T hot_fn\nffffffff81000200 T next\n".into()
        ));
        assert_eq!(r.kernel_symbols(), KernelSymbolsState::Pending);
        // perf's kernel mapping: _text was at 0xffffffff82000000 in the recording.
        let mut mmap = words(&[u64::MAX >> 32, 0xffff_ffff_8200_0000, 0x100_0000]);
        mmap.extend(words(&[0xffff_ffff_8200_0000]));
        mmap.extend_from_slice(b"[kernel.kallsyms]_text\0\0");
        mmap.extend(words(&[0, 0, 0]));
        r.record(cpu, Some(0), RECORD_MMAP, 0, &mmap).unwrap();
        assert_eq!(
            r.kernel_symbols(),
            KernelSymbolsState::Relocated(0x100_0000)
        );
        // A wake-up of 8 by 7 (pid 7) on CPU 1, queued on CPU 0.
        let mut raw = vec![0u8; 36];
        raw[8..12].copy_from_slice(b"wkd\0");
        raw[24..28].copy_from_slice(&8i32.to_ne_bytes());
        raw[28..32].copy_from_slice(&120i32.to_ne_bytes());
        let mut body = words(&[7 | 7 << 32, 100, 1]);
        body.extend_from_slice(&(raw.len() as u32).to_ne_bytes());
        body.extend_from_slice(&raw);
        r.record(wake, Some(1), RECORD_SAMPLE, 0, &body).unwrap();
        // A sample of 7 in hot_fn, called from user code.
        const KERNEL: u64 = (-128i64) as u64;
        const USER: u64 = (-512i64) as u64;
        let sample = words(&[
            0xffff_ffff_8200_0110,
            7 | 7 << 32,
            200,
            1,
            4,
            KERNEL,
            0xffff_ffff_8200_0110,
            USER,
            0x40_1000,
        ]);
        r.record(cpu, Some(1), RECORD_SAMPLE, 0, &sample).unwrap();
        // Without a call chain the sample has none (a chain of one is its ip).
        r.finish();
        let events = r.take_events();
        let w = events
            .iter()
            .find_map(|e| match e {
                CaptureEvent::Wakeup(w) => Some(*w),
                _ => None,
            })
            .unwrap();
        assert_eq!(
            (w.tid, w.waker_tid, w.waker_pid, w.cpu, w.target_cpu),
            (8, 7, Some(7), 1, 0)
        );
        let order: Vec<&str> = events
            .iter()
            .filter_map(|e| match e {
                CaptureEvent::KernelSymbol(k) => {
                    assert_eq!(
                        (&*k.name, k.start, k.len),
                        ("hot_fn", 0xffff_ffff_8200_0100, 0x100)
                    );
                    Some("ksym")
                }
                CaptureEvent::Stack(s) => {
                    assert_eq!(
                        (s.kernel_frames, &s.frames[..]),
                        (1, &[0xffff_ffff_8200_0110, 0x40_1000][..])
                    );
                    Some("stack")
                }
                CaptureEvent::Sample(s) => {
                    assert_eq!((s.tid, s.cpu, s.stack), (7, 1, Some(1)));
                    Some("sample")
                }
                _ => None,
            })
            .collect();
        assert_eq!(order, ["ksym", "stack", "sample"]);
    }

    /// Samples recorded without a call chain: the sampled instruction is the stack.
    #[test]
    fn a_sample_without_a_call_chain_is_its_instruction() {
        let mut r = Replay::nanoseconds();
        let cpu = r.add_event(
            ReplayEventKind::CpuSampling,
            RecordLayout::from_formats(
                SampleFormat::IP | SampleFormat::TID | SampleFormat::TIME,
                BranchSampleFormat::empty(),
                true,
            )
            .unwrap(),
        );
        let sample = words(&[0x40_1234, 3 | 3 << 32, 50]);
        r.record(cpu, Some(0), RECORD_SAMPLE, 0, &sample).unwrap();
        r.finish();
        let stack = r
            .take_events()
            .into_iter()
            .find_map(|e| match e {
                CaptureEvent::Stack(s) => Some(s),
                _ => None,
            })
            .unwrap();
        assert_eq!(
            (stack.kernel_frames, &stack.frames[..]),
            (0, &[0x40_1234][..])
        );
    }
}
