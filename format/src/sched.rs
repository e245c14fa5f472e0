//! fxtrace's conventions on FXT scheduling records (record type 8), and one view of a context
//! switch or a wake-up whatever its layout ([`SwitchView`], [`WakeupView`]): what a reader of
//! `fxtrace record --system-wide` needs to follow threads on and off the CPUs.
//!
//! # Layouts fxtrace writes
//!
//! - A context switch is a legacy context switch (scheduling type 0, two words when both
//!   threads are indexed) unless it carries something that layout has no room for. Then it is
//!   a *context switch by tid* (scheduling type 1) with arguments:
//!   - [`INCOMING_WEIGHT_ARG`] (`i32`): the incoming thread's priority, or [`IDLE_WEIGHT`]
//!     for the idle task, always; [`OUTGOING_WEIGHT_ARG`] only for an idle outgoing side.
//!     Perfetto's importer reads only these, and takes a side as idle by that weight;
//!   - [`LINUX_STATE_ARG`] (a string, `"D"`): the outgoing thread slept uninterruptibly. FXT
//!     has no such state: it is blocked (3), which Perfetto shows as `S`;
//!   - [`STACK_ARG`] (`u32`): the id of the kernel (and user) call chain where the outgoing
//!     thread blocked, its *wait point*, defined by an `"fxtrace:stack"` blob before it
//!     ([`super::stack`]);
//!   - the CPU above 255 (the legacy layout has 8 bits for it).
//!
//!   Readers that do not know an argument skip it, as the format says.
//! - A wake-up is a *thread wakeup* (scheduling type 2): the CPU the woken thread was queued
//!   on, its tid, and a [`WAKER_ARG`] koid argument, the thread that woke it (the task running
//!   where `sched_waking` fired: for a wake-up from an interrupt, the task it interrupted, as
//!   `perf sched` reports it). Perfetto reads it into `thread_state.waker_utid`.
//!
//! # Threads that are not threads
//!
//! Thread id 0 is the idle task (process 0). A side of a switch that the source does not know
//! (a per-process capture sees only its own threads) is thread 0 of process
//! [`UNKNOWN_PROCESS_KOID`]: Perfetto, which takes a thread's process only from Kernel Object
//! records, treats it as idle (nothing runs there that the trace can name), and fxtrace's
//! readers show it as unknown ([`Side::Unknown`]) rather than as a thread 0.

use super::decoded::{DecodedArg, DecodedRecord, DecodedValue, Thread, Timestamp};
use super::types::ThreadState;

/// Argument of a thread wakeup: the koid of the thread that woke it.
pub const WAKER_ARG: &str = "waker";
/// Argument of a thread wakeup: the woken thread's weight (`i32`; fxtrace does not write it).
pub const WEIGHT_ARG: &str = "weight";
/// Argument of a context switch by tid: the incoming thread's weight (`i32`).
pub const INCOMING_WEIGHT_ARG: &str = "incoming_weight";
/// Argument of a context switch by tid: the outgoing thread's weight (`i32`).
pub const OUTGOING_WEIGHT_ARG: &str = "outgoing_weight";
/// The weight of the idle task (Perfetto's `kIdleWeight`).
pub const IDLE_WEIGHT: i32 = i32::MIN;
/// Argument of a context switch by tid: the outgoing thread's Linux state when FXT's states
/// do not say it (`"D"`).
pub const LINUX_STATE_ARG: &str = "linux_state";
/// The [`LINUX_STATE_ARG`] value of an uninterruptible sleep.
pub const UNINTERRUPTIBLE: &str = "D";
/// Argument of a context switch by tid: the id of the outgoing thread's wait point
/// (`u32`, an `"fxtrace:stack"` blob's id).
pub const STACK_ARG: &str = "stack";
/// The process koid of threads whose process is unknown, and with thread 0, of a switch side
/// the source does not know (perf's `-1` for a pid it cannot resolve; no Linux pid reaches
/// it).
pub const UNKNOWN_PROCESS_KOID: u64 = 0xffff_ffff;

