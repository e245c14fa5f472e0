//! The trace session state machine of `fuchsia.tracing.controller.Session`.
//!
//! [`Session`] is pure logic: it performs no I/O and reads no clock. The manager's event loop
//! feeds it what happened (a request from the controlling client, a packet from a provider, the
//! current time) and carries out the [`Command`]s it returns (send Start to provider 3, copy
//! provider 5's buffer into the archive, …). That keeps every transition testable without a
//! socket, and keeps timeouts deterministic in tests.
//!
//! States and errors are those of `trace-controller-fidl.txt`:
//!
//! ```text
//!  READY --initialize--> INITIALIZED --start--> STARTING --all STARTED or timeout--> STARTED
//!                                         ^                                            |
//!                                         |                                          stop
//!                                         +------ start ---- STOPPED <-- all STOPPED -- STOPPING
//!  any state but READY --terminate--> TERMINATING --all providers gone--> READY
//! ```
//!
//! Rules taken from Fuchsia's trace_manager (`src/performance/trace_manager/trace_manager.cc`
//! and `trace_session.cc`):
//! - Start is acknowledged when every registered provider has sent STARTED, or when
//!   `start_timeout` has passed since the request (default 5 s).
//! - Start with no disposition means RETAIN, but after a Stop that wrote results the next start is
//!   forced to CLEAR_ENTIRE, so the same data is never saved twice.
//! - A provider that registers while the session is starting or started is started at once with
//!   CLEAR_ENTIRE.
//! - Alerts are queued (depth 16) until a watcher asks for them; alerts past the depth are
//!   counted, never silently lost.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

pub use fxtrace::protocol::control::SessionState;
use fxtrace::protocol::control::{BufferDisposition, BufferingMode};

/// Identifies a provider within one manager (the FXT provider id of its archive section).
pub type ProviderId = u32;

/// How many alerts are kept for [`Session::watch_alert`] (trace_manager's depth).
pub const ALERT_QUEUE_DEPTH: usize = 16;

/// Default time to wait for providers to acknowledge Start.
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_millis(5000);

/// Default time to wait for providers to acknowledge Stop or Terminate (trace_manager's 60 s).
pub const DEFAULT_STOP_TIMEOUT: Duration = Duration::from_secs(60);

/// `fuchsia.tracing.controller.StartError`, with its FIDL numbering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[repr(u32)]
pub enum StartError {
    /// Tracing has not been initialized.
    #[error("tracing is not initialized: initialize a session before starting it")]
    NotInitialized = 1,
    /// Tracing is already started (or starting).
    #[error("tracing has already been started")]
    AlreadyStarted = 2,
    /// A stop is in progress.
    #[error("tracing is being stopped: wait for the stop to finish, then start again")]
    Stopping = 3,
    /// The session is being terminated.
    #[error("the session is being terminated")]
    Terminating = 4,
}

/// `fuchsia.tracing.controller.StopError`, with its FIDL numbering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[repr(u32)]
pub enum StopError {
    /// Nothing to stop: no session.
    #[error("tracing is not initialized: there is nothing to stop")]
    NotInitialized = 1,
    /// Tracing has not started, or is already stopped.
    #[error("tracing has not been started")]
    NotStarted = 2,
    /// Tracing was aborted by an error.
    #[error("tracing was aborted")]
    Aborted = 3,
}

/// Error for a request that is not valid in the current state (initialize twice, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("cannot {request} while the session is {state}")]
pub struct StateError {
    /// What was asked.
    pub request: &'static str,
    /// The state the session was in.
    pub state: SessionState,
}

/// The buffering mode `fxtrace record` and `fxtrace start` use when not told: streaming, so
/// that a busy program is recorded whole while the manager keeps up (a 4 MiB oneshot buffer
/// dropped 98.5 % of a writer of 350 000 records a second: docs/benchmarks). Oneshot and
/// circular are there on request. ([`SessionConfig::default`] keeps Fuchsia's defaults.)
pub const RECORDING_MODE: BufferingMode = BufferingMode::Streaming;
/// The buffer size per provider `fxtrace record` and `fxtrace start` use when not told: two
/// halves of about 3.9 MiB, so the manager may be late by the time a program takes to fill
/// one (a provider's whole buffer is faulted in at its start: short processes under
/// `--preload` pay for its size).
pub const RECORDING_BUFFER_SIZE: u64 = 8 << 20;

