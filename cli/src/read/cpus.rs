//! The per-CPU switch state: which thread runs on each CPU since when, from the context
//! switches read so far (either layout, [`Switch::of`], read as `fxtrace_format::sched` says
//! fxtrace writes them). A switch ends the slice of the thread that was running ([`Ran`]) and
//! starts the incoming one's.

use std::collections::BTreeMap;

use fxtrace_format::sched::{Side, SwitchView};
use fxtrace_format::{Decoded, DecodedArg, DecodedRecord, ThreadState};

/// A wait point: the provider section of the switch that names it, and its stack id there
/// (stack ids are a writer's own: `report::stacks::StackKey`).
pub type WaitPoint = (u32, u32);

/// A context switch of either layout.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Switch<'r> {
    /// When, ns.
    pub ns: u64,
    /// The CPU.
    pub cpu: u16,
    /// The thread switched out (0: idle, or a thread the source did not know).
    pub outgoing_tid: u64,
    /// Its process, when the record says (the legacy layout does).
    pub outgoing_pid: Option<u64>,
    /// The outgoing thread's state (a [`ThreadState`] number).
    pub outgoing_state: u8,
    /// The thread switched in (0: idle, or a thread the source did not know).
    pub incoming_tid: u64,
    /// Its process, when the record says.
    pub incoming_pid: Option<u64>,
    /// The incoming thread's priority, when the record says.
    pub incoming_priority: Option<u8>,
    /// The switch's arguments (the layout by tid has them).
    pub args: &'r [DecodedArg<'r>],
    /// The outgoing thread slept uninterruptibly (Linux `D`).
    pub uninterruptible: bool,
    /// The outgoing thread's wait point, when the switch names one.
    pub wait_point: Option<WaitPoint>,
}

fn side(side: Side) -> (u64, Option<u64>) {
    match side {
        Side::Thread { pid, tid } => (tid, pid),
        Side::Idle | Side::Unknown => (0, None),
    }
}

impl<'r> Switch<'r> {
    /// The switch in `d`, if it is one.
    pub fn of(d: &'r Decoded<'r>) -> Option<Switch<'r>> {
        let view = SwitchView::of(&d.record)?;
        let (outgoing_tid, outgoing_pid) = side(view.outgoing);
        let (incoming_tid, incoming_pid) = side(view.incoming);
        let (incoming_priority, args): (Option<u8>, &[DecodedArg<'_>]) = match &d.record {
            DecodedRecord::ContextSwitch {
                incoming_priority, ..
            } => (Some(*incoming_priority), &[]),
            DecodedRecord::SchedContextSwitch { args, .. } => (None, args),
            _ => (None, &[]),
        };
        Some(Switch {
            ns: view.time.ns,
            cpu: view.cpu,
            outgoing_tid,
            outgoing_pid,
            outgoing_state: view.outgoing_state,
            incoming_tid,
            incoming_pid,
            incoming_priority,
            args,
            uninterruptible: view.uninterruptible,
            wait_point: view.stack.map(|id| (d.provider.unwrap_or(0), id)),
        })
    }

    /// Why the outgoing thread left the CPU (`suspended` read as stopped: see
    /// [`OffCpu::of`]).
    pub fn off_cpu(&self, suspended_is_stopped: bool) -> OffCpu {
        OffCpu::of(
            self.outgoing_state,
            self.uninterruptible,
            suspended_is_stopped,
        )
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
    /// The state a switch out gives (fxtrace's conventions, `fxtrace_format::sched`): FXT
    /// `running` is runnable (a preempted thread), `blocked` asleep (uninterruptibly when the
    /// switch says `linux_state = "D"`), `suspended` stopped. Traces written before fxtrace
    /// wrote preempted threads as running used `suspended` for them: a reader takes
    /// `suspended` as stopped only once it has seen a thread switched out `running`
    /// (`suspended_is_stopped`).
    pub fn of(state: u8, uninterruptible: bool, suspended_is_stopped: bool) -> OffCpu {
        match ThreadState::from_raw(state) {
            Some(ThreadState::New | ThreadState::Running) => OffCpu::Runnable,
            Some(ThreadState::Suspended) if suspended_is_stopped => OffCpu::Stopped,
            Some(ThreadState::Suspended) => OffCpu::Runnable,
            Some(ThreadState::Dying | ThreadState::Dead) => OffCpu::Exited,
            Some(ThreadState::Blocked) | None if uninterruptible => OffCpu::Uninterruptible,
            Some(ThreadState::Blocked) | None => OffCpu::Sleeping,
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
