//! The preload object's options: one table of `FXTRACE_*` environment variables, read once at
//! load, documented with their defaults in `docs/preload.md` (a test keeps the two in step).
//!
//! A value that does not parse is replaced by the default and reported: on standard error
//! only with `FXTRACE_PRELOAD_LOG=1` (the traced program's output is never touched
//! otherwise), and always as a Log record in the trace.

use std::ffi::OsString;
use std::time::Duration;

use fxtrace::capture::{KernelSymbolsError, SharedSymbolsRef, SHARED_SYMBOLS_ENV};

/// Which kernel events the preload object captures for its process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CaptureMode {
    /// The process's own context switches (per-process perf events, inherited by new threads).
    Switches,
    /// Nothing from the kernel: only the program's own instrumentation (C API).
    None,
}

/// Every option, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Options {
    /// `FXTRACE_SOCKET`: the manager's socket (read again by the provider client).
    pub(crate) socket: Option<OsString>,
    /// `FXTRACE_PRELOAD_CAPTURE`.
    pub(crate) capture: CaptureMode,
    /// `FXTRACE_PRELOAD_LBR`: also sample branch stacks (where the CPU has LBR).
    pub(crate) lbr: bool,
    /// `FXTRACE_PRELOAD_RING_PAGES`: data pages of each perf ring (a power of two).
    pub(crate) ring_pages: usize,
    /// `FXTRACE_PRELOAD_SAMPLE`: CPU samples a second of the process's threads (`None`: off).
    pub(crate) sample_hz: Option<u64>,
    /// `FXTRACE_PRELOAD_WAIT_POINTS`: the call chain where each thread blocked.
    pub(crate) wait_points: bool,
    /// `FXTRACE_PRELOAD_KERNEL_SYMBOLS`: the session's kernel symbol table.
    pub(crate) kernel_symbols: Option<SharedSymbolsRef>,
    /// `FXTRACE_PRELOAD_START_WAIT_MS`: how long loading waits for the manager's Start.
    pub(crate) start_wait: Duration,
    /// `FXTRACE_PRELOAD_FLUSH_MS`: bound on the flush at exit.
    pub(crate) flush: Duration,
    /// `FXTRACE_PRELOAD_SIGNALS`: flush on SIGTERM/SIGINT/SIGHUP left at their default.
    pub(crate) signals: bool,
    /// `FXTRACE_PRELOAD_NAME`: the provider name (default: the executable's file name).
    pub(crate) name: Option<String>,
    /// `FXTRACE_PRELOAD_LOG`: log the options and what happens on standard error.
    pub(crate) log: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            socket: None,
            capture: CaptureMode::Switches,
            lbr: true,
            ring_pages: 64,
            sample_hz: None,
            wait_points: false,
            kernel_symbols: None,
            start_wait: Duration::from_millis(250),
            flush: Duration::from_millis(500),
            signals: false,
            name: None,
            log: false,
        }
    }
}

/// One row of the table.
pub(crate) struct OptionSpec {
    /// The environment variable.
    pub(crate) name: &'static str,
    /// Its default, as documented.
    pub(crate) default: &'static str,
    /// What it does (one line, as in `docs/preload.md`; the documentation test compares).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) doc: &'static str,
    /// Parse a value into the options; `Err` says why it was refused.
    parse: fn(&str, &mut Options) -> Result<(), String>,
    /// Print the parsed value (for the log line).
    show: fn(&Options) -> String,
}

impl std::fmt::Debug for OptionSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OptionSpec")
            .field("name", &self.name)
            .field("default", &self.default)
            .finish_non_exhaustive()
    }
}

/// Longest `FXTRACE_PRELOAD_*_MS` value accepted (a minute).
const MAX_MS: u64 = 60_000;

fn parse_bool(value: &str) -> Result<bool, String> {
    match value.trim() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" | "" => Ok(false),
        other => Err(format!("{other:?} is not 0 or 1")),
    }
}

