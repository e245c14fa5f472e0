//! What `fxtrace record` says around the recording besides the provider table: the category
//! filter (banner and summary) and the warning when no provider knows an enabled category.

use fxtrace::engine::CategoryFilter;

/// The category filter as the banner and the summary show it: `all`, or the list.
pub(crate) fn categories_shown(enabled: &[String]) -> String {
    if enabled.is_empty() {
        "all".to_owned()
    } else {
        enabled.join(",")
    }
}

/// The warning for a filter that no provider's declared categories match, if any. `known` is
/// the union of the providers' declared categories; `providers` how many connected.
pub(crate) fn category_warning(
    enabled: &[String],
    known: &[String],
    providers: usize,
) -> Option<String> {
    if enabled.is_empty() || providers == 0 {
        return None;
    }
    let shown = categories_shown(enabled);
    if known.is_empty() {
        return Some(format!(
            "note: the providers declared no categories, so -c {shown} could not be checked \
             against them; if the trace has no events, see `fxtrace stats` and the categories \
             your program writes"
        ));
    }
    let filter = CategoryFilter::new(enabled.iter().cloned());
    if known.iter().any(|k| filter.is_enabled(k)) {
        return None;
    }
    Some(format!(
        "warning: no provider knows any enabled category (-c {shown}): the trace holds no \
         events of theirs; the providers declared: {}",
        known.join(", ")
    ))
}

/// The preload object's option that turns its LBR sampling off (`=0`).
pub(crate) const PRELOAD_LBR_ENV: &str = "FXTRACE_PRELOAD_LBR";

/// Under `--preload`: why the preloaded programs will find no LBR, in one line with the
/// remedy (for the terminal, once), or `None` when they will sample it or were told not to
/// (`FXTRACE_PRELOAD_LBR=0`, `FXTRACE_PRELOAD_CAPTURE=none`).
pub(crate) fn preload_lbr_unavailable() -> Option<String> {
    let off =
        |name: &str, values: &[&str]| std::env::var(name).is_ok_and(|v| values.contains(&v.trim()));
    if off(PRELOAD_LBR_ENV, &["0", "false", "no", "off", ""])
        || off("FXTRACE_PRELOAD_CAPTURE", &["none"])
    {
        return None;
    }
    fxtrace::capture::probe::lbr_unavailable(std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_filter_is_shown_and_checked() {
        assert_eq!(categories_shown(&[]), "all");
        assert_eq!(categories_shown(&v(&["gfx", "net*"])), "gfx,net*");
        // All enabled, or nobody connected: nothing to say.
        assert_eq!(category_warning(&[], &v(&["gfx"]), 1), None);
        assert_eq!(category_warning(&v(&["x"]), &v(&["gfx"]), 0), None);
        // A match, exact or by prefix: nothing to say.
        assert_eq!(category_warning(&v(&["gfx"]), &v(&["gfx"]), 1), None);
        assert_eq!(category_warning(&v(&["ne*"]), &v(&["db", "net"]), 1), None);
        let w = category_warning(&v(&["nothing"]), &v(&["db", "net"]), 2).unwrap();
        assert!(w.starts_with("warning: no provider knows any enabled category"));
        assert!(
            w.contains("-c nothing") && w.contains("declared: db, net"),
            "{w}"
        );
        let n = category_warning(&v(&["nothing"]), &[], 1).unwrap();
        assert!(n.contains("declared no categories"), "{n}");
    }
}
