//! Carrying out the session's [`Command`]s: Start/Stop/Terminate messages to providers, losing
//! a provider, and the final read-out (collection) of a provider's buffer into the archive
//! with its drop and loss markers.

use std::time::Instant;

use super::{Manager, ManagerEvent};
use crate::manager::conn::ConnError;
use crate::manager::drain::{DrainError, Restart, Writers};
use crate::manager::session::{Command, ProviderId, ProviderPhase};
use fxtrace::protocol::control::{BufferDisposition, Message};
use fxtrace::protocol::transport::TransportError;

impl Manager {
    pub(super) fn run(&mut self, commands: Vec<Command>, now: Instant) {
        let mut queue = std::collections::VecDeque::from(commands);
        while let Some(command) = queue.pop_front() {
            let more = self.execute(command, now);
            queue.extend(more);
        }
    }

    pub(super) fn execute(&mut self, command: Command, now: Instant) -> Vec<Command> {
        match command {
            Command::StartProvider { id, disposition } => {
                if let Some(t) = self.tracees.get_mut(&id) {
                    t.drain.restart(match disposition {
                        BufferDisposition::ClearEntire => Restart::ClearEntire,
                        BufferDisposition::ClearNonDurable => Restart::ClearNonDurable,
                        BufferDisposition::Retain => Restart::Retain,
                    });
                    t.buffer_saved_sent = false;
                }
                self.send(id, &Message::Start { disposition }, now)
            }
            Command::StopProvider { id } => self.send(id, &Message::Stop, now),
            Command::TerminateProvider { id } => {
                let sent = self
                    .tracees
                    .get_mut(&id)
                    .and_then(|t| t.conn.as_mut())
                    .map(|c| c.send(&Message::Terminate, &[]).is_ok())
                    .unwrap_or(false);
                if sent {
                    Vec::new()
                } else {
                    if let Some(t) = self.tracees.get_mut(&id) {
                        t.close();
                    }
                    self.session.provider_terminated(id, now)
                }
            }
            Command::CollectProvider { id } => {
                self.collect(id);
                Vec::new()
            }
            Command::AcknowledgeStart { timed_out } => {
                let ms = self.config.session.start_timeout.as_millis();
                for &id in &timed_out {
                    self.problem(id, format!("did not answer Start within {ms} ms"));
                }
                self.events
                    .push(ManagerEvent::StartAcknowledged { timed_out });
                Vec::new()
            }
            Command::AcknowledgeStop { timed_out } => {
                let ms = self.config.session.stop_timeout.as_millis();
                for &id in &timed_out {
                    if let Some(t) = self.tracees.get_mut(&id) {
                        if t.lost.is_none() {
                            t.lost = Some(format!(
                                "did not answer Stop within {ms} ms; buffer salvaged"
                            ));
                            self.events.push(ManagerEvent::ProviderLost {
                                id,
                                reason: t.lost.clone().unwrap_or_default(),
                            });
                        }
                        t.close();
                        t.buffer = None;
                    }
                }
                self.events
                    .push(ManagerEvent::StopAcknowledged { timed_out });
                Vec::new()
            }
            Command::Terminated => {
                for t in self.tracees.values_mut() {
                    t.close();
                }
                self.events.push(ManagerEvent::Terminated);
                Vec::new()
            }
            Command::StateChanged(state) => {
                self.events.push(ManagerEvent::StateChanged(state));
                Vec::new()
            }
        }
    }

    /// Send a control message; a provider that cannot take it is lost (its data salvaged).
    pub(super) fn send(&mut self, id: ProviderId, msg: &Message, now: Instant) -> Vec<Command> {
        let Some(t) = self.tracees.get_mut(&id) else {
            return Vec::new();
        };
        let Some(conn) = t.conn.as_mut() else {
            return Vec::new();
        };
        match conn.send(msg, &[]) {
            Ok(()) => Vec::new(),
            Err(ConnError::Transport(TransportError::PeerClosed)) => {
                // The provider closed first, e.g. after its exit flush: what it sent before
                // (STOPPED) decides whether it is done or lost.
                self.disconnected(id, now);
                Vec::new()
            }
            Err(e) => {
                let reason = format!("cannot send {}: {e}", msg.name());
                self.lose_commands(id, reason, false, now)
            }
        }
    }

