//! The capture thread: draining the rings, merging per-CPU streams, resolving each thread's
//! process, and delivering [`CaptureEvent`]s (started by [`super::session::Capture::start`]).

use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::decode::{known_pid, waits, Decoded, OtherEvent, Pending, Skip};
use super::duplicates::{SampleFilter, Sampled};
use super::events::{CaptureEvent, Lost, LostKind, SwitchSides, ThreadInfo, Unsupported};
use super::ids::IdMap;
use super::maps::{BuildIdCache, MapsSynthesis};
use super::merge::Merger;
use super::open::*;
use super::pids::PidResolver;
use super::procfs::SCAN_TASK_LIMIT;
use super::records::TaskName;
use super::ring::RingError;
use super::session::*;
use super::stacks::StackInterner;
use super::sys::{lost_count, PerfIoctl, Sys};
use super::time::PerfTimeConverter;
use crate::fd_guard::{FdLost, GuardedFd, WakePipe};

pub(super) struct Delivery {
    /// Pids (see [`super::pids`]); also the registry of names.
    pub(super) resolver: PidResolver,
    /// Build-ids of mapped files, read once per file; `None`: mapped files are not read (a
    /// recording replayed elsewhere: this machine's files may not be the ones mapped).
    pub(super) build_ids: Option<BuildIdCache>,
    /// Threads announced, with the pid they were announced with.
    pub(super) announced: IdMap<Option<u32>>,
    /// Recent entries of `announced`, direct-mapped by the tid's low bits: a context switch
    /// names the same few threads again and again, and a hit is a compare instead of a hash
    /// lookup. Rules: written with every insert into `announced` (entries are never removed
    /// from it), so a slot holding a tid holds its entry.
    pub(super) recent: Box<[Option<Announced>; ANNOUNCED_SLOTS]>,
    /// Interned call chains (wait points, samples), announced before their first use.
    pub(super) stacks: StackInterner,
    /// Per thread, the wait point of a `sched_switch` read for it alone, until the thread's
    /// switch-out record that follows it ([`Pending::WaitPoint`]).
    pub(super) waiting: IdMap<u32>,
    /// The samples of a thread with two sampling events of a kind kept from one
    /// ([`super::duplicates`]); `None` when no thread can have two.
    pub(super) samples: Option<SampleFilter>,
    pub(super) counters: Arc<Counters>,
    pub(super) sink: Box<dyn FnMut(CaptureEvent) + Send>,
}

/// A thread announced, with the pid it was announced with.
pub(super) type Announced = (u32, Option<u32>);

/// Slots of [`Delivery::recent`] (a power of two).
pub(super) const ANNOUNCED_SLOTS: usize = 256;

impl Delivery {
    /// Takes the next event in timestamp order (perf time `perf_time`); delivers it and any
    /// events it unblocks once their threads' processes are known (see [`super::pids`]).
    pub(super) fn deliver(&mut self, perf_time: u64, pending: Pending) {
        match self.resolver.admit(perf_time, pending) {
            // Nothing held before it, nothing unknown: straight on.
            Some(pending) => self.process(pending),
            None => self.release(false),
        }
    }

    /// Whether `sampled` is no sample a thread's second sampling event took (those are
    /// counted), and notes a FORK ([`super::duplicates`]): asked in time order, a FORK before
    /// the new thread's samples.
    fn keep_sample(&mut self, sampled: Sampled<'_>) -> bool {
        let keep = match &mut self.samples {
            Some(filter) => filter.keep(sampled),
            None => true,
        };
        if !keep {
            bump(&self.counters.duplicates, 1);
        }
        keep
    }

    /// Delivers what the resolver lets go; `finished`: everything (end of capture).
    pub(super) fn release(&mut self, finished: bool) {
        while let Some(pending) = self.resolver.next_ready(finished) {
            self.process(pending);
        }
        let s = self.resolver.stats();
        // ATOMICS: statistics, see `Counters`.
        self.counters
            .deferred_events
            .store(s.deferred, Ordering::Relaxed);
    }

