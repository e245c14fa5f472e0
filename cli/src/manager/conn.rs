//! A control connection as the manager's event loop uses it: reads never block (whatever bytes
//! are there are buffered until a whole frame has arrived), sends are bounded by a timeout.
//!
//! Providers never send file descriptors to the manager; any that arrive with a plain `recv`
//! are discarded (closed) by the kernel. A connection made with [`FramedConn::with_fds`] (the
//! trace service's: a controller hands over its output file) keeps the descriptors that arrive,
//! in order, for [`FramedConn::take_fds`], at most [`MAX_QUEUED_FDS`] at a time.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::socket::{self, MsgFlags};

use fxtrace::protocol::control::{
    body_len_from_prefix, ControlError, FrameMessage, FRAME_PREFIX_LEN,
};

use super::wire::Frame;
use fxtrace::protocol::transport::{ControlConn, TransportError};

/// How long a send to a peer may block before the peer is considered stuck.
pub(super) const SEND_TIMEOUT: Duration = Duration::from_millis(500);

/// Bytes read per `recv` call.
const READ_CHUNK: usize = 4096;

/// A nonblocking reader of control frames over a [`ControlConn`].
#[derive(Debug)]
pub(super) struct FramedConn {
    conn: ControlConn,
    rx: Vec<u8>,
    /// Largest frame body accepted; a larger one is refused from its prefix, before its bytes
    /// are buffered.
    max_body: usize,
    /// Descriptors received and not taken yet (`None`: descriptors are not accepted).
    fds: Option<Vec<OwnedFd>>,
    /// Frames queued by [`FramedConn::queue`] and not sent yet (bytes from `tx_sent` on).
    tx: Vec<u8>,
    tx_sent: usize,
}

/// Most bytes a connection may have queued and unsent ([`FramedConn::queue`]): a peer that
/// does not read its answers is dropped beyond this.
pub(super) const MAX_QUEUED_BYTES: usize = 2 << 20;

/// Most connections accepted in one turn of an event loop: a flood of connections cannot
/// keep the loop from reading the connections it has (the listener stays readable, and the
/// next turn accepts more).
pub(super) const MAX_ACCEPTS_PER_TURN: usize = 64;

/// The index of the connection to close when too many wait to say who they are: the one that
/// has waited longest (earliest `deadline`) among those of the user with the most waiting
/// (`uid`). A real peer speaks at once, and connections that have spoken are read before any
/// is accepted, so a flood of silent connections by one user pushes out only its own. 0 when
/// `pending` is empty.
pub(super) fn eviction_victim<T>(
    pending: &[T],
    uid: impl Fn(&T) -> u32,
    deadline: impl Fn(&T) -> std::time::Instant,
) -> usize {
    let mut counts = std::collections::HashMap::<u32, usize>::new();
    for p in pending {
        *counts.entry(uid(p)).or_default() += 1;
    }
    let Some((&most, _)) = counts.iter().max_by_key(|&(&uid, &n)| (n, uid)) else {
        return 0;
    };
    pending
        .iter()
        .enumerate()
        .filter(|(_, p)| uid(p) == most)
        .min_by_key(|(_, p)| deadline(p))
        .map_or(0, |(i, _)| i)
}

/// Most descriptors a [`FramedConn::with_fds`] connection holds before they are taken: more
/// is a protocol violation.
pub(super) const MAX_QUEUED_FDS: usize = 4;

/// What a read found.
#[derive(Debug)]
pub(super) enum ReadOutcome {
    /// Complete messages, in order (possibly none: only part of a frame so far).
    Messages(Vec<Frame>),
    /// The peer closed the connection (after the messages, if any).
    Closed(Vec<Frame>),
}

