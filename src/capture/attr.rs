//! A builder over the kernel's `perf_event_attr`, one constructor per event fxtrace opens.
//!
//! The bindgen struct from `perf-event-open-sys` stays private: it is built with `Default` and
//! then assigned field by field (never a struct literal, so regenerated bindings with new fields
//! still compile), and callers see only [`EventAttr`], [`SampleFormat`] and
//! [`BranchSampleFormat`].
//!
//! | constructor | type / config | records it produces |
//! |---|---|---|
//! | [`EventAttr::process_switches`] | software `DUMMY`, `context_switch`, `inherit` | `SWITCH` for the target's threads, `FORK`/`EXIT`/`COMM` |
//! | [`EventAttr::sched_switch_tracepoint`] | tracepoint `sched:sched_switch`, period 1 | one `SAMPLE` (raw data) per switch on the CPU, `FORK`/`EXIT`/`COMM` |
//! | [`EventAttr::cpu_wide_switches`] | software `DUMMY`, `context_switch` | `SWITCH_CPU_WIDE` for every switch on the CPU, `FORK`/`EXIT`/`COMM` |
//! | [`EventAttr::sched_waking_tracepoint`] | tracepoint `sched:sched_waking` (or `sched_wakeup`), period 1 | one `SAMPLE` (raw data) per wake-up |
//! | [`EventAttr::cpu_clock_sampling`] | software `CPU_CLOCK`, frequency N Hz | `SAMPLE` with IP and the call chain |
//! | [`EventAttr::branch_sampling`] | hardware `CPU_CYCLES`, period N | `SAMPLE` with IP and the LBR branch stack |
//! | [`EventAttr::clock_probe`] | software `DUMMY` | none: only its mmap page is read (clock parameters) |
//!
//! Every event is opened disabled and enabled once its ring is mapped; every event carries
//! `sample_id_all` with `TID | TIME | CPU` so side-band records are timestamped too.
//! [`EventAttr::with_mmaps`] adds `mmap = 1, mmap2 = 1` (`PERF_RECORD_MMAP2` for every new
//! executable mapping) to the event that carries the task/comm side band.
//! [`EventAttr::with_callchain`] adds `PERF_SAMPLE_CALLCHAIN` (the call chain at each sample:
//! kernel frames, then user frames walked by frame pointers) to a sampling event.
//! [`EventAttr::with_identifier`] adds `PERF_SAMPLE_IDENTIFIER` to the events a process
//! capture opens per thread: each record then names the event that wrote it (for an inherited
//! event, the one fxtrace opened), which is how the capture tells the copies apart when a
//! thread ends up with two events of one kind ([`super::duplicates`]).
//!
//! Clock: by default events keep perf's own clock (`perf_clock()`, i.e. `sched_clock`, derived
//! from the TSC on x86), converted to TSC ticks with the mmap page's `time_zero/time_mult/
//! time_shift` ([`super::time`]). Only when the page does not offer that conversion are events
//! opened with `use_clockid = 1, clockid = CLOCK_MONOTONIC_RAW`, so the measured
//! `CLOCK_MONOTONIC_RAW` ↔ TSC mapping applies ([`PerfClock`]).

use std::fmt;
use std::mem::size_of;

use perf_event_open_sys::bindings as b;

use super::time::PerfClock;

bitflags::bitflags! {
    /// A set of `PERF_SAMPLE_*` bits (`perf_event_attr.sample_type`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct SampleFormat: u64 {
        /// `PERF_SAMPLE_IP`.
        const IP = b::PERF_SAMPLE_IP as u64;
        /// `PERF_SAMPLE_TID` (u32 pid, u32 tid).
        const TID = b::PERF_SAMPLE_TID as u64;
        /// `PERF_SAMPLE_TIME`.
        const TIME = b::PERF_SAMPLE_TIME as u64;
        /// `PERF_SAMPLE_ADDR`.
        const ADDR = b::PERF_SAMPLE_ADDR as u64;
        /// `PERF_SAMPLE_ID`.
        const ID = b::PERF_SAMPLE_ID as u64;
        /// `PERF_SAMPLE_STREAM_ID`.
        const STREAM_ID = b::PERF_SAMPLE_STREAM_ID as u64;
        /// `PERF_SAMPLE_CPU` (u32 cpu, u32 reserved).
        const CPU = b::PERF_SAMPLE_CPU as u64;
        /// `PERF_SAMPLE_PERIOD`.
        const PERIOD = b::PERF_SAMPLE_PERIOD as u64;
        /// `PERF_SAMPLE_CALLCHAIN`.
        const CALLCHAIN = b::PERF_SAMPLE_CALLCHAIN as u64;
        /// `PERF_SAMPLE_RAW` (u32 size, then tracepoint data).
        const RAW = b::PERF_SAMPLE_RAW as u64;
        /// `PERF_SAMPLE_BRANCH_STACK`.
        const BRANCH_STACK = b::PERF_SAMPLE_BRANCH_STACK as u64;
        /// `PERF_SAMPLE_IDENTIFIER`.
        const IDENTIFIER = b::PERF_SAMPLE_IDENTIFIER as u64;
        // Bits this crate does not name are kept as they are (`from_bits_retain`).
        const _ = !0;
    }
}

