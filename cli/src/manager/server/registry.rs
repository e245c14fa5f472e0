//! The provider registry and the connections that have not said who they are yet: accepting,
//! the first message (Register or a status request), the registration limits, the per-provider
//! record ([`Tracee`]) and its control socket.

use std::os::fd::{AsFd, OwnedFd};
use std::time::Instant;

use nix::errno::Errno;
use nix::poll::PollFlags;

use super::fifo::FifoRead;
use super::{Manager, ManagerEvent};
use super::{MAX_PENDING, MAX_REGISTRATION_BODY};
use crate::manager::conn::{
    eviction_victim, ConnError, FramedConn, ReadOutcome, MAX_ACCEPTS_PER_TURN,
};
use crate::manager::drain::Drain;
use crate::manager::report::{ProviderReport, RefusedPeer};
use crate::manager::session::{ProviderId, ProviderPhase};
use crate::manager::wire::Frame;
use fxtrace::buffer::header;
use fxtrace::buffer::TraceBuffer;
use fxtrace::protocol::control::{BufferingMode, FrameMessage, Message};
use fxtrace::protocol::transport::{self, TransportError};

/// A connection that has not sent its first message yet.
#[derive(Debug)]
pub(super) struct Pending {
    pub(super) key: u64,
    pub(super) conn: FramedConn,
    pub(super) deadline: Instant,
}

/// Everything the manager holds for one provider.
#[derive(Debug)]
pub(super) struct Tracee {
    pub(super) id: ProviderId,
    pub(super) pid: u32,
    /// The peer's uid (`SO_PEERCRED`).
    pub(super) uid: u32,
    /// A process of the traced command (may use the reserved slots).
    pub(super) traced: bool,
    pub(super) name: String,
    pub(super) conn: Option<FramedConn>,
    pub(super) fifo: Option<OwnedFd>,
    /// The manager's mapping of the provider's buffer; released once the provider is gone and
    /// its data collected.
    pub(super) buffer: Option<TraceBuffer>,
    pub(super) drain: Drain,
    pub(super) mode: BufferingMode,
    pub(super) lost: Option<String>,
    /// After a protocol violation: no more data from this provider reaches the archive.
    pub(super) ignore_data: bool,
    /// A BUFFER_SAVED was sent (for the "second SAVE_BUFFER" check).
    pub(super) buffer_saved_sent: bool,
    pub(super) problems: crate::manager::report::Problems,
}

impl Tracee {
    /// Close the FIFO, then the control connection (a peer that sees the connection closed
    /// finds the FIFO closed too).
    pub(super) fn close(&mut self) {
        self.fifo = None;
        self.conn = None;
    }

    /// `message` about this provider, as the session's problem list says it.
    pub(super) fn problem_line(&self, message: &str) -> String {
        format!("provider {}: {message}", self.id)
    }

    pub(super) fn report(&self) -> ProviderReport {
        let stats = self.drain.stats();
        let mut problems: Vec<String> = self.problems.lines().collect();
        problems.extend(stats.problems.lines());
        if stats.forged_metadata > 0 {
            problems.push(format!(
                "protocol violation: {} provider metadata records (provider info, section or \
                 event) in its buffer were dropped; only the manager writes them",
                stats.forged_metadata
            ));
        }
        if stats.oversized_records > 0 {
            problems.push(format!(
                "{} large records over {} words in its buffer were dropped: fxtrace never \
                 writes one, and Perfetto would misread every record after them",
                stats.oversized_records,
                crate::manager::archive::MAX_READABLE_LARGE_WORDS
            ));
        }
        ProviderReport {
            id: self.id,
            pid: self.pid,
            process: self.id,
            name: self.name.clone(),
            mode: self.mode,
            records: stats.records,
            durable_bytes: stats.durable_bytes,
            rolling_bytes: stats.rolling_bytes,
            records_dropped: stats.records_dropped,
            records_dropped_before_start: stats.records_dropped_before_start,
            wrapped_count: stats.wrapped_count,
            durable_buffer_used_percent: match stats.durable_buffer_size {
                0 => 0,
                size => (stats.durable_data_end.saturating_mul(100) / size) as u32,
            },
            fill_percent: stats.fill_percent,
            saves: stats.saves,
            copy_time: stats.copy_time,
            lost: self.lost.clone(),
            problems,
        }
    }
}