    pub(super) fn process(&mut self, pending: Pending) {
        let (mut cs, names) = match pending {
            Pending::Switch(cs, names) => (cs, names),
            Pending::WaitPoint { tid, stack } => {
                self.waiting.insert(tid, stack);
                return;
            }
            Pending::Wakeup(w, comm) => {
                self.announce(w.time, w.tid, w.pid, || Some(TaskName::from_bytes(&comm)));
                self.announce(w.time, w.waker_tid, w.waker_pid, || None);
                bump(&self.counters.wakeups, 1);
                return self.emit(CaptureEvent::Wakeup(w));
            }
            Pending::Sample(s, lineage) => {
                if !self.keep_sample(Sampled::Cpu(&s, lineage)) {
                    return;
                }
                self.announce(s.time, s.tid, s.pid, || None);
                if let Some(id) = s.stack {
                    self.announce_stack(id);
                }
                bump(&self.counters.samples, 1);
                return self.emit(CaptureEvent::Sample(s));
            }
            Pending::Other(other) => return self.process_other(*other),
        };
        if cs.sides != SwitchSides::IncomingOnly {
            // A switch-out takes its thread's wait point, which comes just before it (the
            // tracepoint fires first in `__schedule`); a preempted one drops it.
            if let Some(stack) = self.waiting.remove(&cs.prev_tid) {
                if cs.stack.is_none() && waits(&cs) {
                    cs.stack = Some(stack);
                }
            }
            self.announce(cs.time, cs.prev_tid, cs.prev_pid, || names.prev());
        }
        if cs.sides != SwitchSides::OutgoingOnly {
            self.announce(cs.time, cs.next_tid, cs.next_pid, || names.next());
        }
        if let Some(id) = cs.stack {
            self.announce_stack(id);
            bump(&self.counters.wait_points, 1);
        }
        bump(&self.counters.switches, 1);
        self.emit(CaptureEvent::ContextSwitch(cs));
    }

    /// Announces stack `id` (and the kernel symbols of its frames) before its first use.
    fn announce_stack(&mut self, id: u32) {
        let mut symbols = Vec::new();
        let Some(info) = self.stacks.announce(id, |k| symbols.push(k)) else {
            return;
        };
        if let Some(note) = self.stacks.symbols_note.take() {
            self.emit(CaptureEvent::Unsupported(note));
        }
        bump(&self.counters.kernel_symbols, symbols.len() as u64);
        for k in symbols {
            self.emit(CaptureEvent::KernelSymbol(k));
        }
        bump(&self.counters.stacks, 1);
        self.emit(CaptureEvent::Stack(info));
    }

    /// [`Self::process`] for every event but a context switch held as [`Pending::Switch`].
    fn process_other(&mut self, other: OtherEvent) {
        let OtherEvent {
            mut event,
            inode,
            lineage,
        } = other;
        if matches!(event, CaptureEvent::Fork(_) | CaptureEvent::Branch(_))
            && !self.keep_sample(Sampled::Other(&event, lineage))
        {
            return;
        }
        match &mut event {
            CaptureEvent::ContextSwitch(_) | CaptureEvent::Wakeup(_) | CaptureEvent::Sample(_) => {
                return self.process(Pending::of(event));
            }
            CaptureEvent::Comm(c) => self.resolver.registry.note_name(c.tid, &c.name),
            CaptureEvent::Mmap(m) => {
                if let (None, Some(cache)) = (&m.build_id, &mut self.build_ids) {
                    m.build_id = cache.get(&m.path, inode);
                }
                bump(&self.counters.mmaps, 1);
            }
            CaptureEvent::Branch(b) => {
                self.announce(b.time, b.tid, known_pid(b.pid), || None);
                bump(&self.counters.branch_samples, 1);
            }
            CaptureEvent::Fork(_)
            | CaptureEvent::Exit(_)
            | CaptureEvent::Lost(_)
            | CaptureEvent::Thread(_)
            | CaptureEvent::Stack(_)
            | CaptureEvent::KernelSymbol(_)
            | CaptureEvent::Unsupported(_) => {}
        }
        self.emit(event);
    }

