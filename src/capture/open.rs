//! Opening a capture's perf events: the rings of each CPU or thread, the tracepoint, the
//! clock, and what could not be opened (part of [`super::session::Capture::start`]).

use std::collections::{HashMap, HashSet};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use super::attr::{EventAttr, PerfEventKind};
use super::decode::StreamDecoder;
use super::events::Unsupported;
use super::permissions::{is_permission_error, Need, PerfPermissions};
use super::procfs::TaskRegistry;
use super::ring::{PerfRing, RingError};
use super::session::*;
use super::stacks::CHAIN_DEPTH;
use super::switch::SchedSwitchFormat;
use super::sys::{PerfIoctl, Sys};
use super::time::{MeasuredMapping, PerfTimeConverter};
use super::tracefs::Tracefs;
use super::tracepoint::TracepointFormat;
use super::waking::SchedWakingFormat;
use crate::fd_guard::GuardedFd;

pub(super) struct RingSlot {
    pub(super) ring: PerfRing,
    pub(super) decoder: StreamDecoder,
    /// Records `PERF_RECORD_LOST` reported lost in this ring so far.
    pub(super) reported_lost: u64,
}

pub(super) struct OpenFailure {
    pub(super) kind: PerfEventKind,
    pub(super) pid: i32,
    pub(super) cpu: i32,
    pub(super) error: Result<io::Error, RingError>,
}

impl OpenFailure {
    pub(super) fn errno(&self) -> Option<i32> {
        match &self.error {
            Ok(e) => e.raw_os_error(),
            Err(RingError::Map { source, .. }) => source.raw_os_error(),
            Err(_) => None,
        }
    }

    pub(super) fn into_error(self, perms: &PerfPermissions, need: Need) -> CaptureError {
        let errno = self.errno();
        match self.error {
            Ok(source) => CaptureError::Open {
                event: self.kind,
                pid: self.pid,
                cpu: self.cpu,
                remedy: is_permission_error(&source).then(|| perms.remedy(need, errno)),
                source,
            },
            Err(source) => CaptureError::Ring {
                event: self.kind,
                cpu: self.cpu,
                remedy: matches!(errno, Some(libc::EPERM) | Some(libc::ENOMEM))
                    .then(|| perms.remedy(Need::RingMemory, errno)),
                source,
            },
        }
    }

    pub(super) fn describe(&self) -> String {
        match &self.error {
            Ok(e) => format!("perf_event_open(pid {}, cpu {}): {e}", self.pid, self.cpu),
            Err(e) => format!("cpu {}: {e}", self.cpu),
        }
    }
}

/// Rings and redirected member descriptors opened for one kind of event.
#[derive(Default)]
pub(super) struct OpenSet {
    pub(super) rings: Vec<(u32, PerfRing)>,
    /// With the CPU of the ring each writes into.
    pub(super) members: Vec<(u32, GuardedFd)>,
    /// Per-thread events: `(id, tid, cpu)` of each (its lineage, [`super::duplicates`]).
    pub(super) per_thread: Vec<(u64, u32, u32)>,
    /// Some thread appeared after the first listing and was opened: a thread may have two
    /// events of a kind ([`super::duplicates`]).
    pub(super) late: bool,
}

pub(super) struct Opener<'a> {
    pub(super) sys: &'a Arc<dyn Sys>,
    pub(super) pages: usize,
    /// Inherited events leave a child at its `exec` ([`super::CaptureConfig::leave_at_exec`]).
    pub(super) leave_at_exec: bool,
}

