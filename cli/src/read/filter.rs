//! Choosing records: by process, thread, provider, name, category, record type and time
//! (`fxtrace dump`'s filters; the reports take the same ones). A filter is judged from a
//! record's head first (type, time, provider: no decoding), then from the decoded record.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use fxtrace_format::{Decoded, DecodedRecord, EventType, RecordHead, RecordKind};

use super::names::{koid_arg, Names};

/// A shell-style pattern: `*` any run of characters, `?` one character, anything else
/// itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob(String);

impl Glob {
    /// The pattern `pattern`.
    pub fn new(pattern: &str) -> Glob {
        Glob(pattern.to_owned())
    }

    /// Whether `text` matches the whole pattern.
    pub fn matches(&self, text: &str) -> bool {
        // Iterative wildcard matching: the last `*` and where its run ended, backtracked
        // to on a mismatch (linear in practice, never exponential).
        let (p, t): (Vec<char>, Vec<char>) = (self.0.chars().collect(), text.chars().collect());
        let (mut pi, mut ti) = (0, 0);
        let mut star: Option<(usize, usize)> = None;
        while ti < t.len() {
            if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
                pi += 1;
                ti += 1;
            } else if pi < p.len() && p[pi] == '*' {
                star = Some((pi, ti));
                pi += 1;
            } else if let Some((sp, st)) = star {
                pi = sp + 1;
                ti = st + 1;
                star = Some((sp, st + 1));
            } else {
                return false;
            }
        }
        p[pi..].iter().all(|&c| c == '*')
    }
}

impl fmt::Display for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A record type a filter names: a record kind (`event`, `context_switch` — both layouts —,
/// `thread_wakeup` or `wakeup`, …) or an event type (`instant`, `duration_begin`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TypeName {
    /// Records of this kind.
    Kind(RecordKind),
    /// Both context switch layouts.
    AnySwitch,
    /// Events of this type.
    Event(EventType),
}

impl TypeName {
    /// Every name a filter takes, for messages.
    pub fn names() -> Vec<&'static str> {
        let mut names: Vec<&'static str> = RecordKind::ALL.iter().map(|k| k.name()).collect();
        names.push("wakeup");
        names.extend(EventType::ALL.iter().map(|t| t.name()));
        names
    }

    fn matches(self, head: &RecordHead) -> bool {
        match self {
            TypeName::Kind(kind) => head.kind == kind,
            TypeName::AnySwitch => matches!(
                head.kind,
                RecordKind::ContextSwitch | RecordKind::SchedContextSwitch
            ),
            TypeName::Event(t) => head.event_type == Some(t),
        }
    }
}

impl FromStr for TypeName {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s == "context_switch" || s == "switch" {
            return Ok(TypeName::AnySwitch);
        }
        if s == "wakeup" {
            return Ok(TypeName::Kind(RecordKind::SchedThreadWakeup));
        }
        if let Some(kind) = RecordKind::from_name(s) {
            return Ok(TypeName::Kind(kind));
        }
        if let Some(t) = EventType::ALL.iter().find(|t| t.name() == s) {
            return Ok(TypeName::Event(*t));
        }
        Err(format!(
            "unknown record type '{s}' (one of: {})",
            TypeName::names().join(", ")
        ))
    }
}

/// A time relative to the trace's first timestamp: a number of seconds, or a number with a
/// unit (`ns`, `us`, `ms`, `s`): `1.5`, `250ms`, `40us`, `1000ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct RelativeTime(pub u64);

impl FromStr for RelativeTime {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let (number, scale) = [
            ("ns", 1.0),
            ("us", 1e3),
            ("µs", 1e3),
            ("ms", 1e6),
            ("s", 1e9),
        ]
        .iter()
        .find_map(|(unit, scale)| s.strip_suffix(unit).map(|n| (n, *scale)))
        .unwrap_or((s, 1e9));
        let value: f64 = number.trim().parse().map_err(|_| {
            format!("'{s}' is not a time (a number of seconds, or with ns, us, ms or s)")
        })?;
        if !(value >= 0.0 && value.is_finite()) {
            return Err(format!(
                "'{s}': a time since the trace's start is at least 0"
            ));
        }
        Ok(RelativeTime(
            (value * scale).round().min(u64::MAX as f64) as u64
        ))
    }
}

/// A provider as a filter names it: its id, or its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderName {
    /// Provider id.
    Id(u32),
    /// Provider name (as its provider info record gives it).
    Name(String),
}

impl FromStr for ProviderName {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s.parse() {
            Ok(id) => ProviderName::Id(id),
            Err(_) => ProviderName::Name(s.to_owned()),
        })
    }
}

