//! What this process may do with perf, read once per session, and remedy text when the kernel
//! says no.
//!
//! `kernel.perf_event_paranoid` (for a process without `CAP_PERFMON`/`CAP_SYS_ADMIN`):
//!
//! | value | allows |
//! |---|---|
//! | -1 | everything, including raw tracepoint data |
//! | 0 | CPU-wide events, no raw tracepoint data |
//! | 1 | own processes only, kernel and user |
//! | 2 | own processes only, user space only |
//! | ≥ 3 (Debian/Ubuntu patch) | nothing |
//!
//! System-wide capture (`sched:sched_switch` raw samples, `SWITCH_CPU_WIDE`) therefore needs root,
//! `CAP_PERFMON` (Linux ≥ 5.8, else `CAP_SYS_ADMIN`) or `paranoid <= -1`. The remedies say so,
//! and for hardware events they add the VM hint: a guest without a virtual PMU has no hardware
//! events at all, whatever the permissions.

use std::fs;
use std::io;
use std::path::Path;

use super::procfs::read_small_text;

/// `CAP_SYS_ADMIN` bit in `CapEff`.
const CAP_SYS_ADMIN: u32 = 21;
/// `CAP_PERFMON` bit in `CapEff`.
const CAP_PERFMON: u32 = 38;

/// What a capture needs from perf.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Context switches of processes we own.
    ProcessSwitches,
    /// CPU-wide events (`SWITCH_CPU_WIDE`).
    CpuWide,
    /// CPU-wide raw tracepoint samples (`sched:sched_switch`).
    RawTracepoint,
    /// Hardware sampling (LBR), optionally with kernel branches.
    HardwareSampling {
        /// Kernel branches requested.
        kernel: bool,
    },
    /// Software CPU samples (`cpu-clock`) of processes we own, optionally with kernel frames.
    CpuSampling {
        /// Kernel samples and frames requested.
        kernel: bool,
    },
    /// Locking ring-buffer memory (`mmap` of the rings).
    RingMemory,
}

/// The permission facts of this process, read once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PerfPermissions {
    /// `kernel.perf_event_paranoid`, if readable.
    pub paranoid: Option<i32>,
    /// Effective uid is 0.
    pub root: bool,
    /// `CAP_PERFMON` or `CAP_SYS_ADMIN` is effective.
    pub perfmon: bool,
    /// A hardware PMU is registered (`/sys/bus/event_source/devices/cpu*`).
    pub hardware_pmu: bool,
}

