//! perf timestamps → TSC ticks, the trace's clock.
//!
//! perf stamps records with `perf_clock()` (`sched_clock`, nanoseconds). On x86 with a stable
//! TSC that clock is computed from the TSC, and the kernel publishes the parameters in every
//! perf mmap page when `cap_user_time_zero` is set. The uapi header
//! (`struct perf_event_mmap_page`) gives the forward formula:
//!
//! ```text
//! quot      = cyc >> time_shift;
//! rem       = cyc & (((u64)1 << time_shift) - 1);
//! timestamp = time_zero + quot * time_mult + ((rem * time_mult) >> time_shift);
//! ```
//!
//! which is `time_zero + floor(cyc * time_mult / 2^time_shift)` (mod 2^64).
//! [`TscConversion::perf_to_tsc`] inverts it: the smallest `cyc` whose forward value reaches the
//! timestamp, `ceil((timestamp - time_zero) * 2^time_shift / time_mult)`. Several TSC ticks map
//! onto one nanosecond, so the inverse lands on the first tick of that nanosecond: it is exact to
//! within one nanosecond's worth of ticks.
//!
//! When the page does not offer the conversion (no `cap_user_time_zero`, or a short counter with
//! `cap_user_time_short`), events are opened on `CLOCK_MONOTONIC_RAW` instead and converted with
//! a [`MeasuredMapping`]: (TSC, `CLOCK_MONOTONIC_RAW`) anchors, each the tightest of several
//! `rdtscp` brackets, the first taken when the session starts (no waiting: a short-lived
//! traced process must not sleep to calibrate), the next ones by the capture thread before it
//! converts what it drained, so a timestamp is interpolated between the two anchors around it.
//! TSC reads and `CLOCK_MONOTONIC_RAW` come from [`crate::clock`].

use std::time::Duration;

use crate::clock::{monotonic_raw_ns, ticks};

/// The clock perf events are opened with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PerfClock {
    /// perf's default clock, converted with the mmap page parameters.
    PerfDefault,
    /// `use_clockid` with `CLOCK_MONOTONIC_RAW`, converted with a measured mapping.
    MonotonicRaw,
}

// === impl TscConversion ===

/// The mmap page's `time_zero / time_mult / time_shift`: perf time ↔ TSC ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TscConversion {
    time_zero: u64,
    time_mult: u32,
    time_shift: u16,
}

impl TscConversion {
    /// From the page fields; `None` when they cannot describe a clock (`time_mult == 0` or a
    /// shift of 64 or more).
    pub fn new(time_zero: u64, time_mult: u32, time_shift: u16) -> Option<Self> {
        (time_mult != 0 && time_shift < 64).then_some(Self {
            time_zero,
            time_mult,
            time_shift,
        })
    }

    /// `time_zero`.
    pub fn time_zero(&self) -> u64 {
        self.time_zero
    }

    /// `time_mult`.
    pub fn time_mult(&self) -> u32 {
        self.time_mult
    }

    /// `time_shift`.
    pub fn time_shift(&self) -> u16 {
        self.time_shift
    }

    /// The TSC rate this conversion implies, in ticks per second: the kernel's own
    /// (`tsc_khz`, from which it derives `time_mult / 2^time_shift` nanoseconds per tick),
    /// rounded to nearest.
    pub fn ticks_per_second(&self) -> u64 {
        let scaled = u128::from(crate::clock::NANOS_PER_SECOND) << self.time_shift;
        let mult = u128::from(self.time_mult);
        u64::try_from((scaled + mult / 2) / mult).unwrap_or(u64::MAX)
    }

    /// TSC ticks → perf time, exactly the kernel's formula (wrapping u64 arithmetic).
    pub fn tsc_to_perf(&self, cyc: u64) -> u64 {
        let shift = u32::from(self.time_shift);
        let mult = u64::from(self.time_mult);
        let quot = cyc >> shift;
        let rem = cyc & ((1u64 << shift) - 1);
        self.time_zero
            .wrapping_add(quot.wrapping_mul(mult))
            .wrapping_add(rem.wrapping_mul(mult) >> shift)
    }

