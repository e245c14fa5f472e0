//! Category checks: which categories a trace enables, and the per-call-site cache.
//!
//! Algorithm: Fuchsia's call-site cache (`trace_site_t`, `engine.cc`) with the generation packed
//! into the site word instead of a reset chain: a site caches "enabled / disabled in generation
//! G"; a site whose generation differs from the current trace's is re-evaluated once. With no
//! trace started anywhere in the process the check is one relaxed load of a global and a
//! branch.

use std::sync::atomic::{AtomicU64, Ordering};

use super::context::Context;

/// Rules: the low 32 bits count the started or armed contexts in the process (incremented by
/// `start`, or by `arm`, which the start then takes over; decremented when a stop completes, or
/// by `disarm`); the high 32 bits count the times that count fell to 0 (every context stopped:
/// what a thread began before belongs to a trace that has stopped). One word, so that a thread
/// that sees a later start also sees the fall before it. Read by every category check.
/// ATOMICS: `Relaxed`: a hint that only decides whether to look further; a check racing with a
/// start or stop may answer either way, as in Fuchsia.
static ACTIVE_CONTEXTS: AtomicU64 = AtomicU64::new(0);

/// Is any context in this process tracing? One relaxed load.
#[inline(always)]
pub fn tracing_maybe_on() -> bool {
    // ATOMICS: see `ACTIVE_CONTEXTS`.
    ACTIVE_CONTEXTS.load(Ordering::Relaxed) as u32 != 0
}

/// A context started or armed: count it in [`tracing_maybe_on`].
pub(crate) fn context_active() {
    // ATOMICS: see `ACTIVE_CONTEXTS`.
    ACTIVE_CONTEXTS.fetch_add(1, Ordering::Relaxed);
}

/// A context's stop completed, or it was disarmed: stop counting it (the last one also ends
/// the quiet epoch: [`active_epoch`]).
pub(crate) fn context_inactive() {
    // ATOMICS: see `ACTIVE_CONTEXTS`.
    let _ = ACTIVE_CONTEXTS.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |word| {
        Some(one_context_left(word))
    });
}

/// The active-context word once one context has left.
fn one_context_left(word: u64) -> u64 {
    debug_assert_ne!(word as u32, 0, "a context left that was not counted");
    match word as u32 {
        1 => ((word >> 32) + 1) << 32,
        _ => word - 1,
    }
}

/// With a context maybe tracing ([`tracing_maybe_on`]), how many times every context of the
/// process had stopped before: what a thread began (a `tracing` span entered) under an
/// earlier value belongs to a trace that has stopped. One relaxed load for both answers.
#[cfg_attr(not(feature = "tracing"), allow(dead_code))]
#[inline]
pub(crate) fn active_epoch() -> Option<u32> {
    // ATOMICS: see `ACTIVE_CONTEXTS`.
    let word = ACTIVE_CONTEXTS.load(Ordering::Relaxed);
    (word as u32 != 0).then_some((word >> 32) as u32)
}

/// The categories a trace enables (`trace-provider/session.cc`): an empty list enables all; an
/// entry ending in `*` matches by prefix; other entries match exactly.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CategoryFilter {
    patterns: Vec<String>,
}

impl CategoryFilter {
    /// Every category enabled.
    pub fn all() -> Self {
        Self {
            patterns: Vec::new(),
        }
    }

    /// Exactly these categories (with `*` suffixes as prefix matches); empty means all.
    pub fn new<I, S>(patterns: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            patterns: patterns.into_iter().map(Into::into).collect(),
        }
    }

    /// Whether `category` is enabled.
    pub fn is_enabled(&self, category: &str) -> bool {
        self.patterns.is_empty()
            || self.patterns.iter().any(|p| match p.strip_suffix('*') {
                Some(prefix) => category.starts_with(prefix),
                None => p == category,
            })
    }
}

