//! One ring's records → typed [`CaptureEvent`]s (before merging and thread naming).
//!
//! # Process ids of switched tasks
//!
//! The `sched:sched_switch` tracepoint gives thread ids only. It fires in `__schedule()` before
//! `context_switch()`, in the context of the outgoing task, so the sample's `PERF_SAMPLE_TID`
//! pair (taken from `current`) is the outgoing task's (pid, tid): the outgoing side's pid comes
//! from the sample itself when its tid matches `prev_pid` ([`sample_pid_of_prev`]). The kernel
//! writes -1 (`0xffffffff`) for a task whose pid is already detached (a reaped thread's last
//! switch-out) and for a task outside the event's pid namespace; such a pid is not used. The
//! incoming side is resolved later (FORK records, the `/proc` scan, its own switch-out).
//! `PERF_RECORD_SWITCH_CPU_WIDE` carries both pids, with the same -1 convention; a switch-out
//! whose own task is reported as -1 (a reaped thread leaving the CPU) is the task the previous
//! switch-out of the same CPU named as incoming, so each ring's decoder remembers that.
//!
//! A reaped task can also be switched *in*: one preempted between its own `release_task` and
//! its last `schedule` (a thread, or a process nobody waits for), or one its parent reaped
//! while it was off the CPU, still in `do_exit` after `exit_notify`. The switch-out naming it
//! as incoming then says -1 for its tid (and for its pid once its whole process is gone): the
//! kernel no longer knows who it is, and nothing in the record does. That side is written as unknown, like the other task of a
//! per-process switch, never as a thread `0xffffffff`; so is its own next switch-out, and a
//! switch between two such tasks names nobody and is skipped ([`Skip::NoKnownTask`]).

use std::sync::Arc;

use super::attr::PerfEventKind;
use super::duplicates::TwinFilter;
use super::events::{
    BranchSample, CaptureEvent, CpuSample, Lost, LostKind, MemoryMap, SwitchEvent, SwitchSides,
    TaskComm, TaskExit, TaskFork, WakeupEvent,
};
use super::records::RECORD_SAMPLE;
use super::records::{MmapFile, ParseError, PerfRecord, RecordLayout, TaskName};
use super::ring::{RawData, RawRecord};
use super::stacks::{Chain, StackInterner};
use super::state::{fxt_priority, state_after_switch_out, LinuxThreadState, PRIORITY_UNKNOWN};
use super::switch::SchedSwitchFormat;
use super::time::PerfTimeConverter;
use super::waking::SchedWakingFormat;

/// The format of a tracepoint's raw data, for the decoder of its rings.
#[derive(Debug, Clone)]
pub(crate) enum RawFormat {
    /// `sched:sched_switch`.
    Switch(Arc<SchedSwitchFormat>),
    /// `sched:sched_waking` (or `sched_wakeup`).
    Waking(Arc<SchedWakingFormat>),
    /// `sched:sched_switch` on a process's threads, read for its call chains only: the
    /// process's switches are its `PERF_RECORD_SWITCH` records, and a blocked one takes the
    /// wait point of the sample just before it ([`Pending::WaitPoint`]).
    WaitPoints(Arc<SchedSwitchFormat>),
}

/// A decoded event waiting to be merged and delivered. Context switches, wake-ups and CPU
/// samples, nearly every event, are held by value and kept small (moved without a `memcpy`
/// call through the per-CPU merge and the pid resolver); every other event is boxed.
#[derive(Debug)]
pub(crate) enum Pending {
    /// A context switch, with the task names its sample carried.
    Switch(SwitchEvent, SwitchNames),
    /// A wake-up, with the woken task's name as the ring held it (`comm[16]`).
    Wakeup(WakeupEvent, [u8; 16]),
    /// A CPU sample, with the lineage its record named ([`super::duplicates`]; 0: none).
    Sample(CpuSample, u64),
    /// Where thread `tid` blocked (stack `stack`), for its switch-out that follows.
    WaitPoint { tid: u32, stack: u32 },
    /// Any other event.
    Other(Box<OtherEvent>),
}

