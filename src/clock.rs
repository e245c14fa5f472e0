//! TSC clock: `rdtscp` ticks, the CPU number, and ticks per second.
//!
//! Every FXT record carries a raw timestamp in *ticks*; the trace's initialization record
//! says how many ticks make a second. On x86_64 the ticks are the time-stamp counter read
//! with `rdtscp`, which also yields `TSC_AUX` (Linux stores the CPU number in its low 12
//! bits and the NUMA node above). On other targets the ticks are nanoseconds of
//! `CLOCK_MONOTONIC_RAW` and the rate is 10⁹.
//!
//! # Ticks per second
//!
//! [`info`] determines the rate once per process (a [`OnceLock`]). A process that a trace
//! manager serves is *given* the manager's rate ([`set_ticks_per_second`], before anything
//! reads the clock; [`ClockSource::Manager`]): the TSC rate is a property of the machine, and
//! the manager has already determined it, so no traced process pays for a measurement.
//! Otherwise `info` tries in order:
//!
//! 1. CPUID leaf 0x15: TSC/crystal ratio (`ebx / eax`) times the crystal frequency (`ecx`).
//!    When `ecx` is 0 but leaf 0x16 reports a base frequency, the crystal is derived from
//!    it as Linux's `native_calibrate_tsc` does: `crystal = base · eax / ebx`, then
//!    `tsc = crystal · ebx / eax`.
//! 2. CPUID leaf 0x16: processor base frequency in MHz.
//! 3. Hypervisor leaf 0x40000010 (`eax` = TSC kHz), only when CPUID.1:ECX\[31\] (hypervisor
//!    present) is set and the maximum hypervisor leaf is at least 0x40000010.
//! 4. With the feature `capture`: the kernel's own rate, from the `time_mult` and `time_shift`
//!    of a perf event's mmap page (where the kernel offers it: `cap_user_time_zero`, a
//!    TSC-based sched_clock; a rate outside 100 MHz–20 GHz is not taken).
//! 5. Otherwise the rate is measured against `CLOCK_MONOTONIC_RAW` ([`calibrate`]).
//!
//! [`ClockInfo`] records which source won and whether the TSC is invariant
//! (CPUID 0x80000007 EDX bit 8). A non-invariant TSC changes rate with the core
//! frequency, so its timestamps are not trustworthy; [`ClockInfo::warning`] gives the
//! text a caller should print.
//!
//! # Measuring
//!
//! A *bracketed sample* reads `CLOCK_MONOTONIC_RAW`, the TSC, and `CLOCK_MONOTONIC_RAW`
//! again, and keeps the narrowest of several tries: the TSC read happened somewhere between
//! the two clock reads, so the midpoint is off by at most half the bracket width. A window
//! between two samples therefore has a *proven* relative error of at most
//! `(width₀ + width₁) / 2 / window`. Calibration takes several short windows (sleeping in
//! between, so it costs no CPU on a loaded machine), discards windows whose bound is above
//! [`CALIBRATION_TARGET_ERROR`] (a preemption inside a bracket shows up as a wide bracket),
//! and takes the median of the rest, which also rejects a window spoiled by a TSC that is
//! not synchronized between CPUs. It ends early once [`CALIBRATION_AGREEING_WINDOWS`]
//! accepted windows agree within half the target (a spoiled window would not). The narrowest bracket width is the cost of reading both
//! clocks and is reported as [`Calibration::read_overhead_ns`].
//!
//! # Example
//!
//! ```
//! use fxtrace::clock;
//!
//! let info = clock::info();
//! if let Some(w) = info.warning() {
//!     eprintln!("{w}");
//! }
//! let t0 = clock::ticks();
//! let t1 = clock::ticks();
//! assert!(info.ticks_to_ns(t1 - t0) < 1_000_000_000);
//! assert_eq!(clock::ticks_to_ns(3_000, 3_000_000_000), 1_000);
//! ```

use std::fmt;
use std::sync::OnceLock;
use std::time::Duration;

/// Nanoseconds in one second.
pub const NANOS_PER_SECOND: u64 = 1_000_000_000;

/// Relative error above which a calibration window is discarded (0.01 %, five times
/// tighter than the 0.05 % the trace needs).
pub const CALIBRATION_TARGET_ERROR: f64 = 1e-4;

/// Length of one calibration window used by [`info`].
pub const CALIBRATION_WINDOW: Duration = Duration::from_millis(4);

/// Most windows [`info`]'s calibration takes.
pub const CALIBRATION_MAX_WINDOWS: u32 = 7;

/// Accepted windows that, agreeing, end a calibration before its last window (see
/// `windows_agree`): 3 × 4 ms instead of 7 where the machine is quiet.
pub const CALIBRATION_AGREEING_WINDOWS: usize = 3;

/// Wall-time budget of [`info`]'s calibration: no new window starts after it.
pub const CALIBRATION_BUDGET: Duration = Duration::from_millis(40);

/// Bracketed reads tried per sample; the narrowest is kept.
const BRACKET_TRIES: u32 = 16;

/// Where [`ClockInfo::ticks_per_second`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClockSource {
    /// CPUID 0x15 with the crystal frequency reported in `ecx`.
    CpuidCrystal,
    /// CPUID 0x15 ratio with the crystal derived from the CPUID 0x16 base frequency.
    CpuidCrystalFromBaseFrequency,
    /// CPUID 0x16 base frequency alone.
    CpuidBaseFrequency,
    /// Hypervisor CPUID leaf 0x40000010.
    HypervisorLeaf,
    /// The kernel's rate (`tsc_khz`, calibrated at boot), read from the `time_mult` and
    /// `time_shift` of a perf event's mmap page: what the kernel converts TSC ticks to
    /// nanoseconds with.
    KernelPerfPage,
    /// Measured against `CLOCK_MONOTONIC_RAW` (see [`calibrate`]).
    Measured,
    /// Not a TSC: ticks are `CLOCK_MONOTONIC_RAW` nanoseconds (non-x86_64 targets).
    MonotonicRaw,
    /// Given by the trace manager at registration ([`set_ticks_per_second`]): the rate the
    /// manager determined for the same machine, by one of the other sources.
    Manager,
}

