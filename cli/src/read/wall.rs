//! The wall-clock anchor: when a trace was taken. The manager writes one at the start of
//! every archive (right after the magic number, before any provider section): a Kernel
//! Object record of type process (1) for the recording process, named [`ANCHOR_NAME`], whose
//! `u64` arguments pair one reading of the trace clock (TSC ticks, and their rate) with
//! `CLOCK_REALTIME`, `CLOCK_MONOTONIC` and `CLOCK_BOOTTIME`, read together (the ticks are the
//! midpoint of two readings around the three clocks):
//!
//! | argument | value |
//! |---|---|
//! | [`TICKS_ARG`] | the trace clock, in ticks |
//! | [`TICKS_PER_SECOND_ARG`] | its rate |
//! | [`REALTIME_ARG`] | `CLOCK_REALTIME`, ns since 1970-01-01 00:00 UTC |
//! | [`MONOTONIC_ARG`] | `CLOCK_MONOTONIC`, ns |
//! | [`BOOTTIME_ARG`] | `CLOCK_BOOTTIME`, ns |
//!
//! A reader that does not know it sees a process named `fxtrace` (Perfetto shows no track
//! for a process without threads or events). Readers that know it ([`WallClock`]) give trace
//! times as wall-clock times, so that a span lines up with a log line.

use std::fmt;

use fxtrace_format::{
    ticks_to_ns, Arg, ArgValue, DecodedRecord, DecodedValue, KernelObject, ObjectType, StringRef,
};

/// Name of the anchor's Kernel Object record.
pub const ANCHOR_NAME: &str = "fxtrace";
/// Argument: the trace clock's ticks at the anchor.
pub const TICKS_ARG: &str = "fxtrace.clock.ticks";
/// Argument: the trace clock's ticks per second.
pub const TICKS_PER_SECOND_ARG: &str = "fxtrace.clock.ticks_per_second";
/// Argument: `CLOCK_REALTIME` at the anchor, ns since the epoch.
pub const REALTIME_ARG: &str = "fxtrace.clock.realtime_ns";
/// Argument: `CLOCK_MONOTONIC` at the anchor, ns.
pub const MONOTONIC_ARG: &str = "fxtrace.clock.monotonic_ns";
/// Argument: `CLOCK_BOOTTIME` at the anchor, ns.
pub const BOOTTIME_ARG: &str = "fxtrace.clock.boottime_ns";

/// One reading of the trace clock paired with the system's clocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WallClock {
    /// The trace clock, ticks.
    pub ticks: u64,
    /// Its rate.
    pub ticks_per_second: u64,
    /// `CLOCK_REALTIME`, ns since the epoch.
    pub realtime_ns: u64,
    /// `CLOCK_MONOTONIC`, ns.
    pub monotonic_ns: u64,
    /// `CLOCK_BOOTTIME`, ns.
    pub boottime_ns: u64,
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes a timespec through a pointer to a live local.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000) + ts.tv_nsec as u64
}

impl WallClock {
    /// Reads the clocks now (the trace clock is `fxtrace::clock`, as providers read it).
    pub fn now() -> WallClock {
        let ticks_per_second = fxtrace::clock::info().ticks_per_second;
        let before = fxtrace::clock::ticks();
        let realtime_ns = clock_ns(libc::CLOCK_REALTIME);
        let monotonic_ns = clock_ns(libc::CLOCK_MONOTONIC);
        let boottime_ns = clock_ns(libc::CLOCK_BOOTTIME);
        let after = fxtrace::clock::ticks();
        WallClock {
            ticks: before + (after.saturating_sub(before)) / 2,
            ticks_per_second,
            realtime_ns,
            monotonic_ns,
            boottime_ns,
        }
    }

    /// The anchor record of a trace recorded by process `pid`, encoded.
    pub fn record_words(&self, pid: u64) -> Result<Vec<u64>, fxtrace_format::EncodeError> {
        let args = [
            Arg::new(TICKS_ARG, ArgValue::U64(self.ticks)),
            Arg::new(TICKS_PER_SECOND_ARG, ArgValue::U64(self.ticks_per_second)),
            Arg::new(REALTIME_ARG, ArgValue::U64(self.realtime_ns)),
            Arg::new(MONOTONIC_ARG, ArgValue::U64(self.monotonic_ns)),
            Arg::new(BOOTTIME_ARG, ArgValue::U64(self.boottime_ns)),
        ];
        fxtrace_format::encode_to_vec(&KernelObject {
            koid: pid,
            object_type: ObjectType::PROCESS,
            name: StringRef::Inline(ANCHOR_NAME),
            args: &args,
        })
    }