bitflags::bitflags! {
    /// A set of `PERF_SAMPLE_BRANCH_*` bits (`perf_event_attr.branch_sample_type`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct BranchSampleFormat: u64 {
        /// `PERF_SAMPLE_BRANCH_USER`: branches ending in user space.
        const USER = b::PERF_SAMPLE_BRANCH_USER as u64;
        /// `PERF_SAMPLE_BRANCH_KERNEL`: branches ending in the kernel.
        const KERNEL = b::PERF_SAMPLE_BRANCH_KERNEL as u64;
        /// `PERF_SAMPLE_BRANCH_ANY`: every branch type.
        const ANY = b::PERF_SAMPLE_BRANCH_ANY as u64;
        /// `PERF_SAMPLE_BRANCH_HW_INDEX`: a `u64 hw_idx` precedes the entries.
        const HW_INDEX = b::PERF_SAMPLE_BRANCH_HW_INDEX as u64;
        /// `PERF_SAMPLE_BRANCH_COUNTERS`: `u64 counters[nr]` follow the entries.
        const COUNTERS = b::PERF_SAMPLE_BRANCH_COUNTERS as u64;
        const _ = !0;
    }
}

// === impl EventAttr ===

/// Which of fxtrace's events an [`EventAttr`] describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PerfEventKind {
    /// Per-process context switches (`PERF_RECORD_SWITCH`), inherited by new threads.
    ProcessSwitches,
    /// System-wide `sched:sched_switch` tracepoint samples, one event per CPU.
    SchedSwitchTracepoint,
    /// System-wide `PERF_RECORD_SWITCH_CPU_WIDE` on a dummy event, one event per CPU.
    CpuWideSwitches,
    /// System-wide `sched:sched_waking` (or `sched_wakeup`) tracepoint samples.
    SchedWakingTracepoint,
    /// Sampling hardware event with the LBR branch stack.
    BranchSampling,
    /// Software `cpu-clock` sampling with call chains (CPU samples without a PMU).
    CpuClockSampling,
    /// A dummy event whose mmap page is only read for the clock parameters.
    ClockProbe,
}

/// Which branches an LBR sampling event records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BranchSampling {
    /// Sample every `period` CPU cycles.
    pub period: u64,
    /// Also record branches that end in the kernel (needs root, `CAP_PERFMON`, or
    /// `perf_event_paranoid <= 1`).
    pub include_kernel: bool,
}

impl Default for BranchSampling {
    /// A sample every 1 000 003 cycles (a prime, so samples do not lock step with loops), user
    /// branches only.
    fn default() -> Self {
        Self {
            period: 1_000_003,
            include_kernel: false,
        }
    }
}

/// A `perf_event_attr` for one of fxtrace's events (see the module table).
#[derive(Clone)]
pub struct EventAttr {
    raw: b::perf_event_attr,
    kind: PerfEventKind,
}

impl EventAttr {
    fn base(kind: PerfEventKind, clock: PerfClock) -> Self {
        let mut raw = b::perf_event_attr::default();
        raw.size = size_of::<b::perf_event_attr>() as u32;
        raw.set_disabled(1);
        // A `read` of the event then ends with the records its ring had no room for: the
        // losses of the last moments before the stop, which no `PERF_RECORD_LOST` reports
        // (the kernel writes one only before the next record that fits).
        raw.read_format = b::PERF_FORMAT_LOST as u64;
        if clock == PerfClock::MonotonicRaw {
            raw.set_use_clockid(1);
            raw.clockid = libc::CLOCK_MONOTONIC_RAW;
        }
        Self { raw, kind }
    }