/// One side of a context switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// A thread (its process when the record names it: the legacy layout does).
    Thread {
        /// Process koid, when the record gives it.
        pid: Option<u64>,
        /// Thread koid.
        tid: u64,
    },
    /// The idle task.
    Idle,
    /// A thread the source did not know (outside the traced process).
    Unknown,
}

impl Side {
    /// The side of a legacy switch naming `thread`.
    pub fn of_thread(thread: Thread) -> Self {
        match (thread.pid, thread.tid) {
            (0, 0) => Side::Idle,
            (UNKNOWN_PROCESS_KOID, 0) => Side::Unknown,
            (pid, tid) => Side::Thread {
                pid: Some(pid),
                tid,
            },
        }
    }

    /// The side of a context switch by tid: `tid`, idle at tid 0 or at [`IDLE_WEIGHT`].
    pub fn of_tid(tid: u64, weight: Option<i32>) -> Self {
        if tid == 0 || weight == Some(IDLE_WEIGHT) {
            Side::Idle
        } else {
            Side::Thread { pid: None, tid }
        }
    }

    /// The thread's tid, if the side is a thread.
    pub fn tid(&self) -> Option<u64> {
        match self {
            Side::Thread { tid, .. } => Some(*tid),
            Side::Idle | Side::Unknown => None,
        }
    }
}

/// A context switch of either layout, with fxtrace's arguments read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SwitchView {
    /// When.
    pub time: Timestamp,
    /// The CPU.
    pub cpu: u16,
    /// The thread switched out.
    pub outgoing: Side,
    /// The thread switched in.
    pub incoming: Side,
    /// The outgoing thread's state (a [`ThreadState`] number).
    pub outgoing_state: u8,
    /// The outgoing thread slept uninterruptibly (Linux `D`).
    pub uninterruptible: bool,
    /// The id of the outgoing thread's wait point.
    pub stack: Option<u32>,
}

impl SwitchView {
    /// The switch in `record`, if it is one.
    pub fn of(record: &DecodedRecord<'_>) -> Option<Self> {
        match record {
            DecodedRecord::ContextSwitch {
                time,
                cpu,
                outgoing_state,
                outgoing,
                incoming,
                ..
            } => Some(SwitchView {
                time: *time,
                cpu: u16::from(*cpu),
                outgoing: Side::of_thread(*outgoing),
                incoming: Side::of_thread(*incoming),
                outgoing_state: *outgoing_state,
                uninterruptible: false,
                stack: None,
            }),
            DecodedRecord::SchedContextSwitch {
                time,
                cpu,
                outgoing_state,
                outgoing_tid,
                incoming_tid,
                args,
            } => Some(SwitchView {
                time: *time,
                cpu: *cpu,
                outgoing: Side::of_tid(*outgoing_tid, i32_arg(args, OUTGOING_WEIGHT_ARG)),
                incoming: Side::of_tid(*incoming_tid, i32_arg(args, INCOMING_WEIGHT_ARG)),
                outgoing_state: *outgoing_state,
                uninterruptible: args.iter().any(|a| {
                    a.name == LINUX_STATE_ARG
                        && matches!(&a.value, DecodedValue::Str(s) if s == UNINTERRUPTIBLE)
                }),
                stack: args
                    .iter()
                    .find(|a| a.name == STACK_ARG)
                    .and_then(|a| match a.value {
                        DecodedValue::U32(id) => Some(id),
                        _ => None,
                    }),
            }),
            _ => None,
        }
    }

    /// The outgoing thread blocked (slept), as opposed to being preempted or exiting.
    pub fn blocked(&self) -> bool {
        self.outgoing_state == ThreadState::Blocked as u8
    }
}