impl Manager {
    /// Accept what the listener holds (at most [`MAX_ACCEPTS_PER_TURN`]; the rest next turn),
    /// and read what each new connection already sent: a provider sends Register right behind
    /// its connect, so most register in the turn that accepts them instead of a poll later (a
    /// round trip on every traced process's start), and leave no room taken among the
    /// pending connections.
    pub(super) fn accept_all(&mut self) {
        for _ in 0..MAX_ACCEPTS_PER_TURN {
            match self.accept_one() {
                Accepted::Pending(key) => self.read_pending(key),
                Accepted::Refused => {}
                Accepted::Nothing => return,
            }
        }
    }

    fn accept_one(&mut self) -> Accepted {
        let Some(listener) = &self.listener else {
            return Accepted::Nothing;
        };
        match listener.accept() {
            Ok(conn) => {
                let peer_pid = conn.peer_pid();
                match FramedConn::new(conn, MAX_REGISTRATION_BODY) {
                    Ok(conn) => {
                        if self.pending.len() >= MAX_PENDING {
                            let oldest = eviction_victim(
                                &self.pending,
                                |p| p.conn.conn().peer_uid(),
                                |p| p.deadline,
                            );
                            let oldest = self.pending.swap_remove(oldest);
                            self.events.push(ManagerEvent::Refused {
                                pid: Some(oldest.conn.conn().peer_pid()),
                                reason: format!(
                                    "a connection was closed unregistered: more than \
                                     {MAX_PENDING} connections were waiting to register"
                                ),
                            });
                        }
                        self.next_pending += 1;
                        self.pending.push(Pending {
                            key: self.next_pending,
                            conn,
                            deadline: Instant::now() + self.config.registration_timeout,
                        });
                        Accepted::Pending(self.next_pending)
                    }
                    Err(e) => {
                        self.events.push(ManagerEvent::Refused {
                            pid: Some(peer_pid),
                            reason: format!("setting up the connection failed: {e}"),
                        });
                        Accepted::Refused
                    }
                }
            }
            Err(TransportError::Sys {
                source: Errno::EAGAIN,
                ..
            }) => Accepted::Nothing,
            Err(TransportError::PeerRefused { pid, uid, .. }) => {
                self.refused.push(RefusedPeer { pid, uid });
                self.events.push(ManagerEvent::Refused {
                    pid: Some(pid),
                    reason: format!("peer pid {pid} runs as uid {uid}, not as this manager's user"),
                });
                Accepted::Refused
            }
            Err(TransportError::Sys {
                source: Errno::ECONNABORTED | Errno::EINTR,
                ..
            }) => Accepted::Refused,
            Err(e) => {
                // EMFILE and the like: try again on the next turn.
                self.events.push(ManagerEvent::Refused {
                    pid: None,
                    reason: format!("accept failed: {e}"),
                });
                Accepted::Nothing
            }
        }
    }