    /// FORK/EXIT/COMM records (`task`, `comm`, `comm_exec`), timestamped (`sample_id_all`):
    /// the switch events have them; a process capture without switch events gives them to
    /// its sampling event (names, and the thread tree [`super::duplicates`] follows).
    pub fn with_side_band(mut self) -> Self {
        self.raw.set_sample_id_all(1);
        self.raw.set_task(1);
        self.raw.set_comm(1);
        self.raw.set_comm_exec(1);
        self
    }

    /// No FORK/EXIT/COMM records: for an event beside another that has them (the same
    /// tasks' records twice otherwise).
    pub fn without_side_band(mut self) -> Self {
        self.raw.set_task(0);
        self.raw.set_comm(0);
        self.raw.set_comm_exec(0);
        self
    }

    fn dummy(kind: PerfEventKind, clock: PerfClock) -> Self {
        let mut attr = Self::base(kind, clock);
        attr.raw.type_ = b::PERF_TYPE_SOFTWARE;
        attr.raw.config = u64::from(b::PERF_COUNT_SW_DUMMY);
        attr
    }

    /// Context switches of one process's threads: a software dummy event with
    /// `context_switch = 1`, `inherit = 1` (threads created later are followed), FORK/EXIT/COMM
    /// side-band records, and `sample_id_all` with `TID | TIME | CPU`. Open it per (thread, CPU);
    /// the kernel refuses to mmap inherited events opened with `cpu = -1`.
    pub fn process_switches(clock: PerfClock) -> Self {
        let mut attr = Self::dummy(PerfEventKind::ProcessSwitches, clock)
            .with_side_band()
            .with_inherit(true);
        attr.raw.set_context_switch(1);
        attr.raw.set_exclude_kernel(1);
        attr.raw.set_exclude_hv(1);
        attr.raw.sample_type = (SampleFormat::TID | SampleFormat::TIME | SampleFormat::CPU).bits();
        attr
    }

    /// Every context switch on one CPU from the `sched:sched_switch` tracepoint (`id` read from
    /// tracefs `events/sched/sched_switch/id`): a sample per switch (`sample_period = 1`) with
    /// `RAW | TID | TIME | CPU`, plus FORK/EXIT/COMM side-band records. Open with `pid = -1`.
    pub fn sched_switch_tracepoint(id: u64, clock: PerfClock) -> Self {
        let mut attr = Self::base(PerfEventKind::SchedSwitchTracepoint, clock).with_side_band();
        attr.raw.type_ = b::PERF_TYPE_TRACEPOINT;
        attr.raw.config = id;
        attr.raw.sample_period = 1;
        attr.raw.sample_type =
            (SampleFormat::RAW | SampleFormat::TID | SampleFormat::TIME | SampleFormat::CPU).bits();
        attr
    }

    /// Every wake-up on one CPU from the `sched:sched_waking` tracepoint (or `sched_wakeup`;
    /// `id` read from tracefs): a sample per wake-up (`sample_period = 1`) with
    /// `RAW | TID | TIME | CPU`, no side band (the switch event carries it). Open with
    /// `pid = -1`, or per thread with [`Self::with_inherit`].
    pub fn sched_waking_tracepoint(id: u64, clock: PerfClock) -> Self {
        let mut attr = Self::base(PerfEventKind::SchedWakingTracepoint, clock);
        attr.raw.type_ = b::PERF_TYPE_TRACEPOINT;
        attr.raw.config = id;
        attr.raw.sample_period = 1;
        attr.raw.set_sample_id_all(1);
        attr.raw.sample_type =
            (SampleFormat::RAW | SampleFormat::TID | SampleFormat::TIME | SampleFormat::CPU).bits();
        attr
    }

