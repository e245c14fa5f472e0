//! The tracing data of a perf.data file: the tracepoint format files of the kernel that
//! recorded it (feature section `HEADER_TRACING_DATA`, or in a stream the record
//! `PERF_RECORD_HEADER_TRACING_DATA`), so that tracepoint samples are decoded by the offsets
//! that kernel used, never by this machine's.
//!
//! Layout (perf's `tools/perf/util/trace-event-read.c`), integers in the byte order of the
//! recording machine:
//!
//! ```text
//! "\x17\x08\x44tracing"                    10 bytes
//! version                                   NUL-terminated ("0.5", "0.6")
//! u8 big_endian, u8 long_size, u32 page_size
//! "header_page\0",  u64 size, data
//! "header_event\0", u64 size, data
//! u32 count, then count × (u64 size, ftrace format)
//! u32 systems, then per system: name (NUL-terminated), u32 count, count × (u64 size, format)
//! u32 size, kallsyms;  u32 size, printk formats;  (0.6) u64 size, saved cmdlines
//! ```
//!
//! Only the event formats are read (what follows them is not needed); every size is checked
//! against the bytes left, so a damaged section ends the walk with an error, never a panic or
//! an allocation it announces.

use fxtrace::capture::TracepointFormat;

/// The magic at the start of tracing data.
const MAGIC: &[u8; 10] = b"\x17\x08\x44tracing";

/// Why tracing data could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tracing data, byte {offset}: {what}")]
pub struct TracingDataError {
    /// Where in the tracing data.
    pub offset: usize,
    /// What is wrong.
    pub what: String,
}

/// One tracepoint's format, as the recording kernel described it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedFormat {
    /// The subsystem (`sched`).
    pub system: String,
    /// The parsed format file (its `ID:` is the tracepoint attr's `config`).
    pub format: TracepointFormat,
}

/// A cursor over the tracing data.
struct Cursor<'a> {
    data: &'a [u8],
    at: usize,
    big_endian: bool,
}

