//! What a manager says of its session: [`Manager::session_info`], the one status model (what
//! `fxtrace status`, `fxtrace stop` and the progress line of `fxtrace record` show), the answer
//! to a controller's `status` (`fxtrace record`'s session answers it as the trace service does),
//! and the frozen binary answer to a status client of an earlier revision, made from the same
//! model.

use super::Manager;
use crate::manager::archive::truncate_str;
use crate::manager::service::protocol::{
    BufferFill, FromService, ProviderInfo, Reply, Request, SessionInfo, StatusReport,
    MAX_FILLS_LISTED,
};
use crate::manager::session::ProviderPhase;
use crate::manager::wire::{
    Frame, SessionFigures, StatusEntry, StatusReply, MAX_OUTPUT_NAME_LEN, MAX_STATUS_PROVIDERS,
};

impl Manager {
    /// The session as `status` shows it, read now (buffers' headers included).
    pub fn session_info(&self) -> SessionInfo {
        let mut buffered_bytes = 0u64;
        let mut records_dropped = 0u64;
        let mut problems: Vec<String> = self.problems.lines().collect();
        let mut fills = Vec::new();
        for t in self.tracees.values() {
            // Saturating: many providers' figures (each within its own buffer's bounds).
            match &t.buffer {
                Some(buffer) if !t.ignore_data => match t.drain.live(buffer) {
                    Ok(live) => {
                        fills.push(BufferFill {
                            id: t.id,
                            name: t.name.clone(),
                            percent: live.fill_percent,
                        });
                        buffered_bytes = buffered_bytes.saturating_add(live.buffered_bytes);
                        records_dropped = records_dropped.saturating_add(live.records_dropped);
                        problems.extend(live.problem.map(|p| t.problem_line(&p)));
                    }
                    // The header is the provider's memory: one that does not validate adds
                    // nothing to the figures, and says why.
                    Err(e) => problems.push(
                        t.problem_line(&format!("{e}; its buffer is left out of the figures")),
                    ),
                },
                _ => {
                    records_dropped =
                        records_dropped.saturating_add(t.drain.stats().records_dropped)
                }
            }
        }
        // The fullest first.
        fills.sort_by_key(|f| (std::cmp::Reverse(f.percent), f.id));
        fills.truncate(MAX_FILLS_LISTED);
        let session = self.session.config();
        SessionInfo {
            session: self.config.session_id,
            state: self.session.state().name().to_owned(),
            mode: session.buffering_mode.as_str().to_owned(),
            buffer_size: session.buffer_size_bytes,
            categories: Some(session.categories.clone()),
            providers: self.tracees.values().filter(|t| t.conn.is_some()).count() as u32,
            records_written: self.archive.records_written(),
            bytes_written: self.archive.bytes_written(),
            buffered_bytes,
            records_dropped,
            elapsed_ms: u64::try_from(self.created.elapsed().as_millis()).unwrap_or(u64::MAX),
            output: truncate_str(&self.config.output_name, MAX_OUTPUT_NAME_LEN).to_owned(),
            owner_uid: self.config.owner_uid,
            detached: self.config.detached,
            problems,
            fills,
        }
    }

    /// Note a problem of the session for `status` (those of its providers' events are noted
    /// as they happen).
    pub fn note_problem(&mut self, line: String) {
        self.problems.push(line);
    }

    /// The answer to a controller's request: `status` is this session, its providers and
    /// their categories; the trace service's other requests are refused.
    pub(super) fn controller_reply(&self, body: &str) -> FromService {
        FromService::Reply(match Request::parse(body) {
            Ok(Request::Status {}) => Reply::Status(self.status_report()),
            Ok(_) => Reply::Error {
                error: format!(
                    "{} is the socket of `fxtrace record`, which answers `status` only: start \
                     and stop sessions with the trace service (`fxtrace daemon`)",
                    self.socket_path().display()
                ),
            },
            Err(e) => Reply::Error {
                error: e.to_string(),
            },
        })
    }

    fn status_report(&self) -> StatusReport {
        let providers = self
            .tracees
            .values()
            .filter(|t| t.conn.is_some())
            .map(|t| ProviderInfo {
                id: t.id,
                pid: t.pid,
                name: t.name.clone(),
                uid: t.uid,
                state: self
                    .session
                    .provider(t.id)
                    .map_or("?", |p| p.phase.name())
                    .to_owned(),
            })
            .collect();
        StatusReport {
            pid: std::process::id(),
            uid: nix::unistd::geteuid().as_raw(),
            socket: self.socket_path().display().to_string(),
            providers,
            sessions: vec![self.session_info()],
            providers_omitted: 0,
            recording: true,
            categories: self.session.known_categories(),
        }
    }

    /// The frozen binary answer to a status client of an earlier revision (with the figures
    /// when it asked).
    pub(super) fn legacy_status_reply(&self, figures: bool) -> Frame {
        let providers = self
            .session
            .providers()
            .filter(|p| p.phase != ProviderPhase::Lost)
            .map(|p| StatusEntry {
                id: p.id,
                pid: p.pid,
                name: p.name.clone(),
            })
            .take(MAX_STATUS_PROVIDERS)
            .collect();
        // As many as a reply carries (the service cuts its list the same way).
        let mut categories = self.session.known_categories();
        categories.truncate(fxtrace::protocol::control::MAX_CATEGORIES);
        Frame::StatusReply(Box::new(StatusReply {
            state: self.session.state(),
            providers,
            categories,
            figures: figures.then(|| SessionFigures::of(&self.session_info())),
        }))
    }
}
