//! Small JSON writers for the streaming converter: escaped strings, microsecond timestamps
//! with nanosecond precision, and FXT argument values.
//!
//! The converter writes JSON text directly (no intermediate `serde_json::Value`), so each
//! event costs no allocation beyond what the decoder already made.

use std::fmt;
use std::io::{self, Write};

use fxtrace_format::{DecodedArg, DecodedValue};

/// Writes `s` as a JSON string literal: quotes, backslashes and control characters
/// escaped (RFC 8259 §7), everything else copied as UTF-8.
pub(crate) fn write_str(out: &mut impl Write, s: &str) -> io::Result<()> {
    out.write_all(b"\"")?;
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x00..=0x1f => {
                out.write_all(&bytes[start..i])?;
                write!(out, "\\u{b:04x}")?;
                start = i + 1;
                continue;
            }
            _ => continue,
        };
        out.write_all(&bytes[start..i])?;
        out.write_all(escape)?;
        start = i + 1;
    }
    out.write_all(&bytes[start..])?;
    out.write_all(b"\"")
}

/// Nanoseconds shown as microseconds with exactly three decimals (`1234567` →
/// `1234.567`): the trace-event format's unit, without floating-point rounding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Micros(pub(crate) u64);

impl fmt::Display for Micros {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:03}", self.0 / 1000, self.0 % 1000)
    }
}

/// An address or id as a `"0x…"` string (JSON numbers lose precision above 2^53 in the
/// JavaScript viewers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HexStr(pub(crate) u64);

impl fmt::Display for HexStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{:#x}\"", self.0)
    }
}

/// Writes an `f64` as a JSON number, or as a string (`"NaN"`, `"inf"`, `"-inf"`) when it
/// has no JSON number form.
pub(crate) fn write_f64(out: &mut impl Write, v: f64) -> io::Result<()> {
    if v.is_finite() {
        // Debug prints the shortest round-trip form ("1.5", "1e-7"), valid JSON numbers.
        write!(out, "{v:?}")
    } else {
        write!(out, "\"{v}\"")
    }
}

/// Writes one argument value: integers and koids as numbers, pointers as hex strings,
/// blobs as `{"blob_bytes": N}`.
pub(crate) fn write_value(out: &mut impl Write, value: &DecodedValue<'_>) -> io::Result<()> {
    match value {
        DecodedValue::Null => out.write_all(b"null"),
        DecodedValue::I32(v) => write!(out, "{v}"),
        DecodedValue::U32(v) => write!(out, "{v}"),
        DecodedValue::I64(v) => write!(out, "{v}"),
        DecodedValue::U64(v) => write!(out, "{v}"),
        DecodedValue::F64(v) => write_f64(out, *v),
        DecodedValue::Str(s) => write_str(out, s),
        DecodedValue::Pointer(p) => write!(out, "{}", HexStr(*p)),
        DecodedValue::Koid(k) => write!(out, "{k}"),
        DecodedValue::Bool(b) => write!(out, "{b}"),
        DecodedValue::Blob(bytes) => write!(out, "{{\"blob_bytes\":{}}}", bytes.len()),
    }
}

