//! Thread and process names and each thread's process, as the trace's Kernel Object and
//! Thread records give them. Bounded for crafted input ([`MAX_NAMED`] threads and processes,
//! names cut at [`crate::MAX_KEPT_NAME`] bytes).

use fxtrace_format::{DecodedArg, DecodedRecord, DecodedValue, ObjectType, RecordHead, RecordKind};

use super::bounded::BoundedMap;

/// Threads (and processes) whose names are kept.
pub const MAX_NAMED: usize = 1 << 16;

/// What is known of a thread.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ThreadInfo {
    /// Its process, if known.
    pub pid: Option<u64>,
    /// Its name, if known.
    pub name: Option<String>,
}

/// Names of threads and processes.
#[derive(Debug, Clone)]
pub struct Names {
    threads: BoundedMap<u64, ThreadInfo>,
    processes: BoundedMap<u64, String>,
    /// The thread [`Names::saw`] was told of last (most events follow their thread's last).
    last_seen: (u64, u64),
}

impl Default for Names {
    fn default() -> Self {
        Names {
            threads: BoundedMap::new(MAX_NAMED),
            processes: BoundedMap::new(MAX_NAMED),
            last_seen: (0, 0),
        }
    }
}

/// The koid (or integer) argument `name` of a record's arguments.
pub(crate) fn koid_arg(args: &[DecodedArg<'_>], name: &str) -> Option<u64> {
    args.iter()
        .find(|a| a.name == name)
        .and_then(|a| match a.value {
            DecodedValue::Koid(k) | DecodedValue::U64(k) => Some(k),
            DecodedValue::U32(k) => Some(u64::from(k)),
            _ => None,
        })
}

impl Names {
    /// Nothing known.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether a record can name a thread or a process.
    pub fn wants(head: &RecordHead) -> bool {
        matches!(head.kind, RecordKind::KernelObject | RecordKind::Thread)
    }

    /// Learns from `record` (Kernel Object and Thread records; others are ignored).
    pub fn add(&mut self, record: &DecodedRecord<'_>) {
        match record {
            DecodedRecord::KernelObject {
                koid,
                object_type,
                name,
                args,
            } => {
                if *object_type == ObjectType::PROCESS {
                    if let Some(p) = self.processes.entry(*koid) {
                        *p = crate::kept_name(name);
                    }
                } else if *object_type == ObjectType::THREAD {
                    if let Some(t) = self.threads.entry(*koid) {
                        t.name = Some(crate::kept_name(name));
                        if let Some(pid) = koid_arg(args, "process") {
                            t.pid = Some(pid);
                        }
                    }
                }
            }
            DecodedRecord::Thread { thread, .. } => self.saw(thread.pid, thread.tid),
            _ => {}
        }
    }

    /// Thread `tid` is of process `pid` (an event or a switch said so).
    pub fn saw(&mut self, pid: u64, tid: u64) {
        if pid == 0 || tid == 0 || self.last_seen == (pid, tid) {
            return;
        }
        self.last_seen = (pid, tid);
        if let Some(t) = self.threads.get_mut(&tid) {
            t.pid.get_or_insert(pid);
        } else if let Some(t) = self.threads.entry(tid) {
            t.pid = Some(pid);
        }
    }

    /// Threads and processes not kept because the table was full, counted per record that
    /// named one (reports say so in a note).
    pub fn refused(&self) -> u64 {
        self.threads.refused() + self.processes.refused()
    }

    /// Thread `tid`'s process, if known.
    pub fn pid(&self, tid: u64) -> Option<u64> {
        self.threads.get(&tid)?.pid
    }

    /// Thread `tid`'s name, if known.
    pub fn thread(&self, tid: u64) -> Option<&str> {
        self.threads.get(&tid)?.name.as_deref()
    }

    /// Process `pid`'s name, if known.
    pub fn process(&self, pid: u64) -> Option<&str> {
        self.processes.get(&pid).map(String::as_str)
    }

    /// How a report names a thread: `name (pid P/tid T)`, with the process's name when it
    /// differs from the thread's: `worker (server, pid P/tid T)`; `tid T` when nothing is
    /// known; `idle` for tid 0.
    pub fn label(&self, tid: u64) -> String {
        if tid == 0 {
            return "idle".to_owned();
        }
        let pid = self.pid(tid);
        let process = pid.and_then(|p| self.process(p));
        let ids = match pid {
            Some(pid) => format!("pid {pid}/tid {tid}"),
            None => format!("tid {tid}"),
        };
        match (self.thread(tid), process) {
            (Some(name), Some(process)) if process != name => {
                format!("{name} ({process}, {ids})")
            }
            (Some(name), _) => format!("{name} ({ids})"),
            (None, Some(process)) => format!("{process} ({ids})"),
            (None, None) => ids,
        }
    }
}
