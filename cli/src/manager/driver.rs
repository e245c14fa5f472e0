//! One session's loop, as `fxtrace record` ([`Recorder::run`](super::Recorder::run)) and each
//! session of the trace service (`service/session.rs`) run it: a [`Manager`] polled turn by
//! turn, the sections of sources outside the protocol (the kernel provider) copied into its
//! archive as their batches come, the session's duration and the alert it stops on. The
//! problems `status` lists are the manager's ([`Manager::note_problem`]).
//!
//! What each runner adds around a turn stays with it: the recorder's command, signals and log
//! lines; the service's commands from its registry and the news it sends back. Each acts on a
//! [`StopCause`] its own way (the recorder ends the recording; the service stops a session
//! that is tracing, writes it and ends it).

use std::os::fd::BorrowedFd;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use super::report::SectionReport;
use super::section::SectionSink;
use super::server::{Manager, ManagerError, ManagerEvent};
use super::session::ProviderId;

/// Why a session should stop, as its driver sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StopCause {
    /// The session's duration passed.
    Duration,
    /// A provider raised the alert the session stops on.
    Alert {
        /// The provider.
        provider: ProviderId,
        /// The alert's name.
        name: String,
    },
}

/// What one [`SessionDriver::turn`] produced.
#[derive(Debug, Default)]
pub(crate) struct Turn {
    /// The manager's events, in order.
    pub(crate) events: Vec<ManagerEvent>,
    /// A reason to stop: the duration passed (then the manager was not polled) or the alert
    /// was raised (the first of the turn).
    pub(crate) stop: Option<StopCause>,
}

/// A section's end in the loop: its batches, and what was written of them.
#[derive(Debug)]
pub(crate) struct SectionIn {
    pub(crate) report: SectionReport,
    rx: Receiver<Vec<u8>>,
}

/// The session loop; see the module docs.
#[derive(Debug)]
pub(crate) struct SessionDriver {
    /// The session's manager (its runner starts, stops and terminates it).
    pub(crate) manager: Manager,
    duration: Option<Duration>,
    deadline: Option<Instant>,
    stop_on_alert: Option<String>,
    sections: Vec<SectionIn>,
}

impl SessionDriver {
    /// Drive `manager`, stopping after `duration` once armed ([`Self::arm_deadline`]) and when
    /// a provider raises the alert `stop_on_alert`.
    pub(crate) fn new(
        manager: Manager,
        duration: Option<Duration>,
        stop_on_alert: Option<String>,
    ) -> Self {
        SessionDriver {
            manager,
            duration,
            deadline: None,
            stop_on_alert,
            sections: Vec::new(),
        }
    }

    /// The duration runs from `from` (the recorder: its creation; the service: each start
    /// acknowledged).
    pub(crate) fn arm_deadline(&mut self, from: Instant) {
        self.deadline = self.duration.map(|d| from + d);
    }

    /// A sink for a section named `name` with an id of its own in this session; its batches
    /// are written at each turn.
    pub(crate) fn section_sink(&mut self, name: &str) -> SectionSink {
        let id = self.manager.reserve_provider_id();
        let (sink, rx) = SectionSink::channel(id, self.manager.waker());
        self.sections.push(SectionIn {
            report: SectionReport {
                id,
                name: name.to_owned(),
                records: 0,
                bytes: 0,
                losses: None,
            },
            rx,
        });
        sink
    }

    /// Copy every batch the sections have sent into the archive.
    pub(crate) fn drain_sections(&mut self) -> Result<(), ManagerError> {
        for section in &mut self.sections {
            drain(&mut self.manager, section)?;
        }
        Ok(())
    }

    /// The section `id` is over: what it sent is written (`write`) or discarded, and the
    /// session forgets it.
    pub(crate) fn close_section(
        &mut self,
        id: ProviderId,
        write: bool,
    ) -> Result<(), ManagerError> {
        let Some(at) = self.sections.iter().position(|s| s.report.id == id) else {
            return Ok(());
        };
        let mut section = self.sections.remove(at);
        if write {
            drain(&mut self.manager, &mut section)?;
        }
        Ok(())
    }

    /// The sections and what was written of each.
    pub(crate) fn sections_mut(&mut self) -> &mut [SectionIn] {
        &mut self.sections
    }

