//! The process of every switched thread: learning pids from the records as they pass, and
//! holding back an event whose thread's process is not known yet until a later record of that
//! thread says it.
//!
//! # Where a pid comes from
//!
//! In the order [`PidResolver::offer`] tries them:
//!
//! 1. The record itself: a `sched_switch` sample's own task is the outgoing thread
//!    ([`super::decode`]), `SWITCH_CPU_WIDE` carries both sides, FORK/EXIT/COMM/LBR samples
//!    carry (pid, tid). Every such fact is noted in the [`TaskRegistry`] on arrival, before the
//!    event is queued, so it also serves events already waiting.
//! 2. The registry: what earlier records taught it and the `/proc` scan made when the capture
//!    started ([`TaskRegistry::scan`]).
//! 3. `/proc/<tid>/status`, read once per unknown task ([`TaskRegistry::pid_of`]).
//!
//! # Deferral
//!
//! When a side of a context switch is still unknown (tid ≠ 0 and no answer above: the task is
//! gone, and its FORK was lost or it predates a truncated scan), the event is *held*, and so is
//! every later event, so that the output stays in timestamp order. The first fact about that
//! thread arriving later (typically its own switch-out, whose sample carries its pid, or its
//! EXIT record) resolves every held event naming it. A held event goes out when all its sides
//! are resolved, or unresolved once it is older than [`DEFER_WINDOW_NS`] of perf time behind
//! the newest event offered, once more than [`DEFER_MAX_EVENTS`] events are held, or at the end
//! of the capture ([`PidResolver::next_ready`] with `finished`). An unresolved side leaves with
//! pid `None`; the capture layer counts the thread and the writer marks it
//! ([`super::fxt::UNKNOWN_PROCESS_KOID`]).

use std::collections::VecDeque;

use super::ids::IdMap;

use super::decode::{known_pid, Pending};
use super::events::{CaptureEvent, SwitchEvent, SwitchSides, WakeupEvent};
use super::procfs::TaskRegistry;

/// How far (perf nanoseconds) the newest event may run ahead of a held one before the held one
/// goes out with its unknown side unresolved.
pub(crate) const DEFER_WINDOW_NS: u64 = 1_000_000_000;
/// At most this many events are held (the memory bound); beyond it the oldest goes out.
pub(crate) const DEFER_MAX_EVENTS: usize = 1 << 16;

/// A thread some held event waits for.
#[derive(Debug, Clone, Copy)]
struct Wait {
    /// Learnt since the wait began.
    pid: Option<u32>,
    /// Held events naming the thread.
    refs: usize,
}

#[derive(Debug)]
struct Held {
    perf_time: u64,
    pending: Pending,
    /// Unknown (outgoing, incoming) tids.
    waits: [Option<u32>; 2],
}

/// What deferral did, for the session's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct DeferralStats {
    /// Events held because a side's process was unknown.
    pub(crate) deferred: u64,
    /// Sides resolved while held.
    pub(crate) resolved: u64,
    /// Sides that went out unresolved.
    pub(crate) unresolved: u64,
}

/// Learns pids, fills them into context switches, and holds events back while needed (see the
/// module docs).
#[derive(Debug)]
pub(crate) struct PidResolver {
    /// Names and pids; the session reads names from it too.
    pub(crate) registry: TaskRegistry,
    held: VecDeque<Held>,
    waiting: IdMap<Wait>,
    newest: u64,
    window: u64,
    max_held: usize,
    stats: DeferralStats,
}

impl PidResolver {
    /// A resolver over `registry` with the default window and bound.
    pub(crate) fn new(registry: TaskRegistry) -> Self {
        Self::with_limits(registry, DEFER_WINDOW_NS, DEFER_MAX_EVENTS)
    }

    /// A resolver holding events at most `window` perf nanoseconds and `max_held` events.
    pub(crate) fn with_limits(registry: TaskRegistry, window: u64, max_held: usize) -> Self {
        Self {
            registry,
            held: VecDeque::new(),
            waiting: IdMap::default(),
            newest: 0,
            window,
            max_held: max_held.max(1),
            stats: DeferralStats::default(),
        }
    }

    /// The counters so far.
    pub(crate) fn stats(&self) -> DeferralStats {
        self.stats
    }

