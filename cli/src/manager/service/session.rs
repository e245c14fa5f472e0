//! One session of the trace service: a listener-less [`Manager`] in a thread of its own,
//! driven by commands from the service's loop and reporting back what happened.
//!
//! The service hands providers over ([`Command::Adopt`]: their registered connections), and
//! relays the controller's start, stop and terminate. The thread stops the session by itself
//! when its duration passes or when the alert it waits for is raised, and then ends it.

use std::io::Write;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::protocol::SessionInfo;
use crate::manager::conn::FramedConn;
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
        info: SessionInfo,
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

/// The session thread's body.
pub(super) fn run(
    mut manager: Manager,
    plan: Plan,
    commands: Receiver<Command>,
    news: Sender<News>,
    service: Waker,
    info: Arc<Mutex<SessionInfo>>,
) {
    let tell = |n: News| {
        // The service outlives its sessions' threads; a closed channel means it is exiting.
        let _ = news.send(n);
        service.wake();
    };
    let mut deadline: Option<Instant> = None;
    // Why the session is stopping (for the event); whether it ends once stopped.
    let mut stopping: Option<String> = None;
    let mut end_after_stop: Option<String> = None;
    let mut kernel: Option<SessionKernel> = None;
    // Notes for the next Started news; whether the stop under way writes.
    let mut start_notes: Vec<String> = Vec::new();
    let mut stop_writes = true;
    // Who asked for the start or the stop under way (answered when it completes).
    let mut start_from: Option<u64> = None;
    let mut stop_from: Option<u64> = None;
    // The session's providers: id in the manager → id at the service.
    let mut adopted: std::collections::BTreeMap<u32, u32> = std::collections::BTreeMap::new();
    let reason = 'session: loop {
        let wait = deadline.map_or(Duration::from_millis(250), |d| {
            d.saturating_duration_since(Instant::now())
                .min(Duration::from_millis(250))
        });
        let outcome = match manager.poll(&[], Some(wait)) {
            Ok(outcome) => outcome,
            Err(e) => break format!("the session failed: {e}"),
        };
        for event in outcome.events {
            match event {
                ManagerEvent::StartAcknowledged { timed_out } => {
                    deadline = plan.duration.map(|d| Instant::now() + d);
                    tell(News::Started {
                        session: plan.id,
                        to: start_from.take(),
                        providers: manager.session().providers().count() as u32,
                        timed_out: timed_out.len() as u32,
                        notes: std::mem::take(&mut start_notes),
                    });
                }
                ManagerEvent::StopAcknowledged { timed_out } => {
                    if !timed_out.is_empty() {
                        manager.note_problem(format!(
                            "{} providers did not acknowledge the stop in time (salvaged)",
                            timed_out.len()
                        ));
                    }
                    if let Some(k) = kernel.take() {
                        let problem = match k.stop(&mut manager, stop_writes) {
                            Ok(note) => note,
                            Err(e) => format!("kernel provider: {e}"),
                        };
                        manager.note_problem(problem);
                    }
                    if let Err(e) = manager.flush_archive() {
                        manager.note_problem(format!("writing the archive: {e}"));
                    }
                    let snapshot = manager.session_info();
                    tell(News::Stopped {
                        session: plan.id,
                        to: stop_from.take(),
                        start_to: start_from.take(),
                        reason: stopping.take().unwrap_or_else(|| "stopped".into()),
                        info: snapshot,
                    });
                    if let Some(reason) = end_after_stop.take() {
                        if let Err(e) = manager.terminate() {
                            break 'session format!("{reason} (terminate: {e})");
                        }
                        end_after_stop = Some(reason);
                    }
                }
                ManagerEvent::Terminated => {
                    break 'session end_after_stop.take().unwrap_or_else(|| "terminated".into());
                }
                ManagerEvent::Alert { name, .. }
                    if plan.stop_on_alert.as_deref() == Some(name.as_str())
                        && manager.session().state() == SessionState::Started =>
                {
                    let why = format!("alert {name:?} raised");
                    stop_writes = true;
                    if manager.stop(true).is_ok() {
                        stopping = Some(why.clone());
                        end_after_stop = Some(why);
                    }
                }
                ManagerEvent::ProviderLost { id, .. } | ManagerEvent::ProviderGone { id } => {
                    if let Some(provider) = adopted.remove(&id) {
                        tell(News::ProviderLeft {
                            session: plan.id,
                            provider,
                        });
                    }
                }
                _ => {}
            }
        }
        if deadline.is_some_and(|d| Instant::now() >= d)
            && manager.session().state() == SessionState::Started
        {
            deadline = None;
            let why = "its duration passed".to_owned();
            stop_writes = true;
            if manager.stop(true).is_ok() {
                stopping = Some(why.clone());
                end_after_stop = Some(why);
            }
        }
        while let Ok(command) = commands.try_recv() {
            match command {
                Command::Adopt(provider, conn, registration) => {
                    match manager.adopt(conn, registration) {
                        Some(id) => {
                            adopted.insert(id, provider);
                        }
                        None => tell(News::ProviderLeft {
                            session: plan.id,
                            provider,
                        }),
                    }
                }
                Command::Start {
                    disposition,
                    output,
                    from,
                } => {
                    // Only an initialized or stopped session starts: say so before anything
                    // changes, the output above all.
                    let state = manager.session().state();
                    let started =
                        if !matches!(state, SessionState::Initialized | SessionState::Stopped) {
                            Err(match state {
                                SessionState::Starting
                                | SessionState::Started
                                | SessionState::Stopping => {
                                    format!("it is {state}: stop it first (fxtrace stop)")
                                }
                                _ => format!("it is {state}: it is ending"),
                            })
                        } else {
                            let replaced = match output {
                                Some((output, name)) => manager
                                    .replace_output(output, name)
                                    .map_err(|e| e.to_string()),
                                None => Ok(()),
                            };
                            replaced.and_then(|()| {
                                manager.start(Some(disposition)).map_err(|e| e.to_string())
                            })
                        };
                    if started.is_ok() {
                        start_from = from;
                    }
                    if started.is_ok() && plan.system_wide && kernel.is_none() {
                        match SessionKernel::start(&mut manager) {
                            Ok(k) => kernel = Some(k),
                            Err(e) => {
                                let note = format!(
                                    "no context switches (--system-wide): {e} (the trace \
                                     service must run as root, or with CAP_PERFMON)"
                                );
                                manager.note_problem(note.clone());
                                start_notes.push(note);
                            }
                        }
                    }
                    if let Err(error) = started {
                        tell(News::Refused {
                            session: plan.id,
                            to: from,
                            error: format!("cannot start session {}: {error}", plan.id),
                        });
                    }
                }
                Command::Stop { write, from } => {
                    if let Err(e) = manager.stop(write) {
                        tell(News::Refused {
                            session: plan.id,
                            to: from,
                            error: format!("cannot stop session {}: {e}", plan.id),
                        });
                    } else {
                        stop_writes = write;
                        stop_from = from;
                        stopping = Some("stopped by a controller".into());
                    }
                }
                Command::Terminate { reason } => match manager.session().state() {
                    SessionState::Started | SessionState::Starting => {
                        // Never lose what was traced: stop and write first.
                        stop_writes = true;
                        if manager.stop(true).is_ok() {
                            stopping = Some(reason.clone());
                        }
                        end_after_stop = Some(reason);
                    }
                    SessionState::Stopping => end_after_stop = Some(reason),
                    _ => match manager.terminate() {
                        Ok(()) => end_after_stop = Some(reason),
                        Err(_) => break 'session reason,
                    },
                },
            }
        }
        if let Some(k) = kernel.as_mut() {
            if let Err(e) = k.pump(&mut manager) {
                manager.note_problem(format!("kernel provider: {e}"));
            }
        }
        *info.lock().unwrap_or_else(|p| p.into_inner()) = manager.session_info();
    };
    if let Some(k) = kernel.take() {
        // The session ended without a stop (it failed): keep what the capture has.
        let _ = k.stop(&mut manager, true);
    }
    // ATOMICS: see `Plan::ending`.
    plan.ending
        .store(true, std::sync::atomic::Ordering::Relaxed);
    // The archive is flushed and every provider connection closed (they register again).
    let reason = match manager.finish() {
        Ok(_) => reason,
        Err(e) => format!("{reason}; writing the archive failed: {e}"),
    };
    tell(News::Ended {
        session: plan.id,
        reason,
    });
}
