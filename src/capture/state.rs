//! Linux task states and priorities → the FXT Context Switch record's fields.
//!
//! # Outgoing thread state
//!
//! FXT thread states (Zircon `ZX_THREAD_STATE_*`): 0 new, 1 running, 2 suspended, 3 blocked,
//! 4 dying, 5 dead. The states are chosen for what Perfetto's importer shows
//! (`IdForOutgoingThreadState` in its `fuchsia_trace_parser.cc`: new and running → `R`,
//! blocked → `S`, suspended → `T`, dying → `Z`, dead → `X`), so a thread switched out
//! runnable is written *running*, the state the spec's table leaves to the incoming thread:
//! Perfetto reads it as runnable, which is what a preempted thread is.
//!
//! `sched:sched_switch` reports `prev_state` as a bit set whose letters the tracepoint's
//! `print fmt` lists (`{ 0x01, "S" }, …`); the bit just above the highest letter is the
//! "preempted" marker (`R+`). The letters are read from the format file when it has them
//! ([`TaskStateBits::from_print_fmt`]), else the table below (kernels ≥ 4.14) is used.
//!
//! | Linux `prev_state` | meaning | FXT state | Perfetto shows |
//! |---|---|---|---|
//! | preempt marker set (`R+`, 0x100) | preempted while runnable | 1 running | `R` (Runnable) |
//! | 0 (`R`) | runnable, yielded | 1 running | `R` (Runnable) |
//! | `S` 0x01 | interruptible sleep | 3 blocked | `S` (Sleeping) |
//! | `D` 0x02 | uninterruptible sleep | 3 blocked, marked uninterruptible | `S` (Sleeping) |
//! | `T` 0x04 | stopped (a signal) | 2 suspended | `T` (Stopped) |
//! | `t` 0x08 | stopped by a tracer | 2 suspended | `T` (Stopped) |
//! | `P` 0x40 | parked | 3 blocked | `S` (Sleeping) |
//! | `I` 0x80 | idle kernel thread | 3 blocked | `S` (Sleeping) |
//! | `Z` 0x20 (`EXIT_ZOMBIE`) | exited, not yet reaped | 4 dying | `Z` (Zombie) |
//! | `X` 0x10 (`EXIT_DEAD`) | exited and reaped | 5 dead | `X` (Dead) |
//! | any other set bits | — | 3 blocked | `S` (Sleeping) |
//!
//! Precedence when several bits are set: preempt marker, then `X`, then `Z`, then `T`/`t`,
//! then blocked. FXT has no state for an uninterruptible sleep: a `D` switch keeps state 3
//! and is marked ([`TaskStateBits::uninterruptible`]; the writer gives that switch a
//! `linux_state` argument, see [`super::fxt`]), so fxtrace's readers tell `D` from `S` while
//! every other switch stays a two-word record.
//!
//! `PERF_RECORD_SWITCH(_CPU_WIDE)` records carry no state, only
//! `PERF_RECORD_MISC_SWITCH_OUT_PREEMPT` (the task was still runnable): preempted → 1
//! running, otherwise → 3 blocked ([`state_after_switch_out`]).
//!
//! # Priorities
//!
//! FXT has an 8-bit priority per side of a switch. fxtrace stores the kernel's `prio` value
//! unchanged ([`fxt_priority`]): 0–99 real-time (lower is more urgent, `prio = 99 -
//! rt_priority`), 100–139 normal (`120 + nice`), clamped to 0–254. 255
//! ([`PRIORITY_UNKNOWN`]) means the source gave no priority (switch records).

use std::fmt::Write as _;

/// An FXT thread state (`ZX_THREAD_STATE_*` numbering).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum LinuxThreadState {
    /// 0.
    New = 0,
    /// 1: runnable (for an outgoing thread: preempted, or yielded).
    Running = 1,
    /// 2: stopped (a signal or a tracer).
    Suspended = 2,
    /// 3: waiting (sleeping, parked).
    Blocked = 3,
    /// 4: exiting (zombie).
    Dying = 4,
    /// 5: gone.
    Dead = 5,
}

impl LinuxThreadState {
    /// The FXT field value.
    pub const fn fxt_value(self) -> u8 {
        self as u8
    }
}

/// The priority value written when the source has none.
pub const PRIORITY_UNKNOWN: u8 = 255;

/// A kernel `prio` (0–139) as FXT's 8-bit priority: the same number, clamped to 0–254.
pub fn fxt_priority(kernel_prio: i64) -> u8 {
    kernel_prio.clamp(0, 254) as u8
}

/// The outgoing state implied by a `PERF_RECORD_SWITCH(_CPU_WIDE)` switch-out.
pub fn state_after_switch_out(preempted: bool) -> LinuxThreadState {
    if preempted {
        LinuxThreadState::Running
    } else {
        LinuxThreadState::Blocked
    }
}

