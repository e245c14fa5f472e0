//! Sockets that carry the protocol: the control channel (a Unix stream socket carrying
//! [`Message`] frames and, with them, file descriptors as `SCM_RIGHTS`) and the FIFO (a
//! `SOCK_SEQPACKET` socketpair carrying one 16-byte [`FifoPacket`] per datagram).
//!
//! # Control channel
//!
//! The manager binds a [`ControlListener`] at [`default_socket_path`] (or the path it sets in
//! `FXTRACE_SOCKET` for the command it launches). The socket file gets mode 0600 before
//! `listen`, so no other user can connect while it is briefly wider; a stale socket file
//! (nobody listening) is replaced, anything else at the path is left alone and reported.
//! Every accepted peer's `SO_PEERCRED` is checked against a [`PeerPolicy`]: by default a
//! manager accepts peers of its own uid, and a root manager accepts everyone. A provider
//! ([`ControlConn::connect`]) checks the other way round: it talks only to a manager of its
//! own uid or root, so a socket planted by another user gets none of its data. Connecting is
//! bounded by a timeout and never blocks longer.
//!
//! # FIFO
//!
//! [`fifo_pair`] makes the two ends. [`send_packet`] / [`recv_packet`] move one packet;
//! a datagram of any other length than 16 is an error, and a closed peer is its own error
//! ([`TransportError::PeerClosed`]), which a provider takes as "the manager died: stop".
//!
//! # Example
//!
//! ```
//! use fxtrace::protocol::control::Message;
//! use fxtrace::protocol::fifo::ProviderPacket;
//! use fxtrace::protocol::transport::{self, ControlConn, ControlListener, TransportError};
//! use std::os::fd::AsFd;
//! use std::time::Duration;
//!
//! let dir = tempfile::tempdir().unwrap();
//! let listener = ControlListener::bind(&dir.path().join("fxtrace.sock"))?;
//! let mut provider = ControlConn::connect(listener.path(), Duration::from_secs(1))?;
//! let mut manager = listener.accept()?;
//! provider.send_msg(&Message::Register { pid: std::process::id(), name: "demo".into(), known_categories: vec![], accepts_ticks_per_second: false, waits_for_session: false }, &[])?;
//! let (msg, fds) = manager.recv_msg()?;
//! assert!(matches!(msg, Message::Register { .. }) && fds.is_empty());
//!
//! let (m_end, p_end) = transport::fifo_pair()?;
//! transport::send_packet(p_end.as_fd(), &ProviderPacket::STARTED.to_packet())?;
//! assert_eq!(transport::try_recv_packet(m_end.as_fd())?, Some(ProviderPacket::STARTED.to_packet()));
//! # Ok::<(), TransportError>(())
//! ```

use super::control::{body_len_from_prefix, ControlError, FrameMessage, Message, FRAME_PREFIX_LEN};
use super::fifo::{FifoPacket, PACKET_SIZE};
use nix::errno::Errno;
use nix::sys::socket::{
    self, sockopt, AddressFamily, Backlog, ControlMessage, MsgFlags, SockFlag, SockType, UnixAddr,
};
use nix::sys::stat::{self, SFlag};
use nix::sys::time::TimeVal;
use nix::unistd;
use std::ffi::OsString;
use std::io::IoSlice;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use thiserror::Error;

/// Environment variable naming the control socket.
pub const SOCKET_ENV: &str = "FXTRACE_SOCKET";

/// File name of the socket under `$XDG_RUNTIME_DIR`.
pub const SOCKET_FILE_NAME: &str = "fxtrace.sock";

/// Mode of the control socket file: owner read/write only.
pub const DEFAULT_SOCKET_MODE: u32 = 0o600;

/// Most file descriptors accepted with one control message; more is an error (and all of
/// them are closed).
pub const MAX_FDS_PER_MESSAGE: usize = 8;

/// Pending connections the listener queues (the kernel caps it at `net.core.somaxconn`,
/// 4096 by default): a script starting hundreds of traced processes at once must find room,
/// since one that finds the queue full waits for the manager's next accept, bounded.
const LISTEN_BACKLOG: i32 = 4096;

/// A transport failure.
#[derive(Debug, Error)]
pub enum TransportError {
    /// A system call failed.
    #[error("{op} failed: {source}")]
    Sys {
        /// The operation.
        op: &'static str,
        /// The error number.
        #[source]
        source: Errno,
    },
    /// A system call on a path failed.
    #[error("{op} {path}: {source}")]
    Path {
        /// The operation.
        op: &'static str,
        /// The path.
        path: PathBuf,
        /// The error number.
        #[source]
        source: Errno,
    },
    /// Something other than a socket is at the socket path; it is not touched.
    #[error("{path} exists and is not a socket; refusing to replace it")]
    NotASocket {
        /// The path.
        path: PathBuf,
    },
    /// The socket at the path belongs to another user; it is not touched.
    #[error("socket {path} is owned by uid {owner}, not by this manager's uid {expected}")]
    ForeignOwner {
        /// The path.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// The manager's effective uid.
        expected: u32,
    },
    /// The directory of the per-user fallback socket ([`fallback_socket_dir`]) is not a
    /// directory only this user owns and can use: someone else made it, or loosened it.
    #[error(
        "{dir}: {reason}: the socket directory must be a directory of uid {uid} that only it \
         can use (mode 0700); remove it (another user's: ask root), or set XDG_RUNTIME_DIR or \
         FXTRACE_SOCKET"
    )]
    UnsafeSocketDir {
        /// The directory.
        dir: PathBuf,
        /// What is wrong with it.
        reason: String,
        /// The user it should belong to.
        uid: u32,
    },
    /// A live manager already listens at the path.
    #[error("a manager is already listening on {path}")]
    InUse {
        /// The path.
        path: PathBuf,
    },
    /// No manager listens at the path (missing file or refused connection).
    #[error("no trace manager at {path}: {source}")]
    NoManager {
        /// The path.
        path: PathBuf,
        /// `ENOENT` or `ECONNREFUSED` usually.
        #[source]
        source: Errno,
    },
    /// The peer's credentials are not allowed; the connection was closed.
    #[error("peer pid {pid} uid {uid} is not allowed to talk to this {side}")]
    PeerRefused {
        /// Who refused: "manager" or "provider".
        side: &'static str,
        /// Peer process id.
        pid: i32,
        /// Peer user id.
        uid: u32,
    },
    /// The operation did not finish in time.
    #[error("{op} timed out")]
    TimedOut {
        /// The operation.
        op: &'static str,
    },
    /// The peer closed its end (end of stream, `EPIPE`, `ECONNRESET`).
    #[error("peer closed the connection")]
    PeerClosed,
    /// The peer closed the stream in the middle of a frame.
    #[error("peer closed the connection after {got} of {expected} bytes of a frame")]
    ClosedMidFrame {
        /// Bytes received of the frame part being read.
        got: usize,
        /// Bytes expected.
        expected: usize,
    },
    /// The receive timeout expired in the middle of a frame; the stream is out of step.
    #[error("receive timed out after {got} of {expected} bytes of a frame")]
    StalledMidFrame {
        /// Bytes received of the frame part being read.
        got: usize,
        /// Bytes expected.
        expected: usize,
    },
    /// A frame that does not decode.
    #[error("bad control frame: {0}")]
    Control(#[from] ControlError),
    /// A message came (or was to be sent) with the wrong number of file descriptors.
    #[error("{message} carries {expected} file descriptors, got {got}")]
    FdCountMismatch {
        /// The message's name.
        message: &'static str,
        /// Descriptors the message carries by definition.
        expected: usize,
        /// Descriptors present.
        got: usize,
    },
    /// More descriptors arrived than fit ([`MAX_FDS_PER_MESSAGE`]); all were closed.
    #[error("ancillary data truncated: more than {MAX_FDS_PER_MESSAGE} file descriptors sent")]
    TooManyFds,
    /// A FIFO datagram that is not 16 bytes long.
    #[error("FIFO datagram of {len} bytes, expected {PACKET_SIZE}")]
    WrongPacketLength {
        /// Actual datagram length.
        len: usize,
    },
    /// The FIFO's queue is full (the peer is not reading).
    #[error("FIFO full: the peer is not reading")]
    FifoFull,
}