impl PerfPermissions {
    /// Reads `/proc/sys/kernel/perf_event_paranoid`, the uid, `CapEff` and the PMU list.
    pub fn read() -> Self {
        let paranoid = read_small_text("/proc/sys/kernel/perf_event_paranoid")
            .ok()
            .and_then(|s| s.trim().parse().ok());
        let cap_eff = read_small_text("/proc/self/status").ok().and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        });
        let has = |cap: u32| cap_eff.is_some_and(|c| c & (1 << cap) != 0);
        Self {
            paranoid,
            // SAFETY: geteuid has no preconditions and cannot fail.
            root: unsafe { libc::geteuid() } == 0,
            perfmon: has(CAP_PERFMON) || has(CAP_SYS_ADMIN),
            hardware_pmu: has_hardware_pmu(Path::new("/sys/bus/event_source/devices")),
        }
    }

    /// Whether `need` is expected to be allowed (the kernel has the last word).
    pub fn allows(&self, need: Need) -> bool {
        let privileged = self.root || self.perfmon;
        let paranoid = self.paranoid.unwrap_or(2);
        match need {
            Need::ProcessSwitches => privileged || paranoid <= 2,
            Need::CpuWide => privileged || paranoid <= 0,
            Need::RawTracepoint => privileged || paranoid <= -1,
            Need::HardwareSampling { kernel } => {
                self.hardware_pmu && (privileged || paranoid <= if kernel { 1 } else { 2 })
            }
            Need::CpuSampling { kernel } => privileged || paranoid <= if kernel { 1 } else { 2 },
            Need::RingMemory => true,
        }
    }

    /// What is missing for `need` after the kernel returned `errno`, and what to do.
    pub fn remedy(&self, need: Need, errno: Option<i32>) -> String {
        let paranoid = self
            .paranoid
            .map_or_else(|| "unreadable".to_owned(), |p| p.to_string());
        let privilege = if self.root {
            "running as root".to_owned()
        } else if self.perfmon {
            "CAP_PERFMON/CAP_SYS_ADMIN is effective".to_owned()
        } else {
            format!("not root, no CAP_PERFMON, kernel.perf_event_paranoid = {paranoid}")
        };
        let mut text = match need {
            Need::ProcessSwitches => format!(
                "per-process context switches need perf_event_paranoid <= 2 or CAP_PERFMON \
                 ({privilege}); run `sudo sysctl kernel.perf_event_paranoid=2`"
            ),
            Need::CpuWide | Need::RawTracepoint => format!(
                "system-wide capture needs root or CAP_PERFMON{} ({privilege}); run fxtrace with \
                 sudo, or `sudo setcap cap_perfmon+ep $(which fxtrace)`, or `sudo sysctl \
                 kernel.perf_event_paranoid=-1`",
                if need == Need::RawTracepoint {
                    " (raw tracepoint data: or perf_event_paranoid = -1)"
                } else {
                    " (or perf_event_paranoid <= 0)"
                }
            ),
            Need::HardwareSampling { kernel } => format!(
                "hardware branch sampling (LBR{}) needs a CPU PMU with LBR and {} ({privilege})",
                if kernel { ", with kernel branches" } else { "" },
                if kernel {
                    "perf_event_paranoid <= 1 or CAP_PERFMON"
                } else {
                    "perf_event_paranoid <= 2 or CAP_PERFMON"
                }
            ),
            Need::CpuSampling { kernel } => format!(
                "CPU samples{} need {} ({privilege}); system-wide ones need root or CAP_PERFMON",
                if kernel { " with kernel frames" } else { "" },
                if kernel {
                    "perf_event_paranoid <= 1 or CAP_PERFMON"
                } else {
                    "perf_event_paranoid <= 2 or CAP_PERFMON"
                }
            ),
            Need::RingMemory => "mapping the perf ring exceeded the locked-memory limit: raise \
                 `ulimit -l`, `sudo sysctl kernel.perf_event_mlock_kb=…`, or use a smaller ring"
                .to_owned(),
        };
        if let Need::HardwareSampling { .. } = need {
            if !self.hardware_pmu {
                text.push_str(
                    "; no hardware PMU is registered (/sys/bus/event_source/devices has no \
                     `cpu`): this looks like a VM without a virtual PMU. Enable one (QEMU/KVM: \
                     `-cpu host,pmu=on`; cloud: a bare-metal or PMU-enabled instance type), or \
                     capture without LBR — context switches use software events and still work",
                );
            } else if matches!(errno, Some(libc::EOPNOTSUPP) | Some(libc::EINVAL)) {
                text.push_str("; this CPU or hypervisor does not expose LBR branch stacks");
            }
        }
        text
    }

    /// [`Self::remedy`] in one short line: the cause and what to do, for a terminal (the whole
    /// text goes into the trace).
    pub fn remedy_short(&self, need: Need, errno: Option<i32>) -> String {
        match need {
            Need::ProcessSwitches => "needs perf_event_paranoid <= 2 or CAP_PERFMON (`sudo \
                 sysctl kernel.perf_event_paranoid=2`)"
                .to_owned(),
            Need::CpuWide | Need::RawTracepoint => {
                "needs root or CAP_PERFMON (run fxtrace with sudo)".to_owned()
            }
            Need::HardwareSampling { .. } if !self.hardware_pmu => "no hardware PMU (a VM \
                 without a virtual PMU? QEMU/KVM: `-cpu host,pmu=on`); context switches are \
                 recorded without it"
                .to_owned(),
            Need::HardwareSampling { .. }
                if matches!(errno, Some(libc::EOPNOTSUPP) | Some(libc::EINVAL)) =>
            {
                "this CPU or hypervisor does not expose LBR branch stacks".to_owned()
            }
            Need::HardwareSampling { kernel } => format!(
                "needs perf_event_paranoid <= {} or CAP_PERFMON",
                if kernel { 1 } else { 2 }
            ),
            Need::CpuSampling { kernel } => format!(
                "needs perf_event_paranoid <= {} or CAP_PERFMON",
                if kernel { 1 } else { 2 }
            ),
            Need::RingMemory => "the perf ring exceeds the locked-memory limit (`ulimit -l`, \
                 kernel.perf_event_mlock_kb)"
                .to_owned(),
        }
    }
}

