//! The controller protocol of the trace service: what `fxtrace providers`, `categories`,
//! `start`, `stop`, `terminate` and `status` say to `fxtrace daemon`, and what it answers.
//! `fxtrace record` answers `status` in it too (and refuses the rest): [`SessionInfo`] is the
//! one status model of a session, the service's or a recording's.
//!
//! Each message is one control frame of tag 9 ([`Frame::Controller`]) holding one JSON
//! document: a [`Request`] from the controller, a [`Reply`] (to the controller's last request,
//! in order) or an [`Event`] (about a session the controller started and stays attached to)
//! from the service. A `start` that writes an archive carries the output file's descriptor: the
//! controller opens (creates) the file itself, so the archive belongs to the controller's user
//! and the service never opens a path on anyone's behalf.
//!
//! It mirrors `fuchsia.tracing.controller`: `providers`/`categories` are the Provisioner's
//! `GetProviders`/`GetKnownCategories` (no session needed); `start` is
//! `InitializeTracing` + `StartTracing` (or `StartTracing` alone on an existing session, with a
//! buffer disposition), `stop` is `StopTracing`, `terminate` is `TerminateTracing`.

use serde::{Deserialize, Serialize};

use crate::manager::wire::{Frame, MAX_CONTROLLER_BODY};

/// A controller's request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Request {
    /// `GetProviders`: the providers this controller may trace.
    Providers {},
    /// `GetKnownCategories`: the categories those providers declared.
    Categories {},
    /// Create a session and start it, or start an existing one again.
    Start(Box<StartRequest>),
    /// Stop a session, writing (or discarding) what its providers hold.
    Stop {
        /// The session (`None`: this user's only session).
        session: Option<u32>,
        /// Write the providers' buffers to the session's archive.
        write: bool,
    },
    /// End a session: providers are told to terminate and go back to idle.
    Terminate {
        /// The session (`None`: this user's only session).
        session: Option<u32>,
    },
    /// The service, its providers and every session this controller may see.
    Status {},
}

/// How to start.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartRequest {
    /// Start this existing session again instead of creating one.
    pub session: Option<u32>,
    /// At a restart: what to do with the providers' buffers (`clear`, `clear-nondurable`,
    /// `retain`).
    pub disposition: Option<String>,
    /// Buffering mode (`oneshot`, `circular`, `streaming`).
    pub mode: Option<String>,
    /// Buffer size per provider, bytes.
    pub buffer_size: Option<u64>,
    /// Enabled categories (empty: all).
    #[serde(default)]
    pub categories: Vec<String>,
    /// Stop (and write) after this long, then end the session.
    pub duration_ms: Option<u64>,
    /// Stop (and write) when a provider raises this alert, then end the session.
    pub stop_on_alert: Option<String>,
    /// Only providers of these processes (empty: any).
    #[serde(default)]
    pub pids: Vec<u32>,
    /// Only providers of these names (empty: any).
    #[serde(default)]
    pub names: Vec<String>,
    /// Record every CPU's context switches too (the kernel provider, in the service).
    #[serde(default)]
    pub system_wide: bool,
    /// The session outlives its controller (otherwise a controller that goes away ends it).
    #[serde(default)]
    pub detach: bool,
    /// The output file's name, as `status` shows it (the file itself travels as a descriptor).
    pub output: Option<String>,
}

/// The service's answer to one request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "kebab-case")]
pub enum Reply {
    /// The request failed: `error` says why and what to do.
    Error {
        /// The message.
        error: String,
    },
    /// `providers`.
    Providers {
        /// Registered providers.
        providers: Vec<ProviderInfo>,
        /// Providers left out: the whole list would not fit in one message.
        #[serde(default)]
        omitted: u32,
    },
    /// `categories`.
    Categories {
        /// Known categories, sorted, without duplicates.
        categories: Vec<String>,
        /// Categories left out: the whole list would not fit in one message.
        #[serde(default)]
        omitted: u32,
    },
    /// `start`: the session is tracing.
    Started {
        /// The session.
        session: u32,
        /// Providers in it.
        providers: u32,
        /// Providers that did not acknowledge the start in time.
        timed_out: u32,
        /// Notes (a kernel provider that could not start, …).
        #[serde(default)]
        notes: Vec<String>,
    },
    /// `stop`: the session stopped; its archive holds what was written.
    Stopped(SessionInfo),
    /// `terminate`: the session is over.
    Terminated {
        /// The session.
        session: u32,
    },
    /// `status`.
    Status(StatusReport),
}