impl ClockSource {
    /// A short human-readable description of the source.
    pub fn describe(self) -> &'static str {
        match self {
            ClockSource::CpuidCrystal => "CPUID 0x15 (TSC/crystal ratio and crystal frequency)",
            ClockSource::CpuidCrystalFromBaseFrequency => {
                "CPUID 0x15 ratio with crystal derived from CPUID 0x16 base frequency"
            }
            ClockSource::CpuidBaseFrequency => "CPUID 0x16 (base frequency)",
            ClockSource::HypervisorLeaf => "hypervisor CPUID leaf 0x40000010",
            ClockSource::KernelPerfPage => "the kernel's TSC rate (perf mmap page)",
            ClockSource::Measured => "measured against CLOCK_MONOTONIC_RAW",
            ClockSource::MonotonicRaw => "CLOCK_MONOTONIC_RAW nanoseconds (no TSC)",
            ClockSource::Manager => "given by the trace manager",
        }
    }
}

impl fmt::Display for ClockSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// Result of measuring the TSC rate against `CLOCK_MONOTONIC_RAW`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Calibration {
    /// Measured ticks per second (median of the accepted windows).
    pub ticks_per_second: u64,
    /// Proven bound on the relative error of the accepted windows (largest of them).
    pub error_bound: f64,
    /// Windows whose error bound met [`CALIBRATION_TARGET_ERROR`] (0: none did, and the
    /// whole span from first to last sample was used instead).
    pub accepted_windows: u32,
    /// Windows taken in total.
    pub windows: u32,
    /// Narrowest bracket seen: the cost of `clock_gettime` + TSC read + `clock_gettime`.
    pub read_overhead_ns: u64,
    /// Wall time the calibration took.
    pub elapsed_ns: u64,
}

/// What the process knows about its clock; see [`info`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClockInfo {
    /// Ticks of [`ticks`] per second; never 0.
    pub ticks_per_second: u64,
    /// Where `ticks_per_second` came from.
    pub source: ClockSource,
    /// Whether the TSC runs at a constant rate in every power state (CPUID 0x80000007
    /// EDX bit 8). Always `true` for [`ClockSource::MonotonicRaw`].
    pub invariant_tsc: bool,
    /// Details of the measurement when `source` is [`ClockSource::Measured`].
    pub calibration: Option<Calibration>,
}

impl ClockInfo {
    /// Text to print when timestamps from this clock are not trustworthy, else `None`.
    pub fn warning(&self) -> Option<&'static str> {
        (!self.invariant_tsc).then_some(
            "warning: the TSC is not invariant (CPUID 0x80000007 EDX bit 8 is clear); \
             its rate follows the core frequency and trace timestamps may be distorted",
        )
    }

    /// Converts ticks of this clock to nanoseconds (see [`ticks_to_ns`]).
    pub fn ticks_to_ns(&self, ticks: u64) -> u64 {
        ticks_to_ns(ticks, self.ticks_per_second)
    }

    /// Converts nanoseconds to ticks of this clock (see [`ns_to_ticks`]).
    pub fn ns_to_ticks(&self, ns: u64) -> u64 {
        ns_to_ticks(ns, self.ticks_per_second)
    }
}

/// The process's clock information, determined on first call (calibration, when needed,
/// takes under [`CALIBRATION_BUDGET`] plus one window) and cached for the process lifetime;
/// or the rate given earlier by [`set_ticks_per_second`].
pub fn info() -> &'static ClockInfo {
    PROCESS_CLOCK.get_or_detect(detect)
}

/// Why [`set_ticks_per_second`] did not take effect. The clock keeps what it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ClockSetError {
    /// A rate of 0 ticks per second.
    #[error("a rate of 0 ticks per second is not a clock")]
    ZeroRate,
    /// Something read the clock first (or another rate was given first): its rate stays, so
    /// every timestamp of the process is converted with one rate.
    #[error("the clock was already determined: {ticks_per_second} ticks/s ({origin}); kept")]
    AlreadyDetermined {
        /// The rate in use.
        ticks_per_second: u64,
        /// Where it came from.
        origin: ClockSource,
    },
}

/// Install `ticks_per_second` as the process's clock rate ([`ClockSource::Manager`]) instead
/// of determining it: the seam through which a provider hands over the rate its trace
/// manager sent at registration. Honoured only before the first [`info`] call (and only
/// once); afterwards the rate already in use is kept and the error says which it is. The
/// invariant-TSC bit is still read from CPUID (one instruction, no measurement).
pub fn set_ticks_per_second(ticks_per_second: u64) -> Result<(), ClockSetError> {
    PROCESS_CLOCK.set(given(ticks_per_second)?)
}

/// The [`ClockInfo`] of a given rate.
fn given(ticks_per_second: u64) -> Result<ClockInfo, ClockSetError> {
    if ticks_per_second == 0 {
        return Err(ClockSetError::ZeroRate);
    }
    Ok(ClockInfo {
        ticks_per_second,
        source: ClockSource::Manager,
        invariant_tsc: local_invariant_tsc(),
        calibration: None,
    })
}

#[cfg(target_arch = "x86_64")]
fn local_invariant_tsc() -> bool {
    invariant_tsc_from_cpuid(&raw_cpuid::CpuId::new())
}

#[cfg(not(target_arch = "x86_64"))]
fn local_invariant_tsc() -> bool {
    true
}

/// The process's clock: set once, by detection or by a given rate, whichever comes first.
struct ClockCell {
    info: OnceLock<ClockInfo>,
}

static PROCESS_CLOCK: ClockCell = ClockCell::new();

impl ClockCell {
    const fn new() -> Self {
        Self {
            info: OnceLock::new(),
        }
    }

    fn get_or_detect(&self, detect: impl FnOnce() -> ClockInfo) -> &ClockInfo {
        self.info.get_or_init(detect)
    }