    /// Announces `tid` before its first event, and again when its process changes (a pid
    /// learnt after a thread went out unresolved, a tid reused by another process). A thread
    /// announced without a process is counted ([`CaptureStats::unknown_process_threads`]).
    /// `name`: the name the event carried, asked for only when the thread is announced.
    #[inline]
    pub(super) fn announce(
        &mut self,
        time: u64,
        tid: u32,
        pid: Option<u32>,
        name: impl FnOnce() -> Option<TaskName>,
    ) {
        let slot = tid as usize & (ANNOUNCED_SLOTS - 1);
        let before = match self.recent[slot] {
            Some((t, before)) if t == tid => Some(before),
            _ => self.announced.get(&tid).copied(),
        };
        let first = match before {
            None => true,
            Some(before) if pid.is_some() && pid != before => false,
            Some(before) => {
                self.recent[slot] = Some((tid, before));
                return;
            }
        };
        self.announce_new(time, tid, pid, name(), first);
    }

    /// The announcement itself (see [`Self::announce`]).
    #[inline(never)]
    fn announce_new(
        &mut self,
        time: u64,
        tid: u32,
        pid: Option<u32>,
        name: Option<TaskName>,
        first: bool,
    ) {
        let registry = &mut self.resolver.registry;
        if let Some(n) = name {
            registry.note_name(tid, &n.to_string_lossy());
        }
        let info = ThreadInfo {
            time,
            tid,
            pid,
            name: registry.thread_name(tid),
            process_name: pid.and_then(|p| registry.process_name(p)),
        };
        self.announced.insert(tid, pid);
        self.recent[tid as usize & (ANNOUNCED_SLOTS - 1)] = Some((tid, pid));
        if first {
            bump(&self.counters.threads, 1);
            if pid.is_none() && tid != 0 {
                bump(&self.counters.unknown_process_threads, 1);
            }
        }
        self.emit(CaptureEvent::Thread(info));
    }

    pub(super) fn emit(&mut self, event: CaptureEvent) {
        bump(&self.counters.delivered, 1);
        (self.sink)(event);
    }
}

/// Which mappings to read from `/proc` when the capture thread starts.
pub(super) struct Synthesize {
    pub(super) proc_root: PathBuf,
    /// `None`: every process.
    pub(super) pid: Option<u32>,
    /// Their time stamp.
    pub(super) time: u64,
}

/// How [`Capture::stop`] reaches the capture thread.
#[derive(Debug)]
pub(super) struct StopSignal {
    /// Wakes the thread at once (polled with the rings).
    pub(super) pipe: WakePipe,
    /// Rules: set by `Capture::shutdown`, read by the capture thread every round, so it stops
    /// even when the program took the pipe. ATOMICS: `Relaxed`: a flag, nothing is published
    /// through it (the thread's join orders what follows).
    pub(super) requested: AtomicBool,
    /// The process is ending (its exit, or an exec): the last drain leaves the events enabled
    /// and their rings and descriptors to the kernel, which tears them down with the process.
    /// Disabling or closing an event of another thread costs an inter-processor interrupt
    /// each (the kernel runs the change on that thread's CPU; in a VM, an exit to the
    /// hypervisor), and a short-lived process paid about 0.3 ms for them at its exit. Set
    /// before `requested` by [`super::CaptureStopper::request_at_exit`]. ATOMICS: `Relaxed`:
    /// a thread that misses it disables and closes the events as usual, which is only slower.
    pub(super) at_exit: AtomicBool,
}

/// The shortest time between two anchors of a measured clock mapping: the capture thread takes
/// one before each drain at most this often (an anchor costs well under a microsecond).
const CLOCK_REFRESH: Duration = Duration::from_millis(1);