/// The `prev_state` letters of a kernel and its preempt marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskStateBits {
    letters: Vec<(u64, String)>,
    preempt: u64,
    /// The bits of `X` (dead), `Z` (dying), `T` and `t` (stopped) and `D` (uninterruptible),
    /// 0 when the kernel has no such letter: looked up once here, not by name at every switch
    /// ([`Self::thread_state`]).
    dead: u64,
    dying: u64,
    stopped: u64,
    uninterruptible: u64,
}

impl TaskStateBits {
    /// The letters of kernels ≥ 4.14 (`include/trace/events/sched.h`).
    pub fn kernel_default() -> Self {
        let letters = [
            (0x01, "S"),
            (0x02, "D"),
            (0x04, "T"),
            (0x08, "t"),
            (0x10, "X"),
            (0x20, "Z"),
            (0x40, "P"),
            (0x80, "I"),
        ];
        Self::with_letters(
            letters.iter().map(|&(b, l)| (b, l.to_owned())).collect(),
            0x100,
        )
    }

    fn with_letters(letters: Vec<(u64, String)>, preempt: u64) -> Self {
        let bit = |letter: &str| {
            letters
                .iter()
                .find(|(_, l)| l == letter)
                .map_or(0, |&(b, _)| b)
        };
        Self {
            dead: bit("X"),
            dying: bit("Z"),
            stopped: bit("T") | bit("t"),
            uninterruptible: bit("D"),
            letters,
            preempt,
        }
    }

    /// Reads the `{ value, "letter" }` pairs of `__print_flags` in a `print fmt`; the preempt
    /// marker is the bit above the highest one. `None` if the format lists none.
    pub fn from_print_fmt(print_fmt: &str) -> Option<Self> {
        let mut letters = Vec::new();
        let mut rest = print_fmt;
        while let Some(open) = rest.find('{') {
            rest = &rest[open + 1..];
            if let Some(pair) = parse_flag_pair(rest) {
                letters.push(pair);
            }
        }
        let highest = letters.iter().map(|&(bit, _)| bit).max()?;
        let preempt = highest.checked_shl(1).filter(|&p| p > highest)?;
        Some(Self::with_letters(letters, preempt))
    }

    /// The preempt marker bit.
    pub fn preempt_bit(&self) -> u64 {
        self.preempt
    }

    /// The bit of a letter (`"S"`).
    pub fn bit(&self, letter: &str) -> Option<u64> {
        self.letters
            .iter()
            .find(|(_, l)| l == letter)
            .map(|&(b, _)| b)
    }

    /// The FXT state of a thread switched out with `prev_state` (see the module table).
    pub fn thread_state(&self, prev_state: i64) -> LinuxThreadState {
        let state = prev_state as u64;
        if state & self.preempt != 0 {
            return LinuxThreadState::Running;
        }
        let flags = state & (self.preempt - 1);
        if flags == 0 {
            LinuxThreadState::Running
        } else if flags & self.dead != 0 {
            LinuxThreadState::Dead
        } else if flags & self.dying != 0 {
            LinuxThreadState::Dying
        } else if flags & self.stopped != 0 {
            LinuxThreadState::Suspended
        } else {
            LinuxThreadState::Blocked
        }
    }

    /// Whether a thread switched out with `prev_state` went to sleep uninterruptibly (`D`):
    /// blocked ([`Self::thread_state`]) with the `D` bit set.
    pub fn uninterruptible(&self, prev_state: i64) -> bool {
        let state = prev_state as u64;
        state & self.uninterruptible != 0
            && self.thread_state(prev_state) == LinuxThreadState::Blocked
    }

    /// `prev_state` as the kernel prints it: `R`, `R+`, `S`, `D|K`, ….
    pub fn describe(&self, prev_state: i64) -> String {
        let state = prev_state as u64;
        let flags = state & (self.preempt - 1);
        let mut out = String::new();
        for (bit, letter) in &self.letters {
            if flags & bit != 0 {
                if !out.is_empty() {
                    out.push('|');
                }
                out.push_str(letter);
            }
        }
        let unknown = flags & !self.letters.iter().fold(0, |acc, (b, _)| acc | b);
        if unknown != 0 {
            let _ = write!(out, "{}{unknown:#x}", if out.is_empty() { "" } else { "|" });
        }
        if out.is_empty() {
            out.push('R');
        }
        if state & self.preempt != 0 {
            out.push('+');
        }
        out
    }
}