/// Something that happened to a session its attached controller started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum Event {
    /// The session stopped (its duration passed, an alert, or another controller's `stop`).
    Stopped {
        /// Why.
        reason: String,
        /// The session then.
        info: Box<SessionInfo>,
    },
    /// The session ended.
    Ended {
        /// The session.
        session: u32,
        /// Why.
        reason: String,
    },
}

/// What the service sends: a reply or an event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum FromService {
    /// A reply.
    Reply(Reply),
    /// An event.
    Event(Event),
}

/// One registered provider.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderInfo {
    /// Its id at the service.
    pub id: u32,
    /// Its process.
    pub pid: u32,
    /// Its name.
    pub name: String,
    /// Its process's user.
    pub uid: u32,
    /// `idle`, or `session N`.
    pub state: String,
}

/// One session, as `status`, `stop` and the progress line of `fxtrace record` show it: the
/// one status model (built by `Manager::session_info`). A field added here is filled there and
/// printed by `fxtrace status` (`commands/status.rs`); a field a peer of an earlier revision
/// does not send reads as its default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SessionInfo {
    /// The session's id (0: `fxtrace record`'s, which has no other).
    pub session: u32,
    /// Its state (FIDL names: `STARTED`, `STOPPED`, …).
    pub state: String,
    /// Buffering mode.
    pub mode: String,
    /// Buffer size per provider, bytes.
    pub buffer_size: u64,
    /// The categories it enables (empty: all; `prefix*` matches a prefix). `None`: not
    /// known (a peer of an earlier revision does not say).
    pub categories: Option<Vec<String>>,
    /// Providers in it now.
    pub providers: u32,
    /// Records written to the archive so far (metadata included).
    pub records_written: u64,
    /// Bytes written to the archive so far.
    pub bytes_written: u64,
    /// Bytes the providers' buffers hold now: in oneshot and circular mode what will be
    /// saved when tracing stops; in streaming mode part of it may be saved already.
    pub buffered_bytes: u64,
    /// Records the providers dropped.
    pub records_dropped: u64,
    /// Time since the session was created, ms.
    pub elapsed_ms: u64,
    /// The output's name (empty: none, or not known).
    pub output: String,
    /// The controller's user (`fxtrace record`'s: the recorder's).
    pub owner_uid: u32,
    /// Outlives its controller.
    pub detached: bool,
    /// Per-provider problems and losses reported so far.
    pub problems: Vec<String>,
    /// How full the providers' buffers are toward dropping records, fullest first (at most
    /// [`MAX_FILLS_LISTED`]).
    pub fills: Vec<BufferFill>,
}

/// Most providers a [`SessionInfo`] lists the fill of.
pub const MAX_FILLS_LISTED: usize = 16;

/// How full one provider's buffer is toward dropping records (`drain::fill_percent`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct BufferFill {
    /// The provider's id.
    pub id: u32,
    /// Its name.
    pub name: String,
    /// Percent.
    pub percent: u32,
}

impl BufferFill {
    /// The first `n` of `fills` as `name 97%, name 3%` (and how many more).
    pub fn list(fills: &[BufferFill], n: usize) -> String {
        let mut shown: Vec<String> = fills
            .iter()
            .take(n)
            .map(|f| {
                format!(
                    "{} {}%",
                    crate::manager::report::printable(&f.name),
                    f.percent
                )
            })
            .collect();
        if fills.len() > n {
            shown.push(format!("{} more", fills.len() - n));
        }
        shown.join(", ")
    }
}

