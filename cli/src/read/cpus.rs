//! The per-CPU switch state: which thread runs on each CPU since when, from the context
//! switches read so far (either layout, [`Switch::of`]). A switch ends the slice of the thread
//! that was running ([`Ran`]) and starts the incoming one's.

use std::collections::BTreeMap;

use fxtrace_format::{DecodedArg, DecodedRecord, DecodedValue, ThreadState};

/// Argument of a context switch by tid: the outgoing thread's Linux state when FXT's states
/// do not say it (`"D"`: an uninterruptible sleep).
pub const LINUX_STATE_ARG: &str = "linux_state";
/// Argument of a context switch by tid: the id of the outgoing thread's wait point.
pub const STACK_ARG: &str = "stack";

/// A context switch of either layout.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Switch<'r> {
    /// When, ns.
    pub ns: u64,
    /// The CPU.
    pub cpu: u16,
    /// The thread switched out (0: idle).
    pub outgoing_tid: u64,
    /// Its process, when the record says (the legacy layout does).
    pub outgoing_pid: Option<u64>,
    /// The outgoing thread's state (a [`ThreadState`] number).
    pub outgoing_state: u8,
    /// The thread switched in (0: idle).
    pub incoming_tid: u64,
    /// Its process, when the record says.
    pub incoming_pid: Option<u64>,
    /// The incoming thread's priority, when the record says.
    pub incoming_priority: Option<u8>,
    /// The switch's arguments (the layout by tid has them).
    pub args: &'r [DecodedArg<'r>],
}

impl<'r> Switch<'r> {
    /// The switch in `record`, if it is one.
    pub fn of(record: &'r DecodedRecord<'r>) -> Option<Switch<'r>> {
        match record {
            DecodedRecord::ContextSwitch {
                time,
                cpu,
                outgoing_state,
                outgoing,
                incoming,
                incoming_priority,
                ..
            } => Some(Switch {
                ns: time.ns,
                cpu: u16::from(*cpu),
                outgoing_tid: outgoing.tid,
                outgoing_pid: Some(outgoing.pid),
                outgoing_state: *outgoing_state,
                incoming_tid: incoming.tid,
                incoming_pid: Some(incoming.pid),
                incoming_priority: Some(*incoming_priority),
                args: &[],
            }),
            DecodedRecord::SchedContextSwitch {
                time,
                cpu,
                outgoing_state,
                outgoing_tid,
                incoming_tid,
                args,
            } => Some(Switch {
                ns: time.ns,
                cpu: *cpu,
                outgoing_tid: *outgoing_tid,
                outgoing_pid: None,
                outgoing_state: *outgoing_state,
                incoming_tid: *incoming_tid,
                incoming_pid: None,
                incoming_priority: None,
                args,
            }),
            _ => None,
        }
    }

    /// Why the outgoing thread left the CPU.
    pub fn off_cpu(&self) -> OffCpu {
        OffCpu::of(self.outgoing_state, self.args)
    }

    /// The id of the outgoing thread's wait point, when the switch names one.
    pub fn stack(&self) -> Option<u32> {
        self.args
            .iter()
            .find(|a| a.name == STACK_ARG)
            .and_then(|a| match a.value {
                DecodedValue::U32(id) => Some(id),
                _ => None,
            })
    }
}

/// Why a thread left its CPU, from the state its switch out gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OffCpu {
    /// Still runnable: preempted, or it yielded (waits on a run queue).
    Runnable,
    /// Blocked: sleeping until something wakes it (Linux `S`).
    Sleeping,
    /// Blocked uninterruptibly (Linux `D`: disk, page faults, some locks).
    Uninterruptible,
    /// Stopped by a signal or a tracer.
    Stopped,
    /// Exiting or gone.
    Exited,
}

