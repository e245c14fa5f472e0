//! Thread and process names and thread → process ids, from perf records and `/proc`.
//!
//! `sched_switch` carries thread ids and names but no process ids. [`TaskRegistry`] fills the
//! gaps from three sources, in the order a capture uses them:
//!
//! 1. [`TaskRegistry::scan`]: one pass over `/proc/*/task/*` when the capture starts (after its
//!    events are enabled), so every task alive then is known even if it exits before its first
//!    switch is converted. Bounded by a task limit; processes that vanish mid-scan are counted.
//! 2. [`TaskRegistry::note_thread`] / [`TaskRegistry::note_name`]: what records say as they pass
//!    (FORK/EXIT/COMM, the pid of a `sched_switch` sample's own task, LBR samples).
//! 3. On a miss, [`TaskRegistry::pid_of`] reads `/proc/<tid>/status` (`Tgid:`) and
//!    `/proc/<tid>/comm` once per task, caching the answer — including "not found" for tasks
//!    that are already gone, so a vanished thread costs one failed lookup, not one per switch.
//!
//! A thread's files are read at `/proc/<tid>/…`, never at `/proc/<pid>/task/<tid>/…`: a file
//! looked up under a thread's `task/<tid>` directory makes the reaping of its process slow for
//! the parent, whose `wait` then spins while the process's last thread tears the same
//! directory down (the parent's system time, 100 children of four threads each: 0.07 ms per
//! child, 3.4–4.2 ms once each child's threads' `comm` had been read there, 0.09 ms at
//! `/proc/<tid>/comm`; Linux 6.18). A per-process capture reads its own threads' names, so
//! every traced process paid it, and so did a shell running many of them.
//!
//! The `/proc` root is a parameter so tests can use a synthetic tree;
//! `/sys/devices/system/cpu/online` parsing is here too.

use super::ids::IdMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Default)]
struct ThreadEntry {
    /// `None`: not looked up yet; `Some(None)`: looked up, unknown.
    pid: Option<Option<u32>>,
    name: Option<String>,
}

/// What [`TaskRegistry::scan`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProcScan {
    /// Processes whose thread list was read.
    pub processes: u64,
    /// Threads noted (tid → pid).
    pub threads: u64,
    /// Processes listed in `/proc` whose `task` directory could not be read (exited meanwhile).
    pub failures: u64,
    /// The task limit stopped the scan before the end of `/proc`.
    pub truncated: bool,
}

/// The most tasks one [`TaskRegistry::scan`] notes (the registry's memory bound at start).
pub const SCAN_TASK_LIMIT: usize = 1 << 20;

/// Slots of [`TaskRegistry`]'s recent-pid cache (a power of two).
const RECENT_SLOTS: usize = 256;

/// The recent-pid cache slot of `tid`.
fn recent_slot(tid: u32) -> usize {
    tid as usize & (RECENT_SLOTS - 1)
}

/// Cached tid → (pid, name) and pid → process name.
#[derive(Debug)]
pub struct TaskRegistry {
    /// `None`: nothing is read from `/proc` (tasks of a recorded file, not of this machine).
    proc_root: Option<PathBuf>,
    threads: IdMap<ThreadEntry>,
    /// Recent tid → pid answers of `threads`, direct-mapped by the tid's low bits (tid 0:
    /// empty): a context switch asks for the same few threads again and again, and a hit is a
    /// load and a compare instead of a hash lookup. Rules: every change of a thread's pid in
    /// `threads` writes its slot here too (`note_thread`, `pid_of`).
    recent: Box<[(u32, u32); RECENT_SLOTS]>,
    processes: IdMap<Option<String>>,
    proc_reads: u64,
}

impl Default for TaskRegistry {
    fn default() -> Self {
        Self::new("/proc")
    }
}

impl TaskRegistry {
    /// A registry reading `proc_root` (normally `/proc`).
    pub fn new(proc_root: impl Into<PathBuf>) -> Self {
        Self {
            proc_root: Some(proc_root.into()),
            ..Self::without_proc()
        }
    }

    /// A registry that knows only what it is told ([`Self::note_thread`], [`Self::note_name`])
    /// and never reads `/proc`: for the tasks of a recording made elsewhere or earlier.
    pub fn without_proc() -> Self {
        Self {
            proc_root: None,
            threads: IdMap::default(),
            recent: Box::new([(0, 0); RECENT_SLOTS]),
            processes: IdMap::default(),
            proc_reads: 0,
        }
    }

