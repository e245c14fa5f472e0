//! The per-provider FIFO protocol (Fuchsia's `trace_provider_packet_t`, checked as
//! trace_manager's `tracee.cc` checks it).
//!
//! A packet that breaks the protocol (unknown request, wrong version, non-zero reserved data,
//! wrong size, a second SAVE_BUFFER before BUFFER_SAVED was received, an invalid save request)
//! closes that provider's FIFO and connection: it is marked lost with the reason and its
//! further data is ignored. Everyone else's trace is untouched. SAVE_BUFFER (streaming) →
//! [`crate::manager::Drain::save_buffer`] → BUFFER_SAVED.
//!
//! A second SAVE_BUFFER "before BUFFER_SAVED" is detected exactly: either two requests were
//! queued together before the manager answered the first, or the manager's previous
//! BUFFER_SAVED is still unread in the FIFO (`SIOCOUTQ`) when the new request is read — the
//! provider sent it without having received the answer.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::time::Instant;

use nix::poll::PollFlags;

use super::{Manager, ManagerEvent};
use crate::manager::session::{ProviderId, ProviderPhase};
use fxtrace::protocol::control::BufferingMode;
use fxtrace::protocol::fifo::{ManagerPacket, ProviderPacket};
use fxtrace::protocol::transport::{self, TransportError};

/// Most FIFO packets read from one provider per loop turn (fairness).
const FIFO_BATCH: usize = 64;

/// What one batch of FIFO reading found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FifoRead {
    /// Nothing more to read now.
    Drained,
    /// A full batch: more may be waiting.
    More,
    /// The provider closed its end.
    Closed,
}

impl Manager {
    pub(super) fn read_fifo(&mut self, id: ProviderId, revents: PollFlags) {
        if self.process_fifo(id, revents) == FifoRead::Closed {
            self.disconnected(id, Instant::now());
        }
    }

    /// Read and handle one batch of packets. A protocol violation drops the provider here; a
    /// close is reported to the caller.
    pub(super) fn process_fifo(&mut self, id: ProviderId, revents: PollFlags) -> FifoRead {
        let now = Instant::now();
        let mut packets = Vec::new();
        let mut closed = false;
        let mut violation = None;
        {
            let Some(t) = self.tracees.get(&id) else {
                return FifoRead::Drained;
            };
            let Some(fifo) = t.fifo.as_ref() else {
                return FifoRead::Drained;
            };
            while packets.len() < FIFO_BATCH {
                match transport::try_recv_packet(fifo.as_fd()) {
                    Ok(Some(p)) => packets.push(p),
                    Ok(None) => break,
                    Err(TransportError::PeerClosed) => {
                        closed = true;
                        break;
                    }
                    Err(e) => {
                        violation = Some(format!("FIFO protocol violation: {e}"));
                        break;
                    }
                }
            }
            if packets.is_empty()
                && violation.is_none()
                && revents.intersects(PollFlags::POLLHUP | PollFlags::POLLERR)
            {
                closed = true;
            }
        }
        let full = packets.len() == FIFO_BATCH;
        let saves = packets
            .iter()
            .filter(|p| p.request == fxtrace::protocol::fifo::SAVE_BUFFER)
            .count();
        let mut saves_seen = 0;
        for raw in packets {
            if !self.tracees.get(&id).is_some_and(|t| t.fifo.is_some()) {
                return FifoRead::Drained; // dropped while handling an earlier packet
            }
            let packet = match ProviderPacket::parse(&raw) {
                Ok(p) => p,
                Err(e) => {
                    self.lose(id, format!("FIFO protocol violation: {e}"), true, now);
                    return FifoRead::Drained;
                }
            };
            match packet {
                ProviderPacket::Started { .. } => {
                    let commands = self.session.provider_started(id, now);
                    self.run(commands, now);
                }
                ProviderPacket::Stopped => {
                    let commands = self.session.provider_stopped(id, now);
                    self.run(commands, now);
                }
                ProviderPacket::Alert { name } => {
                    let name = name.to_string_lossy();
                    self.session.alert(&name);
                    self.events.push(ManagerEvent::Alert { id, name });
                }
                ProviderPacket::SaveBuffer {
                    wrapped_count,
                    durable_data_end,
                } => {
                    saves_seen += 1;
                    if saves_seen > 1 && saves > 1 {
                        self.lose(
                            id,
                            "FIFO protocol violation: a second SAVE_BUFFER before BUFFER_SAVED \
                             (two requests queued together)"
                                .into(),
                            true,
                            now,
                        );
                        return FifoRead::Drained;
                    }
                    if self.save_buffer(id, wrapped_count, durable_data_end, now) {
                        // The provider closed its end after sending: the rest of the batch
                        // (typically STOPPED) is still valid.
                        closed = true;
                    }
                }
            }
        }
        if let Some(reason) = violation {
            self.lose(id, reason, true, now);
            FifoRead::Drained
        } else if closed {
            FifoRead::Closed
        } else if full {
            FifoRead::More
        } else {
            FifoRead::Drained
        }
    }