    /// Set `info` unless the cell is set (a detection in progress is waited for).
    fn set(&self, info: ClockInfo) -> Result<(), ClockSetError> {
        self.info.set(info).map_err(|_| {
            let kept = self.info.get().copied().unwrap_or(info);
            ClockSetError::AlreadyDetermined {
                ticks_per_second: kept.ticks_per_second,
                origin: kept.source,
            }
        })
    }
}

// === conversions ===

/// Multiplies then divides in 128-bit arithmetic, rounding to nearest, saturating at
/// `u64::MAX`; a zero divisor is treated as 1 so the function is total.
fn mul_div_round(value: u64, mul: u64, div: u64) -> u64 {
    let div = u128::from(div.max(1));
    let q = (u128::from(value) * u128::from(mul) + div / 2) / div;
    u64::try_from(q).unwrap_or(u64::MAX)
}

/// Converts `ticks` at `ticks_per_second` to nanoseconds, rounded to nearest, saturating at
/// `u64::MAX`. A rate of 0 (never produced by [`info`]) is treated as 1.
pub fn ticks_to_ns(ticks: u64, ticks_per_second: u64) -> u64 {
    mul_div_round(ticks, NANOS_PER_SECOND, ticks_per_second)
}

/// Converts `ns` nanoseconds to ticks at `ticks_per_second`, rounded to nearest,
/// saturating at `u64::MAX`.
pub fn ns_to_ticks(ns: u64, ticks_per_second: u64) -> u64 {
    mul_div_round(ns, ticks_per_second, NANOS_PER_SECOND)
}

/// Reads `CLOCK_MONOTONIC_RAW` (not slewed by NTP) in nanoseconds.
pub fn monotonic_raw_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_RAW, &mut ts) };
    // CLOCK_MONOTONIC_RAW exists since Linux 2.6.28 and the pointer is valid, so the call
    // cannot fail; `ts` stays zero if it somehow did.
    debug_assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC_RAW) failed");
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs.saturating_mul(NANOS_PER_SECOND).saturating_add(nanos)
}

// === reading the counter ===

/// The instruction [`ticks`] reads the counter with: `"rdtscp"` (the default), `"rdtsc"`
/// (cargo feature `rdtsc`), or `"clock_gettime"` on targets without a TSC.
pub const TICKS_INSTRUCTION: &str = if cfg!(not(target_arch = "x86_64")) {
    "clock_gettime"
} else if cfg!(feature = "rdtsc") {
    "rdtsc"
} else {
    "rdtscp"
};

/// Current tick count (`rdtscp` on x86_64).
///
/// `rdtscp` waits until all earlier instructions have executed, so the timestamp is not
/// taken before the work it follows. Requires the RDTSCP instruction (every x86_64 CPU
/// since 2008 has it; without it the process gets SIGILL).
///
/// With the cargo feature `rdtsc`, see the other definition.
#[cfg(all(target_arch = "x86_64", not(feature = "rdtsc")))]
#[inline(always)]
pub fn ticks() -> u64 {
    let mut aux = 0u32;
    // SAFETY: `__rdtscp` reads the TSC and TSC_AUX into `aux`, a valid local; it has no
    // memory-safety preconditions beyond the instruction being present (see above).
    unsafe { core::arch::x86_64::__rdtscp(&mut aux) }
}

/// Current tick count with plain `rdtsc` (cargo feature `rdtsc`; Tracy's choice).
///
/// The trade-off against the default `rdtscp`: `rdtsc` is about half its cost here (9.6 vs
/// 18.4 ns on the 2-vCPU EPYC guest of issue 11), but it does not wait for earlier
/// instructions, so the counter may be read up to the out-of-order window (tens of ns) before
/// the work that precedes it in program order has finished: a duration's end may come out
/// that much early, and an event's timestamp may precede the work it follows. Timestamps of
/// one thread still never go backwards. It reads no `TSC_AUX`: [`ticks_with_cpu`] keeps
/// `rdtscp` for the CPU number.
#[cfg(all(target_arch = "x86_64", feature = "rdtsc"))]
#[inline(always)]
pub fn ticks() -> u64 {
    ticks_unordered()
}

/// Current tick count read with plain `rdtsc` whatever the build's clock: for a timestamp
/// that marks no measured edge (a `tracing` span's creation, kept for an async begin), where
/// about half an `rdtscp` is saved and a read up to the out-of-order window early is harmless.
/// The same counter as [`ticks`]; never later than a [`ticks`] that follows it.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[cfg_attr(not(any(feature = "tracing", feature = "rdtsc")), allow(dead_code))]
pub(crate) fn ticks_unordered() -> u64 {
    // SAFETY: `_rdtsc` reads the TSC; every x86_64 CPU has the instruction.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// [`ticks`] on targets without a TSC.
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
#[cfg_attr(not(feature = "tracing"), allow(dead_code))]
pub(crate) fn ticks_unordered() -> u64 {
    ticks()
}

/// Current tick count and the number of the CPU it was read on (`rdtscp`; the CPU number
/// is the low 12 bits of `TSC_AUX`, which Linux sets to `node << 12 | cpu`).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn ticks_with_cpu() -> (u64, u32) {
    let mut aux = 0u32;
    // SAFETY: as in `ticks`.
    let t = unsafe { core::arch::x86_64::__rdtscp(&mut aux) };
    (t, aux & 0xfff)
}

/// Current tick count: `CLOCK_MONOTONIC_RAW` nanoseconds on targets without a TSC.
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
pub fn ticks() -> u64 {
    monotonic_raw_ns()
}

/// Current tick count and CPU number (`sched_getcpu`) on targets without a TSC.
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
pub fn ticks_with_cpu() -> (u64, u32) {
    let t = monotonic_raw_ns();
    // SAFETY: sched_getcpu has no preconditions.
    let cpu = unsafe { libc::sched_getcpu() };
    (t, u32::try_from(cpu).unwrap_or(0))
}

// === detection ===