    /// perf time → TSC ticks: the smallest tick count whose [`Self::tsc_to_perf`] is `>= time`.
    pub fn perf_to_tsc(&self, time: u64) -> u64 {
        let delta = time.wrapping_sub(self.time_zero);
        let mult = u64::from(self.time_mult);
        let shift = u32::from(self.time_shift);
        if shift <= 32 {
            // The same value in u64 arithmetic (no 128-bit division call): with
            // delta = q * mult + r, ceil((delta << shift) / mult) is
            // (q << shift) + ceil((r << shift) / mult), and r << shift < 2^64 since r < 2^32;
            // the wrapping sum is the u128 result cut to 64 bits, as below.
            let (q, r) = (delta / mult, delta % mult);
            return q
                .wrapping_shl(shift)
                .wrapping_add((r << shift).div_ceil(mult));
        }
        let cyc = (u128::from(delta) << shift).div_ceil(u128::from(mult));
        cyc as u64
    }
}

// === impl MeasuredMapping ===

/// A measured, piecewise-linear mapping between `CLOCK_MONOTONIC_RAW` nanoseconds and TSC ticks.
///
/// One segment is current: from a start anchor with the rate measured between the start and
/// end anchors. [`MeasuredMapping::advance`] starts the next segment at the current end anchor,
/// so the mapping stays continuous and its error stays within the anchors' jitter instead of
/// growing with the rate error over a long trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MeasuredMapping {
    start_ns: u64,
    start_tsc: u64,
    end_ns: u64,
    end_tsc: u64,
    ticks_per_ns: f64,
}

impl MeasuredMapping {
    /// From one anchor point and a rate.
    pub fn new(anchor_ns: u64, anchor_tsc: u64, ticks_per_ns: f64) -> Self {
        Self {
            start_ns: anchor_ns,
            start_tsc: anchor_tsc,
            end_ns: anchor_ns,
            end_tsc: anchor_tsc,
            ticks_per_ns,
        }
    }

    /// A mapping from one anchor taken now (the tightest of eight `rdtscp` brackets around
    /// `clock_gettime(CLOCK_MONOTONIC_RAW)`), with `ticks_per_ns` as the rate until
    /// [`Self::advance`] takes the next anchor: no waiting. Timestamps between two anchors are
    /// interpolated, so their error is the anchors' own (tens of nanoseconds) however short
    /// the segment; only a timestamp past the last anchor is extrapolated with a rate.
    pub fn starting_now(ticks_per_ns: f64) -> Self {
        let (ns, tsc) = anchor();
        Self::new(ns, tsc, ticks_per_ns)
    }

    /// Starts a new segment from the current end anchor to `(ns, tsc)`. Ignored unless `ns`
    /// is later than the end anchor.
    pub fn advance_to(&mut self, ns: u64, tsc: u64) {
        if ns <= self.end_ns {
            return;
        }
        self.start_ns = self.end_ns;
        self.start_tsc = self.end_tsc;
        self.ticks_per_ns = tsc.wrapping_sub(self.end_tsc) as f64 / (ns - self.end_ns) as f64;
        self.end_ns = ns;
        self.end_tsc = tsc;
    }

    /// Takes a new anchor now if the end anchor is older than `min_interval`; returns whether
    /// it did.
    pub fn advance(&mut self, min_interval: Duration) -> bool {
        if monotonic_raw_ns().saturating_sub(self.end_ns) < min_interval.as_nanos() as u64 {
            return false;
        }
        let (ns, tsc) = anchor();
        self.advance_to(ns, tsc);
        true
    }

    /// The rate of the current segment.
    pub fn ticks_per_ns(&self) -> f64 {
        self.ticks_per_ns
    }

