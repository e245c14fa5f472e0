//! `fxtrace record`: run a command under a trace session and write one FXT archive: the
//! providers of the command (and of any program given its `FXTRACE_SOCKET`), and with
//! `--system-wide` the built-in kernel provider (context switches and LBR of every CPU) in a
//! section of the same archive. The arguments become plain configurations
//! ([`RecordArgs::into_config`]); the work is the library's ([`fxtrace_tools::manager::recorder`],
//! [`fxtrace_tools::manager::kernel`]).

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use nix::sys::signal::Signal;

use fxtrace::capture::{BranchSampling, Need, PerfPermissions};
use fxtrace::protocol::control::BufferingMode;
use fxtrace_tools::manager::kernel::{KernelOptions, KernelProviderError, KernelSection};
use fxtrace_tools::manager::recorder::{
    stop_on_signals, RecordConfig, Recorder, RecorderError, StopReason,
};
use fxtrace_tools::preload_lib::preload_library;

use super::progress::{self, StatusLine};
use super::record_notes;

/// Arguments of `fxtrace record`.
#[derive(Debug, Args)]
pub(crate) struct RecordArgs {
    /// The trace file to write (created afresh; an existing one is kept as FILE.old).
    #[arg(long, short = 'o', value_name = "FILE", default_value = "trace.fxt")]
    output: PathBuf,
    /// Give the trace file to this user and group (numeric `UID:GID`), through the file
    /// fxtrace created, never a path: for root recording on behalf of a `sudo` user.
    #[arg(long, value_name = "UID:GID", value_parser = parse_owner)]
    output_owner: Option<(u32, u32)>,
    /// Enabled categories, comma-separated (`prefix*` matches a prefix; default: all).
    #[arg(long, short = 'c', value_name = "CAT,...", value_delimiter = ',')]
    categories: Vec<String>,
    /// Buffer size per provider: MiB, or with a K/M/G suffix (a multiple of 4K).
    #[arg(
        long = "buffer-size",
        short = 'b',
        value_name = "SIZE",
        default_value = "8"
    )]
    buffer_size: String,
    /// Buffering mode: streaming (the default: each half of the buffer is saved to the file
    /// once full while the other fills, so a long run is kept whole while fxtrace keeps up),
    /// oneshot (stop writing when the buffer is full), circular (keep the newest data: a
    /// flight recorder).
    #[arg(long, short = 'm', value_name = "MODE", default_value = "streaming")]
    mode: BufferingMode,
    /// Stop after this many seconds (default: when CMD exits, or on Ctrl-C).
    #[arg(long, value_name = "SECONDS", allow_negative_numbers = true)]
    duration: Option<f64>,
    /// Also stop cleanly (and write the trace) on SIGHUP, SIGUSR1 and SIGUSR2; SIGINT
    /// (Ctrl-C) and SIGTERM always do. SIGINT, SIGTERM and SIGHUP are passed on to CMD as
    /// they are, and it is traced while it ends (SIGTERM 5 s later if it still runs).
    #[arg(long)]
    stop_on_signal: bool,
    /// Flight recorder: stop and write the trace when a provider raises this alert
    /// (`fxtrace::alert("NAME")`); best with `-m circular`.
    #[arg(long, value_name = "NAME")]
    stop_on_alert: Option<String>,
    /// Listen on this socket instead of a fresh private one (programs started elsewhere with
    /// FXTRACE_SOCKET set to it join the session).
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Seconds to wait for providers to acknowledge Stop before salvaging their buffers.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 5.0,
        allow_negative_numbers = true
    )]
    stop_timeout: f64,
    /// Also capture the context switches (and LBR branch stacks) of every CPU with the
    /// built-in kernel provider, into the same archive. Needs root or CAP_PERFMON.
    #[arg(long, short = 'a')]
    system_wide: bool,
    /// With --system-wide: do not sample LBR branch stacks.
    #[arg(long)]
    no_lbr: bool,
    /// With --system-wide: take an LBR sample every N CPU cycles (default: 1000003, a prime,
    /// so samples do not lock step with loops).
    #[arg(long, value_name = "N")]
    lbr_period: Option<u64>,
    /// With --system-wide: data pages per CPU ring buffer (a power of two), as perf's -m
    /// (default 256, and 1024 with --wait-points: a switch with its call chain is some
    /// 200 bytes in the ring instead of 100).
    #[arg(long = "mmap-pages", value_name = "PAGES")]
    mmap_pages: Option<usize>,
    /// With --system-wide: do not record wake-ups (who woke whom: sched:sched_waking).
    #[arg(long)]
    no_wakeups: bool,
    /// With --system-wide: record wait points, the call chain where each thread blocked
    /// (kernel frames, and user frames where the program keeps frame pointers); costs the
    /// kernel a stack walk at every switch. With --preload alone, of the traced programs'
    /// threads.
    #[arg(long)]
    wait_points: bool,
    /// With --system-wide: CPU samples with call chains at HZ samples a second of CPU time
    /// (software cpu-clock: no PMU needed), every CPU; with --preload alone, of the traced
    /// programs' threads. `fxtrace report samples` shows where the time went. Without a
    /// value: 999.
    #[arg(
        long,
        value_name = "HZ",
        num_args = 0..=1,
        default_missing_value = "999",
        require_equals = true
    )]
    sample: Option<u64>,
    /// Trace CMD unmodified: load libfxtrace_preload.so into it (LD_PRELOAD), which makes it
    /// (and every program it starts) a provider and captures its context switches. The object
    /// is looked for next to this executable, or at FXTRACE_PRELOAD_LIB.
    #[arg(long, requires = "command")]
    preload: bool,
    /// The command to trace (it gets FXTRACE_SOCKET); without one, trace whoever connects.
    /// Everything from the first word that is not an option of `record` on belongs to it
    /// (`fxtrace record ls -l`, as `perf record ls -l`); `--` before it also works.
    #[arg(
        value_name = "CMD",
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    command: Vec<OsString>,
}