/// The part of `TraceConfig` the session logic needs.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionConfig {
    /// Enabled categories; empty means all.
    pub categories: Vec<String>,
    /// Buffer size given to each provider, in bytes.
    pub buffer_size_bytes: u64,
    /// Buffering mode for every provider.
    pub buffering_mode: BufferingMode,
    /// How long Start waits for providers before it is acknowledged anyway.
    pub start_timeout: Duration,
    /// How long Stop and Terminate wait for providers before giving up on them.
    pub stop_timeout: Duration,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            categories: Vec::new(),
            buffer_size_bytes: 4 << 20,
            buffering_mode: BufferingMode::Oneshot,
            start_timeout: DEFAULT_START_TIMEOUT,
            stop_timeout: DEFAULT_STOP_TIMEOUT,
        }
    }
}

/// Where one provider is in the session, as far as the manager knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderPhase {
    /// Registered and initialized, not asked to start (or stopped and collected).
    Idle,
    /// Start sent; STARTED not yet received.
    Starting,
    /// STARTED received.
    Started,
    /// Stop sent; STOPPED not yet received.
    Stopping,
    /// STOPPED received.
    Stopped,
    /// Terminate sent.
    Terminating,
    /// The provider is gone (connection closed, protocol violation, timeout).
    Lost,
}

impl ProviderPhase {
    /// Lower-case name, as `status` shows it: `idle`, `starting`, `started`, …
    pub const fn name(self) -> &'static str {
        match self {
            ProviderPhase::Idle => "idle",
            ProviderPhase::Starting => "starting",
            ProviderPhase::Started => "started",
            ProviderPhase::Stopping => "stopping",
            ProviderPhase::Stopped => "stopped",
            ProviderPhase::Terminating => "terminating",
            ProviderPhase::Lost => "lost",
        }
    }
}

/// What the manager knows about a registered provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderEntry {
    /// The provider's id in this manager.
    pub id: ProviderId,
    /// The provider's process id.
    pub pid: u32,
    /// The provider's name.
    pub name: String,
    /// Where it is in the session.
    pub phase: ProviderPhase,
    /// Why it was lost, when it was.
    pub lost_reason: Option<String>,
    /// Categories the provider said it knows.
    pub known_categories: Vec<String>,
}

/// An action the manager's event loop must carry out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Send Start to a provider.
    StartProvider {
        /// Which provider.
        id: ProviderId,
        /// How the provider clears its buffer first.
        disposition: BufferDisposition,
    },
    /// Send Stop to a provider.
    StopProvider {
        /// Which provider.
        id: ProviderId,
    },
    /// Send Terminate to a provider.
    TerminateProvider {
        /// Which provider.
        id: ProviderId,
    },
    /// Copy the provider's buffer into the archive (it has stopped, or was lost).
    CollectProvider {
        /// Which provider.
        id: ProviderId,
    },
    /// Tell the controlling client that Start is acknowledged.
    AcknowledgeStart {
        /// Providers that did not answer Start in time.
        timed_out: Vec<ProviderId>,
    },
    /// Tell the controlling client that Stop finished.
    AcknowledgeStop {
        /// Providers that did not answer Stop in time.
        timed_out: Vec<ProviderId>,
    },
    /// The session is back to READY after Terminate.
    Terminated,
    /// The session state changed (`OnSessionStateChange`).
    StateChanged(SessionState),
}

/// The state machine of one tracing session and its provider registry.
#[derive(Debug)]
pub struct Session {
    state: SessionState,
    config: SessionConfig,
    providers: BTreeMap<ProviderId, ProviderEntry>,
    next_provider_id: ProviderId,
    /// When the current Start or Stop gives up waiting for providers.
    deadline: Option<Instant>,
    /// Whether the Stop in progress (or the last one) writes results.
    write_results: bool,
    /// The last Stop wrote results: the next Start must clear the entire buffer.
    force_clear_on_start: bool,
    alerts: VecDeque<String>,
    alerts_dropped: u64,
    /// The categories of providers that were lost (at most `MAX_CATEGORIES`).
    lost_categories: BTreeSet<String>,
    aborted: bool,
}

