//! `fxtrace status`: ask the trace service and running sessions for their state, mode, buffer
//! size, figures so far, output file, problems, providers and known categories (as `lttng list
//! SESSION` does). Every session prints through [`print_session`], from the one status model.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use fxtrace_tools::manager::report::printable;
use fxtrace_tools::manager::service::protocol::{BufferFill, SessionInfo, StatusReport};
use fxtrace_tools::manager::status::{ask_status, session_socket_pattern, session_sockets, Answer};

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

/// The sockets to ask: the one given, else the trace service's and every session of this
/// user (each once).
fn candidates(args: &StatusArgs) -> Vec<PathBuf> {
    match &args.socket {
        Some(p) => vec![p.clone()],
        None => {
            let mut paths = vec![super::service::controller_socket()];
            for path in session_sockets() {
                if !paths.contains(&path) {
                    paths.push(path);
                }
            }
            paths
        }
    }
}

/// A session's figures, one line each, each starting with `indent`: the one printer of
/// [`SessionInfo`].
fn print_session(out: &mut impl Write, indent: &str, s: &SessionInfo) -> io::Result<()> {
    use indicatif::{HumanBytes, HumanDuration};
    let output = if s.output.is_empty() {
        "(not known)".into()
    } else {
        printable(&s.output)
    };
    let elapsed = Duration::from_millis(s.elapsed_ms);
    writeln!(out, "{indent}output: {output}")?;
    writeln!(
        out,
        "{indent}mode: {}, buffer size {} per provider",
        s.mode,
        HumanBytes(s.buffer_size)
    )?;
    let categories = s.categories.as_deref().map_or_else(
        || "(not known: an earlier fxtrace does not say)".to_owned(),
        super::record_notes::categories_shown,
    );
    writeln!(out, "{indent}categories enabled: {categories}")?;
    writeln!(
        out,
        "{indent}elapsed: {} ({:.1} s)",
        HumanDuration(elapsed),
        elapsed.as_secs_f64()
    )?;
    writeln!(
        out,
        "{indent}written so far: {} records, {} bytes ({})",
        s.records_written,
        s.bytes_written,
        HumanBytes(s.bytes_written)
    )?;
    writeln!(
        out,
        "{indent}in the providers' buffers: {} bytes ({}); records dropped: {}",
        s.buffered_bytes,
        HumanBytes(s.buffered_bytes),
        s.records_dropped
    )?;
    if !s.fills.is_empty() {
        let fills = BufferFill::list(&s.fills, s.fills.len());
        writeln!(
            out,
            "{indent}buffers full (toward dropping records): {fills}"
        )?;
    }
    for problem in &s.problems {
        writeln!(out, "{indent}problem: {}", printable(problem))?;
    }
    Ok(())
}

/// `fxtrace record`'s session (of this revision or an earlier one, `figures` when it gave
/// them).
fn print_recording(
    out: &mut impl Write,
    path: &Path,
    r: &StatusReport,
    figures: bool,
) -> io::Result<()> {
    let state = r.sessions.first().map_or("?", |s| s.state.as_str());
    writeln!(out, "session at {}: {state}", path.display())?;
    match r.sessions.first() {
        Some(s) if figures => print_session(out, "  ", s)?,
        _ => writeln!(
            out,
            "  (an older fxtrace: no mode, buffer size or figures in its answer)"
        )?,
    }
    if r.providers.is_empty() {
        writeln!(out, "  providers: none")?;
    } else {
        writeln!(out, "  providers:")?;
        writeln!(out, "  {:>4} {:>8}  name", "id", "pid")?;
        for p in &r.providers {
            writeln!(out, "  {:>4} {:>8}  {}", p.id, p.pid, printable(&p.name))?;
        }
    }
    if r.categories.is_empty() {
        writeln!(out, "  known categories: none declared")
    } else {
        writeln!(out, "  known categories: {}", r.categories.join(", "))
    }
}

/// The trace service, its sessions and its providers.
fn print_service(out: &mut impl Write, r: &StatusReport) -> io::Result<()> {
    writeln!(
        out,
        "trace service at {} (pid {}, uid {}): {} providers, {} sessions",
        r.socket,
        r.pid,
        r.uid,
        r.providers.len(),
        r.sessions.len()
    )?;
    for s in &r.sessions {
        let detached = if s.detached { " (detached)" } else { "" };
        writeln!(out, "  session {}: {}{detached}", s.session, s.state)?;
        print_session(out, "    ", s)?;
    }
    if !r.providers.is_empty() {
        writeln!(
            out,
            "  {:>6} {:>8} {:>6}  {:<12} name",
            "id", "pid", "uid", "state"
        )?;
        for p in &r.providers {
            writeln!(
                out,
                "  {:>6} {:>8} {:>6}  {:<12} {}",
                p.id,
                p.pid,
                p.uid,
                p.state,
                printable(&p.name)
            )?;
        }
    }
    if let Some(line) = super::service::omitted_line(r.providers_omitted, "providers") {
        writeln!(out, "  {line}")?;
    }
    Ok(())
}

fn print(out: &mut impl Write, path: &Path, answer: &Answer) -> io::Result<()> {
    match answer {
        Answer::Report(r) if r.recording => print_recording(out, path, r, true),
        Answer::Report(r) => print_service(out, r),
        Answer::Older { report, figures } => print_recording(out, path, report, *figures),
        Answer::Refused(why) => writeln!(
            out,
            "trace service at {}: no status: {}",
            path.display(),
            printable(why)
        ),
    }
}

/// Runs `fxtrace status`.
pub(crate) fn run(args: &StatusArgs) -> Result<ExitCode, StatusError> {
    let paths = candidates(args);
    let mut out = io::stdout().lock();
    let mut found = 0;
    for path in &paths {
        match ask_status(path) {
            Ok(answer) => {
                found += 1;
                print(&mut out, path, &answer).map_err(StatusError::Output)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn printed(s: &SessionInfo) -> String {
        let mut out = Vec::new();
        print_session(&mut out, "", s).unwrap();
        String::from_utf8(out).unwrap()
    }

    /// A session says which categories it enables; one of a peer of an earlier revision,
    /// which does not say, is not shown as enabling them all.
    #[test]
    fn a_session_shows_its_categories_and_an_older_ones_as_not_known() {
        let mut s = SessionInfo {
            categories: Some(vec!["db".into(), "net*".into()]),
            ..SessionInfo::default()
        };
        assert!(printed(&s).contains("categories enabled: db,net*\n"));
        s.categories = Some(Vec::new());
        assert!(printed(&s).contains("categories enabled: all\n"));
        let older: SessionInfo = serde_json::from_str(r#"{"session":1}"#).unwrap();
        assert!(
            printed(&older).contains("categories enabled: (not known"),
            "{}",
            printed(&older)
        );
    }
}