/// What `fxtrace record` was asked to do, independent of clap.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RecordPlan {
    /// The session.
    pub(crate) recorder: RecordConfig,
    /// The built-in kernel provider, with `--system-wide`.
    pub(crate) kernel: Option<KernelOptions>,
    /// Stop on SIGHUP, SIGUSR1, SIGUSR2 too.
    pub(crate) stop_on_signal: bool,
    /// `--preload`: the command runs with the preload object.
    pub(crate) preload: bool,
}

/// Why `fxtrace record` failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RecordCliError {
    /// An argument is out of range.
    #[error("fxtrace record: {0}")]
    BadArgument(String),
    /// System-wide capture is not permitted.
    #[error("fxtrace record --system-wide: {remedy}")]
    NotPermitted {
        /// What is missing and what to do.
        remedy: String,
    },
    /// The kernel provider could not start.
    #[error("fxtrace record --system-wide: {0}")]
    Kernel(KernelProviderError),
    /// The recording failed.
    #[error("fxtrace record: {0}")]
    Record(#[from] RecorderError),
}

/// Data pages per CPU ring by default (1 MiB).
const RING_PAGES: usize = 256;
/// ... with `--wait-points` (4 MiB: each switch sample carries its call chain).
const WAIT_POINT_RING_PAGES: usize = 1024;

/// The highest `--sample` rate accepted (the kernel caps software sampling at
/// `kernel.perf_event_max_sample_rate`, 100000 by default, and throttles beyond it).
const MAX_SAMPLE_HZ: u64 = 100_000;

/// `UID:GID`, both numeric.
fn parse_owner(s: &str) -> Result<(u32, u32), String> {
    let (uid, gid) = s
        .split_once(':')
        .ok_or_else(|| format!("{s:?} is not UID:GID (e.g. 1000:1000)"))?;
    let number = |n: &str| {
        n.parse::<u32>()
            .map_err(|_| format!("{n:?} in {s:?} is not a numeric id"))
    };
    Ok((number(uid)?, number(gid)?))
}