fn sys(op: &'static str) -> impl FnOnce(Errno) -> TransportError {
    move |source| TransportError::Sys { op, source }
}

fn path_err<'p>(op: &'static str, path: &'p Path) -> impl FnOnce(Errno) -> TransportError + 'p {
    move |source| TransportError::Path {
        op,
        path: path.to_owned(),
        source,
    }
}

// === socket path ===

/// The control socket path: `$FXTRACE_SOCKET` if set and non-empty, else
/// `$XDG_RUNTIME_DIR/fxtrace.sock` if that is an absolute path, else
/// `/tmp/fxtrace-<euid>/fxtrace.sock` (see [`fallback_socket_dir`]).
pub fn default_socket_path() -> PathBuf {
    socket_path_from(
        std::env::var_os(SOCKET_ENV),
        std::env::var_os("XDG_RUNTIME_DIR"),
        unistd::geteuid().as_raw(),
    )
}

/// [`default_socket_path`] from explicit inputs.
pub fn socket_path_from(
    fxtrace_socket: Option<OsString>,
    xdg_runtime_dir: Option<OsString>,
    uid: u32,
) -> PathBuf {
    if let Some(p) = fxtrace_socket.filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    if let Some(dir) = xdg_runtime_dir
        .map(PathBuf::from)
        .filter(|d| d.is_absolute())
    {
        return dir.join(SOCKET_FILE_NAME);
    }
    fallback_socket_dir(uid).join(SOCKET_FILE_NAME)
}

/// Where the socket of user `uid` is when `XDG_RUNTIME_DIR` is unset: `/tmp/fxtrace-<uid>`, a
/// directory that user creates with mode 0700 ([`ControlListener::bind`]) and that both
/// ends check before using a socket in it ([`check_private_dir`]), so that another user
/// cannot plant the socket (or a link to another service's) under that name.
pub fn fallback_socket_dir(uid: u32) -> PathBuf {
    PathBuf::from(format!("/tmp/fxtrace-{uid}"))
}

/// Whether `dir` is a directory that only `uid` owns and can use: a directory itself (not a
/// symbolic link), owned by `uid`, with no permission for group or others.
pub fn check_private_dir(dir: &Path, uid: u32) -> Result<(), TransportError> {
    let unsafe_dir = |reason: String| TransportError::UnsafeSocketDir {
        dir: dir.to_owned(),
        reason,
        uid,
    };
    let st = stat::lstat(dir).map_err(path_err("lstat", dir))?;
    let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
    if kind == SFlag::S_IFLNK {
        return Err(unsafe_dir("it is a symbolic link".into()));
    }
    if kind != SFlag::S_IFDIR {
        return Err(unsafe_dir("it is not a directory".into()));
    }
    if st.st_uid != uid {
        return Err(unsafe_dir(format!("it belongs to uid {}", st.st_uid)));
    }
    if st.st_mode & 0o077 != 0 {
        return Err(unsafe_dir(format!(
            "its mode is {:04o}, open to others",
            st.st_mode & 0o7777
        )));
    }
    Ok(())
}

/// When `path` is this user's fallback socket ([`fallback_socket_dir`]), its directory: the
/// one that must be private.
fn fallback_dir_of(path: &Path) -> Option<(&Path, u32)> {
    let uid = unistd::geteuid().as_raw();
    let dir = path.parent()?;
    (path.file_name()? == SOCKET_FILE_NAME && dir == fallback_socket_dir(uid)).then_some((dir, uid))
}

/// Create the fallback socket's directory `dir` with mode 0700 unless it exists, then check
/// it ([`check_private_dir`]): one that someone else made first is refused, never used.
fn ensure_private_dir(dir: &Path, uid: u32) -> Result<(), TransportError> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(path_err("mkdir", dir)(Errno::from_raw(
                e.raw_os_error().unwrap_or(libc::EIO),
            )))
        }
    }
    check_private_dir(dir, uid)
}

// === peer credentials ===

/// Credentials of the process at the other end of a Unix socket (`SO_PEERCRED`, taken
/// when it called `connect` or `listen`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCred {
    /// Process id.
    pub pid: i32,
    /// Effective user id.
    pub uid: u32,
    /// Effective group id.
    pub gid: u32,
}

fn peer_cred(fd: &OwnedFd) -> Result<PeerCred, TransportError> {
    let c =
        socket::getsockopt(fd, sockopt::PeerCredentials).map_err(sys("getsockopt(SO_PEERCRED)"))?;
    Ok(PeerCred {
        pid: c.pid(),
        uid: c.uid(),
        gid: c.gid(),
    })
}

/// Which peers a manager accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PeerPolicy {
    /// Peers with the manager's effective uid; a root manager accepts every peer.
    #[default]
    SameUser,
    /// Only peers with exactly this uid (also when the manager is root).
    OnlyUid(u32),
}

impl PeerPolicy {
    /// Whether a manager running as `manager_uid` accepts a peer running as `peer_uid`.
    pub fn allows(self, manager_uid: u32, peer_uid: u32) -> bool {
        match self {
            PeerPolicy::SameUser => manager_uid == 0 || peer_uid == manager_uid,
            PeerPolicy::OnlyUid(uid) => peer_uid == uid,
        }
    }
}

/// Whether a provider running as `provider_uid` talks to a manager running as
/// `manager_uid`: only its own uid or root.
pub fn provider_accepts_manager(provider_uid: u32, manager_uid: u32) -> bool {
    manager_uid == provider_uid || manager_uid == 0
}

// === impl ControlListener ===

/// How a [`ControlListener`] is set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenerOptions {
    /// Mode of the socket file ([`DEFAULT_SOCKET_MODE`]); a root manager tracing other
    /// users' processes needs a mode that lets them connect.
    pub mode: u32,
    /// Which peers are accepted.
    pub policy: PeerPolicy,
}

impl Default for ListenerOptions {
    fn default() -> Self {
        ListenerOptions {
            mode: DEFAULT_SOCKET_MODE,
            policy: PeerPolicy::SameUser,
        }
    }
}

/// The manager's listening control socket. Dropping it removes the socket file (if it is
/// still the one this listener created).
#[derive(Debug)]
pub struct ControlListener {
    fd: OwnedFd,
    path: PathBuf,
    /// (device, inode) of the socket file this listener created.
    file_id: (u64, u64),
    manager_uid: u32,
    policy: PeerPolicy,
}

impl ControlListener {
    /// Binds at `path` with [`ListenerOptions::default`] (mode 0600, same-user peers).
    pub fn bind(path: &Path) -> Result<Self, TransportError> {
        Self::bind_with(path, ListenerOptions::default())
    }

    /// Binds at `path`. An existing socket file at `path` owned by this uid with nobody
    /// listening is removed first; a live socket ([`TransportError::InUse`]), another
    /// user's socket ([`TransportError::ForeignOwner`]) or a non-socket
    /// ([`TransportError::NotASocket`]) is left in place and reported.
    pub fn bind_with(path: &Path, options: ListenerOptions) -> Result<Self, TransportError> {
        let manager_uid = unistd::geteuid().as_raw();
        if let Some((dir, uid)) = fallback_dir_of(path) {
            ensure_private_dir(dir, uid)?;
        }
        let addr = UnixAddr::new(path).map_err(path_err("socket address", path))?;
        remove_stale_socket(path, &addr, manager_uid)?;

        let fd = socket::socket(
            AddressFamily::Unix,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .map_err(sys("socket"))?;
        socket::bind(fd.as_raw_fd(), &addr).map_err(path_err("bind", path))?;
        // Until `listen`, connections are refused, so the file's mode is final before
        // anyone can connect.
        let listening =
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(options.mode))
                .map_err(|e| TransportError::Path {
                    op: "chmod",
                    path: path.to_owned(),
                    source: Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
                })
                .and_then(|()| stat::lstat(path).map_err(path_err("lstat", path)))
                .and_then(|st| {
                    let backlog = Backlog::new(LISTEN_BACKLOG).map_err(sys("listen backlog"))?;
                    socket::listen(&fd, backlog).map_err(path_err("listen", path))?;
                    Ok((st.st_dev, st.st_ino))
                });
        match listening {
            Ok(file_id) => Ok(ControlListener {
                fd,
                path: path.to_owned(),
                file_id,
                manager_uid,
                policy: options.policy,
            }),
            Err(e) => {
                // Best effort: the file is ours and useless; the original error matters more.
                let _ = unistd::unlink(path);
                Err(e)
            }
        }
    }

