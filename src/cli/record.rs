//! `fxtrace record`: capture a trace. The arguments become a plain [`RecordConfig`]; the work
//! is the library's ([`fxtrace::capture::kernel_provider`]).

use std::ffi::OsString;
use std::io;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use fxtrace::capture::kernel_provider::{
    interrupt_on_signals, LbrStatus, RecordError, SystemWideConfig, SystemWideRecording,
};
use fxtrace::capture::BranchSampling;

/// Arguments of `fxtrace record`.
#[derive(Debug, Args)]
pub(crate) struct RecordArgs {
    /// Capture the context switches (and LBR branch stacks) of every CPU with the built-in
    /// kernel provider. Needs root or CAP_PERFMON.
    #[arg(long, short = 'a')]
    system_wide: bool,
    /// Do not sample LBR branch stacks.
    #[arg(long)]
    no_lbr: bool,
    /// Take an LBR sample every N CPU cycles.
    #[arg(long, value_name = "N", default_value_t = BranchSampling::default().period)]
    lbr_period: u64,
    /// Data pages per CPU ring buffer (a power of two), as perf's -m.
    #[arg(
        long = "mmap-pages",
        short = 'm',
        value_name = "PAGES",
        default_value_t = 256
    )]
    mmap_pages: usize,
    /// The trace file to write.
    #[arg(long, short = 'o', value_name = "FILE", default_value = "trace.fxt")]
    output: PathBuf,
    /// Stop after this many seconds (default: when CMD exits, or on Ctrl-C).
    #[arg(long, value_name = "SECONDS")]
    duration: Option<f64>,
    /// A command to run while recording; recording stops when it exits.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<OsString>,
}

/// Kernel capture settings (`--system-wide`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KernelCapture {
    /// LBR sampling, if on.
    pub(crate) lbr: Option<BranchSampling>,
    /// Data pages per CPU ring.
    pub(crate) ring_pages: usize,
}

/// What `fxtrace record` was asked to do, independent of clap.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RecordConfig {
    /// The trace file.
    pub(crate) output: PathBuf,
    /// Stop after this long.
    pub(crate) duration: Option<Duration>,
    /// The command to run (program and arguments), if any.
    pub(crate) command: Vec<OsString>,
    /// The built-in kernel provider, with `--system-wide`.
    pub(crate) kernel: Option<KernelCapture>,
}

/// Why `fxtrace record` failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RecordCliError {
    /// Recording through providers needs the trace manager, which is not there yet.
    #[error(
        "fxtrace record: recording without --system-wide (the traced processes' own providers) \
         comes with the trace manager and is not available yet; use `fxtrace record \
         --system-wide [-- CMD ARGS...]` (root or CAP_PERFMON) to capture the context switches \
         of all CPUs"
    )]
    NeedsManager,
    /// An argument is out of range.
    #[error("fxtrace record: {0}")]
    BadArgument(String),
    /// The Ctrl-C handler could not be installed.
    #[error("fxtrace record: installing the Ctrl-C handler: {0}")]
    Signals(io::Error),
    /// The recording failed.
    #[error(transparent)]
    SystemWide(#[from] RecordError),
}

impl RecordArgs {
    /// The plain configuration, arguments checked.
    pub(crate) fn into_config(self) -> Result<RecordConfig, RecordCliError> {
        let duration = match self.duration {
            None => None,
            Some(s) if s.is_finite() && s > 0.0 && s < 1e9 => Some(Duration::from_secs_f64(s)),
            Some(s) => {
                return Err(RecordCliError::BadArgument(format!(
                    "--duration takes a positive number of seconds, got {s}"
                )))
            }
        };
        if !self.mmap_pages.is_power_of_two() {
            return Err(RecordCliError::BadArgument(format!(
                "--mmap-pages must be a power of two, got {}",
                self.mmap_pages
            )));
        }
        if self.lbr_period == 0 {
            return Err(RecordCliError::BadArgument(
                "--lbr-period must be at least 1".into(),
            ));
        }
        let kernel = self.system_wide.then(|| KernelCapture {
            lbr: (!self.no_lbr).then_some(BranchSampling {
                period: self.lbr_period,
                include_kernel: true,
            }),
            ring_pages: self.mmap_pages,
        });
        Ok(RecordConfig {
            output: self.output,
            duration,
            command: self.command,
            kernel,
        })
    }
}