fn parse_ms(value: &str) -> Result<Duration, String> {
    match value.trim().parse::<u64>() {
        Ok(ms) if ms <= MAX_MS => Ok(Duration::from_millis(ms)),
        Ok(ms) => Err(format!("{ms} ms is more than the {MAX_MS} ms allowed")),
        Err(_) => Err(format!("{value:?} is not a number of milliseconds")),
    }
}

/// The table: every `FXTRACE_*` variable the preload object reads.
pub(crate) const OPTIONS: &[OptionSpec] = &[
    OptionSpec {
        name: "FXTRACE_SOCKET",
        default: "the per-user default socket",
        doc: "the trace manager's socket (set by `fxtrace record`); nobody listening: the program runs untraced",
        parse: |v, o| {
            o.socket = Some(v.into());
            Ok(())
        },
        show: |o| match &o.socket {
            Some(s) => s.to_string_lossy().into_owned(),
            None => "(default)".into(),
        },
    },
    OptionSpec {
        name: "FXTRACE_PRELOAD_CAPTURE",
        default: "switches",
        doc: "`switches`: capture the process's own context switches; `none`: only the program's C API events",
        parse: |v, o| {
            o.capture = match v.trim() {
                "switches" => CaptureMode::Switches,
                "none" => CaptureMode::None,
                other => return Err(format!("{other:?} is not `switches` or `none`")),
            };
            Ok(())
        },
        show: |o| match o.capture {
            CaptureMode::Switches => "switches".into(),
            CaptureMode::None => "none".into(),
        },
    },
    OptionSpec {
        name: "FXTRACE_PRELOAD_LBR",
        default: "1",
        doc: "`1`: also sample last-branch records where the CPU has LBR (else noted once in the trace); `0`: never",
        parse: |v, o| {
            o.lbr = parse_bool(v)?;
            Ok(())
        },
        show: |o| u8::from(o.lbr).to_string(),
    },
    OptionSpec {
        name: "FXTRACE_PRELOAD_RING_PAGES",
        default: "64",
        doc: "data pages of each per-CPU perf ring (a power of two, 1..=1024)",
        parse: |v, o| match v.trim().parse::<usize>() {
            Ok(n) if n.is_power_of_two() && n <= 1024 => {
                o.ring_pages = n;
                Ok(())
            }
            _ => Err(format!("{v:?} is not a power of two between 1 and 1024")),
        },
        show: |o| o.ring_pages.to_string(),
    },
    OptionSpec {
        name: "FXTRACE_PRELOAD_SAMPLE",
        default: "0",
        doc: "with `switches`: CPU samples with call chains at this many a second of each thread's CPU time (software cpu-clock, 1..=100000; `fxtrace record --preload --sample` sets it); `0`: none",
        parse: |v, o| match v.trim().parse::<u64>() {
            Ok(0) => {
                o.sample_hz = None;
                Ok(())
            }
            Ok(hz) if hz <= 100_000 => {
                o.sample_hz = Some(hz);
                Ok(())
            }
            _ => Err(format!("{v:?} is not a rate from 0 to 100000")),
        },
        show: |o| o.sample_hz.unwrap_or(0).to_string(),
    },
    OptionSpec {
        name: "FXTRACE_PRELOAD_WAIT_POINTS",
        default: "0",
        doc: "`1`, with `switches`: the call chain where each thread blocked (sched_switch with call chains, where the kernel gives raw tracepoint data; `fxtrace record --preload --wait-points` sets it)",
        parse: |v, o| {
            o.wait_points = parse_bool(v)?;
            Ok(())
        },
        show: |o| u8::from(o.wait_points).to_string(),
    },
    OptionSpec {
        name: SHARED_SYMBOLS_ENV,
        default: "none",
        doc: "set by `fxtrace record --preload` with wait points or CPU samples: the kernel symbols the session read once, a sealed memfd the recorder holds (`PID:START:FD:DEV:INODE`), which the capture opens through `/proc/PID/fd/N` and maps instead of reading `/proc/kallsyms`; where it cannot (another user, the recorder gone, not that file) `/proc/kallsyms` is read, as the trace notes",
        parse: |v, o| {
            o.kernel_symbols = Some(v.parse().map_err(|e: KernelSymbolsError| e.to_string())?);
            Ok(())
        },
        show: |o| match &o.kernel_symbols {
            Some(r) => r.to_string(),
            None => "none".into(),
        },
    },
    OptionSpec {
        name: "FXTRACE_PRELOAD_START_WAIT_MS",
        default: "250",
        doc: "at load, wait at most this long for the manager's Start (served while registering when it comes right behind the registration, as under `fxtrace record`), so the program's first events are traced (0: do not wait); a program that ends before its start waits for it at exit, within `FXTRACE_PRELOAD_FLUSH_MS`; events written before the start are counted, and the summary says \"N before the trace started\"",
        parse: |v, o| {
            o.start_wait = parse_ms(v)?;
            Ok(())
        },
        show: |o| o.start_wait.as_millis().to_string(),
    },
    OptionSpec {
        name: "FXTRACE_PRELOAD_FLUSH_MS",
        default: "500",
        doc: "at exit, wait at most this long for the last switches to be written and STOPPED to be sent (at most 60000)",
        parse: |v, o| {
            o.flush = parse_ms(v)?;
            Ok(())
        },
        show: |o| o.flush.as_millis().to_string(),
    },
    OptionSpec {
        name: "FXTRACE_PRELOAD_SIGNALS",
        default: "0",
        doc: "`1`: on SIGTERM, SIGINT or SIGHUP left at their default action, flush (bounded) then die of the same signal; `0`: rely on the manager salvaging the buffer",
        parse: |v, o| {
            o.signals = parse_bool(v)?;
            Ok(())
        },
        show: |o| u8::from(o.signals).to_string(),
    },
    OptionSpec {
        name: "FXTRACE_PRELOAD_NAME",
        default: "the executable's file name",
        doc: "the provider name in the trace",
        parse: |v, o| {
            if v.is_empty() {
                return Err("an empty name".into());
            }
            o.name = Some(v.into());
            Ok(())
        },
        show: |o| o.name.clone().unwrap_or_else(|| "(executable)".into()),
    },
    OptionSpec {
        name: "FXTRACE_PRELOAD_LOG",
        default: "0",
        doc: "`1`: print the options and what the preload object does on standard error, with where the time of the start and of the exit flush went (otherwise it prints nothing)",
        parse: |v, o| {
            o.log = parse_bool(v)?;
            Ok(())
        },
        show: |o| u8::from(o.log).to_string(),
    },
];

