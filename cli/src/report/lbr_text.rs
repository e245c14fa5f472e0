//! The LBR report as text: a summary, then the hottest branch edges overall and, on request,
//! per CPU or per thread, with addresses symbolized where a binary covers them.
//!
//! An address is named by a binary given by hand if one covers it, else by the trace mapping
//! it was resolved to: `func+0xoff (file:line)` when that file was loaded
//! ([`Symbolizer::load_mappings`]), `lib.so+0xOFFSET` (the file offset) when it was not or
//! has no symbol there, and the raw address alone when no mapping holds it.
//!
//! ```text
//! LBR report: 3 samples, 96 branches, 12 distinct edges, 2 CPUs
//! mispredicted: 3 of 96 branches (3.1%)
//! …
//!
//! all CPUs and threads: 3 samples, 96 branches, 3.1% mispredicted; top 2 of 12 edges
//!     count   share  mispred  avg-cyc  from -> to
//!        40   41.7%     2.5%     12.0  0x401136 main+0x16 (t.c:7) -> 0x401126 hot (t.c:3)
//! ```

use std::io::{self, Write};

use super::lbr::{EdgeTable, LbrReport};
use super::symbolize::{MappedFile, Symbolizer};
use fxtrace_format::mmap::build_id_hex;

/// Which breakdown follows the overall table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Breakdown {
    /// The overall table only.
    #[default]
    Overall,
    /// One table per CPU.
    PerCpu,
    /// One table per thread (and one for samples no thread is known for).
    PerThread,
}

/// How much to print.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LbrTextOptions {
    /// Edges per table.
    pub top: usize,
    /// Tables after the overall one.
    pub breakdown: Breakdown,
}

impl Default for LbrTextOptions {
    fn default() -> Self {
        LbrTextOptions {
            top: 20,
            breakdown: Breakdown::Overall,
        }
    }
}

fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        "0.0%".to_string()
    } else {
        format!("{:.1}%", part as f64 * 100.0 / whole as f64)
    }
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn address(symbols: &Symbolizer, report: &LbrReport, a: u64) -> String {
    let loc = symbols
        .locate(a)
        .or_else(|| report.mapping_of(a).map(|m| symbols.locate_mapped(a, m)));
    match loc {
        Some(loc) => format!("{a:#x} {loc}"),
        None => format!("{a:#x}"),
    }
}

fn table(
    out: &mut impl Write,
    title: &str,
    t: &EdgeTable,
    (symbols, report): (&Symbolizer, &LbrReport),
    top: usize,
) -> io::Result<()> {
    let shown = t.top(top);
    writeln!(out)?;
    writeln!(
        out,
        "{title}: {}, {}, {} mispredicted; top {} of {}",
        plural(t.samples() as usize, "sample", "samples"),
        plural(t.branches() as usize, "branch", "branches"),
        percent(t.mispredicted(), t.branches()),
        shown.len(),
        plural(t.distinct_edges(), "edge", "edges")
    )?;
    writeln!(
        out,
        "{:>9} {:>7} {:>8} {:>8}  from -> to",
        "count", "share", "mispred", "avg-cyc"
    )?;
    for (edge, s) in shown {
        let cycles = s
            .average_cycles()
            .map_or_else(|| "-".to_string(), |c| format!("{c:.1}"));
        writeln!(
            out,
            "{:>9} {:>7} {:>8} {:>8}  {} -> {}",
            s.count,
            percent(s.count, t.branches()),
            percent(s.mispredicted, s.count),
            cycles,
            address(symbols, report, edge.from),
            address(symbols, report, edge.to)
        )?;
    }
    Ok(())
}

fn thread_title(report: &LbrReport, tid: Option<u64>) -> String {
    let Some(tid) = tid else {
        return "thread unknown (no context switch into a thread before the sample on its CPU)"
            .to_string();
    };
    let mut title = format!("thread {tid}");
    let Some(t) = report.thread(tid) else {
        return title;
    };
    if let Some(name) = &t.name {
        title += &format!(" {name:?}");
    }
    if let Some(pid) = t.pid {
        title += &format!(" (process {pid}");
        if let Some(name) = report.process_name(pid) {
            title += &format!(" {name:?}");
        }
        title += ")";
    }
    title
}