/// Which records to keep: each criterion given must hold (within one criterion, any of the
/// values given). A record that cannot have the property a criterion asks (a string record
/// has no process) does not match it.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Processes.
    pub pids: Vec<u64>,
    /// Threads (a switch matches by either side, a wake-up by the woken thread).
    pub tids: Vec<u64>,
    /// Providers, by id or name.
    pub providers: Vec<ProviderName>,
    /// Names (an event's, a blob's, a kernel or userspace object's).
    pub names: Vec<Glob>,
    /// Event categories.
    pub categories: Vec<Glob>,
    /// Record or event types.
    pub types: Vec<TypeName>,
    /// From this time on (ns since the trace's first timestamp).
    pub from: Option<RelativeTime>,
    /// Up to this time (ns since the trace's first timestamp).
    pub to: Option<RelativeTime>,
    /// The trace's first timestamp, ns (what `from` and `to` are relative to).
    pub origin_ns: u64,
    /// The ids of the providers [`ProviderName::Name`] names, learnt from provider info
    /// records as the reading goes (empty at first).
    pub provider_ids: BTreeSet<u32>,
    /// Each thread's process, learnt as the reading goes (empty at first).
    pub learnt: Learnt,
}

/// What a [`Filter`] by process learns as the reading goes: each thread's process, from
/// Thread and Kernel Object records and records that name both (a switch or wake-up written
/// by tid alone is then judged by its thread's process).
#[derive(Debug, Clone, Default)]
pub struct Learnt {
    names: Names,
    /// The record whose head was judged last is decoded only to learn from.
    learn_only: bool,
}

impl Filter {
    /// Whether the filter keeps every record.
    pub fn is_empty(&self) -> bool {
        self.pids.is_empty()
            && self.tids.is_empty()
            && self.providers.is_empty()
            && self.names.is_empty()
            && self.categories.is_empty()
            && self.types.is_empty()
            && self.from.is_none()
            && self.to.is_none()
    }

    /// Whether a time window is asked (the trace's first timestamp is needed first).
    pub fn needs_origin(&self) -> bool {
        self.from.is_some() || self.to.is_some()
    }

    /// Whether the filters that need no decoding can keep the record; `false` means it is
    /// not kept whatever it holds. (A filter by process asks for the records that name a
    /// thread's process even when it does not keep them: [`Filter::matches`] learns from them
    /// and says `false`.)
    pub fn head(&mut self, head: &RecordHead) -> bool {
        let keeps = self.head_keeps(head);
        self.learnt.learn_only = !keeps && !self.pids.is_empty() && Names::wants(head);
        keeps || self.learnt.learn_only
    }

    fn head_keeps(&mut self, head: &RecordHead) -> bool {
        if !self.types.is_empty() && !self.types.iter().any(|t| t.matches(head)) {
            return false;
        }
        if self.needs_origin() {
            let Some(t) = head.time() else {
                return false;
            };
            let since = t.ns.saturating_sub(self.origin_ns);
            if self.from.is_some_and(|from| since < from.0)
                || self.to.is_some_and(|to| since > to.0)
            {
                return false;
            }
        }
        if !self.providers.is_empty() {
            // Provider info records name providers whatever the filter: keep them for names.
            let id_listed = head.provider.is_some_and(|id| {
                self.providers.contains(&ProviderName::Id(id)) || self.provider_ids.contains(&id)
            });
            if !id_listed && head.kind != RecordKind::ProviderInfo {
                return false;
            }
        }
        true
    }

    /// Whether the record is kept (after [`Filter::head`] kept its head).
    pub fn matches(&mut self, d: &Decoded<'_>) -> bool {
        if let DecodedRecord::ProviderInfo { provider_id, name } = &d.record {
            if self
                .providers
                .contains(&ProviderName::Name(name.to_string()))
            {
                self.provider_ids.insert(*provider_id);
            }
            let listed = self.providers.is_empty()
                || self.providers.contains(&ProviderName::Id(*provider_id))
                || self.provider_ids.contains(provider_id);
            if !listed {
                return false;
            }
        }
        if !self.pids.is_empty() {
            self.learnt.names.add(&d.record);
            if std::mem::take(&mut self.learnt.learn_only) {
                return false;
            }
        }
        let who = Who::of(&d.record);
        if !self.pids.is_empty() && !self.of_a_process(&who) {
            return false;
        }
        if !self.tids.is_empty() && !who.tids.iter().flatten().any(|t| self.tids.contains(t)) {
            return false;
        }
        if !self.names.is_empty()
            && !who
                .name
                .is_some_and(|n| self.names.iter().any(|g| g.matches(n)))
        {
            return false;
        }
        if !self.categories.is_empty()
            && !who
                .category
                .is_some_and(|c| self.categories.iter().any(|g| g.matches(c)))
        {
            return false;
        }
        true
    }
}