    /// Whether a provider of peer `pid`/`uid` fits in the table: per-process and per-uid
    /// bounds, and the reserve kept for the traced command. When the table is full, a provider
    /// that never completed the handshake (never answered Start) is evicted first.
    fn admit(&mut self, pid: i32, uid: u32, traced: bool) -> Result<(), String> {
        let pid = u32::try_from(pid).unwrap_or(u32::MAX);
        fn live(m: &Manager) -> impl Iterator<Item = &Tracee> {
            m.tracees.values().filter(|t| t.conn.is_some())
        }
        let of_pid = live(self).filter(|t| t.pid == pid).count();
        if of_pid >= self.config.max_per_pid {
            return Err(format!(
                "process {pid} already has {of_pid} providers (at most {} per process)",
                self.config.max_per_pid
            ));
        }
        let of_uid = live(self).filter(|t| t.uid == uid && !t.traced).count();
        if !traced && of_uid >= self.config.max_per_uid {
            return Err(format!(
                "uid {uid} already has {of_uid} providers (at most {} per user outside the \
                 traced command)",
                self.config.max_per_uid
            ));
        }
        for _ in 0..2 {
            let total = live(self).count();
            let untraced = live(self).filter(|t| !t.traced).count();
            let open_limit = self
                .config
                .max_providers
                .saturating_sub(self.config.reserved_for_traced);
            let full = total >= self.config.max_providers || (!traced && untraced >= open_limit);
            if !full {
                return Ok(());
            }
            // Evict one that never answered Start (only an untraced one for an untraced peer,
            // whose slot is what it needs).
            let victim = live(self)
                .filter(|t| traced || !t.traced)
                .find(|t| {
                    self.session.provider(t.id).map(|p| p.phase) == Some(ProviderPhase::Starting)
                })
                .map(|t| t.id);
            let Some(victim) = victim else {
                break;
            };
            self.lose(
                victim,
                "evicted: the provider table was full and it never completed the handshake \
                 (no STARTED)"
                    .into(),
                true,
                Instant::now(),
            );
        }
        Err(if traced {
            format!("{} providers already connected", self.config.max_providers)
        } else {
            format!(
                "{} providers already connected outside the traced command ({} slots are \
                 kept for it)",
                self.config
                    .max_providers
                    .saturating_sub(self.config.reserved_for_traced),
                self.config.reserved_for_traced
            )
        })
    }

    pub(super) fn expire_pending(&mut self, now: Instant) {
        let before = self.pending.len();
        self.pending.retain(|p| p.deadline > now);
        for _ in self.pending.len()..before {
            self.events.push(ManagerEvent::Refused {
                pid: None,
                reason: "a connection sent nothing within the registration timeout".into(),
            });
        }
    }

    pub(super) fn read_pending(&mut self, key: u64) {
        let Some(index) = self.pending.iter().position(|p| p.key == key) else {
            return;
        };
        let pid = self.pending[index].conn.conn().peer_pid();
        let messages = match self.pending[index].conn.read_available() {
            Ok(ReadOutcome::Messages(m)) if m.is_empty() => return,
            Ok(ReadOutcome::Messages(m)) | Ok(ReadOutcome::Closed(m)) => m,
            Err(e) => {
                self.pending.swap_remove(index);
                let reason = match e {
                    ConnError::Oversized { len, max } => format!(
                        "sent an oversized registration ({len} bytes; at most {max} bytes before \
                         registration)"
                    ),
                    e => format!("bad first message: {e}"),
                };
                self.events.push(ManagerEvent::Refused {
                    pid: Some(pid),
                    reason,
                });
                return;
            }
        };
        let mut pending = self.pending.swap_remove(index);
        match messages.into_iter().next() {
            Some(Frame::Provider(Message::Register {
                pid: claimed,
                name,
                known_categories,
                accepts_ticks_per_second,
                ..
            })) => {
                let registration = Registration {
                    claimed_pid: claimed,
                    // Printed on terminals and written in the archive.
                    name: crate::manager::report::printable(&name).into_owned(),
                    known_categories,
                    accepts_ticks_per_second,
                };
                let _ = self.register(pending.conn, registration);
            }
            Some(Frame::StatusRequest { figures }) => {
                let reply = self.legacy_status_reply(figures);
                // The client may be gone already; nothing to do about it.
                let _ = pending.conn.send(&reply, &[]);
            }
            // A status client: `fxtrace status` asks every socket as it asks the service.
            Some(Frame::Controller { body, fds: 0 }) => {
                if let Ok(reply) = self.controller_reply(&body).to_fitting_message() {
                    let _ = pending.conn.send(&reply, &[]);
                }
            }
            Some(other) => self.events.push(ManagerEvent::Refused {
                pid: Some(pid),
                reason: format!("unexpected first message {}", other.name()),
            }),
            None => {} // closed before saying anything
        }
    }

