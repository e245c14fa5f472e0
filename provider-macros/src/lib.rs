//! Procedural macros for fxtrace. The `#[traced]` attribute lands here (issue: front ends).