impl Default for Session {
    fn default() -> Self {
        Self::new()
    }
}

impl Session {
    /// A session in READY with no providers.
    pub fn new() -> Self {
        Self {
            state: SessionState::Ready,
            config: SessionConfig::default(),
            providers: BTreeMap::new(),
            next_provider_id: 1,
            deadline: None,
            write_results: false,
            force_clear_on_start: false,
            alerts: VecDeque::new(),
            alerts_dropped: 0,
            lost_categories: BTreeSet::new(),
            aborted: false,
        }
    }

    /// The current state.
    pub fn state(&self) -> SessionState {
        self.state
    }

    /// The configuration given to [`Session::initialize`].
    pub fn config(&self) -> &SessionConfig {
        &self.config
    }

    /// `GetProviders`: every registered provider, lost ones included, by id.
    pub fn providers(&self) -> impl Iterator<Item = &ProviderEntry> {
        self.providers.values()
    }

    /// One provider, by id.
    pub fn provider(&self, id: ProviderId) -> Option<&ProviderEntry> {
        self.providers.get(&id)
    }

    /// `GetKnownCategories`: the union of what providers declared, sorted, without duplicates.
    pub fn known_categories(&self) -> Vec<String> {
        let set: BTreeSet<&str> = self
            .providers
            .values()
            .flat_map(|p| p.known_categories.iter().map(String::as_str))
            .chain(self.lost_categories.iter().map(String::as_str))
            .collect();
        set.into_iter().map(str::to_owned).collect()
    }

    /// Alerts that arrived while the queue was full, and so were not kept.
    pub fn alerts_dropped(&self) -> u64 {
        self.alerts_dropped
    }

    /// `InitializeTracing`: READY → INITIALIZED.
    pub fn initialize(&mut self, config: SessionConfig) -> Result<Vec<Command>, StateError> {
        if self.state != SessionState::Ready {
            return Err(StateError {
                request: "initialize tracing",
                state: self.state,
            });
        }
        self.config = config;
        self.aborted = false;
        self.force_clear_on_start = false;
        Ok(self.transition(SessionState::Initialized))
    }

    /// A provider registered. It gets an id; if tracing is starting or started, it is started at
    /// once with CLEAR_ENTIRE.
    pub fn register_provider(
        &mut self,
        pid: u32,
        name: &str,
        known_categories: Vec<String>,
    ) -> (ProviderId, Vec<Command>) {
        let id = self.next_provider_id;
        self.next_provider_id = self.next_provider_id.wrapping_add(1).max(1);
        let mut entry = ProviderEntry {
            id,
            pid,
            name: name.to_owned(),
            phase: ProviderPhase::Idle,
            lost_reason: None,
            known_categories,
        };
        let mut commands = Vec::new();
        if matches!(self.state, SessionState::Starting | SessionState::Started) {
            entry.phase = ProviderPhase::Starting;
            commands.push(Command::StartProvider {
                id,
                disposition: BufferDisposition::ClearEntire,
            });
        }
        self.providers.insert(id, entry);
        (id, commands)
    }

    /// Take a provider id for a source that is not a registered provider (the built-in
    /// kernel provider writing its own section): no provider will get it.
    pub fn reserve_provider_id(&mut self) -> ProviderId {
        let id = self.next_provider_id;
        self.next_provider_id = self.next_provider_id.wrapping_add(1).max(1);
        id
    }