impl Opener<'_> {
    pub(super) fn open(
        &self,
        attr: &EventAttr,
        pid: i32,
        cpu: u32,
    ) -> Result<OwnedFd, OpenFailure> {
        let mut asked = attr
            .clone()
            .with_remove_on_exec(self.leave_at_exec && attr.inherit());
        let opened = loop {
            match self.sys.perf_event_open(&asked, pid, cpu as i32, None) {
                // A kernel before 6.0 does not know `PERF_FORMAT_LOST`: the event without it
                // (its last losses before the stop then go uncounted, as before 6.0 they must).
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) && asked.counts_lost() => {
                    asked = asked.without_lost_count();
                }
                // Before 5.13, no `remove_on_exec`: a child's new image stays followed (its
                // switches then also in this capture, as they were before 5.13).
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) && asked.removed_on_exec() => {
                    asked = asked.without_remove_on_exec();
                }
                opened => break opened,
            }
        };
        opened.map_err(|e| OpenFailure {
            kind: attr.kind(),
            pid,
            cpu: cpu as i32,
            error: Ok(e),
        })
    }

    pub(super) fn map(
        &self,
        kind: PerfEventKind,
        fd: OwnedFd,
        cpu: u32,
    ) -> Result<PerfRing, OpenFailure> {
        PerfRing::map(self.sys.clone(), fd, self.pages).map_err(|e| OpenFailure {
            kind,
            pid: -1,
            cpu: cpu as i32,
            error: Err(e),
        })
    }

    /// One event per CPU, `pid = -1`.
    pub(super) fn per_cpu(&self, attr: &EventAttr, cpus: &[u32]) -> Result<OpenSet, OpenFailure> {
        let mut set = OpenSet::default();
        for &cpu in cpus {
            let fd = self.open(attr, -1, cpu)?;
            set.rings.push((cpu, self.map(attr.kind(), fd, cpu)?));
        }
        Ok(set)
    }

    /// One event per CPU, `pid = -1`, each `SET_OUTPUT` into `set`'s ring of its CPU (CPUs
    /// without one are skipped): another event whose records the same decoder reads.
    pub(super) fn per_cpu_into(
        &self,
        attr: &EventAttr,
        set: &mut OpenSet,
    ) -> Result<(), OpenError> {
        let first = set.members.len();
        let opened = (0..set.rings.len()).try_for_each(|i| {
            let cpu = set.rings[i].0;
            let fd = self.open(attr, -1, cpu).map_err(OpenError::Failure)?;
            let member = self.redirect(fd, &set.rings[i].1)?;
            set.members.push((cpu, member));
            Ok(())
        });
        if opened.is_err() {
            // None of them, rather than a few CPUs' (closed here).
            set.members.truncate(first);
        }
        opened
    }

    /// `fd` writing into `ring`.
    fn redirect(&self, fd: OwnedFd, ring: &PerfRing) -> Result<GuardedFd, OpenError> {
        self.sys
            .ioctl(fd.as_fd(), PerfIoctl::SetOutput(ring.fd()))
            .map_err(|source| {
                OpenError::Fatal(CaptureError::Ioctl {
                    what: "SET_OUTPUT",
                    source,
                })
            })?;
        self.sys.guard_event(fd).map_err(|source| {
            OpenError::Fatal(CaptureError::System {
                what: "fstat of a perf event descriptor".into(),
                source,
            })
        })
    }

    /// One event per (thread of `pid`, CPU), one ring per CPU, the rest `SET_OUTPUT` into it.
    pub(super) fn per_thread(
        &self,
        attr: &EventAttr,
        pid: u32,
        cpus: &[u32],
        registry: &TaskRegistry,
    ) -> Result<OpenSet, OpenError> {
        let mut set = OpenSet::default();
        self.per_thread_into(attr, pid, cpus, registry, &mut set)?;
        Ok(set)
    }

    /// [`Self::per_thread`] into `set`: a CPU that has a ring in it already gets none more,
    /// its events write into that one. On failure `set` keeps what it had.
    pub(super) fn per_thread_into(
        &self,
        attr: &EventAttr,
        pid: u32,
        cpus: &[u32],
        registry: &TaskRegistry,
        set: &mut OpenSet,
    ) -> Result<(), OpenError> {
        let (rings, members, ids) = (set.rings.len(), set.members.len(), set.per_thread.len());
        let opened = self.add_per_thread(attr, pid, cpus, registry, set);
        if opened.is_err() {
            set.rings.truncate(rings);
            set.members.truncate(members);
            set.per_thread.truncate(ids);
        }
        opened
    }

    fn add_per_thread(
        &self,
        attr: &EventAttr,
        pid: u32,
        cpus: &[u32],
        registry: &TaskRegistry,
        set: &mut OpenSet,
    ) -> Result<(), OpenError> {
        let mut leader: HashMap<u32, usize> = set
            .rings
            .iter()
            .enumerate()
            .map(|(i, (cpu, _))| (*cpu, i))
            .collect();
        let mut opened: HashSet<u32> = HashSet::new();
        for round in 0..16 {
            let tids = registry.list_threads(pid).map_err(|source| {
                OpenError::Fatal(CaptureError::System {
                    what: format!("listing threads of process {pid}"),
                    source,
                })
            })?;
            let new: Vec<u32> = tids.into_iter().filter(|t| !opened.contains(t)).collect();
            if new.is_empty() {
                return Ok(());
            }
            // Threads made since the last listing: one may have inherited events of this kind
            // already, from its maker's opened before (the copies are told apart later).
            set.late |= round > 0;
            for tid in new {
                opened.insert(tid);
                for &cpu in cpus {
                    let fd = match self.open(attr, tid as i32, cpu) {
                        Ok(fd) => fd,
                        // The thread exited between listing and opening.
                        Err(f) if f.errno() == Some(libc::ESRCH) => break,
                        Err(f) => return Err(OpenError::Failure(f)),
                    };
                    let id = match leader.get(&cpu) {
                        Some(&i) => {
                            let member = self.redirect(fd, &set.rings[i].1)?;
                            let id = self.sys.event_id(&member);
                            set.members.push((cpu, member));
                            id
                        }
                        None => {
                            let ring =
                                self.map(attr.kind(), fd, cpu).map_err(OpenError::Failure)?;
                            let id = self.sys.event_id(ring.guarded_fd());
                            leader.insert(cpu, set.rings.len());
                            set.rings.push((cpu, ring));
                            id
                        }
                    };
                    if let Some(id) = id {
                        set.per_thread.push((id, tid, cpu));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Why opening a set of events stopped.
pub(super) enum OpenError {
    /// A syscall refused one event (classified by the caller: fatal or unsupported).
    Failure(OpenFailure),
    /// Anything else.
    Fatal(CaptureError),
}

impl OpenError {
    pub(super) fn into_error(self, perms: &PerfPermissions, need: Need) -> CaptureError {
        match self {
            Self::Failure(f) => f.into_error(perms, need),
            Self::Fatal(e) => e,
        }
    }
}

/// Picks the clock: the caller's, else the mmap page of a probe event, else a measured mapping
/// (its first anchor taken now, with the clock's rate until the capture thread's next anchor).
pub(super) fn choose_clock(sys: &Arc<dyn Sys>, config: &CaptureConfig) -> PerfTimeConverter {
    if let Some(c) = config.clock {
        return c;
    }
    match super::time::mmap_page_clock(sys) {
        Some(c) => PerfTimeConverter::MmapPage(c),
        // The first anchor now, the next at the capture thread's first drain: nothing waits
        // here (this ran a 10 ms sleep in every traced process's start).
        None => PerfTimeConverter::Measured(MeasuredMapping::starting_now(
            crate::clock::info().ticks_per_second as f64 / 1e9,
        )),
    }
}

/// A tracepoint's id and format.
type TracepointFound = (u64, TracepointFormat);

/// A tracepoint's id and format, and which of the names asked for it is.
type TracepointChosen = (u64, TracepointFormat, &'static str);

/// The id and format of the first of the `sched` tracepoints `names` this tracefs has, with
/// its name, or why none could be read.
fn sched_tracepoint(
    config: &CaptureConfig,
    perms: &PerfPermissions,
    names: &[&'static str],
) -> Result<TracepointChosen, String> {
    sched_tracepoints(config, perms, names, &[]).map(|(found, _)| found)
}

/// [`sched_tracepoint`], and through the same tracefs each of the `sched` tracepoints `also`
/// (`None` for one that cannot be read).
fn sched_tracepoints(
    config: &CaptureConfig,
    perms: &PerfPermissions,
    names: &[&'static str],
    also: &[&'static str],
) -> Result<(TracepointChosen, Vec<Option<TracepointFound>>), String> {
    let tracefs = match &config.tracefs {
        TracefsChoice::Skip => return Err("tracepoints disabled by configuration".into()),
        TracefsChoice::At(path) => Ok(Tracefs::at(path)),
        TracefsChoice::Auto { may_mount } => Tracefs::open(*may_mount, perms.root),
    };
    let tracefs = tracefs.map_err(|e| e.to_string())?;
    // The format file names the id too (`ID:`): the `id` file only where it does not.
    let read = |name| {
        tracefs.tracepoint_format("sched", name).and_then(|format| {
            let id = match format.id {
                Some(id) => id,
                None => tracefs.tracepoint_id("sched", name)?,
            };
            Ok((id, format))
        })
    };
    let mut first_error = None;
    for &name in names {
        match read(name) {
            Ok((id, format)) => {
                let more = also.iter().map(|&n| read(n).ok()).collect();
                return Ok(((id, format, name), more));
            }
            Err(e) => {
                first_error.get_or_insert(e.to_string());
            }
        }
    }
    // `tracefs` (and a mount fxtrace made) is released here: the events do not need it.
    Err(first_error.unwrap_or_default())
}

/// Opens `sched:sched_switch` on every CPU (with call chains when `wait_points`), or says
/// why not.
#[allow(clippy::too_many_arguments)]
pub(super) fn open_tracepoint(
    opener: &Opener<'_>,
    config: &CaptureConfig,
    perms: &PerfPermissions,
    cpus: &[u32],
    source: super::time::PerfClock,
    watermark: u32,
) -> Result<(OpenSet, EventAttr, Arc<SchedSwitchFormat>), Unsupported> {
    let what = "sched:sched_switch tracepoint".to_owned();
    let fallback = "falling back to PERF_RECORD_SWITCH_CPU_WIDE (no priorities, states only \
                    preempted/blocked, no wait points)";
    let failed = |hint: String| Unsupported {
        what: what.clone(),
        errno: None,
        summary: hint.clone(),
        hint,
    };
    let (id, format, _) = sched_tracepoint(config, perms, &["sched_switch"])
        .map_err(|e| failed(format!("{e}; {fallback}")))?;
    let fmt =
        SchedSwitchFormat::from_format(&format).map_err(|e| failed(format!("{e}; {fallback}")))?;
    let mut attr = EventAttr::sched_switch_tracepoint(id, source)
        .with_mmaps(config.mmaps)
        .with_wakeup_watermark(watermark);
    if config.wait_points {
        attr = attr.with_callchain(CHAIN_DEPTH, true);
    }
    let set = opener.per_cpu(&attr, cpus).map_err(|f| {
        let hint = format!(
            "{}{}; {fallback}",
            f.describe(),
            if f.error.as_ref().is_ok_and(is_permission_error) {
                format!("; {}", perms.remedy(Need::RawTracepoint, f.errno()))
            } else {
                String::new()
            }
        );
        Unsupported {
            what: what.clone(),
            errno: f.errno(),
            summary: hint.clone(),
            hint,
        }
    })?;
    Ok((set, attr, Arc::new(fmt)))
}

/// Opens `sched:sched_switch` with call chains on every thread of process `pid`, for its
/// wait points alone (the process's switches are its `PERF_RECORD_SWITCH` records), or says
/// why not.
pub(super) fn open_wait_points(
    opener: &Opener<'_>,
    (config, perms): (&CaptureConfig, &PerfPermissions),
    (pid, cpus, registry): (u32, &[u32], &TaskRegistry),
    (source, watermark): (super::time::PerfClock, u32),
) -> Result<(OpenSet, EventAttr, Arc<SchedSwitchFormat>), Unsupported> {
    let failed = |errno, why: String| Unsupported {
        what: "wait points (call chains at sched_switch)".into(),
        errno,
        summary: format!("{why}; not recorded"),
        hint: format!("{why}; not recorded"),
    };
    let (id, format, _) =
        sched_tracepoint(config, perms, &["sched_switch"]).map_err(|e| failed(None, e))?;
    let fmt = SchedSwitchFormat::from_format(&format).map_err(|e| failed(None, e.to_string()))?;
    // The switch records' event has the side band.
    let attr = EventAttr::sched_switch_tracepoint(id, source)
        .without_side_band()
        .with_wakeup_watermark(watermark)
        .with_callchain(CHAIN_DEPTH, true)
        .with_inherit(true)
        .with_identifier();
    let set = opener
        .per_thread(&attr, pid, cpus, registry)
        .map_err(|e| match e {
            OpenError::Failure(f) => {
                let remedy = if f.error.as_ref().is_ok_and(is_permission_error) {
                    format!("; {}", perms.remedy(Need::RawTracepoint, f.errno()))
                } else {
                    String::new()
                };
                failed(f.errno(), format!("{}{remedy}", f.describe()))
            }
            OpenError::Fatal(e) => failed(None, e.to_string()),
        })?;
    Ok((set, attr, Arc::new(fmt)))
}

/// The wake-up events opened, their attributes and format, and why `sched_wakeup_new` was
/// not opened (if it was not).
type WakingOpened = (
    OpenSet,
    EventAttr,
    Arc<SchedWakingFormat>,
    Option<Unsupported>,
);

/// Opens `sched:sched_waking` (or, on kernels without it, `sched:sched_wakeup`) on every CPU
/// (system-wide) or on every thread of `pid`, or says why not; and into the same rings
/// `sched:sched_wakeup_new`, a new thread's first wake-up (which `sched_waking` does not
/// see), or a note of why not.
pub(super) fn open_waking(
    opener: &Opener<'_>,
    config: &CaptureConfig,
    perms: &PerfPermissions,
    cpus: &[u32],
    registry: &TaskRegistry,
    (source, watermark): (super::time::PerfClock, u32),
) -> Result<WakingOpened, Unsupported> {
    let what = "wake-ups (sched:sched_waking tracepoint)".to_owned();
    let skipped = "wake-ups are not recorded";
    let unsupported = |errno, why: String| {
        let hint = format!("{why}; {skipped}");
        Unsupported {
            what: what.clone(),
            errno,
            summary: hint.clone(),
            hint,
        }
    };
    let ((id, format, _), new) = sched_tracepoints(
        config,
        perms,
        &["sched_waking", "sched_wakeup"],
        &["sched_wakeup_new"],
    )
    .map_err(|e| unsupported(None, e))?;
    let fmt =
        SchedWakingFormat::from_format(&format).map_err(|e| unsupported(None, e.to_string()))?;
    let mut attr = EventAttr::sched_waking_tracepoint(id, source).with_wakeup_watermark(watermark);
    let opened = match config.target {
        CaptureTarget::SystemWide => opener.per_cpu(&attr, cpus).map_err(OpenError::Failure),
        CaptureTarget::Process(pid) => {
            attr = attr.with_identifier();
            opener.per_thread(&attr.clone().with_inherit(true), pid, cpus, registry)
        }
    };
    let mut set = opened.map_err(|e| match e {
        OpenError::Failure(f) => {
            if f.error.as_ref().is_ok_and(is_permission_error) {
                let remedy = perms.remedy(Need::RawTracepoint, f.errno());
                Unsupported {
                    what: what.clone(),
                    errno: f.errno(),
                    summary: format!(
                        "{}; {skipped}",
                        perms.remedy_short(Need::RawTracepoint, f.errno())
                    ),
                    hint: format!("{}; {remedy}; {skipped}", f.describe()),
                }
            } else {
                unsupported(f.errno(), f.describe())
            }
        }
        OpenError::Fatal(e) => unsupported(None, e.to_string()),
    })?;
    let found = new.into_iter().flatten().next();
    let targets = (cpus, registry);
    let new = open_wakeup_new(
        opener,
        config,
        targets,
        (&fmt, found),
        (source, watermark),
        &mut set,
    )
    .err()
    .map(|why| {
        let hint = format!("{why}; a new thread's first wake-up is not recorded");
        Unsupported {
            what: "new threads' wake-ups (sched:sched_wakeup_new tracepoint)".into(),
            errno: None,
            summary: hint.clone(),
            hint,
        }
    });
    Ok((set, attr, Arc::new(fmt), new))
}

/// Opens `sched:sched_wakeup_new` (`found`) as `set`'s wake-ups are, into their rings: the
/// same fields at the same offsets (one template in the kernel), so their decoder reads both.
fn open_wakeup_new(
    opener: &Opener<'_>,
    config: &CaptureConfig,
    (cpus, registry): (&[u32], &TaskRegistry),
    (fmt, found): (&SchedWakingFormat, Option<TracepointFound>),
    (source, watermark): (super::time::PerfClock, u32),
    set: &mut OpenSet,
) -> Result<(), String> {
    let (id, format) = found.ok_or("this kernel's tracefs has no sched_wakeup_new")?;
    match SchedWakingFormat::from_format(&format) {
        Ok(new) if new == *fmt => {}
        Ok(_) => return Err("its fields are not where sched_waking has them".into()),
        Err(e) => return Err(e.to_string()),
    }
    let attr = EventAttr::sched_waking_tracepoint(id, source).with_wakeup_watermark(watermark);
    let opened = match config.target {
        CaptureTarget::SystemWide => opener.per_cpu_into(&attr, set),
        CaptureTarget::Process(pid) => opener.per_thread_into(
            &attr.with_inherit(true).with_identifier(),
            pid,
            cpus,
            registry,
            set,
        ),
    };
    opened.map_err(|e| match e {
        OpenError::Failure(f) => f.describe(),
        OpenError::Fatal(e) => e.to_string(),
    })
}

/// Opens `cpu-clock` sampling at `hz` on every CPU (system-wide) or on every thread of
/// `pid`, kernel frames included when permitted; or says why not.
pub(super) fn open_sampling(
    opener: &Opener<'_>,
    config: &CaptureConfig,
    perms: &PerfPermissions,
    cpus: &[u32],
    registry: &TaskRegistry,
    (hz, source, watermark): (u64, super::time::PerfClock, u32),
) -> Result<(OpenSet, EventAttr), Unsupported> {
    let kernel = perms.allows(Need::CpuSampling { kernel: true });
    let mut attr = EventAttr::cpu_clock_sampling(hz, CHAIN_DEPTH, kernel, source)
        // Without a switch event, the samples carry the mapping records.
        .with_mmaps(config.mmaps && !config.switches && config.lbr.is_none())
        .with_wakeup_watermark(watermark);
    let opened = match config.target {
        CaptureTarget::SystemWide => opener.per_cpu(&attr, cpus).map_err(OpenError::Failure),
        CaptureTarget::Process(pid) => {
            attr = attr.with_identifier();
            if !config.switches {
                // Without a switch event, the samples carry the FORK records: the thread
                // tree their copies are told apart by (`super::duplicates`), and the names.
                attr = attr.with_side_band();
            }
            opener.per_thread(&attr.clone().with_inherit(true), pid, cpus, registry)
        }
    };
    let set = opened.map_err(|e| {
        let (errno, why) = match e {
            OpenError::Failure(f) => (f.errno(), f.describe()),
            OpenError::Fatal(e) => (None, e.to_string()),
        };
        let need = Need::CpuSampling { kernel };
        Unsupported {
            what: format!("CPU samples (cpu-clock at {hz} Hz)"),
            errno,
            summary: perms.remedy_short(need, errno),
            hint: format!("{why}; {}", perms.remedy(need, errno)),
        }
    })?;
    Ok((set, attr))
}
