//! `fxtrace import-xray`: an LLVM XRay log (basic or FDR mode) to an FXT trace.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use fxtrace_tools::convert::xray::{
    read_log, write_fxt, ImportError, ImportOptions, InstrMap, InstrMapError, XrayError,
    FALLBACK_TICKS_PER_SECOND,
};

/// Arguments of `fxtrace import-xray`.
#[derive(Debug, Args)]
pub(crate) struct ImportXrayArgs {
    /// The XRay log, as compiler-rt writes it (`xray-log.<program>.<random>`).
    #[arg(value_name = "LOG")]
    log: PathBuf,
    /// Names function ids: the instrumented binary (ELF), or the output of
    /// `llvm-xray extract --symbolize BINARY`. Without it functions are named `func#<id>`.
    #[arg(long, value_name = "BINARY_OR_YAML")]
    instr_map: Option<PathBuf>,
    /// Where to write the FXT trace (`-` for standard output; the summary then goes to
    /// standard error).
    #[arg(short, long, value_name = "TRACE.fxt")]
    output: PathBuf,
}

/// Why `import-xray` failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ImportXrayError {
    /// The log's file header is unreadable: nothing was written.
    #[error("{path}: {source}")]
    Header {
        /// The log.
        path: String,
        /// Why.
        source: XrayError,
    },
    /// The instrumentation map could not be loaded: nothing was written.
    #[error("{path}: {source}")]
    InstrMap {
        /// The map file.
        path: String,
        /// Why.
        source: InstrMapError,
    },
    /// The output could not be created or written.
    #[error("{path}: {source}")]
    Write {
        /// The output.
        path: String,
        /// Why.
        source: ImportError,
    },
    /// The log is malformed after its header: everything before the error was written.
    #[error("{path}: {source}; {output} holds the {events} events decoded before it")]
    Partial {
        /// The log.
        path: String,
        /// Where and why decoding stopped.
        source: XrayError,
        /// The output, complete and valid for the decoded part.
        output: String,
        /// Events decoded before the error.
        events: usize,
    },
}

/// Converts the log; a log that is malformed part-way is converted up to the error and
/// then reported as [`ImportXrayError::Partial`].
pub(crate) fn run(args: &ImportXrayArgs) -> Result<ExitCode, super::CliError> {
    let log_path = args.log.display().to_string();
    let data = std::fs::read(&args.log).map_err(|source| super::CliError::Read {
        path: log_path.clone(),
        source,
    })?;
    let log = read_log(&data).map_err(|source| ImportXrayError::Header {
        path: log_path.clone(),
        source,
    })?;
    drop(data);
    let map = match &args.instr_map {
        Some(p) => Some(
            InstrMap::load(p).map_err(|source| ImportXrayError::InstrMap {
                path: p.display().to_string(),
                source,
            })?,
        ),
        None => None,
    };
    let log_name = file_name(&args.log);
    let mut options = ImportOptions::new(&log_name);
    if let Some(map) = &map {
        options = options.with_instr_map(map);
    }

    let to_stdout = args.output.as_os_str() == "-";
    let output = if to_stdout {
        "<stdout>".to_string()
    } else {
        args.output.display().to_string()
    };
    let write_error = |source: ImportError| ImportXrayError::Write {
        path: output.clone(),
        source,
    };
    let stats = if to_stdout {
        write_fxt(&log, &options, io::stdout().lock())
    } else {
        let file = File::create(&args.output).map_err(|e| write_error(e.into()))?;
        write_fxt(&log, &options, BufWriter::new(file))
    }
    .map_err(write_error)?;

    if stats.ticks_per_second_defaulted {
        eprintln!(
            "warning: {log_path}: the header's cycle frequency is 0; timestamps are taken as \
             {FALLBACK_TICKS_PER_SECOND} ticks per second"
        );
    }
    let summary = format!("import-xray: {log_path} -> {output}: {stats}");
    if to_stdout {
        eprintln!("{summary}");
    } else {
        let mut out = io::stdout().lock();
        writeln!(out, "{summary}").map_err(super::CliError::Output)?;
    }
    let events = log.event_count();
    match log.error {
        Some(source) => Err(ImportXrayError::Partial {
            path: log_path,
            source,
            output,
            events,
        }
        .into()),
        None => Ok(ExitCode::SUCCESS),
    }
}

/// The file name part of `path` (the whole path if it has none).
fn file_name(path: &Path) -> String {
    path.file_name()
        .unwrap_or(path.as_os_str())
        .to_string_lossy()
        .into_owned()
}
