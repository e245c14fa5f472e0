//! The typed events a capture session delivers, in timestamp order. Every `time` is in TSC
//! ticks (the trace's clock). A later step turns them into FXT records: [`SwitchEvent`] →
//! Context Switch (type 8), [`WakeupEvent`] → Thread Wakeup (type 8, scheduling type 2),
//! [`BranchSample`] → LAST_BRANCH blob, [`ThreadInfo`] → Thread +
//! Kernel Object records, [`MemoryMap`] → an `"fxtrace:mmap"` blob ([`crate::format::mmap`]),
//! [`Lost`] / [`Unsupported`] → trace metadata and the summary.

use std::sync::Arc;

use super::lbr::BranchEntry;
use super::state::LinuxThreadState;

/// Which sides of a [`SwitchEvent`] are known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SwitchSides {
    /// Both (system-wide sources).
    Both,
    /// Only the outgoing thread (per-process capture: the incoming task is outside the traced
    /// process; `next_tid` / `next_pid` are 0).
    OutgoingOnly,
    /// Only the incoming thread (per-process capture: `prev_tid` / `prev_pid` are 0 and
    /// `prev_state` says nothing).
    IncomingOnly,
}

/// A CPU switched from one thread to another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SwitchEvent {
    /// TSC ticks.
    pub time: u64,
    /// The CPU.
    pub cpu: u32,
    /// Outgoing thread id (0: the idle task, or unknown per [`SwitchSides`]).
    pub prev_tid: u32,
    /// Outgoing process id; `None` if it could not be resolved (thread gone before lookup).
    pub prev_pid: Option<u32>,
    /// Incoming thread id.
    pub next_tid: u32,
    /// Incoming process id.
    pub next_pid: Option<u32>,
    /// Outgoing thread's new state (see [`super::state`]).
    pub prev_state: LinuxThreadState,
    /// The outgoing thread went to sleep uninterruptibly (Linux `D`; `prev_state` is then
    /// blocked). Only `sched_switch` tells; switch records never set it.
    pub uninterruptible: bool,
    /// The outgoing thread's wait point: the id of the call chain where it blocked (a
    /// [`StackInfo`] announced before), when wait points are captured.
    pub stack: Option<u32>,
    /// Outgoing priority, FXT encoding ([`super::state::fxt_priority`]; 255 unknown).
    pub prev_prio: u8,
    /// Incoming priority, FXT encoding.
    pub next_prio: u8,
    /// Which sides are known.
    pub sides: SwitchSides,
}

/// A thread was made runnable (`sched:sched_waking`, or `sched:sched_wakeup` on kernels
/// without it): who woke whom.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WakeupEvent {
    /// TSC ticks.
    pub time: u64,
    /// The CPU the wake-up ran on (the waker's).
    pub cpu: u32,
    /// The CPU the woken thread was queued on.
    pub target_cpu: u32,
    /// The woken thread.
    pub tid: u32,
    /// Its process; `None` until resolved (see `capture::pids`).
    pub pid: Option<u32>,
    /// Its priority, FXT encoding ([`super::state::fxt_priority`]).
    pub prio: u8,
    /// The thread that woke it: the task running where the tracepoint fired (for a wake-up
    /// from an interrupt, the task it interrupted; 0 when that is the idle task).
    pub waker_tid: u32,
    /// The waker's process, when the kernel could say.
    pub waker_pid: Option<u32>,
}

/// A CPU sample: where a thread was when the `cpu-clock` sampling timer fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuSample {
    /// TSC ticks.
    pub time: u64,
    /// The CPU.
    pub cpu: u32,
    /// The process, when the kernel could say.
    pub pid: Option<u32>,
    /// The thread (0: the idle task).
    pub tid: u32,
    /// The instruction pointer.
    pub ip: u64,
    /// The call chain's id (a [`StackInfo`] announced before), `None` when it could not be
    /// interned (counted).
    pub stack: Option<u32>,
}

/// A call chain seen for the first time, announced before the first event that refers to
/// it by `id` (see `capture::stacks`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackInfo {
    /// Its id (≥ 1).
    pub id: u32,
    /// How many of `frames` (the first) are kernel frames.
    pub kernel_frames: u16,
    /// Instruction pointers, innermost first: kernel, then user.
    pub frames: Arc<[u64]>,
}

/// A kernel symbol one of the announced stacks has a frame in (from `/proc/kallsyms`),
/// announced before that stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelSymbol {
    /// Its address.
    pub start: u64,
    /// Bytes up to the next symbol.
    pub len: u64,
    /// Its name (`name [module]` for a module's).
    pub name: Arc<str>,
}

/// A thread got a new name (`PERF_RECORD_COMM`: `prctl(PR_SET_NAME)`, `exec`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskComm {
    /// TSC ticks.
    pub time: u64,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// The new name.
    pub name: String,
    /// The rename came from `exec`.
    pub exec: bool,
}

/// A task was created (`PERF_RECORD_FORK`: a new process or thread).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskFork {
    /// TSC ticks.
    pub time: u64,
    /// New task's process id.
    pub pid: u32,
    /// Parent's process id.
    pub ppid: u32,
    /// New task's thread id.
    pub tid: u32,
    /// Parent's thread id.
    pub ptid: u32,
}