    /// Register a provider; its id, or `None` when it was refused (the reason is an event).
    pub(super) fn register(
        &mut self,
        mut conn: FramedConn,
        registration: Registration,
    ) -> Option<ProviderId> {
        let Registration {
            claimed_pid,
            name,
            known_categories,
            accepts_ticks_per_second,
        } = registration;
        let peer_pid = conn.conn().peer_pid();
        let peer_uid = conn.conn().peer_uid();
        let traced = self
            .config
            .traced_root
            .is_some_and(|root| is_descendant(peer_pid, root));
        if let Err(why) = self.admit(peer_pid, peer_uid, traced) {
            self.events.push(ManagerEvent::Refused {
                pid: Some(peer_pid),
                reason: format!("provider {name:?} refused: {why}"),
            });
            return None;
        }
        // SO_PEERCRED is authoritative (translated into this pid namespace).
        let pid = u32::try_from(peer_pid).unwrap_or(claimed_pid);
        let setup = TraceBuffer::create(self.config.session.buffer_size_bytes)
            .map_err(|e| e.to_string())
            .and_then(|buffer| {
                transport::fifo_pair()
                    .map(|fifo| (buffer, fifo))
                    .map_err(|e| e.to_string())
            });
        let (buffer, (manager_end, provider_end)) = match setup {
            Ok(v) => v,
            Err(e) => {
                self.events.push(ManagerEvent::Refused {
                    pid: Some(peer_pid),
                    reason: format!("provider {name:?}: cannot create its buffer: {e}"),
                });
                return None;
            }
        };
        // A buffer made by `create` always keeps its descriptor.
        let memfd = match buffer.fd() {
            Ok(fd) => fd,
            Err(e) => {
                self.events.push(ManagerEvent::Refused {
                    pid: Some(peer_pid),
                    reason: format!("provider {name:?}: its buffer has no descriptor: {e}"),
                });
                return None;
            }
        };
        // Read before Initialize is sent: the process waits for it, so still runs the image
        // that registered.
        let image = fxtrace::capture::procfs::process_image(pid);
        let now = Instant::now();
        let (id, commands) = self.session.register_provider(pid, &name, known_categories);
        let mode = self.config.session.buffering_mode;
        let init = Message::Initialize {
            buffering_mode: mode,
            categories: self.config.session.categories.clone(),
            provider_id: id,
            // The TSC rate is the machine's: a provider that takes ours measures nothing.
            ticks_per_second: accepts_ticks_per_second
                .then(|| fxtrace::clock::info().ticks_per_second),
        };
        let sent = conn.send(&init, &[memfd, provider_end.as_fd()]);
        drop(provider_end);
        let engine_mode = header::BufferingMode::from_raw(mode.to_engine())
            .unwrap_or(header::BufferingMode::Oneshot);
        let mut problems = crate::manager::report::Problems::default();
        if claimed_pid != pid {
            problems.push(format!(
                "registered as pid {claimed_pid}, but the socket peer is pid {pid}"
            ));
        }
        self.tracees.insert(
            id,
            Tracee {
                id,
                pid,
                uid: peer_uid,
                traced,
                name: name.clone(),
                conn: Some(conn),
                fifo: Some(manager_end),
                buffer: Some(buffer),
                drain: Drain::new(engine_mode),
                mode,
                lost: None,
                ignore_data: false,
                buffer_saved_sent: false,
                problems,
            },
        );
        self.events.push(ManagerEvent::ProviderRegistered {
            id,
            pid,
            name,
            image,
        });
        if let Err(e) = sent {
            self.lose(id, format!("sending Initialize failed: {e}"), true, now);
            return None;
        }
        self.run(commands, now);
        Some(id)
    }