/// The answer to `status`: the trace service's, or a recording's (`recording`: one session,
/// its providers and their categories).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusReport {
    /// The service's (or recorder's) pid.
    pub pid: u32,
    /// The service's (or recorder's) user.
    pub uid: u32,
    /// Its socket.
    pub socket: String,
    /// Providers registered (those the controller may see).
    pub providers: Vec<ProviderInfo>,
    /// Sessions (those the controller may see).
    pub sessions: Vec<SessionInfo>,
    /// Providers left out: the whole list would not fit in one message.
    #[serde(default)]
    pub providers_omitted: u32,
    /// `fxtrace record`'s session, not the trace service.
    #[serde(default)]
    pub recording: bool,
    /// The categories the providers declared (sorted, once each; a recording's).
    #[serde(default)]
    pub categories: Vec<String>,
}

/// The end of the line that replaces a session's problems in a status cut to fit a message.
const PROBLEMS_NOT_LISTED: &str = " problems not listed: the whole answer would not fit";

impl Reply {
    /// Leave out the back half of this reply's list (providers or categories), counted in
    /// its `omitted`, for a reply too large for one message. `false` when there is nothing
    /// left to leave out.
    pub fn shrink(&mut self) -> bool {
        fn halve<T>(list: &mut Vec<T>, omitted: &mut u32) -> bool {
            if list.is_empty() {
                return false;
            }
            let keep = list.len() / 2;
            *omitted = omitted.saturating_add((list.len() - keep) as u32);
            list.truncate(keep);
            true
        }
        match self {
            Reply::Providers { providers, omitted } => halve(providers, omitted),
            Reply::Categories {
                categories,
                omitted,
            } => halve(categories, omitted),
            // Providers first (a recording's categories with them); then a session's problems become one line that counts them.
            Reply::Status(report) => {
                halve(&mut report.providers, &mut report.providers_omitted)
                    || !std::mem::take(&mut report.categories).is_empty()
                    || report.sessions.iter_mut().any(|s| {
                        let n = s.problems.len();
                        let counted = n == 1 && s.problems[0].ends_with(PROBLEMS_NOT_LISTED);
                        if n == 0 || counted {
                            return false;
                        }
                        s.problems = vec![format!("{n}{PROBLEMS_NOT_LISTED}")];
                        true
                    })
            }
            _ => false,
        }
    }
}

/// A document that is not a message of this protocol.
#[derive(Debug, thiserror::Error)]
#[error("controller message: {0}")]
pub struct ProtocolError(String);

fn frame<T: Serialize>(value: &T, fds: u8) -> Result<Frame, ProtocolError> {
    let body = serde_json::to_string(value).map_err(|e| ProtocolError(e.to_string()))?;
    if body.len() > MAX_CONTROLLER_BODY {
        return Err(ProtocolError(format!(
            "{} bytes, more than {MAX_CONTROLLER_BODY}",
            body.len()
        )));
    }
    Ok(Frame::Controller { body, fds })
}

impl Request {
    /// The frame carrying this request with `fds` descriptors.
    pub fn to_message(&self, fds: u8) -> Result<Frame, ProtocolError> {
        frame(self, fds)
    }

    /// The request in a controller document.
    pub fn parse(body: &str) -> Result<Request, ProtocolError> {
        serde_json::from_str(body).map_err(|e| ProtocolError(e.to_string()))
    }
}

impl FromService {
    /// The frame carrying this reply or event.
    pub fn to_message(&self) -> Result<Frame, ProtocolError> {
        frame(self, 0)
    }

    /// The frame carrying this reply or event, its lists cut to fit one message (the reply
    /// counts what it leaves out); an answer that cannot fit becomes an error that says so.
    pub fn to_fitting_message(&self) -> Result<Frame, ProtocolError> {
        let mut what = self.clone();
        loop {
            let error = match what.to_message() {
                Ok(frame) => return Ok(frame),
                Err(e) => e,
            };
            let cut = match &mut what {
                FromService::Reply(reply) => reply.shrink(),
                FromService::Event(_) => false,
            };
            if !cut {
                return FromService::Reply(Reply::Error {
                    error: format!("the answer does not fit in a message ({error})"),
                })
                .to_message();
            }
        }
    }