    /// Records that `tid` belongs to `pid`.
    pub fn note_thread(&mut self, pid: u32, tid: u32) {
        let slot = &mut self.recent[recent_slot(tid)];
        if tid != 0 && *slot == (tid, pid) {
            return; // known already, the common case: every switch-out says it again
        }
        self.threads.entry(tid).or_default().pid = Some(Some(pid));
        if tid != 0 {
            *slot = (tid, pid);
        }
    }

    /// The process id of `tid` if the registry knows it, without reading `/proc`.
    pub fn known_pid(&self, tid: u32) -> Option<u32> {
        if tid == 0 {
            return Some(0);
        }
        self.threads.get(&tid).and_then(|e| e.pid).flatten()
    }

    /// Notes every task alive now: `/proc/<pid>/task/<tid>` gives tid → pid, and
    /// `/proc/<pid>/comm` the process name (one read per process); with `thread_names`, also
    /// each thread's `comm` (`/proc/<tid>/comm`, see the module docs; for sources whose
    /// records carry no names). Stops after `limit`
    /// tasks. A `/proc` root that cannot be listed is an error; a process that exits mid-scan
    /// is counted in [`ProcScan::failures`].
    pub fn scan(&mut self, limit: usize, thread_names: bool) -> io::Result<ProcScan> {
        let mut scan = ProcScan::default();
        let Some(root) = self.proc_root.clone() else {
            return Ok(scan);
        };
        let pids: Vec<u32> = fs::read_dir(&root)?
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        for pid in pids {
            let tids = match self.list_threads(pid) {
                Ok(tids) => tids,
                Err(_) => {
                    scan.failures += 1;
                    continue;
                }
            };
            if scan.threads as usize + tids.len() > limit {
                scan.truncated = true;
                break;
            }
            scan.processes += 1;
            for &tid in &tids {
                self.note_thread(pid, tid);
                if thread_names {
                    self.proc_reads += 1;
                    if let Some(name) = read_line(&thread_file(&root, tid, "comm")) {
                        self.threads.entry(tid).or_default().name = Some(name);
                    }
                }
            }
            scan.threads += tids.len() as u64;
            if !self.processes.contains_key(&pid) {
                self.proc_reads += 1;
                if let Some(name) = read_line(&root.join(pid.to_string()).join("comm")) {
                    self.processes.insert(pid, Some(name));
                }
            }
        }
        Ok(scan)
    }

    /// A new thread `tid` created by `parent`: it starts with the parent's name, as in the
    /// kernel (`comm` is copied at fork); a name an earlier thread of that tid had is forgotten.
    pub fn inherit_name(&mut self, tid: u32, parent: u32) {
        let name = self.threads.get(&parent).and_then(|e| e.name.clone());
        self.threads.entry(tid).or_default().name = name;
    }

    /// Records `tid`'s current name (and the process name, for a main thread).
    pub fn note_name(&mut self, tid: u32, name: &str) {
        let entry = self.threads.entry(tid).or_default();
        if entry.name.as_deref() != Some(name) {
            entry.name = Some(name.to_owned());
        }
        if entry.pid == Some(Some(tid)) {
            self.processes.insert(tid, Some(name.to_owned()));
        }
    }

    /// The process id of `tid` (cached; one `/proc` read on a miss). The idle task (0) is in
    /// process 0.
    pub fn pid_of(&mut self, tid: u32) -> Option<u32> {
        if tid == 0 {
            return Some(0);
        }
        let slot = recent_slot(tid);
        if self.recent[slot].0 == tid {
            return Some(self.recent[slot].1);
        }
        if let Some(Some(pid)) = self.threads.get(&tid).map(|e| e.pid) {
            if let Some(pid) = pid {
                self.recent[slot] = (tid, pid);
            }
            return pid;
        }
        let pid = self.proc_root.as_ref().and_then(|root| {
            self.proc_reads += 1;
            read_tgid(&thread_file(root, tid, "status"))
        });
        self.threads.entry(tid).or_default().pid = Some(pid);
        if let Some(pid) = pid {
            self.recent[slot] = (tid, pid);
        }
        pid
    }

