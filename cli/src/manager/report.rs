//! What a session did, per provider: the stats of `fuchsia.tracing.controller.ProviderStats`
//! plus what fxtrace adds (bytes and records copied, loss and its reason), and the summary
//! table `fxtrace record` prints.

use std::fmt;

use fxtrace::protocol::control::BufferingMode;

/// One provider's statistics at the end of a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderReport {
    /// Provider id in this session (its FXT provider id).
    pub id: u32,
    /// Process id (from `SO_PEERCRED`).
    pub pid: u32,
    /// The first provider of its process (its own id unless another provider of the same
    /// process came before it, by exec or beside it): the summary gives a process one line.
    pub process: u32,
    /// Name the provider registered with.
    pub name: String,
    /// Buffering mode.
    pub mode: BufferingMode,
    /// Records copied into the archive.
    pub records: u64,
    /// Durable-buffer bytes copied into the archive.
    pub durable_bytes: u64,
    /// Rolling-buffer (non-durable) bytes copied into the archive.
    pub rolling_bytes: u64,
    /// Records the provider dropped (header `num_records_dropped`, last read).
    pub records_dropped: u64,
    /// Of those, the records dropped before the trace started (header `reserved[2]`).
    pub records_dropped_before_start: u64,
    /// Times writing wrapped between rolling buffers (header `wrapped_count`).
    pub wrapped_count: u32,
    /// `100 * durable_data_end / durable_buffer_size` (0 in oneshot mode).
    pub durable_buffer_used_percent: u32,
    /// The fullest its buffer was seen toward dropping records, in percent
    /// ([`super::drain::fill_percent`]).
    pub fill_percent: u32,
    /// Streaming saves.
    pub saves: u64,
    /// Time the manager spent copying this provider's data into the archive.
    pub copy_time: std::time::Duration,
    /// Why the provider was lost (crashed, killed, protocol violation, timeout), if it was.
    pub lost: Option<String>,
    /// Other things worth knowing (late Start, malformed records cut, …).
    pub problems: Vec<String>,
}

impl ProviderReport {
    /// A provider `id` of process `pid` that copied nothing, dropped nothing and was not lost
    /// (the tests' starting point).
    #[cfg(test)]
    pub(crate) fn idle(id: u32, pid: u32, name: &str) -> Self {
        ProviderReport {
            id,
            pid,
            process: id,
            name: name.into(),
            mode: BufferingMode::Oneshot,
            records: 0,
            durable_bytes: 0,
            rolling_bytes: 0,
            records_dropped: 0,
            records_dropped_before_start: 0,
            wrapped_count: 0,
            durable_buffer_used_percent: 0,
            fill_percent: 0,
            saves: 0,
            copy_time: std::time::Duration::ZERO,
            lost: None,
            problems: vec![],
        }
    }

    /// Bytes copied into the archive.
    pub fn bytes(&self) -> u64 {
        self.durable_bytes + self.rolling_bytes
    }
}

/// One process's line of the summary: its providers together, named after its images in
/// order (`taskset → ingest`), the last its current one.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ProcessRow<'a> {
    providers: Vec<&'a ProviderReport>,
}

