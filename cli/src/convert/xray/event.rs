//! The typed, owned event model an XRay log decodes into.
//!
//! A log becomes per-thread streams of [`XrayEvent`]s with absolute timestamps (FDR
//! deltas already applied), plus the wall-clock anchors FDR buffers carry. This is
//! what the FXT conversion consumes; nothing here borrows from the log bytes.

use super::error::XrayError;
use super::header::FileHeader;

/// A function id: index of the function in the binary's instrumentation map (1-based).
/// Basic-mode logs store it as a signed 32-bit value, FDR logs as 28 unsigned bits.
pub type FunctionId = i32;

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum XrayEventKind {
    /// Function entry.
    Enter {
        /// Function entered.
        func_id: FunctionId,
    },
    /// Function entry with logged arguments (argument 0 first).
    EnterWithArgs {
        /// Function entered.
        func_id: FunctionId,
        /// The logged arguments, as raw 64-bit values (numbers or pointers).
        args: Vec<u64>,
    },
    /// Function exit.
    Exit {
        /// Function exited.
        func_id: FunctionId,
    },
    /// Exit through a tail call: `func_id` is the function whose frame is popped.
    TailExit {
        /// Function exited.
        func_id: FunctionId,
    },
    /// An application-defined custom event (`__xray_customevent`).
    CustomEvent {
        /// The payload bytes.
        data: Vec<u8>,
    },
    /// An application-defined typed event (`__xray_typedevent`).
    TypedEvent {
        /// The application's event type.
        event_type: u16,
        /// The payload bytes.
        data: Vec<u8>,
    },
    /// The thread's events moved to another CPU between the previous event and this
    /// one. Synthesized by the reader from NewCPUId records (FDR) or the per-record CPU
    /// (basic mode); `tsc` is the first timestamp seen on the new CPU.
    CpuMigration {
        /// CPU of the previous event.
        from: u16,
        /// CPU of the following events.
        to: u16,
    },
}

impl XrayEventKind {
    /// The function id of function events, `None` for the others.
    pub fn func_id(&self) -> Option<FunctionId> {
        match *self {
            Self::Enter { func_id }
            | Self::EnterWithArgs { func_id, .. }
            | Self::Exit { func_id }
            | Self::TailExit { func_id } => Some(func_id),
            _ => None,
        }
    }
}

/// One event on one thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XrayEvent {
    /// Absolute timestamp in the log's clock (TSC ticks at `FileHeader::cycle_frequency`).
    pub tsc: u64,
    /// CPU the thread ran on.
    pub cpu: u16,
    /// Process id, when the log records it (FDR version >= 3, basic mode).
    pub pid: Option<u32>,
    /// Thread id.
    pub tid: u32,
    /// What happened.
    pub kind: XrayEventKind,
}

/// A wall-clock time recorded at the start of an FDR buffer, anchoring its TSCs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WallTimeAnchor {
    /// Seconds; the epoch is the writer's choice (compiler-rt: CLOCK_MONOTONIC).
    pub seconds: i64,
    /// Microseconds within the second.
    pub micros: u32,
    /// TSC of the buffer's first NewCPUId, taken right after the wall time: the TSC that
    /// corresponds to this wall time. `None` if the buffer ended before one.
    pub tsc: Option<u64>,
}

/// All events of one thread, in time order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadStream {
    /// Process id, when the log records it.
    pub pid: Option<u32>,
    /// Thread id.
    pub tid: u32,
    /// The events: FDR buffers ordered by their wall time, records in log order.
    pub events: Vec<XrayEvent>,
    /// One anchor per FDR buffer of this thread, in the order of `events`.
    pub wall_times: Vec<WallTimeAnchor>,
    /// FDR buffers this thread filled (0 for basic-mode logs).
    pub buffers: u32,
}

/// Counters of what the reader saw, including everything it had to leave out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Records decoded (FDR function + metadata records, or basic-mode 32-byte records).
    pub records: u64,
    /// FDR buffers (blocks starting with NewBuffer).
    pub buffers: u64,
    /// TSCWrap records applied.
    pub tsc_wraps: u64,
    /// CpuMigration events synthesized.
    pub cpu_migrations: u64,
    /// CallArgument records not following an entry record: dropped, counted here.
    pub orphan_call_args: u64,
    /// Bytes skipped as unused buffer space (version-1 FDR logs after EndOfBuffer).
    pub skipped_bytes: u64,
}

