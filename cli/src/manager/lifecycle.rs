//! The recorder's hold on what it starts and leaves behind: the traced command runs in its
//! own process group (signalled as a whole, as a shell signals a job), dies with the recorder
//! (`PR_SET_PDEATHSIG`), gets the terminal while it runs when the recorder had it; session
//! directories of recorders that are gone are removed. The recorder raises its own
//! descriptor limit (a manager holds three per provider) and the command gets the one it had.
//!
//! Under `--preload` with wait points or CPU samples, the command inherits the kernel symbols
//! its processes name kernel frames with ([`share_kernel_symbols`]).
//!
//! Rules: everything run between `fork` and `exec` (in [`prepare_command`]'s and
//! [`share_kernel_symbols`]' `pre_exec`) is async-signal-safe (`prctl`, `getppid`, `signal`,
//! `tcsetpgrp`, `getpid`, `raise`, `setrlimit`, `fcntl`).

use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use nix::sys::signal::Signal;
use nix::unistd::Pid;

use super::recorder::SESSION_DIR_PREFIX;

/// The signal the command gets when the recorder dies (`PR_SET_PDEATHSIG`): the one it
/// would get from a stop, so that it can still flush its trace.
pub const DEATH_SIGNAL: Signal = Signal::SIGTERM;

/// True when standard input is a terminal whose foreground process group is ours: the
/// command should then get the terminal (keyboard signals, reads) while it runs.
pub fn terminal_is_ours() -> bool {
    // SAFETY: isatty, tcgetpgrp and getpgrp take an fd or nothing and touch no memory.
    unsafe { libc::isatty(0) == 1 && libc::tcgetpgrp(0) == libc::getpgrp() }
}

/// A descriptor limit (`RLIMIT_NOFILE`) raised by [`raise_descriptor_limit`].
#[derive(Debug, Clone, Copy)]
pub struct DescriptorLimit {
    /// The soft limit now.
    pub soft: u64,
    /// The limit before, for what this process starts ([`prepare_command`]).
    before: Option<libc::rlimit>,
}

/// Descriptors a provider holds in a manager (its connection, its FIFO end, its buffer's
/// memfd while it is mapped), and those kept for everything else.
const FDS_PER_PROVIDER: u64 = 3;
const FDS_RESERVED: u64 = 256;

impl DescriptorLimit {
    /// Providers a manager can hold within this limit: at least 16, at most `most`.
    pub fn providers(&self, most: usize) -> usize {
        let usable = self.soft.saturating_sub(FDS_RESERVED) / FDS_PER_PROVIDER;
        usize::try_from(usable)
            .unwrap_or(usize::MAX)
            .clamp(16, most)
    }
}

/// Raise this process's soft descriptor limit to its hard limit: a manager holds three
/// descriptors per provider (its connection, its FIFO and its buffer), and hundreds of
/// processes traced at once are common under `--preload`.
pub fn raise_descriptor_limit() -> DescriptorLimit {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the limit into `limit`, a valid local.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return DescriptorLimit {
            soft: 1024,
            before: None,
        };
    }
    let raised = libc::rlimit {
        rlim_cur: limit.rlim_max,
        rlim_max: limit.rlim_max,
    };
    let raise = || {
        // SAFETY: setrlimit reads `raised`, a valid local.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 }
    };
    if limit.rlim_cur < limit.rlim_max && raise() {
        return DescriptorLimit {
            soft: raised.rlim_cur,
            before: Some(limit),
        };
    }
    DescriptorLimit {
        soft: limit.rlim_cur,
        before: None,
    }
}