/// Parses ` 0x00000001, "S" }` (hex or decimal value).
fn parse_flag_pair(s: &str) -> Option<(u64, String)> {
    let (value, rest) = s.split_once(',')?;
    let value = value.trim();
    let value = match value.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok()?,
        None => value.parse().ok()?,
    };
    let rest = rest.trim_start().strip_prefix('"')?;
    let (letter, rest) = rest.split_once('"')?;
    rest.trim_start()
        .starts_with('}')
        .then(|| (value, letter.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The print fmt of `sched_switch` on this project's 6.18 kernel.
    const PRINT_FMT: &str = r#""prev_comm=%s prev_pid=%d prev_prio=%d prev_state=%s%s ==> next_comm=%s next_pid=%d next_prio=%d", REC->prev_comm, REC->prev_pid, REC->prev_prio, (REC->prev_state & ((((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) - 1)) ? __print_flags(REC->prev_state & ((((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) - 1), "|", { 0x00000001, "S" }, { 0x00000002, "D" }, { 0x00000004, "T" }, { 0x00000008, "t" }, { 0x00000010, "X" }, { 0x00000020, "Z" }, { 0x00000040, "P" }, { 0x00000080, "I" }) : "R", REC->prev_state & (((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) ? "+" : "", REC->next_comm, REC->next_pid, REC->next_prio"#;

    #[test]
    fn print_fmt_letters_match_the_default_table() {
        let parsed = TaskStateBits::from_print_fmt(PRINT_FMT).unwrap();
        assert_eq!(parsed, TaskStateBits::kernel_default());
        assert_eq!(parsed.preempt_bit(), 0x100);
        assert!(TaskStateBits::from_print_fmt("\"no flags here\"").is_none());
    }

    #[test]
    fn older_decimal_print_flags() {
        let fmt = r#"__print_flags(REC->prev_state & (2048-1), "|", { 1, "S"} , { 2, "D" }, { 4, "T" }, { 8, "t" }, { 16, "Z" }, { 32, "X" }, { 64, "x" }, { 128, "K" }, { 256, "W" }, { 512, "P" }, { 1024, "N" }) : "R""#;
        let bits = TaskStateBits::from_print_fmt(fmt).unwrap();
        assert_eq!(bits.preempt_bit(), 2048);
        assert_eq!(bits.thread_state(16), LinuxThreadState::Dying);
        assert_eq!(bits.thread_state(32), LinuxThreadState::Dead);
        assert_eq!(bits.thread_state(2048), LinuxThreadState::Running);
        assert_eq!(bits.thread_state(4), LinuxThreadState::Suspended);
        assert!(bits.uninterruptible(2) && !bits.uninterruptible(1));
    }

    #[test]
    fn mapping_table() {
        let b = TaskStateBits::kernel_default();
        // (prev_state, FXT state, uninterruptible, as the kernel prints it): the module table.
        let cases: [(i64, LinuxThreadState, bool, &str); 14] = [
            (0, LinuxThreadState::Running, false, "R"),
            (0x100, LinuxThreadState::Running, false, "R+"),
            (0x01, LinuxThreadState::Blocked, false, "S"),
            (0x02, LinuxThreadState::Blocked, true, "D"),
            (0x04, LinuxThreadState::Suspended, false, "T"),
            (0x08, LinuxThreadState::Suspended, false, "t"),
            (0x40, LinuxThreadState::Blocked, false, "P"),
            (0x80, LinuxThreadState::Blocked, false, "I"),
            (0x20, LinuxThreadState::Dying, false, "Z"),
            (0x10, LinuxThreadState::Dead, false, "X"),
            (0x30, LinuxThreadState::Dead, false, "X|Z"),
            (0x101, LinuxThreadState::Running, false, "S+"),
            (0x102, LinuxThreadState::Running, false, "D+"),
            (0x06, LinuxThreadState::Suspended, false, "D|T"),
        ];
        for (raw, state, uninterruptible, text) in cases {
            assert_eq!(b.thread_state(raw), state, "prev_state {raw:#x}");
            assert_eq!(b.uninterruptible(raw), uninterruptible, "{raw:#x}");
            assert_eq!(b.describe(raw), text);
        }
        assert_eq!(LinuxThreadState::Suspended.fxt_value(), 2);
        assert_eq!(LinuxThreadState::Blocked.fxt_value(), 3);
        assert_eq!(LinuxThreadState::Dying.fxt_value(), 4);
        assert_eq!(LinuxThreadState::Dead.fxt_value(), 5);
        assert_eq!(LinuxThreadState::Running.fxt_value(), 1);
        assert_eq!(state_after_switch_out(true), LinuxThreadState::Running);
        assert_eq!(state_after_switch_out(false), LinuxThreadState::Blocked);
    }

    #[test]
    fn priorities() {
        assert_eq!(fxt_priority(120), 120);
        assert_eq!(fxt_priority(0), 0);
        assert_eq!(fxt_priority(139), 139);
        assert_eq!(fxt_priority(-1), 0, "deadline tasks report -1");
        assert_eq!(fxt_priority(1000), 254);
        assert_eq!(PRIORITY_UNKNOWN, 255);
    }
}