    /// A socket already bound and listening that this process was handed (systemd socket
    /// activation), accepting peers by `policy`. Its file is never removed by this listener:
    /// it belongs to whoever created it.
    pub fn from_listening(fd: OwnedFd, policy: PeerPolicy) -> Result<Self, TransportError> {
        let addr: UnixAddr = socket::getsockname(fd.as_raw_fd()).map_err(sys("getsockname"))?;
        let path = addr.path().map(Path::to_owned).ok_or(TransportError::Sys {
            op: "getsockname (not a path-bound Unix socket)",
            source: Errno::EINVAL,
        })?;
        // The socket must be a listening stream socket: `SO_ACCEPTCONN`.
        let listening = socket::getsockopt(&fd, sockopt::AcceptConn)
            .map_err(sys("getsockopt(SO_ACCEPTCONN)"))?;
        if !listening {
            return Err(TransportError::Sys {
                op: "the handed-over socket is not listening",
                source: Errno::EINVAL,
            });
        }
        Ok(ControlListener {
            fd,
            path,
            // No file identity: Drop never removes the file.
            file_id: (u64::MAX, u64::MAX),
            manager_uid: unistd::geteuid().as_raw(),
            policy,
        })
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Makes [`ControlListener::accept`] return `EAGAIN` as a [`TransportError::Sys`]
    /// instead of blocking, for use with `poll`.
    pub fn set_nonblocking(&self, nonblocking: bool) -> Result<(), TransportError> {
        set_nonblocking(self.fd.as_fd(), nonblocking)
    }

    /// Accepts one connection and checks its credentials. A refused peer's connection is
    /// closed and reported as [`TransportError::PeerRefused`]; the listener stays usable.
    pub fn accept(&self) -> Result<ControlConn, TransportError> {
        let raw = loop {
            match socket::accept4(self.fd.as_raw_fd(), SockFlag::SOCK_CLOEXEC) {
                Err(Errno::EINTR) => continue,
                r => break r.map_err(sys("accept"))?,
            }
        };
        // SAFETY: accept4 returned a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let peer = peer_cred(&fd)?;
        if !self.policy.allows(self.manager_uid, peer.uid) {
            return Err(TransportError::PeerRefused {
                side: "manager",
                pid: peer.pid,
                uid: peer.uid,
            });
        }
        Ok(ControlConn { fd, peer })
    }
}

impl AsFd for ControlListener {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Drop for ControlListener {
    fn drop(&mut self) {
        // Remove the file only if it is still the socket this listener created.
        if let Ok(st) = stat::lstat(&self.path) {
            if (st.st_dev, st.st_ino) == self.file_id {
                let _ = unistd::unlink(&self.path);
            }
        }
    }
}

/// Removes a stale socket file at `path`: one owned by `uid` that nobody listens on.
fn remove_stale_socket(path: &Path, addr: &UnixAddr, uid: u32) -> Result<(), TransportError> {
    let st = match stat::lstat(path) {
        Err(Errno::ENOENT) => return Ok(()),
        r => r.map_err(path_err("lstat", path))?,
    };
    if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFSOCK {
        return Err(TransportError::NotASocket {
            path: path.to_owned(),
        });
    }
    if st.st_uid != uid {
        return Err(TransportError::ForeignOwner {
            path: path.to_owned(),
            owner: st.st_uid,
            expected: uid,
        });
    }
    let probe = socket::socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        None,
    )
    .map_err(sys("socket"))?;
    match socket::connect(probe.as_raw_fd(), addr) {
        // Someone accepts (or queues) connections: a live manager.
        Ok(()) | Err(Errno::EAGAIN) => Err(TransportError::InUse {
            path: path.to_owned(),
        }),
        Err(Errno::ECONNREFUSED) => match unistd::unlink(path) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(path_err("unlink stale socket", path)(e)),
        },
        Err(e) => Err(path_err("probe existing socket", path)(e)),
    }
}

fn set_nonblocking(fd: BorrowedFd<'_>, nonblocking: bool) -> Result<(), TransportError> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let flags = fcntl(fd, FcntlArg::F_GETFL).map_err(sys("fcntl(F_GETFL)"))?;
    let mut flags = OFlag::from_bits_truncate(flags);
    flags.set(OFlag::O_NONBLOCK, nonblocking);
    fcntl(fd, FcntlArg::F_SETFL(flags)).map_err(sys("fcntl(F_SETFL)"))?;
    Ok(())
}

// === impl ControlConn ===

/// One control connection (either end). Frames are sent and received whole; `&mut self`
/// keeps two threads from interleaving frames.
#[derive(Debug)]
pub struct ControlConn {
    fd: OwnedFd,
    peer: PeerCred,
}