pub(super) struct Worker {
    pub(super) sys: Arc<dyn Sys>,
    pub(super) synthesize: Option<Synthesize>,
    /// The mappings read from `/proc` by [`Worker::prepare`], delivered by the capture thread
    /// first (once their build-ids are read, on that thread).
    pub(super) synthesized: Option<MapsSynthesis>,
    pub(super) slots: Vec<RingSlot>,
    /// Redirected events, with the index of the slot whose ring they write into.
    pub(super) members: Vec<(usize, GuardedFd)>,
    pub(super) stop: Arc<StopSignal>,
    pub(super) conv: PerfTimeConverter,
    pub(super) merger: Merger<Pending>,
    /// Scan `/proc` for the tasks alive at start (system-wide capture).
    pub(super) scan_proc: bool,
    /// ... with thread names (the switch source carries none).
    pub(super) scan_thread_names: bool,
    pub(super) slack: u64,
    pub(super) poll_ms: i32,
    pub(super) delivery: Delivery,
    pub(super) unsupported: Vec<Unsupported>,
}

impl Worker {
    /// What is known first, with the events already enabled: the unsupported sources
    /// (delivered), the `/proc` task scan and the mappings in `/proc` (read now, before the
    /// caller lets the program go on; delivered by the capture thread, which reads their
    /// build-ids first).
    pub(super) fn prepare(&mut self) {
        for u in std::mem::take(&mut self.unsupported) {
            self.delivery.emit(CaptureEvent::Unsupported(u));
        }
        if self.scan_proc {
            // The events are enabled: a task alive now is in the scan or, if it starts later,
            // announced by its FORK record. Rings fill meanwhile; nothing is delivered before.
            let c = &self.delivery.counters;
            let registry = &mut self.delivery.resolver.registry;
            match registry.scan(SCAN_TASK_LIMIT, self.scan_thread_names) {
                Ok(scan) => {
                    bump(&c.proc_scan_threads, scan.threads);
                    bump(
                        &c.proc_scan_failures,
                        scan.failures + u64::from(scan.truncated),
                    );
                }
                Err(_) => bump(&c.proc_scan_failures, 1),
            }
        }
        if let Some(s) = self.synthesize.take() {
            let found = MapsSynthesis::read_without_build_ids(&s.proc_root, s.pid, s.time);
            self.synthesized = Some(found);
        }
    }