    /// The anchor in `record`, if it is one.
    pub fn of(record: &DecodedRecord<'_>) -> Option<WallClock> {
        let DecodedRecord::KernelObject {
            object_type,
            name,
            args,
            ..
        } = record
        else {
            return None;
        };
        if *object_type != ObjectType::PROCESS || name != ANCHOR_NAME {
            return None;
        }
        let arg = |key: &str| {
            args.iter()
                .find(|a| a.name == key)
                .and_then(|a| match a.value {
                    DecodedValue::U64(v) => Some(v),
                    _ => None,
                })
        };
        Some(WallClock {
            ticks: arg(TICKS_ARG)?,
            ticks_per_second: arg(TICKS_PER_SECOND_ARG).filter(|&r| r > 0)?,
            realtime_ns: arg(REALTIME_ARG)?,
            monotonic_ns: arg(MONOTONIC_ARG).unwrap_or(0),
            boottime_ns: arg(BOOTTIME_ARG).unwrap_or(0),
        })
    }

    /// The wall-clock time (ns since the epoch) of a trace time in ns (as the decoder gives
    /// it: ticks at this clock's rate).
    pub fn wall_ns(&self, trace_ns: u64) -> u64 {
        let anchor_ns = ticks_to_ns(self.ticks, self.ticks_per_second);
        if trace_ns >= anchor_ns {
            self.realtime_ns.saturating_add(trace_ns - anchor_ns)
        } else {
            self.realtime_ns.saturating_sub(anchor_ns - trace_ns)
        }
    }

    /// A trace time in ns as a wall-clock time, printable ([`WallTime`]).
    pub fn at(&self, trace_ns: u64) -> WallTime {
        WallTime(self.wall_ns(trace_ns))
    }
}

/// A wall-clock time (ns since the epoch), printed in UTC to the microsecond:
/// `2026-11-28 23:57:01.123456 UTC`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct WallTime(pub u64);

/// The civil date of a day count since 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

impl fmt::Display for WallTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.0 / 1_000_000_000;
        let micros = (self.0 % 1_000_000_000) / 1000;
        let (days, rest) = ((secs / 86_400) as i64, secs % 86_400);
        let (year, month, day) = civil_from_days(days);
        write!(
            f,
            "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{micros:06} UTC",
            rest / 3600,
            rest / 60 % 60,
            rest % 60
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fxtrace_format::Decoder;

    #[test]
    fn wall_times_print_as_utc_dates() {
        assert_eq!(WallTime(0).to_string(), "1970-01-01 00:00:00.000000 UTC");
        // 2026-11-28 23:57:01.123456 UTC = 1795910221 s.
        assert_eq!(
            WallTime(1_795_910_221_123_456_789).to_string(),
            "2026-11-28 23:57:01.123456 UTC"
        );
        assert_eq!(
            WallTime(951_782_400_000_000_000).to_string(),
            "2000-02-29 00:00:00.000000 UTC"
        );
    }

    #[test]
    fn the_anchor_record_reads_back_and_places_trace_times() {
        let clock = WallClock {
            ticks: 3_000_000,
            ticks_per_second: 3_000_000_000,
            realtime_ns: 1_795_910_221_000_000_000,
            monotonic_ns: 55,
            boottime_ns: 66,
        };
        let mut bytes = fxtrace_format::MAGIC_WORD.to_ne_bytes().to_vec();
        let words = clock.record_words(4242).unwrap();
        bytes.extend(words.iter().flat_map(|w| w.to_ne_bytes()));
        let records: Vec<_> = Decoder::new(&bytes).map(|d| d.unwrap()).collect();
        assert_eq!(WallClock::of(&records[1].record), Some(clock));
        // The anchor is 1 ms of trace time; 2.5 ms is 1.5 ms later on the wall.
        assert_eq!(clock.wall_ns(2_500_000), clock.realtime_ns + 1_500_000);
        assert_eq!(clock.wall_ns(0), clock.realtime_ns - 1_000_000);
        assert_eq!(
            clock.at(2_500_000).to_string(),
            "2026-11-28 23:57:01.001500 UTC"
        );
    }
}