    /// A reply or event in a service document.
    pub fn parse(body: &str) -> Result<FromService, ProtocolError> {
        serde_json::from_str(body).map_err(|e| ProtocolError(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_too_large_for_a_message_is_cut_and_counts_what_it_left_out() {
        let providers: Vec<ProviderInfo> = (0..20_000)
            .map(|i| ProviderInfo {
                id: i,
                pid: i,
                name: format!("provider-with-a-long-name-{i:040}"),
                uid: 0,
                state: "idle".into(),
            })
            .collect();
        let mut reply = Reply::Providers {
            providers,
            omitted: 0,
        };
        assert!(FromService::Reply(reply.clone()).to_message().is_err());
        while FromService::Reply(reply.clone()).to_message().is_err() {
            assert!(reply.shrink());
        }
        let Reply::Providers { providers, omitted } = &reply else {
            unreachable!()
        };
        assert!(!providers.is_empty() && *omitted > 0);
        assert_eq!(providers.len() + *omitted as usize, 20_000);
        // Older replies without the count still parse.
        let old = r#"{"reply":"categories","categories":["a"]}"#;
        assert_eq!(
            serde_json::from_str::<Reply>(old).unwrap(),
            Reply::Categories {
                categories: vec!["a".into()],
                omitted: 0
            }
        );
        assert!(!Reply::Terminated { session: 1 }.shrink());
        // A status with no provider left to cut cuts its sessions' problems to one line each.
        let session = SessionInfo {
            session: 1,
            state: "STARTED".into(),
            mode: "oneshot".into(),
            buffer_size: 1 << 20,
            detached: true,
            problems: vec!["a".into(), "b".into()],
            ..SessionInfo::default()
        };
        let mut status = Reply::Status(StatusReport {
            pid: 1,
            uid: 0,
            socket: "s".into(),
            providers: vec![],
            sessions: vec![session],
            providers_omitted: 0,
            recording: false,
            categories: vec![],
        });
        assert!(status.shrink());
        let Reply::Status(report) = &status else {
            unreachable!()
        };
        assert_eq!(report.sessions[0].problems.len(), 1);
        assert!(report.sessions[0].problems[0].starts_with("2 problems not listed"));
        assert!(!status.shrink(), "nothing more to cut");
    }

    #[test]
    fn requests_round_trip_and_unknown_fields_are_refused() {
        let start = Request::Start(Box::new(StartRequest {
            mode: Some("circular".into()),
            buffer_size: Some(1 << 20),
            names: vec!["svc".into()],
            detach: true,
            ..StartRequest::default()
        }));
        let Frame::Controller { body, fds } = start.to_message(1).unwrap() else {
            panic!()
        };
        assert_eq!(fds, 1);
        assert!(body.starts_with(r#"{"op":"start""#), "{body}");
        assert_eq!(Request::parse(&body).unwrap(), start);
        let stop = Request::parse(r#"{"op":"stop","session":3,"write":true}"#).unwrap();
        assert_eq!(
            stop,
            Request::Stop {
                session: Some(3),
                write: true
            }
        );
        assert!(Request::parse(r#"{"op":"providers","extra":1}"#).is_err());
        assert!(Request::parse(r#"{"op":"format-disk"}"#).is_err());
        assert!(Request::parse("not json").is_err());
    }

    #[test]
    fn replies_and_events_are_told_apart() {
        let reply = FromService::Reply(Reply::Terminated { session: 2 });
        let Frame::Controller { body, .. } = reply.to_message().unwrap() else {
            panic!()
        };
        assert_eq!(body, r#"{"reply":"terminated","session":2}"#);
        assert_eq!(FromService::parse(&body).unwrap(), reply);
        let event = FromService::Event(Event::Ended {
            session: 2,
            reason: "terminated".into(),
        });
        let Frame::Controller { body, .. } = event.to_message().unwrap() else {
            panic!()
        };
        assert_eq!(FromService::parse(&body).unwrap(), event);
    }
}