    /// Events held now.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.held.len()
    }

    /// Takes the next event (perf time `perf_time`, offered in timestamp order): learns what it
    /// says about pids, fills what is known into a context switch, and queues it. Take the
    /// events that may go out with [`Self::next_ready`].
    #[cfg(test)]
    pub(crate) fn offer(&mut self, perf_time: u64, pending: Pending) {
        if let Some(pending) = self.admit(perf_time, pending) {
            self.held.push_back(Held {
                perf_time,
                pending,
                waits: [None, None],
            });
        }
    }

    /// As [`Self::offer`], except that an event which may go out at once (nothing is held
    /// and its threads' processes are known: nearly always) is handed back instead of being
    /// queued and taken out again.
    pub(crate) fn admit(&mut self, perf_time: u64, mut pending: Pending) -> Option<Pending> {
        self.newest = self.newest.max(perf_time);
        self.learn(&pending);
        let mut waits = [None, None];
        for (wait, thread) in waits.iter_mut().zip(pending.threads_mut()) {
            let Some((tid, pid)) = thread else { continue };
            if pid.is_none() {
                *pid = self.registry.pid_of(tid);
            }
            if pid.is_none() {
                *wait = Some(tid);
            }
        }
        if waits.iter().any(Option::is_some) {
            self.stats.deferred += 1;
            for tid in waits.iter().flatten() {
                self.waiting
                    .entry(*tid)
                    .or_insert(Wait { pid: None, refs: 0 })
                    .refs += 1;
            }
        } else if self.held.is_empty() {
            return Some(pending);
        }
        self.held.push_back(Held {
            perf_time,
            pending,
            waits,
        });
        None
    }

    /// The oldest queued event, if it may go out: its unknown sides are resolved, or it waited
    /// long enough, or `finished` (end of capture: everything goes). Unresolved sides keep pid
    /// `None`.
    pub(crate) fn next_ready(&mut self, finished: bool) -> Option<Pending> {
        let front = self.held.front()?;
        let expired = finished
            || self.held.len() > self.max_held
            || front.perf_time.saturating_add(self.window) <= self.newest;
        let blocked = front
            .waits
            .iter()
            .flatten()
            .any(|tid| self.waiting.get(tid).is_some_and(|w| w.pid.is_none()));
        if blocked && !expired {
            return None;
        }
        let Held {
            mut pending, waits, ..
        } = self.held.pop_front()?;
        for (side, tid) in waits.iter().enumerate() {
            let Some(tid) = *tid else { continue };
            let pid = match self.waiting.get_mut(&tid) {
                Some(w) => {
                    w.refs -= 1;
                    let pid = w.pid;
                    if w.refs == 0 {
                        self.waiting.remove(&tid);
                    }
                    pid
                }
                None => None,
            };
            match pid {
                Some(_) => self.stats.resolved += 1,
                None => self.stats.unresolved += 1,
            }
            if let Some((_, slot)) = &mut pending.threads_mut()[side] {
                **slot = pid;
            }
        }
        Some(pending)
    }

    /// Notes every (pid, tid) fact `pending` carries.
    fn learn(&mut self, pending: &Pending) {
        let mut facts: [Option<(u32, u32)>; 2] = [None, None];
        let event = match pending {
            Pending::Switch(cs, _) => {
                facts = switch_facts(cs);
                None
            }
            Pending::Wakeup(w, _) => {
                facts = wakeup_facts(w);
                None
            }
            Pending::Sample(s, _) => {
                facts[0] = s.pid.map(|p| (p, s.tid));
                None
            }
            Pending::WaitPoint { .. } => None,
            Pending::Other(o) => Some(&o.event),
        };
        match event {
            None => {}
            Some(CaptureEvent::ContextSwitch(cs)) => facts = switch_facts(cs),
            Some(CaptureEvent::Wakeup(w)) => facts = wakeup_facts(w),
            Some(CaptureEvent::Sample(s)) => facts[0] = s.pid.map(|p| (p, s.tid)),
            // The parent is the task that forked (`current`); for EXIT the kernel fills
            // `ptid` with a pid, so only the task's own pair is used there.
            Some(CaptureEvent::Fork(f)) => {
                facts = [Some((f.pid, f.tid)), Some((f.ppid, f.ptid))];
                self.registry.inherit_name(f.tid, f.ptid);
            }
            Some(CaptureEvent::Exit(x)) => facts[0] = Some((x.pid, x.tid)),
            Some(CaptureEvent::Comm(c)) => facts[0] = Some((c.pid, c.tid)),
            Some(CaptureEvent::Branch(b)) => facts[0] = Some((b.pid, b.tid)),
            // A kernel MMAP2 names the mapping task; a synthesized one comes from /proc.
            Some(CaptureEvent::Mmap(m)) if !m.synthesized => facts[0] = Some((m.pid, m.tid)),
            Some(
                CaptureEvent::Mmap(_)
                | CaptureEvent::Lost(_)
                | CaptureEvent::Thread(_)
                | CaptureEvent::Stack(_)
                | CaptureEvent::KernelSymbol(_)
                | CaptureEvent::Unsupported(_),
            ) => {}
        }
        for (pid, tid) in facts.into_iter().flatten() {
            let Some(pid) = known_pid(pid) else { continue };
            if tid == 0 || tid == u32::MAX {
                continue;
            }
            self.registry.note_thread(pid, tid);
            if self.waiting.is_empty() {
                continue;
            }
            if let Some(w) = self.waiting.get_mut(&tid) {
                w.pid.get_or_insert(pid);
            }
        }
    }
}