impl ControlConn {
    /// Connects to the manager at `path`, giving up after `timeout` (a full listen queue
    /// is waited on until then, woken by the manager's accept; a missing or refusing socket
    /// fails at once with
    /// [`TransportError::NoManager`]). The manager must run as this process's uid or root.
    pub fn connect(path: &Path, timeout: Duration) -> Result<ControlConn, TransportError> {
        let deadline = Instant::now() + timeout;
        if let Some((dir, uid)) = fallback_dir_of(path) {
            match check_private_dir(dir, uid) {
                // No directory, no socket: nobody listens.
                Err(TransportError::Path {
                    source: Errno::ENOENT,
                    ..
                }) => {
                    return Err(TransportError::NoManager {
                        path: path.to_owned(),
                        source: Errno::ENOENT,
                    })
                }
                r => r?,
            }
        }
        let addr = UnixAddr::new(path).map_err(path_err("socket address", path))?;
        let fd = socket::socket(
            AddressFamily::Unix,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .map_err(sys("socket"))?;
        loop {
            // A full listen queue (a busy manager) makes a blocking Unix-socket connect sleep
            // until the manager accepts one, for at most the send timeout: woken by the
            // accept, never polled. Tried at least once, however late (a loaded machine may
            // not have run this thread since the deadline was set).
            let left = deadline.saturating_duration_since(Instant::now());
            socket::setsockopt(&fd, sockopt::SendTimeout, &timeval(Some(left)))
                .map_err(sys("setsockopt(SO_SNDTIMEO)"))?;
            match socket::connect(fd.as_raw_fd(), &addr) {
                Ok(()) | Err(Errno::EISCONN) => break,
                // A signal, or the bound (EAGAIN).
                Err(Errno::EINTR | Errno::EAGAIN | Errno::EINPROGRESS | Errno::EALREADY) => {
                    if Instant::now() >= deadline {
                        return Err(TransportError::TimedOut { op: "connect" });
                    }
                }
                Err(e @ (Errno::ENOENT | Errno::ECONNREFUSED)) => {
                    return Err(TransportError::NoManager {
                        path: path.to_owned(),
                        source: e,
                    })
                }
                Err(e) => return Err(path_err("connect", path)(e)),
            }
        }
        // As a new socket has it: no send timeout (callers set their own).
        socket::setsockopt(&fd, sockopt::SendTimeout, &timeval(None))
            .map_err(sys("setsockopt(SO_SNDTIMEO)"))?;
        let peer = peer_cred(&fd)?;
        if !provider_accepts_manager(unistd::geteuid().as_raw(), peer.uid) {
            return Err(TransportError::PeerRefused {
                side: "provider",
                pid: peer.pid,
                uid: peer.uid,
            });
        }
        Ok(ControlConn { fd, peer })
    }

    /// The peer's credentials.
    pub fn peer(&self) -> PeerCred {
        self.peer
    }

    /// The peer's process id.
    pub fn peer_pid(&self) -> i32 {
        self.peer.pid
    }

    /// The peer's user id.
    pub fn peer_uid(&self) -> u32 {
        self.peer.uid
    }

    /// Bounds how long [`ControlConn::recv_msg`] waits for data (`None`: forever); on
    /// expiry it returns [`TransportError::TimedOut`].
    pub fn set_recv_timeout(&self, timeout: Option<Duration>) -> Result<(), TransportError> {
        socket::setsockopt(&self.fd, sockopt::ReceiveTimeout, &timeval(timeout))
            .map_err(sys("setsockopt(SO_RCVTIMEO)"))
    }

    /// Bounds how long [`ControlConn::send_msg`] waits for buffer space (`None`: forever).
    pub fn set_send_timeout(&self, timeout: Option<Duration>) -> Result<(), TransportError> {
        socket::setsockopt(&self.fd, sockopt::SendTimeout, &timeval(timeout))
            .map_err(sys("setsockopt(SO_SNDTIMEO)"))
    }

    /// Sends one message with exactly [`FrameMessage::fd_count`] descriptors attached.
    pub fn send_msg<M: FrameMessage>(
        &mut self,
        msg: &M,
        fds: &[BorrowedFd<'_>],
    ) -> Result<(), TransportError> {
        if fds.len() != msg.fd_count() {
            return Err(TransportError::FdCountMismatch {
                message: msg.name(),
                expected: msg.fd_count(),
                got: fds.len(),
            });
        }
        let frame = msg.encode()?;
        let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
        let rights = [ControlMessage::ScmRights(&raw)];
        let cmsgs: &[ControlMessage<'_>] = if raw.is_empty() { &[] } else { &rights };
        // The descriptors ride on the first byte; the rest of the frame follows plainly.
        let mut sent = loop {
            match socket::sendmsg::<UnixAddr>(
                self.fd.as_raw_fd(),
                &[IoSlice::new(&frame)],
                cmsgs,
                MsgFlags::MSG_NOSIGNAL,
                None,
            ) {
                Err(Errno::EINTR) => continue,
                r => break r.map_err(send_error)?,
            }
        };
        while sent < frame.len() {
            match socket::send(self.fd.as_raw_fd(), &frame[sent..], MsgFlags::MSG_NOSIGNAL) {
                Err(Errno::EINTR) => continue,
                r => sent += r.map_err(send_error)?,
            }
        }
        Ok(())
    }

    /// Receives one message of the provider protocol and the descriptors that came with it
    /// (as many as [`Message::fd_count`], else an error and all of them are closed).
    ///
    /// After an error the stream position is unknown, so the connection should be
    /// dropped; the one exception is [`TransportError::TimedOut`], returned only when no
    /// byte of a frame had arrived, after which the connection stays usable.
    pub fn recv_msg(&mut self) -> Result<(Message, Vec<OwnedFd>), TransportError> {
        self.recv_frame()
    }

    /// [`Self::recv_msg`], giving up at `deadline` however the frame trickles in: the receive
    /// timeout is set to the time left before every `recv` (and left so). A peer that sends
    /// one byte at a time, each within the receive timeout, cannot stretch the wait.
    pub fn recv_msg_by(
        &mut self,
        deadline: Instant,
    ) -> Result<(Message, Vec<OwnedFd>), TransportError> {
        self.recv_frame_until(Some(deadline))
    }

    /// [`Self::recv_msg`] for any [`FrameMessage`] (the tools' frames too).
    pub fn recv_frame<M: FrameMessage>(&mut self) -> Result<(M, Vec<OwnedFd>), TransportError> {
        self.recv_frame_until(None)
    }

    fn recv_frame_until<M: FrameMessage>(
        &mut self,
        deadline: Option<Instant>,
    ) -> Result<(M, Vec<OwnedFd>), TransportError> {
        let mut fds = Vec::new();
        let mut prefix = [0u8; FRAME_PREFIX_LEN];
        self.read_exact(&mut prefix, &mut fds, true, deadline)?;
        let len = body_len_from_prefix(prefix)?;
        let mut body = vec![0u8; len];
        self.read_exact(&mut body, &mut fds, false, deadline)?;
        let msg = M::decode_body(&body)?;
        if fds.len() != msg.fd_count() {
            return Err(TransportError::FdCountMismatch {
                message: msg.name(),
                expected: msg.fd_count(),
                got: fds.len(),
            });
        }
        Ok((msg, fds))
    }

    /// Fills `buf` from the stream, collecting descriptors into `fds`, by `deadline` if one is
    /// given. End of stream before the first byte of a frame is [`TransportError::PeerClosed`].
    fn read_exact(
        &mut self,
        buf: &mut [u8],
        fds: &mut Vec<OwnedFd>,
        frame_start: bool,
        deadline: Option<Instant>,
    ) -> Result<(), TransportError> {
        let mut got = 0;
        while got < buf.len() {
            if let Some(deadline) = deadline {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(if frame_start && got == 0 {
                        TransportError::TimedOut { op: "receive" }
                    } else {
                        TransportError::StalledMidFrame {
                            got,
                            expected: buf.len(),
                        }
                    });
                }
                self.set_recv_timeout(Some(left))?;
            }
            let n = match recv_with_fds(self.fd.as_fd(), &mut buf[got..], fds) {
                Err(TransportError::TimedOut { .. }) if !(frame_start && got == 0) => {
                    return Err(TransportError::StalledMidFrame {
                        got,
                        expected: buf.len(),
                    })
                }
                r => r?,
            };
            if n == 0 {
                return Err(if frame_start && got == 0 {
                    TransportError::PeerClosed
                } else {
                    TransportError::ClosedMidFrame {
                        got,
                        expected: buf.len(),
                    }
                });
            }
            got += n;
        }
        Ok(())
    }
}

impl AsFd for ControlConn {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

fn timeval(timeout: Option<Duration>) -> TimeVal {
    // A zero timeval means "no timeout"; a requested zero becomes the smallest real one.
    match timeout {
        None => TimeVal::new(0, 0),
        Some(d) => {
            let secs = libc::time_t::try_from(d.as_secs()).unwrap_or(libc::time_t::MAX);
            // Below 1_000_000, so it fits every suseconds_t.
            let usecs = d.subsec_micros() as libc::suseconds_t;
            if secs == 0 && usecs == 0 {
                TimeVal::new(0, 1)
            } else {
                TimeVal::new(secs, usecs)
            }
        }
    }
}

fn send_error(e: Errno) -> TransportError {
    match e {
        Errno::EPIPE | Errno::ECONNRESET => TransportError::PeerClosed,
        Errno::EAGAIN => TransportError::TimedOut { op: "send" },
        e => TransportError::Sys {
            op: "send",
            source: e,
        },
    }
}

/// One `recvmsg` on a stream socket: data into `buf`, `SCM_RIGHTS` descriptors (received
/// close-on-exec) appended to `fds`. Every descriptor received is owned, so none leaks,
/// even when the control data was truncated.
fn recv_with_fds(
    fd: BorrowedFd<'_>,
    buf: &mut [u8],
    fds: &mut Vec<OwnedFd>,
) -> Result<usize, TransportError> {
    recv_with_fds_flags(fd, buf, fds, 0)
}

/// One nonblocking `recvmsg` on a stream socket (a poll loop's read): data into `buf`,
/// `SCM_RIGHTS` descriptors (close-on-exec) appended to `fds`. `Ok(None)`: nothing to read
/// now; `Ok(Some(0))`: end of stream.
pub fn try_recv_with_fds(
    fd: BorrowedFd<'_>,
    buf: &mut [u8],
    fds: &mut Vec<OwnedFd>,
) -> Result<Option<usize>, TransportError> {
    match recv_with_fds_flags(fd, buf, fds, libc::MSG_DONTWAIT) {
        Err(TransportError::TimedOut { .. }) => Ok(None),
        Err(TransportError::PeerClosed) => Ok(Some(0)),
        r => r.map(Some),
    }
}

fn recv_with_fds_flags(
    fd: BorrowedFd<'_>,
    buf: &mut [u8],
    fds: &mut Vec<OwnedFd>,
    flags: libc::c_int,
) -> Result<usize, TransportError> {
    const INT: usize = std::mem::size_of::<libc::c_int>();
    // u64 storage aligns the buffer for `cmsghdr`.
    let mut control = [0u64; 16];
    // SAFETY: CMSG_SPACE is a pure size computation.
    let space = unsafe { libc::CMSG_SPACE((MAX_FDS_PER_MESSAGE * INT) as libc::c_uint) } as usize;
    let controllen = space.min(std::mem::size_of_val(&control));
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain data; all-zero is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = controllen as _;
    let n = loop {
        // SAFETY: `msg` points at `iov` (which covers `buf`) and at `control`
        // (`controllen` bytes), all alive and exclusively borrowed for the call.
        let n = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC | flags) };
        match Errno::result(n) {
            Err(Errno::EINTR) => continue,
            Err(Errno::EAGAIN) => return Err(TransportError::TimedOut { op: "receive" }),
            Err(Errno::ECONNRESET) => return Err(TransportError::PeerClosed),
            Err(e) => {
                return Err(TransportError::Sys {
                    op: "recvmsg",
                    source: e,
                })
            }
            Ok(n) => break n as usize,
        }
    };
    // SAFETY: `msg` was filled by a successful recvmsg; its control fields describe
    // `control`, which is still alive.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    while !cmsg.is_null() {
        // SAFETY: CMSG_FIRSTHDR/CMSG_NXTHDR return null or a header inside `control`;
        // the buffer is 8-aligned, as cmsghdr requires.
        let hdr = unsafe { &*cmsg };
        if hdr.cmsg_level == libc::SOL_SOCKET && hdr.cmsg_type == libc::SCM_RIGHTS {
            // SAFETY: pure size computation.
            let header_len = unsafe { libc::CMSG_LEN(0) } as usize;
            let count = (hdr.cmsg_len as usize).saturating_sub(header_len) / INT;
            // SAFETY: CMSG_DATA points just past a valid header inside `control`.
            let data = unsafe { libc::CMSG_DATA(cmsg) }.cast::<libc::c_int>();
            for i in 0..count {
                // SAFETY: the kernel wrote `count` ints after the header, inside `control`;
                // read_unaligned because CMSG_DATA need not be int-aligned in general.
                let raw = unsafe { data.add(i).read_unaligned() };
                // SAFETY: SCM_RIGHTS installed `raw` as a new descriptor of this process
                // that nothing else owns.
                fds.push(unsafe { OwnedFd::from_raw_fd(raw) });
            }
        }
        // SAFETY: `cmsg` is a valid header of `msg`'s control buffer.
        cmsg = unsafe { libc::CMSG_NXTHDR(&msg, cmsg) };
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(TransportError::TooManyFds);
    }
    Ok(n)
}