#[cfg(target_arch = "x86_64")]
fn detect() -> ClockInfo {
    let cpuid = raw_cpuid::CpuId::new();
    let invariant_tsc = invariant_tsc_from_cpuid(&cpuid);
    match tsc_frequency_from_cpuid(&cpuid) {
        Some((ticks_per_second, source)) => ClockInfo {
            ticks_per_second,
            source,
            invariant_tsc,
            calibration: None,
        },
        None => {
            if let Some(ticks_per_second) = kernel_tsc_rate() {
                return ClockInfo {
                    ticks_per_second,
                    source: ClockSource::KernelPerfPage,
                    invariant_tsc,
                    calibration: None,
                };
            }
            let cal = calibrate(
                CALIBRATION_WINDOW,
                CALIBRATION_MAX_WINDOWS,
                CALIBRATION_BUDGET,
            );
            ClockInfo {
                ticks_per_second: cal.ticks_per_second,
                source: ClockSource::Measured,
                invariant_tsc,
                calibration: Some(cal),
            }
        }
    }
}

/// The kernel's TSC rate, from the mmap page of a probe perf event: a system call and a
/// mapping (tens of µs) where [`calibrate`] sleeps through its windows (7 × 4 ms on a
/// KVM guest whose CPUID gives no frequency). `None` where perf events cannot be opened
/// (`perf_event_paranoid` 3, a seccomp filter) or the kernel's clock is not the TSC.
#[cfg(all(target_arch = "x86_64", feature = "capture"))]
fn kernel_tsc_rate() -> Option<u64> {
    kernel_tsc_rate_through(&(std::sync::Arc::new(crate::capture::sys::RealSys) as _))
}

/// [`kernel_tsc_rate`] through a given syscall seam.
#[cfg(all(target_arch = "x86_64", feature = "capture"))]
fn kernel_tsc_rate_through(sys: &std::sync::Arc<dyn crate::capture::sys::Sys>) -> Option<u64> {
    crate::capture::time::mmap_page_clock(sys)
        .map(|c| c.ticks_per_second())
        .filter(|hz| KERNEL_RATE_RANGE.contains(hz))
}

/// The kernel rates taken (100 MHz to 20 GHz); a page outside it is a broken page, and the
/// rate is measured instead.
#[cfg(all(target_arch = "x86_64", feature = "capture"))]
const KERNEL_RATE_RANGE: std::ops::RangeInclusive<u64> = 100_000_000..=20_000_000_000;

