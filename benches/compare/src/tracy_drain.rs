//! A local Tracy consumer: what the Tracy GUI or `tracy-capture` would be, minus the
//! decoding. Tracy's client (not built `ondemand`) queues every zone from the start and ships
//! it to a connected viewer from its own worker thread (LZ4-compressed frames over TCP);
//! without a viewer it keeps queueing. This drain connects to the candidate process's port,
//! sends the handshake (`"TracyPrf"` and the protocol version), checks the welcome, then reads
//! and discards everything, so the client does all of its normal work (serialising, LZ4,
//! `send`). When the candidate has reported, [`Drain::finish`] closes the connection and
//! returns the bytes received (a check that the zones were really shipped). Closing, not the
//! `ServerQueryTerminate` query: the client reads a query in whichever of its loops it is in,
//! and one read by its main loop just before the process exits leaves the client's exit
//! waiting for another query forever; a closed socket ends every loop.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::Error;

/// `tracy::ProtocolVersion` of the Tracy client in `tracy-client-sys` 0.29 (the version in
/// `Cargo.lock`; `common/TracyProtocol.hpp`). A different client answers "protocol mismatch",
/// reported as such.
const PROTOCOL_VERSION: u32 = 82;
/// `tracy::HandshakeShibboleth`.
const SHIBBOLETH: &[u8; 8] = b"TracyPrf";
/// `tracy::HandshakeWelcome`.
const HANDSHAKE_WELCOME: u8 = 1;
/// `tracy::HandshakeProtocolMismatch`.
const HANDSHAKE_PROTOCOL_MISMATCH: u8 = 2;
/// How long the candidate process has to start listening.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A free TCP port on the loopback interface, for `TRACY_PORT` (the client listens on
/// localhost only: the crate is built with `only-localhost`).
fn free_port() -> Result<u16, Error> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| Error::Os("bind a loopback port for Tracy", e))?;
    let port = listener
        .local_addr()
        .map_err(|e| Error::Os("read the loopback port", e))?
        .port();
    Ok(port)
}

/// Give the Tracy client `command` will start a free loopback port (`TRACY_PORT`): the port
/// to attach a [`Drain`] to.
pub(crate) fn assign_port(command: &mut std::process::Command) -> Result<u16, Error> {
    let port = free_port()?;
    command.env("TRACY_PORT", port.to_string());
    Ok(port)
}

/// A drain attached (or attaching) to one Tracy client.
#[derive(Debug)]
pub(crate) struct Drain {
    /// The connection's write half, sent once the handshake succeeded (the channel closes
    /// without it when the drain failed).
    control: Receiver<TcpStream>,
    thread: JoinHandle<Result<u64, Error>>,
}

impl Drain {
    /// Connect to the client on `port` (retrying until it listens) and drain it on a thread.
    pub(crate) fn attach(port: u16) -> Self {
        let (tx, control) = sync_channel(1);
        let thread = std::thread::spawn(move || drain(port, tx));
        Self { control, thread }
    }

    /// Close the connection (the client stops shipping and lets its process exit) and
    /// return the bytes received. Call after the candidate reported.
    pub(crate) fn finish(self) -> Result<u64, Error> {
        let closed = match self.control.recv() {
            Ok(stream) => stream
                .shutdown(Shutdown::Both)
                .map_err(|e| Error::Os("close the connection to the Tracy client", e)),
            // The drain thread ended without connecting: its result says why.
            Err(_) => Ok(()),
        };
        let received = self.thread.join().map_err(|_| Error::HelperPanicked)??;
        closed.map(|()| received)
    }
}

/// Connect to the Tracy client on `port` within [`CONNECT_TIMEOUT`].
fn connect(port: u16) -> Result<TcpStream, Error> {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    loop {
        match TcpStream::connect(address) {
            Ok(stream) => return Ok(stream),
            Err(e) if Instant::now() >= deadline => {
                return Err(Error::Tracy(format!(
                    "no Tracy client listening on 127.0.0.1:{port} after {CONNECT_TIMEOUT:?}: {e}"
                )))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

fn drain(port: u16, control: SyncSender<TcpStream>) -> Result<u64, Error> {
    let mut stream = connect(port)?;
    let io = |what: &'static str| move |e| Error::Os(what, e);
    let mut hello = SHIBBOLETH.to_vec();
    hello.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    stream
        .write_all(&hello)
        .map_err(io("send the Tracy handshake"))?;
    let mut status = [0u8];
    stream
        .read_exact(&mut status)
        .map_err(io("read the Tracy handshake status"))?;
    match status[0] {
        HANDSHAKE_WELCOME => {}
        HANDSHAKE_PROTOCOL_MISMATCH => {
            return Err(Error::Tracy(format!(
                "the Tracy client speaks another protocol than version {PROTOCOL_VERSION}: \
                 update PROTOCOL_VERSION in tracy_drain.rs to the tracy-client-sys in Cargo.lock"
            )))
        }
        other => {
            return Err(Error::Tracy(format!(
                "the Tracy client refused the drain (status {other})"
            )))
        }
    }
    // The terminate query goes out on a clone while this thread keeps reading.
    let clone = stream
        .try_clone()
        .map_err(io("clone the Tracy connection"))?;
    // The receiver is gone only if `Drain` was dropped without `finish`: keep draining.
    let _ = control.send(clone);
    let mut received = 0u64;
    let mut buffer = vec![0u8; 1 << 16];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => received += n as u64,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // Closed by `finish` (or by the client's exit) while reading.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset
                        | std::io::ErrorKind::ConnectionAborted
                        | std::io::ErrorKind::NotConnected
                ) =>
            {
                break
            }
            Err(e) => return Err(Error::Os("read from the Tracy client", e)),
        }
    }
    Ok(received)
}