/// A task exited (`PERF_RECORD_EXIT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskExit {
    /// TSC ticks.
    pub time: u64,
    /// Process id.
    pub pid: u32,
    /// Parent's process id.
    pub ppid: u32,
    /// Thread id.
    pub tid: u32,
    /// Parent's thread id.
    pub ptid: u32,
}

/// An executable memory mapping of a process: from a `PERF_RECORD_MMAP2` during the capture,
/// or read from `/proc/PID/maps` when the capture started (as `perf record` synthesizes them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryMap {
    /// TSC ticks (the capture's start for mappings read from `/proc`).
    pub time: u64,
    /// Process id.
    pub pid: u32,
    /// Thread id that mapped it (the process id for mappings read from `/proc`).
    pub tid: u32,
    /// First mapped address.
    pub start: u64,
    /// Mapped bytes.
    pub len: u64,
    /// File offset of `start`.
    pub pgoff: u64,
    /// The file's path, or a name like `[vdso]` / `//anon` for mappings without one.
    pub path: Vec<u8>,
    /// The file's ELF build-id, when known (from the kernel, or read from the file).
    pub build_id: Option<Vec<u8>>,
    /// Read from `/proc` at the start (else reported by the kernel during the capture).
    pub synthesized: bool,
}

/// What the kernel dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LostKind {
    /// `PERF_RECORD_LOST`: records dropped because the ring was full.
    Records,
    /// `PERF_RECORD_LOST_SAMPLES`: samples dropped before reaching the ring.
    Samples,
}

/// The kernel reported dropped data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lost {
    /// TSC ticks of the report.
    pub time: u64,
    /// The CPU whose ring reported it.
    pub cpu: u32,
    /// What was dropped.
    pub kind: LostKind,
    /// How many.
    pub count: u64,
}

/// One LBR sample: the last branches a thread took before the sampling interrupt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BranchSample {
    /// TSC ticks.
    pub time: u64,
    /// The CPU.
    pub cpu: u32,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Instruction pointer at the interrupt.
    pub ip: u64,
    /// The hardware LBR index (`PERF_SAMPLE_BRANCH_HW_INDEX` only).
    pub hw_idx: Option<u64>,
    /// Branches, newest first.
    pub entries: Vec<BranchEntry>,
}

/// A thread seen for the first time in this session, announced before the first event that
/// names it, so it can be registered (FXT Thread record) and named (Kernel Object records).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadInfo {
    /// TSC ticks of the event that first named it.
    pub time: u64,
    /// Thread id.
    pub tid: u32,
    /// Process id, if known.
    pub pid: Option<u32>,
    /// Thread name.
    pub name: Option<String>,
    /// Process name (the main thread's name).
    pub process_name: Option<String>,
}

/// A capture source that could not be used; reported once, capture of everything else goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported {
    /// What is missing ("LBR branch-stack sampling (cpu-cycles)").
    pub what: String,
    /// The errno that said so, if a syscall did.
    pub errno: Option<i32>,
    /// Why, and what to do about it: the whole text (the trace keeps it once).
    pub hint: String,
    /// The cause and what to do in one short line: what a terminal shows, and what a trace's
    /// record of it says first (the same as `hint` when that is short already).
    pub summary: String,
}

/// One event of a capture session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaptureEvent {
    /// A context switch.
    ContextSwitch(SwitchEvent),
    /// A wake-up.
    Wakeup(WakeupEvent),
    /// A CPU sample.
    Sample(CpuSample),
    /// A call chain seen for the first time.
    Stack(StackInfo),
    /// A kernel symbol a stack's frame falls in.
    KernelSymbol(KernelSymbol),
    /// A thread rename.
    Comm(TaskComm),
    /// A task creation.
    Fork(TaskFork),
    /// A task exit.
    Exit(TaskExit),
    /// An executable mapping.
    Mmap(MemoryMap),
    /// Data dropped by the kernel.
    Lost(Lost),
    /// An LBR sample.
    Branch(BranchSample),
    /// A thread seen for the first time.
    Thread(ThreadInfo),
    /// A source that is not available (delivered once, before any other event).
    Unsupported(Unsupported),
}

impl CaptureEvent {
    /// The event's time in TSC ticks (`None` for [`CaptureEvent::Unsupported`] and the
    /// definitions [`CaptureEvent::Stack`], [`CaptureEvent::KernelSymbol`]).
    pub fn time(&self) -> Option<u64> {
        Some(match self {
            Self::ContextSwitch(e) => e.time,
            Self::Wakeup(e) => e.time,
            Self::Sample(e) => e.time,
            Self::Comm(e) => e.time,
            Self::Fork(e) => e.time,
            Self::Exit(e) => e.time,
            Self::Mmap(e) => e.time,
            Self::Lost(e) => e.time,
            Self::Branch(e) => e.time,
            Self::Thread(e) => e.time,
            Self::Unsupported(_) | Self::Stack(_) | Self::KernelSymbol(_) => return None,
        })
    }
}