    pub(super) fn read_control(&mut self, id: ProviderId) {
        let Some(t) = self.tracees.get_mut(&id) else {
            return;
        };
        let Some(conn) = t.conn.as_mut() else {
            return;
        };
        let now = Instant::now();
        match conn.read_available() {
            Ok(ReadOutcome::Messages(m)) if m.is_empty() => {}
            Ok(ReadOutcome::Messages(m)) => {
                let what = m[0].name();
                self.lose(
                    id,
                    format!("protocol violation: unexpected {what} message on the control socket"),
                    true,
                    now,
                );
            }
            Ok(ReadOutcome::Closed(m)) if m.is_empty() => self.disconnected(id, now),
            Ok(ReadOutcome::Closed(m)) => {
                let what = m[0].name();
                self.lose(
                    id,
                    format!("protocol violation: unexpected {what} message on the control socket"),
                    true,
                    now,
                );
            }
            Err(e) => self.lose(id, format!("protocol violation: {e}"), true, now),
        }
    }

    /// The provider's connection (control socket or FIFO) closed.
    pub(super) fn disconnected(&mut self, id: ProviderId, now: Instant) {
        // What the provider sent before closing still counts (a last SAVE_BUFFER, STOPPED):
        // the control socket's close may be seen before the FIFO's packets are read.
        while self
            .tracees
            .get(&id)
            .is_some_and(|t| t.fifo.is_some() && t.lost.is_none())
        {
            if self.process_fifo(id, PollFlags::empty()) != FifoRead::More {
                break;
            }
        }
        let Some(t) = self.tracees.get_mut(&id) else {
            return;
        };
        if t.lost.is_some() || (t.conn.is_none() && t.fifo.is_none()) {
            t.close();
            return;
        }
        let phase = self.session.provider(id).map(|p| p.phase);
        match phase {
            Some(ProviderPhase::Starting | ProviderPhase::Started | ProviderPhase::Stopping) => {
                self.lose(
                    id,
                    "connection closed without STOPPED (the process exited without stopping \
                     its provider, crashed or was killed); buffer salvaged from the manager's \
                     mapping"
                        .into(),
                    false,
                    now,
                );
            }
            _ => {
                t.close();
                self.events.push(ManagerEvent::ProviderGone { id });
                let commands = self.session.provider_terminated(id, now);
                self.run(commands, now);
                self.release_if_gone(id);
            }
        }
    }
}

/// Whether process `pid` is `root` or one of its descendants (walks the parent chain in
/// `/proc`; false when a process on it is gone).
fn is_descendant(pid: i32, root: u32) -> bool {
    let mut pid = pid;
    for _ in 0..256 {
        if pid <= 1 {
            return false;
        }
        if u32::try_from(pid) == Ok(root) {
            return true;
        }
        // Bytes: a command name need not be UTF-8.
        let Ok(stat) = fxtrace::capture::procfs::read_small(format!("/proc/{pid}/stat")) else {
            return false;
        };
        let Some(ppid) = fxtrace::capture::procfs::stat_fields(&stat)
            .nth(1)
            .and_then(|p| std::str::from_utf8(p).ok()?.parse().ok())
        else {
            return false;
        };
        pid = ppid;
    }
    false
}

/// What one accept gave.
enum Accepted {
    /// A connection, pending until it says who it is.
    Pending(u64),
    /// A connection refused (or none this time: interrupted); accept the next.
    Refused,
    /// Nothing more to accept this turn.
    Nothing,
}

/// What a Register message asks for.
#[derive(Debug, Clone)]
pub(crate) struct Registration {
    pub(crate) claimed_pid: u32,
    pub(crate) name: String,
    pub(crate) known_categories: Vec<String>,
    pub(crate) accepts_ticks_per_second: bool,
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::test_support::{manager, pump, register};
    use super::super::ManagerEvent;
    use crate::manager::wire::Frame;
    use fxtrace::protocol::control::Message;
    use fxtrace::protocol::transport::ControlConn;

    fn refused_with(events: &[ManagerEvent], text: &str) -> bool {
        events
            .iter()
            .any(|e| matches!(e, ManagerEvent::Refused { reason, .. } if reason.contains(text)))
    }