    /// `CLOCK_MONOTONIC_RAW` nanoseconds → TSC ticks.
    pub fn ns_to_tsc(&self, ns: u64) -> u64 {
        let delta = ns as i128 - self.start_ns as i128;
        // Converted through i64 when the value fits, which gives the same f64 and the same
        // truncated integer as i128 does: one instruction each way instead of a library call
        // (`__floattidf`, `__fixdfti`: with this function, 6.7 % of the recorder's samples in a
        // cpu-clock profile of `fxtrace record -a` on a KVM guest whose events use this
        // conversion; BENCHMARKS.md).
        let delta = match i64::try_from(delta) {
            Ok(d) => d as f64,
            Err(_) => delta as f64,
        };
        let product = delta * self.ticks_per_ns;
        let ticks = if product.abs() < I64_LIMIT {
            i128::from(product as i64)
        } else {
            product as i128
        };
        (self.start_tsc as i128 + ticks).clamp(0, u64::MAX as i128) as u64
    }
}

/// 2^63: every f64 of smaller magnitude truncates to the same integer as i64 and as i128.
const I64_LIMIT: f64 = 9_223_372_036_854_775_808.0;

/// One (CLOCK_MONOTONIC_RAW ns, TSC) pair: the tightest of eight rdtscp brackets.
fn anchor() -> (u64, u64) {
    let mut best = (u64::MAX, 0, 0);
    for _ in 0..8 {
        let before = ticks();
        let ns = monotonic_raw_ns();
        let after = ticks();
        let width = after.wrapping_sub(before);
        if width < best.0 {
            best = (width, ns, before + width / 2);
        }
    }
    (best.1, best.2)
}

// === impl PerfTimeConverter ===

/// Converts the timestamps of a session's events (all opened with the same [`PerfClock`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PerfTimeConverter {
    /// The mmap page's parameters (`cap_user_time_zero`), events on perf's default clock.
    MmapPage(TscConversion),
    /// A measured mapping, events on `CLOCK_MONOTONIC_RAW`.
    Measured(MeasuredMapping),
}

impl PerfTimeConverter {
    /// The clock events must be opened with for this converter to apply.
    pub fn clock_source(&self) -> PerfClock {
        match self {
            Self::MmapPage(_) => PerfClock::PerfDefault,
            Self::Measured(_) => PerfClock::MonotonicRaw,
        }
    }

    /// perf timestamp → TSC ticks.
    pub fn perf_to_tsc(&self, time: u64) -> u64 {
        match self {
            Self::MmapPage(c) => c.perf_to_tsc(time),
            Self::Measured(m) => m.ns_to_tsc(time),
        }
    }

    /// Keeps a measured mapping accurate: a new anchor every `min_interval` at most (no-op for
    /// the mmap-page conversion, which the kernel keeps exact).
    pub fn refresh(&mut self, min_interval: Duration) {
        if let Self::Measured(m) = self {
            m.advance(min_interval);
        }
    }

    /// The current time on the events' perf clock.
    pub fn perf_now(&self) -> u64 {
        match self {
            Self::MmapPage(c) => c.tsc_to_perf(ticks()),
            Self::Measured(_) => monotonic_raw_ns(),
        }
    }
}

