//! The Markdown the run prints: the summary table (rows of issue 11 / BENCHMARKS.md) and the
//! per-candidate details it was made from.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::candidates::{Candidate, Kind};
use crate::measure::median;
use crate::wire::Sample;

/// Every round of every candidate (by name), and the failures.
#[derive(Debug, Default)]
pub(crate) struct Results {
    /// Samples per candidate name.
    pub(crate) samples: BTreeMap<&'static str, Vec<Sample>>,
    /// Failures per candidate name (one message per failed round).
    pub(crate) failures: BTreeMap<&'static str, Vec<String>>,
}

/// Median and range of one candidate over its rounds.
#[derive(Debug, Clone, Copy)]
struct Summary {
    value: f64,
    min: f64,
    max: f64,
    ns: f64,
}

impl Results {
    fn summary(&self, name: &str) -> Option<Summary> {
        let samples = self.samples.get(name).filter(|s| !s.is_empty())?;
        let mut values: Vec<f64> = samples.iter().map(|s| s.value).collect();
        let mut ns: Vec<f64> = samples.iter().map(|s| s.ns).collect();
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Some(Summary {
            value: median(&mut values),
            min,
            max,
            ns: median(&mut ns),
        })
    }

    /// Median ns of one `rdtscp` over every ratio process.
    pub(crate) fn rdtscp_ns(&self) -> Option<f64> {
        let mut all: Vec<f64> = self
            .samples
            .values()
            .flatten()
            .filter_map(|s| s.rdtscp_ns)
            .collect();
        (!all.is_empty()).then(|| median(&mut all))
    }
}

