//! The two clock reads every row is compared with: `rdtscp` (fxtrace's default clock, the
//! denominator of every ratio) and `rdtsc` (the `_rdtsc()` row, Tracy's clock).

#[cfg(not(target_arch = "x86_64"))]
compile_error!("the comparison is relative to `rdtscp`: x86_64 only");

use std::arch::x86_64::{__rdtscp, _rdtsc};

/// One `rdtscp`: the time stamp counter, ordered after the instructions before it.
#[inline(always)]
pub(crate) fn rdtscp() -> u64 {
    let mut aux = 0u32;
    // SAFETY: `rdtscp` only reads the time stamp counter and `TSC_AUX` into registers and
    // writes `aux`, a local; every x86_64 CPU this bench runs on has it (`main` checks the
    // CPUID flag before any candidate runs).
    unsafe { __rdtscp(&mut aux) }
}

/// One `rdtsc`: the time stamp counter, unordered.
#[inline(always)]
pub(crate) fn rdtsc() -> u64 {
    // SAFETY: `rdtsc` only reads the time stamp counter into registers; it exists on every
    // x86_64 CPU.
    unsafe { _rdtsc() }
}

/// Whether the CPU has `rdtscp` (CPUID 0x8000_0001, EDX bit 27).
pub(crate) fn has_rdtscp() -> bool {
    use std::arch::x86_64::__cpuid;
    // Leaf 0x8000_0000 gives the highest extended leaf: 0x8000_0001 only when it exists.
    let max = __cpuid(0x8000_0000).eax;
    max >= 0x8000_0001 && __cpuid(0x8000_0001).edx & (1 << 27) != 0
}
