//! `fxtrace status`: ask running sessions for their state, providers and known categories.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use fxtrace::manager::lifecycle::remove_stale_session_dirs;
use fxtrace::manager::recorder::{runtime_dir, SESSION_DIR_PREFIX};
use fxtrace::protocol::control::Message;
use fxtrace::protocol::transport::{default_socket_path, ControlConn, SOCKET_FILE_NAME};

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

/// The sockets to ask.
fn candidates(args: &StatusArgs) -> Vec<PathBuf> {
    if let Some(p) = &args.socket {
        return vec![p.clone()];
    }
    let mut out = vec![default_socket_path()];
    // Directories of recorders killed by SIGKILL are not sessions: remove them first.
    remove_stale_session_dirs(&runtime_dir());
    if let Ok(entries) = std::fs::read_dir(runtime_dir()) {
        let mut sessions: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(SESSION_DIR_PREFIX)
            })
            .map(|e| e.path().join(SOCKET_FILE_NAME))
            .filter(|p| p.exists())
            .collect();
        sessions.sort();
        out.extend(sessions);
    }
    out
}

/// One session's answer, or why there is none.
fn ask(path: &Path) -> Result<Message, String> {
    let mut conn =
        ControlConn::connect(path, Duration::from_millis(200)).map_err(|e| e.to_string())?;
    conn.set_recv_timeout(Some(Duration::from_secs(2)))
        .map_err(|e| e.to_string())?;
    conn.send_msg(&Message::StatusRequest, &[])
        .map_err(|e| e.to_string())?;
    let (reply, _) = conn.recv_msg().map_err(|e| e.to_string())?;
    Ok(reply)
}

fn print(out: &mut impl Write, path: &Path, reply: &Message) -> io::Result<()> {
    let Message::StatusReply {
        state,
        providers,
        categories,
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
    for path in &paths {
        match ask(path) {
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
            looked.push(format!(
                "{}/{SESSION_DIR_PREFIX}*/{SOCKET_FILE_NAME}",
                runtime_dir().display()
            ));
        }
        return Err(StatusError::NoSession(looked.join(", ")));
    }
    Ok(ExitCode::SUCCESS)
}
