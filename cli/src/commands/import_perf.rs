//! `fxtrace import-perf`: a `perf record` file (or stream) to an FXT trace.

use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use fxtrace_tools::convert::perf::input::Damage;
use fxtrace_tools::convert::perf::kallsyms::KallsymsChoice;
use fxtrace_tools::convert::perf::{
    import_perf, ImportError, ImportOptions, ImportSummary, PerfSource,
};
use fxtrace_tools::output_file::OutputFile;

/// What `import-perf --help` ends with.
pub(crate) const EXAMPLES: &str = "\
EXAMPLES:
    perf record -e cycles -b -- ./app            LBR samples of a program
    fxtrace import-perf perf.data                writes perf.fxt
    fxtrace report lbr perf.fxt                  its hottest branches, named from ./app

    sudo perf sched record -- sleep 1            every CPU's context switches and wake-ups
    fxtrace import-perf perf.data -o sched.fxt   open sched.fxt in ui.perfetto.dev

    perf record -F 999 -g -- ./app               CPU samples with call chains
    fxtrace import-perf perf.data                writes perf.fxt
    fxtrace report samples perf.fxt              the hottest functions and stacks

    sudo perf record -e sched:sched_switch -g -a -- sleep 1   switches with call chains
    fxtrace import-perf perf.data                 then `fxtrace report waits perf.fxt`

    perf record -o - -e cycles -b -- ./app | fxtrace import-perf - -o app.fxt   a stream";

/// Arguments of `fxtrace import-perf`.
#[derive(Debug, Args)]
pub(crate) struct ImportPerfArgs {
    /// The perf.data file (`perf record -o FILE`), or `-` for standard input (a stream from
    /// `perf record -o -`, or a file redirected).
    #[arg(value_name = "PERF.DATA")]
    input: PathBuf,
    /// Where to write the FXT trace (`-` for standard output; the summary then goes to
    /// standard error). Default: the input's name with `.data` replaced by `.fxt`
    /// (`perf.data` → `perf.fxt`).
    #[arg(short, long, value_name = "OUT.fxt")]
    output: Option<PathBuf>,
    /// The recording kernel's symbols, to name the kernel frames of call chains: a copy of
    /// its /proc/kallsyms (as `perf report --kallsyms`), or `none`. Default: perf's build-id
    /// cache (~/.debug), else /proc/kallsyms when this machine runs the recording's kernel,
    /// else the frames stay addresses (the summary says which).
    #[arg(long, value_name = "FILE")]
    kallsyms: Option<PathBuf>,
}

/// Why `import-perf` failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ImportPerfError {
    /// Nothing could be imported (or written).
    #[error("{path}: {source}")]
    Import {
        /// The input.
        path: String,
        /// Why.
        source: ImportError,
    },
    /// The input is damaged: what came before the damage was written.
    #[error("{path}: {first}{more}; {output} holds what was read before it")]
    Partial {
        /// The input.
        path: String,
        /// The first damage.
        first: Damage,
        /// ` (and N more problems)`, or nothing.
        more: String,
        /// The output, complete and valid for what was read.
        output: String,
    },
    /// Reading standard input without saying where to write.
    #[error("reading standard input: say where to write the trace with -o OUT.fxt (or -o -)")]
    NoOutput,
}

/// The default output of `input`: `.data` replaced by `.fxt`, else `.fxt` added.
fn default_output(input: &Path) -> PathBuf {
    let name = input
        .file_name()
        .unwrap_or(input.as_os_str())
        .to_string_lossy();
    let stem = name.strip_suffix(".data").unwrap_or(&name);
    input.with_file_name(format!("{stem}.fxt"))
}

/// Where an import reads and writes, and the names it says them by.
struct Paths {
    source: PerfSource,
    /// The input as messages name it (`<stdin>` for standard input).
    input: String,
    /// The output file; `None`: standard output.
    output: Option<PathBuf>,
    /// The output as messages name it (`<stdout>` for standard output).
    output_name: String,
    options: ImportOptions,
}