    /// CPU samples without a PMU: software `cpu-clock` at `hz` samples a second of CPU time
    /// (`freq = 1`), each with `IP | TID | TIME | CPU | CALLCHAIN` (at most `max_stack`
    /// frames). `kernel`: also sample in the kernel and keep kernel frames (needs root,
    /// `CAP_PERFMON` or `perf_event_paranoid <= 1`); else `exclude_kernel`, user frames only.
    pub fn cpu_clock_sampling(hz: u64, max_stack: u16, kernel: bool, clock: PerfClock) -> Self {
        let mut attr = Self::base(PerfEventKind::CpuClockSampling, clock);
        attr.raw.type_ = b::PERF_TYPE_SOFTWARE;
        attr.raw.config = u64::from(b::PERF_COUNT_SW_CPU_CLOCK);
        attr.raw.set_freq(1);
        attr.raw.sample_freq = hz.max(1);
        attr.raw.set_sample_id_all(1);
        attr.raw.sample_type = (SampleFormat::IP
            | SampleFormat::TID
            | SampleFormat::TIME
            | SampleFormat::CPU
            | SampleFormat::CALLCHAIN)
            .bits();
        attr.raw.sample_max_stack = max_stack;
        if !kernel {
            attr.raw.set_exclude_kernel(1);
            attr.raw.set_exclude_callchain_kernel(1);
        }
        attr.raw.set_exclude_hv(1);
        attr
    }

    /// The tracepoint fallback: `PERF_RECORD_SWITCH_CPU_WIDE` for every switch on one CPU, from
    /// a software dummy event with `context_switch = 1`. Open with `pid = -1`.
    pub fn cpu_wide_switches(clock: PerfClock) -> Self {
        let mut attr = Self::dummy(PerfEventKind::CpuWideSwitches, clock).with_side_band();
        attr.raw.set_context_switch(1);
        attr.raw.sample_type = (SampleFormat::TID | SampleFormat::TIME | SampleFormat::CPU).bits();
        attr
    }

    /// LBR sampling: hardware `CPU_CYCLES` every `cfg.period` cycles, each sample carrying
    /// `IP | TID | TIME | CPU | BRANCH_STACK` with `branch_sample_type = ANY | USER`
    /// (`| KERNEL` when `cfg.include_kernel`).
    pub fn branch_sampling(cfg: BranchSampling, clock: PerfClock) -> Self {
        let mut attr = Self::base(PerfEventKind::BranchSampling, clock);
        attr.raw.type_ = b::PERF_TYPE_HARDWARE;
        attr.raw.config = u64::from(b::PERF_COUNT_HW_CPU_CYCLES);
        attr.raw.sample_period = cfg.period.max(1);
        attr.raw.sample_type = (SampleFormat::IP
            | SampleFormat::TID
            | SampleFormat::TIME
            | SampleFormat::CPU
            | SampleFormat::BRANCH_STACK)
            .bits();
        attr.raw.set_sample_id_all(1);
        let mut branches = BranchSampleFormat::ANY | BranchSampleFormat::USER;
        if cfg.include_kernel {
            branches |= BranchSampleFormat::KERNEL;
        } else {
            attr.raw.set_exclude_kernel(1);
        }
        attr.raw.set_exclude_hv(1);
        attr.raw.branch_sample_type = branches.bits();
        attr
    }

    /// A dummy event opened only to read the clock parameters of its mmap page.
    pub fn clock_probe() -> Self {
        // Never read: only its mmap page is. Without `PERF_FORMAT_LOST`, so that a kernel
        // before 6.0 opens it as before.
        Self::dummy(PerfEventKind::ClockProbe, PerfClock::PerfDefault).without_lost_count()
    }

    /// Record the call chain of every sample (`PERF_SAMPLE_CALLCHAIN`, at most `max_stack`
    /// frames): kernel frames, and `user` frames walked by frame pointers (else
    /// `exclude_callchain_user`).
    pub fn with_callchain(mut self, max_stack: u16, user: bool) -> Self {
        self.raw.sample_type |= SampleFormat::CALLCHAIN.bits();
        self.raw.sample_max_stack = max_stack;
        self.raw.set_exclude_callchain_user(u64::from(!user));
        self
    }

    /// Every record names the event that wrote it (`PERF_SAMPLE_IDENTIFIER`: first in a
    /// sample, last in a side-band record's `sample_id`, which `sample_id_all` adds). For an
    /// inherited event the kernel writes the id of the event it was inherited from, the one
    /// `perf_event_open` returned (`primary_event_id`), not the copy's own.
    pub fn with_identifier(mut self) -> Self {
        self.raw.sample_type |= SampleFormat::IDENTIFIER.bits();
        self.raw.set_sample_id_all(1);
        self
    }

    /// Follow threads and children created later (`inherit = 1`).
    pub fn with_inherit(mut self, inherit: bool) -> Self {
        self.raw.set_inherit(u64::from(inherit));
        self
    }

