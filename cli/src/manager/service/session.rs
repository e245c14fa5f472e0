//! One session of the trace service: a listener-less [`Manager`] in a thread of its own,
//! driven by commands from the service's loop and reporting back what happened.
//!
//! The service hands providers over ([`Command::Adopt`]: their registered connections), and
//! relays the controller's start, stop and terminate. The thread runs the session loop every
//! session runs ([`SessionDriver`], as `fxtrace record` does) and stops the session by itself
//! when its duration passes or when the alert it waits for is raised, and then ends it.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::protocol::SessionInfo;
use crate::manager::conn::FramedConn;
use crate::manager::driver::{SessionDriver, StopCause};
use crate::manager::kernel::SessionKernel;
use crate::manager::server::{Manager, ManagerEvent, Registration, Waker};
use fxtrace::protocol::control::{BufferDisposition, SessionState};

/// What the service asks of a session. `from`: the controller that asked (a refusal goes to
/// it alone).
pub(in crate::manager) enum Command {
    /// Take in a provider the service registered (its id at the service).
    Adopt(u32, FramedConn, Registration),
    /// Start (again), with what to do with the buffers, and a new output (else append) with
    /// its name.
    Start {
        disposition: BufferDisposition,
        output: Option<(Box<dyn Write + Send>, String)>,
        from: Option<u64>,
    },
    /// Stop, writing the buffers into the archive (or not).
    Stop { write: bool, from: Option<u64> },
    /// Stop (writing, if tracing) and end the session.
    Terminate { reason: String },
}

/// What a session tells the service.
#[derive(Debug)]
pub(super) enum News {
    /// Tracing.
    Started {
        session: u32,
        /// The controller whose start this was.
        to: Option<u64>,
        providers: u32,
        timed_out: u32,
        notes: Vec<String>,
    },
    /// A command of controller `to` could not be carried out.
    Refused {
        session: u32,
        to: Option<u64>,
        error: String,
    },
    /// A provider the service handed over is no longer in the session (refused, lost, gone):
    /// its id at the service.
    ProviderLeft { session: u32, provider: u32 },
    /// Stopped; the archive holds what was written.
    Stopped {
        session: u32,
        /// The controller whose stop this was (`None`: the duration, an alert, a terminate).
        to: Option<u64>,
        /// The controller whose start had not completed when the session stopped.
        start_to: Option<u64>,
        reason: String,
        info: Box<SessionInfo>,
    },
    /// Over (the thread is finishing).
    Ended { session: u32, reason: String },
}

/// How a session runs, beyond the manager's configuration.
pub(super) struct Plan {
    pub(super) id: u32,
    pub(super) duration: Option<Duration>,
    pub(super) stop_on_alert: Option<String>,
    /// Every CPU's context switches too (the kernel provider), from each start to each stop.
    pub(super) system_wide: bool,
    /// Set when the session stops taking providers in (it is finishing): the service hands
    /// a provider that registers then to no one.
    /// ATOMICS: `Relaxed` flag; a provider handed over anyway is closed with the session's
    /// command queue and registers again.
    pub(super) ending: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// How long a session's thread waits for its manager before it looks at its commands.
const TURN: Duration = Duration::from_millis(250);

/// The session thread's body.
pub(super) fn run(
    manager: Manager,
    plan: Plan,
    commands: Receiver<Command>,
    news: Sender<News>,
    service: Waker,
    info: Arc<Mutex<SessionInfo>>,
) {
    let driver = SessionDriver::new(manager, plan.duration, plan.stop_on_alert.clone());
    let mut session = Running {
        driver,
        plan,
        news,
        service,
        info,
        stopping: None,
        end_after_stop: None,
        kernel: None,
        start_notes: Vec::new(),
        stop_writes: true,
        start_from: None,
        stop_from: None,
        adopted: BTreeMap::new(),
    };
    let reason = loop {
        if let Some(reason) = session.turn(&commands) {
            break reason;
        }
    };
    session.end(reason);
}

/// A session of the service while its thread runs.
struct Running {
    driver: SessionDriver,
    plan: Plan,
    news: Sender<News>,
    service: Waker,
    /// The session as `status` shows it, updated every turn.
    info: Arc<Mutex<SessionInfo>>,
    /// Why the session is stopping (for the news); whether it ends once stopped, and why.
    stopping: Option<String>,
    end_after_stop: Option<String>,
    kernel: Option<SessionKernel>,
    /// Notes for the next Started news; whether the stop under way writes.
    start_notes: Vec<String>,
    stop_writes: bool,
    /// Who asked for the start or the stop under way (answered when it completes).
    start_from: Option<u64>,
    stop_from: Option<u64>,
    /// The session's providers: id in the manager → id at the service.
    adopted: BTreeMap<u32, u32>,
}

impl Running {
    fn tell(&self, news: News) {
        // The service outlives its sessions' threads; a closed channel means it is exiting.
        let _ = self.news.send(news);
        self.service.wake();
    }

