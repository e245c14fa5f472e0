//! The status client: which sessions of this user are running, and what each says of itself.
//! Every socket is asked as the trace service is (the controller protocol's `status`, which
//! `fxtrace record` answers too); a recorder of an earlier revision is asked again in the
//! frozen binary status. `fxtrace status` prints what this module asks.

use std::path::{Path, PathBuf};
use std::time::Duration;

use fxtrace::protocol::transport::{
    default_socket_path, ControlConn, TransportError, SOCKET_FILE_NAME,
};

use super::lifecycle::remove_stale_session_dirs;
use super::recorder::{runtime_dir, SESSION_DIR_PREFIX};
use super::service::client::{Controller, ControllerError};
use super::service::protocol::{ProviderInfo, Reply, Request, StatusReport};
use super::wire::{Frame, StatusReply};
use fxtrace::protocol::control::FrameMessage;

/// How long connecting to a session may take (a refused or absent socket fails at once; this
/// bounds a listen queue that is full).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a session may take to answer: its manager answers between two polls, but on a
/// loaded machine a poll turn can take seconds (2 s was seen to expire in the test suite).
const REPLY_TIMEOUT: Duration = Duration::from_secs(5);

/// The sockets of this user's sessions: the per-user default socket, then every
/// `fxtrace record` session directory (directories whose recorder is gone are removed first).
pub fn session_sockets() -> Vec<PathBuf> {
    let mut out = vec![default_socket_path()];
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

/// Where [`session_sockets`] looks, as a user should read it (for "nothing found here").
pub fn session_socket_pattern() -> String {
    format!(
        "{}/{SESSION_DIR_PREFIX}*/{SOCKET_FILE_NAME}",
        runtime_dir().display()
    )
}

/// What the socket at `path` said of itself.
#[derive(Debug)]
pub enum Answer {
    /// The trace service's status, or a recording's (`recording`).
    Report(StatusReport),
    /// A recording of an earlier revision: its state, providers and categories, and its
    /// figures when it has them (`report.sessions` then holds one session).
    Older {
        /// What it said, as the status model.
        report: StatusReport,
        /// Whether it gave its figures (a revision before 3 does not).
        figures: bool,
    },
    /// A trace service that refused to answer (it says why).
    Refused(String),
}

/// Ask the socket at `path` what it is doing: as the trace service is asked, then (a manager
/// of an earlier revision hangs up on that) in the frozen binary status, with the figures
/// first, then without (a manager before revision 3 hangs up on that too).
pub fn ask_status(path: &Path) -> Result<Answer, AskError> {
    match ask_controller(path) {
        Ok(report) => return Ok(Answer::Report(report)),
        Err(ControllerError::Refused(why)) => return Ok(Answer::Refused(why)),
        // Hung up: a recorder of an earlier revision (nobody listening is said below, as the
        // older ask says it). Anything else (a timeout, an answer that is not a status) is
        // this socket's answer: asking it twice more would only take as long again.
        Err(
            ControllerError::Transport(TransportError::PeerClosed) | ControllerError::NoService(_),
        ) => {}
        Err(e) => return Err(AskError::Controller(e)),
    }
    let reply = match ask_older(path, true) {
        Err(AskError::Transport(TransportError::PeerClosed)) => ask_older(path, false),
        other => other,
    }?;
    let StatusReply {
        state,
        providers,
        categories,
        figures,
    } = reply;
    let sessions = vec![figures.clone().map_or_else(
        || super::service::protocol::SessionInfo {
            state: state.name().to_owned(),
            ..Default::default()
        },
        |f| f.into_info(state),
    )];
    let report = StatusReport {
        pid: 0,
        uid: 0,
        socket: path.display().to_string(),
        providers: providers
            .into_iter()
            .map(|p| ProviderInfo {
                id: p.id,
                pid: p.pid,
                name: p.name,
                uid: 0,
                state: String::new(),
            })
            .collect(),
        sessions,
        providers_omitted: 0,
        recording: true,
        categories,
    };
    Ok(Answer::Older {
        report,
        figures: figures.is_some(),
    })
}

fn ask_controller(path: &Path) -> Result<StatusReport, ControllerError> {
    let mut controller = Controller::connect(path)?;
    // A stuck service must not hang `status`.
    controller.set_reply_timeout(REPLY_TIMEOUT);
    match controller.call(&Request::Status {}, None, |_| {})? {
        Reply::Status(report) => Ok(report),
        other => Err(ControllerError::Protocol(format!(
            "answered status with {other:?}"
        ))),
    }
}

/// Why a socket told nothing of itself.
#[derive(Debug, thiserror::Error)]
pub enum AskError {
    /// Connecting, asking or reading failed.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// It answered with something else than a status.
    #[error("it answered a status request with a {0} message")]
    Unexpected(&'static str),
    /// It did not answer the controller's status (and did not hang up, as a recorder of an
    /// earlier revision does).
    #[error(transparent)]
    Controller(ControllerError),
}

fn ask_older(path: &Path, figures: bool) -> Result<StatusReply, AskError> {
    let mut conn = ControlConn::connect(path, CONNECT_TIMEOUT)?;
    conn.set_recv_timeout(Some(REPLY_TIMEOUT))?;
    conn.send_msg(&Frame::StatusRequest { figures }, &[])?;
    match conn.recv_frame()? {
        (Frame::StatusReply(reply), _) => Ok(*reply),
        (other, _) => Err(AskError::Unexpected(other.name())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fxtrace::protocol::control::Message;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixListener;

    /// A socket that answers every request with a provider's message: `fxtrace status` asks it
    /// once, and says what it answered (it used to ask twice more, as of an earlier revision,
    /// each time waiting for the answer again).
    #[test]
    fn a_socket_that_answers_no_status_is_asked_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("odd.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let answered = std::thread::spawn(move || {
            let mut answered = 0;
            for stream in listener.incoming() {
                let mut stream = stream.unwrap();
                let mut prefix = [0u8; 4];
                // The test's last connection says nothing: done.
                if stream.read_exact(&mut prefix).is_err() {
                    return answered;
                }
                let mut body = vec![0u8; u32::from_le_bytes(prefix) as usize];
                stream.read_exact(&mut body).unwrap();
                let reply = Frame::Provider(Message::Terminate).encode().unwrap();
                stream.write_all(&reply).unwrap();
                answered += 1;
            }
            answered
        });
        let asked = ask_status(&path);
        assert!(
            matches!(
                &asked,
                Err(AskError::Controller(ControllerError::Protocol(why))) if why.contains("Terminate")
            ),
            "{asked:?}"
        );
        drop(std::os::unix::net::UnixStream::connect(&path).unwrap());
        assert_eq!(answered.join().unwrap(), 1);
    }
}