impl Filter {
    /// Whether a record is of a process asked: by the processes it names, or by the
    /// processes of the threads it names (as learnt so far).
    fn of_a_process(&self, who: &Who<'_>) -> bool {
        let named = who.pids.iter().flatten().copied();
        let learnt = who
            .tids
            .iter()
            .flatten()
            .filter_map(|&t| self.learnt.names.pid(t));
        named.chain(learnt).any(|p| self.pids.contains(&p))
    }
}

/// What a record says of its process, thread, name and category.
struct Who<'r> {
    pids: [Option<u64>; 2],
    tids: [Option<u64>; 2],
    name: Option<&'r str>,
    category: Option<&'r str>,
}

impl<'r> Who<'r> {
    fn of(record: &'r DecodedRecord<'r>) -> Who<'r> {
        let none = Who {
            pids: [None; 2],
            tids: [None; 2],
            name: None,
            category: None,
        };
        match record {
            DecodedRecord::Event(e) => Who {
                pids: [Some(e.thread.pid), None],
                tids: [Some(e.thread.tid), None],
                name: Some(&e.name),
                category: Some(&e.category),
            },
            DecodedRecord::Thread { thread, .. } => Who {
                pids: [Some(thread.pid), None],
                tids: [Some(thread.tid), None],
                ..none
            },
            DecodedRecord::Log { thread, .. } => Who {
                pids: [Some(thread.pid), None],
                tids: [Some(thread.tid), None],
                ..none
            },
            DecodedRecord::ContextSwitch {
                outgoing, incoming, ..
            } => Who {
                pids: [Some(outgoing.pid), Some(incoming.pid)],
                tids: [Some(outgoing.tid), Some(incoming.tid)],
                ..none
            },
            DecodedRecord::SchedContextSwitch {
                outgoing_tid,
                incoming_tid,
                ..
            } => Who {
                tids: [Some(*outgoing_tid), Some(*incoming_tid)],
                ..none
            },
            DecodedRecord::SchedThreadWakeup { waking_tid, .. } => Who {
                tids: [Some(*waking_tid), None],
                ..none
            },
            DecodedRecord::Blob { name, .. } => Who {
                name: Some(name),
                ..none
            },
            DecodedRecord::UserspaceObject { pid, name, .. } => Who {
                pids: [Some(*pid), None],
                name: Some(name),
                ..none
            },
            DecodedRecord::KernelObject {
                koid,
                object_type,
                name,
                args,
            } => {
                let (pid, tid) = if *object_type == fxtrace_format::ObjectType::THREAD {
                    (koid_arg(args, "process"), Some(*koid))
                } else if *object_type == fxtrace_format::ObjectType::PROCESS {
                    (Some(*koid), None)
                } else {
                    (None, None)
                };
                Who {
                    pids: [pid, None],
                    tids: [tid, None],
                    name: Some(name),
                    ..none
                }
            }
            DecodedRecord::LargeBlob {
                category,
                name,
                metadata,
                ..
            } => Who {
                pids: [metadata.as_ref().map(|m| m.thread.pid), None],
                tids: [metadata.as_ref().map(|m| m.thread.tid), None],
                name: Some(name),
                category: Some(category),
            },
            DecodedRecord::ProviderInfo { name, .. } => Who {
                name: Some(name),
                ..none
            },
            _ => none,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_whole_texts() {
        let g = Glob::new("req*st?");
        assert!(g.matches("request1"));
        assert!(!g.matches("request"));
        assert!(Glob::new("*").matches(""));
        assert!(Glob::new("a*b*c").matches("aXbYbZc"));
        assert!(!Glob::new("a*b*c").matches("aXbYbZ"));
        assert!(Glob::new("batch").matches("batch") && !Glob::new("batch").matches("batches"));
    }

    #[test]
    fn times_take_units_and_default_to_seconds() {
        let t = |s: &str| s.parse::<RelativeTime>().map(|t| t.0);
        assert_eq!(t("1.5"), Ok(1_500_000_000));
        assert_eq!(t("250ms"), Ok(250_000_000));
        assert_eq!(t("40us"), Ok(40_000));
        assert_eq!(t("1000ns"), Ok(1000));
        assert!(t("-1s").is_err() && t("soon").is_err());
    }

    #[test]
    fn type_names_and_aliases() {
        assert_eq!(
            "wakeup".parse(),
            Ok(TypeName::Kind(RecordKind::SchedThreadWakeup))
        );
        assert_eq!("context_switch".parse(), Ok(TypeName::AnySwitch));
        assert_eq!("instant".parse(), Ok(TypeName::Event(EventType::Instant)));
        assert!("bogus"
            .parse::<TypeName>()
            .unwrap_err()
            .contains("duration_begin"));
    }
}