const SITE_UNKNOWN: u64 = 0;
const SITE_DISABLED: u64 = 1;
const SITE_ENABLED: u64 = 2;
const SITE_FLAGS: u64 = 3;

/// A call site's cached category answer. Put one in a `static` per trace point.
#[derive(Debug)]
pub struct CallSite {
    category: &'static str,
    /// Rules: written by any thread that evaluates the site (generation << 2 | flag); read by
    /// every check. ATOMICS: `Relaxed`: a cache of an answer that may be momentarily stale.
    state: AtomicU64,
}

impl CallSite {
    /// A site for `category`.
    pub const fn new(category: &'static str) -> Self {
        Self {
            category,
            state: AtomicU64::new(SITE_UNKNOWN),
        }
    }

    /// The site's category.
    pub fn category(&self) -> &'static str {
        self.category
    }

    /// The generation of the trace started last in the process, if this site's cached answer
    /// says its category is enabled there: the begin of a span without a read-side section
    /// (a hint, as [`super::context::latest_generation`]; the span's end writes only into
    /// that trace).
    #[inline(always)]
    pub(crate) fn enabled_in_latest(&self) -> Option<u32> {
        let latest = super::context::latest_generation();
        // ATOMICS: `Relaxed`: see `CallSite::state`.
        let state = self.state.load(Ordering::Relaxed);
        (state == ((latest as u64) << 2 | SITE_ENABLED) && latest != 0).then_some(latest)
    }
}

impl Context {
    /// Whether this site's category is enabled in the current trace of this context. Off (no
    /// context started in the process): one relaxed load and a branch. On: two more loads while
    /// the cached answer is for the current generation.
    #[inline]
    pub fn category_enabled(&self, site: &CallSite) -> bool {
        if !tracing_maybe_on() {
            return false;
        }
        let (started, generation) = self.inner().gate_generation_now();
        if !started {
            // Counted while armed: the event this check guards is lost (see `Context::arm`).
            self.inner().count_call_before_start(Some(site.category));
            return false;
        }
        // ATOMICS: `Relaxed`: see `CallSite::state`.
        let state = site.state.load(Ordering::Relaxed);
        if state >> 2 == generation as u64 {
            return state & SITE_FLAGS == SITE_ENABLED;
        }
        self.evaluate_site(site, generation)
    }

    #[cold]
    #[inline(never)]
    fn evaluate_site(&self, site: &CallSite, generation: u32) -> bool {
        match self
            .inner()
            .category_filter_enabled(generation, site.category)
        {
            Some(enabled) => {
                let flag = if enabled { SITE_ENABLED } else { SITE_DISABLED };
                // ATOMICS: `Relaxed`: see `CallSite::state`.
                site.state
                    .store(((generation as u64) << 2) | flag, Ordering::Relaxed);
                enabled
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_active_word_counts_contexts_and_the_times_all_stopped() {
        let word = 0;
        let word = word + 1; // a start
        let word = word + 1; // another
        let word = one_context_left(word);
        assert_eq!((word as u32, word >> 32), (1, 0), "one left: no epoch yet");
        let word = one_context_left(word);
        assert_eq!(
            (word as u32, word >> 32),
            (0, 1),
            "all stopped: the epoch moves"
        );
        let word = one_context_left(word + 1);
        assert_eq!((word as u32, word >> 32), (0, 2));
        // The epoch wraps without touching the count.
        let word = one_context_left((u64::from(u32::MAX) << 32) + 1);
        assert_eq!(word, 0);
    }

    #[test]
    fn filter_rules() {
        assert!(CategoryFilter::all().is_enabled("anything"));
        let f = CategoryFilter::new(["gfx", "kernel:*"]);
        assert!(f.is_enabled("gfx"));
        assert!(!f.is_enabled("gfx2"));
        assert!(f.is_enabled("kernel:sched"));
        assert!(f.is_enabled("kernel:"));
        assert!(!f.is_enabled("kernel"));
    }
}