    fn manager(&mut self) -> &mut Manager {
        &mut self.driver.manager
    }

    /// One turn of the session loop, then the service's commands. Why the session is over,
    /// when it is.
    fn turn(&mut self, commands: &Receiver<Command>) -> Option<String> {
        let turn = match self.driver.turn(&[], Some(Instant::now() + TURN)) {
            Ok(turn) => turn,
            Err(e) => return Some(format!("the session failed: {e}")),
        };
        for event in turn.events {
            if let Some(reason) = self.on_event(event) {
                return Some(reason);
            }
        }
        if let Some(cause) = turn.stop {
            self.stop_for(cause);
        }
        while let Ok(command) = commands.try_recv() {
            if let Some(reason) = self.on_command(command) {
                return Some(reason);
            }
        }
        *self.info.lock().unwrap_or_else(|p| p.into_inner()) = self.driver.manager.session_info();
        None
    }

    /// Why the session is over, when `event` ends it.
    fn on_event(&mut self, event: ManagerEvent) -> Option<String> {
        match event {
            ManagerEvent::StartAcknowledged { timed_out } => {
                self.driver.arm_deadline(Instant::now());
                let started = News::Started {
                    session: self.plan.id,
                    to: self.start_from.take(),
                    providers: self.driver.manager.session().providers().count() as u32,
                    timed_out: timed_out.len() as u32,
                    notes: std::mem::take(&mut self.start_notes),
                };
                self.tell(started);
            }
            ManagerEvent::StopAcknowledged { timed_out } => return self.stopped(&timed_out),
            ManagerEvent::Terminated => {
                return Some(
                    self.end_after_stop
                        .take()
                        .unwrap_or_else(|| "terminated".into()),
                )
            }
            ManagerEvent::ProviderLost { id, .. } | ManagerEvent::ProviderGone { id } => {
                if let Some(provider) = self.adopted.remove(&id) {
                    self.tell(News::ProviderLeft {
                        session: self.plan.id,
                        provider,
                    });
                }
            }
            _ => {}
        }
        None
    }

    /// The stop completed: the kernel provider stopped (its last records written if the stop
    /// writes), the archive flushed, the service told; a session that ends after its stop is
    /// terminated. Why the session is over, when terminating fails.
    fn stopped(&mut self, timed_out: &[u32]) -> Option<String> {
        if !timed_out.is_empty() {
            let line = format!(
                "{} providers did not acknowledge the stop in time (salvaged)",
                timed_out.len()
            );
            self.manager().note_problem(line);
        }
        if let Some(k) = self.kernel.take() {
            let problem = match k.stop(&mut self.driver, self.stop_writes) {
                Ok(note) => note,
                Err(e) => format!("kernel provider: {e}"),
            };
            self.manager().note_problem(problem);
        }
        if let Err(e) = self.manager().flush_archive() {
            self.manager()
                .note_problem(format!("writing the archive: {e}"));
        }
        let stopped = News::Stopped {
            session: self.plan.id,
            to: self.stop_from.take(),
            start_to: self.start_from.take(),
            reason: self.stopping.take().unwrap_or_else(|| "stopped".into()),
            info: Box::new(self.driver.manager.session_info()),
        };
        self.tell(stopped);
        let reason = self.end_after_stop.take()?;
        if let Err(e) = self.manager().terminate() {
            return Some(format!("{reason} (terminate: {e})"));
        }
        self.end_after_stop = Some(reason);
        None
    }

