//! What a conversion did besides writing events: every repair, drop and skip, counted.

use std::collections::BTreeMap;

use super::json::Micros;

/// Counts kept by [`super::ChromeJsonWriter`]. Nothing is dropped without being counted
/// here; [`ChromeStats::warnings`] turns the counts into sentences for the user.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChromeStats {
    /// Records read.
    pub records: u64,
    /// Trace events written (metadata events included).
    pub events_written: u64,
    /// Duration ends with no open begin on their thread: dropped.
    pub unmatched_ends_dropped: u64,
    /// Duration begins still open at the end of the trace: closed at the last timestamp.
    pub unclosed_begins_closed: u64,
    /// Async ends with no async begin open on their track (process, category, name, id):
    /// dropped.
    pub unmatched_async_ends_dropped: u64,
    /// Async begins never ended: closed at the last timestamp.
    pub unclosed_async_closed: u64,
    /// Duration begins beyond the bound of open slices (`read::slices`: 4096 on a thread,
    /// 262 144 in all, 65 536 threads): dropped, with their ends.
    pub begins_not_kept: u64,
    /// When [`ChromeStats::unclosed_begins_closed`] is nonzero: the timestamp used, in ns.
    pub closed_at_ns: Option<u64>,
    /// Durations (complete events, CPU slices) ending before they began: written with
    /// zero length.
    pub negative_durations: u64,
    /// Counter arguments that are not numbers (Chrome counters plot numbers only): dropped.
    pub counter_args_dropped: u64,
    /// Thread kernel objects with no `"process"` koid argument and no known process:
    /// their name could not be attached to a process and was dropped.
    pub thread_names_without_process: u64,
    /// Context switches whose outgoing thread was not the one the previous switch on that
    /// CPU brought in (a switch record is missing in between). The CPU slice is still
    /// closed at the new switch.
    pub switch_mismatches: u64,
    /// Context-switch arguments whose name or text was longer than [`crate::MAX_KEPT_NAME`]
    /// bytes, cut to at most that on the CPU slice they label (kept until the slice ends).
    pub switch_args_cut: u64,
    /// LAST_BRANCH blobs converted.
    pub lbr_samples: u64,
    /// LAST_BRANCH blobs whose payload did not decode: dropped.
    pub lbr_invalid: u64,
    /// Records with no Chrome JSON form, by kind (`userspace_object`, `blob`, …).
    pub not_converted: BTreeMap<&'static str, u64>,
    /// Buffer-overflow provider events, by provider id (the first
    /// [`fxtrace_format::MAX_PROVIDERS_LISTED`] providers).
    pub buffer_overflows: BTreeMap<u32, u64>,
    /// Buffer-overflow provider events of providers beyond those.
    pub buffer_overflows_not_listed: u64,
}