    #[test]
    fn a_provider_over_the_table_limit_is_refused() {
        let (_dir, mut m) = manager(|c| {
            c.max_providers = 1;
            c.reserved_for_traced = 0;
        });
        let _first = register(&mut m, "first");
        let mut conn = ControlConn::connect(m.socket_path(), Duration::from_secs(1)).unwrap();
        let register = Message::Register {
            pid: std::process::id(),
            name: "second".into(),
            known_categories: Vec::new(),
            accepts_ticks_per_second: true,
            waits_for_session: false,
        };
        conn.send_msg(&register, &[]).unwrap();
        let events = pump(&mut m, |e| refused_with(e, "already connected"));
        assert!(!events.iter().any(
            |e| matches!(e, ManagerEvent::ProviderRegistered { name, .. } if name == "second")
        ));
        assert_eq!(m.reports().len(), 1);
    }

    #[test]
    fn a_process_over_its_provider_bound_is_refused() {
        let (_dir, mut m) = manager(|c| c.max_per_pid = 2);
        let _a = register(&mut m, "a");
        let _b = register(&mut m, "b");
        let mut conn = ControlConn::connect(m.socket_path(), Duration::from_secs(1)).unwrap();
        let register = Message::Register {
            pid: std::process::id(),
            name: "c".into(),
            known_categories: Vec::new(),
            accepts_ticks_per_second: true,
            waits_for_session: false,
        };
        conn.send_msg(&register, &[]).unwrap();
        pump(&mut m, |e| refused_with(e, "at most 2 per process"));
        assert_eq!(m.reports().len(), 2);
    }