/// An event other than a context switch, waiting in the merge.
#[derive(Debug)]
pub(crate) struct OtherEvent {
    pub(crate) event: CaptureEvent,
    /// A mapping's (major, minor, inode), to look its build-id up by.
    pub(crate) inode: Option<(u32, u32, u64)>,
    /// The lineage an LBR sample's record named ([`super::duplicates`]; 0: none).
    pub(crate) lineage: u64,
}

/// The task names of a context switch, as its source gave them.
#[derive(Debug, Clone)]
pub(crate) enum SwitchNames {
    /// None (`PERF_RECORD_SWITCH*`).
    None,
    /// `sched_switch`'s two `comm[16]` fields, as the ring held them: made into [`TaskName`]s
    /// only when a thread is announced.
    Comm16 { prev: [u8; 16], next: [u8; 16] },
    /// Names read from comm fields of another size.
    Names(Box<(TaskName, TaskName)>),
}

impl SwitchNames {
    /// The outgoing task's name.
    pub(crate) fn prev(&self) -> Option<TaskName> {
        match self {
            Self::None => None,
            Self::Comm16 { prev, .. } => Some(TaskName::from_bytes(prev)),
            Self::Names(n) => Some(n.0),
        }
    }

    /// The incoming task's name.
    pub(crate) fn next(&self) -> Option<TaskName> {
        match self {
            Self::None => None,
            Self::Comm16 { next, .. } => Some(TaskName::from_bytes(next)),
            Self::Names(n) => Some(n.1),
        }
    }
}

/// A thread an event names whose process the pid resolver fills in: its tid and the event's
/// pid field for it.
pub(crate) type ThreadSlot<'a> = Option<(u32, &'a mut Option<u32>)>;

impl Pending {
    /// `event` with no names and no inode.
    pub(crate) fn of(event: CaptureEvent) -> Self {
        match event {
            CaptureEvent::ContextSwitch(cs) => Self::Switch(cs, SwitchNames::None),
            CaptureEvent::Wakeup(w) => Self::Wakeup(w, [0; 16]),
            CaptureEvent::Sample(s) => Self::Sample(s, 0),
            event => Self::Other(Box::new(OtherEvent {
                event,
                inode: None,
                lineage: 0,
            })),
        }
    }

    /// The threads whose process the event needs (see `capture::pids`): a switch's known
    /// sides, a wake-up's woken thread and waker, a sample's thread.
    pub(crate) fn threads_mut(&mut self) -> [ThreadSlot<'_>; 2] {
        let event = match self {
            Self::Switch(cs, _) => return switch_threads(cs),
            Self::Wakeup(w, _) => return wakeup_threads(w),
            Self::Sample(s, _) => return [Some((s.tid, &mut s.pid)), None],
            Self::WaitPoint { .. } => return [None, None],
            Self::Other(o) => &mut o.event,
        };
        match event {
            CaptureEvent::ContextSwitch(cs) => switch_threads(cs),
            CaptureEvent::Wakeup(w) => wakeup_threads(w),
            CaptureEvent::Sample(s) => [Some((s.tid, &mut s.pid)), None],
            _ => [None, None],
        }
    }

    /// The event, with its names and inode dropped.
    #[cfg(test)]
    pub(crate) fn into_event(self) -> CaptureEvent {
        match self {
            Self::Switch(cs, _) => CaptureEvent::ContextSwitch(cs),
            Self::Wakeup(w, _) => CaptureEvent::Wakeup(w),
            Self::Sample(s, _) => CaptureEvent::Sample(s),
            Self::WaitPoint { .. } => panic!("a wait point is no event of its own"),
            Self::Other(o) => o.event,
        }
    }
}

/// A switch's known sides: `[outgoing, incoming]`.
fn switch_threads(cs: &mut SwitchEvent) -> [ThreadSlot<'_>; 2] {
    let (prev, next) = (
        cs.sides != SwitchSides::IncomingOnly,
        cs.sides != SwitchSides::OutgoingOnly,
    );
    [
        prev.then_some((cs.prev_tid, &mut cs.prev_pid)),
        next.then_some((cs.next_tid, &mut cs.next_pid)),
    ]
}

