//! The controller side of the trace service's protocol: what the `fxtrace providers`,
//! `categories`, `start`, `stop`, `terminate` and `status` commands use.

use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::protocol::{Event, FromService, Reply, Request};
use crate::manager::wire::Frame;
use fxtrace::protocol::control::FrameMessage;
use fxtrace::protocol::transport::{ControlConn, TransportError};

/// How long connecting may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a reply may take (a start waits for providers, a stop writes their buffers).
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(60);

/// A controller's failure.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// No service listens at the socket.
    #[error(
        "no trace service at {0}: start one with `fxtrace daemon` (or `sudo systemctl start \
         fxtrace`), or name its socket with --socket"
    )]
    NoService(PathBuf),
    /// The connection failed.
    #[error("trace service: {0}")]
    Transport(#[from] TransportError),
    /// The service refused the request.
    #[error("{0}")]
    Refused(String),
    /// The service answered something else than expected.
    #[error("trace service: {0}")]
    Protocol(String),
}

/// A connection to the trace service.
#[derive(Debug)]
pub struct Controller {
    conn: ControlConn,
    socket: PathBuf,
    reply_timeout: Duration,
}

impl Controller {
    /// Connect to the service at `socket`.
    pub fn connect(socket: &Path) -> Result<Controller, ControllerError> {
        let conn = match ControlConn::connect(socket, CONNECT_TIMEOUT) {
            Ok(conn) => conn,
            Err(TransportError::NoManager { .. }) => {
                return Err(ControllerError::NoService(socket.to_owned()))
            }
            Err(e) => return Err(e.into()),
        };
        conn.set_send_timeout(Some(CONNECT_TIMEOUT))?;
        Ok(Controller {
            conn,
            socket: socket.to_owned(),
            reply_timeout: REPLY_TIMEOUT,
        })
    }

    /// How long [`Self::call`] waits for a reply (default [`REPLY_TIMEOUT`]).
    pub fn set_reply_timeout(&mut self, timeout: Duration) {
        self.reply_timeout = timeout;
    }

    /// The service's socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The connection (to poll it for events).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.conn.as_fd()
    }

    /// Send `request` (with the output file's descriptor, if any).
    pub fn send(
        &mut self,
        request: &Request,
        output: Option<BorrowedFd<'_>>,
    ) -> Result<(), ControllerError> {
        let fds: Vec<BorrowedFd<'_>> = output.into_iter().collect();
        let msg = request
            .to_message(fds.len() as u8)
            .map_err(|e| ControllerError::Protocol(e.to_string()))?;
        self.conn.send_msg(&msg, &fds)?;
        Ok(())
    }

    /// The next message from the service, waiting at most `timeout` (`None`: no bound).
    pub fn receive(&mut self, timeout: Option<Duration>) -> Result<FromService, ControllerError> {
        self.conn.set_recv_timeout(timeout)?;
        let (msg, _) = self.conn.recv_frame()?;
        match msg {
            Frame::Controller { body, .. } => {
                FromService::parse(&body).map_err(|e| ControllerError::Protocol(e.to_string()))
            }
            other => Err(ControllerError::Protocol(format!(
                "answered with a {} message: is {} a trace service (fxtrace daemon)?",
                other.name(),
                self.socket.display()
            ))),
        }
    }

    /// Send `request` and wait for its reply; events that come first go to `on_event`.
    pub fn call(
        &mut self,
        request: &Request,
        output: Option<BorrowedFd<'_>>,
        mut on_event: impl FnMut(Event),
    ) -> Result<Reply, ControllerError> {
        self.send(request, output)?;
        loop {
            match self.receive(Some(self.reply_timeout))? {
                FromService::Reply(Reply::Error { error }) => {
                    return Err(ControllerError::Refused(error))
                }
                FromService::Reply(reply) => return Ok(reply),
                FromService::Event(event) => on_event(event),
            }
        }
    }
}