    pub(super) fn problem(&mut self, id: ProviderId, message: String) {
        // Said only while kept: a provider repeating a violation is not logged each time.
        if self
            .tracees
            .get_mut(&id)
            .is_some_and(|t| t.problems.push(message.clone()))
        {
            self.events
                .push(ManagerEvent::ProviderProblem { id, message });
        }
    }

    /// Mark a provider lost, close its FIFO and connection, and run the session's reaction
    /// (which salvages its buffer unless `ignore_data`).
    pub(super) fn lose(&mut self, id: ProviderId, reason: String, ignore_data: bool, now: Instant) {
        let commands = self.lose_commands(id, reason, ignore_data, now);
        self.run(commands, now);
        self.release_if_gone(id);
    }

    /// Unmap the buffer of a provider that is gone: nothing can be collected from it any more
    /// (a lost provider is salvaged when it is lost; one that disconnected cleanly had
    /// stopped, or was idle).
    pub(super) fn release_if_gone(&mut self, id: ProviderId) {
        if let Some(t) = self.tracees.get_mut(&id) {
            if t.conn.is_none() && t.fifo.is_none() {
                t.buffer = None;
            }
        }
    }

    pub(super) fn lose_commands(
        &mut self,
        id: ProviderId,
        reason: String,
        ignore_data: bool,
        now: Instant,
    ) -> Vec<Command> {
        let Some(t) = self.tracees.get_mut(&id) else {
            return Vec::new();
        };
        if t.lost.is_some() {
            t.close();
            return Vec::new();
        }
        t.lost = Some(reason.clone());
        t.ignore_data |= ignore_data;
        t.close();
        self.events.push(ManagerEvent::ProviderLost {
            id,
            reason: reason.clone(),
        });
        self.session.provider_lost(id, &reason, now)
    }

    /// The final read-out of one provider into the archive, with its drop and loss markers.
    pub(super) fn collect(&mut self, id: ProviderId) {
        if self.archive_failed.is_some() {
            return;
        }
        let Some(t) = self.tracees.get_mut(&id) else {
            return;
        };
        // A provider the session gave up on (Stop timeout) is salvaged now: say so first.
        if t.lost.is_none() {
            if let Some(reason) = self
                .session
                .provider(id)
                .filter(|p| p.phase == ProviderPhase::Lost)
                .and_then(|p| p.lost_reason.as_deref())
            {
                let reason = format!(
                    "{reason} ({} ms); buffer salvaged",
                    self.config.session.stop_timeout.as_millis()
                );
                t.lost = Some(reason.clone());
                self.events.push(ManagerEvent::ProviderLost { id, reason });
            }
        }
        if t.ignore_data {
            t.problems
                .push("its data was ignored after the protocol violation".into());
            return;
        }
        let Some(buffer) = t.buffer.as_ref() else {
            return;
        };
        // Whether its writers may still run, for how its buffer is read (`Drain::read_out`).
        let writers = if t.lost.is_none() {
            Writers::Stopped
        } else if fxtrace::capture::procfs::process_ended(t.pid) {
            Writers::Ended
        } else {
            Writers::MayRun
        };
        let result = t
            .drain
            .read_out(buffer, &mut self.archive, (id, &t.name), writers);
        let outcome = match result {
            Ok(()) => {
                let dropped = t.drain.stats().records_dropped;
                let early = t.drain.stats().records_dropped_before_start.min(dropped);
                let mut r = Ok(());
                if dropped > 0 {
                    let name = match early {
                        0 => format!("fxtrace: {dropped} records dropped"),
                        _ => format!(
                            "fxtrace: {dropped} records dropped ({early} before the trace started)"
                        ),
                    };
                    r = self.archive.marker(
                        fxtrace::clock::ticks(),
                        (id, u64::from(t.pid)),
                        &name,
                        (fxtrace_format::DROP_MARKER_ARG, dropped),
                    );
                }
                r.map_err(DrainError::from)
            }
            Err(e) => Err(e),
        };
        let outcome = outcome.and_then(|()| match &t.lost {
            Some(reason) => self
                .archive
                .marker(
                    fxtrace::clock::ticks(),
                    (id, u64::from(t.pid)),
                    &format!("fxtrace: provider lost: {reason}"),
                    ("pid", u64::from(t.pid)),
                )
                .map_err(DrainError::from),
            None => Ok(()),
        });
        match outcome {
            Ok(()) => self.events.push(ManagerEvent::ProviderCollected { id }),
            Err(e) if e.is_archive() => self.archive_failure(e.to_string(), Instant::now()),
            Err(e) => {
                let message = format!("final read-out skipped: {e}");
                if t.lost.is_none() {
                    t.lost = Some(message.clone());
                    self.events.push(ManagerEvent::ProviderLost {
                        id,
                        reason: message,
                    });
                } else if t.problems.push(message.clone()) {
                    self.events
                        .push(ManagerEvent::ProviderProblem { id, message });
                }
            }
        }
    }