/// A wake-up's `[woken, waker]`.
fn wakeup_threads(w: &mut WakeupEvent) -> [ThreadSlot<'_>; 2] {
    [
        Some((w.tid, &mut w.pid)),
        Some((w.waker_tid, &mut w.waker_pid)),
    ]
}

/// What a record became.
#[derive(Debug)]
pub(crate) enum Decoded {
    /// An event, keyed by its perf timestamp.
    Event { perf_time: u64, pending: Pending },
    /// Nothing to deliver; the reason is counted by the caller.
    Skipped(Skip),
}

/// Why a record produced no event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Skip {
    /// A record type fxtrace does not request.
    Unknown,
    /// THROTTLE / UNTHROTTLE.
    Throttle,
    /// The switch-in half of a CPU-wide switch (its switch-out record describes it).
    SwitchInPair,
    /// A sample on an event that produces none.
    UnexpectedSample,
    /// A mapping that is not executable.
    DataMapping,
    /// A switch read for its wait point ([`RawFormat::WaitPoints`]) whose thread does not
    /// wait (preempted, exiting) or has no call chain: its `PERF_RECORD_SWITCH` says it all.
    NoWaitPoint,
    /// The copy of the record before it, written by a second event of the same thread
    /// ([`super::duplicates`]).
    Duplicate,
    /// A switch naming only tasks the kernel no longer identifies (reaped, see the module docs:
    /// a CPU-wide switch between two, a switch-in of one): no side to write.
    NoKnownTask,
}

/// Whether the outgoing thread of `cs` waits (blocked, or stopped): its call chain is a wait
/// point. A preempted or exiting thread's is not kept.
pub(crate) fn waits(cs: &SwitchEvent) -> bool {
    matches!(
        cs.prev_state,
        LinuxThreadState::Blocked | LinuxThreadState::Suspended
    ) && cs.prev_tid != 0
}

/// The wait point of `cs`, a switch read for it alone ([`RawFormat::WaitPoints`]).
fn wait_point(perf_time: u64, cs: &SwitchEvent) -> Decoded {
    match cs.stack {
        Some(stack) => Decoded::Event {
            perf_time,
            pending: Pending::WaitPoint {
                tid: cs.prev_tid,
                stack,
            },
        },
        None => Decoded::Skipped(Skip::NoWaitPoint),
    }
}

/// A pid the kernel could resolve: not the -1 (`0xffffffff`) perf writes for a task whose pid
/// is gone or outside the event's pid namespace.
pub(crate) fn known_pid(pid: u32) -> Option<u32> {
    (pid != u32::MAX).then_some(pid)
}

/// The outgoing task's pid from a `sched_switch` sample's own `(pid, tid)` (see the module
/// docs): used only when the sample's tid is the tracepoint's `prev_pid`.
pub(crate) fn sample_pid_of_prev(
    sample_pid: Option<u32>,
    sample_tid: Option<u32>,
    prev_tid: u32,
) -> Option<u32> {
    match (sample_pid, sample_tid) {
        (Some(pid), Some(tid)) if tid == prev_tid => known_pid(pid),
        _ => None,
    }
}

/// Decodes the records of one ring.
#[derive(Debug)]
pub(crate) struct StreamDecoder {
    kind: PerfEventKind,
    cpu: u32,
    layout: RecordLayout,
    sched: Option<Arc<SchedSwitchFormat>>,
    waking: Option<Arc<SchedWakingFormat>>,
    /// `sched` is read for wait points only ([`RawFormat::WaitPoints`]).
    waits_only: bool,
    last_time: u64,
    /// CPU-wide switches: the (pid, tid) the last switch-out of this ring switched to.
    running: Option<(Option<u32>, u32)>,
    /// A process capture's ring where a thread may have two events of a kind: the copies of
    /// a record are dropped ([`super::duplicates`]).
    twins: Option<TwinFilter>,
}

impl StreamDecoder {
    /// The CPU of the ring it decodes.
    pub(crate) fn cpu(&self) -> u32 {
        self.cpu
    }