/// Writes the members of an `args` object (without braces): the arguments for which
/// `keep(index, arg)` is true. A name repeated within one record gets a `#2`, `#3`, …
/// suffix so that no value is shadowed by a JSON parser keeping only the last duplicate
/// key. `written`: the keys the object already has (none: no leading comma), which the
/// arguments' keys avoid too.
pub(crate) fn write_arg_members(
    out: &mut impl Write,
    args: &[DecodedArg<'_>],
    keep: impl Fn(usize, &DecodedArg<'_>) -> bool,
    written: &[&str],
) -> io::Result<()> {
    let mut first = written.is_empty();
    // The keys written (a record has at most 15 arguments): a repeated name takes the first
    // free `name#N`, never a key another argument has (`a`, `a#2`, `a` gives `a`, `a#2`, `a#3`).
    let mut keys: Vec<std::borrow::Cow<'_, str>> = written.iter().map(|&key| key.into()).collect();
    for (i, arg) in args.iter().enumerate() {
        if !keep(i, arg) {
            continue;
        }
        if !first {
            out.write_all(b",")?;
        }
        first = false;
        let mut key = std::borrow::Cow::Borrowed(&*arg.name);
        let mut n = 1;
        while keys.contains(&key) {
            n += 1;
            key = format!("{}#{n}", arg.name).into();
        }
        write_str(out, &key)?;
        keys.push(key);
        out.write_all(b":")?;
        write_value(out, &arg.value)?;
    }
    Ok(())
}

/// Keeps every argument.
pub(crate) fn all(_: usize, _: &DecodedArg<'_>) -> bool {
    true
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;

    fn text(f: impl FnOnce(&mut Vec<u8>) -> io::Result<()>) -> String {
        let mut v = Vec::new();
        f(&mut v).unwrap();
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn strings_are_escaped_and_parse_back() {
        let s = "a\"b\\c\nd\re\tf\u{1}g\u{7f}h é 😀";
        let json = text(|o| write_str(o, s));
        assert_eq!(json, "\"a\\\"b\\\\c\\nd\\re\\tf\\u0001g\u{7f}h é 😀\"");
        let back: String = serde_json::from_str(&json).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn micros_keep_nanoseconds() {
        assert_eq!(Micros(0).to_string(), "0.000");
        assert_eq!(Micros(1).to_string(), "0.001");
        assert_eq!(Micros(1_234_567).to_string(), "1234.567");
        assert_eq!(
            Micros(u64::MAX).to_string(),
            "18446744073709551.615",
            "no overflow or rounding at the top of the range"
        );
    }

    #[test]
    fn values_map_to_typed_json() {
        let cases: [(DecodedValue<'_>, &str); 11] = [
            (DecodedValue::Null, "null"),
            (DecodedValue::I32(-5), "-5"),
            (DecodedValue::U32(7), "7"),
            (DecodedValue::I64(-1 << 40), "-1099511627776"),
            (DecodedValue::U64(u64::MAX), "18446744073709551615"),
            (DecodedValue::F64(1.5), "1.5"),
            (DecodedValue::Str(Cow::Borrowed("x\"")), "\"x\\\"\""),
            (DecodedValue::Pointer(0xdead_beef), "\"0xdeadbeef\""),
            (DecodedValue::Koid(101), "101"),
            (DecodedValue::Bool(true), "true"),
            (
                DecodedValue::Blob(Cow::Borrowed(&[1, 2, 3])),
                "{\"blob_bytes\":3}",
            ),
        ];
        for (value, want) in cases {
            assert_eq!(text(|o| write_value(o, &value)), want, "{value:?}");
        }
        assert_eq!(text(|o| write_f64(o, f64::NAN)), "\"NaN\"");
        assert_eq!(text(|o| write_f64(o, f64::NEG_INFINITY)), "\"-inf\"");
        assert_eq!(text(|o| write_f64(o, 1e-7)), "1e-7");
    }

    #[test]
    fn repeated_names_get_suffixes_and_filter_is_honoured() {
        let arg = |n: &'static str, v: i32| DecodedArg {
            name: Cow::Borrowed(n),
            value: DecodedValue::I32(v),
        };
        let args = [
            arg("a", 1),
            arg("scope", 0),
            arg("a", 2),
            arg("b", 3),
            arg("a", 4),
        ];
        let json = text(|o| write_arg_members(o, &args, |i, _| i != 1, &[]));
        assert_eq!(json, "\"a\":1,\"a#2\":2,\"b\":3,\"a#3\":4");
        let parsed: serde_json::Value = serde_json::from_str(&format!("{{{json}}}")).unwrap();
        assert_eq!(parsed.as_object().unwrap().len(), 4);
        // A name that is another's suffixed key: every value keeps a key of its own.
        let args = [arg("a", 1), arg("a#2", 2), arg("a", 3), arg("a#2", 4)];
        let json = text(|o| write_arg_members(o, &args, all, &[]));
        assert_eq!(json, "\"a\":1,\"a#2\":2,\"a#3\":3,\"a#2#2\":4");
        // Keys the object has already (a wakeup's `tid`) are avoided too.
        let args = [arg("tid", 99), arg("tid", 98)];
        let json = text(|o| write_arg_members(o, &args, all, &["tid"]));
        assert_eq!(json, ",\"tid#2\":99,\"tid#3\":98");
        let args = [arg("a", 1), arg("a#2", 2), arg("a", 3), arg("a#2", 4)];
        let json = text(|o| write_arg_members(o, &args, all, &[]));
        let parsed: serde_json::Value = serde_json::from_str(&format!("{{{json}}}")).unwrap();
        assert_eq!(parsed.as_object().unwrap().len(), 4);
    }
}