    /// Serve one SAVE_BUFFER. Returns true when the answer could not be sent because the
    /// provider has closed the FIFO (the caller finishes the batch, then handles the close).
    pub(super) fn save_buffer(
        &mut self,
        id: ProviderId,
        wrapped_count: u32,
        durable_data_end: u64,
        now: Instant,
    ) -> bool {
        let phase = self.session.provider(id).map(|p| p.phase);
        let Some(t) = self.tracees.get_mut(&id) else {
            return false;
        };
        // `Starting` too: a provider opens its gate before it sends STARTED, and its writers
        // can fill a small buffer and ask for a save in between; ignoring that request left
        // the provider waiting for BUFFER_SAVED forever, dropping everything.
        if t.mode != BufferingMode::Streaming
            || !matches!(
                phase,
                Some(
                    ProviderPhase::Starting
                        | ProviderPhase::Started
                        | ProviderPhase::Stopping
                        | ProviderPhase::Terminating
                )
            )
        {
            // trace_manager ignores these with a warning.
            let message = format!(
                "SAVE_BUFFER({wrapped_count}, {durable_data_end}) ignored: the provider is not \
                 streaming and started"
            );
            if t.problems.push(message.clone()) {
                self.events
                    .push(ManagerEvent::ProviderProblem { id, message });
            }
            return false;
        }
        if t.buffer_saved_sent {
            if let Some(fifo) = &t.fifo {
                if unread_output(fifo.as_fd()) > 0 {
                    self.lose(
                        id,
                        "FIFO protocol violation: a second SAVE_BUFFER before BUFFER_SAVED \
                         (the previous BUFFER_SAVED is still unread)"
                            .into(),
                        true,
                        now,
                    );
                    return false;
                }
            }
        }
        if t.ignore_data || self.archive_failed.is_some() {
            return false;
        }
        let Some(buffer) = t.buffer.as_ref() else {
            return false;
        };
        let result = t.drain.save_buffer(
            buffer,
            &mut self.archive,
            id,
            &t.name,
            wrapped_count,
            durable_data_end,
        );
        match result {
            Ok(()) => {
                let answer = ManagerPacket::BufferSaved {
                    wrapped_count,
                    durable_data_end,
                }
                .to_packet();
                let Some(fifo) = t.fifo.as_ref() else {
                    return false;
                };
                match transport::try_send_packet(fifo.as_fd(), &answer) {
                    Ok(()) => t.buffer_saved_sent = true,
                    Err(TransportError::PeerClosed) => return true,
                    Err(e) => self.lose(id, format!("cannot answer BUFFER_SAVED: {e}"), true, now),
                }
            }
            Err(e) if e.is_archive() => self.archive_failure(e.to_string(), now),
            Err(e) => self.lose(id, format!("streaming save rejected: {e}"), true, now),
        }
        false
    }
}

/// Bytes this end has sent that the peer has not read yet (`SIOCOUTQ`); 0 if unknown.
pub(super) fn unread_output(fd: BorrowedFd<'_>) -> i32 {
    let mut queued: libc::c_int = 0;
    // SAFETY: SIOCOUTQ (= TIOCOUTQ) writes one int through the pointer, which points at a live
    // local; the fd is borrowed for the call.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCOUTQ, &mut queued) };
    if r < 0 {
        0
    } else {
        queued
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    use super::super::test_support::{manager, pump, register};
    use super::super::ManagerEvent;
    use fxtrace::protocol::fifo::{FifoPacket, ProviderPacket};
    use fxtrace::protocol::transport;

    #[test]
    fn started_on_the_fifo_acknowledges_the_start() {
        let (_dir, mut m) = manager(|_| {});
        let p = register(&mut m, "fifo-ok");
        m.start(None).unwrap();
        transport::send_packet(p.fifo.as_fd(), &ProviderPacket::STARTED.to_packet()).unwrap();
        let events = pump(&mut m, |e| {
            e.iter()
                .any(|e| matches!(e, ManagerEvent::StartAcknowledged { .. }))
        });
        assert!(events.iter().any(
            |e| matches!(e, ManagerEvent::StartAcknowledged { timed_out } if timed_out.is_empty())
        ));
    }

    #[test]
    fn an_unknown_request_loses_only_that_provider() {
        let (_dir, mut m) = manager(|_| {});
        let bad = register(&mut m, "bad");
        let _good = register(&mut m, "good");
        m.start(None).unwrap();
        transport::send_packet(bad.fifo.as_fd(), &FifoPacket::new(0x77, 0, 0, 0)).unwrap();
        pump(&mut m, |e| {
            e.iter().any(|e| {
                matches!(e, ManagerEvent::ProviderLost { reason, .. }
                    if reason.contains("FIFO protocol violation"))
            })
        });
        let reports = m.reports();
        let lost: Vec<_> = reports.iter().filter(|r| r.lost.is_some()).collect();
        assert_eq!(lost.len(), 1);
        assert_eq!(lost[0].name, "bad");
    }

    #[test]
    fn save_buffer_outside_streaming_is_ignored_with_a_problem() {
        let (_dir, mut m) = manager(|_| {});
        let p = register(&mut m, "oneshot");
        m.start(None).unwrap();
        transport::send_packet(p.fifo.as_fd(), &ProviderPacket::STARTED.to_packet()).unwrap();
        let save = ProviderPacket::SaveBuffer {
            wrapped_count: 1,
            durable_data_end: 0,
        };
        transport::send_packet(p.fifo.as_fd(), &save.to_packet()).unwrap();
        pump(&mut m, |e| {
            e.iter().any(|e| {
                matches!(e, ManagerEvent::ProviderProblem { message, .. }
                    if message.contains("ignored"))
            })
        });
        assert!(m.reports()[0].lost.is_none());
    }
}
