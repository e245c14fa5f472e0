//! Asking the kernel, once and before a recording, whether LBR branch stacks can be sampled
//! for a process: what `fxtrace record --preload` says on the terminal, in one line (the
//! preloaded programs find the same and note it in the trace).

use super::attr::BranchSampling;
use super::session::{Capture, CaptureConfig};

/// Why LBR branch stacks cannot be sampled for process `pid` (its threads, user branches,
/// as the preload object samples them), in one line with the remedy
/// ([`super::events::Unsupported::summary`]), or `None` when they can. Opens the sampling
/// events and closes them at once.
pub fn lbr_unavailable(pid: u32) -> Option<String> {
    let config = CaptureConfig {
        switches: false,
        mmaps: false,
        lbr: Some(BranchSampling::default()),
        ring_pages: 1,
        ..CaptureConfig::process(pid)
    };
    match Capture::start(config, |_| {}) {
        Ok(capture) => {
            let why = capture
                .report()
                .unsupported
                .iter()
                .find(|u| u.what.contains("LBR"))
                .map(|u| u.summary.clone());
            let _ = capture.stop();
            why
        }
        // With switches off, LBR is all there was to open: its failure is the reason.
        Err(super::session::CaptureError::NothingToCapture { unavailable, why }) => Some(
            unavailable
                .into_iter()
                .find(|u| u.what.contains("LBR"))
                .map_or(why, |u| u.summary),
        ),
        Err(e) => Some(e.to_string()),
    }
}
