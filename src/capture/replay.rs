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

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::attr::PerfEventKind;
use super::decode::{Decoded, Pending, RawFormat, Skip, StreamDecoder};
use super::events::CaptureEvent;
use super::ids::IdMap;
use super::pids::PidResolver;
use super::procfs::TaskRegistry;
use super::records::{ParseError, RecordLayout};
use super::ring::{RawData, RawRecord};
use super::session::Counters;
use super::stacks::{StackInterner, MAX_STACK_BYTES};
use super::switch::SchedSwitchFormat;
use super::time::{PerfTimeConverter, TscConversion};
use super::worker::{Delivery, ANNOUNCED_SLOTS};

/// Decoders kept at most (one per event and CPU); records of further (event, CPU) pairs share
/// one decoder per event.
pub const MAX_DECODERS: usize = 4096;

/// Build-ids kept at most ([`Replay::add_build_id`]); further ones are not used.
pub const MAX_BUILD_IDS: usize = 1 << 16;

/// What an event's samples are to the capture.
#[derive(Debug, Clone)]
pub enum ReplayEventKind {
    /// `sched:sched_switch` tracepoint samples, decoded by the recorded format.
    SchedSwitch(Box<SchedSwitchFormat>),
    /// Samples with a branch stack (LBR).
    BranchSampling,
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
    sched: Option<Arc<SchedSwitchFormat>>,
}

/// Recorded perf records → [`CaptureEvent`]s (see the module docs).
pub struct Replay {
    events: Vec<EventDesc>,
    decoders: HashMap<(usize, u32), StreamDecoder>,
    delivery: Delivery,
    out: Arc<Mutex<Vec<CaptureEvent>>>,
    counters: Arc<Counters>,
    conv: PerfTimeConverter,
    build_ids: HashMap<Vec<u8>, Vec<u8>>,
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
        let (kind, sched) = match kind {
            ReplayEventKind::SchedSwitch(format) => (
                PerfEventKind::SchedSwitchTracepoint,
                Some(Arc::from(format)),
            ),
            ReplayEventKind::BranchSampling => (PerfEventKind::BranchSampling, None),
            // The capture's side-band event (a dummy whose samples are unexpected).
            ReplayEventKind::SideBand => (PerfEventKind::CpuWideSwitches, None),
        };
        self.events.push(EventDesc {
            kind,
            layout,
            sched,
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
        let Some(desc) = self.events.get(event) else {
            return Err(ParseError::Tracepoint(format!(
                "record of event {event}, of {} events",
                self.events.len()
            )));
        };
        let cpu = cpu.unwrap_or(0);
        let key = if self.decoders.len() < MAX_DECODERS || self.decoders.contains_key(&(event, cpu))
        {
            (event, cpu)
        } else {
            (event, u32::MAX)
        };
        let decoder = self.decoders.entry(key).or_insert_with(|| {
            let format = desc.sched.clone().map(RawFormat::Switch);
            StreamDecoder::new(desc.kind, key.1.min(cpu), desc.layout, format)
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
}