    /// `StartTracing`. `disposition` None means RETAIN (or CLEAR_ENTIRE after a Stop that wrote
    /// results).
    pub fn start(
        &mut self,
        disposition: Option<BufferDisposition>,
        now: Instant,
    ) -> Result<Vec<Command>, StartError> {
        match self.state {
            SessionState::Ready => return Err(StartError::NotInitialized),
            SessionState::Starting | SessionState::Started => {
                return Err(StartError::AlreadyStarted)
            }
            SessionState::Stopping => return Err(StartError::Stopping),
            SessionState::Terminating => return Err(StartError::Terminating),
            SessionState::Initialized | SessionState::Stopped => {}
        }
        let disposition = if self.force_clear_on_start {
            BufferDisposition::ClearEntire
        } else {
            disposition.unwrap_or(BufferDisposition::Retain)
        };
        self.force_clear_on_start = false;
        self.aborted = false;
        let mut commands = self.transition(SessionState::Starting);
        for p in self.providers.values_mut() {
            if p.phase != ProviderPhase::Lost {
                p.phase = ProviderPhase::Starting;
                commands.push(Command::StartProvider {
                    id: p.id,
                    disposition,
                });
            }
        }
        self.deadline = Some(now + self.config.start_timeout);
        commands.extend(self.advance(now));
        Ok(commands)
    }

    /// A provider sent STARTED.
    pub fn provider_started(&mut self, id: ProviderId, now: Instant) -> Vec<Command> {
        if let Some(p) = self.providers.get_mut(&id) {
            if p.phase == ProviderPhase::Starting {
                p.phase = ProviderPhase::Started;
            }
        }
        self.advance(now)
    }

    /// `StopTracing`. With `write_results`, every provider's buffer is collected once it stops.
    pub fn stop(&mut self, write_results: bool, now: Instant) -> Result<Vec<Command>, StopError> {
        match self.state {
            SessionState::Ready => return Err(StopError::NotInitialized),
            SessionState::Initialized | SessionState::Stopped => {
                return Err(if self.aborted {
                    StopError::Aborted
                } else {
                    StopError::NotStarted
                })
            }
            SessionState::Stopping | SessionState::Terminating => {
                return Err(StopError::NotStarted)
            }
            SessionState::Starting | SessionState::Started => {}
        }
        self.write_results = write_results;
        let mut commands = self.transition(SessionState::Stopping);
        for p in self.providers.values_mut() {
            if matches!(p.phase, ProviderPhase::Starting | ProviderPhase::Started) {
                p.phase = ProviderPhase::Stopping;
                commands.push(Command::StopProvider { id: p.id });
            }
        }
        self.deadline = Some(now + self.config.stop_timeout);
        commands.extend(self.advance(now));
        Ok(commands)
    }

    /// A provider sent STOPPED. Its buffer is collected now if the stop writes results, or if
    /// the provider stopped on its own while the session is tracing (its process is exiting:
    /// its data is final, and the trace must not lose it).
    pub fn provider_stopped(&mut self, id: ProviderId, now: Instant) -> Vec<Command> {
        let mut commands = Vec::new();
        if let Some(p) = self.providers.get_mut(&id) {
            if matches!(
                p.phase,
                ProviderPhase::Stopping | ProviderPhase::Started | ProviderPhase::Starting
            ) {
                p.phase = ProviderPhase::Stopped;
                let stopping_with_results =
                    self.write_results && self.state == SessionState::Stopping;
                let tracing = matches!(self.state, SessionState::Starting | SessionState::Started);
                if stopping_with_results || tracing {
                    commands.push(Command::CollectProvider { id });
                }
            }
        }
        commands.extend(self.advance(now));
        commands
    }

    /// A provider is gone: its connection closed, it broke the protocol, or it crashed. Its
    /// buffer is still collected (salvaged) when the session is tracing or stopping with results.
    pub fn provider_lost(&mut self, id: ProviderId, reason: &str, now: Instant) -> Vec<Command> {
        let mut commands = Vec::new();
        if let Some(p) = self.providers.get_mut(&id) {
            if p.phase == ProviderPhase::Lost {
                return commands;
            }
            let was_tracing = matches!(
                p.phase,
                ProviderPhase::Starting | ProviderPhase::Started | ProviderPhase::Stopping
            );
            p.phase = ProviderPhase::Lost;
            p.lost_reason = Some(reason.to_owned());
            // A lost provider keeps no list of its own: its categories join one set of the
            // session's, of at most MAX_CATEGORIES (providers that come and go in a loop do
            // not grow the manager's memory by their categories).
            for category in std::mem::take(&mut p.known_categories) {
                if self.lost_categories.len() >= fxtrace::protocol::control::MAX_CATEGORIES {
                    break;
                }
                self.lost_categories.insert(category);
            }
            let collecting = match self.state {
                SessionState::Starting | SessionState::Started => true,
                SessionState::Stopping => self.write_results,
                _ => false,
            };
            if was_tracing && collecting {
                commands.push(Command::CollectProvider { id });
            }
        }
        commands.extend(self.advance(now));
        commands
    }