/// Sets up `cmd` to run in a new process group, to get [`DEATH_SIGNAL`] when the recorder's
/// spawning thread ends, and (with `take_terminal`) to become the terminal's foreground group,
/// as a shell runs a job. Ctrl-C then reaches the command's whole group (and not the
/// recorder, which stops when the command exits). The command gets the descriptor limit the
/// recorder had before `limit` raised it: a program's behaviour may depend on it (one that
/// closes every number up to the limit, say).
pub fn prepare_command(cmd: &mut Command, take_terminal: bool, limit: DescriptorLimit) {
    // SAFETY: getpid has no preconditions.
    let recorder = unsafe { libc::getpid() };
    cmd.process_group(0);
    let hook = move || {
        // SAFETY: prctl(PR_SET_PDEATHSIG) takes integers only. getppid, signal, getpid,
        // tcsetpgrp and raise are async-signal-safe and take no pointers; setrlimit (a system
        // call) reads a copy of the limit captured by the closure.
        unsafe {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                DEATH_SIGNAL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            // The recorder died before the prctl: there is no one to deliver it.
            if libc::getppid() != recorder {
                libc::raise(DEATH_SIGNAL as libc::c_int);
            }
            if let Some(before) = limit.before {
                if libc::setrlimit(libc::RLIMIT_NOFILE, &before) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if take_terminal {
                // A background group calling tcsetpgrp gets SIGTTOU unless it ignores it.
                let old = libc::signal(libc::SIGTTOU, libc::SIG_IGN);
                libc::tcsetpgrp(0, libc::getpid());
                libc::signal(libc::SIGTTOU, old);
            }
        }
        Ok(())
    };
    // SAFETY: the hook runs between fork and exec and calls only async-signal-safe functions
    // (see above); it allocates nothing.
    unsafe {
        cmd.pre_exec(hook);
    }
}

/// Reads `/proc/kallsyms` once for every process of the command (under `--preload`, each
/// would read it at its start: 40 ms of system time and a parse), shares it as a sealed memfd
/// the recorder keeps ([`KernelSymbols::share`]: processes open it through
/// `/proc/PID/fd/N`, which the kernel allows only to those that may read the recorder's
/// descriptors), and names it to the preload object ([`SHARED_SYMBOLS_ENV`]). The table
/// lives as long as the value returned. `None` where `/proc/kallsyms` cannot be read: each
/// process then says why in its own trace, as it would without this.
///
/// [`KernelSymbols::share`]: fxtrace::capture::KernelSymbols::share
/// [`SHARED_SYMBOLS_ENV`]: fxtrace::capture::SHARED_SYMBOLS_ENV
pub fn share_kernel_symbols(cmd: &mut Command) -> Option<fxtrace::capture::SharedSymbols> {
    use fxtrace::capture::{KernelSymbols, SHARED_SYMBOLS_ENV};
    let symbols = KernelSymbols::read(Path::new("/proc/kallsyms")).ok()?;
    let shared = symbols.share().ok()?;
    cmd.env(SHARED_SYMBOLS_ENV, shared.reference().to_string());
    Some(shared)
}

/// Makes the recorder's own process group the terminal's foreground again (after
/// [`prepare_command`] with `take_terminal`).
pub fn take_back_terminal() {
    // SAFETY: signal, tcsetpgrp and getpgrp take integers only; SIGTTOU is ignored around the
    // call so that a background group may make itself the foreground, then restored.
    unsafe {
        let old = libc::signal(libc::SIGTTOU, libc::SIG_IGN);
        libc::tcsetpgrp(0, libc::getpgrp());
        libc::signal(libc::SIGTTOU, old);
    }
}

/// Sends `signal` to the process group `pgid` (the command and everything it started that
/// stayed in its group). False when no process of the group is left.
pub fn signal_group(pgid: u32, signal: Signal) -> bool {
    let Ok(pgid) = i32::try_from(pgid) else {
        return false;
    };
    nix::sys::signal::killpg(Pid::from_raw(pgid), signal).is_ok()
}

/// A watchdog process that signals the command's process group when the recorder dies
/// (even of SIGKILL): [`DEATH_SIGNAL`], then SIGKILL after [`super::recorder::TERM_GRACE`].
/// `PR_SET_PDEATHSIG` alone reaches only the command itself, not what it started. Disarmed
/// (and reaped) on drop.
#[derive(Debug)]
pub struct GroupGuard {
    /// The recorder's end of the socket pair the watchdog waits on (close-on-exec, so no
    /// command holds it; a socket, so that disarming a watchdog that was killed raises no
    /// SIGPIPE).
    arm: Option<std::os::fd::OwnedFd>,
    pid: libc::pid_t,
}

impl GroupGuard {
    /// Forks the watchdog for process group `pgid`.
    pub fn new(pgid: u32) -> std::io::Result<Self> {
        use std::os::fd::{FromRawFd, OwnedFd};
        let pgid = libc::pid_t::try_from(pgid)
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        let mut fds = [0; 2];
        // SAFETY: socketpair writes two new descriptors into the array.
        if unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        } != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: both descriptors are new and owned here only.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let grace = super::recorder::TERM_GRACE;
        let pause = libc::timespec {
            tv_sec: grace.as_secs() as libc::time_t,
            tv_nsec: libc::c_long::from(grace.subsec_nanos() as i32),
        };
        let r = read.as_raw_fd();
        let limit = descriptor_limit();
        // SAFETY: the child runs only async-signal-safe calls on integers and stack locals
        // (close_range, close, read, kill, nanosleep, _exit) and never returns into Rust code;
        // the parent only reads the result.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: see above; every descriptor but the watchdog's end (and the standard
            // ones) is closed first, so the watchdog holds no socket or file of the recorder's.
            unsafe {
                close_all_but(3, &[r], limit);
                let mut byte = 0u8;
                loop {
                    let n = libc::read(r, (&mut byte as *mut u8).cast(), 1);
                    if n == 1 {
                        // Disarmed: the recorder ended its command itself.
                        libc::_exit(0);
                    }
                    if n == 0 || *libc::__errno_location() != libc::EINTR {
                        break;
                    }
                }
                if libc::kill(-pgid, DEATH_SIGNAL as libc::c_int) == 0 {
                    libc::nanosleep(&pause, std::ptr::null_mut());
                    libc::kill(-pgid, libc::SIGKILL);
                }
                libc::_exit(0);
            }
        }
        drop(read);
        Ok(Self {
            arm: Some(write),
            pid,
        })
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(arm) = self.arm.take() {
            let _ = nix::sys::socket::send(
                arm.as_raw_fd(),
                b"d",
                nix::sys::socket::MsgFlags::MSG_NOSIGNAL,
            );
        }
        let mut status = 0;
        // SAFETY: waits for our own child; the status is written to a live local.
        unsafe {
            libc::waitpid(self.pid, &mut status, 0);
        }
    }
}