    pub(crate) fn new(
        kind: PerfEventKind,
        cpu: u32,
        layout: RecordLayout,
        format: Option<RawFormat>,
    ) -> Self {
        let waits_only = matches!(format, Some(RawFormat::WaitPoints(_)));
        let (sched, waking) = match format {
            Some(RawFormat::Switch(f) | RawFormat::WaitPoints(f)) => (Some(f), None),
            Some(RawFormat::Waking(f)) => (None, Some(f)),
            None => (None, None),
        };
        Self {
            kind,
            cpu,
            layout,
            sched,
            waking,
            waits_only,
            last_time: 0,
            running: None,
            twins: None,
        }
    }

    /// Drops the copies of a record another event of the same thread wrote
    /// ([`super::duplicates`]).
    pub(crate) fn drop_twins(&mut self, twins: TwinFilter) {
        self.twins = Some(twins);
    }

    /// Whether `rec` is such a copy. Out of line: only the rings of a capture that had threads
    /// made while its events were opened ask, and the check kept inline slowed every other
    /// ring's records (`benches/capture.rs`).
    #[inline(never)]
    fn is_twin(&mut self, rec: &RawRecord<'_>) -> bool {
        self.twins.as_mut().is_some_and(|t| t.is_twin(rec))
    }

    /// The perf timestamp of a record: its own, else the previous one of this ring.
    fn stamp(&mut self, time: Option<u64>) -> u64 {
        if let Some(t) = time {
            self.last_time = t;
        }
        self.last_time
    }

    /// The outgoing thread's new state and both sides of a `sched_switch` sample (its own
    /// (pid, tid) and cpu, the tracepoint's tids, state and priorities).
    #[allow(clippy::too_many_arguments)]
    fn sched_switch(
        &self,
        fmt: &SchedSwitchFormat,
        time: u64,
        sample: (Option<u32>, Option<u32>, Option<u32>),
        (prev_tid, next_tid): (u32, u32),
        prev_state: i64,
        (prev_prio, next_prio): (i64, i64),
    ) -> SwitchEvent {
        let (pid, tid, cpu) = sample;
        let idle = |tid: u32| (tid == 0).then_some(0);
        let state = fmt.state_bits().thread_state(prev_state);
        SwitchEvent {
            time,
            cpu: cpu.unwrap_or(self.cpu),
            prev_tid,
            prev_pid: idle(prev_tid).or_else(|| sample_pid_of_prev(pid, tid, prev_tid)),
            next_tid,
            next_pid: idle(next_tid),
            prev_state: state,
            uninterruptible: fmt.state_bits().uninterruptible(prev_state),
            stack: None,
            prev_prio: fxt_priority(prev_prio),
            next_prio: fxt_priority(next_prio),
            sides: SwitchSides::Both,
        }
    }

    /// A `sched_switch` sample decoded in place, in the ring: the fixed offsets of the sample
    /// and of the tracepoint's fields, the names kept as raw `comm[16]` bytes. `None` for
    /// anything else (a sample split by the ring's end, another layout, a short record):
    /// [`Self::decode`]'s general path then decodes it, or says what is wrong.
    #[inline]
    fn sched_switch_in_place(
        &mut self,
        rec: &RawRecord<'_>,
        conv: &PerfTimeConverter,
        stacks: &mut StackInterner,
    ) -> Option<Decoded> {
        let (RawData::Single(body), Some(fmt)) = (rec.body, self.sched.as_deref()) else {
            return None;
        };
        let s = self.layout.sample_in_place(body)?;
        let f = fmt.decode_comm16(s.raw)?;
        let perf_time = s.time.unwrap_or(self.last_time);
        let mut cs = self.sched_switch(
            fmt,
            conv.perf_to_tsc(perf_time),
            (s.pid, s.tid, s.cpu),
            (f.prev_tid, f.next_tid),
            f.prev_state,
            (f.prev_prio, f.next_prio),
        );
        if !s.callchain.is_empty() && waits(&cs) {
            cs.stack = stacks.intern(&Chain::of_ring_bytes(s.callchain));
        }
        self.last_time = perf_time;
        if self.waits_only {
            return Some(wait_point(perf_time, &cs));
        }
        Some(Decoded::Event {
            perf_time,
            pending: Pending::Switch(
                cs,
                SwitchNames::Comm16 {
                    prev: f.prev_comm,
                    next: f.next_comm,
                },
            ),
        })
    }