impl<'a> Cursor<'a> {
    fn error(&self, what: impl Into<String>) -> TracingDataError {
        TracingDataError {
            offset: self.at,
            what: what.into(),
        }
    }

    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8], TracingDataError> {
        let left = self.data.len() - self.at;
        let n = usize::try_from(n)
            .ok()
            .filter(|&n| n <= left)
            .ok_or_else(|| self.error(format!("{what}: {n} bytes, {left} left")))?;
        let bytes = &self.data[self.at..self.at + n];
        self.at += n;
        Ok(bytes)
    }

    fn int<const N: usize>(&mut self, what: &str) -> Result<[u8; N], TracingDataError> {
        let bytes = self.take(N as u64, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        if self.big_endian {
            out.reverse();
        }
        Ok(out)
    }

    fn u32(&mut self, what: &str) -> Result<u32, TracingDataError> {
        Ok(u32::from_le_bytes(self.int(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64, TracingDataError> {
        Ok(u64::from_le_bytes(self.int(what)?))
    }

    fn c_string(&mut self, what: &str) -> Result<&'a [u8], TracingDataError> {
        let rest = &self.data[self.at..];
        let len = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| self.error(format!("{what}: no terminating NUL")))?;
        self.at += len + 1;
        Ok(&rest[..len])
    }

    /// A `u64 size` then that many bytes.
    fn sized(&mut self, what: &str) -> Result<&'a [u8], TracingDataError> {
        let size = self.u64(what)?;
        self.take(size, what)
    }
}

/// The event formats in `data` whose subsystem `keep` accepts (parsed with the capture's
/// format parser). A format file that does not parse is left out, not an error: only the
/// formats the import uses matter, and it says when one it needs is missing.
pub fn event_formats(
    data: &[u8],
    keep: impl Fn(&str) -> bool,
) -> Result<Vec<RecordedFormat>, TracingDataError> {
    let mut c = Cursor {
        data,
        at: 0,
        big_endian: false,
    };
    if c.take(MAGIC.len() as u64, "magic")? != MAGIC {
        return Err(TracingDataError {
            offset: 0,
            what: "not tracing data (no \\x17\\x08Dtracing magic)".into(),
        });
    }
    c.c_string("version")?;
    c.big_endian = c.take(1, "endianness")?[0] != 0;
    c.take(1, "long size")?;
    c.u32("page size")?;
    for name in [&b"header_page"[..], b"header_event"] {
        if c.c_string("header file name")? != name {
            return Err(c.error(format!(
                "expected the {} header file",
                String::from_utf8_lossy(name)
            )));
        }
        c.sized("header file")?;
    }
    let ftrace = c.u32("ftrace format count")?;
    for _ in 0..ftrace {
        c.sized("ftrace format")?;
    }
    let systems = c.u32("event system count")?;
    let mut out = Vec::new();
    for _ in 0..systems {
        let system = String::from_utf8_lossy(c.c_string("event system name")?).into_owned();
        let count = c.u32("event format count")?;
        for _ in 0..count {
            let text = c.sized("event format")?;
            if !keep(&system) {
                continue;
            }
            if let Ok(format) = TracepointFormat::parse(&String::from_utf8_lossy(text)) {
                out.push(RecordedFormat {
                    system: system.clone(),
                    format,
                });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sized(out: &mut Vec<u8>, data: &[u8]) {
        out.extend_from_slice(&(data.len() as u64).to_le_bytes());
        out.extend_from_slice(data);
    }

    fn tracing_data(formats: &[(&str, &str)]) -> Vec<u8> {
        let mut d = MAGIC.to_vec();
        d.extend_from_slice(b"0.6\0");
        d.extend_from_slice(&[0, 8]);
        d.extend_from_slice(&4096u32.to_le_bytes());
        d.extend_from_slice(b"header_page\0");
        sized(&mut d, b"page");
        d.extend_from_slice(b"header_event\0");
        sized(&mut d, b"event");
        d.extend_from_slice(&1u32.to_le_bytes());
        sized(&mut d, b"name: function\n");
        d.extend_from_slice(&(formats.len() as u32).to_le_bytes());
        for (system, text) in formats {
            d.extend_from_slice(system.as_bytes());
            d.push(0);
            d.extend_from_slice(&1u32.to_le_bytes());
            sized(&mut d, text.as_bytes());
        }
        d
    }

    const SWITCH: &str = "name: sched_switch\nID: 316\nformat:\n\
        \tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n\nprint fmt: \"x\"\n";

    #[test]
    fn formats_of_the_kept_systems() {
        let data = tracing_data(&[
            ("sched", SWITCH),
            ("irq", "name: irq_handler_entry\nID: 9\n"),
        ]);
        let formats = event_formats(&data, |s| s == "sched").unwrap();
        assert_eq!(formats.len(), 1);
        assert_eq!(formats[0].system, "sched");
        assert_eq!(formats[0].format.name, "sched_switch");
        assert_eq!(formats[0].format.id, Some(316));
        assert_eq!(event_formats(&data, |_| true).unwrap().len(), 2);
    }

    /// Cut anywhere, or with a size that lies, the walk stops with an error naming where.
    #[test]
    fn damaged_data_is_an_error_never_a_panic() {
        let data = tracing_data(&[("sched", SWITCH)]);
        for cut in 0..data.len() {
            assert!(
                event_formats(&data[..cut], |_| true).is_err(),
                "cut at {cut}"
            );
        }
        let mut lying = data.clone();
        let at = lying.len() - SWITCH.len() - 8;
        lying[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        let err = event_formats(&lying, |_| true).unwrap_err();
        assert_eq!(err.offset, at + 8);
        assert!(err.what.contains("event format"), "{err}");
        assert!(event_formats(b"not tracing data", |_| true).is_err());
    }
}