    /// The duration passed, or the alert was raised: a session that is tracing stops
    /// (writing) and then ends.
    fn stop_for(&mut self, cause: StopCause) {
        if self.driver.manager.session().state() != SessionState::Started {
            return;
        }
        let why = match cause {
            StopCause::Duration => "its duration passed".to_owned(),
            StopCause::Alert { name, .. } => format!("alert {name:?} raised"),
        };
        self.stop_writes = true;
        if self.manager().stop(true).is_ok() {
            self.stopping = Some(why.clone());
            self.end_after_stop = Some(why);
        }
    }

    /// Why the session is over, when `command` ends it at once.
    fn on_command(&mut self, command: Command) -> Option<String> {
        match command {
            Command::Adopt(provider, conn, registration) => {
                match self.manager().adopt(conn, registration) {
                    Some(id) => {
                        self.adopted.insert(id, provider);
                    }
                    None => self.tell(News::ProviderLeft {
                        session: self.plan.id,
                        provider,
                    }),
                }
            }
            Command::Start {
                disposition,
                output,
                from,
            } => self.start(disposition, output, from),
            Command::Stop { write, from } => {
                if let Err(e) = self.manager().stop(write) {
                    self.tell(News::Refused {
                        session: self.plan.id,
                        to: from,
                        error: format!("cannot stop session {}: {e}", self.plan.id),
                    });
                } else {
                    self.stop_writes = write;
                    self.stop_from = from;
                    self.stopping = Some("stopped by a controller".into());
                }
            }
            Command::Terminate { reason } => match self.driver.manager.session().state() {
                SessionState::Started | SessionState::Starting => {
                    // Never lose what was traced: stop and write first.
                    self.stop_writes = true;
                    if self.manager().stop(true).is_ok() {
                        self.stopping = Some(reason.clone());
                    }
                    self.end_after_stop = Some(reason);
                }
                SessionState::Stopping => self.end_after_stop = Some(reason),
                _ => match self.manager().terminate() {
                    Ok(()) => self.end_after_stop = Some(reason),
                    Err(_) => return Some(reason),
                },
            },
        }
        None
    }

    /// Start (again), into a new output when one is given; with the kernel provider when the
    /// session records every CPU. A refusal goes to controller `from`.
    fn start(
        &mut self,
        disposition: BufferDisposition,
        output: Option<(Box<dyn Write + Send>, String)>,
        from: Option<u64>,
    ) {
        // Only an initialized or stopped session starts: say so before anything changes, the
        // output above all.
        let state = self.driver.manager.session().state();
        let started = match state {
            SessionState::Initialized | SessionState::Stopped => {
                let replaced = match output {
                    Some((output, name)) => self
                        .manager()
                        .replace_output(output, name)
                        .map_err(|e| e.to_string()),
                    None => Ok(()),
                };
                replaced.and_then(|()| {
                    self.manager()
                        .start(Some(disposition))
                        .map_err(|e| e.to_string())
                })
            }
            SessionState::Starting | SessionState::Started | SessionState::Stopping => {
                Err(format!("it is {state}: stop it first (fxtrace stop)"))
            }
            _ => Err(format!("it is {state}: it is ending")),
        };
        if let Err(error) = started {
            return self.tell(News::Refused {
                session: self.plan.id,
                to: from,
                error: format!("cannot start session {}: {error}", self.plan.id),
            });
        }
        self.start_from = from;
        if self.plan.system_wide && self.kernel.is_none() {
            match SessionKernel::start(&mut self.driver) {
                Ok(k) => self.kernel = Some(k),
                Err(e) => {
                    let note = format!(
                        "no context switches (--system-wide): {e} (the trace service must run \
                         as root, or with CAP_PERFMON)"
                    );
                    self.manager().note_problem(note.clone());
                    self.start_notes.push(note);
                }
            }
        }
    }

    /// The session is over (`reason`): its archive flushed, its providers' connections closed
    /// (they register again), the service told.
    fn end(mut self, reason: String) {
        if let Some(k) = self.kernel.take() {
            // The session ended without a stop (it failed): keep what the capture has.
            let _ = k.stop(&mut self.driver, true);
        }
        // ATOMICS: see `Plan::ending`.
        self.plan
            .ending
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let id = self.plan.id;
        let Running {
            driver,
            news,
            service,
            ..
        } = self;
        let reason = match driver.manager.finish() {
            Ok(_) => reason,
            Err(e) => format!("{reason}; writing the archive failed: {e}"),
        };
        let _ = news.send(News::Ended {
            session: id,
            reason,
        });
        service.wake();
    }
}