    /// A wake-up sample read in place (see [`Self::sched_switch_in_place`]).
    #[inline]
    fn waking_in_place(
        &mut self,
        rec: &RawRecord<'_>,
        conv: &PerfTimeConverter,
    ) -> Option<Decoded> {
        let (RawData::Single(body), Some(fmt)) = (rec.body, self.waking.as_deref()) else {
            return None;
        };
        let s = self.layout.sample_in_place(body)?;
        let f = fmt.decode_comm16(s.raw)?;
        let perf_time = s.time.unwrap_or(self.last_time);
        self.last_time = perf_time;
        let w = self.wakeup(
            conv.perf_to_tsc(perf_time),
            (s.pid, s.tid, s.cpu),
            (f.tid, f.prio, f.target_cpu),
        );
        Some(Decoded::Event {
            perf_time,
            pending: Pending::Wakeup(w, f.comm),
        })
    }

    /// A wake-up from its sample's own (waker) `(pid, tid)` and CPU and the woken task's
    /// fields.
    fn wakeup(
        &self,
        time: u64,
        (pid, tid, cpu): (Option<u32>, Option<u32>, Option<u32>),
        (woken, prio, target_cpu): (u32, i64, Option<u32>),
    ) -> WakeupEvent {
        let cpu = cpu.unwrap_or(self.cpu);
        let waker_tid = tid.filter(|&t| t != u32::MAX).unwrap_or(0);
        WakeupEvent {
            time,
            cpu,
            target_cpu: target_cpu.unwrap_or(cpu),
            tid: woken,
            pid: (woken == 0).then_some(0),
            prio: fxt_priority(prio),
            waker_tid,
            waker_pid: if waker_tid == 0 {
                Some(0)
            } else {
                pid.and_then(known_pid)
            },
        }
    }

    /// A CPU sample read in place.
    #[inline]
    fn cpu_sample_in_place(
        &mut self,
        rec: &RawRecord<'_>,
        conv: &PerfTimeConverter,
        stacks: &mut StackInterner,
    ) -> Option<Decoded> {
        let RawData::Single(body) = rec.body else {
            return None;
        };
        let s = self.layout.sample_in_place(body)?;
        let perf_time = s.time.unwrap_or(self.last_time);
        self.last_time = perf_time;
        let stack = stacks.intern(&Chain::of_ring_bytes(s.callchain));
        let time = conv.perf_to_tsc(perf_time);
        let sample = self.cpu_sample(time, (s.pid, s.tid, s.cpu), s.ip, stack);
        Some(Decoded::Event {
            perf_time,
            pending: Pending::Sample(sample, self.layout.identifier_in_place(body)),
        })
    }

    /// A CPU sample from its own `(pid, tid)`, CPU and IP, and its interned chain.
    fn cpu_sample(
        &self,
        time: u64,
        (pid, tid, cpu): (Option<u32>, Option<u32>, Option<u32>),
        ip: Option<u64>,
        stack: Option<u32>,
    ) -> CpuSample {
        let tid = tid.unwrap_or(0);
        CpuSample {
            time,
            cpu: cpu.unwrap_or(self.cpu),
            pid: if tid == 0 {
                Some(0)
            } else {
                pid.and_then(known_pid)
            },
            tid,
            ip: ip.unwrap_or(0),
            stack,
        }
    }