/// The (pid, tid) facts a context switch carries: its known sides.
fn switch_facts(cs: &SwitchEvent) -> [Option<(u32, u32)>; 2] {
    let [prev, next] = sides(cs);
    [
        cs.prev_pid.filter(|_| prev).map(|p| (p, cs.prev_tid)),
        cs.next_pid.filter(|_| next).map(|p| (p, cs.next_tid)),
    ]
}

/// The (pid, tid) facts a wake-up carries: the waker's (from the sample), and the woken
/// thread's once known.
fn wakeup_facts(w: &WakeupEvent) -> [Option<(u32, u32)>; 2] {
    [
        w.waker_pid.map(|p| (p, w.waker_tid)),
        w.pid.map(|p| (p, w.tid)),
    ]
}

/// Which sides of `cs` name a thread: `[outgoing, incoming]`.
fn sides(cs: &SwitchEvent) -> [bool; 2] {
    [
        cs.sides != SwitchSides::IncomingOnly,
        cs.sides != SwitchSides::OutgoingOnly,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::events::{TaskExit, TaskFork};
    use crate::capture::state::LinuxThreadState;

    fn switch(time: u64, prev: (u32, Option<u32>), next: u32) -> Pending {
        Pending::of(CaptureEvent::ContextSwitch(SwitchEvent {
            time,
            cpu: 0,
            prev_tid: prev.0,
            prev_pid: prev.1,
            next_tid: next,
            next_pid: (next == 0).then_some(0),
            prev_state: LinuxThreadState::Blocked,
            uninterruptible: false,
            stack: None,
            prev_prio: 120,
            next_prio: 120,
            sides: SwitchSides::Both,
        }))
    }

    fn resolver() -> PidResolver {
        // No /proc: every lookup misses, as for a task that is gone.
        PidResolver::with_limits(TaskRegistry::new("/nonexistent"), 1000, 100)
    }

    fn ready(r: &mut PidResolver, finished: bool) -> Vec<SwitchEvent> {
        std::iter::from_fn(|| r.next_ready(finished))
            .filter_map(|p| match p.into_event() {
                CaptureEvent::ContextSwitch(cs) => Some(cs),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn known_events_pass_straight_through() {
        let mut r = resolver();
        r.offer(1, switch(1, (0, Some(0)), 0));
        r.offer(2, switch(2, (7, Some(5)), 0));
        let out = ready(&mut r, false);
        assert_eq!(out.len(), 2);
        assert_eq!(out[1].prev_pid, Some(5));
        assert_eq!(r.stats(), DeferralStats::default());
    }

    #[test]
    fn a_sample_pid_teaches_the_registry_for_later_switch_ins() {
        let mut r = resolver();
        // 42 switches out: the sample says it is in process 40.
        r.offer(10, switch(10, (42, Some(40)), 0));
        // ... and comes back: resolved from what the switch-out taught, no wait.
        r.offer(20, switch(20, (0, Some(0)), 42));
        let out = ready(&mut r, false);
        assert_eq!(out[1].next_pid, Some(40));
        assert_eq!(r.stats().deferred, 0);
    }

    #[test]
    fn a_fork_record_resolves_a_later_incoming_thread() {
        let mut r = resolver();
        r.offer(
            5,
            Pending::of(CaptureEvent::Fork(TaskFork {
                time: 5,
                pid: 300,
                ppid: 300,
                tid: 301,
                ptid: 300,
            })),
        );
        r.offer(6, switch(6, (0, Some(0)), 301));
        let out = ready(&mut r, false);
        assert_eq!(out[0].next_pid, Some(300));
        assert_eq!(r.registry.known_pid(300), Some(300), "the parent too");
        assert_eq!(r.stats().deferred, 0);
    }

    #[test]
    fn a_gone_thread_waits_for_its_own_switch_out() {
        let mut r = resolver();
        // 77 (gone from /proc, no FORK seen) is switched in: held, and so is what follows.
        r.offer(100, switch(100, (0, Some(0)), 77));
        r.offer(110, switch(110, (5, Some(5)), 0));
        assert!(ready(&mut r, false).is_empty(), "held in order");
        assert_eq!(r.held(), 2);
        // Its switch-out carries its pid (sample): everything goes, resolved, in order.
        r.offer(120, switch(120, (77, Some(70)), 0));
        let out = ready(&mut r, false);
        assert_eq!(
            out.iter().map(|c| c.time).collect::<Vec<_>>(),
            vec![100, 110, 120]
        );
        assert_eq!(out[0].next_pid, Some(70));
        assert_eq!(
            r.stats(),
            DeferralStats {
                deferred: 1,
                resolved: 1,
                unresolved: 0
            }
        );
    }

    #[test]
    fn an_exit_record_resolves_a_held_thread() {
        let mut r = resolver();
        r.offer(100, switch(100, (0, Some(0)), 88));
        r.offer(
            105,
            Pending::of(CaptureEvent::Exit(TaskExit {
                time: 105,
                pid: 80,
                ppid: 1,
                tid: 88,
                ptid: 1,
            })),
        );
        let out = ready(&mut r, false);
        assert_eq!(out[0].next_pid, Some(80));
    }

    #[test]
    fn unresolved_events_go_out_after_the_window_or_at_the_end() {
        let mut r = resolver();
        r.offer(100, switch(100, (0, Some(0)), 99));
        r.offer(600, switch(600, (0, Some(0)), 98));
        assert!(ready(&mut r, false).is_empty());
        // 1000 ns after the first: it goes, unresolved; the second still waits.
        r.offer(1100, switch(1100, (3, Some(3)), 0));
        let out = ready(&mut r, false);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].next_tid, out[0].next_pid), (99, None));
        // The end of the capture releases everything.
        let out = ready(&mut r, true);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].next_pid, None);
        assert_eq!(r.held(), 0);
        assert_eq!(r.stats().unresolved, 2);
        assert!(r.waiting.is_empty(), "no wait outlives its events");
    }

    #[test]
    fn the_held_queue_is_bounded() {
        let mut r = PidResolver::with_limits(TaskRegistry::new("/nonexistent"), u64::MAX, 3);
        r.offer(1, switch(1, (0, Some(0)), 55));
        for t in 2..=4 {
            r.offer(t, switch(t, (0, Some(0)), 0));
        }
        let out = ready(&mut r, false);
        assert_eq!(
            out.len(),
            4,
            "the oldest went out unresolved, the rest followed"
        );
        assert_eq!(out[0].next_pid, None);
    }

    #[test]
    fn a_dead_tasks_minus_one_pid_teaches_nothing() {
        let mut r = resolver();
        r.offer(1, switch(1, (0, Some(0)), 66));
        r.offer(
            2,
            Pending::of(CaptureEvent::Exit(TaskExit {
                time: 2,
                pid: u32::MAX,
                ppid: 1,
                tid: 66,
                ptid: 1,
            })),
        );
        assert!(ready(&mut r, false).is_empty());
        assert_eq!(r.registry.known_pid(66), None);
    }
}