    /// Leave a task at its `exec` (`remove_on_exec = 1`, Linux 5.13;
    /// [`Self::without_remove_on_exec`] for older kernels): an inherited event then follows a
    /// child until it execs, not its new image.
    pub fn with_remove_on_exec(mut self, remove: bool) -> Self {
        self.raw.set_remove_on_exec(u64::from(remove));
        self
    }

    /// Whether the event leaves a task at its `exec` (`remove_on_exec`).
    pub fn removed_on_exec(&self) -> bool {
        self.raw.remove_on_exec() != 0
    }

    /// The same event kept across an `exec`, for kernels before 5.13 (which refuse
    /// `remove_on_exec` with `EINVAL`).
    pub fn without_remove_on_exec(&self) -> Self {
        let mut attr = self.clone();
        attr.raw.set_remove_on_exec(0);
        attr
    }

    /// Report new executable mappings (`mmap = 1`, `mmap2 = 1`: `PERF_RECORD_MMAP2` records,
    /// timestamped through `sample_id_all`). Build-ids are not asked of the kernel
    /// (`build_id = 1` needs Linux 5.12); the capture reads them from the files.
    pub fn with_mmaps(mut self, mmaps: bool) -> Self {
        self.raw.set_mmap(u64::from(mmaps));
        self.raw.set_mmap2(u64::from(mmaps));
        self.raw.set_sample_id_all(1);
        self
    }

    /// Wake `poll()` when at least `bytes` of records are waiting (`watermark = 1`).
    pub fn with_wakeup_watermark(mut self, bytes: u32) -> Self {
        self.raw.set_watermark(1);
        self.raw.wakeup_watermark = bytes;
        self
    }

    /// Override the sample format (tests and tools; fxtrace's events use the constructors').
    pub fn with_sample_format(mut self, format: SampleFormat) -> Self {
        self.raw.sample_type = format.bits();
        self
    }

    /// Override the branch sample format (tests and tools).
    pub fn with_branch_format(mut self, format: BranchSampleFormat) -> Self {
        self.raw.branch_sample_type = format.bits();
        self
    }

    /// Which event this is.
    pub fn kind(&self) -> PerfEventKind {
        self.kind
    }

    /// `type` (`PERF_TYPE_*`).
    pub fn event_type(&self) -> u32 {
        self.raw.type_
    }

    /// `config`.
    pub fn config(&self) -> u64 {
        self.raw.config
    }

    /// `sample_period`.
    pub fn sample_period(&self) -> u64 {
        self.raw.sample_period
    }

    /// `sample_type`.
    pub fn sample_format(&self) -> SampleFormat {
        SampleFormat::from_bits_retain(self.raw.sample_type)
    }

    /// `branch_sample_type`.
    pub fn branch_format(&self) -> BranchSampleFormat {
        BranchSampleFormat::from_bits_retain(self.raw.branch_sample_type)
    }

    /// `read_format` has `PERF_FORMAT_LOST` (Linux 6.0): a `read` of the event gives its
    /// count, then the records it lost for want of room in its ring.
    pub fn counts_lost(&self) -> bool {
        self.raw.read_format & b::PERF_FORMAT_LOST as u64 != 0
    }

    /// The same event without `PERF_FORMAT_LOST`, for kernels before 6.0 (which refuse the
    /// bit with `EINVAL`).
    pub fn without_lost_count(&self) -> Self {
        let mut attr = self.clone();
        attr.raw.read_format &= !(b::PERF_FORMAT_LOST as u64);
        attr
    }

    /// `sample_id_all`: side-band records end with a `sample_id` trailer.
    pub fn sample_id_all(&self) -> bool {
        self.raw.sample_id_all() != 0
    }

    /// `context_switch`.
    pub fn context_switch(&self) -> bool {
        self.raw.context_switch() != 0
    }

    /// `inherit`.
    pub fn inherit(&self) -> bool {
        self.raw.inherit() != 0
    }

    /// `task` (FORK/EXIT records).
    pub fn task(&self) -> bool {
        self.raw.task() != 0
    }

    /// `comm` (COMM records).
    pub fn comm(&self) -> bool {
        self.raw.comm() != 0
    }

    /// `mmap` and `mmap2` (MMAP2 records for executable mappings).
    pub fn mmaps(&self) -> bool {
        self.raw.mmap() != 0 && self.raw.mmap2() != 0
    }