    /// The name of `tid` (cached; one `/proc` read on a miss).
    pub fn thread_name(&mut self, tid: u32) -> Option<String> {
        if let Some(name) = self.threads.get(&tid).and_then(|e| e.name.clone()) {
            return Some(name);
        }
        // Known to be a task (and in which process) before its name is read.
        self.pid_of(tid)?;
        let root = self.proc_root.as_ref()?;
        self.proc_reads += 1;
        let name = read_line(&thread_file(root, tid, "comm"))?;
        self.threads.entry(tid).or_default().name = Some(name.clone());
        Some(name)
    }

    /// The name of process `pid` (its main thread's name; cached).
    pub fn process_name(&mut self, pid: u32) -> Option<String> {
        if let Some(name) = self.processes.get(&pid) {
            return name.clone();
        }
        let name = self
            .threads
            .get(&pid)
            .and_then(|e| e.name.clone())
            .or_else(|| {
                let root = self.proc_root.as_ref()?;
                self.proc_reads += 1;
                read_line(&root.join(pid.to_string()).join("comm"))
            });
        self.processes.insert(pid, name.clone());
        name
    }

    /// `/proc` files read so far (for tests of the cache).
    pub fn proc_reads(&self) -> u64 {
        self.proc_reads
    }

    /// The thread ids of process `pid` right now (`/proc/<pid>/task`).
    pub fn list_threads(&self, pid: u32) -> io::Result<Vec<u32>> {
        let Some(root) = &self.proc_root else {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "this registry reads no /proc",
            ));
        };
        let mut tids: Vec<u32> = fs::read_dir(root.join(pid.to_string()).join("task"))?
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        tids.sort_unstable();
        Ok(tids)
    }
}

/// `<root>/<tid>/<file>`: a thread's file at the top of `/proc`, where every thread id has a
/// directory (unlisted), never under its process's `task/<tid>` (see the module docs).
fn thread_file(root: &Path, tid: u32, file: &str) -> PathBuf {
    root.join(tid.to_string()).join(file)
}