impl<'a> ProcessRow<'a> {
    /// The rows of `providers`, each process where its first provider is.
    fn of(providers: &'a [ProviderReport]) -> Vec<ProcessRow<'a>> {
        let mut rows: Vec<ProcessRow<'a>> = Vec::new();
        for p in providers {
            match rows.iter_mut().find(|r| r.providers[0].id == p.process) {
                Some(row) => row.providers.push(p),
                None => rows.push(ProcessRow { providers: vec![p] }),
            }
        }
        rows
    }

    /// The providers' ids, consecutive ones as a range (`1-3`, `4,7`).
    fn ids(&self) -> String {
        let mut out = String::new();
        let ids: Vec<u32> = self.providers.iter().map(|p| p.id).collect();
        let mut i = 0;
        while i < ids.len() {
            let mut j = i;
            while j + 1 < ids.len() && ids[j + 1] == ids[j].wrapping_add(1) {
                j += 1;
            }
            if !out.is_empty() {
                out.push(',');
            }
            out += &match j - i {
                0 => ids[i].to_string(),
                _ => format!("{}-{}", ids[i], ids[j]),
            };
            i = j + 1;
        }
        out
    }

    /// Its images' names in order, each once in a row, the current last; cut at the front
    /// to `width` characters so that the current image stays.
    fn name(&self, width: usize) -> String {
        let mut names: Vec<&str> = Vec::new();
        for p in &self.providers {
            if names.last() != Some(&p.name.as_str()) {
                names.push(&p.name);
            }
        }
        let chain = names.join(" → ");
        let count = chain.chars().count();
        if count <= width {
            return chain;
        }
        let last = names.last().copied().unwrap_or_default();
        if names.len() > 1 && last.chars().count() + 2 <= width {
            let keep = width - 1;
            let tail: String = chain.chars().skip(count - keep).collect();
            return format!("…{tail}");
        }
        super::archive::truncate_str(last, width).to_owned()
    }

    fn sum(&self, of: impl Fn(&ProviderReport) -> u64) -> u64 {
        self.providers
            .iter()
            .fold(0u64, |total, p| total.saturating_add(of(p)))
    }
}

/// A section written by a source outside the provider protocol (the kernel provider).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SectionReport {
    /// Its provider id in the archive.
    pub id: u32,
    /// Its name.
    pub name: String,
    /// Records written.
    pub records: u64,
    /// Bytes written.
    pub bytes: u64,
    /// What the section lost, once its source has said (`None`: not reported).
    pub losses: Option<SectionLosses>,
}

/// What a section from outside the protocol lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SectionLosses {
    /// Records fxtrace could not write into the section (counted in it).
    pub records_dropped: u64,
    /// Records its source lost before fxtrace saw them (the kernel's full rings), or could
    /// not read.
    pub records_lost: u64,
}

/// A connection refused because of its peer credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedPeer {
    /// Peer pid.
    pub pid: i32,
    /// Peer uid.
    pub uid: u32,
}

/// The end-of-trace table: one line per provider, then where the trace went.
#[derive(Debug)]
pub struct SummaryTable<'a> {
    /// The providers.
    pub providers: &'a [ProviderReport],
    /// Sections from outside the protocol (the kernel provider).
    pub sections: &'a [SectionReport],
    /// Refused peers.
    pub refused: &'a [RefusedPeer],
    /// Where the trace was written.
    pub output: &'a std::path::Path,
    /// Size of the trace in bytes.
    pub output_bytes: u64,
    /// A command was run (an empty table then says what to do).
    pub command_ran: bool,
}

/// A provider's problems: the first [`Problems::KEPT`] messages, and how many more there were
/// (a provider that repeats a violation cannot grow the manager's memory or its log without
/// bound).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Problems {
    kept: Vec<String>,
    more: u64,
}

impl Problems {
    /// Messages kept per provider.
    pub const KEPT: usize = 32;

    /// Note `message`; `true` if it was kept (say it), `false` if only counted.
    pub fn push(&mut self, message: String) -> bool {
        if self.kept.len() < Self::KEPT {
            self.kept.push(message);
            true
        } else {
            self.more = self.more.saturating_add(1);
            false
        }
    }

    /// The messages kept, then one saying how many more there were.
    pub fn lines(&self) -> impl Iterator<Item = String> + '_ {
        let more = (self.more > 0).then(|| format!("{} more problems not listed", self.more));
        self.kept.iter().cloned().chain(more)
    }

    /// The messages kept.
    pub fn kept(&self) -> &[String] {
        &self.kept
    }

    /// No problem at all.
    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }
}

/// A repeated event told at most once per interval: the first at once, later ones counted and
/// told together once the interval has passed (a flood of refused or evicted connections must
/// not flood the log too).
#[derive(Debug, Clone)]
pub struct Throttle {
    interval: std::time::Duration,
    /// Events noted and not told yet.
    noted: u64,
    /// When the last line was told.
    told: Option<std::time::Instant>,
}