fn has_hardware_pmu(devices: &Path) -> bool {
    let Ok(entries) = fs::read_dir(devices) else {
        return false;
    };
    entries.filter_map(Result::ok).any(|e| {
        let name = e.file_name();
        let name = name.to_string_lossy();
        name == "cpu" || name.starts_with("cpu_") || name == "armv8_pmuv3"
    })
}

/// Whether an errno means "not permitted".
pub fn is_permission_error(err: &io::Error) -> bool {
    matches!(err.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM))
}

/// Whether an errno means "this event does not exist / is not supported here".
pub fn is_unsupported_error(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::EOPNOTSUPP) | Some(libc::ENOENT) | Some(libc::EINVAL) | Some(libc::ENODEV)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn perms(paranoid: i32, root: bool, pmu: bool) -> PerfPermissions {
        PerfPermissions {
            paranoid: Some(paranoid),
            root,
            perfmon: root,
            hardware_pmu: pmu,
        }
    }

    #[test]
    fn paranoid_levels() {
        let user2 = perms(2, false, true);
        assert!(user2.allows(Need::ProcessSwitches));
        assert!(!user2.allows(Need::CpuWide));
        assert!(!user2.allows(Need::RawTracepoint));
        assert!(user2.allows(Need::HardwareSampling { kernel: false }));
        assert!(!user2.allows(Need::HardwareSampling { kernel: true }));
        let user_minus1 = perms(-1, false, true);
        assert!(user_minus1.allows(Need::RawTracepoint));
        let root_vm = perms(4, true, false);
        assert!(root_vm.allows(Need::RawTracepoint));
        assert!(!root_vm.allows(Need::HardwareSampling { kernel: false }));
        assert!(!perms(3, false, true).allows(Need::ProcessSwitches));
    }

    #[test]
    fn remedy_names_what_is_missing() {
        let text = perms(2, false, true).remedy(Need::RawTracepoint, Some(libc::EACCES));
        assert!(text.contains("perf_event_paranoid = 2"), "{text}");
        assert!(
            text.contains("CAP_PERFMON") && text.contains("sudo"),
            "{text}"
        );
        let vm = perms(2, true, false)
            .remedy(Need::HardwareSampling { kernel: false }, Some(libc::ENOENT));
        assert!(vm.contains("VM without a virtual PMU"), "{vm}");
        assert!(vm.contains("running as root"), "{vm}");
    }

    #[test]
    fn the_short_remedy_is_one_short_line_naming_the_cause() {
        let lbr = Need::HardwareSampling { kernel: false };
        let vm = perms(2, true, false).remedy_short(lbr, Some(libc::ENOENT));
        assert!(
            vm.starts_with("no hardware PMU") && vm.contains("pmu=on"),
            "{vm}"
        );
        let no_lbr = perms(2, true, true).remedy_short(lbr, Some(libc::EOPNOTSUPP));
        assert!(no_lbr.contains("does not expose LBR"), "{no_lbr}");
        let user = perms(3, false, true).remedy_short(lbr, Some(libc::EACCES));
        assert!(user.contains("perf_event_paranoid <= 2"), "{user}");
        for need in [
            Need::ProcessSwitches,
            Need::CpuWide,
            Need::RawTracepoint,
            lbr,
            Need::HardwareSampling { kernel: true },
            Need::RingMemory,
        ] {
            let line = perms(2, false, false).remedy_short(need, None);
            assert!(line.len() < 160 && !line.contains('\n'), "{line}");
        }
    }

    #[test]
    fn errno_classes() {
        assert!(is_permission_error(&io::Error::from_raw_os_error(
            libc::EACCES
        )));
        assert!(is_permission_error(&io::Error::from_raw_os_error(
            libc::EPERM
        )));
        assert!(is_unsupported_error(&io::Error::from_raw_os_error(
            libc::ENOENT
        )));
        assert!(is_unsupported_error(&io::Error::from_raw_os_error(
            libc::EOPNOTSUPP
        )));
        assert!(!is_unsupported_error(&io::Error::from_raw_os_error(
            libc::EACCES
        )));
    }
}
