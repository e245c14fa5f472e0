//! What the table is printed with: date, machine, load, scheduling priority.

use std::time::{SystemTime, UNIX_EPOCH};

/// The machine and its state, as far as `/proc` tells.
#[derive(Debug, Clone)]
pub(crate) struct Machine {
    /// `model name` of the first CPU.
    pub(crate) cpu: String,
    /// CPUs this process may run on.
    pub(crate) cpus: usize,
    /// Kernel release.
    pub(crate) kernel: String,
    /// Whether CPUID says this is a virtual machine.
    pub(crate) hypervisor: bool,
    /// The nice value of this process (children inherit it).
    pub(crate) nice: i32,
}

impl Machine {
    /// Read it now.
    pub(crate) fn read() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let field = |name: &str| {
            cpuinfo
                .lines()
                .find(|line| line.starts_with(name))
                .and_then(|line| line.split_once(':'))
                .map(|(_, value)| value.trim().to_string())
        };
        let hypervisor =
            field("flags").is_some_and(|flags| flags.split_whitespace().any(|f| f == "hypervisor"));
        // SAFETY: getpriority has no memory arguments; -1 with errno set is the only error,
        // and for the calling process it cannot fail.
        let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
        Self {
            cpu: field("model name").unwrap_or_else(|| "unknown CPU".into()),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map_or_else(|_| "unknown".into(), |s| s.trim().to_string()),
            hypervisor,
            nice,
        }
    }
}

/// The 1, 5 and 15 minute load averages (`/proc/loadavg`), as printed there.
pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".into())
}

/// The current UTC time as `YYYY-MM-DD HH:MM UTC`.
pub(crate) fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days as i64);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02} UTC",
        rest / 3600,
        rest % 3600 / 60
    )
}

/// Proleptic Gregorian date of a day count since 1970-01-01 (H. Hinnant's algorithm).
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

#[cfg(test)]
mod tests {
    use super::civil_from_days;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_414), (2025, 11, 22));
    }
}