    /// `disabled`.
    pub fn disabled(&self) -> bool {
        self.raw.disabled() != 0
    }

    /// `exclude_kernel`.
    pub fn exclude_kernel(&self) -> bool {
        self.raw.exclude_kernel() != 0
    }

    /// `freq` and `sample_freq`: samples a second, when sampled by frequency.
    pub fn sample_frequency(&self) -> Option<u64> {
        (self.raw.freq() != 0).then_some(self.raw.sample_freq)
    }

    /// `sample_max_stack`.
    pub fn max_stack(&self) -> u16 {
        self.raw.sample_max_stack
    }

    /// `exclude_callchain_user`.
    pub fn exclude_callchain_user(&self) -> bool {
        self.raw.exclude_callchain_user() != 0
    }

    /// The clock the event's timestamps come from.
    pub fn clock(&self) -> PerfClock {
        if self.raw.use_clockid() != 0 && self.raw.clockid == libc::CLOCK_MONOTONIC_RAW {
            PerfClock::MonotonicRaw
        } else {
            PerfClock::PerfDefault
        }
    }

    /// `wakeup_watermark` when `watermark` is set.
    pub fn wakeup_watermark(&self) -> Option<u32> {
        (self.raw.watermark() != 0).then_some(self.raw.wakeup_watermark)
    }

    /// A copy of the kernel struct, for the syscall.
    pub(crate) fn to_raw(&self) -> b::perf_event_attr {
        self.raw
    }
}