    /// One turn: write the sections' batches; unless the duration has passed, wait for the
    /// manager (at most until the deadline or `wake_at`; `extra` descriptors are polled too)
    /// and take its events.
    pub(crate) fn turn(
        &mut self,
        extra: &[BorrowedFd<'_>],
        wake_at: Option<Instant>,
    ) -> Result<Turn, ManagerError> {
        self.drain_sections()?;
        let now = Instant::now();
        if self.deadline.is_some_and(|d| now >= d) {
            self.deadline = None;
            return Ok(Turn {
                stop: Some(StopCause::Duration),
                ..Turn::default()
            });
        }
        let timeout = self
            .deadline
            .into_iter()
            .chain(wake_at)
            .min()
            .map(|d| d.saturating_duration_since(now));
        let outcome = self.manager.poll(extra, timeout)?;
        let stop = outcome.events.iter().find_map(|event| match event {
            ManagerEvent::Alert { id, name } if self.stop_on_alert.as_deref() == Some(name) => {
                Some(StopCause::Alert {
                    provider: *id,
                    name: name.clone(),
                })
            }
            _ => None,
        });
        Ok(Turn {
            events: outcome.events,
            stop,
        })
    }
}

/// Write what `section` has sent.
fn drain(manager: &mut Manager, section: &mut SectionIn) -> Result<(), ManagerError> {
    while let Ok(batch) = section.rx.try_recv() {
        let records = manager.write_section(section.report.id, &section.report.name, &batch)?;
        section.report.records += records;
        section.report.bytes += batch.len() as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manager::server::test_support::{manager, register};
    use fxtrace::protocol::fifo::{AlertName, ProviderPacket};
    use fxtrace::protocol::transport;
    use fxtrace_format::{Initialization, Record};
    use std::os::fd::AsFd;

    #[test]
    fn a_turn_stops_at_the_deadline_and_on_the_alert() {
        let (_dir, m) = manager(|_| {});
        let mut driver =
            SessionDriver::new(m, Some(Duration::from_millis(50)), Some("stop-here".into()));
        // Not armed: no deadline.
        let turn = driver.turn(&[], Some(Instant::now())).unwrap();
        assert_eq!(turn.stop, None);
        let armed = Instant::now();
        driver.arm_deadline(armed);
        let mut turns = 0;
        let stop = loop {
            turns += 1;
            let turn = driver.turn(&[], None).unwrap();
            if let Some(stop) = turn.stop {
                break stop;
            }
        };
        assert_eq!(stop, StopCause::Duration);
        assert!(armed.elapsed() >= Duration::from_millis(50));
        assert!(turns <= 3, "the poll waits for the deadline: {turns} turns");
        // Once told, the deadline is gone.
        let turn = driver.turn(&[], Some(Instant::now())).unwrap();
        assert_eq!(turn.stop, None);
        // The alert the session stops on (not another), the first of the turn.
        let provider = register(&mut driver.manager, "p");
        for name in ["other", "stop-here", "stop-here"] {
            let alert = ProviderPacket::Alert {
                name: AlertName::new(name).unwrap(),
            };
            transport::send_packet(provider.fifo.as_fd(), &alert.to_packet()).unwrap();
        }
        let stop = loop {
            let turn = driver.turn(&[], Some(Instant::now() + Duration::from_millis(20)));
            if let Some(stop) = turn.unwrap().stop {
                break stop;
            }
        };
        let StopCause::Alert { name, .. } = stop else {
            panic!("{stop:?}")
        };
        assert_eq!(name, "stop-here");
        // A section's batches are written at the next turn, and at its close.
        let mut sink = driver.section_sink("outside");
        let record = Record::Initialization(Initialization {
            ticks_per_second: 1000,
        });
        sink.push(&record).unwrap();
        sink.flush().unwrap();
        driver.turn(&[], Some(Instant::now())).unwrap();
        assert_eq!(driver.sections_mut()[0].report.records, 1);
        sink.push(&record).unwrap();
        sink.flush().unwrap();
        let before = driver.manager.session_info().records_written;
        driver.close_section(sink.id(), true).unwrap();
        assert!(driver.sections_mut().is_empty());
        assert_eq!(driver.manager.session_info().records_written, before + 1);
    }
}