impl Paths {
    fn of(args: &ImportPerfArgs) -> Result<Self, ImportPerfError> {
        let stdin = args.input.as_os_str() == "-";
        let output = match (&args.output, stdin) {
            (Some(o), _) => o.clone(),
            (None, false) => default_output(&args.input),
            (None, true) => return Err(ImportPerfError::NoOutput),
        };
        let output = (output.as_os_str() != "-").then_some(output);
        let file_name = || {
            let name = args.input.file_name().unwrap_or(args.input.as_os_str());
            name.to_string_lossy().into_owned()
        };
        Ok(Self {
            source: if stdin {
                PerfSource::Stdin
            } else {
                PerfSource::File(args.input.clone())
            },
            input: if stdin {
                "<stdin>".into()
            } else {
                args.input.display().to_string()
            },
            output_name: output
                .as_ref()
                .map_or("<stdout>".into(), |o| o.display().to_string()),
            output,
            options: ImportOptions {
                kallsyms: match &args.kallsyms {
                    None => KallsymsChoice::Auto,
                    Some(none) if none.as_os_str() == "none" => KallsymsChoice::Off,
                    Some(file) => KallsymsChoice::File(file.clone()),
                },
                ..ImportOptions::new(format!(
                    "perf:{}",
                    if stdin { "stdin".into() } else { file_name() }
                ))
            },
        })
    }

    /// Imports into the output: a file is written under a temporary name, renamed into place
    /// when complete (a previous one kept as `OUT.old`), removed on failure.
    fn import(&self) -> Result<ImportSummary, ImportPerfError> {
        let failed = |source: ImportError| ImportPerfError::Import {
            path: self.input.clone(),
            source,
        };
        let written = |e: io::Error| failed(ImportError::Write(e));
        match &self.output {
            None => {
                let out = BufWriter::new(io::stdout().lock());
                let (out, summary) =
                    import_perf(&self.source, out, &self.options).map_err(failed)?;
                let mut stdout = out.into_inner().map_err(|e| written(e.into_error()))?;
                stdout.flush().map_err(written)?;
                Ok(summary)
            }
            Some(path) => {
                let mut file = OutputFile::create(path).map_err(written)?;
                let (out, summary) =
                    import_perf(&self.source, BufWriter::new(file.file()), &self.options)
                        .map_err(failed)?;
                out.into_inner().map_err(|e| written(e.into_error()))?;
                file.commit().map_err(written)?;
                Ok(summary)
            }
        }
    }
}

/// Imports the file; a damaged one is imported up to its damage and then reported as
/// [`ImportPerfError::Partial`].
pub(crate) fn run(args: &ImportPerfArgs) -> Result<ExitCode, super::CliError> {
    let paths = Paths::of(args)?;
    let summary = paths.import()?;
    let Paths {
        input,
        output,
        output_name,
        ..
    } = paths;
    let line = format!("import-perf: {input} -> {output_name}: {summary}");
    if output.is_none() {
        note!("{line}");
    } else {
        let mut out = io::stdout().lock();
        writeln!(out, "{line}").map_err(super::CliError::Output)?;
    }
    let mut damage = summary.damage.into_iter();
    let Some(first) = damage.next() else {
        return Ok(ExitCode::SUCCESS);
    };
    let rest: Vec<Damage> = damage.collect();
    for d in &rest {
        note!("{input}: also {d}");
    }
    let more = match rest.len() {
        0 => String::new(),
        n => format!(" (and {n} more problems, above)"),
    };
    Err(ImportPerfError::Partial {
        path: input,
        first,
        more,
        output: output_name,
    }
    .into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_output_replaces_data_by_fxt() {
        assert_eq!(
            default_output(Path::new("perf.data")),
            Path::new("perf.fxt")
        );
        assert_eq!(
            default_output(Path::new("/tmp/x.perfdata")),
            Path::new("/tmp/x.perfdata.fxt")
        );
    }
}