/// A decoded XRay log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XrayLog {
    /// The file header.
    pub header: FileHeader,
    /// One stream per (pid, tid), in order of first appearance in the file.
    pub threads: Vec<ThreadStream>,
    /// What the reader counted.
    pub stats: ReadStats,
    /// Set when decoding stopped before the end of the file: where and why. Everything
    /// decoded before that offset is in `threads`.
    pub error: Option<XrayError>,
}

impl XrayLog {
    /// True when the whole file decoded without error.
    pub fn is_complete(&self) -> bool {
        self.error.is_none()
    }

    /// Total number of events over all threads.
    pub fn event_count(&self) -> usize {
        self.threads.iter().map(|t| t.events.len()).sum()
    }

    /// The stream of thread `tid` (first match if several processes share the tid).
    pub fn thread(&self, tid: u32) -> Option<&ThreadStream> {
        self.threads.iter().find(|t| t.tid == tid)
    }
}

/// Inserts a [`XrayEventKind::CpuMigration`] before every event whose CPU differs from
/// the previous event's; returns how many were inserted.
pub(crate) fn insert_cpu_migrations(events: &mut Vec<XrayEvent>) -> u64 {
    let changes = events.windows(2).filter(|w| w[0].cpu != w[1].cpu).count();
    if changes == 0 {
        return 0; // the common case: leave the (possibly huge) vector alone
    }
    let mut out = Vec::with_capacity(events.len() + changes);
    let mut cpu = CpuTracker::default();
    for e in events.drain(..) {
        out.extend(cpu.migration_before(&e));
        out.push(e);
    }
    *events = out;
    cpu.migrations
}

/// The CPU of a thread's events so far, read one event at a time: where it changes, the
/// [`XrayEventKind::CpuMigration`] to write before the event.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct CpuTracker {
    prev: Option<u16>,
    /// Migrations found so far.
    pub(crate) migrations: u64,
}

impl CpuTracker {
    /// The migration that comes before `e`, if its CPU is not the previous event's.
    pub(crate) fn migration_before(&mut self, e: &XrayEvent) -> Option<XrayEvent> {
        let from = self.prev.replace(e.cpu)?;
        if from == e.cpu || matches!(e.kind, XrayEventKind::CpuMigration { .. }) {
            return None;
        }
        self.migrations += 1;
        Some(XrayEvent {
            tsc: e.tsc,
            cpu: e.cpu,
            pid: e.pid,
            tid: e.tid,
            kind: XrayEventKind::CpuMigration { from, to: e.cpu },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(tsc: u64, cpu: u16, kind: XrayEventKind) -> XrayEvent {
        XrayEvent {
            tsc,
            cpu,
            pid: Some(1),
            tid: 2,
            kind,
        }
    }

    #[test]
    fn migrations_are_inserted_where_the_cpu_changes() {
        let mut events = vec![
            ev(1, 0, XrayEventKind::Enter { func_id: 1 }),
            ev(2, 0, XrayEventKind::Exit { func_id: 1 }),
            ev(3, 5, XrayEventKind::Enter { func_id: 2 }),
            ev(4, 5, XrayEventKind::Exit { func_id: 2 }),
            ev(5, 1, XrayEventKind::CustomEvent { data: vec![1] }),
        ];
        assert_eq!(insert_cpu_migrations(&mut events), 2);
        let kinds: Vec<_> = events.iter().map(|e| (e.tsc, e.kind.clone())).collect();
        assert_eq!(
            kinds[2],
            (3, XrayEventKind::CpuMigration { from: 0, to: 5 })
        );
        assert_eq!(
            kinds[5],
            (5, XrayEventKind::CpuMigration { from: 5, to: 1 })
        );
        assert_eq!(events.len(), 7);
        assert_eq!(XrayEventKind::TailExit { func_id: 9 }.func_id(), Some(9));
        assert_eq!(
            XrayEventKind::CpuMigration { from: 0, to: 1 }.func_id(),
            None
        );
    }
}