    /// Tracing failed as a whole (the output could not be written, …). The session stops and
    /// the next Stop reports ABORTED.
    pub fn abort(&mut self, now: Instant) -> Vec<Command> {
        self.aborted = true;
        match self.state {
            SessionState::Starting | SessionState::Started => {
                let mut commands = self.stop(false, now).unwrap_or_default();
                self.aborted = true;
                commands.extend(self.advance(now));
                commands
            }
            _ => Vec::new(),
        }
    }

    /// `TerminateTracing` (or the controlling client went away).
    pub fn terminate(&mut self, now: Instant) -> Result<Vec<Command>, StateError> {
        if matches!(self.state, SessionState::Ready | SessionState::Terminating) {
            return Err(StateError {
                request: "terminate tracing",
                state: self.state,
            });
        }
        let collect = self.state == SessionState::Started || self.state == SessionState::Starting;
        let mut commands = self.transition(SessionState::Terminating);
        for p in self.providers.values_mut() {
            if p.phase != ProviderPhase::Lost {
                if collect && matches!(p.phase, ProviderPhase::Starting | ProviderPhase::Started) {
                    commands.push(Command::StopProvider { id: p.id });
                }
                p.phase = ProviderPhase::Terminating;
                commands.push(Command::TerminateProvider { id: p.id });
            }
        }
        self.deadline = Some(now + self.config.stop_timeout);
        commands.extend(self.advance(now));
        Ok(commands)
    }

    /// A provider acknowledged Terminate by closing its connection.
    pub fn provider_terminated(&mut self, id: ProviderId, now: Instant) -> Vec<Command> {
        if let Some(p) = self.providers.get_mut(&id) {
            p.phase = ProviderPhase::Lost;
            p.lost_reason.get_or_insert_with(|| "terminated".to_owned());
        }
        self.advance(now)
    }

    /// A provider raised an alert. Kept for [`Session::watch_alert`]; counted when the queue is
    /// full.
    pub fn alert(&mut self, name: &str) {
        if self.alerts.len() >= ALERT_QUEUE_DEPTH {
            self.alerts_dropped += 1;
        } else {
            self.alerts.push_back(name.to_owned());
        }
    }

    /// `WatchAlert`: the oldest queued alert, if any.
    pub fn watch_alert(&mut self) -> Option<String> {
        self.alerts.pop_front()
    }

    /// Time passes: acknowledge a Start or Stop whose providers did not all answer in time.
    pub fn tick(&mut self, now: Instant) -> Vec<Command> {
        self.advance(now)
    }