/// Why a connection is unusable.
#[derive(Debug, thiserror::Error)]
pub(super) enum ConnError {
    /// The socket failed.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The peer sent a frame that does not decode.
    #[error("bad control frame: {0}")]
    Control(#[from] ControlError),
    /// `recv` failed.
    #[error("reading the control socket: {0}")]
    Recv(Errno),
    /// `send` failed.
    #[error("writing the control socket: {0}")]
    Send(Errno),
    /// A frame announces a body larger than this connection accepts.
    /// More descriptors than messages carry.
    #[error("sent more file descriptors than its messages carry (at most {MAX_QUEUED_FDS})")]
    TooManyFds,
    /// The peer does not read what is sent to it.
    #[error("it does not read its answers ({0} bytes queued)")]
    NotReading(usize),
    /// A message that says it carries descriptors arrived without them.
    #[error("a {0} message arrived without the descriptors it declares")]
    MissingFds(&'static str),
    #[error("a message of {len} bytes, more than the {max} bytes allowed")]
    Oversized {
        /// The announced body length.
        len: usize,
        /// The limit.
        max: usize,
    },
}

impl FramedConn {
    /// Wrap an accepted connection (sends get [`SEND_TIMEOUT`]) that accepts frame bodies of
    /// at most `max_body` bytes.
    pub(super) fn new(conn: ControlConn, max_body: usize) -> Result<Self, ConnError> {
        conn.set_send_timeout(Some(SEND_TIMEOUT))?;
        Ok(Self {
            conn,
            rx: Vec::new(),
            max_body,
            fds: None,
            tx: Vec::new(),
            tx_sent: 0,
        })
    }

    /// Like [`Self::new`], keeping the descriptors that arrive (see the module docs).
    pub(super) fn with_fds(conn: ControlConn, max_body: usize) -> Result<Self, ConnError> {
        let mut framed = Self::new(conn, max_body)?;
        framed.fds = Some(Vec::new());
        Ok(framed)
    }

    /// The `n` oldest descriptors received, for a message whose `fd_count` is `n`.
    pub(super) fn take_fds(&mut self, msg: &Frame) -> Result<Vec<OwnedFd>, ConnError> {
        let n = msg.fd_count();
        match &mut self.fds {
            Some(queue) if queue.len() >= n => Ok(queue.drain(..n).collect()),
            _ if n == 0 => Ok(Vec::new()),
            _ => Err(ConnError::MissingFds(msg.name())),
        }
    }

    /// The connection.
    pub(super) fn conn(&self) -> &ControlConn {
        &self.conn
    }

    /// Read whatever is available without blocking and decode every complete frame.
    pub(super) fn read_available(&mut self) -> Result<ReadOutcome, ConnError> {
        let mut closed = false;
        let mut chunk = [0u8; READ_CHUNK];
        loop {
            let got = match &mut self.fds {
                Some(queue) => {
                    let got = fxtrace::protocol::transport::try_recv_with_fds(
                        self.conn.as_fd(),
                        &mut chunk,
                        queue,
                    );
                    if queue.len() > MAX_QUEUED_FDS {
                        queue.clear();
                        return Err(ConnError::TooManyFds);
                    }
                    match got {
                        Ok(Some(n)) => Ok(n),
                        Ok(None) => Err(Errno::EAGAIN),
                        Err(e) => return Err(e.into()),
                    }
                }
                None => socket::recv(
                    self.conn.as_fd().as_raw_fd(),
                    &mut chunk,
                    MsgFlags::MSG_DONTWAIT,
                ),
            };
            match got {
                Ok(0) => {
                    closed = true;
                    break;
                }
                Ok(n) => {
                    self.rx.extend_from_slice(&chunk[..n]);
                    // Decode as we go, so a peer cannot make the buffer grow past one frame.
                    if self.rx.len() > FRAME_PREFIX_LEN + self.max_body {
                        break;
                    }
                }
                Err(Errno::EINTR) => continue,
                Err(Errno::EAGAIN) => break,
                Err(Errno::ECONNRESET) => {
                    closed = true;
                    break;
                }
                Err(e) => return Err(ConnError::Recv(e)),
            }
        }
        let mut messages = Vec::new();
        while let Some(prefix) = self.rx.first_chunk::<FRAME_PREFIX_LEN>() {
            let len = body_len_from_prefix(*prefix)?;
            if len > self.max_body {
                return Err(ConnError::Oversized {
                    len,
                    max: self.max_body,
                });
            }
            if self.rx.len() < FRAME_PREFIX_LEN + len {
                break;
            }
            let body = &self.rx[FRAME_PREFIX_LEN..FRAME_PREFIX_LEN + len];
            messages.push(Frame::decode_body(body)?);
            self.rx.drain(..FRAME_PREFIX_LEN + len);
        }
        Ok(if closed {
            ReadOutcome::Closed(messages)
        } else {
            ReadOutcome::Messages(messages)
        })
    }

    /// Queue `msg` (no descriptors) and send what the socket takes now, never blocking: the
    /// rest goes out with [`Self::flush_queued`] when `poll` says the socket is writable. A
    /// peer with more than [`MAX_QUEUED_BYTES`] unsent is refused ([`ConnError::NotReading`]).
    pub(super) fn queue(&mut self, msg: &impl FrameMessage) -> Result<(), ConnError> {
        let frame = msg.encode()?;
        let queued = self.tx.len() - self.tx_sent + frame.len();
        if queued > MAX_QUEUED_BYTES {
            return Err(ConnError::NotReading(queued));
        }
        self.tx.extend_from_slice(&frame);
        self.flush_queued()
    }

    /// Send what is queued without blocking.
    pub(super) fn flush_queued(&mut self) -> Result<(), ConnError> {
        while self.tx_sent < self.tx.len() {
            match socket::send(
                self.conn.as_fd().as_raw_fd(),
                &self.tx[self.tx_sent..],
                MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
            ) {
                Ok(n) => self.tx_sent += n,
                Err(Errno::EINTR) => continue,
                Err(Errno::EAGAIN) => break,
                Err(Errno::EPIPE | Errno::ECONNRESET) => {
                    return Err(ConnError::Transport(TransportError::PeerClosed))
                }
                Err(e) => return Err(ConnError::Send(e)),
            }
        }
        if self.tx_sent == self.tx.len() {
            self.tx.clear();
            self.tx_sent = 0;
        }
        Ok(())
    }

    /// Bytes queued and not sent yet.
    pub(super) fn queued(&self) -> usize {
        self.tx.len() - self.tx_sent
    }

    /// Send a message (with its file descriptors), blocking at most [`SEND_TIMEOUT`].
    pub(super) fn send(
        &mut self,
        msg: &impl FrameMessage,
        fds: &[BorrowedFd<'_>],
    ) -> Result<(), ConnError> {
        self.conn.send_msg(msg, fds)?;
        Ok(())
    }
}

impl AsFd for FramedConn {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.conn.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fxtrace::protocol::control::Message;
    use fxtrace::protocol::transport::ControlListener;

    #[test]
    fn the_user_with_the_most_waiting_loses_its_oldest() {
        let t0 = std::time::Instant::now();
        let at = |ms| t0 + std::time::Duration::from_millis(ms);
        // (uid, deadline)
        let pending = [(0, at(1)), (7, at(5)), (7, at(3)), (0, at(2)), (7, at(4))];
        let victim = eviction_victim(&pending, |p| p.0, |p| p.1);
        assert_eq!(pending[victim], (7, at(3)));
        // One user: the oldest.
        assert_eq!(eviction_victim(&pending[..1], |p| p.0, |p| p.1), 0);
        assert_eq!(
            eviction_victim::<(u32, std::time::Instant)>(&[], |p| p.0, |p| p.1),
            0
        );
    }

    #[test]
    fn frames_arrive_in_pieces_and_close_is_seen() {
        let dir = tempfile::tempdir().unwrap();
        let listener = ControlListener::bind(&dir.path().join("s")).unwrap();
        let client = std::os::unix::net::UnixStream::connect(listener.path()).unwrap();
        let mut conn = FramedConn::new(
            listener.accept().unwrap(),
            fxtrace::protocol::control::MAX_BODY_LEN,
        )
        .unwrap();
        let frame = Message::Register {
            pid: 9,
            name: "piece".into(),
            known_categories: Vec::new(),
            accepts_ticks_per_second: false,
            waits_for_session: false,
        }
        .encode()
        .unwrap();
        use std::io::Write;
        let mut c = &client;
        c.write_all(&frame[..3]).unwrap();
        match conn.read_available().unwrap() {
            ReadOutcome::Messages(m) => assert!(m.is_empty()),
            other => panic!("{other:?}"),
        }
        c.write_all(&frame[3..]).unwrap();
        c.write_all(&Frame::StatusRequest { figures: false }.encode().unwrap())
            .unwrap();
        match conn.read_available().unwrap() {
            ReadOutcome::Messages(m) => {
                assert_eq!(m.len(), 2);
                assert!(matches!(
                    m[0],
                    Frame::Provider(Message::Register { pid: 9, .. })
                ));
                assert_eq!(m[1], Frame::StatusRequest { figures: false });
            }
            other => panic!("{other:?}"),
        }
        drop(client);
        assert!(matches!(
            conn.read_available().unwrap(),
            ReadOutcome::Closed(m) if m.is_empty()
        ));
    }

    #[test]
    fn a_bad_frame_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let listener = ControlListener::bind(&dir.path().join("s")).unwrap();
        let client = std::os::unix::net::UnixStream::connect(listener.path()).unwrap();
        let mut conn = FramedConn::new(
            listener.accept().unwrap(),
            fxtrace::protocol::control::MAX_BODY_LEN,
        )
        .unwrap();
        use std::io::Write;
        // Body length 2: below the minimum of 4.
        (&client).write_all(&[2, 0, 0, 0, 1, 0]).unwrap();
        assert!(matches!(
            conn.read_available(),
            Err(ConnError::Control(ControlError::BadLength { len: 2 }))
        ));
    }
}