    pub(crate) fn decode(
        &mut self,
        rec: &RawRecord<'_>,
        conv: &PerfTimeConverter,
        stacks: &mut StackInterner,
    ) -> Result<Decoded, ParseError> {
        if self.twins.is_some() && self.is_twin(rec) {
            return Ok(Decoded::Skipped(Skip::Duplicate));
        }
        if rec.kind == RECORD_SAMPLE {
            let fast = match self.kind {
                PerfEventKind::SchedSwitchTracepoint => {
                    self.sched_switch_in_place(rec, conv, stacks)
                }
                PerfEventKind::SchedWakingTracepoint => self.waking_in_place(rec, conv),
                PerfEventKind::CpuClockSampling => self.cpu_sample_in_place(rec, conv, stacks),
                _ => None,
            };
            if let Some(decoded) = fast {
                return Ok(decoded);
            }
        }
        let record = self.layout.parse(rec)?;
        let (mut inode, mut lineage) = (None, 0);
        let (perf_time, event) = match record {
            PerfRecord::Sample(s) => {
                let perf_time = self.stamp(s.time);
                let time = conv.perf_to_tsc(perf_time);
                let cpu = s.cpu.unwrap_or(self.cpu);
                let chain = || {
                    s.callchain.map(|c| {
                        let mut cursor = super::ring::RawCursor::new(c);
                        Chain::of(std::iter::from_fn(move || cursor.u64()))
                    })
                };
                match (self.kind, &self.sched, s.raw, s.branch_stack) {
                    (PerfEventKind::SchedSwitchTracepoint, Some(fmt), Some(raw), _) => {
                        let f = fmt.decode(&raw)?;
                        let mut cs = self.sched_switch(
                            fmt,
                            time,
                            (s.pid, s.tid, s.cpu),
                            (f.prev_tid, f.next_tid),
                            f.prev_state,
                            (f.prev_prio, f.next_prio),
                        );
                        if waits(&cs) {
                            cs.stack = chain().and_then(|c| stacks.intern(&c));
                        }
                        if self.waits_only {
                            return Ok(wait_point(perf_time, &cs));
                        }
                        let names = SwitchNames::Names(Box::new((f.prev_comm, f.next_comm)));
                        return Ok(Decoded::Event {
                            perf_time,
                            pending: Pending::Switch(cs, names),
                        });
                    }
                    (PerfEventKind::SchedWakingTracepoint, _, Some(raw), _) => {
                        let Some(fmt) = self.waking.as_deref() else {
                            return Ok(Decoded::Skipped(Skip::UnexpectedSample));
                        };
                        let f = fmt.decode(&raw)?;
                        let w =
                            self.wakeup(time, (s.pid, s.tid, s.cpu), (f.tid, f.prio, f.target_cpu));
                        let mut comm = [0u8; 16];
                        let name = f.comm.as_bytes();
                        let n = name.len().min(16);
                        comm[..n].copy_from_slice(&name[..n]);
                        return Ok(Decoded::Event {
                            perf_time,
                            pending: Pending::Wakeup(w, comm),
                        });
                    }
                    (PerfEventKind::CpuClockSampling, _, _, _) => {
                        // Without a call chain (a recording without `-g`), the sampled
                        // instruction alone.
                        let chain = chain().or_else(|| s.ip.map(|ip| Chain::of([ip].into_iter())));
                        let stack = chain.and_then(|c| stacks.intern(&c));
                        let sample = self.cpu_sample(time, (s.pid, s.tid, s.cpu), s.ip, stack);
                        return Ok(Decoded::Event {
                            perf_time,
                            pending: Pending::Sample(sample, s.id.unwrap_or(0)),
                        });
                    }
                    (PerfEventKind::BranchSampling, _, _, Some(stack)) => {
                        let b = BranchSample {
                            time,
                            cpu,
                            pid: s.pid.unwrap_or(0),
                            tid: s.tid.unwrap_or(0),
                            ip: s.ip.unwrap_or(0),
                            hw_idx: stack.hw_idx,
                            entries: stack.entries,
                        };
                        lineage = s.id.unwrap_or(0);
                        (perf_time, CaptureEvent::Branch(b))
                    }
                    (
                        PerfEventKind::SchedSwitchTracepoint | PerfEventKind::SchedWakingTracepoint,
                        _,
                        None,
                        _,
                    ) => {
                        return Err(ParseError::Truncated {
                            record: "tracepoint sample",
                            field: "raw",
                        })
                    }
                    _ => return Ok(Decoded::Skipped(Skip::UnexpectedSample)),
                }
            }
            PerfRecord::Switch(sw) => {
                let perf_time = self.stamp(sw.sample_id.time);
                let time = conv.perf_to_tsc(perf_time);
                let cpu = sw.sample_id.cpu.unwrap_or(self.cpu);
                let mut tid = sw.sample_id.tid.unwrap_or(0);
                let mut pid = sw.sample_id.pid.and_then(known_pid);
                if tid == u32::MAX && sw.out {
                    // A task whose pid is gone: the one this ring last saw switched in.
                    (pid, tid) = self.running.unwrap_or((None, u32::MAX));
                }
                self.running = match (sw.next_prev, sw.out) {
                    // An incoming task reported as -1 is not known (see the module docs).
                    (Some((next_pid, next_tid)), true) => {
                        (next_tid != u32::MAX).then_some((known_pid(next_pid), next_tid))
                    }
                    // A switch-in record's own task is the incoming one.
                    (_, false) => (tid != u32::MAX).then_some((pid, tid)),
                    // Per-process switch-out: the next task is outside the process.
                    (None, true) => None,
                };
                let cs = match (sw.next_prev, sw.out) {
                    (Some(_), false) => return Ok(Decoded::Skipped(Skip::SwitchInPair)),
                    (Some((next_pid, next_tid)), true) => SwitchEvent {
                        time,
                        cpu,
                        prev_tid: tid,
                        prev_pid: pid,
                        next_tid,
                        next_pid: known_pid(next_pid),
                        prev_state: state_after_switch_out(sw.preempt),
                        uninterruptible: false,
                        stack: None,
                        prev_prio: PRIORITY_UNKNOWN,
                        next_prio: PRIORITY_UNKNOWN,
                        sides: SwitchSides::Both,
                    },
                    (None, true) => SwitchEvent {
                        time,
                        cpu,
                        prev_tid: tid,
                        prev_pid: pid,
                        next_tid: 0,
                        next_pid: Some(0),
                        prev_state: state_after_switch_out(sw.preempt),
                        uninterruptible: false,
                        stack: None,
                        prev_prio: PRIORITY_UNKNOWN,
                        next_prio: PRIORITY_UNKNOWN,
                        sides: SwitchSides::OutgoingOnly,
                    },
                    (None, false) => SwitchEvent {
                        time,
                        cpu,
                        prev_tid: 0,
                        prev_pid: Some(0),
                        next_tid: tid,
                        next_pid: pid,
                        // Not known: the side is written as unknown (`super::fxt`).
                        prev_state: LinuxThreadState::Running,
                        uninterruptible: false,
                        stack: None,
                        prev_prio: PRIORITY_UNKNOWN,
                        next_prio: PRIORITY_UNKNOWN,
                        sides: SwitchSides::IncomingOnly,
                    },
                };
                let mut cs = cs;
                let prev_unknown = cs.prev_tid == u32::MAX;
                // A reaped task switched in (see the module docs): perf's -1 is no tid.
                let next_unknown = cs.sides != SwitchSides::OutgoingOnly && cs.next_tid == u32::MAX;
                if next_unknown && (prev_unknown || cs.sides == SwitchSides::IncomingOnly) {
                    return Ok(Decoded::Skipped(Skip::NoKnownTask));
                }
                if prev_unknown {
                    // Who left is unknown (its switch-in was never seen, or named nobody):
                    // keep what is known.
                    cs.prev_tid = 0;
                    cs.prev_pid = Some(0);
                    if cs.sides == SwitchSides::Both {
                        cs.sides = SwitchSides::IncomingOnly;
                    }
                }
                if next_unknown {
                    cs.next_tid = 0;
                    cs.next_pid = Some(0);
                    cs.sides = SwitchSides::OutgoingOnly;
                }
                return Ok(Decoded::Event {
                    perf_time,
                    pending: Pending::Switch(cs, SwitchNames::None),
                });
            }
            PerfRecord::Comm(c) => {
                let perf_time = self.stamp(c.sample_id.time);
                let e = TaskComm {
                    time: conv.perf_to_tsc(perf_time),
                    pid: c.pid,
                    tid: c.tid,
                    name: c.name.to_string_lossy(),
                    exec: c.exec,
                };
                (perf_time, CaptureEvent::Comm(e))
            }
            PerfRecord::Mmap(m) => {
                if !m.executable() {
                    return Ok(Decoded::Skipped(Skip::DataMapping));
                }
                let perf_time = self.stamp(m.sample_id.time);
                let build_id = match m.file {
                    MmapFile::BuildId(id) => Some(id),
                    MmapFile::Inode { maj, min, ino, .. } => {
                        inode = Some((maj, min, ino));
                        None
                    }
                    MmapFile::Unknown => None,
                };
                let e = MemoryMap {
                    time: conv.perf_to_tsc(perf_time),
                    pid: m.pid,
                    tid: m.tid,
                    start: m.addr,
                    len: m.len,
                    pgoff: m.pgoff,
                    path: m.filename,
                    build_id,
                    synthesized: false,
                };
                (perf_time, CaptureEvent::Mmap(e))
            }
            PerfRecord::Fork(t) => {
                let perf_time = self.stamp(Some(t.sample_id.time.unwrap_or(t.time)));
                let e = TaskFork {
                    time: conv.perf_to_tsc(perf_time),
                    pid: t.pid,
                    ppid: t.ppid,
                    tid: t.tid,
                    ptid: t.ptid,
                };
                (perf_time, CaptureEvent::Fork(e))
            }
            PerfRecord::Exit(t) => {
                let perf_time = self.stamp(Some(t.sample_id.time.unwrap_or(t.time)));
                let e = TaskExit {
                    time: conv.perf_to_tsc(perf_time),
                    pid: t.pid,
                    ppid: t.ppid,
                    tid: t.tid,
                    ptid: t.ptid,
                };
                (perf_time, CaptureEvent::Exit(e))
            }
            PerfRecord::Lost {
                lost, sample_id, ..
            } => self.lost(LostKind::Records, lost, sample_id.time, sample_id.cpu, conv),
            PerfRecord::LostSamples { lost, sample_id } => {
                self.lost(LostKind::Samples, lost, sample_id.time, sample_id.cpu, conv)
            }
            PerfRecord::Throttle { .. } => return Ok(Decoded::Skipped(Skip::Throttle)),
            PerfRecord::Unknown { .. } => return Ok(Decoded::Skipped(Skip::Unknown)),
        };
        Ok(Decoded::Event {
            perf_time,
            pending: Pending::Other(Box::new(OtherEvent {
                event,
                inode,
                lineage,
            })),
        })
    }