impl Throttle {
    /// At most one line per `interval`.
    pub const fn new(interval: std::time::Duration) -> Self {
        Throttle {
            interval,
            noted: 0,
            told: None,
        }
    }

    /// Count one event.
    pub fn note(&mut self) {
        self.noted = self.noted.saturating_add(1);
    }

    /// The events to tell in one line at `now`, if any were noted and no line was told less
    /// than the interval ago (call it every turn, so that the last ones are told too).
    pub fn due(&mut self, now: std::time::Instant) -> Option<u64> {
        if self.noted == 0
            || self
                .told
                .is_some_and(|at| now.saturating_duration_since(at) < self.interval)
        {
            return None;
        }
        self.told = Some(now);
        Some(std::mem::take(&mut self.noted))
    }

    /// The events not told yet, whatever the interval (at the end).
    pub fn rest(&mut self) -> Option<u64> {
        (self.noted > 0).then(|| std::mem::take(&mut self.noted))
    }

    /// When the events noted and not told yet are due (`None`: nothing to tell): a loop that
    /// sleeps until something happens wakes then, so that the last of a burst is told too.
    pub fn next_due(&self) -> Option<std::time::Instant> {
        (self.noted > 0).then(|| {
            self.told
                .map_or_else(std::time::Instant::now, |at| at + self.interval)
        })
    }

    /// Nothing to tell, and the last line told an interval ago or more (or never).
    fn idle(&self, now: std::time::Instant) -> bool {
        self.noted == 0
            && self.told.map_or(true, |at| {
                now.saturating_duration_since(at) >= self.interval
            })
    }
}

/// Log lines of repeated events, each kind told at most once per interval ([`Throttle`] per
/// key: a rule and the uid that broke it, say): the first line at once, the later ones of the
/// same key counted and told as one line, the last of them with its count, once the interval
/// has passed. Keys are kept only while they have something to tell or told it less than an
/// interval ago, at most [`ThrottledLines::MAX_KEYS`]; events of further keys are counted
/// under one line of their own.
#[derive(Debug)]
pub struct ThrottledLines<K: Ord> {
    interval: std::time::Duration,
    keys: std::collections::BTreeMap<K, (Throttle, String)>,
    /// Events of keys beyond [`Self::MAX_KEYS`], and the last of their lines.
    overflow: (Throttle, String),
}

impl<K: Ord> ThrottledLines<K> {
    /// Most keys followed at once.
    pub const MAX_KEYS: usize = 1024;

    /// At most one line per key and `interval`.
    pub fn new(interval: std::time::Duration) -> Self {
        ThrottledLines {
            interval,
            keys: std::collections::BTreeMap::new(),
            overflow: (Throttle::new(interval), String::new()),
        }
    }

    /// Note an event of `key` whose line is `line`; the line to log now, if one is due.
    pub fn note(&mut self, key: K, line: String, now: std::time::Instant) -> Option<String> {
        self.forget_idle(now);
        let interval = self.interval;
        let (throttle, last) = if self.keys.len() < Self::MAX_KEYS || self.keys.contains_key(&key) {
            self.keys
                .entry(key)
                .or_insert_with(|| (Throttle::new(interval), String::new()))
        } else {
            &mut self.overflow
        };
        throttle.note();
        *last = line;
        throttle.due(now).map(|n| Self::told(n, last))
    }

    /// The lines due at `now` (call it every turn, so the last events are told too).
    pub fn due(&mut self, now: std::time::Instant) -> Vec<String> {
        let mut lines: Vec<String> = self
            .keys
            .values_mut()
            .chain(std::iter::once(&mut self.overflow))
            .filter_map(|(throttle, last)| throttle.due(now).map(|n| Self::told(n, last)))
            .collect();
        lines.retain(|l| !l.is_empty());
        self.forget_idle(now);
        lines
    }

    /// When the next line is due ([`Throttle::next_due`] of every key), if any is.
    pub fn next_due(&self) -> Option<std::time::Instant> {
        self.keys
            .values()
            .chain(std::iter::once(&self.overflow))
            .filter_map(|(throttle, _)| throttle.next_due())
            .min()
    }