/// Writes the report.
pub fn write_lbr_text(
    out: &mut impl Write,
    report: &LbrReport,
    symbols: &Symbolizer,
    options: &LbrTextOptions,
) -> io::Result<()> {
    let all = report.overall();
    if all.samples() == 0 {
        writeln!(out, "LBR report: no LAST_BRANCH samples in this trace")?;
        if report.lbr_unavailable().is_empty() {
            writeln!(
                out,
                "  the trace does not say why: LBR is sampled by `fxtrace record -a` (without \
                 --no-lbr) and under --preload"
            )?;
        }
        for (why, sources) in report.lbr_unavailable() {
            let sources = if *sources > 1 {
                format!(" (said by {sources} sources)")
            } else {
                String::new()
            };
            writeln!(out, "  recorded reason: {why}{sources}")?;
        }
        if report.lbr_unavailable_more() > 0 {
            writeln!(
                out,
                "  and {} more such messages (not shown)",
                report.lbr_unavailable_more()
            )?;
        }
    } else {
        writeln!(
            out,
            "LBR report: {}, {}, {}, {}",
            plural(all.samples() as usize, "sample", "samples"),
            plural(all.branches() as usize, "branch", "branches"),
            plural(all.distinct_edges(), "distinct edge", "distinct edges"),
            plural(report.per_cpu().len(), "CPU", "CPUs")
        )?;
        writeln!(
            out,
            "mispredicted: {} of {} branches ({})",
            all.mispredicted(),
            all.branches(),
            percent(all.mispredicted(), all.branches())
        )?;
        let known = report.per_thread().keys().filter(|k| k.is_some()).count();
        let unknown = report.per_thread().get(&None).map_or(0, |t| t.samples());
        writeln!(
            out,
            "threads: {} known; {} not attributed to a thread",
            known,
            plural(unknown as usize, "sample", "samples")
        )?;
    }
    if report.invalid_payloads() > 0 {
        writeln!(
            out,
            "skipped: {} with an invalid payload",
            plural(
                report.invalid_payloads() as usize,
                "LAST_BRANCH blob",
                "LAST_BRANCH blobs"
            )
        )?;
    }
    if report.cpu_name_mismatches() > 0 {
        writeln!(
            out,
            "note: {} named cpu<N> for another CPU than their payload's (the payload's CPU is used)",
            plural(report.cpu_name_mismatches() as usize, "blob", "blobs")
        )?;
    }
    let mut any_binary = false;
    for b in symbols.binaries() {
        any_binary = true;
        writeln!(
            out,
            "binary: {} ({}, bias {:#x}, {}, {})",
            b.path.display(),
            if b.position_independent {
                "position-independent"
            } else {
                "executable"
            },
            b.bias,
            plural(b.functions, "function", "functions"),
            if b.debug_info {
                "debug info"
            } else {
                "no debug info"
            }
        )?;
        if let Some(w) = &b.warning {
            writeln!(out, "warning: {w}")?;
        }
    }
    for (path, recorded, state) in symbols.mapped_files() {
        let path = path.display();
        match state {
            MappedFile::Loaded {
                functions,
                debug_info,
            } => writeln!(
                out,
                "mapped: {path} ({}, {}{})",
                plural(*functions, "function", "functions"),
                if *debug_info {
                    "debug info"
                } else {
                    "no debug info"
                },
                recorded.map_or_else(String::new, |id| format!(", build-id {}", build_id_hex(id)))
            )?,
            MappedFile::Unreadable(why) => writeln!(
                out,
                "note: mapped file {path} cannot be read ({why}): its addresses are shown as file offsets"
            )?,
            MappedFile::NotElf(why) => writeln!(
                out,
                "note: mapped file {path} is not a readable ELF file ({why}): its addresses are shown as file offsets"
            )?,
            MappedFile::BuildIdMismatch { recorded, found } => writeln!(
                out,
                "warning: mapped file {path} is another build than the traced one (build-id {} in the trace, {} on disk): not used, its addresses are shown as file offsets",
                build_id_hex(recorded),
                found.as_deref().map_or_else(|| "none".to_string(), build_id_hex)
            )?,
        }
    }
    if report.invalid_mmaps() > 0 {
        writeln!(
            out,
            "skipped: {} with an invalid payload",
            plural(
                report.invalid_mmaps() as usize,
                "fxtrace:mmap blob",
                "fxtrace:mmap blobs"
            )
        )?;
    }
    if report.ambiguous_addresses() > 0 {
        writeln!(
            out,
            "note: {} resolved to different files in different samples (the first is shown)",
            plural(
                report.ambiguous_addresses() as usize,
                "address",
                "addresses"
            )
        )?;
    }
    if report.crowded_addresses() > 0 {
        writeln!(
            out,
            "note: {} left unresolved: more than {} mappings held each",
            plural(
                report.crowded_addresses() as usize,
                "branch address",
                "branch addresses"
            ),
            crate::report::lbr::MAX_COVERING
        )?;
    }
    if !any_binary && report.mappings().is_empty() {
        writeln!(
            out,
            "symbols: none given, addresses are unsymbolized (--binary PATH or PATH@0xBASE names them)"
        )?;
    } else if !report.mappings().is_empty() {
        writeln!(
            out,
            "mappings: {} in the trace, {} holding branch addresses",
            report.mappings().len(),
            report.used_mappings().len()
        )?;
    }
    if all.samples() == 0 {
        return Ok(());
    }
    let symbols = (symbols, report);
    table(out, "all CPUs and threads", all, symbols, options.top)?;
    match options.breakdown {
        Breakdown::Overall => {}
        Breakdown::PerCpu => {
            for (cpu, t) in report.per_cpu() {
                table(out, &format!("CPU {cpu}"), t, symbols, options.top)?;
            }
        }
        Breakdown::PerThread => {
            // Known threads by tid, the unknown ones last.
            let known = report.per_thread().iter().filter(|(k, _)| k.is_some());
            let unknown = report.per_thread().iter().filter(|(k, _)| k.is_none());
            for (tid, t) in known.chain(unknown) {
                table(out, &thread_title(report, *tid), t, symbols, options.top)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        assert_eq!(percent(1, 3), "33.3%");
        assert_eq!(percent(0, 0), "0.0%");
        assert_eq!(plural(1, "edge", "edges"), "1 edge");
        assert_eq!(plural(2, "edge", "edges"), "2 edges");
    }

    #[test]
    fn empty_report() {
        let mut out = Vec::new();
        write_lbr_text(
            &mut out,
            &LbrReport::new(),
            &Symbolizer::new(),
            &LbrTextOptions::default(),
        )
        .unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("LBR report: no LAST_BRANCH samples in this trace\n"));
        assert!(text.contains("symbols: none given"));
    }
}