/// Runs `fxtrace record`. The summary goes to standard error (standard output belongs to the
/// command). The exit status is the command's when it failed, else success.
pub(crate) fn run(args: RecordArgs) -> Result<ExitCode, RecordCliError> {
    let config = args.into_config()?;
    let Some(kernel) = config.kernel else {
        return Err(RecordCliError::NeedsManager);
    };
    let interrupt = interrupt_on_signals().map_err(RecordCliError::Signals)?;
    let recording = SystemWideRecording::start(SystemWideConfig {
        output: config.output,
        lbr: kernel.lbr,
        ring_pages: kernel.ring_pages,
        duration: config.duration,
        command: config.command,
    })?;
    if let Some(warning) = fxtrace::clock::info().warning() {
        eprintln!("fxtrace: {warning}");
    }
    let lbr = match (kernel.lbr, recording.report().lbr) {
        (None, _) => "LBR off".to_owned(),
        (Some(_), Some(_)) => "LBR branch stacks".to_owned(),
        (Some(_), None) => "LBR unavailable (see the summary)".to_owned(),
    };
    eprintln!(
        "fxtrace: recording context switches of {} CPUs, {lbr}; Ctrl-C to stop",
        recording.report().cpus.len()
    );
    let summary = recording.wait(interrupt)?;
    eprintln!("{summary}");
    if let LbrStatus::Unavailable(_) = summary.lbr {
        eprintln!("  (the trace holds the same LBR message as a log record)");
    }
    Ok(match summary.command_status {
        Some(status) if !status.success() => exit_code_of(status),
        _ => ExitCode::SUCCESS,
    })
}

/// A shell-style exit code for a failed command: its code, or 128 + the signal that killed it.
fn exit_code_of(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    let code = status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1);
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: RecordArgs,
    }

    fn config(argv: &[&str]) -> Result<RecordConfig, RecordCliError> {
        let mut full = vec!["record"];
        full.extend_from_slice(argv);
        Wrapper::try_parse_from(full).unwrap().args.into_config()
    }

    #[test]
    fn system_wide_with_command() {
        let c = config(&[
            "--system-wide",
            "--lbr-period",
            "5000",
            "-m",
            "64",
            "-o",
            "x.fxt",
            "--",
            "sleep",
            "1",
        ])
        .unwrap();
        assert_eq!(c.output, PathBuf::from("x.fxt"));
        assert_eq!(
            c.command,
            vec![OsString::from("sleep"), OsString::from("1")]
        );
        let k = c.kernel.unwrap();
        assert_eq!(k.ring_pages, 64);
        assert_eq!(
            k.lbr,
            Some(BranchSampling {
                period: 5000,
                include_kernel: true
            })
        );
    }

    #[test]
    fn defaults_and_no_lbr() {
        let c = config(&["-a", "--no-lbr", "--duration", "0.5"]).unwrap();
        assert_eq!(c.output, PathBuf::from("trace.fxt"));
        assert_eq!(c.duration, Some(Duration::from_millis(500)));
        assert_eq!(c.kernel.unwrap().lbr, None);
        assert!(config(&[]).unwrap().kernel.is_none());
    }

    #[test]
    fn bad_arguments_are_refused() {
        for argv in [
            &["-a", "--duration", "0"][..],
            &["-a", "--duration=-1"],
            &["-a", "--duration", "NaN"],
            &["-a", "-m", "3"],
            &["-a", "--lbr-period", "0"],
        ] {
            assert!(
                matches!(config(argv), Err(RecordCliError::BadArgument(_))),
                "{argv:?}"
            );
        }
    }
}