    /// Keys with nothing to tell whose last line is an interval old: a new event of theirs is
    /// told at once anyway.
    fn forget_idle(&mut self, now: std::time::Instant) {
        self.keys.retain(|_, (throttle, _)| !throttle.idle(now));
    }

    fn told(n: u64, last: &str) -> String {
        if n > 1 {
            format!("{last} ({n} such since the last such line)")
        } else {
            last.to_owned()
        }
    }
}

/// `s` with every control character (escape sequences, newlines, …) replaced by `?`, as `ps`
/// shows names: a provider's name or a session's output name is chosen by another program,
/// and printed on the user's terminal.
pub fn printable(s: &str) -> std::borrow::Cow<'_, str> {
    if s.chars().any(char::is_control) {
        s.chars()
            .map(|c| if c.is_control() { '?' } else { c })
            .collect::<String>()
            .into()
    } else {
        s.into()
    }
}

/// What to do about a command that connected no provider.
pub const NO_PROVIDER_HINT: &str = "no provider connected: the command does not link fxtrace; \
     use --preload to trace it unmodified, or --system-wide for its context switches";

/// A buffer at least this full (in percent) is said to be about to drop records.
pub const FILL_WARNING_PERCENT: u32 = 80;

/// What a buffer [`FILL_WARNING_PERCENT`] full or more that dropped nothing yet means, and
/// what keeps more, for its buffering mode.
pub fn fill_hint(p: &ProviderReport) -> String {
    let fill = p.fill_percent;
    match p.mode {
        BufferingMode::Oneshot => format!(
            "its buffer was {fill}% full: records are dropped once it is full; a larger -b, \
             or -m streaming, keeps more"
        ),
        BufferingMode::Streaming => format!(
            "at its fullest, {fill}% of its buffer was not saved yet: records are dropped when \
             both halves are full (or its durable buffer is); a larger -b gives the manager \
             more time"
        ),
        BufferingMode::Circular => format!(
            "its durable buffer (strings, threads) was {fill}% full: tracing stops when it \
             is full; a larger -b keeps more"
        ),
    }
}

/// Why `p` dropped records and what keeps more: before the trace started, and after it, for
/// its buffering mode.
pub fn drop_hint(p: &ProviderReport) -> String {
    let before = p.records_dropped_before_start.min(p.records_dropped);
    let early = format!(
        "{before} before the trace started: the program wrote them before its provider's \
         start completed (FXTRACE_PRELOAD_START_WAIT_MS, or the provider's start_wait, makes \
         it wait longer)"
    );
    match (before, p.records_dropped - before) {
        (0, _) => full_hint(p),
        (_, 0) => early,
        (_, after) => format!("{early}; {after} after it: {}", full_hint(p)),
    }
}

/// Why `p` dropped records once tracing, and what keeps more, for its buffering mode.
fn full_hint(p: &ProviderReport) -> String {
    match p.mode {
        BufferingMode::Oneshot => "buffer full; a larger -b or -m streaming keeps more".to_owned(),
        BufferingMode::Circular => "the durable buffer (strings, threads, metadata) filled \
             up; a larger -b keeps more"
            .to_owned(),
        BufferingMode::Streaming => {
            let saved = p.rolling_bytes as f64;
            let secs = p.copy_time.as_secs_f64();
            let rate = if p.saves > 0 && secs > 0.0 {
                format!(
                    "{} buffers saved, copied at {:.0} MiB/s",
                    p.saves,
                    saved / secs / f64::from(1 << 20)
                )
            } else {
                format!("{} buffers saved", p.saves)
            };
            format!(
                "streaming: the provider filled both halves of its buffer before the manager \
                 had saved one; {rate}; a larger -b gives the manager time to keep up"
            )
        }
    }
}