    pub(super) fn run(mut self) -> Result<(), CaptureError> {
        if let Some(found) = self.synthesized.take() {
            self.deliver_maps(found);
        }
        let mut fds: Vec<libc::pollfd> = self
            .slots
            .iter()
            .map(|s| s.ring.fd().as_raw_fd())
            .chain([self.stop.pipe.read_end().raw()])
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let stop_index = fds.len() - 1;
        loop {
            if let Err(e) = self.sys.poll(&mut fds, self.poll_ms) {
                // Deliver what the rings and the pid resolver hold before giving up.
                self.finish(None);
                return Err(CaptureError::Poll(e));
            }
            // ATOMICS: see `StopSignal::requested`.
            let stopping = self.stop.requested.load(Ordering::Relaxed);
            let mut lost = self.stop.pipe.check().err();
            for (p, slot) in fds[..stop_index].iter_mut().zip(&self.slots) {
                if p.revents == 0 || p.fd < 0 {
                    continue;
                }
                // Something to act on: first make sure the number is still the event (a
                // number the program closed polls POLLNVAL; one it reused may poll readable).
                if let Err(l) = slot.ring.checked_fd() {
                    lost = lost.or(Some(l));
                    p.fd = -1;
                } else if p.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
                    // The monitored task is gone: drain below, then stop polling this ring
                    // (a hung-up descriptor would make every poll return at once).
                    p.fd = -1;
                }
            }
            if stopping || lost.is_some() {
                self.finish(lost.as_ref());
                return lost.map_or(Ok(()), |l| Err(CaptureError::DescriptorLost(l)));
            }
            self.drain_all();
            let delivery = &mut self.delivery;
            self.merger.release(|t, p| delivery.deliver(t, p));
            self.publish_merge_counters();
        }
    }

    /// Delivers the executable mappings read from `/proc` (see the module docs), with their
    /// build-ids.
    pub(super) fn deliver_maps(&mut self, mut found: MapsSynthesis) {
        let d = &mut self.delivery;
        found.resolve_build_ids(d.build_ids.get_or_insert_with(BuildIdCache::new));
        let c = &d.counters;
        bump(&c.mmaps_synthesized, found.maps.len() as u64);
        bump(
            &c.mmaps_not_synthesized,
            found.mappings_skipped + found.processes_skipped,
        );
        bump(&c.maps_unreadable, found.unreadable);
        bump(&c.maps_bad_lines, found.bad_lines);
        for m in found.maps {
            // Stamped before every kernel record; nothing is held yet, so the perf time given
            // to the pid resolver only has to be no later than theirs.
            d.deliver(0, Pending::of(CaptureEvent::Mmap(m)));
        }
    }

    /// The last round: disable the events (only those whose numbers are still ours; none when
    /// the process is ending, see `StopSignal::at_exit`), drain
    /// every ring (the mappings stay valid without the descriptors), deliver everything, then
    /// say why the capture stopped early, if it did.
    pub(super) fn finish(&mut self, lost: Option<&FdLost>) {
        // ATOMICS: see `StopSignal::at_exit`.
        let at_exit = self.stop.at_exit.load(Ordering::Relaxed);
        // At exit, what the process's last moments write stays in the rings, unread, as it
        // would not have been written had the events been disabled.
        let to_disable = if at_exit { 0 } else { usize::MAX };
        for fd in self
            .slots
            .iter()
            .map(|s| s.ring.guarded_fd())
            .chain(self.members.iter().map(|(_, m)| m))
            .take(to_disable)
        {
            // A failed disable only means records may still arrive; the final drain below
            // reads up to the head either way.
            if let Ok(fd) = fd.checked() {
                let _ = self.sys.ioctl(fd, PerfIoctl::Disable);
            }
        }
        self.drain_all();
        let delivery = &mut self.delivery;
        self.merger.flush(|t, p| delivery.deliver(t, p));
        self.delivery.release(true);
        self.publish_merge_counters();
        self.report_unreported_losses();
        if let Some(lost) = lost {
            let hint = CaptureError::DescriptorLost(*lost).to_string();
            self.delivery.emit(CaptureEvent::Unsupported(Unsupported {
                what: "context-switch capture".into(),
                errno: None,
                summary: hint.clone(),
                hint,
            }));
        }
        if at_exit {
            // Left to the kernel (see `StopSignal::at_exit`): neither unmapped nor closed.
            std::mem::forget(std::mem::take(&mut self.slots));
            std::mem::forget(std::mem::take(&mut self.members));
        }
    }

    /// After the last drain: the records each ring had no room for that no `PERF_RECORD_LOST`
    /// reported (the kernel writes one only before the next record that fits, and after the
    /// stop none comes), from its events' own counts (`PERF_FORMAT_LOST`): counted and
    /// delivered as a loss, one per ring, after every other event.
    fn report_unreported_losses(&mut self) {
        let mut lost: Vec<Option<u64>> = self
            .slots
            .iter()
            .map(|s| {
                let fd = s.ring.checked_fd().ok()?;
                lost_count(&*self.sys, fd)
            })
            .collect();
        for (ring, member) in &self.members {
            let count = member
                .checked()
                .ok()
                .and_then(|fd| lost_count(&*self.sys, fd));
            if let (Some(total), Some(count)) =
                (lost.get_mut(*ring).and_then(|l| l.as_mut()), count)
            {
                *total = total.saturating_add(count);
            }
        }
        let time = crate::clock::ticks();
        for (slot, lost) in self.slots.iter().zip(lost) {
            let unreported = lost.unwrap_or(0).saturating_sub(slot.reported_lost);
            if unreported == 0 {
                continue;
            }
            let counters = &self.delivery.counters;
            bump(&counters.lost_records, unreported);
            bump(&counters.lost_unreported, unreported);
            bump(&counters.lost_reports, 1);
            self.delivery.emit(CaptureEvent::Lost(Lost {
                time,
                cpu: slot.decoder.cpu(),
                kind: LostKind::Records,
                count: unreported,
            }));
        }
    }

    pub(super) fn publish_merge_counters(&self) {
        let c = &self.delivery.counters;
        // ATOMICS: statistics, see `Counters`.
        c.reordered
            .store(self.merger.reordered(), Ordering::Relaxed);
        c.late.store(self.merger.late(), Ordering::Relaxed);
    }

    pub(super) fn drain_all(&mut self) {
        // Before the rings are read: what they hold lies between the last anchor and this one.
        self.conv.refresh(CLOCK_REFRESH);
        if let PerfTimeConverter::MmapPage(_) = self.conv {
            // The kernel may update the parameters (e.g. TSC recalibration): follow it.
            if let Some(Ok(Some(c))) = self.slots.first().map(|s| s.ring.tsc_conversion()) {
                self.conv = PerfTimeConverter::MmapPage(c);
            }
        }
        let counters = self.delivery.counters.clone();
        let not_interned = self.delivery.stacks.not_interned;
        for (stream, slot) in self.slots.iter_mut().enumerate() {
            let now = self.conv.perf_now();
            let mut reader = slot.ring.reader();
            let mut since_release = 0u32;
            while let Some(next) = reader.next_record() {
                let raw = match next {
                    Ok(raw) => raw,
                    Err(e) => {
                        if let RingError::Corrupt { skipped, .. } = e {
                            bump(&counters.corrupt_bytes, skipped);
                        }
                        bump(&counters.parse_errors, 1);
                        continue;
                    }
                };
                match slot
                    .decoder
                    .decode(&raw, &self.conv, &mut self.delivery.stacks)
                {
                    Ok(Decoded::Event { perf_time, pending }) => {
                        if let Pending::Other(o) = &pending {
                            if let CaptureEvent::Lost(l) = &o.event {
                                bump(&counters.lost_reports, 1);
                                match l.kind {
                                    LostKind::Records => {
                                        bump(&counters.lost_records, l.count);
                                        slot.reported_lost =
                                            slot.reported_lost.saturating_add(l.count);
                                    }
                                    LostKind::Samples => bump(&counters.lost_samples, l.count),
                                }
                            }
                        }
                        self.merger.push(stream, perf_time, pending);
                    }
                    Ok(Decoded::Skipped(Skip::Unknown)) => bump(&counters.unknown_records, 1),
                    Ok(Decoded::Skipped(Skip::Throttle)) => bump(&counters.throttles, 1),
                    Ok(Decoded::Skipped(Skip::UnexpectedSample)) => {
                        bump(&counters.unexpected_samples, 1)
                    }
                    Ok(Decoded::Skipped(Skip::SwitchInPair | Skip::NoWaitPoint)) => {}
                    Ok(Decoded::Skipped(Skip::NoKnownTask)) => {
                        bump(&counters.unknown_task_switches, 1)
                    }
                    Ok(Decoded::Skipped(Skip::DataMapping)) => bump(&counters.data_mappings, 1),
                    Ok(Decoded::Skipped(Skip::Duplicate)) => bump(&counters.duplicates, 1),
                    Err(_) => bump(&counters.parse_errors, 1),
                }
                // Hand consumed space back to the kernel during long batches, not only at the
                // end, so a burst keeps flowing while it is decoded.
                since_release += 1;
                if since_release == 256 {
                    reader.release_consumed();
                    since_release = 0;
                }
            }
            reader.commit();
            self.merger
                .mark_caught_up(stream, now.saturating_sub(self.slack));
        }
        let refused = self.delivery.stacks.not_interned - not_interned;
        if refused > 0 {
            bump(&counters.stacks_not_interned, refused);
        }
    }
}
