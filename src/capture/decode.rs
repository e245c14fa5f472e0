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
//! whose own task is reported as -1 (a reaped thread leaving the CPU for the last time) is the
//! task the previous switch-out of the same CPU named as incoming, so each ring's decoder
//! remembers that.

use std::sync::Arc;

use super::attr::PerfEventKind;
use super::events::{
    BranchSample, CaptureEvent, Lost, LostKind, MemoryMap, SwitchEvent, SwitchSides, TaskComm,
    TaskExit, TaskFork,
};
use super::records::RECORD_SAMPLE;
use super::records::{MmapFile, ParseError, PerfRecord, RecordLayout, TaskName};
use super::ring::{RawData, RawRecord};
use super::state::{fxt_priority, state_after_switch_out, LinuxThreadState, PRIORITY_UNKNOWN};
use super::switch::SchedSwitchFormat;
use super::time::PerfTimeConverter;

/// A decoded event waiting to be merged and delivered. Context switches, nearly every event,
/// are held by value and kept small (about 80 bytes, moved without a `memcpy` call through the
/// per-CPU merge and the pid resolver); every other event is boxed.
#[derive(Debug)]
pub(crate) enum Pending {
    /// A context switch, with the task names its sample carried.
    Switch(SwitchEvent, SwitchNames),
    /// Any other event.
    Other(Box<OtherEvent>),
}

/// An event other than a context switch, waiting in the merge.
#[derive(Debug)]
pub(crate) struct OtherEvent {
    pub(crate) event: CaptureEvent,
    /// A mapping's (major, minor, inode), to look its build-id up by.
    pub(crate) inode: Option<(u32, u32, u64)>,
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

impl Pending {
    /// `event` with no names and no inode.
    pub(crate) fn of(event: CaptureEvent) -> Self {
        match event {
            CaptureEvent::ContextSwitch(cs) => Self::Switch(cs, SwitchNames::None),
            event => Self::Other(Box::new(OtherEvent { event, inode: None })),
        }
    }

    /// The context switch, if the event is one.
    pub(crate) fn switch_mut(&mut self) -> Option<&mut SwitchEvent> {
        match self {
            Self::Switch(cs, _) => Some(cs),
            Self::Other(o) => match &mut o.event {
                CaptureEvent::ContextSwitch(cs) => Some(cs),
                _ => None,
            },
        }
    }

    /// The event, with its names and inode dropped.
    #[cfg(test)]
    pub(crate) fn into_event(self) -> CaptureEvent {
        match self {
            Self::Switch(cs, _) => CaptureEvent::ContextSwitch(cs),
            Self::Other(o) => o.event,
        }
    }
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
    last_time: u64,
    /// CPU-wide switches: the (pid, tid) the last switch-out of this ring switched to.
    running: Option<(Option<u32>, u32)>,
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
        sched: Option<Arc<SchedSwitchFormat>>,
    ) -> Self {
        Self {
            kind,
            cpu,
            layout,
            sched,
            last_time: 0,
            running: None,
        }
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
        SwitchEvent {
            time,
            cpu: cpu.unwrap_or(self.cpu),
            prev_tid,
            prev_pid: idle(prev_tid).or_else(|| sample_pid_of_prev(pid, tid, prev_tid)),
            next_tid,
            next_pid: idle(next_tid),
            prev_state: fmt.state_bits().thread_state(prev_state),
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
    ) -> Option<Decoded> {
        let (RawData::Single(body), Some(fmt)) = (rec.body, self.sched.as_deref()) else {
            return None;
        };
        let s = self.layout.sample_in_place(body)?;
        let f = fmt.decode_comm16(s.raw)?;
        let perf_time = s.time.unwrap_or(self.last_time);
        let cs = self.sched_switch(
            fmt,
            conv.perf_to_tsc(perf_time),
            (s.pid, s.tid, s.cpu),
            (f.prev_tid, f.next_tid),
            f.prev_state,
            (f.prev_prio, f.next_prio),
        );
        self.last_time = perf_time;
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

    pub(crate) fn decode(
        &mut self,
        rec: &RawRecord<'_>,
        conv: &PerfTimeConverter,
    ) -> Result<Decoded, ParseError> {
        if rec.kind == RECORD_SAMPLE && self.kind == PerfEventKind::SchedSwitchTracepoint {
            if let Some(decoded) = self.sched_switch_in_place(rec, conv) {
                return Ok(decoded);
            }
        }
        let record = self.layout.parse(rec)?;
        let mut inode = None;
        let (perf_time, event) = match record {
            PerfRecord::Sample(s) => {
                let perf_time = self.stamp(s.time);
                let time = conv.perf_to_tsc(perf_time);
                let cpu = s.cpu.unwrap_or(self.cpu);
                match (self.kind, &self.sched, s.raw, s.branch_stack) {
                    (PerfEventKind::SchedSwitchTracepoint, Some(fmt), Some(raw), _) => {
                        let f = fmt.decode(&raw)?;
                        let cs = self.sched_switch(
                            fmt,
                            time,
                            (s.pid, s.tid, s.cpu),
                            (f.prev_tid, f.next_tid),
                            f.prev_state,
                            (f.prev_prio, f.next_prio),
                        );
                        let names = SwitchNames::Names(Box::new((f.prev_comm, f.next_comm)));
                        return Ok(Decoded::Event {
                            perf_time,
                            pending: Pending::Switch(cs, names),
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
                        (perf_time, CaptureEvent::Branch(b))
                    }
                    (PerfEventKind::SchedSwitchTracepoint, _, None, _) => {
                        return Err(ParseError::Truncated {
                            record: "sched_switch sample",
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
                    (Some((next_pid, next_tid)), true) => Some((known_pid(next_pid), next_tid)),
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
                        prev_state: LinuxThreadState::Suspended,
                        prev_prio: PRIORITY_UNKNOWN,
                        next_prio: PRIORITY_UNKNOWN,
                        sides: SwitchSides::IncomingOnly,
                    },
                };
                let mut cs = cs;
                if cs.prev_tid == u32::MAX {
                    // Who left is unknown (its switch-in was never seen): keep what is known.
                    cs.prev_tid = 0;
                    cs.prev_pid = Some(0);
                    if cs.sides == SwitchSides::Both {
                        cs.sides = SwitchSides::IncomingOnly;
                    }
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
            pending: Pending::Other(Box::new(OtherEvent { event, inode })),
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