/// `64k`, `4M`, `1G`, or a bare number of MiB, as bytes.
pub(super) fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let not_a_size = || format!("-b {s:?}: not a size (e.g. 4 for 4 MiB, 64K, 16M, 1G)");
    let (digits, unit) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&s[..i], c.to_ascii_uppercase()),
        _ => (s, 'M'),
    };
    // The number first: `abc` is not a size, whatever its last letter.
    let n: u64 = digits.parse().map_err(|_| not_a_size())?;
    let shift = match unit {
        'K' => 10,
        'M' => 20,
        'G' => 30,
        other => {
            return Err(format!(
                "-b {s:?}: not a size: unknown suffix {other:?} (use K, M or G)"
            ))
        }
    };
    let bytes = n
        .checked_shl(shift)
        .filter(|b| b >> shift == n)
        .ok_or_else(|| format!("-b {s:?} is too large"))?;
    if !fxtrace::buffer::is_valid_buffer_size(bytes) {
        return Err(format!(
            "buffer size {s} ({bytes} bytes) must be a multiple of 4K between 4K and 4G"
        ));
    }
    Ok(bytes)
}

fn seconds(what: &str, s: f64) -> Result<Duration, RecordCliError> {
    if s.is_finite() && s > 0.0 && s < 1e9 {
        Ok(Duration::from_secs_f64(s))
    } else {
        Err(RecordCliError::BadArgument(format!(
            "{what} must be positive (a number of seconds, e.g. 2.5), got {s}"
        )))
    }
}

impl RecordArgs {
    /// The plain configuration, arguments checked.
    pub(crate) fn into_config(self) -> Result<RecordPlan, RecordCliError> {
        let buffer_size_bytes =
            parse_size(&self.buffer_size).map_err(RecordCliError::BadArgument)?;
        let duration = self
            .duration
            .map(|s| seconds("--duration", s))
            .transpose()?;
        let stop_timeout = seconds("--stop-timeout", self.stop_timeout)?;
        if let Some(name) = &self.stop_on_alert {
            fxtrace::protocol::fifo::AlertName::new(name)
                .map_err(|e| RecordCliError::BadArgument(format!("--stop-on-alert: {e}")))?;
        }
        let mmap_pages = self.mmap_pages.unwrap_or(if self.wait_points {
            WAIT_POINT_RING_PAGES
        } else {
            RING_PAGES
        });
        if !mmap_pages.is_power_of_two() {
            return Err(RecordCliError::BadArgument(format!(
                "--mmap-pages must be a power of two, got {mmap_pages}"
            )));
        }
        if !self.system_wide {
            // LBR is sampled by the kernel provider only: an option for it alone does nothing.
            // (given, option, whether --preload alone takes it)
            for (given, option, preload_too) in [
                (self.no_lbr, "--no-lbr", false),
                (self.lbr_period.is_some(), "--lbr-period", false),
                (self.no_wakeups, "--no-wakeups", false),
                (self.wait_points && !self.preload, "--wait-points", true),
                (self.sample.is_some() && !self.preload, "--sample", true),
            ] {
                if given {
                    let (only, preload, add) = if preload_too {
                        (
                            "",
                            ", or to --preload, for the traced programs' threads",
                            "one",
                        )
                    } else {
                        (" only", "", "-a")
                    };
                    return Err(RecordCliError::BadArgument(format!(
                        "{option} applies to --system-wide (-a){only}, where the kernel provider \
                         records every CPU{preload}; add {add}, or leave {option} out"
                    )));
                }
            }
        }
        if let Some(hz) = self.sample {
            if !(1..=MAX_SAMPLE_HZ).contains(&hz) {
                return Err(RecordCliError::BadArgument(format!(
                    "--sample={hz}: give 1 to {MAX_SAMPLE_HZ} samples a second (perf's default \
                     is 4000; 999 keeps clear of timer ticks)"
                )));
            }
        }
        let lbr_period = self.lbr_period.unwrap_or(BranchSampling::default().period);
        if lbr_period == 0 {
            return Err(RecordCliError::BadArgument(
                "--lbr-period must be at least 1".into(),
            ));
        }
        let kernel = self.system_wide.then(|| KernelOptions {
            lbr: (!self.no_lbr).then_some(BranchSampling {
                period: lbr_period,
                include_kernel: true,
            }),
            wakeups: !self.no_wakeups,
            wait_points: self.wait_points,
            sample_hz: self.sample,
            ring_pages: mmap_pages,
        });
        let categories = self
            .categories
            .into_iter()
            .map(|c| c.trim().to_owned())
            .filter(|c| !c.is_empty())
            .collect();
        let mut env = if self.preload {
            vec![preload_env(&preload_library().map_err(|e| {
                RecordCliError::BadArgument(format!("--preload: {e}"))
            })?)]
        } else {
            Vec::new()
        };
        if self.preload && self.system_wide {
            env.extend(one_switch_source(std::env::var_os(PRELOAD_CAPTURE_VAR)));
        }
        env.extend(preload_samples(self.sample, self.preload, self.system_wide));
        if self.wait_points && self.preload && !self.system_wide {
            env.push((PRELOAD_WAIT_POINTS_VAR.into(), "1".into()));
        }
        Ok(RecordPlan {
            recorder: RecordConfig {
                output: self.output,
                categories,
                buffer_size_bytes,
                buffering_mode: self.mode,
                duration,
                stop_on_alert: self.stop_on_alert,
                command: self.command,
                socket_path: self.socket,
                stop_timeout,
                env,
                output_owner: self.output_owner,
                ..RecordConfig::default()
            },
            kernel,
            stop_on_signal: self.stop_on_signal,
            preload: self.preload,
        })
    }
}