// === FIFO ===

/// A connected `SOCK_SEQPACKET | SOCK_CLOEXEC` socket pair: one end stays with the
/// manager, the other goes to the provider in [`Message::Initialize`].
pub fn fifo_pair() -> Result<(OwnedFd, OwnedFd), TransportError> {
    socket::socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(sys("socketpair"))
}

fn send_packet_flags(
    fd: BorrowedFd<'_>,
    packet: &FifoPacket,
    flags: MsgFlags,
) -> Result<(), TransportError> {
    let bytes = packet.to_bytes();
    loop {
        match socket::send(fd.as_raw_fd(), &bytes, flags | MsgFlags::MSG_NOSIGNAL) {
            Err(Errno::EINTR) => continue,
            Err(Errno::EPIPE | Errno::ECONNRESET) => return Err(TransportError::PeerClosed),
            Err(Errno::EAGAIN) => return Err(TransportError::FifoFull),
            Err(e) => {
                return Err(TransportError::Sys {
                    op: "send packet",
                    source: e,
                })
            }
            // A SOCK_SEQPACKET send is all or nothing.
            Ok(_) => return Ok(()),
        }
    }
}

/// Sends one packet, waiting for queue space if the socket is blocking.
pub fn send_packet(fd: BorrowedFd<'_>, packet: &FifoPacket) -> Result<(), TransportError> {
    send_packet_flags(fd, packet, MsgFlags::empty())
}

/// Sends one packet without waiting: a full queue is [`TransportError::FifoFull`] (the
/// manager's rule: a provider that does not read its FIFO is dropped).
pub fn try_send_packet(fd: BorrowedFd<'_>, packet: &FifoPacket) -> Result<(), TransportError> {
    send_packet_flags(fd, packet, MsgFlags::MSG_DONTWAIT)
}

/// Receives one packet; `Ok(None)` when `MSG_DONTWAIT` is set and none is queued.
fn recv_packet_flags(
    fd: BorrowedFd<'_>,
    flags: MsgFlags,
) -> Result<Option<FifoPacket>, TransportError> {
    // One byte more than a packet, and MSG_TRUNC so the real datagram length is returned.
    let mut buf = [0u8; PACKET_SIZE + 1];
    loop {
        match socket::recv(fd.as_raw_fd(), &mut buf, flags | MsgFlags::MSG_TRUNC) {
            Err(Errno::EINTR) => continue,
            Err(Errno::EAGAIN) => return Ok(None),
            Err(Errno::ECONNRESET) => return Err(TransportError::PeerClosed),
            Err(e) => {
                return Err(TransportError::Sys {
                    op: "recv packet",
                    source: e,
                })
            }
            Ok(0) => return Err(TransportError::PeerClosed),
            Ok(PACKET_SIZE) => {
                let mut p = [0u8; PACKET_SIZE];
                p.copy_from_slice(&buf[..PACKET_SIZE]);
                return Ok(Some(FifoPacket::from_bytes(&p)));
            }
            Ok(len) => return Err(TransportError::WrongPacketLength { len }),
        }
    }
}

/// Receives one packet, waiting if the socket is blocking (a nonblocking socket with
/// nothing queued gives [`TransportError::TimedOut`]).
pub fn recv_packet(fd: BorrowedFd<'_>) -> Result<FifoPacket, TransportError> {
    recv_packet_flags(fd, MsgFlags::empty())?.ok_or(TransportError::TimedOut { op: "recv packet" })
}