    #[test]
    fn descendants_are_found_through_the_parent_chain() {
        let me = std::process::id();
        let me_i32 = i32::try_from(me).unwrap();
        let parent = std::os::unix::process::parent_id();
        assert!(super::is_descendant(me_i32, me));
        assert!(super::is_descendant(me_i32, parent));
        // Not an ancestor: a child of this process.
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let child_pid = child.id();
        assert!(!super::is_descendant(me_i32, child_pid));
        assert!(super::is_descendant(i32::try_from(child_pid).unwrap(), me));
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn pending_connections_are_capped() {
        let (_dir, mut m) = manager(|_| {});
        let conns: Vec<_> = (0..super::MAX_PENDING + 1)
            .map(|_| ControlConn::connect(m.socket_path(), Duration::from_secs(1)).unwrap())
            .collect();
        pump(&mut m, |e| {
            refused_with(e, "connections were waiting to register")
        });
        assert_eq!(m.pending.len(), super::MAX_PENDING);
        drop(conns);
    }

    /// A provider sends Register right behind its connect: the turn that accepts the
    /// connection registers it (a poll later, before: a round trip on every traced
    /// process's start).
    #[test]
    fn a_register_sent_with_the_connect_is_answered_in_the_accepting_turn() {
        let (_dir, mut m) = manager(|_| {});
        let mut conn = ControlConn::connect(m.socket_path(), Duration::from_secs(1)).unwrap();
        let register = Message::Register {
            pid: std::process::id(),
            name: "prompt".into(),
            known_categories: Vec::new(),
            accepts_ticks_per_second: true,
            waits_for_session: false,
        };
        conn.send_msg(&register, &[]).unwrap();
        let out = m.poll(&[], Some(Duration::from_secs(5))).unwrap();
        assert!(
            out.events.iter().any(
                |e| matches!(e, ManagerEvent::ProviderRegistered { name, .. } if name == "prompt")
            ),
            "{:?}",
            out.events
        );
        assert!(m.pending.is_empty());
    }

    #[test]
    fn a_silent_connection_expires() {
        let (_dir, mut m) = manager(|c| c.registration_timeout = Duration::from_millis(50));
        let _conn = ControlConn::connect(m.socket_path(), Duration::from_secs(1)).unwrap();
        pump(&mut m, |e| refused_with(e, "registration timeout"));
        assert!(m.pending.is_empty());
    }

    #[test]
    fn a_status_request_lists_the_registered_providers() {
        let (_dir, mut m) = manager(|_| {});
        let _p = register(&mut m, "listed");
        let mut conn = ControlConn::connect(m.socket_path(), Duration::from_secs(1)).unwrap();
        conn.send_msg(&Frame::StatusRequest { figures: false }, &[])
            .unwrap();
        for _ in 0..10 {
            m.poll(&[], Some(Duration::from_millis(10))).unwrap();
        }
        conn.set_recv_timeout(Some(Duration::from_secs(2))).unwrap();
        let (reply, _) = conn.recv_frame().unwrap();
        match reply {
            Frame::StatusReply(reply) => {
                assert_eq!(reply.providers.len(), 1);
                assert_eq!(reply.providers[0].name, "listed");
            }
            other => panic!("expected StatusReply, got {other:?}"),
        }
    }

    /// Sends `request` as a controller would and returns the answer.
    fn ask(
        m: &mut super::super::Manager,
        request: &crate::manager::service::protocol::Request,
    ) -> crate::manager::service::protocol::Reply {
        use crate::manager::service::protocol::FromService;
        let mut conn = ControlConn::connect(m.socket_path(), Duration::from_secs(1)).unwrap();
        conn.send_msg(&request.to_message(0).unwrap(), &[]).unwrap();
        for _ in 0..10 {
            m.poll(&[], Some(Duration::from_millis(10))).unwrap();
        }
        conn.set_recv_timeout(Some(Duration::from_secs(2))).unwrap();
        let (Frame::Controller { body, .. }, _) = conn.recv_frame().unwrap() else {
            panic!("a controller frame")
        };
        match FromService::parse(&body).unwrap() {
            FromService::Reply(reply) => reply,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_controller_status_is_the_session_and_its_providers() {
        use crate::manager::service::protocol::{Reply, Request};
        let (_dir, mut m) = manager(|c| c.output_name = "out.fxt".into());
        let _p = register(&mut m, "listed");
        let Reply::Status(report) = ask(&mut m, &Request::Status {}) else {
            panic!("a status")
        };
        assert!(report.recording);
        assert_eq!(report.pid, std::process::id());
        assert_eq!(report.providers.len(), 1);
        assert_eq!(report.providers[0].name, "listed");
        assert_eq!(report.providers[0].state, "idle");
        let [session] = &report.sessions[..] else {
            panic!("one session: {report:?}")
        };
        assert_eq!(session.state, "INITIALIZED");
        assert_eq!(session.output, "out.fxt");
        assert_eq!(session.buffer_size, 64 << 10);
        assert_eq!(session.providers, 1);
        // The service's other requests are not this socket's.
        let Reply::Error { error } = ask(&mut m, &Request::Terminate { session: None }) else {
            panic!("an error")
        };
        assert!(error.contains("fxtrace daemon"), "{error}");
    }
}

#[cfg(test)]
mod section_tests {
    use std::time::Duration;

    use super::super::{Manager, ManagerConfig};
    use crate::manager::session::SessionState;

    /// An output that takes the magic number, then fails (a full disk).
    struct FullDisk(usize);

    impl std::io::Write for FullDisk {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.0 >= 8 {
                return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
            }
            self.0 += buf.len();
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_section_batch_that_cannot_be_written_ends_the_session() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = ManagerConfig::new(dir.path().join("m.sock"));
        config.session.buffer_size_bytes = 64 << 10;
        let mut m = Manager::new(config, Box::new(FullDisk(0))).unwrap();
        m.start(None).unwrap();
        let id = m.reserve_provider_id();
        let record = fxtrace_format::words_to_bytes(&[0x14]);
        assert!(m.write_section(id, "kernel", &record).is_err());
        // The next turn reports the failure instead of tracing on.
        assert!(m.poll(&[], Some(Duration::from_millis(10))).is_err());
        assert_ne!(m.session().state(), SessionState::Started);
    }
}
