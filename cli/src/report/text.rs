//! How the reports print durations, times and argument values.

use std::fmt;

use fxtrace_format::DecodedValue;

/// A duration in ns, with a unit that keeps 3 significant digits: `812 ns`, `12.5 µs`,
/// `3.08 ms`, `1.25 s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ns(pub u64);

impl fmt::Display for Ns {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.0 as f64;
        let (value, unit) = if self.0 < 1_000_000 {
            (ns / 1e3, "µs")
        } else if self.0 < 1_000_000_000 {
            (ns / 1e6, "ms")
        } else {
            (ns / 1e9, "s")
        };
        let text = if self.0 < 1_000 {
            format!("{} ns", self.0)
        } else if value >= 100.0 {
            format!("{value:.0} {unit}")
        } else if value >= 10.0 {
            format!("{value:.1} {unit}")
        } else {
            format!("{value:.2} {unit}")
        };
        match f.width() {
            Some(w) => write!(f, "{text:>w$}"),
            None => f.write_str(&text),
        }
    }
}

/// A time since the trace's first timestamp: `+2.118043 s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Since(pub u64);

impl fmt::Display for Since {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "+{}.{:06} s",
            self.0 / 1_000_000_000,
            (self.0 % 1_000_000_000) / 1000
        )
    }
}

/// An argument's value as a report shows it: numbers plainly, text quoted, a blob by its
/// length.
#[derive(Debug)]
pub struct Value<'v, 'a>(pub &'v DecodedValue<'a>);

impl fmt::Display for Value<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            DecodedValue::Null => f.write_str("null"),
            DecodedValue::I32(v) => write!(f, "{v}"),
            DecodedValue::U32(v) => write!(f, "{v}"),
            DecodedValue::I64(v) => write!(f, "{v}"),
            DecodedValue::U64(v) => write!(f, "{v}"),
            DecodedValue::F64(v) => write!(f, "{v}"),
            DecodedValue::Str(v) => write!(f, "{v:?}"),
            DecodedValue::Pointer(v) => write!(f, "{v:#x}"),
            DecodedValue::Koid(v) => write!(f, "{v}"),
            DecodedValue::Bool(v) => write!(f, "{v}"),
            DecodedValue::Blob(v) => write!(f, "<{} bytes>", v.len()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_keep_three_digits() {
        assert_eq!(Ns(812).to_string(), "812 ns");
        assert_eq!(Ns(12_500).to_string(), "12.5 µs");
        assert_eq!(Ns(3_080_000).to_string(), "3.08 ms");
        assert_eq!(Ns(1_250_000_000).to_string(), "1.25 s");
        assert_eq!(Ns(250_000_000).to_string(), "250 ms");
        assert_eq!(format!("{:>8}", Ns(1500)), " 1.50 µs");
        assert_eq!(format!("{:>8}", Ns(15)), "   15 ns");
        assert_eq!(Since(2_118_043_999).to_string(), "+2.118043 s");
    }
}
