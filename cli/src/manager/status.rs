//! The status client: which sessions of this user are running, and what each says of itself
//! (`StatusRequest` → `StatusReply`, with the session's figures when the manager has them).
//! `fxtrace status` prints what this module asks.

use std::path::{Path, PathBuf};
use std::time::Duration;

use fxtrace::protocol::control::Message;
use fxtrace::protocol::transport::{
    default_socket_path, ControlConn, TransportError, SOCKET_FILE_NAME,
};

use super::lifecycle::remove_stale_session_dirs;
use super::recorder::{runtime_dir, SESSION_DIR_PREFIX};

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

/// The session at `path` describes itself (a `StatusReply`). The figures are asked for first;
/// a manager of an earlier control revision hangs up on that request and is asked again
/// without.
pub fn ask_status(path: &Path) -> Result<Message, TransportError> {
    ask_once(path, true).or_else(|_| ask_once(path, false))
}

fn ask_once(path: &Path, figures: bool) -> Result<Message, TransportError> {
    let mut conn = ControlConn::connect(path, CONNECT_TIMEOUT)?;
    conn.set_recv_timeout(Some(REPLY_TIMEOUT))?;
    conn.send_msg(&Message::StatusRequest { figures }, &[])?;
    let (reply, _) = conn.recv_msg()?;
    Ok(reply)
}