/// How a summary row combines candidates.
enum Row {
    /// One ratio candidate.
    One(&'static str, &'static str),
    /// Two ratio candidates, `a / b` (span / event).
    Pair(&'static str, &'static str, &'static str),
    /// Two ratio candidates compared in ns, `a vs b`.
    Versus(&'static str, &'static str, &'static str),
    /// What one ratio candidate costs over another, `a − b` (medians; the range from `a`'s
    /// least less `b`'s most to `a`'s most less `b`'s least).
    Over(&'static str, &'static str, &'static str),
    /// Two scaling candidates, `a / b`, and their quotient.
    Scaling(&'static str, &'static str, &'static str),
}

const ROWS: &[Row] = &[
    Row::One("`_rdtsc()`", "rdtsc"),
    Row::One(
        "two `rdtscp` (the floor of a span's two timestamps)",
        "rdtscp_pair",
    ),
    Row::One(
        "ideal writer (rdtscp + fetch_add + 3 stores, pre-faulted ring)",
        "ideal",
    ),
    Row::One(
        "ideal span (two rdtscp + fetch_add + 3 stores, pre-faulted ring)",
        "ideal_span",
    ),
    Row::One(
        "**Tracy** zone (`tracy_client::span!`, drain attached)",
        "tracy_zone",
    ),
    Row::One(
        "**fastrace** `LocalSpan` (reporter set)",
        "fastrace_local_span",
    ),
    Row::One("fxtrace `instant` (0 args, static strings)", "fx_instant"),
    Row::One(
        "fxtrace C API `fxtrace_instant_static` (through the C ABI)",
        "fx_c_instant_static",
    ),
    Row::One("fxtrace `duration` guard", "fx_duration"),
    Row::One("fxtrace `#[traced]` call", "fx_traced"),
    Row::Over(
        "fxtrace `#[traced]` call less the same function's untraced call (the plain function)",
        "fx_traced",
        "plain_fn",
    ),
    Row::One("fxtrace `#[traced]` with `args(a, b)`", "fx_traced_args"),
    Row::Pair(
        "`tracing` registry + a no-op layer, span / event",
        "noop_layer_span",
        "noop_layer_event",
    ),
    Row::Pair(
        "`tracing` registry + the least a recording layer does (clock reads, fields visited, message formatted; nothing kept or written), span / event",
        "floor_layer_span",
        "floor_layer_event",
    ),
    Row::Pair(
        "fxtrace `TracingLayer` span / event",
        "fx_layer_span",
        "fx_layer_event",
    ),
    Row::Pair(
        "`tracing-tracy` `TracyLayer` span / event (drain attached)",
        "tracy_layer_span",
        "tracy_layer_event",
    ),
    Row::Pair(
        "`tracing-chrome` span / event",
        "chrome_span",
        "chrome_event",
    ),
    Row::Versus(
        "fxtrace disabled call site vs the empty loop",
        "fx_disabled",
        "empty_loop",
    ),
    Row::Versus(
        "`#[traced]` disabled vs the plain function",
        "fx_traced_disabled",
        "plain_fn",
    ),
    Row::Scaling(
        "2 threads / 1 thread, aggregate: fxtrace instant / ideal writer",
        "fx_instant_2threads",
        "ideal_2threads",
    ),
];

fn ratio(s: Option<Summary>) -> String {
    s.map_or_else(|| "—".into(), |s| format!("{:.2}", s.value))
}

fn ns(s: Option<Summary>) -> String {
    s.map_or_else(|| "—".into(), |s| format!("{:.1}", s.ns))
}

fn range(s: Option<Summary>) -> String {
    s.map_or_else(|| "—".into(), |s| format!("{:.2}–{:.2}", s.min, s.max))
}

/// The summary table: ratio to `rdtscp` (median of the rounds), ns per call, ratio range.
pub(crate) fn summary(results: &Results) -> String {
    let mut out = String::from(
        "| call | ratio to `rdtscp` | ns here | range of the ratio (min–max) |\n|---|---|---|---|\n",
    );
    for row in ROWS {
        let line = match *row {
            Row::One(label, a) => {
                let a = results.summary(a);
                format!("| {label} | {} | {} | {} |", ratio(a), ns(a), range(a))
            }
            Row::Pair(label, a, b) => {
                let (a, b) = (results.summary(a), results.summary(b));
                format!(
                    "| {label} | {} / {} | {} / {} | {} / {} |",
                    ratio(a),
                    ratio(b),
                    ns(a),
                    ns(b),
                    range(a),
                    range(b)
                )
            }
            Row::Versus(label, a, b) => {
                let (a, b) = (results.summary(a), results.summary(b));
                format!(
                    "| {label} | {} vs {} | {} vs {} | {} vs {} |",
                    ratio(a),
                    ratio(b),
                    ns(a),
                    ns(b),
                    range(a),
                    range(b)
                )
            }
            Row::Over(label, a, b) => match (results.summary(a), results.summary(b)) {
                (Some(a), Some(b)) => format!(
                    "| {label} | {:.2} | {:.1} | {:.2}–{:.2} |",
                    a.value - b.value,
                    a.ns - b.ns,
                    a.min - b.max,
                    a.max - b.min
                ),
                _ => format!("| {label} | — | — | — |"),
            },
            Row::Scaling(label, a, b) => {
                let (a, b) = (results.summary(a), results.summary(b));
                let quotient = match (a, b) {
                    (Some(a), Some(b)) => format!(" (= {:.2} of the ideal's)", a.value / b.value),
                    _ => String::new(),
                };
                format!(
                    "| {label} | {} / {}{quotient} | | {} / {} |",
                    ratio(a),
                    ratio(b),
                    range(a),
                    range(b)
                )
            }
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// One line per candidate: rounds, median and range, ns, warm-up, faults, consumer check.
pub(crate) fn details(candidates: &[Candidate], results: &Results) -> String {
    let mut out = String::from(
        "| candidate | kind | rounds | median | min–max | ns/call | warm-up blocks (median; unsettled) | faults in measured blocks | off CPU (median) | consumer check |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for candidate in candidates {
        let samples = results
            .samples
            .get(candidate.name)
            .map_or(&[][..], Vec::as_slice);
        let failures = results.failures.get(candidate.name).map_or(0, Vec::len);
        let summary = results.summary(candidate.name);
        let mut warmups: Vec<f64> = samples.iter().map(|s| f64::from(s.warmup_blocks)).collect();
        let warmup = if warmups.is_empty() {
            f64::NAN
        } else {
            median(&mut warmups)
        };
        let unsettled = samples.iter().filter(|s| !s.settled).count();
        let faults: u64 = samples.iter().map(|s| s.faults).sum();
        let mut off: Vec<f64> = samples.iter().map(|s| s.off_cpu * 100.0).collect();
        let off = if off.is_empty() {
            f64::NAN
        } else {
            median(&mut off)
        };
        let check = samples.last().map_or("", |s| s.check.as_str());
        let kind = match candidate.kind {
            Kind::Ratio => "÷ rdtscp",
            Kind::Scaling => "2 thr ÷ 1",
        };
        let rounds = if failures > 0 {
            format!("{} (+{failures} failed)", samples.len())
        } else {
            samples.len().to_string()
        };
        let _ = writeln!(
            out,
            "| `{}` | {kind} | {rounds} | {} | {} | {} | {warmup:.0}; {unsettled} | {faults} | {off:.1} % | {check} |",
            candidate.name,
            ratio(summary),
            range(summary),
            ns(summary),
        );
    }
    out
}