    /// When [`Session::tick`] must next be called, if a timeout is pending.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    fn transition(&mut self, to: SessionState) -> Vec<Command> {
        self.state = to;
        vec![Command::StateChanged(to)]
    }

    /// Completes STARTING, STOPPING and TERMINATING when every provider answered or the
    /// deadline passed.
    fn advance(&mut self, now: Instant) -> Vec<Command> {
        let expired = self.deadline.is_some_and(|d| now >= d);
        let pending = |phase: ProviderPhase| -> Vec<ProviderId> {
            self.providers
                .values()
                .filter(|p| p.phase == phase)
                .map(|p| p.id)
                .collect()
        };
        match self.state {
            SessionState::Starting => {
                let waiting = pending(ProviderPhase::Starting);
                if waiting.is_empty() || expired {
                    self.deadline = None;
                    let mut commands = self.transition(SessionState::Started);
                    commands.push(Command::AcknowledgeStart { timed_out: waiting });
                    return commands;
                }
            }
            SessionState::Stopping => {
                let waiting = pending(ProviderPhase::Stopping);
                if waiting.is_empty() || expired {
                    self.deadline = None;
                    let mut commands = Vec::new();
                    if self.write_results {
                        for &id in &waiting {
                            commands.push(Command::CollectProvider { id });
                        }
                        self.force_clear_on_start = true;
                    }
                    for p in self.providers.values_mut() {
                        if waiting.contains(&p.id) {
                            p.phase = ProviderPhase::Lost;
                            p.lost_reason = Some("did not acknowledge Stop in time".to_owned());
                        }
                    }
                    commands.extend(self.transition(SessionState::Stopped));
                    commands.push(Command::AcknowledgeStop { timed_out: waiting });
                    return commands;
                }
            }
            SessionState::Terminating => {
                let waiting = pending(ProviderPhase::Terminating);
                if waiting.is_empty() || expired {
                    self.deadline = None;
                    self.providers.clear();
                    let mut commands = self.transition(SessionState::Ready);
                    commands.push(Command::Terminated);
                    return commands;
                }
            }
            _ => {}
        }
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn started_session(n: u32) -> (Session, Vec<ProviderId>, Instant) {
        let now = Instant::now();
        let mut s = Session::new();
        s.initialize(SessionConfig::default()).unwrap();
        let ids: Vec<_> = (0..n)
            .map(|i| s.register_provider(100 + i, "p", vec![]).0)
            .collect();
        s.start(None, now).unwrap();
        for &id in &ids {
            s.provider_started(id, now);
        }
        assert_eq!(s.state(), SessionState::Started);
        (s, ids, now)
    }

    #[test]
    fn fidl_numbering_matches_the_spec() {
        assert_eq!(SessionState::Ready.to_u8(), 1);
        assert_eq!(SessionState::Terminating.to_u8(), 7);
        assert_eq!(StartError::NotInitialized as u32, 1);
        assert_eq!(StartError::Terminating as u32, 4);
        assert_eq!(StopError::Aborted as u32, 3);
    }

    #[test]
    fn start_errors_in_each_state() {
        let now = Instant::now();
        let mut s = Session::new();
        assert_eq!(s.start(None, now), Err(StartError::NotInitialized));
        s.initialize(SessionConfig::default()).unwrap();
        s.start(None, now).unwrap();
        // No providers: acknowledged at once.
        assert_eq!(s.state(), SessionState::Started);
        assert_eq!(s.start(None, now), Err(StartError::AlreadyStarted));
        s.register_provider(1, "slow", vec![]);
        s.stop(true, now).unwrap();
        assert_eq!(s.state(), SessionState::Stopping);
        assert_eq!(s.start(None, now), Err(StartError::Stopping));
        s.terminate(now).unwrap();
        assert_eq!(s.start(None, now), Err(StartError::Terminating));
    }

    #[test]
    fn stop_errors_in_each_state() {
        let now = Instant::now();
        let mut s = Session::new();
        assert_eq!(s.stop(true, now), Err(StopError::NotInitialized));
        s.initialize(SessionConfig::default()).unwrap();
        assert_eq!(s.stop(true, now), Err(StopError::NotStarted));
        s.start(None, now).unwrap();
        s.stop(false, now).unwrap();
        assert_eq!(s.state(), SessionState::Stopped);
        assert_eq!(s.stop(true, now), Err(StopError::NotStarted));
    }

    #[test]
    fn start_waits_for_every_provider_then_acknowledges() {
        let now = Instant::now();
        let mut s = Session::new();
        s.initialize(SessionConfig::default()).unwrap();
        let (a, _) = s.register_provider(10, "a", vec![]);
        let (b, _) = s.register_provider(11, "b", vec![]);
        let cmds = s.start(Some(BufferDisposition::ClearEntire), now).unwrap();
        assert!(cmds.contains(&Command::StartProvider {
            id: a,
            disposition: BufferDisposition::ClearEntire
        }));
        assert!(cmds.contains(&Command::StartProvider {
            id: b,
            disposition: BufferDisposition::ClearEntire
        }));
        assert_eq!(s.state(), SessionState::Starting);
        assert!(s.provider_started(a, now).is_empty());
        assert_eq!(s.state(), SessionState::Starting);
        let cmds = s.provider_started(b, now);
        assert_eq!(s.state(), SessionState::Started);
        assert!(cmds.contains(&Command::AcknowledgeStart { timed_out: vec![] }));
    }

    #[test]
    fn start_is_acknowledged_after_the_timeout() {
        let now = Instant::now();
        let mut s = Session::new();
        let config = SessionConfig {
            start_timeout: Duration::from_millis(100),
            ..SessionConfig::default()
        };
        s.initialize(config).unwrap();
        let (a, _) = s.register_provider(10, "silent", vec![]);
        s.start(None, now).unwrap();
        assert!(s.tick(now + Duration::from_millis(99)).is_empty());
        assert_eq!(s.deadline(), Some(now + Duration::from_millis(100)));
        let cmds = s.tick(now + Duration::from_millis(100));
        assert_eq!(s.state(), SessionState::Started);
        assert!(cmds.contains(&Command::AcknowledgeStart { timed_out: vec![a] }));
    }

    #[test]
    fn stop_collects_each_provider_once_and_restart_clears() {
        let (mut s, ids, now) = started_session(2);
        let cmds = s.stop(true, now).unwrap();
        assert_eq!(
            cmds.iter()
                .filter(|c| matches!(c, Command::StopProvider { .. }))
                .count(),
            2
        );
        let c0 = s.provider_stopped(ids[0], now);
        assert_eq!(c0, vec![Command::CollectProvider { id: ids[0] }]);
        let c1 = s.provider_stopped(ids[1], now);
        assert!(c1.contains(&Command::CollectProvider { id: ids[1] }));
        assert!(c1.contains(&Command::AcknowledgeStop { timed_out: vec![] }));
        assert_eq!(s.state(), SessionState::Stopped);
        // After a stop that wrote results, RETAIN is overridden by CLEAR_ENTIRE.
        let cmds = s.start(Some(BufferDisposition::Retain), now).unwrap();
        assert!(cmds.contains(&Command::StartProvider {
            id: ids[0],
            disposition: BufferDisposition::ClearEntire
        }));
    }

    #[test]
    fn stop_without_results_collects_nothing_and_retain_is_kept() {
        let (mut s, ids, now) = started_session(1);
        s.stop(false, now).unwrap();
        assert!(s
            .provider_stopped(ids[0], now)
            .iter()
            .all(|c| !matches!(c, Command::CollectProvider { .. })));
        let cmds = s.start(None, now).unwrap();
        assert!(cmds.contains(&Command::StartProvider {
            id: ids[0],
            disposition: BufferDisposition::Retain
        }));
    }

    #[test]
    fn stop_timeout_salvages_silent_providers() {
        let (mut s, ids, now) = started_session(2);
        s.stop(true, now).unwrap();
        s.provider_stopped(ids[0], now);
        let later = now + DEFAULT_STOP_TIMEOUT;
        let cmds = s.tick(later);
        assert!(cmds.contains(&Command::CollectProvider { id: ids[1] }));
        assert!(cmds.contains(&Command::AcknowledgeStop {
            timed_out: vec![ids[1]]
        }));
        assert_eq!(s.provider(ids[1]).unwrap().phase, ProviderPhase::Lost);
    }

    #[test]
    fn lost_provider_is_salvaged_and_does_not_block_stop() {
        let (mut s, ids, now) = started_session(2);
        let cmds = s.provider_lost(ids[1], "killed", now);
        assert_eq!(cmds, vec![Command::CollectProvider { id: ids[1] }]);
        assert_eq!(s.provider_lost(ids[1], "again", now), vec![]);
        s.stop(true, now).unwrap();
        let cmds = s.provider_stopped(ids[0], now);
        assert!(cmds.contains(&Command::AcknowledgeStop { timed_out: vec![] }));
        assert_eq!(
            s.provider(ids[1]).unwrap().lost_reason.as_deref(),
            Some("killed")
        );
    }

    #[test]
    fn provider_stopping_on_its_own_mid_trace_is_collected_once() {
        let (mut s, ids, now) = started_session(2);
        let cmds = s.provider_stopped(ids[0], now);
        assert_eq!(cmds, vec![Command::CollectProvider { id: ids[0] }]);
        assert_eq!(s.provider(ids[0]).unwrap().phase, ProviderPhase::Stopped);
        // It then disconnects: nothing more to collect, and the session stops without it.
        assert!(s.provider_terminated(ids[0], now).is_empty());
        let cmds = s.stop(true, now).unwrap();
        assert!(!cmds.contains(&Command::StopProvider { id: ids[0] }));
        let cmds = s.provider_stopped(ids[1], now);
        assert!(cmds.contains(&Command::CollectProvider { id: ids[1] }));
        assert!(!cmds.contains(&Command::CollectProvider { id: ids[0] }));
        assert!(cmds.contains(&Command::AcknowledgeStop { timed_out: vec![] }));
    }

    #[test]
    fn reserved_ids_are_never_given_to_providers() {
        let mut s = Session::new();
        let reserved = s.reserve_provider_id();
        let (id, _) = s.register_provider(1, "p", vec![]);
        assert_eq!(reserved, 1);
        assert_eq!(id, 2);
        assert!(s.provider(reserved).is_none());
    }

    #[test]
    fn late_provider_is_started_at_once_with_clear_entire() {
        let (mut s, _, _) = started_session(1);
        let (id, cmds) = s.register_provider(77, "late", vec![]);
        assert_eq!(
            cmds,
            vec![Command::StartProvider {
                id,
                disposition: BufferDisposition::ClearEntire
            }]
        );
    }

    #[test]
    fn restart_several_times() {
        let (mut s, ids, now) = started_session(1);
        for _ in 0..3 {
            s.stop(true, now).unwrap();
            s.provider_stopped(ids[0], now);
            assert_eq!(s.state(), SessionState::Stopped);
            s.start(None, now).unwrap();
            s.provider_started(ids[0], now);
            assert_eq!(s.state(), SessionState::Started);
        }
    }

    #[test]
    fn terminate_returns_to_ready() {
        let (mut s, ids, now) = started_session(2);
        let cmds = s.terminate(now).unwrap();
        assert_eq!(
            cmds.iter()
                .filter(|c| matches!(c, Command::TerminateProvider { .. }))
                .count(),
            2
        );
        assert_eq!(s.state(), SessionState::Terminating);
        s.provider_terminated(ids[0], now);
        let cmds = s.provider_terminated(ids[1], now);
        assert!(cmds.contains(&Command::Terminated));
        assert_eq!(s.state(), SessionState::Ready);
        assert_eq!(s.providers().count(), 0);
        assert!(s.terminate(now).is_err());
        s.initialize(SessionConfig::default()).unwrap();
    }

    #[test]
    fn initialize_twice_is_refused() {
        let mut s = Session::new();
        s.initialize(SessionConfig::default()).unwrap();
        let err = s.initialize(SessionConfig::default()).unwrap_err();
        assert_eq!(err.state, SessionState::Initialized);
        assert!(err.to_string().contains("INITIALIZED"));
    }

    #[test]
    fn alerts_are_queued_in_order_and_overflow_is_counted() {
        let mut s = Session::new();
        for i in 0..(ALERT_QUEUE_DEPTH + 3) {
            s.alert(&format!("a{i}"));
        }
        assert_eq!(s.alerts_dropped(), 3);
        assert_eq!(s.watch_alert().as_deref(), Some("a0"));
        assert_eq!(s.watch_alert().as_deref(), Some("a1"));
    }

    #[test]
    fn abort_makes_the_next_stop_report_aborted() {
        let (mut s, ids, now) = started_session(1);
        s.abort(now);
        s.provider_stopped(ids[0], now);
        assert_eq!(s.state(), SessionState::Stopped);
        assert_eq!(s.stop(true, now), Err(StopError::Aborted));
    }

    #[test]
    fn known_categories_are_the_sorted_union() {
        let mut s = Session::new();
        s.register_provider(1, "a", vec!["gfx".into(), "db".into()]);
        let (b, _) = s.register_provider(2, "b", vec!["db".into(), "net".into()]);
        assert_eq!(s.known_categories(), vec!["db", "gfx", "net"]);
        // A lost provider's categories stay known, in the session's one set.
        s.provider_lost(b, "gone", Instant::now());
        assert!(s.providers[&b].known_categories.is_empty());
        assert_eq!(s.known_categories(), vec!["db", "gfx", "net"]);
    }
}