    fn lost(
        &mut self,
        kind: LostKind,
        count: u64,
        time: Option<u64>,
        cpu: Option<u32>,
        conv: &PerfTimeConverter,
    ) -> (u64, CaptureEvent) {
        let perf_time = self.stamp(time);
        let e = Lost {
            time: conv.perf_to_tsc(perf_time),
            cpu: cpu.unwrap_or(self.cpu),
            kind,
            count,
        };
        (perf_time, CaptureEvent::Lost(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sample_pid_is_the_outgoing_tasks_when_its_tid_matches() {
        assert_eq!(sample_pid_of_prev(Some(40), Some(42), 42), Some(40));
        // A sample taken for another task (not the tracepoint's prev): not used.
        assert_eq!(sample_pid_of_prev(Some(40), Some(43), 42), None);
        // No PERF_SAMPLE_TID.
        assert_eq!(sample_pid_of_prev(None, None, 42), None);
        // A reaped thread's last switch-out: the kernel writes -1 for both.
        assert_eq!(sample_pid_of_prev(Some(u32::MAX), Some(u32::MAX), 42), None);
        assert_eq!(sample_pid_of_prev(Some(u32::MAX), Some(42), 42), None);
        assert_eq!(known_pid(7), Some(7));
        assert_eq!(known_pid(u32::MAX), None);
    }
}