// === --preload ===

/// The preload object's option choosing what it captures in the traced process.
const PRELOAD_CAPTURE_VAR: &str = "FXTRACE_PRELOAD_CAPTURE";
/// The preload object's option for CPU samples (`--sample` with `--preload` alone).
const PRELOAD_SAMPLE_VAR: &str = "FXTRACE_PRELOAD_SAMPLE";
/// The preload object's option for wait points (`--wait-points` with `--preload` alone).
const PRELOAD_WAIT_POINTS_VAR: &str = "FXTRACE_PRELOAD_WAIT_POINTS";

/// `--sample` with `--preload` alone: the preloaded programs sample their own threads (with
/// `--system-wide`, the kernel provider samples every CPU instead).
fn preload_samples(
    hz: Option<u64>,
    preload: bool,
    system_wide: bool,
) -> Option<(OsString, OsString)> {
    let hz = hz.filter(|_| preload && !system_wide)?;
    Some((PRELOAD_SAMPLE_VAR.into(), hz.to_string().into()))
}

/// With `--preload` and `--system-wide`: every switch once. The kernel provider records every
/// CPU's switches (and LBR, mappings, wake-ups), so the preloaded programs capture nothing of
/// their own (`FXTRACE_PRELOAD_CAPTURE=none`), unless the environment already chose.
fn one_switch_source(existing: Option<OsString>) -> Option<(OsString, OsString)> {
    existing
        .is_none()
        .then(|| (PRELOAD_CAPTURE_VAR.into(), "none".into()))
}

/// `LD_PRELOAD` for the command: `library` first, then what the environment already preloads.
fn preload_env(library: &std::path::Path) -> (OsString, OsString) {
    preload_env_with(library, std::env::var_os("LD_PRELOAD"))
}

fn preload_env_with(library: &std::path::Path, existing: Option<OsString>) -> (OsString, OsString) {
    let mut value = OsString::from(library);
    if let Some(existing) = existing.filter(|v| !v.is_empty()) {
        value.push(":");
        value.push(existing);
    }
    ("LD_PRELOAD".into(), value)
}