impl ChromeStats {
    /// One sentence per nonzero repair, drop or skip count, for standard error.
    pub fn warnings(&self) -> Vec<String> {
        let mut lines = Vec::new();
        let mut add = |n: u64, what: &str| {
            if n > 0 {
                lines.push(format!("{n} {what}"));
            }
        };
        add(
            self.unmatched_ends_dropped,
            "duration end event(s) without a matching begin on their thread were dropped",
        );
        add(
            self.unmatched_async_ends_dropped,
            "async end event(s) without a matching async begin were dropped",
        );
        if self.unclosed_async_closed > 0 {
            let at = Micros(self.closed_at_ns.unwrap_or(0));
            lines.push(format!(
                "{} async begin event(s) without an end were closed at the last timestamp ({at} us)",
                self.unclosed_async_closed
            ));
        }
        let mut add = |n: u64, what: &str| {
            if n > 0 {
                lines.push(format!("{n} {what}"));
            }
        };
        add(
            self.begins_not_kept,
            "duration begin event(s) beyond the bound of open slices (4096 on a thread, 262144 \
             in all) were dropped with their ends",
        );
        if self.unclosed_begins_closed > 0 {
            let at = Micros(self.closed_at_ns.unwrap_or(0));
            lines.push(format!(
                "{} duration begin event(s) without an end were closed at the last timestamp ({at} us)",
                self.unclosed_begins_closed
            ));
        }
        let mut add = |n: u64, what: &str| {
            if n > 0 {
                lines.push(format!("{n} {what}"));
            }
        };
        add(
            self.negative_durations,
            "duration(s) ending before they began were written with zero length",
        );
        add(
            self.counter_args_dropped,
            "non-numeric counter argument(s) were dropped",
        );
        let kept = crate::MAX_KEPT_NAME;
        add(
            self.switch_args_cut,
            &format!(
                "context-switch argument(s) with a name or text longer than {kept} bytes were cut to at most {kept} on their CPU slices"
            ),
        );
        add(
            self.thread_names_without_process,
            "thread name(s) with no process koid were dropped",
        );
        add(self.switch_mismatches, &self.switch_mismatch_warning());
        add(
            self.lbr_invalid,
            "LAST_BRANCH blob(s) with an invalid payload were dropped",
        );
        if !self.not_converted.is_empty() {
            let kinds: Vec<String> = self
                .not_converted
                .iter()
                .map(|(k, n)| format!("{k}: {n}"))
                .collect();
            lines.push(format!(
                "records with no Chrome JSON form were skipped ({})",
                kinds.join(", ")
            ));
        }
        // A line per provider, the first few; then how many more.
        const LISTED: usize = 16;
        for (provider, n) in self.buffer_overflows.iter().take(LISTED) {
            lines.push(format!(
                "provider {provider} reported a buffer overflow {n} time(s): records were dropped while tracing"
            ));
        }
        let more = self.buffer_overflows.len().saturating_sub(LISTED) as u64;
        let events = self.buffer_overflows_not_listed;
        if more > 0 || events > 0 {
            lines.push(format!(
                "{more} more providers reported buffer overflows (and {events} overflow events \
                 of providers not listed): records were dropped while tracing"
            ));
        }
        lines
    }

    /// What [`ChromeStats::switch_mismatches`] means, as far as the trace tells (after the
    /// count).
    fn switch_mismatch_warning(&self) -> String {
        // A loss shows in the trace as a buffer overflow event (the kernel section writes one
        // at its first lost perf record; the manager, for a provider that dropped records).
        let why = if self.buffer_overflows.is_empty() && self.buffer_overflows_not_listed == 0 {
            "the trace reports no lost records: the kernel emitted no switch event between \
             them (some kernels emit none for some switches, e.g. when a CPU leaves its idle \
             task; ftrace shows the same gaps)"
        } else {
            "records were lost (see the buffer overflows below), or the kernel emitted no \
             switch event between them"
        };
        format!(
            "context switch(es) switched out a thread other than the one the previous switch \
             on their CPU switched in: {why}; the earlier thread's CPU slice runs until the \
             later switch"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_name_every_nonzero_count() {
        assert!(ChromeStats::default().warnings().is_empty());
        let mut s = ChromeStats {
            unmatched_ends_dropped: 2,
            unclosed_begins_closed: 1,
            closed_at_ns: Some(1_500),
            lbr_invalid: 3,
            ..ChromeStats::default()
        };
        s.not_converted.insert("userspace_object", 4);
        s.buffer_overflows.insert(7, 1);
        let mut switches = ChromeStats {
            switch_mismatches: 20,
            ..ChromeStats::default()
        };
        let no_loss = &switches.warnings()[0];
        assert!(
            no_loss.starts_with("20 context switch(es) switched out a thread other than")
                && no_loss
                    .contains("the trace reports no lost records: the kernel emitted no switch")
                && !no_loss.contains("records missing"),
            "{no_loss}"
        );
        switches.buffer_overflows.insert(1, 1);
        assert!(switches.warnings()[0].contains("records were lost"));
        let w = s.warnings();
        assert_eq!(
            w,
            [
                "2 duration end event(s) without a matching begin on their thread were dropped",
                "1 duration begin event(s) without an end were closed at the last timestamp (1.500 us)",
                "3 LAST_BRANCH blob(s) with an invalid payload were dropped",
                "records with no Chrome JSON form were skipped (userspace_object: 4)",
                "provider 7 reported a buffer overflow 1 time(s): records were dropped while tracing",
            ]
        );
    }
}