impl OffCpu {
    /// The state a switch out gives: FXT `running` (fxtrace writes a preempted thread so)
    /// and `suspended` (earlier fxtrace traces wrote it so) are runnable; `blocked` is asleep,
    /// uninterruptibly when the switch says `linux_state = "D"`.
    pub fn of(state: u8, args: &[DecodedArg<'_>]) -> OffCpu {
        match ThreadState::from_raw(state) {
            Some(ThreadState::New | ThreadState::Running | ThreadState::Suspended) => {
                OffCpu::Runnable
            }
            Some(ThreadState::Dying | ThreadState::Dead) => OffCpu::Exited,
            Some(ThreadState::Blocked) | None => {
                let d = args.iter().any(|a| {
                    a.name == LINUX_STATE_ARG
                        && matches!(&a.value, DecodedValue::Str(s) if s == "D")
                });
                if d {
                    OffCpu::Uninterruptible
                } else {
                    OffCpu::Sleeping
                }
            }
        }
    }

    /// How a report names it.
    pub fn name(self) -> &'static str {
        match self {
            OffCpu::Runnable => "runnable",
            OffCpu::Sleeping => "sleeping",
            OffCpu::Uninterruptible => "D",
            OffCpu::Stopped => "stopped",
            OffCpu::Exited => "exited",
        }
    }
}

/// A thread running on a CPU since a switch, with what the reader keeps of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Running<T> {
    /// Thread id.
    pub tid: u64,
    /// Process id, when known.
    pub pid: Option<u64>,
    /// Since when, ns.
    pub since_ns: u64,
    /// The reader's own data.
    pub data: T,
}

/// A thread's time on a CPU, ended by a switch (or the end of the trace).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ran<T> {
    /// The CPU.
    pub cpu: u16,
    /// The thread and since when.
    pub running: Running<T>,
    /// Until when, ns.
    pub until_ns: u64,
    /// The state it left in (`None`: the trace ended first).
    pub end_state: Option<u8>,
    /// The switch that ended it named another outgoing thread: a switch is missing between.
    pub mismatch: bool,
}

/// What runs on each CPU. CPU numbers are 16 bits: at most 65 536 entries.
#[derive(Debug)]
pub struct Cpus<T> {
    cpus: BTreeMap<u16, Option<Running<T>>>,
}

impl<T> Default for Cpus<T> {
    fn default() -> Self {
        Cpus {
            cpus: BTreeMap::new(),
        }
    }
}

impl<T> Cpus<T> {
    /// No CPU seen.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether a switch on `cpu` was seen.
    pub fn known(&self, cpu: u16) -> bool {
        self.cpus.contains_key(&cpu)
    }

    /// CPUs seen.
    pub fn len(&self) -> usize {
        self.cpus.len()
    }

    /// No CPU seen.
    pub fn is_empty(&self) -> bool {
        self.cpus.is_empty()
    }

    /// CPUs with a thread running.
    pub fn running_count(&self) -> usize {
        self.cpus.values().filter(|r| r.is_some()).count()
    }

    /// The thread running on `cpu`.
    pub fn running(&self, cpu: u16) -> Option<&Running<T>> {
        self.cpus.get(&cpu)?.as_ref()
    }

    /// A switch on `cpu` at `ns`: `outgoing_tid` leaves in `outgoing_state`, `incoming` (none:
    /// idle) runs from now. Returns the slice it ended, if a thread was running.
    pub fn switch(
        &mut self,
        cpu: u16,
        ns: u64,
        outgoing_tid: u64,
        outgoing_state: u8,
        incoming: Option<Running<T>>,
    ) -> Option<Ran<T>> {
        let slot = self.cpus.entry(cpu).or_insert(None);
        let ended = slot.take().map(|running| Ran {
            cpu,
            mismatch: running.tid != outgoing_tid,
            running,
            until_ns: ns,
            end_state: Some(outgoing_state),
        });
        *slot = incoming;
        ended
    }

    /// The trace ended at `end_ns`: the slices of the threads still running, by CPU.
    pub fn finish(&mut self, end_ns: u64) -> Vec<Ran<T>> {
        self.cpus
            .iter_mut()
            .filter_map(|(&cpu, slot)| {
                slot.take().map(|running| Ran {
                    cpu,
                    running,
                    until_ns: end_ns,
                    end_state: None,
                    mismatch: false,
                })
            })
            .collect()
    }
}