/// A thread wakeup with fxtrace's arguments read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WakeupView {
    /// When.
    pub time: Timestamp,
    /// The CPU the woken thread was queued on.
    pub cpu: u16,
    /// The woken thread.
    pub tid: u64,
    /// The thread that woke it, when the record says.
    pub waker: Option<u64>,
}

impl WakeupView {
    /// The wakeup in `record`, if it is one.
    pub fn of(record: &DecodedRecord<'_>) -> Option<Self> {
        match record {
            DecodedRecord::SchedThreadWakeup {
                time,
                cpu,
                waking_tid,
                args,
            } => Some(WakeupView {
                time: *time,
                cpu: *cpu,
                tid: *waking_tid,
                waker: args
                    .iter()
                    .find(|a| a.name == WAKER_ARG)
                    .and_then(|a| match a.value {
                        DecodedValue::Koid(k) => Some(k),
                        _ => None,
                    }),
            }),
            _ => None,
        }
    }
}

fn i32_arg(args: &[DecodedArg<'_>], name: &str) -> Option<i32> {
    args.iter()
        .find(|a| a.name == name)
        .and_then(|a| match a.value {
            DecodedValue::I32(v) => Some(v),
            _ => None,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    fn ts(ns: u64) -> Timestamp {
        Timestamp { ticks: ns, ns }
    }

    fn arg<'a>(name: &'a str, value: DecodedValue<'a>) -> DecodedArg<'a> {
        DecodedArg {
            name: Cow::Borrowed(name),
            value,
        }
    }

    #[test]
    fn legacy_sides_idle_unknown_and_threads() {
        let record = DecodedRecord::ContextSwitch {
            time: ts(5),
            cpu: 1,
            outgoing_state: 3,
            outgoing: Thread { pid: 10, tid: 11 },
            incoming: Thread {
                pid: UNKNOWN_PROCESS_KOID,
                tid: 0,
            },
            outgoing_priority: 120,
            incoming_priority: 0,
        };
        let v = SwitchView::of(&record).unwrap();
        assert_eq!(
            v.outgoing,
            Side::Thread {
                pid: Some(10),
                tid: 11
            }
        );
        assert_eq!(v.incoming, Side::Unknown);
        assert!(v.blocked() && !v.uninterruptible && v.stack.is_none());
        assert_eq!(Side::of_thread(Thread::default()), Side::Idle);
        assert_eq!(v.incoming.tid(), None);
    }

    #[test]
    fn by_tid_reads_fxtraces_arguments() {
        let args = vec![
            arg(INCOMING_WEIGHT_ARG, DecodedValue::I32(IDLE_WEIGHT)),
            arg(LINUX_STATE_ARG, DecodedValue::Str(Cow::Borrowed("D"))),
            arg(STACK_ARG, DecodedValue::U32(7)),
        ];
        let record = DecodedRecord::SchedContextSwitch {
            time: ts(9),
            cpu: 300,
            outgoing_state: 3,
            outgoing_tid: 42,
            incoming_tid: 0,
            args: args.into(),
        };
        let v = SwitchView::of(&record).unwrap();
        assert_eq!(v.cpu, 300);
        assert_eq!(v.outgoing, Side::Thread { pid: None, tid: 42 });
        assert_eq!(v.incoming, Side::Idle);
        assert!(v.uninterruptible);
        assert_eq!(v.stack, Some(7));
        let wake = DecodedRecord::SchedThreadWakeup {
            time: ts(3),
            cpu: 1,
            waking_tid: 42,
            args: vec![arg(WAKER_ARG, DecodedValue::Koid(43))].into(),
        };
        assert_eq!(
            WakeupView::of(&wake),
            Some(WakeupView {
                time: ts(3),
                cpu: 1,
                tid: 42,
                waker: Some(43)
            })
        );
        assert_eq!(WakeupView::of(&record), None);
        assert_eq!(SwitchView::of(&wake), None);
    }
}