/// A file of `/proc` or `/sys`, read whole in one `read` (and a last one that finds its end):
/// such files say their size is 0, which has `fs::read` probe 32 bytes at a time, growing
/// (eight reads for a 4 KiB file, after a `statx` and an `lseek` for a size hint). A traced
/// process reads a few of them when it starts, and the manager when it registers one.
pub fn read_small(path: impl AsRef<Path>) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut file = fs::File::open(path)?;
    let mut bytes = vec![0u8; 4096];
    let mut len = 0;
    loop {
        if len == bytes.len() {
            bytes.resize(len * 2, 0);
        }
        match file.read(&mut bytes[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    bytes.truncate(len);
    Ok(bytes)
}

/// [`read_small`], as text (`InvalidData` when it is not UTF-8).
pub fn read_small_text(path: impl AsRef<Path>) -> io::Result<String> {
    String::from_utf8(read_small(path)?).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

fn read_line(path: &Path) -> Option<String> {
    let text = read_small_text(path).ok()?;
    Some(text.trim_end_matches('\n').to_owned())
}

fn read_tgid(status: &Path) -> Option<u32> {
    read_small_text(status)
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))?
        .trim()
        .parse()
        .ok()
}

/// The fields of a `/proc/PID/stat` line after the command (`pid (comm) state ppid …`: the
/// command may hold spaces, parentheses and any byte), state first.
pub fn stat_fields(stat: &[u8]) -> impl Iterator<Item = &[u8]> {
    let rest = stat
        .iter()
        .rposition(|&b| b == b')')
        .map_or(&[][..], |close| &stat[close + 1..]);
    rest.split(u8::is_ascii_whitespace)
        .filter(|field| !field.is_empty())
}

/// Whether process `pid` can no longer run code of its own: it does not exist (`kill(pid, 0)`
/// says so, which neither a `hidepid` mount nor another user's process fools), it is dead, or
/// its one thread left is a zombie or has given up its address space (a process ending: the
/// kernel closes its files, so its sockets, only after that). A thread-group leader that
/// ended before its other threads is a zombie too, with them still counted in
/// `num_threads`: not ended. Pid 0 (a peer in another pid namespace) and a `/proc` that is
/// not this process's pid namespace's answer "running". A pid given to another process
/// since reads as running too: callers must take "running" as the safe answer. Not seen:
/// another process sharing the address space (`clone(CLONE_VM)`).
pub fn process_ended(pid: u32) -> bool {
    let Ok(signed) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if signed == 0 || !proc_is_ours() {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists and may be signalled.
    if unsafe { libc::kill(signed, 0) } != 0 {
        return std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
    }
    let Ok(stat) = read_small(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // After the command: field 3 (the state) first, field 9 (`flags`) the 7th, field 20
    // (`num_threads`) the 18th, field 23 (`vsize`, 0 without an address space) the 21st.
    let fields: Vec<&[u8]> = stat_fields(&stat).take(21).collect();
    let (Some(&state), Some(&flags), Some(&threads), Some(&vsize)) = (
        fields.first(),
        fields.get(6),
        fields.get(17),
        fields.get(20),
    ) else {
        return false;
    };
    // PF_EXITING: the thread is in `exit` (a kernel thread, also without an address space,
    // is not).
    const PF_EXITING: u64 = 0x4;
    let exiting = std::str::from_utf8(flags)
        .ok()
        .and_then(|flags| flags.parse::<u64>().ok())
        .is_some_and(|flags| flags & PF_EXITING != 0);
    state == b"X" || (threads == b"1" && (state == b"Z" || (exiting && vsize == b"0")))
}

/// What tells one program image of a process from another ([`process_image`]): the process
/// (its start time, which an exec keeps and a reused pid does not) and the image running in
/// it (its auxiliary vector, which the kernel writes anew at every exec: among others the
/// addresses of the program's headers, of the dynamic loader, of the vDSO and of the stack's
/// random bytes, randomised at each exec unless address-space randomisation is off).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProcessImage {
    /// `/proc/PID/stat` field 22: when the process started, in clock ticks after boot.
    pub start_time: u64,
    /// A hash of `/proc/PID/auxv`.
    pub auxv: u64,
}

/// The image process `pid` runs now, if `/proc` shows it (this pid namespace's, the process
/// still there, its auxiliary vector readable: the same user or root, and a process that did
/// not make itself undumpable). Two reads that agree
/// are one image; different start times are different processes (a reused pid); the same
/// start time with another auxiliary vector is an exec in between. The same program
/// exec'd again with address-space randomisation off reads as the same image.
pub fn process_image(pid: u32) -> Option<ProcessImage> {
    use std::hash::{Hash, Hasher};

    if pid == 0 || !proc_is_ours() {
        return None;
    }
    let start_time = || start_time(pid);
    let before = start_time()?;
    let auxv = read_small(format!("/proc/{pid}/auxv")).ok()?;
    // Empty for a kernel thread or a process already gone; read again after the vector, so
    // that a pid given to another process meanwhile is not taken for the same one.
    if auxv.is_empty() || start_time()? != before {
        return None;
    }
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    auxv.hash(&mut hasher);
    Some(ProcessImage {
        start_time: before,
        auxv: hasher.finish(),
    })
}

/// When process `pid` started (`/proc/PID/stat` field 22, clock ticks after boot): with its
/// pid, what names one process (a reused pid has another). `None` where `/proc` does not show
/// it.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = read_small(format!("/proc/{pid}/stat")).ok()?;
    // After the command: field 3 (the state) first, field 22 (`starttime`) the 20th.
    let field = stat_fields(&stat).nth(19)?;
    std::str::from_utf8(field).ok()?.parse().ok()
}

/// Whether `/proc` shows this process's pid namespace (`/proc/self` is its own pid).
fn proc_is_ours() -> bool {
    std::fs::read_link("/proc/self").is_ok_and(|link| {
        link.to_str()
            .and_then(|pid| pid.parse::<u32>().ok())
            .is_some_and(|pid| pid == std::process::id())
    })
}

/// Parses a kernel CPU list (`0-3,5,7-8`).
pub fn parse_cpu_list(text: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if a > b {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.trim().parse().ok()?),
        }
    }
    Some(cpus)
}

