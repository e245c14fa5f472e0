//! The `fxtrace` command line.
fn main() {}