/// Options read from `env`, and the complaints about refused values.
pub(crate) fn parse(env: impl Fn(&str) -> Option<OsString>) -> (Options, Vec<String>) {
    let mut options = Options::default();
    let mut complaints = Vec::new();
    for spec in OPTIONS {
        let Some(value) = env(spec.name) else {
            continue;
        };
        let result = match value.to_str() {
            Some(text) => (spec.parse)(text, &mut options),
            None if spec.name == "FXTRACE_SOCKET" => {
                // Paths need not be UTF-8.
                options.socket = Some(value.clone());
                Ok(())
            }
            None => Err("the value is not UTF-8".into()),
        };
        if let Err(why) = result {
            complaints.push(format!(
                "{}: {why}; using the default ({})",
                spec.name, spec.default
            ));
        }
    }
    (options, complaints)
}

/// Options from the process environment.
pub(crate) fn from_env() -> (Options, Vec<String>) {
    parse(|name| std::env::var_os(name))
}

/// One line with every option's value (for the log).
pub(crate) fn describe(options: &Options) -> String {
    OPTIONS
        .iter()
        .map(|spec| format!("{}={}", spec.name, (spec.show)(options)))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse_map(pairs: &[(&str, &str)]) -> (Options, Vec<String>) {
        let map: HashMap<String, OsString> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        parse(|name| map.get(name).cloned())
    }

    #[test]
    fn defaults_without_variables() {
        let (options, complaints) = parse_map(&[]);
        assert_eq!(options, Options::default());
        assert!(complaints.is_empty());
        assert_eq!(options.flush, Duration::from_millis(500));
        assert!(!options.signals && !options.log && options.lbr);
    }

    #[test]
    fn every_value_parses() {
        let (options, complaints) = parse_map(&[
            ("FXTRACE_SOCKET", "/tmp/s"),
            ("FXTRACE_PRELOAD_CAPTURE", "none"),
            ("FXTRACE_PRELOAD_LBR", "0"),
            ("FXTRACE_PRELOAD_RING_PAGES", "8"),
            ("FXTRACE_PRELOAD_SAMPLE", "99"),
            ("FXTRACE_PRELOAD_WAIT_POINTS", "1"),
            ("FXTRACE_PRELOAD_KERNEL_SYMBOLS", "100:4:5:6:77"),
            ("FXTRACE_PRELOAD_START_WAIT_MS", "0"),
            ("FXTRACE_PRELOAD_FLUSH_MS", "1500"),
            ("FXTRACE_PRELOAD_SIGNALS", "1"),
            ("FXTRACE_PRELOAD_NAME", "svc"),
            ("FXTRACE_PRELOAD_LOG", "1"),
        ]);
        assert!(complaints.is_empty(), "{complaints:?}");
        assert_eq!(
            options,
            Options {
                socket: Some("/tmp/s".into()),
                capture: CaptureMode::None,
                lbr: false,
                ring_pages: 8,
                sample_hz: Some(99),
                wait_points: true,
                kernel_symbols: Some(SharedSymbolsRef {
                    pid: 100,
                    start_time: 4,
                    fd: 5,
                    dev: 6,
                    inode: 77
                }),
                start_wait: Duration::ZERO,
                flush: Duration::from_millis(1500),
                signals: true,
                name: Some("svc".into()),
                log: true,
            }
        );
        let line = describe(&options);
        assert!(line.contains("FXTRACE_PRELOAD_FLUSH_MS=1500"), "{line}");
        assert!(line.contains("FXTRACE_PRELOAD_CAPTURE=none"), "{line}");
    }

    #[test]
    fn bad_values_fall_back_to_defaults_and_are_reported() {
        let (options, complaints) = parse_map(&[
            ("FXTRACE_PRELOAD_CAPTURE", "everything"),
            ("FXTRACE_PRELOAD_RING_PAGES", "3"),
            ("FXTRACE_PRELOAD_FLUSH_MS", "999999"),
            ("FXTRACE_PRELOAD_LOG", "maybe"),
            ("FXTRACE_PRELOAD_SAMPLE", "100001"),
            ("FXTRACE_PRELOAD_KERNEL_SYMBOLS", "5"),
        ]);
        assert_eq!(options, Options::default());
        assert_eq!(complaints.len(), 6, "{complaints:?}");
        assert!(
            complaints[3].starts_with("FXTRACE_PRELOAD_KERNEL_SYMBOLS: \"5\" names no"),
            "{complaints:?}"
        );
        assert!(complaints[0].starts_with("FXTRACE_PRELOAD_CAPTURE: \"everything\""));
        assert!(complaints[2].starts_with("FXTRACE_PRELOAD_SAMPLE: \"100001\""));
        assert!(complaints[4].contains("using the default (500)"));
    }

    #[test]
    fn the_documentation_page_lists_every_option_with_its_default() {
        let page = include_str!("../../docs/preload.md");
        for spec in OPTIONS {
            let row = page
                .lines()
                .find(|l| l.starts_with(&format!("| `{}`", spec.name)))
                .unwrap_or_else(|| panic!("docs/preload.md has no row for {}", spec.name));
            assert!(
                row.contains(&format!("| {} | {} |", spec.default, spec.doc)),
                "docs/preload.md describes {} otherwise: {row}",
                spec.name
            );
        }
    }
}