/// Without the capture (its perf event code), the rate is measured.
#[cfg(all(target_arch = "x86_64", not(feature = "capture")))]
fn kernel_tsc_rate() -> Option<u64> {
    None
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> ClockInfo {
    ClockInfo {
        ticks_per_second: NANOS_PER_SECOND,
        source: ClockSource::MonotonicRaw,
        invariant_tsc: true,
        calibration: None,
    }
}

/// CPUID 0x80000007 EDX bit 8 (invariant TSC).
#[cfg(target_arch = "x86_64")]
fn invariant_tsc_from_cpuid<R: raw_cpuid::CpuIdReader>(cpuid: &raw_cpuid::CpuId<R>) -> bool {
    cpuid
        .get_advanced_power_mgmt_info()
        .is_some_and(|apm| apm.has_invariant_tsc())
}

/// Decodes the TSC frequency from CPUID alone, in the order 0x15 → 0x16 → 0x40000010.
/// Pure over the reader: tests feed synthetic leaves. `None` when no leaf says.
#[cfg(target_arch = "x86_64")]
fn tsc_frequency_from_cpuid<R: raw_cpuid::CpuIdReader>(
    cpuid: &raw_cpuid::CpuId<R>,
) -> Option<(u64, ClockSource)> {
    let base_mhz = cpuid
        .get_processor_frequency_info()
        .map(|f| u64::from(f.processor_base_frequency()))
        .filter(|&mhz| mhz != 0);

    if let Some(tsc) = cpuid.get_tsc_info() {
        let (den, num, crystal_hz) = (
            u64::from(tsc.denominator()),
            u64::from(tsc.numerator()),
            u64::from(tsc.nominal_frequency()),
        );
        if den != 0 && num != 0 {
            if crystal_hz != 0 {
                return Some((
                    mul_div_floor(crystal_hz, num, den),
                    ClockSource::CpuidCrystal,
                ));
            }
            if let Some(mhz) = base_mhz {
                // Linux native_calibrate_tsc: crystal = base * den / num, tsc = crystal * num / den.
                let crystal_hz = mul_div_floor(mhz * 1_000_000, den, num);
                let hz = mul_div_floor(crystal_hz, num, den);
                if hz != 0 {
                    return Some((hz, ClockSource::CpuidCrystalFromBaseFrequency));
                }
            }
        }
    }
    if let Some(mhz) = base_mhz {
        return Some((mhz * 1_000_000, ClockSource::CpuidBaseFrequency));
    }
    // `get_hypervisor_info` is `None` unless CPUID.1:ECX[31] is set; `tsc_frequency` is
    // `None` unless the maximum hypervisor leaf is at least 0x40000010.
    let hv_khz = cpuid
        .get_hypervisor_info()
        .and_then(|hv| hv.tsc_frequency())
        .filter(|&khz| khz != 0)?;
    Some((u64::from(hv_khz) * 1000, ClockSource::HypervisorLeaf))
}

/// `value * mul / div` in 128 bits, truncating (as the CPUID derivations do), saturating.
#[cfg(target_arch = "x86_64")]
fn mul_div_floor(value: u64, mul: u64, div: u64) -> u64 {
    let q = u128::from(value) * u128::from(mul) / u128::from(div.max(1));
    u64::try_from(q).unwrap_or(u64::MAX)
}

// === calibration ===

/// One bracketed read: the tick count and the `CLOCK_MONOTONIC_RAW` interval around it.
#[derive(Debug, Clone, Copy)]
struct BracketedSample {
    /// Midpoint of the bracket, in ns.
    mid_ns: u64,
    /// Width of the bracket, in ns.
    width_ns: u64,
    /// Ticks read inside the bracket.
    ticks: u64,
}

/// One bracketed read: `CLOCK_MONOTONIC_RAW`, TSC, `CLOCK_MONOTONIC_RAW`.
#[inline(always)]
fn bracketed_read() -> BracketedSample {
    let t0 = monotonic_raw_ns();
    let tk = ticks();
    let t1 = monotonic_raw_ns();
    let width_ns = t1.saturating_sub(t0);
    BracketedSample {
        mid_ns: t0 + width_ns / 2,
        width_ns,
        ticks: tk,
    }
}

/// Takes the narrowest of [`BRACKET_TRIES`] bracketed reads.
fn bracketed_sample() -> BracketedSample {
    let mut best = bracketed_read();
    for _ in 1..BRACKET_TRIES {
        let s = bracketed_read();
        if s.width_ns < best.width_ns {
            best = s;
        }
    }
    best
}

/// Rate and proven relative error bound of the window between two samples; `None` when
/// time or ticks did not advance.
fn window_rate(a: &BracketedSample, b: &BracketedSample) -> Option<(u64, f64)> {
    let dns = b.mid_ns.checked_sub(a.mid_ns).filter(|&d| d > 0)?;
    let dticks = b.ticks.checked_sub(a.ticks).filter(|&d| d > 0)?;
    let rate = mul_div_round(dticks, NANOS_PER_SECOND, dns);
    let err = (a.width_ns as f64 + b.width_ns as f64) / 2.0 / dns as f64;
    Some((rate, err))
}

/// Whether the accepted windows suffice: at least [`CALIBRATION_AGREEING_WINDOWS`] of them,
/// all within half of [`CALIBRATION_TARGET_ERROR`] of each other. A window spoiled by TSCs
/// not synchronized between CPUs is off by the offset over the window, which such agreement
/// rules out, as the median of more windows would; a clean one is within its proven bound.
fn windows_agree(rates: &[(u64, f64)]) -> bool {
    if rates.len() < CALIBRATION_AGREEING_WINDOWS {
        return false;
    }
    let (lo, hi) = rates
        .iter()
        .fold((u64::MAX, 0), |(lo, hi), &(r, _)| (lo.min(r), hi.max(r)));
    (hi - lo) as f64 <= lo as f64 * CALIBRATION_TARGET_ERROR / 2.0
}

/// Measures ticks per second against `CLOCK_MONOTONIC_RAW` with up to `max_windows`
/// windows of `window` each (at least one), starting no new window once `budget` has
/// elapsed or once the accepted windows agree. Sleeps between samples. See the module docs for the method.
pub fn calibrate(window: Duration, max_windows: u32, budget: Duration) -> Calibration {
    let start_ns = monotonic_raw_ns();
    let budget_ns = u64::try_from(budget.as_nanos()).unwrap_or(u64::MAX);
    let max_windows = max_windows.max(1);

    let first = bracketed_sample();
    let mut prev = first;
    let mut last = first;
    let mut read_overhead_ns = first.width_ns;
    let mut rates: Vec<(u64, f64)> = Vec::with_capacity(max_windows as usize);
    let mut windows = 0u32;
    while windows < max_windows {
        std::thread::sleep(window);
        let s = bracketed_sample();
        windows += 1;
        read_overhead_ns = read_overhead_ns.min(s.width_ns);
        if let Some((rate, err)) = window_rate(&prev, &s) {
            if err <= CALIBRATION_TARGET_ERROR {
                rates.push((rate, err));
            }
        }
        prev = s;
        last = s;
        if windows_agree(&rates) || monotonic_raw_ns().saturating_sub(start_ns) >= budget_ns {
            break;
        }
    }

    let (ticks_per_second, error_bound, accepted) = if rates.is_empty() {
        // No window was clean enough: the whole span is the longest, best-bounded window.
        let (rate, err) = window_rate(&first, &last).unwrap_or((NANOS_PER_SECOND, f64::INFINITY));
        (rate, err, 0)
    } else {
        rates.sort_unstable_by_key(|&(rate, _)| rate);
        let median = rates[rates.len() / 2].0;
        let worst = rates.iter().map(|&(_, e)| e).fold(0.0, f64::max);
        (median, worst, rates.len() as u32)
    };
    Calibration {
        ticks_per_second: ticks_per_second.max(1),
        error_bound,
        accepted_windows: accepted,
        windows,
        read_overhead_ns,
        elapsed_ns: monotonic_raw_ns().saturating_sub(start_ns),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_round_trip_and_do_not_overflow() {
        assert_eq!(ticks_to_ns(3_000_000_000, 3_000_000_000), 1_000_000_000);
        assert_eq!(ns_to_ticks(1_000_000_000, 3_000_000_000), 3_000_000_000);
        assert_eq!(ticks_to_ns(1, 3_000_000_000), 0); // 0.33 ns rounds down
        assert_eq!(ticks_to_ns(2, 3_000_000_000), 1); // 0.67 ns rounds up
                                                      // u64::MAX ticks at 1 GHz is u64::MAX ns; at 2 GHz it is half.
        assert_eq!(ticks_to_ns(u64::MAX, 1_000_000_000), u64::MAX);
        assert_eq!(ticks_to_ns(u64::MAX, 2_000_000_000), u64::MAX / 2 + 1);
        // Saturates instead of wrapping.
        assert_eq!(ns_to_ticks(u64::MAX, 4_000_000_000), u64::MAX);
        assert_eq!(ticks_to_ns(u64::MAX, 1), u64::MAX);
        // Rate 0 is treated as 1 tick per second.
        assert_eq!(ticks_to_ns(5, 0), 5_000_000_000);
        for &tps in &[1_000_000_000u64, 2_100_000_000, 3_417_999_123] {
            for &ns in &[0u64, 1, 999, 123_456_789_012, 1 << 50] {
                let back = ticks_to_ns(ns_to_ticks(ns, tps), tps);
                assert!(back.abs_diff(ns) <= 1, "tps {tps} ns {ns} back {back}");
            }
        }
    }

    #[test]
    fn calibration_ends_once_three_windows_agree() {
        let at = |rate: u64| (rate, 1e-5);
        let ghz = 2_000_000_000;
        assert!(!windows_agree(&[]));
        assert!(!windows_agree(&[at(ghz), at(ghz)]), "two are not enough");
        assert!(windows_agree(&[
            at(ghz),
            at(ghz + 40_000),
            at(ghz - 40_000)
        ]));
        // 0.01 % apart (the target): one of them may be a spoiled window.
        assert!(!windows_agree(&[at(ghz), at(ghz), at(ghz + 200_000)]));
    }

    #[test]
    fn monotonic_raw_advances() {
        let a = monotonic_raw_ns();
        std::thread::sleep(Duration::from_millis(2));
        let b = monotonic_raw_ns();
        assert!(b >= a + 2_000_000, "{a} -> {b}");
    }

    /// `ticks` (whichever instruction the build uses) and `ticks_with_cpu` (`rdtscp`) read
    /// the same counter: a `ticks` between two `ticks_with_cpu` reads lies between them, up
    /// to the reordering an unordered `rdtsc` allows (10 000 ticks is far more than that, and
    /// far less than the 1 ms sleep, which also catches a clock of another unit).
    #[test]
    fn ticks_and_ticks_with_cpu_read_one_counter() {
        let slack = 10_000;
        let (before, _) = ticks_with_cpu();
        std::thread::sleep(std::time::Duration::from_millis(1));
        let middle = ticks();
        std::thread::sleep(std::time::Duration::from_millis(1));
        let (after, _) = ticks_with_cpu();
        assert!(
            before < middle + slack && middle < after + slack && after - before > 2 * slack,
            "{TICKS_INSTRUCTION}: {before} {middle} {after}"
        );
    }

    #[test]
    fn ticks_are_monotonic_per_thread() {
        let threads: Vec<_> = (0..2)
            .map(|_| {
                std::thread::spawn(|| {
                    let mut prev = ticks();
                    for _ in 0..200_000 {
                        let t = ticks();
                        assert!(t >= prev, "ticks went back: {prev} -> {t}");
                        prev = t;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("ticks thread panicked");
        }
    }

    #[test]
    fn cpu_number_is_below_nproc_and_matches_sched_getcpu() {
        // SAFETY: sysconf has no preconditions.
        let nproc = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
        let nproc = u32::try_from(nproc).expect("sysconf(_SC_NPROCESSORS_CONF) failed");
        let mut matched = 0;
        for _ in 0..100 {
            let (_, cpu) = ticks_with_cpu();
            assert!(cpu < nproc, "cpu {cpu} >= nproc {nproc}");
            // SAFETY: sched_getcpu has no preconditions.
            let sched = unsafe { libc::sched_getcpu() };
            if u32::try_from(sched) == Ok(cpu) {
                matched += 1;
            }
        }
        // A migration between the two reads can make one pair differ, not most of them.
        assert!(
            matched >= 50,
            "TSC_AUX cpu matched sched_getcpu only {matched}/100 times"
        );
    }

    #[test]
    fn info_is_cached_and_sane() {
        let a = info();
        let b = info();
        assert!(std::ptr::eq(a, b));
        assert!(a.ticks_per_second > 0);
        assert_eq!(a.warning().is_some(), !a.invariant_tsc);
        assert_eq!(a.calibration.is_some(), a.source == ClockSource::Measured);
        if !cfg!(target_arch = "x86_64") {
            assert_eq!(a.ticks_per_second, NANOS_PER_SECOND);
            assert_eq!(a.source, ClockSource::MonotonicRaw);
        }
        // A second's worth of ticks converts to a second.
        assert_eq!(a.ticks_to_ns(a.ticks_per_second), NANOS_PER_SECOND);
        assert_eq!(a.ns_to_ticks(NANOS_PER_SECOND), a.ticks_per_second);
    }

    /// The fast calibration (at most [`CALIBRATION_MAX_WINDOWS`] windows; its time is
    /// measured by `benches/connect.rs`, variant `local`) agrees with a one-second
    /// measurement against CLOCK_MONOTONIC_RAW within 0.05 %.
    #[test]
    fn measured_rate_agrees_with_monotonic_raw_over_one_second() {
        let cal = calibrate(
            CALIBRATION_WINDOW,
            CALIBRATION_MAX_WINDOWS,
            CALIBRATION_BUDGET,
        );
        assert!(
            (1..=CALIBRATION_MAX_WINDOWS).contains(&cal.windows),
            "{} windows: {cal:?}",
            cal.windows
        );
        assert!(cal.accepted_windows <= cal.windows);
        assert!(cal.error_bound < 5e-4, "{cal:?}");

        let a = bracketed_sample();
        std::thread::sleep(Duration::from_secs(1));
        let b = bracketed_sample();
        let (reference, err) = window_rate(&a, &b).expect("clocks did not advance");
        assert!(err < 1e-5, "one-second reference too noisy: {err}");
        let rel = (cal.ticks_per_second as f64 - reference as f64).abs() / reference as f64;
        assert!(
            rel < 5e-4,
            "calibrated {} vs 1 s reference {} ticks/s: rel error {rel:e} ({cal:?})",
            cal.ticks_per_second,
            reference
        );
        let info = info();
        if matches!(
            info.source,
            ClockSource::Measured | ClockSource::KernelPerfPage
        ) {
            let rel = (info.ticks_per_second as f64 - reference as f64).abs() / reference as f64;
            assert!(
                rel < 5e-4,
                "info() {} vs {reference}",
                info.ticks_per_second
            );
        }
        println!(
            "clock: source={} tps={} reference={} rel={rel:e} cal={cal:?}",
            info.source, info.ticks_per_second, reference
        );
    }

    /// The kernel's rate, where this machine's perf gives it, agrees with a one-second
    /// measurement against CLOCK_MONOTONIC_RAW within 0.01 % (the calibration's own target).
    /// The rate is the probe page's (mult 2^30 at shift 31: 0.5 ns a tick, 2 GHz); a page
    /// without the clock gives none.
    #[cfg(all(target_arch = "x86_64", feature = "test-support"))]
    #[test]
    fn the_kernel_rate_is_the_probe_pages() {
        let sys = crate::capture::fake::FakeSys::new();
        assert_eq!(kernel_tsc_rate_through(&(sys.clone() as _)), None);
        sys.set_clock(0, 1 << 30, 31);
        assert_eq!(
            kernel_tsc_rate_through(&(sys.clone() as _)),
            Some(2 * NANOS_PER_SECOND)
        );
        // 1 tick a nanosecond at shift 31 is 1 GHz; 2^31 ns a tick (0.47 Hz) is no TSC.
        sys.set_clock(0, 1 << 31, 31);
        assert_eq!(
            kernel_tsc_rate_through(&(sys.clone() as _)),
            Some(NANOS_PER_SECOND)
        );
        sys.set_clock(0, u32::MAX, 0);
        assert_eq!(kernel_tsc_rate_through(&(sys as _)), None, "out of range");
    }

    #[cfg(all(target_arch = "x86_64", feature = "capture"))]
    #[test]
    fn the_kernel_rate_agrees_with_monotonic_raw_over_one_second() {
        let Some(kernel) = kernel_tsc_rate() else {
            crate::test_support::skip(
                crate::test_support::Requirement::PerfTscClock,
                "the perf mmap page gives no TSC conversion here (perf_event_paranoid 3, or \
                 the kernel's sched_clock is not the TSC, as on this KVM guest)",
            );
            return;
        };
        let a = bracketed_sample();
        std::thread::sleep(Duration::from_secs(1));
        let b = bracketed_sample();
        let (reference, err) = window_rate(&a, &b).expect("clocks did not advance");
        assert!(err < 1e-5, "one-second reference too noisy: {err}");
        let rel = (kernel as f64 - reference as f64).abs() / reference as f64;
        println!("clock: kernel {kernel} ticks/s, 1 s reference {reference}: rel {rel:e}");
        assert!(
            rel < CALIBRATION_TARGET_ERROR,
            "kernel {kernel} vs {reference}"
        );
    }

    #[test]
    fn a_given_rate_is_honoured_only_before_first_use() {
        // A private cell: the process-wide one belongs to `info()`'s own tests.
        let cell = ClockCell::new();
        assert_eq!(
            given(0).map(|_| ()),
            Err(ClockSetError::ZeroRate),
            "0 is refused"
        );
        cell.set(given(2_000_000_000).unwrap()).unwrap();
        let detected = std::cell::Cell::new(false);
        let got = *cell.get_or_detect(|| {
            detected.set(true);
            detect()
        });
        assert!(!detected.get(), "no detection once a rate is given");
        assert_eq!(got.ticks_per_second, 2_000_000_000);
        assert_eq!(got.source, ClockSource::Manager);
        assert_eq!(got.calibration, None);
        assert_eq!(got.invariant_tsc, local_invariant_tsc());
        assert_eq!(
            cell.set(given(3_000_000_000).unwrap()),
            Err(ClockSetError::AlreadyDetermined {
                ticks_per_second: 2_000_000_000,
                origin: ClockSource::Manager
            })
        );
        // Read first: a later rate is ignored, with the reason.
        let cell = ClockCell::new();
        let first = *cell.get_or_detect(|| ClockInfo {
            ticks_per_second: 1_234,
            source: ClockSource::CpuidBaseFrequency,
            invariant_tsc: true,
            calibration: None,
        });
        let err = cell.set(given(5).unwrap()).unwrap_err();
        assert_eq!(
            err,
            ClockSetError::AlreadyDetermined {
                ticks_per_second: 1_234,
                origin: ClockSource::CpuidBaseFrequency
            }
        );
        assert!(err.to_string().contains("1234 ticks/s"), "{err}");
        assert_eq!(*cell.get_or_detect(detect), first);
        // The process clock: whatever it is now, a given rate cannot change it any more.
        let now = *info();
        assert!(set_ticks_per_second(now.ticks_per_second + 1).is_err());
        assert_eq!(info().ticks_per_second, now.ticks_per_second);
    }

    #[test]
    fn window_rate_rejects_non_advancing_samples() {
        let a = BracketedSample {
            mid_ns: 1000,
            width_ns: 10,
            ticks: 5000,
        };
        assert_eq!(window_rate(&a, &a), None);
        let b = BracketedSample {
            mid_ns: 2000,
            width_ns: 30,
            ticks: 7000,
        };
        // 2000 ticks in 1000 ns = 2 GHz; error (10 + 30) / 2 / 1000 = 2 %.
        let (rate, err) = window_rate(&a, &b).expect("advancing");
        assert_eq!(rate, 2_000_000_000);
        assert!((err - 0.02).abs() < 1e-12);
        assert_eq!(window_rate(&b, &a), None);
    }

    #[cfg(target_arch = "x86_64")]
    mod cpuid {
        use super::super::*;
        use raw_cpuid::{CpuId, CpuIdResult};
        use std::collections::HashMap;

        const ZERO: CpuIdResult = CpuIdResult {
            eax: 0,
            ebx: 0,
            ecx: 0,
            edx: 0,
        };

        fn r(eax: u32, ebx: u32, ecx: u32, edx: u32) -> CpuIdResult {
            CpuIdResult { eax, ebx, ecx, edx }
        }

        /// A fake CPU: unlisted leaves read as zero.
        fn fake(leaves: &[(u32, CpuIdResult)]) -> CpuId<impl raw_cpuid::CpuIdReader> {
            let map: HashMap<u32, CpuIdResult> = leaves.iter().copied().collect();
            CpuId::with_cpuid_reader(move |leaf: u32, _sub: u32| {
                map.get(&leaf).copied().unwrap_or(ZERO)
            })
        }

        /// "GenuineIntel" with the given max basic leaf.
        fn intel(max_leaf: u32) -> (u32, CpuIdResult) {
            (0, r(max_leaf, 0x756e_6547, 0x6c65_746e, 0x4965_6e69))
        }

        const HV_BIT: u32 = 1 << 31;

        #[test]
        fn leaf_15_with_crystal() {
            // 0x15: eax=2 (den), ebx=176 (num), ecx=24 MHz crystal -> 2.112 GHz.
            let c = fake(&[
                intel(0x16),
                (0x15, r(2, 176, 24_000_000, 0)),
                (0x16, r(2100, 0, 0, 0)),
            ]);
            assert_eq!(
                tsc_frequency_from_cpuid(&c),
                Some((2_112_000_000, ClockSource::CpuidCrystal))
            );
        }

        #[test]
        fn leaf_15_crystal_derived_from_leaf_16() {
            // Skylake-style: ecx=0, base 2600 MHz, ratio 216/2. Linux: crystal = 2600e6*2/216
            // = 24_074_074 Hz (truncated), tsc = 24_074_074 * 108 = 2_599_999_992 Hz.
            let c = fake(&[
                intel(0x16),
                (0x15, r(2, 216, 0, 0)),
                (0x16, r(2600, 3900, 100, 0)),
            ]);
            assert_eq!(
                tsc_frequency_from_cpuid(&c),
                Some((2_599_999_992, ClockSource::CpuidCrystalFromBaseFrequency))
            );
        }

        #[test]
        fn leaf_16_only() {
            let c = fake(&[intel(0x16), (0x16, r(3000, 0, 0, 0))]);
            assert_eq!(
                tsc_frequency_from_cpuid(&c),
                Some((3_000_000_000, ClockSource::CpuidBaseFrequency))
            );
            // 0x15 with a zero ratio is skipped in favour of 0x16.
            let c = fake(&[
                intel(0x16),
                (0x15, r(0, 0, 25_000_000, 0)),
                (0x16, r(1800, 0, 0, 0)),
            ]);
            assert_eq!(
                tsc_frequency_from_cpuid(&c),
                Some((1_800_000_000, ClockSource::CpuidBaseFrequency))
            );
            // Only bits 15:0 of 0x16 eax are the base frequency.
            let c = fake(&[intel(0x16), (0x16, r(0xdead_0000 | 2500, 0, 0, 0))]);
            assert_eq!(
                tsc_frequency_from_cpuid(&c),
                Some((2_500_000_000, ClockSource::CpuidBaseFrequency))
            );
        }

        #[test]
        fn leaves_above_max_basic_leaf_are_not_read() {
            // Max basic leaf 0xd: leaves 0x15/0x16 hold data but must be ignored.
            let c = fake(&[
                intel(0xd),
                (0x15, r(2, 176, 24_000_000, 0)),
                (0x16, r(2100, 0, 0, 0)),
            ]);
            assert_eq!(tsc_frequency_from_cpuid(&c), None);
        }

        #[test]
        fn hypervisor_leaf() {
            let hv = [
                intel(0xd),
                (1, r(0, 0, HV_BIT, 0)),
                (0x4000_0000, r(0x4000_0010, 0x4b4d_564b, 0x564b_4d56, 0x4d)),
                (0x4000_0010, r(2_893_202, 1_000_000, 0, 0)),
            ];
            assert_eq!(
                tsc_frequency_from_cpuid(&fake(&hv)),
                Some((2_893_202_000, ClockSource::HypervisorLeaf))
            );
            // Hypervisor bit clear: the leaf is not trusted.
            let mut no_bit = hv;
            no_bit[1] = (1, r(0, 0, 0, 0));
            assert_eq!(tsc_frequency_from_cpuid(&fake(&no_bit)), None);
            // Max hypervisor leaf below 0x40000010: not read.
            let mut low_max = hv;
            low_max[2] = (0x4000_0000, r(0x4000_0001, 0x4b4d_564b, 0x564b_4d56, 0x4d));
            assert_eq!(tsc_frequency_from_cpuid(&fake(&low_max)), None);
            // A zero kHz value is no answer.
            let mut zero = hv;
            zero[3] = (0x4000_0010, ZERO);
            assert_eq!(tsc_frequency_from_cpuid(&fake(&zero)), None);
            // CPUID leaves win over the hypervisor leaf.
            let mut both = hv.to_vec();
            both[0] = intel(0x16);
            both.push((0x16, r(2000, 0, 0, 0)));
            assert_eq!(
                tsc_frequency_from_cpuid(&fake(&both)),
                Some((2_000_000_000, ClockSource::CpuidBaseFrequency))
            );
        }

        #[test]
        fn all_zero_is_none() {
            assert_eq!(tsc_frequency_from_cpuid(&fake(&[])), None);
            assert_eq!(
                tsc_frequency_from_cpuid(&fake(&[intel(0x16), (1, r(0, 0, HV_BIT, 0))])),
                None
            );
        }

        #[test]
        fn invariant_tsc_bit() {
            let ext = |edx| {
                fake(&[
                    intel(0xd),
                    (0x8000_0000, r(0x8000_0008, 0, 0, 0)),
                    (0x8000_0007, r(0, 0, 0, edx)),
                ])
            };
            assert!(invariant_tsc_from_cpuid(&ext(1 << 8)));
            assert!(!invariant_tsc_from_cpuid(&ext(!(1 << 8))));
            // Leaf 0x80000007 not supported: not invariant.
            assert!(!invariant_tsc_from_cpuid(&fake(&[intel(0xd)])));
        }

        /// `info()` on this machine follows the decoder: a CPUID answer is used as is,
        /// no answer means a measurement.
        #[test]
        fn info_follows_the_decoder_on_this_machine() {
            let c = CpuId::new();
            let decoded = tsc_frequency_from_cpuid(&c);
            let info = info();
            println!("cpuid: decoded={decoded:?} info={info:?}");
            match decoded {
                Some((tps, source)) => {
                    assert_eq!((info.ticks_per_second, info.source), (tps, source));
                }
                None => assert_eq!(info.source, ClockSource::Measured),
            }
            assert_eq!(info.invariant_tsc, invariant_tsc_from_cpuid(&c));
        }
    }
}
