//! TSC clock: `rdtscp` ticks and ticks per second.