/// The TSC conversion of the mmap page of a probe event (a disabled dummy event on this
/// process), or `None` where perf events cannot be opened or the page offers none.
pub(crate) fn mmap_page_clock(sys: &std::sync::Arc<dyn super::sys::Sys>) -> Option<TscConversion> {
    sys.perf_event_open(&super::attr::EventAttr::clock_probe(), 0, -1, None)
        .ok()
        .and_then(|fd| super::ring::PerfRing::map(sys.clone(), fd, 0).ok())
        .and_then(|ring| ring.tsc_conversion().ok().flatten())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A kernel-like parameter set: 2.1 GHz TSC, shift 31, `time_zero` "negative" (wrapped) as
    /// on x86 when the TSC did not start at zero.
    fn sample() -> TscConversion {
        let mult = ((1u64 << 31) as f64 / 2.1) as u32;
        TscConversion::new(0u64.wrapping_sub(123_456_789_000), mult, 31).unwrap()
    }

    /// The kernel derives `time_mult` from `tsc_khz` (ns per tick × 2^shift, rounded to nearest):
    /// the rate comes back within the rounding of `mult` (1 in 2^30 here).
    #[test]
    fn the_rate_is_the_one_mult_and_shift_encode() {
        let rate = sample().ticks_per_second();
        assert!(rate.abs_diff(2_100_000_000) <= 3, "{rate}");
        assert_eq!(
            TscConversion::new(0, 1, 0).unwrap().ticks_per_second(),
            1_000_000_000
        );
        // 1 GHz at shift 10: mult 1024.
        let c = TscConversion::new(0, 1024, 10).unwrap();
        assert_eq!(c.ticks_per_second(), 1_000_000_000);
        // A second of ticks converts to a second of perf time.
        assert_eq!(c.tsc_to_perf(c.ticks_per_second()), 1_000_000_000);
    }

    #[test]
    fn rejects_bad_parameters() {
        assert!(TscConversion::new(0, 0, 10).is_none());
        assert!(TscConversion::new(0, 1, 64).is_none());
    }

    #[test]
    fn forward_formula_matches_the_exact_product() {
        let c = sample();
        for cyc in [0u64, 1, 2, 1 << 31, (1 << 31) + 7, 987_654_321_012_345] {
            let exact = ((u128::from(cyc) * u128::from(c.time_mult())) >> 31) as u64;
            assert_eq!(c.tsc_to_perf(cyc), c.time_zero().wrapping_add(exact));
        }
    }

    #[test]
    fn inverse_is_the_first_tick_of_the_nanosecond() {
        let c = sample();
        let cyc = 5_000_000_000_123u64;
        let t = c.tsc_to_perf(cyc);
        let back = c.perf_to_tsc(t);
        assert!(back <= cyc);
        assert_eq!(c.tsc_to_perf(back), t);
        assert!(c.tsc_to_perf(back - 1) < t);
        // 2.1 ticks per ns: at most 2 ticks of error.
        assert!(cyc - back <= 2, "{cyc} vs {back}");
    }

    proptest! {
        #[test]
        fn inverse_round_trips(cyc in 1u64..(1u64 << 50), shift in 8u16..=32, ns_per_tick in 0.05f64..20.0) {
            // Kernel-like parameters: shift at most 32 (so `rem * mult` cannot overflow), a
            // rate between 50 GHz and 50 MHz, perf time far below 2^63 ns.
            let mult = ((1u64 << shift) as f64 * ns_per_tick).clamp(1.0, u32::MAX as f64) as u32;
            let exact = (u128::from(cyc) * u128::from(mult)) >> shift;
            prop_assume!(exact < (1u128 << 63));
            let c = TscConversion::new(0x1234_5678_9abc, mult, shift).unwrap();
            let t = c.tsc_to_perf(cyc);
            let back = c.perf_to_tsc(t);
            prop_assert!(back <= cyc);
            prop_assert_eq!(c.tsc_to_perf(back), t);
            if back > 0 {
                prop_assert!(c.tsc_to_perf(back - 1) != t);
            }
        }
    }

    #[test]
    fn measured_mapping_is_linear() {
        let m = MeasuredMapping::new(1_000, 10_000, 2.5);
        assert_eq!(m.ns_to_tsc(1_000), 10_000);
        assert_eq!(m.ns_to_tsc(2_000), 12_500);
        assert_eq!(m.ns_to_tsc(0), 7_500);
    }

    #[test]
    fn advancing_keeps_the_mapping_continuous() {
        let mut m = MeasuredMapping::new(1_000, 10_000, 2.5);
        m.advance_to(2_000, 12_600); // 2.6 ticks/ns over this segment
        assert_eq!(m.ns_to_tsc(1_000), 10_000);
        assert_eq!(m.ns_to_tsc(2_000), 12_600);
        let at_joint = m.ns_to_tsc(2_000);
        m.advance_to(3_000, 15_000); // 2.4 ticks/ns
        assert_eq!(
            m.ns_to_tsc(2_000),
            at_joint,
            "continuous at the shared anchor"
        );
        assert_eq!(m.ns_to_tsc(3_000), 15_000);
        m.advance_to(2_500, 1); // not later: ignored
        assert_eq!(m.ns_to_tsc(3_000), 15_000);
    }

    #[test]
    fn mmap_page_inverse_is_the_u128_one_at_every_magnitude() {
        let reference = |c: &TscConversion, time: u64| {
            let delta = u128::from(time.wrapping_sub(c.time_zero));
            (delta << c.time_shift).div_ceil(u128::from(c.time_mult)) as u64
        };
        for (zero, mult, shift) in [
            (0, 1 << 31, 31),
            (123_456_789, 2_796_202_667, 32),
            (u64::MAX - 5, 1, 0),
            (1 << 40, u32::MAX, 10),
            (99, 3, 33),
            (7, u32::MAX, 63),
        ] {
            let c = TscConversion::new(zero, mult, shift).unwrap();
            for time in [0, 1, zero, zero.wrapping_add(1), 1 << 33, 1 << 62, u64::MAX] {
                assert_eq!(c.perf_to_tsc(time), reference(&c, time), "{c:?} at {time}");
            }
        }
    }

    #[test]
    fn measured_conversion_is_the_i128_one_at_every_magnitude() {
        let reference = |m: &MeasuredMapping, ns: u64| {
            let delta = ns as i128 - m.start_ns as i128;
            let ticks = (delta as f64 * m.ticks_per_ns) as i128;
            (m.start_tsc as i128 + ticks).clamp(0, u64::MAX as i128) as u64
        };
        for (start_ns, start_tsc, rate) in [
            (1_000_000_000, 5_000_000_000, 2.4),
            (u64::MAX - 10, 1 << 40, 3.1),
            (7, u64::MAX - 1000, 1e12),
            (1 << 62, 0, 0.5),
        ] {
            let m = MeasuredMapping::new(start_ns, start_tsc, rate);
            for ns in [
                0,
                1,
                start_ns,
                start_ns.wrapping_add(12_345),
                start_ns.wrapping_sub(999),
                1 << 40,
                1 << 63,
                u64::MAX,
            ] {
                assert_eq!(m.ns_to_tsc(ns), reference(&m, ns), "{m:?} at {ns}");
            }
        }
    }

    #[test]
    fn measured_mapping_tracks_the_tsc() {
        // A rate 10 % off: the next anchor replaces it for what lies between the two.
        let rate = crate::clock::info().ticks_per_second as f64 / 1e9;
        let mut m = MeasuredMapping::starting_now(rate * 1.1);
        std::thread::sleep(Duration::from_millis(2));
        let before = ticks();
        let ns = monotonic_raw_ns();
        let after = ticks();
        std::thread::sleep(Duration::from_millis(1));
        assert!(
            m.advance(Duration::from_millis(1)),
            "3 ms after the first anchor"
        );
        assert!(!m.advance(Duration::from_secs(60)), "too soon for another");
        assert!(m.ticks_per_ns() > 0.1 && m.ticks_per_ns() < 10.0);
        // Interpolated: within 2 µs worth of ticks (two anchors' jitter, and a preemption
        // between the reads above); the first rate would be some 200 µs off.
        let est = m.ns_to_tsc(ns);
        let slack = (2_000.0 * m.ticks_per_ns()) as u64;
        assert!(
            est + slack >= before && est <= after + slack,
            "{before} {est} {after}"
        );
    }
}
