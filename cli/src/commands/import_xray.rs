//! `fxtrace import-xray`: an LLVM XRay log (basic or FDR mode) to an FXT trace.

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use fxtrace_tools::output_file::OutputFile;

use fxtrace_tools::convert::xray::stream::MappedLog;
use fxtrace_tools::convert::xray::{
    import, FileHeader, ImportError, ImportOptions, InstrMap, InstrMapError, XrayError,
    FALLBACK_TICKS_PER_SECOND,
};

/// Bytes of an XRay log's file header.
const XRAY_HEADER_LEN: usize = 32;

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
        events: u64,
    },
}

/// Converts the log; a log that is malformed part-way is converted up to the error and
/// then reported as [`ImportXrayError::Partial`].
pub(crate) fn run(args: &ImportXrayArgs) -> Result<ExitCode, super::CliError> {
    let log_path = args.log.display().to_string();
    let (log, header) = open_checked_log(&args.log).map_err(|e| match e {
        LogRead::Io(source) => super::CliError::Read {
            path: log_path.clone(),
            source,
        },
        LogRead::Header(source) => ImportXrayError::Header {
            path: log_path.clone(),
            source,
        }
        .into(),
    })?;
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
    // A file output is written under a temporary name, renamed into place when complete
    // (a previous one kept as `OUT.old`), removed on failure.
    // Read twice, its events never all in memory (`convert::xray::stream`).
    let mut release = || log.release();
    let imported = if to_stdout {
        import(
            log.bytes(),
            &header,
            &options,
            io::stdout().lock(),
            &mut release,
        )
        .map_err(write_error)?
    } else {
        let mut file = OutputFile::create(&args.output).map_err(|e| write_error(e.into()))?;
        let out = BufWriter::new(file.file());
        let imported =
            import(log.bytes(), &header, &options, out, &mut release).map_err(write_error)?;
        file.commit().map_err(|e| write_error(e.into()))?;
        imported
    };
    let stats = imported.stats;

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
    let events = imported.events;
    match imported.error {
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

/// Why [`open_checked_log`] failed.
enum LogRead {
    Io(io::Error),
    Header(XrayError),
}

/// Opens an XRay log: its 32-byte file header first, refused at once when it is not XRay's
/// (so `/dev/zero` or a large unrelated file costs one read), then the whole log mapped (a
/// FIFO or device copied first into a temporary file: it is read twice).
fn open_checked_log(path: &Path) -> Result<(MappedLog, FileHeader), LogRead> {
    let mut file = File::open(path).map_err(LogRead::Io)?;
    let mut head = Vec::with_capacity(XRAY_HEADER_LEN);
    (&mut file)
        .take(XRAY_HEADER_LEN as u64)
        .read_to_end(&mut head)
        .map_err(LogRead::Io)?;
    let header = FileHeader::parse(&head).map_err(LogRead::Header)?;
    // A log truncated while mapped: a message and exit 1, not death by SIGBUS.
    fxtrace_tools::read::name_bus_errors();
    let log = MappedLog::new(file, &head).map_err(LogRead::Io)?;
    Ok((log, header))
}

/// The file name part of `path` (the whole path if it has none).
fn file_name(path: &Path) -> String {
    path.file_name()
        .unwrap_or(path.as_os_str())
        .to_string_lossy()
        .into_owned()
}