/// The online CPUs (`/sys/devices/system/cpu/online`).
pub fn online_cpus() -> io::Result<Vec<u32>> {
    let path = "/sys/devices/system/cpu/online";
    let text = read_small_text(path)?;
    parse_cpu_list(&text).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{path}: cannot parse {text:?}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_has_ended_once_it_is_a_zombie_or_reaped() {
        assert!(!process_ended(std::process::id()), "this process runs");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        // Not reaped yet: a zombie once it exits.
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !process_ended(pid) {
            assert!(std::time::Instant::now() < until, "pid {pid} never ended");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // (It may be seen while still exiting, its address space gone: a zombie soon after.)
        let zombie = || {
            let stat = std::fs::read(format!("/proc/{pid}/stat")).unwrap();
            let state = stat_fields(&stat).next() == Some(&b"Z"[..]);
            state
        };
        while !zombie() {
            assert!(
                std::time::Instant::now() < until,
                "pid {pid} never a zombie"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(process_ended(pid), "a zombie");
        child.wait().unwrap();
        assert!(process_ended(pid), "reaped");
        // Pid 0 (a peer outside this pid namespace) and a kernel thread have not ended.
        assert!(!process_ended(0));
        assert!(!process_ended(2), "kthreadd");
        // A running process has not ended.
        let mut waiter = std::process::Command::new("sh")
            .args(["-c", "sleep 30"])
            .spawn()
            .unwrap();
        assert!(!process_ended(waiter.id()));
        waiter.kill().unwrap();
        waiter.wait().unwrap();
    }

    #[test]
    fn an_exec_changes_a_process_image_and_a_fork_another_process_is_another() {
        use std::io::Write as _;
        use std::time::{Duration, Instant};

        let me = process_image(std::process::id()).expect("this process's image");
        assert_eq!(process_image(std::process::id()), Some(me), "stable");
        assert_eq!(process_image(0), None);
        assert_eq!(process_image(2), None, "kthreadd: no auxiliary vector");
        // A shell that execs `sleep` once it reads a line: one process, two images.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "read line; exec sleep 30"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let shell = process_image(pid).expect("the shell's image");
        assert_ne!(shell.start_time, 0);
        assert_ne!(shell, me, "another process");
        writeln!(child.stdin.as_mut().unwrap()).unwrap();
        let until = Instant::now() + Duration::from_secs(10);
        let sleep = loop {
            let now = process_image(pid).expect("the image after the exec");
            if now != shell {
                break now;
            }
            assert!(Instant::now() < until, "pid {pid} never exec'd");
            std::thread::sleep(Duration::from_millis(5));
        };
        assert_eq!(sleep.start_time, shell.start_time, "the same process");
        assert_ne!(sleep.auxv, shell.auxv, "another image");
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(process_image(pid), None, "reaped");
    }

    #[test]
    fn small_files_are_read_whole_whatever_their_size() {
        let auxv = read_small("/proc/self/auxv").unwrap();
        assert_eq!(auxv, fs::read("/proc/self/auxv").unwrap());
        let dir = tempfile::tempdir().unwrap();
        let big: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        fs::write(dir.path().join("big"), &big).unwrap();
        assert_eq!(read_small(dir.path().join("big")).unwrap(), big);
        assert!(
            read_small_text(dir.path().join("big")).is_err(),
            "not UTF-8"
        );
        assert!(read_small(dir.path().join("missing")).is_err());
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-1\n"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("0-2,4,6-7"), Some(vec![0, 1, 2, 4, 6, 7]));
        assert_eq!(parse_cpu_list("3"), Some(vec![3]));
        assert_eq!(parse_cpu_list("2-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn synthetic_proc_tree_is_read_once_per_task() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::create_dir_all(root.join("100/task/101")).unwrap();
        fs::create_dir_all(root.join("101")).unwrap();
        fs::write(root.join("101/status"), "Name:\tw\nTgid:\t100\nPid:\t101\n").unwrap();
        fs::write(root.join("101/comm"), "worker\n").unwrap();
        // What the thread's `task` directory would say is never read (module docs).
        fs::write(root.join("100/task/101/comm"), "not read\n").unwrap();
        fs::write(root.join("100/comm"), "server\n").unwrap();
        let mut r = TaskRegistry::new(root);
        assert_eq!(r.pid_of(101), Some(100));
        assert_eq!(r.thread_name(101).as_deref(), Some("worker"));
        assert_eq!(r.process_name(100).as_deref(), Some("server"));
        let reads = r.proc_reads();
        assert_eq!(r.pid_of(101), Some(100));
        assert_eq!(r.thread_name(101).as_deref(), Some("worker"));
        assert_eq!(r.process_name(100).as_deref(), Some("server"));
        assert_eq!(r.proc_reads(), reads, "cached");
        // A vanished task: one failed read, then cached.
        assert_eq!(r.pid_of(999), None);
        assert_eq!(r.pid_of(999), None);
        assert_eq!(r.proc_reads(), reads + 1);
        assert_eq!(r.pid_of(0), Some(0));
        assert_eq!(r.list_threads(100).unwrap(), vec![101]);
    }

    #[test]
    fn scan_notes_every_task_once_and_counts_vanished_processes() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for (pid, tids, name) in [(100, &[100, 101, 102][..], "server"), (200, &[200], "sh")] {
            for tid in tids {
                fs::create_dir_all(root.join(format!("{pid}/task/{tid}"))).unwrap();
            }
            fs::write(root.join(format!("{pid}/comm")), format!("{name}\n")).unwrap();
        }
        // Listed but gone: no task directory.
        fs::create_dir_all(root.join("300")).unwrap();
        // Not a process.
        fs::create_dir_all(root.join("self-not-a-pid")).unwrap();
        let mut r = TaskRegistry::new(root);
        let scan = r.scan(SCAN_TASK_LIMIT, false).unwrap();
        assert_eq!(
            scan,
            ProcScan {
                processes: 2,
                threads: 4,
                failures: 1,
                truncated: false
            }
        );
        assert_eq!(r.known_pid(102), Some(100));
        assert_eq!(r.known_pid(200), Some(200));
        assert_eq!(r.known_pid(300), None);
        let reads = r.proc_reads();
        // The tree may go away now: what the scan learnt stays.
        drop(dir);
        assert_eq!(r.pid_of(101), Some(100));
        assert_eq!(r.process_name(100).as_deref(), Some("server"));
        assert_eq!(r.process_name(200).as_deref(), Some("sh"));
        assert_eq!(r.proc_reads(), reads, "answered from the scan");
    }

    #[test]
    fn scan_with_thread_names_and_names_inherited_at_fork() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("5/task/6")).unwrap();
        fs::create_dir_all(dir.path().join("6")).unwrap();
        fs::write(dir.path().join("6/comm"), "worker\n").unwrap();
        fs::write(dir.path().join("5/task/6/comm"), "not read\n").unwrap();
        let mut r = TaskRegistry::new(dir.path());
        r.scan(10, true).unwrap();
        drop(dir);
        assert_eq!(r.thread_name(6).as_deref(), Some("worker"));
        r.inherit_name(7, 6);
        assert_eq!(r.thread_name(7).as_deref(), Some("worker"));
        r.note_name(8, "old");
        r.inherit_name(8, 6);
        assert_eq!(r.thread_name(8).as_deref(), Some("worker"), "a reused tid");
    }

    #[test]
    fn scan_stops_at_its_limit() {
        let dir = tempfile::tempdir().unwrap();
        for pid in 1..=5 {
            fs::create_dir_all(dir.path().join(format!("{pid}/task/{pid}"))).unwrap();
        }
        let mut r = TaskRegistry::new(dir.path());
        let scan = r.scan(3, false).unwrap();
        assert_eq!((scan.threads, scan.truncated), (3, true));
        assert!(TaskRegistry::new(dir.path().join("missing"))
            .scan(3, false)
            .is_err());
    }

    #[test]
    fn records_teach_the_registry() {
        let mut r = TaskRegistry::new("/nonexistent");
        r.note_thread(50, 50);
        r.note_thread(50, 51);
        r.note_name(50, "main");
        r.note_name(51, "helper");
        assert_eq!(r.pid_of(51), Some(50));
        assert_eq!(r.thread_name(51).as_deref(), Some("helper"));
        assert_eq!(r.process_name(50).as_deref(), Some("main"));
        assert_eq!(r.proc_reads(), 0);
    }

    /// A registry without `/proc` answers from what it was told, reads nothing, and says
    /// it cannot list a process's threads.
    #[test]
    fn a_registry_without_proc_reads_nothing() {
        let mut r = TaskRegistry::without_proc();
        let pid = std::process::id();
        assert_eq!(
            r.pid_of(pid),
            None,
            "this process exists, but is not asked for"
        );
        assert_eq!(r.thread_name(pid), None);
        assert_eq!(r.process_name(pid), None);
        assert!(r.list_threads(pid).is_err());
        assert_eq!(r.scan(10, true).unwrap(), ProcScan::default());
        r.note_thread(pid, pid);
        r.note_name(pid, "told");
        assert_eq!(r.pid_of(pid), Some(pid));
        assert_eq!(r.thread_name(pid).as_deref(), Some("told"));
        assert_eq!(r.proc_reads(), 0);
    }
}