/// Runs `fxtrace record`. Progress and the summary go to standard error (standard output
/// belongs to the command). The exit status is the command's when it failed, else success.
pub(crate) fn run(args: RecordArgs) -> Result<ExitCode, RecordCliError> {
    let mut plan = args.into_config()?;
    // Before anything is created: say what is missing.
    if plan.kernel.is_some() {
        let perms = PerfPermissions::read();
        if !perms.allows(Need::CpuWide) {
            return Err(RecordCliError::NotPermitted {
                remedy: perms.remedy(Need::RawTracepoint, None),
            });
        }
    }
    let mode = plan.recorder.buffering_mode;
    let size = plan.recorder.buffer_size_bytes;
    let enabled = plan.recorder.categories.clone();
    let categories = record_notes::categories_shown(&enabled);
    // LBR unavailable is said once, in one line, whoever finds it (the preloaded programs,
    // the kernel provider).
    let mut lbr_said = false;
    if plan.preload {
        if let Some(why) = record_notes::preload_lbr_unavailable() {
            let kernel_lbr = plan.kernel.as_ref().is_some_and(|k| k.lbr.is_some());
            let whom = if kernel_lbr {
                ""
            } else {
                " for the preloaded programs"
            };
            note!("fxtrace: LBR unavailable{whom}: {why} (the trace holds the whole text)");
            lbr_said = true;
            // The kernel provider writes the whole text into the trace once: the preloaded
            // programs need not each try, fail the same way, and write it again.
            if kernel_lbr && std::env::var_os(record_notes::PRELOAD_LBR_ENV).is_none() {
                plan.recorder
                    .env
                    .push((record_notes::PRELOAD_LBR_ENV.into(), "0".into()));
            }
        }
    }
    let mut recorder = Recorder::new(plan.recorder)?;
    let mut kernel_section = None;
    if let Some(kernel) = &plan.kernel {
        let section = match KernelSection::start(&mut recorder, kernel) {
            Ok(section) => section,
            Err(e) => {
                // Nothing was captured: leave no half-written file behind.
                recorder.discard();
                return Err(RecordCliError::Kernel(e));
            }
        };
        let unavailable = || {
            let report = section.report();
            let u = report.unsupported.iter().find(|u| u.what.contains("LBR"));
            u.map_or_else(|| "not opened".to_owned(), |u| u.summary.clone())
        };
        let lbr = match (kernel.lbr, section.report().lbr) {
            (None, _) => "LBR off",
            (Some(_), Some(_)) => "LBR branch stacks",
            (Some(_), None) => "LBR unavailable",
        };
        note!(
            "fxtrace: recording context switches of {} CPUs, {lbr}; Ctrl-C to stop",
            section.report().cpus.len()
        );
        if kernel.lbr.is_some() && section.report().lbr.is_none() && !lbr_said {
            note!(
                "fxtrace: LBR unavailable: {} (the trace holds the whole text)",
                unavailable()
            );
        }
        kernel_section = Some(section);
    }
    let mut signals = vec![Signal::SIGINT, Signal::SIGTERM];
    if plan.stop_on_signal {
        signals.extend([Signal::SIGHUP, Signal::SIGUSR1, Signal::SIGUSR2]);
    }
    let _guard = stop_on_signals(&recorder.stop_handle(), &signals)?;
    note!(
        "fxtrace: recording providers ({mode}, {} KiB each, categories: {categories}; \
         FXTRACE_SOCKET={}); Ctrl-C to stop",
        size >> 10,
        recorder.socket_path().display()
    );
    let status = StatusLine::for_stderr();
    let updates = status.clone();
    recorder.on_progress(
        progress::INTERVAL,
        Box::new(move |figures| updates.update(figures)),
    );
    let report = recorder.run(|line| status.println(&format!("fxtrace: {line}")));
    status.clear();
    let report = report?;
    note!("{}", report.summary());
    if report.alerts_more > 0 {
        note!(
            "fxtrace: {} alerts raised besides the {} listed above (counted, not listed)",
            report.alerts_more,
            report.alerts.len()
        );
    }
    if !enabled.is_empty() {
        note!("categories enabled: {categories}");
    }
    if let Some(warning) =
        record_notes::category_warning(&enabled, &report.known_categories, report.providers.len())
    {
        note!("fxtrace: {warning}");
    }
    if let Some(section) = &kernel_section {
        match section.summary(&report) {
            Ok(summary) => note!("{summary}"),
            Err(e) => note!("fxtrace: {e}"),
        }
    }
    // The output could not be written whole (a full disk): the summary above says what it
    // holds; the error names the file and how many records it keeps.
    if let Some(e) = report.output_error() {
        return Err(e.into());
    }
    // The command's own failure is ours; a command that fxtrace itself ended (the duration
    // passed, an alert, Ctrl-C) does not make the recording a failure.
    Ok(match (&report.stop_reason, report.command_status) {
        (StopReason::CommandExited, Some(status)) if !status.success() => exit_code_of(status),
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

    fn config(argv: &[&str]) -> Result<RecordPlan, RecordCliError> {
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
            "--mmap-pages",
            "64",
            "-o",
            "x.fxt",
            "--",
            "sleep",
            "1",
        ])
        .unwrap();
        assert_eq!(c.recorder.output, PathBuf::from("x.fxt"));
        assert_eq!(
            c.recorder.command,
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
    fn wakeups_wait_points_and_samples() {
        let k = config(&["-a"]).unwrap().kernel.unwrap();
        assert!(
            k.wakeups && !k.wait_points && k.sample_hz.is_none(),
            "{k:?}"
        );
        let k = config(&["-a", "--no-wakeups", "--wait-points", "--sample"])
            .unwrap()
            .kernel
            .unwrap();
        assert!(!k.wakeups && k.wait_points);
        assert_eq!(k.sample_hz, Some(999), "--sample alone: 999 Hz");
        let k = config(&["-a", "--sample=97"]).unwrap().kernel.unwrap();
        assert_eq!(k.sample_hz, Some(97));
        assert_eq!(k.ring_pages, 256);
        let k = config(&["-a", "--wait-points"]).unwrap().kernel.unwrap();
        assert_eq!(k.ring_pages, 1024, "call chains: a larger ring by default");
        let k = config(&["-a", "--wait-points", "--mmap-pages", "64"])
            .unwrap()
            .kernel
            .unwrap();
        assert_eq!(k.ring_pages, 64, "unless given");
        for bad in [
            &["-a", "--sample=0"][..],
            &["-a", "--sample=100001"],
            &["--sample"],
            &["--wait-points"],
            &["--no-wakeups"],
        ] {
            assert!(
                matches!(config(bad), Err(RecordCliError::BadArgument(_))),
                "{bad:?}"
            );
        }
        // Those --preload takes too say so; the others say -a only.
        for (args, preload) in [(&["--wait-points"][..], true), (&["--no-wakeups"], false)] {
            let Err(RecordCliError::BadArgument(m)) = config(args) else {
                panic!("{args:?} alone is refused");
            };
            assert_eq!(m.contains("or to --preload"), preload, "{m}");
            assert_eq!(m.contains("-a) only"), !preload, "{m}");
        }
        // `--sample 99` is `--sample` (999) and a command `99`, as `-g` in perf.
        let c = config(&["-a", "--sample", "true"]).unwrap();
        assert_eq!(c.kernel.unwrap().sample_hz, Some(999));
        assert_eq!(c.recorder.command, vec![OsString::from("true")]);
    }

    #[test]
    fn samples_under_preload_alone_are_the_programs_own() {
        assert_eq!(
            preload_samples(Some(999), true, false),
            Some((
                OsString::from("FXTRACE_PRELOAD_SAMPLE"),
                OsString::from("999")
            ))
        );
        assert_eq!(preload_samples(Some(999), true, true), None, "the kernel's");
        assert_eq!(preload_samples(None, true, false), None);
        assert_eq!(preload_samples(Some(99), false, true), None);
    }

    #[test]
    fn preload_with_system_wide_leaves_the_switches_to_the_kernel_provider() {
        assert_eq!(
            one_switch_source(None),
            Some((
                OsString::from("FXTRACE_PRELOAD_CAPTURE"),
                OsString::from("none")
            ))
        );
        assert_eq!(
            one_switch_source(Some("switches".into())),
            None,
            "the user's choice"
        );
    }

    #[test]
    fn preload_keeps_ld_preload() {
        let lib = std::path::PathBuf::from("/opt/fxtrace/libfxtrace_preload.so");
        assert_eq!(
            preload_env_with(&lib, Some("/x/a.so".into())).1,
            OsString::from(format!("{}:/x/a.so", lib.display()))
        );
        assert_eq!(preload_env_with(&lib, Some("".into())).1, lib.as_os_str());
        assert_eq!(preload_env_with(&lib, None).0, "LD_PRELOAD");
        // --preload needs a command.
        let mut argv = vec!["record", "--preload"];
        assert!(Wrapper::try_parse_from(argv.clone()).is_err());
        argv.extend(["--", "true"]);
        assert!(Wrapper::try_parse_from(argv).is_ok());
    }

    #[test]
    fn defaults_and_no_lbr() {
        let c = config(&["-a", "--no-lbr", "--duration", "0.5"]).unwrap();
        assert_eq!(c.recorder.output, PathBuf::from("trace.fxt"));
        assert_eq!(c.recorder.duration, Some(Duration::from_millis(500)));
        assert_eq!(c.kernel.unwrap().lbr, None);
        let c = config(&[]).unwrap();
        assert!(c.kernel.is_none());
        // Streaming, 8 MiB: a busy program is kept whole (issue 34).
        assert_eq!(c.recorder.buffering_mode, BufferingMode::Streaming);
        assert_eq!(c.recorder.buffer_size_bytes, 8 << 20);
        assert!(c.recorder.categories.is_empty());
        assert!(!c.stop_on_signal);
        assert!(c.recorder.env.is_empty(), "no --preload, no LD_PRELOAD");
    }

    #[test]
    fn provider_options() {
        let c = config(&[
            "-m",
            "streaming",
            "-b",
            "64K",
            "-c",
            "gfx, net*",
            "--stop-on-alert",
            "oom",
            "--stop-on-signal",
            "--socket",
            "/tmp/s.sock",
        ])
        .unwrap();
        assert_eq!(c.recorder.buffering_mode, BufferingMode::Streaming);
        assert_eq!(c.recorder.buffer_size_bytes, 64 << 10);
        assert_eq!(c.recorder.categories, ["gfx", "net*"]);
        assert_eq!(c.recorder.stop_on_alert.as_deref(), Some("oom"));
        assert_eq!(c.recorder.socket_path, Some(PathBuf::from("/tmp/s.sock")));
        assert!(c.stop_on_signal);
    }

    #[test]
    fn bad_arguments_are_refused() {
        for argv in [
            &["-a", "--duration", "0"][..],
            &["-a", "--duration=-1"],
            &["-a", "--duration", "NaN"],
            &["-a", "--mmap-pages", "3"],
            &["-a", "--lbr-period", "0"],
            &["-b", "6K"],
            &["-b", "5000"],
            &["--stop-on-alert", "a-name-that-is-too-long"],
            &["--stop-timeout", "0"],
        ] {
            assert!(
                matches!(config(argv), Err(RecordCliError::BadArgument(_))),
                "{argv:?}"
            );
        }
        let mode = Wrapper::try_parse_from(["record", "-m", "ring"]);
        assert!(mode.is_err(), "unknown mode");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4"), Ok(4 << 20));
        assert_eq!(parse_size("64k"), Ok(64 << 10));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert!(parse_size("5000").is_err()); // > 4 GiB
        assert!(parse_size("6K").is_err()); // not a multiple of 4K
        assert!(parse_size("4X").is_err());
        assert!(parse_size("k").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("99999999999999999999G").is_err());
    }
}