    pub(super) fn archive_failure(&mut self, reason: String, now: Instant) {
        if self.archive_failed.is_none() {
            self.archive_failed = Some(reason);
            let commands = self.session.abort(now);
            self.run(commands, now);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;
    use std::time::Duration;

    use super::super::test_support::{manager, pump, register};
    use super::super::ManagerEvent;
    use fxtrace::protocol::control::Message;
    use fxtrace::protocol::fifo::ProviderPacket;
    use fxtrace::protocol::transport;

    #[test]
    fn a_stopped_provider_is_collected_and_not_lost() {
        let (_dir, mut m) = manager(|_| {});
        let mut p = register(&mut m, "stops");
        m.start(None).unwrap();
        let (msg, _) = p.conn.recv_msg().unwrap();
        assert!(matches!(msg, Message::Start { .. }), "{msg:?}");
        transport::send_packet(p.fifo.as_fd(), &ProviderPacket::STARTED.to_packet()).unwrap();
        pump(&mut m, |e| {
            e.iter()
                .any(|e| matches!(e, ManagerEvent::StartAcknowledged { .. }))
        });
        m.stop(true).unwrap();
        let (msg, _) = p.conn.recv_msg().unwrap();
        assert_eq!(msg, Message::Stop);
        transport::send_packet(p.fifo.as_fd(), &ProviderPacket::Stopped.to_packet()).unwrap();
        let events = pump(&mut m, |e| {
            e.iter()
                .any(|e| matches!(e, ManagerEvent::StopAcknowledged { .. }))
        });
        // Acknowledged with nobody timed out; the provider (which never wrote a header) is
        // not reported as having missed the Stop.
        assert!(events.iter().any(
            |e| matches!(e, ManagerEvent::StopAcknowledged { timed_out } if timed_out.is_empty())
        ));
        let lost = m.reports()[0].lost.clone().unwrap_or_default();
        assert!(!lost.contains("Stop"), "{lost}");
    }

    #[test]
    fn a_provider_silent_at_stop_is_salvaged_as_lost() {
        let (_dir, mut m) = manager(|c| c.session.stop_timeout = Duration::from_millis(100));
        let p = register(&mut m, "silent");
        m.start(None).unwrap();
        transport::send_packet(p.fifo.as_fd(), &ProviderPacket::STARTED.to_packet()).unwrap();
        pump(&mut m, |e| {
            e.iter()
                .any(|e| matches!(e, ManagerEvent::StartAcknowledged { .. }))
        });
        m.stop(true).unwrap();
        let events = pump(&mut m, |e| {
            e.iter()
                .any(|e| matches!(e, ManagerEvent::StopAcknowledged { .. }))
        });
        assert!(events.iter().any(
            |e| matches!(e, ManagerEvent::StopAcknowledged { timed_out } if timed_out.len() == 1)
        ));
        let lost = m.reports()[0].lost.clone().unwrap_or_default();
        assert!(lost.contains("Stop in time"), "{lost}");
    }
}