/// The pid in a session directory's name (`fxtrace-session-<pid>-XXXXXX`).
fn owner_pid(name: &str) -> Option<i32> {
    let rest = name.strip_prefix(SESSION_DIR_PREFIX)?;
    let (pid, _) = rest.split_once('-')?;
    pid.parse().ok().filter(|&p| p > 0)
}

/// Removes the session directories in `base` that belong to this user and whose recorder
/// (the pid in their name) no longer exists: what a recorder killed by SIGKILL left behind.
/// Returns the directories removed. A directory whose pid is alive (even if reused) is kept.
pub fn remove_stale_session_dirs(base: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(base) else {
        return Vec::new();
    };
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(owner_pid) else {
            continue;
        };
        let Ok(meta) = entry.path().symlink_metadata() else {
            continue;
        };
        if !meta.is_dir() || meta.uid() != me {
            continue;
        }
        // ESRCH: no such process. EPERM means it exists (another user's reused pid).
        if nix::sys::signal::kill(Pid::from_raw(pid), None) != Err(nix::errno::Errno::ESRCH) {
            continue;
        }
        if std::fs::remove_dir_all(entry.path()).is_ok() {
            removed.push(entry.path());
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_pid_reads_the_directory_name() {
        assert_eq!(owner_pid("fxtrace-session-1234-AbCdEf"), Some(1234));
        assert_eq!(owner_pid("fxtrace-session-x-AbCdEf"), None);
        assert_eq!(owner_pid("fxtrace-session-0-AbCdEf"), None);
        assert_eq!(owner_pid("other-1234-AbCdEf"), None);
    }

    #[test]
    fn only_dirs_of_dead_recorders_are_removed() {
        let base = std::env::temp_dir().join(format!("fxtrace-stale-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        // A pid that cannot exist (above pid_max's ceiling of 2^22).
        let dead = base.join(format!("{SESSION_DIR_PREFIX}{}-AAAAAA", 1 << 23));
        let alive = base.join(format!("{SESSION_DIR_PREFIX}{}-BBBBBB", std::process::id()));
        std::fs::create_dir(&dead).unwrap();
        std::fs::write(dead.join("socket"), b"").unwrap();
        std::fs::create_dir(&alive).unwrap();
        assert_eq!(remove_stale_session_dirs(&base), vec![dead.clone()]);
        assert!(!dead.exists());
        assert!(alive.exists());
        std::fs::remove_dir_all(base).unwrap();
    }

    /// A holder process holds the events and nothing else of the test's, in a process group
    /// of its own, named for what it is, and ends once the hold is released, without the
    /// releaser waiting for the kernel's grace periods.
    #[test]
    fn a_holder_process_holds_the_probes_until_the_release() {
        use fxtrace::test_support::{skip, Requirement};
        let Some(hold) = ProbeHold::open(false) else {
            skip(
                Requirement::Perf,
                "no raw tracepoint events here (root, CAP_PERFMON)",
            );
            return;
        };
        let Held::Holder(_, pid) = hold.held else {
            panic!("no holder process: {hold:?}");
        };
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap();
        assert_eq!(comm.trim_end(), "fxtrace-probes");
        let fds: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .flatten()
            .map(|fd| {
                std::fs::read_link(fd.path())
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        let events = fds
            .iter()
            .filter(|l| *l == "anon_inode:[perf_event]")
            .count();
        assert_eq!(events, 2, "sched_waking and sched_wakeup_new: {fds:?}");
        assert_eq!(
            fds.len(),
            3,
            "the events and its pipe, nothing else: {fds:?}"
        );
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        let pgrp: u32 = after.split(' ').nth(2).unwrap().parse().unwrap();
        assert_eq!(pgrp, pid, "a process group of its own");
        drop(hold.release());
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::path::Path::new(&format!("/proc/{pid}")).exists() {
            assert!(
                std::time::Instant::now() < until,
                "the holder {pid} did not end"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

/// The kernel's probes of the tracepoints a preloaded capture opens (`sched_waking`,
/// `sched_wakeup_new`, and `sched_switch` for wait points), kept registered while the recorder
/// holds this: a perf event of the recorder's own on each, never enabled (it records nothing).
///
/// Under `--preload` every traced process opens those tracepoints. The first perf event on a
/// tracepoint in the system registers the kernel's perf probe, which patches kernel text
/// (about 13 ms on a 2-vCPU VM, 2026-11-29), and the last one to close unregisters it again
/// (`tracepoint_synchronize_unregister`, 40–54 ms there): without a holder, a command whose
/// processes come and go one after another (a script run by an untraced or static parent, or a
/// chain of `exec`s) pays that per process and per tracepoint. Held for the whole recording,
/// each traced process's open is only its own.
///
/// The events are held by a small process of their own (`Holder`), so that their last close,
/// with its grace periods (39 and 44 ms, one after the other: the kernel serializes them), is
/// nobody's wait: neither the session's wind-down nor the recorder's exit waits for it.
#[derive(Debug)]
pub struct ProbeHold {
    held: Held,
}

/// Who holds a [`ProbeHold`]'s events.
#[derive(Debug)]
enum Held {
    /// A holder process (its pid), which closes them once this end of its pipe closes.
    Holder(
        std::os::fd::OwnedFd,
        #[cfg_attr(not(test), allow(dead_code, reason = "what the tests look at"))] u32,
    ),
    /// This process (no holder could be started): closed by [`ProbeHold::release`].
    Here(Vec<std::os::fd::OwnedFd>),
}

impl ProbeHold {
    /// Open the events (`sched_switch` too when `wait_points`), or `None` where the recorder
    /// may open none (it then only costs the traced processes what it would have without it;
    /// their own capture says what it could open).
    pub fn open(wait_points: bool) -> Option<Self> {
        use fxtrace::capture::sys::{RealSys, Sys};
        use fxtrace::capture::{EventAttr, Need, PerfPermissions};
        let perms = PerfPermissions::read();
        if !perms.allows(Need::RawTracepoint) {
            return None;
        }
        let tracefs = fxtrace::capture::tracefs::Tracefs::open(false, perms.root).ok()?;
        let id = |names: &[&str]| {
            names
                .iter()
                .find_map(|name| tracefs.tracepoint_id("sched", name).ok())
        };
        let mut ids = vec![
            id(&["sched_waking", "sched_wakeup"]),
            id(&["sched_wakeup_new"]),
        ];
        if wait_points {
            ids.push(id(&["sched_switch"]));
        }
        // Disabled (as every attribute built there starts), on this process, any CPU: no ring.
        let events: Vec<_> = ids
            .into_iter()
            .flatten()
            .filter_map(|id| {
                let attr = EventAttr::sched_waking_tracepoint(
                    id,
                    fxtrace::capture::time::PerfClock::PerfDefault,
                )
                .without_lost_count();
                RealSys.perf_event_open(&attr, 0, -1, None).ok()
            })
            .collect();
        if events.is_empty() {
            return None;
        }
        let held = match Holder::start(&events) {
            // The holder has them; this process's copies are not the last: closed at once.
            Ok((release, pid)) => Held::Holder(release, pid),
            Err(_) => Held::Here(events),
        };
        Some(Self { held })
    }

    /// Let the events go: the holder closes them on its own time (or, without a holder, each
    /// closes on a thread of its own, so that their grace periods overlap with whatever the
    /// caller does until it drops the [`ProbeRelease`]).
    pub fn release(self) -> ProbeRelease {
        let closers = match self.held {
            Held::Holder(release, _) => {
                drop(release);
                Vec::new()
            }
            Held::Here(events) => events
                .into_iter()
                .filter_map(|fd| {
                    std::thread::Builder::new()
                        .name("fxtrace-release".into())
                        .spawn(move || drop(fd))
                        // Without a thread, the event closes here, on the caller's time.
                        .ok()
                })
                .collect(),
        };
        ProbeRelease { closers }
    }
}

/// A [`ProbeHold`] being released; dropping it waits until every event this process held is
/// closed (none, when a holder process had them).
#[derive(Debug)]
pub struct ProbeRelease {
    closers: Vec<std::thread::JoinHandle<()>>,
}

impl Drop for ProbeRelease {
    fn drop(&mut self) {
        for closer in self.closers.drain(..) {
            // A closer only drops a descriptor: it cannot panic.
            let _ = closer.join();
        }
    }
}

/// The process that holds a [`ProbeHold`]'s events: a grandchild of the recorder (its parent
/// exits at once and is reaped, so the holder is nobody's zombie), in a process group of its
/// own (a Ctrl-C at the terminal is the recorder's to handle), holding nothing of the
/// recorder's but the events and its end of a pipe. It closes the events, and exits, when the
/// pipe's other end closes: when the recorder releases the hold, or ends in any way (killed
/// too).
struct Holder;

/// The highest descriptor count a forked child closes one at a time where `close_range` fails
/// (Linux < 5.9, some seccomp profiles): the soft `RLIMIT_NOFILE`, at most 2^20. Read before
/// the fork.
fn descriptor_limit() -> libc::c_int {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the limit into a live local.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    libc::c_int::try_from(limit.rlim_cur.min(1 << 20)).unwrap_or(1 << 20)
}

/// In a forked child: closes every descriptor from `from` on but those of `keep` (ascending),
/// one `close_range` per gap, or one `close` at a time below `limit` where it fails.
///
/// # Safety
/// Only in a child between `fork` and `_exit`, with `keep` not closed by anyone else: it
/// closes descriptors other code may hold.
unsafe fn close_all_but(from: libc::c_int, keep: &[libc::c_int], limit: libc::c_int) {
    let mut low = from;
    for &fd in keep.iter().filter(|&&fd| fd >= from) {
        if fd > low {
            // SAFETY: as the function's.
            unsafe { close_gap(low, Some(fd - 1), limit) };
        }
        low = low.max(fd + 1);
    }
    // SAFETY: as the function's.
    unsafe { close_gap(low, None, limit) };
}

/// Closes descriptors `low..=high` (`None`: all from `low` on); see [`close_all_but`].
///
/// # Safety
/// As [`close_all_but`].
unsafe fn close_gap(low: libc::c_int, high: Option<libc::c_int>, limit: libc::c_int) {
    let last = high.map_or(u32::MAX, |h| h as u32);
    // SAFETY: close_range takes integers only.
    if unsafe { libc::syscall(libc::SYS_close_range, low as u32, last, 0u32) } != 0 {
        for fd in low..=high.unwrap_or(limit - 1).min(limit - 1) {
            // SAFETY: close takes an integer only.
            unsafe { libc::close(fd) };
        }
    }
}

/// A pipe's two ends, close-on-exec.
fn cloexec_pipe() -> std::io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two new descriptors into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors are new and owned here only.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

impl Holder {
    /// Starts the holder of `events`; returns the recorder's end of its pipe and the holder's
    /// pid, once the holder is set up (it has closed everything else).
    fn start(events: &[std::os::fd::OwnedFd]) -> std::io::Result<(std::os::fd::OwnedFd, u32)> {
        let (release_read, release_write) = cloexec_pipe()?;
        let (ready_read, ready_write) = cloexec_pipe()?;
        // The descriptors the holder keeps, in ascending order (every other one it closes):
        // the events, its end of the release pipe, and the ready pipe's until it is done.
        let mut keep: Vec<libc::c_int> = events.iter().map(|e| e.as_raw_fd()).collect();
        keep.push(release_read.as_raw_fd());
        keep.push(ready_write.as_raw_fd());
        keep.sort_unstable();
        let events: Vec<libc::c_int> = events.iter().map(|e| e.as_raw_fd()).collect();
        let (r, w, ready) = (
            release_read.as_raw_fd(),
            release_write.as_raw_fd(),
            ready_write.as_raw_fd(),
        );
        let limit = descriptor_limit();
        // SAFETY: the children run only async-signal-safe calls on integers and on the two
        // vectors allocated above (read only, never freed: the children end in `_exit`), and
        // never return into Rust code; the parent only waits for the first and reads a pipe.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: see above.
            unsafe {
                match libc::fork() {
                    0 => {}
                    // The first child, or a failed fork, which the recorder hears.
                    n => libc::_exit(i32::from(n < 0)),
                }
                // First the recorder's end of the release pipe: whatever fails below, the
                // holder ends when the recorder does.
                libc::close(w);
                libc::setpgid(0, 0);
                for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGPIPE] {
                    libc::signal(signal, libc::SIG_DFL);
                }
                let mut none: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut none);
                libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
                libc::prctl(libc::PR_SET_NAME, c"fxtrace-probes".as_ptr());
                let me = libc::getpid();
                libc::write(ready, (&me as *const libc::pid_t).cast(), 4);
                close_all_but(0, &keep, limit);
                // Set up: one byte more, then the end of the ready pipe.
                libc::write(ready, [1u8].as_ptr().cast(), 1);
                libc::close(ready);
                let mut byte = 0u8;
                loop {
                    let n = libc::read(r, (&mut byte as *mut u8).cast(), 1);
                    if n == 0 || (n < 0 && *libc::__errno_location() != libc::EINTR) {
                        break;
                    }
                }
                for &fd in &events {
                    libc::close(fd);
                }
                libc::_exit(0);
            }
        }
        let mut status = 0;
        // SAFETY: waits for our own child, which exits at once; the status goes to a local.
        let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
        drop(ready_write);
        drop(release_read);
        if waited != pid || !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
            return Err(std::io::Error::other(
                "the holder process could not be started",
            ));
        }
        // Its pid, then a byte once it closed everything else, then the end of the pipe (a
        // holder that died on the way says less).
        let mut ready = std::fs::File::from(ready_read);
        let mut said = Vec::new();
        std::io::Read::read_to_end(&mut ready, &mut said)?;
        match said[..] {
            [a, b, c, d, 1] => Ok((release_write, u32::from_ne_bytes([a, b, c, d]))),
            _ => Err(std::io::Error::other(
                "the holder process ended while starting",
            )),
        }
    }
}
