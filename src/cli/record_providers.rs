//! `fxtrace record`: run a command as a provider under a fresh trace session. The arguments
//! become a plain [`RecordConfig`] ([`RecordArgs::into_config`]); the work is the library's
//! ([`fxtrace::manager::recorder`]).

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use nix::sys::signal::Signal;

use fxtrace::manager::recorder::{stop_on_signals, RecordConfig, RecordError, Recorder};
use fxtrace::protocol::control::BufferingMode;

/// Arguments of `fxtrace record`.
#[derive(Debug, Args)]
pub(crate) struct RecordArgs {
    /// The trace file to write.
    #[arg(long, short = 'o', value_name = "FILE", default_value = "trace.fxt")]
    output: PathBuf,
    /// Enabled categories, comma-separated (`prefix*` matches a prefix; default: all).
    #[arg(long, short = 'c', value_name = "CAT,...", value_delimiter = ',')]
    categories: Vec<String>,
    /// Buffer size per provider: MiB, or with a K/M/G suffix (a multiple of 4K).
    #[arg(
        long = "buffer-size",
        short = 'b',
        value_name = "SIZE",
        default_value = "4"
    )]
    buffer_size: String,
    /// Buffering mode: oneshot (stop writing when full), circular (keep the newest data),
    /// streaming (save full buffers while tracing).
    #[arg(long, short = 'm', value_name = "MODE", default_value = "oneshot")]
    mode: BufferingMode,
    /// Stop after this many seconds (default: when CMD exits, or on Ctrl-C).
    #[arg(long, value_name = "SECONDS")]
    duration: Option<f64>,
    /// Also stop cleanly (and write the trace) on SIGTERM, SIGHUP and SIGUSR1, not only on
    /// Ctrl-C: `kill -USR1 <fxtrace pid>` ends the trace while CMD keeps running.
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
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0)]
    stop_timeout: f64,
    /// The command to trace (it gets FXTRACE_SOCKET); without one, trace whoever connects.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<OsString>,
}

/// Why `fxtrace record` failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RecordCliError {
    /// An argument is out of range.
    #[error("fxtrace record: {0}")]
    BadArgument(String),
    /// The recording failed.
    #[error("fxtrace record: {0}")]
    Record(#[from] RecordError),
}

/// `64k`, `4M`, `1G`, or a bare number of MiB, as bytes.
fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (digits, unit) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&s[..i], c.to_ascii_uppercase()),
        _ => (s, 'M'),
    };
    let shift = match unit {
        'K' => 10,
        'M' => 20,
        'G' => 30,
        other => {
            return Err(format!(
                "unknown size suffix {other:?} in {s:?} (use K, M or G)"
            ))
        }
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 4, 64K, 16M)"))?;
    let bytes = n
        .checked_shl(shift)
        .filter(|b| b >> shift == n)
        .ok_or_else(|| format!("{s:?} is too large"))?;
    if !fxtrace::engine::buffer::is_valid_buffer_size(bytes) {
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
            "{what} takes a positive number of seconds, got {s}"
        )))
    }
}

impl RecordArgs {
    /// The plain configuration, arguments checked.
    pub(crate) fn into_config(self) -> Result<RecordConfig, RecordCliError> {
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
        let categories = self
            .categories
            .into_iter()
            .map(|c| c.trim().to_owned())
            .filter(|c| !c.is_empty())
            .collect();
        Ok(RecordConfig {
            output: self.output,
            categories,
            buffer_size_bytes,
            buffering_mode: self.mode,
            duration,
            stop_on_alert: self.stop_on_alert,
            command: self.command,
            socket_path: self.socket,
            stop_timeout,
            ..RecordConfig::default()
        })
    }
}

/// Runs `fxtrace record`. Progress and the summary go to standard error (standard output
/// belongs to the command). The exit status is the command's when it failed, else success.
pub(crate) fn run(args: RecordArgs) -> Result<ExitCode, RecordCliError> {
    let stop_on_signal = args.stop_on_signal;
    let config = args.into_config()?;
    let mode = config.buffering_mode;
    let size = config.buffer_size_bytes;
    let recorder = Recorder::new(config)?;
    let signals: &[Signal] = if stop_on_signal {
        &[
            Signal::SIGINT,
            Signal::SIGTERM,
            Signal::SIGHUP,
            Signal::SIGUSR1,
        ]
    } else {
        &[Signal::SIGINT]
    };
    let _guard = stop_on_signals(&recorder.stop_handle(), signals)?;
    eprintln!(
        "fxtrace: recording ({mode}, {} KiB per provider); FXTRACE_SOCKET={}",
        size >> 10,
        recorder.socket_path().display()
    );
    let report = recorder.run(|line| eprintln!("fxtrace: {line}"))?;
    eprintln!("{}", report.summary());
    use std::os::unix::process::ExitStatusExt;
    Ok(match report.command_status {
        Some(status) if !status.success() => match (status.code(), status.signal()) {
            (Some(code), _) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
            (None, Some(sig)) => ExitCode::from(u8::try_from(128 + sig).unwrap_or(1)),
            _ => ExitCode::FAILURE,
        },
        _ => ExitCode::SUCCESS,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
