//! `fxtrace stats`: what a trace contains, and whether it is damaged.

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use fxtrace_format::{
    Decoded, RecordHead, RecordKind, SkipCounts, Summary, PROVIDER_EVENT_BUFFER_OVERFLOW,
};
use fxtrace_tools::read::wall::{WallClock, WallTime};
use fxtrace_tools::read::{Analysis, Outcome};

use super::input;
use super::CliError;

/// Arguments of `fxtrace stats`.
#[derive(Debug, Args)]
pub(crate) struct StatsArgs {
    /// The trace to read (`-` for standard input).
    #[arg(value_name = "FILE")]
    file: PathBuf,
}

/// The summary as an analysis: every record counted from its head, the few whose contents
/// matter (provider metadata, drop markers) decoded.
struct Stats {
    summary: Summary,
    /// When the trace was taken, if it says.
    wall: Option<WallClock>,
}

impl Analysis for Stats {
    fn head(&mut self, head: &RecordHead) -> bool {
        self.summary.count(head);
        self.summary.wants(head) || head.kind == RecordKind::KernelObject
    }

    fn add(&mut self, _: &RecordHead, record: &Decoded<'_>) -> io::Result<()> {
        self.summary.read(record);
        if self.wall.is_none() {
            self.wall = WallClock::of(&record.record);
        }
        Ok(())
    }
}

/// Prints the summary of the well-formed part; returns the decode error when damaged.
pub(crate) fn run(args: &StatsArgs) -> Result<ExitCode, CliError> {
    let mut input = input::open(&args.file)?;
    let mut stats = Stats {
        summary: Summary::new(),
        wall: None,
    };
    let outcome = input::read_all(&mut input, &mut stats)?;
    let mut out = io::stdout().lock();
    print(&mut out, &stats.summary, stats.wall, &outcome).map_err(CliError::Output)?;
    input::finish(outcome)
}

fn skip_line(s: &SkipCounts) -> String {
    let parts: Vec<String> = [
        ("unknown record type", s.unknown_record_type),
        ("unknown metadata type", s.unknown_metadata_type),
        ("unknown event type", s.unknown_event_type),
        ("unknown scheduling type", s.unknown_scheduling_type),
        ("unknown large record type", s.unknown_large_type),
        ("reserved index 0", s.reserved_index),
    ]
    .iter()
    .filter(|(_, n)| *n > 0)
    .map(|(what, n)| format!("{what}: {n}"))
    .collect();
    let mut line = format!("{} records", s.records());
    if !parts.is_empty() {
        line += &format!(" ({})", parts.join(", "));
    }
    line += &format!(", {} arguments of unknown type", s.unknown_arg_type);
    line
}

/// What a provider lost while tracing: the count the manager recorded, or only that its
/// buffer overflowed (the count was not recorded: a trace not written by `fxtrace record`).
fn dropped_note(summary: &Summary, id: u32) -> Option<String> {
    let overflowed = summary
        .provider_events
        .contains_key(&(id, PROVIDER_EVENT_BUFFER_OVERFLOW));
    match summary.records_dropped.get(&id) {
        // Why is in the drop marker's name (a full buffer, or before the trace started).
        Some(&n) if n > 0 => Some(format!("{n} records dropped")),
        _ if overflowed => Some("records dropped (buffer overflow; count not recorded)".into()),
        _ => None,
    }
}

fn print(
    out: &mut impl Write,
    summary: &Summary,
    wall: Option<WallClock>,
    outcome: &Outcome,
) -> io::Result<()> {
    writeln!(out, "file: {}", outcome.name)?;
    writeln!(
        out,
        "bytes: {} ({} in well-formed records)",
        outcome.bytes_read, outcome.bytes_decoded
    )?;
    writeln!(out, "records: {}", summary.records)?;
    for (kind, n) in &summary.by_kind() {
        writeln!(out, "  {kind:<22} {n}")?;
    }
    writeln!(out, "events: {}", summary.events())?;
    for (kind, n) in &summary.by_event_type() {
        writeln!(out, "  {kind:<22} {n}")?;
    }
    writeln!(out, "providers: {}", summary.providers.len())?;
    if summary.provider_records_not_listed > 0 {
        writeln!(
            out,
            "  (and {} provider records of providers beyond the first {} not listed)",
            summary.provider_records_not_listed,
            summary.providers.len()
        )?;
    }
    for (id, name) in &summary.providers {
        match dropped_note(summary, *id) {
            Some(note) => writeln!(out, "  {id:<6} {name:?}  {note}")?,
            None => writeln!(out, "  {id:<6} {name:?}")?,
        }
    }
    let total: u64 = summary
        .records_dropped
        .values()
        .fold(summary.records_dropped_not_listed, |a, &n| {
            a.saturating_add(n)
        });
    let uncounted = summary.provider_events.keys().any(|(id, event)| {
        *event == PROVIDER_EVENT_BUFFER_OVERFLOW && !summary.records_dropped.contains_key(id)
    });
    if uncounted {
        writeln!(
            out,
            "records dropped while tracing: {total} counted, more not counted (a buffer \
             overflowed without a recorded count)"
        )?;
    } else {
        writeln!(out, "records dropped while tracing: {total}")?;
    }
    if summary.markers_not_counted > 0 {
        writeln!(
            out,
            "  ({} drop markers outside the trace manager's section were not counted: a \
             provider wrote them)",
            summary.markers_not_counted
        )?;
    }
    for ((id, event), n) in &summary.provider_events {
        let what = if *event == PROVIDER_EVENT_BUFFER_OVERFLOW {
            "buffer overflow, records likely dropped"
        } else {
            "unknown event"
        };
        writeln!(
            out,
            "provider event: provider {id} event {event} ({what}) x{n}"
        )?;
    }
    writeln!(out, "skipped: {}", skip_line(&outcome.skipped))?;
    match (summary.first_ns(), summary.last_ns(), summary.span_ns()) {
        (Some(first), Some(last), Some(span)) => {
            writeln!(out, "time span: {first} ns .. {last} ns ({span} ns)")?
        }
        _ => writeln!(out, "time span: no timestamped records")?,
    }
    match (wall, summary.first_ns(), summary.last_ns()) {
        (Some(wall), Some(first), Some(last)) => {
            writeln!(out, "wall clock: {} .. {}", wall.at(first), wall.at(last))?
        }
        (Some(wall), _, _) => writeln!(out, "wall clock: taken {}", WallTime(wall.realtime_ns))?,
        (None, _, _) => writeln!(
            out,
            "wall clock: not recorded (the trace has no fxtrace wall-clock anchor)"
        )?,
    }
    match &outcome.error {
        None => writeln!(out, "status: ok")?,
        Some(e) => writeln!(out, "status: damaged: {e}")?,
    }
    Ok(())
}
