//! The status line of `fxtrace record` on a terminal: elapsed time, providers, what was
//! written so far (records, bytes), what the buffers hold, records dropped and the output
//! size, redrawn about once a second and cleared at the end (as `perf record` and
//! `tracebox` users expect). Nothing at all when standard error is not a terminal.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{HumanBytes, ProgressBar, ProgressDrawTarget, ProgressStyle};

use fxtrace_tools::manager::service::protocol::{BufferFill, SessionInfo};

/// How often the line is redrawn.
pub(crate) const INTERVAL: Duration = Duration::from_secs(1);

/// The status line, or nothing when standard error is not a terminal. Cheap to clone (all
/// clones draw the same line).
#[derive(Debug, Clone)]
pub(crate) struct StatusLine(Option<ProgressBar>);

impl StatusLine {
    /// A line on standard error if it is a terminal, else none.
    pub(crate) fn for_stderr() -> Self {
        if !std::io::stderr().is_terminal() {
            return Self(None);
        }
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        // Only the message, cut to the terminal's width (a wrapped line cannot be redrawn).
        if let Ok(style) = ProgressStyle::with_template("{wide_msg}") {
            bar.set_style(style);
        }
        Self(Some(bar))
    }

    /// Redraw with new figures.
    pub(crate) fn update(&self, figures: &SessionInfo) {
        if let Some(bar) = &self.0 {
            bar.set_message(line(figures));
        }
    }

    /// Print `text` above the line (the line is redrawn below it).
    pub(crate) fn println(&self, text: &str) {
        match &self.0 {
            Some(bar) if !bar.is_hidden() => bar.suspend(|| note!("{text}")),
            _ => note!("{text}"),
        }
    }

    /// Remove the line (before the summary).
    pub(crate) fn clear(&self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}

/// The line's text for `f`.
pub(crate) fn line(f: &SessionInfo) -> String {
    let elapsed = Duration::from_millis(f.elapsed_ms).as_secs();
    let providers = match f.providers {
        1 => "1 provider".to_owned(),
        n => format!("{n} providers"),
    };
    let fills = match f.fills.as_slice() {
        [] => String::new(),
        fills => format!(" | full: {}", BufferFill::list(fills, 3)),
    };
    format!(
        "fxtrace {}:{:02} | {providers} | {} records, {} to {} | {} buffered | {} dropped{fills}",
        elapsed / 60,
        elapsed % 60,
        f.records_written,
        HumanBytes(f.bytes_written),
        f.output,
        HumanBytes(f.buffered_bytes),
        f.records_dropped,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_shows_every_figure() {
        let f = SessionInfo {
            mode: "streaming".into(),
            buffer_size: 1 << 20,
            providers: 2,
            records_written: 1234,
            bytes_written: 3 << 20,
            buffered_bytes: 512 << 10,
            records_dropped: 7,
            elapsed_ms: 75_000,
            output: "t.fxt".into(),
            ..SessionInfo::default()
        };
        assert_eq!(
            line(&f),
            "fxtrace 1:15 | 2 providers | 1234 records, 3.00 MiB to t.fxt | 512.00 KiB \
             buffered | 7 dropped"
        );
        // Each provider's fill, the fullest first (as the status model lists them).
        let fill = |id, name: &str, percent| BufferFill {
            id,
            name: name.into(),
            percent,
        };
        let f = SessionInfo {
            fills: vec![
                fill(2, "ingest", 97),
                fill(1, "taskset", 3),
                fill(3, "a", 0),
                fill(4, "b\u{1b}", 0),
            ],
            ..f
        };
        assert!(
            line(&f).ends_with("| 7 dropped | full: ingest 97%, taskset 3%, a 0%, 1 more"),
            "{}",
            line(&f)
        );
    }
}
