//! `fxtrace status`: ask running sessions for their state, mode, buffer size, figures so far,
//! output file, providers and known categories (as `lttng list SESSION` does).

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use fxtrace::protocol::control::{Message, SessionFigures};
use fxtrace_tools::manager::status::{ask_status, session_socket_pattern, session_sockets};

/// Arguments of `fxtrace status`.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// Ask the session listening here (default: FXTRACE_SOCKET or the per-user default socket,
    /// and every `fxtrace record` session of this user).
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
}

/// Why `fxtrace status` failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StatusError {
    /// No session answered.
    #[error("fxtrace status: no running session found (looked at {0})")]
    NoSession(String),
    /// Printing failed.
    #[error("fxtrace status: cannot write output: {0}")]
    Output(io::Error),
}

/// The sockets to ask: the one given, else every session of this user.
fn candidates(args: &StatusArgs) -> Vec<PathBuf> {
    match &args.socket {
        Some(p) => vec![p.clone()],
        None => session_sockets(),
    }
}

/// The figures, one line each, indented.
fn print_figures(out: &mut impl Write, f: &SessionFigures) -> io::Result<()> {
    use indicatif::{HumanBytes, HumanDuration};
    let output = if f.output.is_empty() {
        "(not known)"
    } else {
        &f.output
    };
    writeln!(out, "  output: {output}")?;
    writeln!(
        out,
        "  mode: {}, buffer size {} per provider",
        f.buffering_mode,
        HumanBytes(f.buffer_size_bytes)
    )?;
    writeln!(
        out,
        "  elapsed: {} ({:.1} s)",
        HumanDuration(Duration::from_nanos(f.elapsed_ns)),
        Duration::from_nanos(f.elapsed_ns).as_secs_f64()
    )?;
    writeln!(
        out,
        "  written so far: {} records, {} bytes ({})",
        f.records_written,
        f.bytes_written,
        HumanBytes(f.bytes_written)
    )?;
    writeln!(
        out,
        "  in the providers' buffers: {} bytes ({}); records dropped: {}",
        f.buffered_bytes,
        HumanBytes(f.buffered_bytes),
        f.records_dropped
    )
}

fn print(out: &mut impl Write, path: &Path, reply: &Message) -> io::Result<()> {
    let Message::StatusReply {
        state,
        providers,
        categories,
        figures,
    } = reply
    else {
        return writeln!(
            out,
            "{}: unexpected answer {}",
            path.display(),
            reply.name()
        );
    };
    writeln!(out, "session at {}: {state}", path.display())?;
    match figures {
        Some(f) => print_figures(out, f)?,
        None => writeln!(
            out,
            "  (an older fxtrace: no mode, buffer size or figures in its answer)"
        )?,
    }
    if providers.is_empty() {
        writeln!(out, "  providers: none")?;
    } else {
        writeln!(out, "  providers:")?;
        writeln!(out, "  {:>4} {:>8}  name", "id", "pid")?;
        for p in providers {
            writeln!(out, "  {:>4} {:>8}  {}", p.id, p.pid, p.name)?;
        }
    }
    if categories.is_empty() {
        writeln!(out, "  known categories: none declared")
    } else {
        writeln!(out, "  known categories: {}", categories.join(", "))
    }
}

/// Runs `fxtrace status`.
pub(crate) fn run(args: &StatusArgs) -> Result<ExitCode, StatusError> {
    let paths = candidates(args);
    let mut out = io::stdout().lock();
    let mut found = 0;
    // The trace service, when one answers (at --socket, or the default).
    if let Some(printed) = super::service::print_service_status(&mut out, args.socket.as_deref()) {
        printed.map_err(StatusError::Output)?;
        if args.socket.is_some() {
            return Ok(ExitCode::SUCCESS);
        }
        found += 1;
    }
    for path in &paths {
        match ask_status(path) {
            Ok(reply) => {
                found += 1;
                print(&mut out, path, &reply).map_err(StatusError::Output)?;
            }
            // Asked explicitly: say why it did not answer.
            Err(e) if args.socket.is_some() => {
                return Err(StatusError::NoSession(format!("{}: {e}", path.display())))
            }
            Err(_) => {}
        }
    }
    if found == 0 {
        let mut looked: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        if args.socket.is_none() {
            looked.push(session_socket_pattern());
        }
        return Err(StatusError::NoSession(looked.join(", ")));
    }
    Ok(ExitCode::SUCCESS)
}