/// Receives one packet if one is queued, without waiting.
pub fn try_recv_packet(fd: BorrowedFd<'_>) -> Result<Option<FifoPacket>, TransportError> {
    recv_packet_flags(fd, MsgFlags::MSG_DONTWAIT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::control::{BufferDisposition, BufferingMode};
    use crate::protocol::fifo::{ManagerPacket, ProviderPacket};
    use nix::sys::memfd::{memfd_create, MFdFlags};
    use nix::sys::uio::pread;
    use std::io::Write;
    use std::os::unix::fs::FileTypeExt;
    use std::os::unix::net::UnixStream;

    const TIMEOUT: Duration = Duration::from_secs(2);

    fn tempdir() -> tempfile::TempDir {
        tempfile::tempdir().expect("tempdir")
    }

    /// A listener and a connected pair (manager end, provider end).
    fn connected(dir: &Path) -> (ControlListener, ControlConn, ControlConn) {
        let path = dir.join("m.sock");
        let listener = ControlListener::bind(&path).expect("bind");
        let provider = ControlConn::connect(&path, TIMEOUT).expect("connect");
        let manager = listener.accept().expect("accept");
        (listener, manager, provider)
    }

    /// A listener whose queue is full: a connect waits for the manager's next accept (and
    /// gets through), or gives up at its bound; the send timeout it used is not left behind.
    #[test]
    fn a_full_listen_queue_is_waited_on_until_an_accept_or_the_bound() {
        let dir = tempdir();
        let path = dir.path().join("busy.sock");
        let addr = UnixAddr::new(&path).expect("addr");
        let listener = socket::socket(
            AddressFamily::Unix,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .expect("socket");
        socket::bind(listener.as_raw_fd(), &addr).expect("bind");
        socket::listen(&listener, Backlog::new(0).expect("backlog")).expect("listen");
        // Fill the queue: connections nobody accepts (a backlog of 0 still queues one).
        let mut queued = Vec::new();
        while let Ok(conn) = ControlConn::connect(&path, Duration::from_millis(50)) {
            queued.push(conn);
            assert!(queued.len() < 64, "the listen queue never filled");
        }
        assert!(matches!(
            ControlConn::connect(&path, Duration::from_millis(20)),
            Err(TransportError::TimedOut { op: "connect" })
        ));
        let waiting =
            std::thread::spawn(move || ControlConn::connect(&path, Duration::from_secs(30)));
        std::thread::sleep(Duration::from_millis(50));
        let accepted = socket::accept(listener.as_raw_fd()).expect("accept");
        let conn = waiting
            .join()
            .unwrap()
            .expect("connected once a place was free");
        let timeout: TimeVal = socket::getsockopt(&conn.fd, sockopt::SendTimeout).unwrap();
        assert_eq!(
            timeout,
            timeval(None),
            "no send timeout left on the connection"
        );
        drop(queued);
        // SAFETY: the descriptor accept returned, closed once.
        unsafe { libc::close(accepted) };
    }

    #[test]
    fn socket_path_resolution() {
        let os = |s: &str| Some(OsString::from(s));
        assert_eq!(
            socket_path_from(os("/x/y.sock"), os("/run/user/7"), 7),
            PathBuf::from("/x/y.sock")
        );
        assert_eq!(
            socket_path_from(os(""), os("/run/user/7"), 7),
            PathBuf::from("/run/user/7/fxtrace.sock")
        );
        assert_eq!(
            socket_path_from(None, os("relative/dir"), 7),
            PathBuf::from("/tmp/fxtrace-7/fxtrace.sock")
        );
        assert_eq!(
            socket_path_from(None, None, 1000),
            PathBuf::from("/tmp/fxtrace-1000/fxtrace.sock")
        );
    }

    #[test]
    fn a_private_dir_is_a_directory_of_its_own_user_closed_to_others() {
        use std::os::unix::fs::PermissionsExt;
        let uid = unistd::geteuid().as_raw();
        let dir = tempdir();
        let private = dir.path().join("private");
        std::fs::create_dir(&private).unwrap();
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
        check_private_dir(&private, uid).expect("private");
        let reason = |path: &Path, uid: u32| match check_private_dir(path, uid) {
            Err(TransportError::UnsafeSocketDir { reason, .. }) => reason,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            reason(&private, uid + 1),
            format!("it belongs to uid {uid}")
        );
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert_eq!(reason(&private, uid), "its mode is 1777, open to others");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&private, &link).unwrap();
        assert_eq!(reason(&link, uid), "it is a symbolic link");
        let file = dir.path().join("file");
        std::fs::write(&file, b"").unwrap();
        assert_eq!(reason(&file, uid), "it is not a directory");
    }

    #[test]
    fn peer_policy_rules() {
        assert!(PeerPolicy::SameUser.allows(1000, 1000));
        assert!(!PeerPolicy::SameUser.allows(1000, 1001));
        assert!(!PeerPolicy::SameUser.allows(1000, 0));
        assert!(PeerPolicy::SameUser.allows(0, 1000));
        assert!(PeerPolicy::SameUser.allows(0, 0));
        assert!(PeerPolicy::OnlyUid(0).allows(0, 0));
        assert!(!PeerPolicy::OnlyUid(0).allows(0, 65534));
        assert!(provider_accepts_manager(1000, 1000));
        assert!(provider_accepts_manager(1000, 0));
        assert!(!provider_accepts_manager(1000, 1001));
        assert!(!provider_accepts_manager(0, 1000));
    }

    #[test]
    fn listener_socket_is_0600_and_removed_on_drop() {
        let dir = tempdir();
        let path = dir.path().join("m.sock");
        let listener = ControlListener::bind(&path).expect("bind");
        let meta = std::fs::symlink_metadata(&path).expect("socket file");
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(listener.path(), path);
        drop(listener);
        assert!(!path.exists(), "socket file left behind");
    }

    #[test]
    fn stale_socket_is_replaced_live_one_and_non_socket_are_refused() {
        let dir = tempdir();
        let path = dir.path().join("m.sock");
        // A stale socket: bound, then its owner gone (std's listener does not unlink).
        drop(std::os::unix::net::UnixListener::bind(&path).expect("std bind"));
        assert!(path.exists());
        let live = ControlListener::bind(&path).expect("stale socket replaced");
        // A live listener is not replaced.
        match ControlListener::bind(&path) {
            Err(TransportError::InUse { path: p }) => assert_eq!(p, path),
            other => panic!("expected InUse, got {other:?}"),
        }
        drop(live);

        let file = dir.path().join("regular");
        std::fs::write(&file, b"keep me").expect("write");
        match ControlListener::bind(&file) {
            Err(TransportError::NotASocket { .. }) => {}
            other => panic!("expected NotASocket, got {other:?}"),
        }
        assert_eq!(std::fs::read(&file).expect("still there"), b"keep me");

        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).expect("symlink");
        assert!(matches!(
            ControlListener::bind(&link),
            Err(TransportError::NotASocket { .. })
        ));
    }

    #[test]
    fn connect_without_manager_fails_fast() {
        let dir = tempdir();
        let start = Instant::now();
        match ControlConn::connect(&dir.path().join("none.sock"), TIMEOUT) {
            Err(TransportError::NoManager { source, .. }) => assert_eq!(source, Errno::ENOENT),
            other => panic!("expected NoManager, got {other:?}"),
        }
        let path = dir.path().join("stale.sock");
        drop(std::os::unix::net::UnixListener::bind(&path).expect("std bind"));
        match ControlConn::connect(&path, TIMEOUT) {
            Err(TransportError::NoManager { source, .. }) => {
                assert_eq!(source, Errno::ECONNREFUSED)
            }
            other => panic!("expected NoManager, got {other:?}"),
        }
        assert!(start.elapsed() < Duration::from_millis(500));
    }

    #[test]
    fn same_uid_peer_is_accepted_with_its_credentials() {
        let dir = tempdir();
        let (_l, manager, provider) = connected(dir.path());
        let me = unistd::getpid().as_raw();
        let uid = unistd::geteuid().as_raw();
        assert_eq!((manager.peer_pid(), manager.peer_uid()), (me, uid));
        assert_eq!((provider.peer_pid(), provider.peer_uid()), (me, uid));
        assert_eq!(manager.peer().gid, unistd::getegid().as_raw());
    }

    #[test]
    fn memfd_and_fifo_travel_over_scm_rights() {
        let dir = tempdir();
        let (_l, mut manager, mut provider) = connected(dir.path());

        provider
            .send_msg(
                &Message::Register {
                    pid: 42,
                    name: "app".into(),
                    known_categories: Vec::new(),
                    accepts_ticks_per_second: false,
                    waits_for_session: false,
                },
                &[],
            )
            .expect("send Register");
        let (msg, fds) = manager.recv_msg().expect("recv Register");
        assert_eq!(
            msg,
            Message::Register {
                pid: 42,
                name: "app".into(),
                known_categories: Vec::new(),
                accepts_ticks_per_second: false,
                waits_for_session: false,
            }
        );
        assert!(fds.is_empty());

        let memfd = memfd_create("fxtrace-test", MFdFlags::MFD_CLOEXEC).expect("memfd");
        let payload = b"trace buffer bytes \x00\x01\x02";
        nix::unistd::write(&memfd, payload).expect("write memfd");
        let (fifo_manager, fifo_provider) = fifo_pair().expect("fifo pair");
        let init = Message::Initialize {
            buffering_mode: BufferingMode::Streaming,
            categories: vec!["gfx".into(), "kernel:*".into()],
            provider_id: 3,
            ticks_per_second: None,
        };
        manager
            .send_msg(&init, &[memfd.as_fd(), fifo_provider.as_fd()])
            .expect("send Initialize");
        drop(fifo_provider);
        drop(memfd);

        let (msg, fds) = provider.recv_msg().expect("recv Initialize");
        assert_eq!(msg, init);
        assert_eq!(fds.len(), 2);
        let mut got = vec![0u8; payload.len()];
        assert_eq!(pread(&fds[0], &mut got, 0).expect("pread"), payload.len());
        assert_eq!(&got, payload);
        // The received descriptors are close-on-exec.
        let flags = nix::fcntl::fcntl(&fds[0], nix::fcntl::FcntlArg::F_GETFD).expect("F_GETFD");
        assert_ne!(flags & libc::FD_CLOEXEC, 0);
        // The FIFO end works: provider → manager and back.
        send_packet(fds[1].as_fd(), &ProviderPacket::STARTED.to_packet()).expect("send STARTED");
        let p = recv_packet(fifo_manager.as_fd()).expect("recv STARTED");
        assert_eq!(ProviderPacket::parse(&p), Ok(ProviderPacket::STARTED));

        // A message after the descriptors arrives on its own.
        let start = Message::Start {
            disposition: BufferDisposition::Retain,
        };
        manager.send_msg(&start, &[]).expect("send Start");
        let (msg, fds) = provider.recv_msg().expect("recv Start");
        assert_eq!((msg, fds.len()), (start, 0));
    }

    #[test]
    fn wrong_fd_counts_are_rejected() {
        let dir = tempdir();
        let (_l, mut manager, mut provider) = connected(dir.path());
        let memfd = memfd_create("x", MFdFlags::MFD_CLOEXEC).expect("memfd");
        assert!(matches!(
            manager.send_msg(&Message::Stop, &[memfd.as_fd()]),
            Err(TransportError::FdCountMismatch {
                expected: 0,
                got: 1,
                ..
            })
        ));
        let init = Message::Initialize {
            buffering_mode: BufferingMode::Oneshot,
            categories: vec![],
            provider_id: 1,
            ticks_per_second: None,
        };
        assert!(matches!(
            manager.send_msg(&init, &[memfd.as_fd()]),
            Err(TransportError::FdCountMismatch {
                expected: 2,
                got: 1,
                ..
            })
        ));

        // A hostile peer attaching a descriptor to Stop: received, closed, reported.
        let frame = Message::Stop.encode().expect("encode");
        let raw = [memfd.as_raw_fd()];
        socket::sendmsg::<UnixAddr>(
            manager.as_fd().as_raw_fd(),
            &[IoSlice::new(&frame)],
            &[ControlMessage::ScmRights(&raw)],
            MsgFlags::empty(),
            None,
        )
        .expect("raw sendmsg");
        assert!(matches!(
            provider.recv_msg(),
            Err(TransportError::FdCountMismatch {
                message: "Stop",
                expected: 0,
                got: 1
            })
        ));
    }

    #[test]
    fn too_many_fds_are_closed_and_reported() {
        let dir = tempdir();
        let (_l, manager, mut provider) = connected(dir.path());
        let memfd = memfd_create("x", MFdFlags::MFD_CLOEXEC).expect("memfd");
        let raw = vec![memfd.as_raw_fd(); MAX_FDS_PER_MESSAGE + 4];
        let frame = Message::Stop.encode().expect("encode");
        socket::sendmsg::<UnixAddr>(
            manager.as_fd().as_raw_fd(),
            &[IoSlice::new(&frame)],
            &[ControlMessage::ScmRights(&raw)],
            MsgFlags::empty(),
            None,
        )
        .expect("raw sendmsg");
        assert!(matches!(
            provider.recv_msg(),
            Err(TransportError::TooManyFds)
        ));
    }

    #[test]
    fn garbage_and_closed_peers_give_typed_errors() {
        let dir = tempdir();
        let path = dir.path().join("m.sock");
        let listener = ControlListener::bind(&path).expect("bind");

        // Unknown version.
        let mut raw = UnixStream::connect(&path).expect("std connect");
        let mut conn = listener.accept().expect("accept");
        raw.write_all(&[4, 0, 0, 0, 9, 0, 1, 0]).expect("write");
        assert!(matches!(
            conn.recv_msg(),
            Err(TransportError::Control(ControlError::UnsupportedVersion {
                version: 9
            }))
        ));

        // Absurd length prefix: rejected before any allocation.
        let mut raw = UnixStream::connect(&path).expect("std connect");
        let mut conn = listener.accept().expect("accept");
        raw.write_all(&u32::MAX.to_le_bytes()).expect("write");
        assert!(matches!(
            conn.recv_msg(),
            Err(TransportError::Control(ControlError::BadLength { .. }))
        ));

        // Closed in the middle of a frame.
        let mut raw = UnixStream::connect(&path).expect("std connect");
        let mut conn = listener.accept().expect("accept");
        raw.write_all(&[12, 0, 0, 0, 1, 0]).expect("write");
        drop(raw);
        assert!(matches!(
            conn.recv_msg(),
            Err(TransportError::ClosedMidFrame {
                got: 2,
                expected: 12
            })
        ));

        // Closed between frames; sending to a closed peer.
        let raw = UnixStream::connect(&path).expect("std connect");
        let mut conn = listener.accept().expect("accept");
        drop(raw);
        assert!(matches!(conn.recv_msg(), Err(TransportError::PeerClosed)));
        assert!(matches!(
            conn.send_msg(&Message::Stop, &[]),
            Err(TransportError::PeerClosed)
        ));
    }

    #[test]
    fn recv_timeout_is_reported() {
        let dir = tempdir();
        let (_l, mut manager, _provider) = connected(dir.path());
        manager
            .set_recv_timeout(Some(Duration::from_millis(20)))
            .expect("SO_RCVTIMEO");
        let start = Instant::now();
        assert!(matches!(
            manager.recv_msg(),
            Err(TransportError::TimedOut { .. })
        ));
        assert!(start.elapsed() >= Duration::from_millis(15));
    }

    #[test]
    fn stalled_frame_is_not_a_clean_timeout() {
        let dir = tempdir();
        let path = dir.path().join("m.sock");
        let listener = ControlListener::bind(&path).expect("bind");
        let mut raw = UnixStream::connect(&path).expect("std connect");
        let mut conn = listener.accept().expect("accept");
        conn.set_recv_timeout(Some(Duration::from_millis(20)))
            .expect("SO_RCVTIMEO");
        // A clean timeout leaves the connection usable.
        assert!(matches!(
            conn.recv_msg(),
            Err(TransportError::TimedOut { .. })
        ));
        let frame = Message::Terminate.encode().expect("encode");
        raw.write_all(&frame).expect("write");
        assert_eq!(conn.recv_msg().expect("recv").0, Message::Terminate);
        // Half a prefix, then silence.
        raw.write_all(&frame[..2]).expect("write");
        assert!(matches!(
            conn.recv_msg(),
            Err(TransportError::StalledMidFrame {
                got: 2,
                expected: 4
            })
        ));
    }

    #[test]
    fn nonblocking_listener_does_not_block() {
        let dir = tempdir();
        let listener = ControlListener::bind(&dir.path().join("m.sock")).expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        assert!(matches!(
            listener.accept(),
            Err(TransportError::Sys {
                source: Errno::EAGAIN,
                ..
            })
        ));
    }

    #[test]
    fn fifo_round_trip_wrong_length_and_peer_closed() {
        let (manager, provider) = fifo_pair().expect("fifo pair");
        assert_eq!(try_recv_packet(manager.as_fd()).expect("empty"), None);

        let save = ProviderPacket::SaveBuffer {
            wrapped_count: 4,
            durable_data_end: 4096,
        };
        send_packet(provider.as_fd(), &save.to_packet()).expect("send");
        let got = try_recv_packet(manager.as_fd())
            .expect("recv")
            .expect("one packet");
        assert_eq!(ProviderPacket::parse(&got), Ok(save));

        let saved = ManagerPacket::BufferSaved {
            wrapped_count: 4,
            durable_data_end: 4096,
        };
        try_send_packet(manager.as_fd(), &saved.to_packet()).expect("send");
        let got = recv_packet(provider.as_fd()).expect("recv");
        assert_eq!(ManagerPacket::parse(&got), Ok(saved));

        // Datagrams of 8 and 24 bytes are errors, and each is consumed whole.
        socket::send(provider.as_raw_fd(), &[1u8; 8], MsgFlags::empty()).expect("send 8");
        socket::send(provider.as_raw_fd(), &[1u8; 24], MsgFlags::empty()).expect("send 24");
        send_packet(provider.as_fd(), &ProviderPacket::Stopped.to_packet()).expect("send");
        assert!(matches!(
            recv_packet(manager.as_fd()),
            Err(TransportError::WrongPacketLength { len: 8 })
        ));
        assert!(matches!(
            recv_packet(manager.as_fd()),
            Err(TransportError::WrongPacketLength { len: 24 })
        ));
        assert_eq!(
            ProviderPacket::parse(&recv_packet(manager.as_fd()).expect("recv")),
            Ok(ProviderPacket::Stopped)
        );

        // Packets queued before the close are still delivered, then PeerClosed.
        send_packet(provider.as_fd(), &ProviderPacket::Stopped.to_packet()).expect("send");
        drop(provider);
        assert!(recv_packet(manager.as_fd()).is_ok());
        assert!(matches!(
            recv_packet(manager.as_fd()),
            Err(TransportError::PeerClosed)
        ));
        assert!(matches!(
            try_recv_packet(manager.as_fd()),
            Err(TransportError::PeerClosed)
        ));
        assert!(matches!(
            send_packet(manager.as_fd(), &ProviderPacket::Stopped.to_packet()),
            Err(TransportError::PeerClosed)
        ));
    }

    #[test]
    fn full_fifo_is_reported_not_blocked_on() {
        let (manager, _provider) = fifo_pair().expect("fifo pair");
        let p = ManagerPacket::BufferSaved {
            wrapped_count: 0,
            durable_data_end: 16,
        }
        .to_packet();
        let mut sent = 0;
        loop {
            match try_send_packet(manager.as_fd(), &p) {
                Ok(()) => sent += 1,
                Err(TransportError::FifoFull) => break,
                Err(e) => panic!("unexpected {e}"),
            }
            assert!(sent < 1_000_000, "FIFO never filled");
        }
        assert!(sent > 0);
    }

    /// Forks a child that becomes uid/gid 65534 and connects to `path`. Exit codes:
    /// 0 connected (then waited for the manager to close), 2 setgid/setuid failed,
    /// 3 socket failed, 4 connect got EACCES, 5 other connect error.
    fn fork_nobody_connector(addr: &UnixAddr) -> nix::unistd::Pid {
        use nix::unistd::{fork, ForkResult};
        // SAFETY: the child only makes async-signal-safe system calls (setgid, setuid,
        // socket, connect, read, _exit) on data prepared before the fork.
        match unsafe { fork() }.expect("fork") {
            ForkResult::Child => {
                // SAFETY: plain system calls; `addr` is a valid sockaddr_un copied by fork.
                unsafe {
                    if libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
                        libc::_exit(2);
                    }
                    let s = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
                    if s < 0 {
                        libc::_exit(3);
                    }
                    use nix::sys::socket::SockaddrLike;
                    if libc::connect(s, addr.as_ptr().cast(), addr.len()) != 0 {
                        let code = if *libc::__errno_location() == libc::EACCES {
                            4
                        } else {
                            5
                        };
                        libc::_exit(code);
                    }
                    let mut b = [0u8; 1];
                    libc::read(s, b.as_mut_ptr().cast(), 1);
                    libc::_exit(0);
                }
            }
            ForkResult::Parent { child } => child,
        }
    }

    fn exit_code(child: nix::unistd::Pid) -> i32 {
        match nix::sys::wait::waitpid(child, None).expect("waitpid") {
            nix::sys::wait::WaitStatus::Exited(_, code) => code,
            other => panic!("child did not exit normally: {other:?}"),
        }
    }

    #[test]
    fn other_uid_peer_is_refused() {
        if !unistd::geteuid().is_root() {
            crate::test_support::skip(crate::test_support::Requirement::Root, "not root");
            return;
        }
        let dir = tempdir();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod tempdir");

        // 1. Default mode 0600: uid 65534 cannot even connect.
        let path = dir.path().join("private.sock");
        let _private = ControlListener::bind(&path).expect("bind");
        let child = fork_nobody_connector(&UnixAddr::new(&path).expect("addr"));
        assert_eq!(
            exit_code(child),
            4,
            "connect to a 0600 socket must fail with EACCES"
        );

        // 2. A connectable socket whose manager accepts only uid 0: SO_PEERCRED refusal.
        let path = dir.path().join("strict.sock");
        let strict = ControlListener::bind_with(
            &path,
            ListenerOptions {
                mode: 0o666,
                policy: PeerPolicy::OnlyUid(0),
            },
        )
        .expect("bind");
        let child = fork_nobody_connector(&UnixAddr::new(&path).expect("addr"));
        match strict.accept() {
            Err(TransportError::PeerRefused { uid, pid, side }) => {
                assert_eq!((uid, pid, side), (65534, child.as_raw(), "manager"));
            }
            other => panic!("expected PeerRefused, got {other:?}"),
        }
        assert_eq!(exit_code(child), 0);

        // 3. The default policy of a root manager accepts every user.
        let path = dir.path().join("open.sock");
        let open = ControlListener::bind_with(
            &path,
            ListenerOptions {
                mode: 0o666,
                policy: PeerPolicy::SameUser,
            },
        )
        .expect("bind");
        let child = fork_nobody_connector(&UnixAddr::new(&path).expect("addr"));
        let conn = open.accept().expect("root manager accepts uid 65534");
        assert_eq!(conn.peer_uid(), 65534);
        drop(conn);
        assert_eq!(exit_code(child), 0);
    }

    #[test]
    fn foreign_owned_socket_is_left_alone() {
        if !unistd::geteuid().is_root() {
            crate::test_support::skip(crate::test_support::Requirement::Root, "not root");
            return;
        }
        let dir = tempdir();
        let path = dir.path().join("m.sock");
        drop(std::os::unix::net::UnixListener::bind(&path).expect("std bind"));
        std::os::unix::fs::chown(&path, Some(65534), Some(65534)).expect("chown");
        match ControlListener::bind(&path) {
            Err(TransportError::ForeignOwner {
                owner, expected, ..
            }) => {
                assert_eq!((owner, expected), (65534, 0));
            }
            other => panic!("expected ForeignOwner, got {other:?}"),
        }
        assert!(path.exists(), "another user's socket was removed");
    }

    /// A provider does not talk to a manager of another uid (a socket planted by someone
    /// else): the child becomes uid 65534 and listens; the root parent connects.
    #[test]
    fn provider_refuses_manager_of_other_uid() {
        use nix::unistd::{fork, ForkResult};
        if !unistd::geteuid().is_root() {
            crate::test_support::skip(crate::test_support::Requirement::Root, "not root");
            return;
        }
        let dir = tempdir();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777))
            .expect("chmod tempdir");
        let path = dir.path().join("planted.sock");
        let addr = UnixAddr::new(&path).expect("addr");
        // SAFETY: the child only makes async-signal-safe system calls on data prepared
        // before the fork, then exits with _exit.
        let child = match unsafe { fork() }.expect("fork") {
            ForkResult::Child => {
                use nix::sys::socket::SockaddrLike;
                // SAFETY: plain system calls on valid arguments.
                unsafe {
                    if libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
                        libc::_exit(2);
                    }
                    let s = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
                    if s < 0
                        || libc::bind(s, addr.as_ptr().cast(), addr.len()) != 0
                        || libc::listen(s, 1) != 0
                    {
                        libc::_exit(3);
                    }
                    let c = libc::accept(s, std::ptr::null_mut(), std::ptr::null_mut());
                    if c >= 0 {
                        let mut b = [0u8; 1];
                        libc::read(c, b.as_mut_ptr().cast(), 1);
                    }
                    libc::_exit(0);
                }
            }
            ForkResult::Parent { child } => child,
        };
        let deadline = Instant::now() + TIMEOUT;
        let result = loop {
            match ControlConn::connect(&path, TIMEOUT) {
                Err(TransportError::NoManager { .. }) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(2));
                }
                r => break r,
            }
        };
        match result {
            Err(TransportError::PeerRefused { side, uid, pid }) => {
                assert_eq!((side, uid, pid), ("provider", 65534, child.as_raw()));
            }
            other => panic!("expected PeerRefused, got {other:?}"),
        }
        assert_eq!(exit_code(child), 0);
    }
}