impl fmt::Debug for EventAttr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventAttr")
            .field("kind", &self.kind)
            .field("type", &self.raw.type_)
            .field("config", &self.raw.config)
            .field("sample_period", &self.raw.sample_period)
            .field("sample_type", &self.sample_format())
            .field("branch_sample_type", &self.branch_format())
            .field("sample_id_all", &self.sample_id_all())
            .field("inherit", &self.inherit())
            .field("clock", &self.clock())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_bits_match_the_uapi_numbers() {
        // include/uapi/linux/perf_event.h: enum perf_event_sample_format.
        assert_eq!(SampleFormat::IP.bits(), 1 << 0);
        assert_eq!(SampleFormat::TID.bits(), 1 << 1);
        assert_eq!(SampleFormat::TIME.bits(), 1 << 2);
        assert_eq!(SampleFormat::CPU.bits(), 1 << 7);
        assert_eq!(SampleFormat::RAW.bits(), 1 << 10);
        assert_eq!(SampleFormat::BRANCH_STACK.bits(), 1 << 11);
        assert_eq!(SampleFormat::IDENTIFIER.bits(), 1 << 16);
        assert_eq!(BranchSampleFormat::USER.bits(), 1 << 0);
        assert_eq!(BranchSampleFormat::KERNEL.bits(), 1 << 1);
        assert_eq!(BranchSampleFormat::ANY.bits(), 1 << 3);
        assert_eq!(BranchSampleFormat::HW_INDEX.bits(), 1 << 17);
        assert_eq!(BranchSampleFormat::COUNTERS.bits(), 1 << 19);
    }

    #[test]
    fn process_switch_attr() {
        let a = EventAttr::process_switches(PerfClock::PerfDefault);
        assert_eq!(a.kind(), PerfEventKind::ProcessSwitches);
        assert_eq!(a.event_type(), b::PERF_TYPE_SOFTWARE);
        assert_eq!(a.config(), u64::from(b::PERF_COUNT_SW_DUMMY));
        assert!(a.context_switch() && a.inherit() && a.sample_id_all());
        assert!(a.task() && a.comm() && a.disabled());
        assert_eq!(
            a.sample_format(),
            SampleFormat::TID | SampleFormat::TIME | SampleFormat::CPU
        );
        assert_eq!(a.clock(), PerfClock::PerfDefault);
        assert_eq!(a.to_raw().size as usize, size_of::<b::perf_event_attr>());
    }

    #[test]
    fn mmap_tracking_bits() {
        let a = EventAttr::process_switches(PerfClock::PerfDefault);
        assert!(!a.mmaps());
        let a = a.with_mmaps(true);
        assert!(a.mmaps() && a.sample_id_all());
        let raw = a.to_raw();
        assert_eq!((raw.mmap(), raw.mmap2(), raw.mmap_data()), (1, 1, 0));
        assert!(!a.with_mmaps(false).mmaps());
    }

    #[test]
    fn tracepoint_attr() {
        let a = EventAttr::sched_switch_tracepoint(372, PerfClock::MonotonicRaw)
            .with_wakeup_watermark(4096);
        assert_eq!(a.event_type(), b::PERF_TYPE_TRACEPOINT);
        assert_eq!(a.config(), 372);
        assert_eq!(a.sample_period(), 1);
        assert!(a.sample_format().contains(SampleFormat::RAW));
        assert!(!a.context_switch());
        assert_eq!(a.clock(), PerfClock::MonotonicRaw);
        assert_eq!(a.wakeup_watermark(), Some(4096));
        assert_eq!(a.to_raw().clockid, libc::CLOCK_MONOTONIC_RAW);
    }

    #[test]
    fn waking_tracepoint_and_cpu_clock_attrs() {
        let w = EventAttr::sched_waking_tracepoint(375, PerfClock::PerfDefault);
        assert_eq!(
            (w.event_type(), w.config(), w.sample_period()),
            (b::PERF_TYPE_TRACEPOINT, 375, 1)
        );
        assert_eq!(
            w.sample_format(),
            SampleFormat::RAW | SampleFormat::TID | SampleFormat::TIME | SampleFormat::CPU
        );
        assert!(
            !w.task() && !w.comm() && w.sample_id_all(),
            "no side band of its own"
        );
        let c = EventAttr::cpu_clock_sampling(999, 64, false, PerfClock::PerfDefault);
        assert_eq!(c.event_type(), b::PERF_TYPE_SOFTWARE);
        assert_eq!(c.config(), u64::from(b::PERF_COUNT_SW_CPU_CLOCK));
        assert_eq!(c.sample_frequency(), Some(999));
        assert!(c
            .sample_format()
            .contains(SampleFormat::CALLCHAIN | SampleFormat::IP));
        assert!(c.exclude_kernel() && !c.exclude_callchain_user());
        assert_eq!(c.max_stack(), 64);
        let k = EventAttr::cpu_clock_sampling(0, 64, true, PerfClock::PerfDefault);
        assert!(!k.exclude_kernel());
        assert_eq!(k.sample_frequency(), Some(1), "at least 1 Hz");
        let s = EventAttr::sched_switch_tracepoint(372, PerfClock::PerfDefault)
            .with_callchain(48, false);
        assert!(s
            .sample_format()
            .contains(SampleFormat::CALLCHAIN | SampleFormat::RAW));
        assert!(s.exclude_callchain_user());
        assert_eq!(s.max_stack(), 48);
        assert_eq!(s.sample_frequency(), None);
    }

    #[test]
    fn cpu_wide_attr_is_not_inherited() {
        let a = EventAttr::cpu_wide_switches(PerfClock::PerfDefault);
        assert!(a.context_switch() && !a.inherit() && a.task());
    }

    #[test]
    fn branch_attr_user_only_and_with_kernel() {
        let user = EventAttr::branch_sampling(BranchSampling::default(), PerfClock::PerfDefault);
        assert_eq!(user.event_type(), b::PERF_TYPE_HARDWARE);
        assert_eq!(user.config(), u64::from(b::PERF_COUNT_HW_CPU_CYCLES));
        assert_eq!(user.sample_period(), 1_000_003);
        assert!(user
            .sample_format()
            .contains(SampleFormat::BRANCH_STACK | SampleFormat::IP));
        assert_eq!(
            user.branch_format(),
            BranchSampleFormat::ANY | BranchSampleFormat::USER
        );
        assert!(user.exclude_kernel());
        let kernel = EventAttr::branch_sampling(
            BranchSampling {
                period: 5000,
                include_kernel: true,
            },
            PerfClock::PerfDefault,
        );
        assert!(kernel.branch_format().contains(BranchSampleFormat::KERNEL));
        assert!(!kernel.exclude_kernel());
        assert_eq!(kernel.sample_period(), 5000);
    }

    #[test]
    fn flag_names() {
        let f = SampleFormat::TID | SampleFormat::TIME | SampleFormat::from_bits_retain(1 << 40);
        assert_eq!(format!("{f:?}"), "SampleFormat(TID | TIME | 0x10000000000)");
        assert_eq!(format!("{:?}", SampleFormat::empty()), "SampleFormat(0x0)");
    }
}