impl fmt::Display for SummaryTable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:>4} {:>8}  {:<20} {:>10} {:>12} {:>9}  {:<9} {:<5}",
            "id", "pid", "name", "records", "bytes", "dropped", "mode", "lost"
        )?;
        for row in ProcessRow::of(self.providers) {
            let p = row.providers[row.providers.len() - 1];
            let lost = row.providers.iter().any(|p| p.lost.is_some());
            writeln!(
                f,
                "{:>4} {:>8}  {:<20} {:>10} {:>12} {:>9}  {:<9} {:<5}",
                row.ids(),
                p.pid,
                row.name(20),
                row.sum(|p| p.records),
                row.sum(ProviderReport::bytes),
                row.sum(|p| p.records_dropped),
                p.mode.as_str(),
                if lost { "LOST" } else { "no" },
            )?;
        }
        for s in self.sections {
            let name = super::archive::truncate_str(&s.name, 20);
            let (dropped, lost) = match s.losses {
                Some(l) => (
                    l.records_dropped.to_string(),
                    if l.records_lost > 0 { "LOST" } else { "no" },
                ),
                None => ("-".to_owned(), "-"),
            };
            writeln!(
                f,
                "{:>4} {:>8}  {:<20} {:>10} {:>12} {:>9}  {:<9} {:<5}",
                s.id,
                std::process::id(),
                name,
                s.records,
                s.bytes,
                dropped,
                "built-in",
                lost,
            )?;
        }
        if self.providers.is_empty() && self.sections.is_empty() {
            if self.command_ran {
                writeln!(f, "{NO_PROVIDER_HINT}")?;
            } else {
                writeln!(f, "(no provider connected)")?;
            }
        }
        for p in self.providers {
            let saves = match p.saves {
                0 => String::new(),
                n => format!(", {n} streaming saves"),
            };
            let micros = p.copy_time.as_micros();
            writeln!(
                f,
                "provider {} ({}): {} durable + {} non-durable bytes copied in {micros} µs, \
                 durable buffer {}% used, wrapped {} times{saves}",
                p.id,
                p.name,
                p.durable_bytes,
                p.rolling_bytes,
                p.durable_buffer_used_percent,
                p.wrapped_count,
            )?;
            if let Some(reason) = &p.lost {
                writeln!(f, "provider {} ({}) lost: {reason}", p.id, p.name)?;
            }
            for problem in &p.problems {
                writeln!(f, "provider {} ({}): {problem}", p.id, p.name)?;
            }
            if p.records_dropped > 0 {
                writeln!(
                    f,
                    "provider {} ({}): {} records dropped ({})",
                    p.id,
                    p.name,
                    p.records_dropped,
                    drop_hint(p)
                )?;
            } else if p.fill_percent >= FILL_WARNING_PERCENT {
                writeln!(f, "provider {} ({}): {}", p.id, p.name, fill_hint(p))?;
            }
        }
        for r in self.refused {
            writeln!(
                f,
                "refused a connection from pid {} uid {} (not this user)",
                r.pid, r.uid
            )?;
        }
        write!(
            f,
            "trace written to {} ({} bytes)",
            self.output.display(),
            self.output_bytes
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_throttle_tells_the_first_event_at_once_and_the_rest_counted_once_per_interval() {
        let second = std::time::Duration::from_secs(1);
        let mut t = Throttle::new(second);
        let t0 = std::time::Instant::now();
        assert_eq!(t.due(t0), None, "nothing noted");
        t.note();
        assert_eq!(t.due(t0), Some(1));
        for _ in 0..99 {
            t.note();
        }
        assert_eq!(t.due(t0 + second / 2), None, "within the interval");
        assert_eq!(t.due(t0 + second), Some(99));
        assert_eq!(t.due(t0 + 3 * second), None, "told already");
        t.note();
        assert_eq!(t.rest(), Some(1));
        assert_eq!(t.rest(), None);
    }

    #[test]
    fn throttled_lines_tell_each_key_once_per_interval_with_its_count() {
        let second = std::time::Duration::from_secs(1);
        let t0 = std::time::Instant::now();
        let mut lines = ThrottledLines::new(second);
        assert_eq!(
            lines.note(("policy", 7), "refused a".into(), t0).as_deref(),
            Some("refused a")
        );
        // Another key is told at once; the same key's next events are counted.
        assert_eq!(
            lines.note(("policy", 8), "refused b".into(), t0).as_deref(),
            Some("refused b")
        );
        for i in 0..50 {
            assert_eq!(lines.note(("policy", 7), format!("refused a{i}"), t0), None);
        }
        // Nothing is due before the interval has passed; then the count is.
        assert_eq!(lines.next_due(), Some(t0 + second));
        assert!(lines.due(t0 + second / 2).is_empty());
        assert_eq!(
            lines.due(t0 + second),
            ["refused a49 (50 such since the last such line)"]
        );
        assert_eq!(lines.next_due(), None);
        // Told and idle for an interval: forgotten, and told at once again.
        assert!(lines.due(t0 + 2 * second).is_empty());
        assert!(lines.keys.is_empty());
        assert_eq!(
            lines
                .note(("policy", 7), "again".into(), t0 + 2 * second)
                .as_deref(),
            Some("again")
        );
        // Keys beyond the bound share one line.
        let mut many = ThrottledLines::new(second);
        for uid in 0..ThrottledLines::<(&str, u32)>::MAX_KEYS as u32 + 10 {
            many.note(("policy", uid), format!("uid {uid}"), t0);
        }
        assert_eq!(many.keys.len(), ThrottledLines::<(&str, u32)>::MAX_KEYS);
        assert_eq!(
            many.due(t0 + second),
            ["uid 1033 (9 such since the last such line)"]
        );
    }

    #[test]
    fn table_lists_each_provider_and_the_output() {
        let p = ProviderReport {
            id: 1,
            pid: 42,
            process: 1,
            name: "probe".into(),
            mode: BufferingMode::Streaming,
            records: 10,
            durable_bytes: 16,
            rolling_bytes: 64,
            records_dropped: 3,
            records_dropped_before_start: 0,
            wrapped_count: 2,
            durable_buffer_used_percent: 1,
            fill_percent: 90,
            saves: 2,
            copy_time: std::time::Duration::from_micros(5),
            lost: Some("killed by signal 9".into()),
            problems: vec!["did not answer Start".into()],
        };
        let table = SummaryTable {
            providers: &[p],
            sections: &[
                SectionReport {
                    id: 9,
                    name: "kernel".into(),
                    records: 5,
                    bytes: 40,
                    losses: Some(SectionLosses {
                        records_dropped: 4,
                        records_lost: 22,
                    }),
                },
                SectionReport {
                    id: 10,
                    name: "quiet".into(),
                    records: 1,
                    bytes: 8,
                    losses: None,
                },
            ],
            refused: &[RefusedPeer { pid: 7, uid: 65534 }],
            output: std::path::Path::new("/tmp/t.fxt"),
            output_bytes: 123,
            command_ran: true,
        }
        .to_string();
        assert!(table.contains("probe"), "{table}");
        assert!(table.contains("streaming"));
        assert!(table.contains("LOST"));
        assert!(table.contains("killed by signal 9"));
        assert!(table.contains("3 records dropped"));
        assert!(
            table.contains("a larger -b gives the manager time to keep up")
                && table.contains("2 buffers saved, copied at 12 MiB/s"),
            "streaming hint: {table}"
        );
        assert!(!table.contains("-m streaming"), "{table}");
        assert!(table.contains("uid 65534"));
        assert!(table.contains(
            "provider 1 (probe): 16 durable + 64 non-durable bytes copied in 5 µs, durable \
             buffer 1% used, wrapped 2 times, 2 streaming saves"
        ));
        assert!(table.ends_with("trace written to /tmp/t.fxt (123 bytes)"));
        let kernel = table.lines().find(|l| l.contains("kernel")).unwrap();
        assert!(kernel.contains("built-in"), "{kernel}");
        assert!(
            kernel.contains(" 4 ") && kernel.trim_end().ends_with("LOST"),
            "the kernel's losses in its row: {kernel}"
        );
        let quiet = table.lines().find(|l| l.contains("quiet")).unwrap();
        assert!(quiet.trim_end().ends_with('-'), "not reported: {quiet}");
        let line = table.lines().nth(1).unwrap();
        assert!(line.contains(" 80 "), "bytes column: {line}");
    }

    #[test]
    fn a_process_is_one_line_named_after_its_images() {
        let provider = |id: u32, process: u32, name: &str, records: u64| ProviderReport {
            process,
            records,
            rolling_bytes: records * 8,
            records_dropped: 1,
            lost: (id == 2).then(|| "gone".to_owned()),
            ..ProviderReport::idle(id, 7, name)
        };
        // taskset execs ingest, which has a second provider; another process; a long chain.
        let providers = [
            provider(1, 1, "taskset", 10),
            provider(2, 1, "ingest", 20),
            provider(3, 1, "ingest", 30),
            provider(4, 4, "other", 1),
            provider(5, 5, "a-rather-long-launcher", 1),
            provider(7, 5, "a-long-image-name", 1),
        ];
        let table = SummaryTable {
            providers: &providers,
            sections: &[],
            refused: &[],
            output: std::path::Path::new("t.fxt"),
            output_bytes: 8,
            command_ran: true,
        }
        .to_string();
        let rows: Vec<&str> = table
            .lines()
            .skip(1)
            .take_while(|l| !l.starts_with("provider"))
            .collect();
        assert_eq!(rows.len(), 3, "{table}");
        assert!(
            rows[0].starts_with(" 1-3        7  taskset → ingest ")
                && rows[0].contains("        60          480         3  oneshot   LOST"),
            "{table}"
        );
        assert!(rows[1].starts_with("   4        7  other "), "{table}");
        assert!(
            rows[2].starts_with(" 5,7        7  …→ a-long-image-name "),
            "{table}"
        );
        // Each provider still has its own lines below.
        assert!(table.contains("provider 3 (ingest): 0 durable + 240 non-durable bytes"));
    }

    #[test]
    fn problems_keep_the_first_ones_and_count_the_rest() {
        let mut p = Problems::default();
        for i in 0..Problems::KEPT + 5 {
            assert_eq!(p.push(format!("problem {i}")), i < Problems::KEPT);
        }
        let lines: Vec<String> = p.lines().collect();
        assert_eq!(lines.len(), Problems::KEPT + 1);
        assert_eq!(lines[0], "problem 0");
        assert_eq!(lines[Problems::KEPT], "5 more problems not listed");
    }

    #[test]
    fn control_characters_are_not_printed() {
        assert_eq!(printable("plain name"), "plain name");
        assert_eq!(
            printable("\u{1b}]0;pwned\u{7}\u{1b}[2J\nx\u{9b}"),
            "?]0;pwned??[2J?x?"
        );
        assert!(matches!(printable("é ok"), std::borrow::Cow::Borrowed(_)));
    }

    #[test]
    fn hints_match_the_mode_and_an_empty_command() {
        let mut p = ProviderReport {
            records: 1,
            records_dropped: 1,
            ..ProviderReport::idle(1, 42, "p")
        };
        assert!(drop_hint(&p).contains("-m streaming"));
        // Drops before the start are not a full buffer.
        p.records_dropped = 5;
        p.records_dropped_before_start = 5;
        let early = drop_hint(&p);
        assert!(
            early.starts_with("5 before the trace started") && !early.contains("buffer full"),
            "{early}"
        );
        p.records_dropped_before_start = 2;
        let both = drop_hint(&p);
        assert!(
            both.starts_with("2 before the trace started")
                && both.contains("; 3 after it: buffer full"),
            "{both}"
        );
        // A header word larger than the total (a hostile provider) is held to the total.
        p.records_dropped_before_start = 9;
        assert!(drop_hint(&p).starts_with("5 before"), "{}", drop_hint(&p));
        p.records_dropped = 1;
        p.records_dropped_before_start = 0;
        p.mode = BufferingMode::Streaming;
        assert!(!drop_hint(&p).contains("-m streaming"));
        assert!(drop_hint(&p).contains("0 buffers saved"));
        let table = |command_ran| {
            SummaryTable {
                providers: &[],
                sections: &[],
                refused: &[],
                output: std::path::Path::new("t.fxt"),
                output_bytes: 8,
                command_ran,
            }
            .to_string()
        };
        assert!(table(true).contains(NO_PROVIDER_HINT));
        assert!(table(false).contains("(no provider connected)"));
    }
}
