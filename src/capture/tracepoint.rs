//! Tracepoint format files (tracefs `events/<system>/<name>/format`) and reading fields out of
//! raw tracepoint data by the offsets they declare, never by hard-coded offsets.
//!
//! A format file looks like:
//!
//! ```text
//! name: sched_switch
//! ID: 372
//! format:
//!     field:unsigned short common_type;   offset:0;   size:2; signed:0;
//!     field:char prev_comm[16];   offset:8;   size:16;    signed:0;
//!     field:pid_t prev_pid;   offset:24;  size:4; signed:1;
//! print fmt: "prev_comm=%s ...", REC->prev_comm, ...
//! ```

use thiserror::Error;

use super::records::{ParseError, TaskName};
use super::ring::RawData;

/// Errors reading a tracepoint format.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FormatError {
    /// A `field:` line is malformed.
    #[error("tracepoint format line {line}: {reason}")]
    BadLine {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: &'static str,
    },
    /// A field the decoder needs is absent.
    #[error("tracepoint {tracepoint} has no field {field}")]
    MissingField {
        /// The tracepoint.
        tracepoint: String,
        /// The field.
        field: &'static str,
    },
    /// A field has a size the decoder cannot read.
    #[error("tracepoint field {field} has unsupported size {size}")]
    FieldSize {
        /// The field.
        field: String,
        /// Its size.
        size: usize,
    },
}

/// One `field:` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldDesc {
    /// Field name (`prev_pid`).
    pub name: String,
    /// The C declaration (`pid_t prev_pid`).
    pub decl: String,
    /// Byte offset in the raw data.
    pub offset: usize,
    /// Size in bytes.
    pub size: usize,
    /// Signed integer.
    pub signed: bool,
}

impl FieldDesc {
    /// Reads the field as an integer (sizes 1, 2, 4, 8; sign-extended when signed).
    pub fn read_int(&self, raw: &RawData<'_>) -> Option<i64> {
        // Fixed-size reads: a load each, no `memcpy` call per field.
        let at = self.offset;
        Some(match (self.size, self.signed) {
            (1, true) => i64::from(i8::from_ne_bytes(raw.array_at(at)?)),
            (1, false) => i64::from(u8::from_ne_bytes(raw.array_at(at)?)),
            (2, true) => i64::from(i16::from_ne_bytes(raw.array_at(at)?)),
            (2, false) => i64::from(u16::from_ne_bytes(raw.array_at(at)?)),
            (4, true) => i64::from(i32::from_ne_bytes(raw.array_at(at)?)),
            (4, false) => i64::from(u32::from_ne_bytes(raw.array_at(at)?)),
            (8, _) => i64::from_ne_bytes(raw.array_at(at)?),
            _ => return None,
        })
    }

    /// [`Self::read_int`], or the error naming the field beyond `raw`'s end.
    pub fn int_in(&self, raw: &RawData<'_>) -> Result<i64, ParseError> {
        self.read_int(raw).ok_or_else(|| self.beyond(raw))
    }

    /// The field as a task name (`char comm[N]`), or the error naming it beyond `raw`'s end.
    pub fn task_name_in(&self, raw: &RawData<'_>) -> Result<TaskName, ParseError> {
        raw.get(self.offset, self.size)
            .map(|bytes| TaskName::from_raw(&bytes))
            .ok_or_else(|| self.beyond(raw))
    }

    fn beyond(&self, raw: &RawData<'_>) -> ParseError {
        ParseError::Tracepoint(format!(
            "field {} at {}+{} beyond the {} raw bytes",
            self.name,
            self.offset,
            self.size,
            raw.len()
        ))
    }

    /// Checks the field is an integer of a readable size.
    pub fn expect_int(&self) -> Result<&Self, FormatError> {
        match self.size {
            1 | 2 | 4 | 8 => Ok(self),
            size => Err(FormatError::FieldSize {
                field: self.name.clone(),
                size,
            }),
        }
    }
}

/// A parsed tracepoint format file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TracepointFormat {
    /// `name:`.
    pub name: String,
    /// `ID:` (the perf `config` for `PERF_TYPE_TRACEPOINT`).
    pub id: Option<u64>,
    /// The fields, common ones included.
    pub fields: Vec<FieldDesc>,
    /// `print fmt:` (the rest of that line).
    pub print_fmt: String,
}

impl TracepointFormat {
    /// Parses the text of a format file.
    pub fn parse(text: &str) -> Result<Self, FormatError> {
        let mut out = Self::default();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if let Some(rest) = line.strip_prefix("name:") {
                out.name = rest.trim().to_owned();
            } else if let Some(rest) = line.strip_prefix("ID:") {
                out.id = rest.trim().parse().ok();
            } else if let Some(rest) = line.strip_prefix("print fmt:") {
                out.print_fmt = rest.trim().to_owned();
            } else if line.starts_with("field:") {
                out.fields
                    .push(parse_field(line).map_err(|reason| FormatError::BadLine {
                        line: i + 1,
                        reason,
                    })?);
            }
        }
        Ok(out)
    }

    /// The field called `name`.
    pub fn field(&self, name: &str) -> Option<&FieldDesc> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// The integer field called `name` (of a size [`FieldDesc::read_int`] reads), or why not.
    pub fn require_int(&self, name: &'static str) -> Result<FieldDesc, FormatError> {
        self.require(name).and_then(FieldDesc::expect_int).cloned()
    }

    /// The field called `name`, or a [`FormatError::MissingField`].
    pub fn require(&self, name: &'static str) -> Result<&FieldDesc, FormatError> {
        self.field(name).ok_or_else(|| FormatError::MissingField {
            tracepoint: self.name.clone(),
            field: name,
        })
    }
}

fn parse_field(line: &str) -> Result<FieldDesc, &'static str> {
    let mut decl = None;
    let mut offset = None;
    let mut size = None;
    let mut signed = false;
    for part in line.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = part.split_once(':').ok_or("part without ':'")?;
        match key.trim() {
            "field" => decl = Some(value.trim().to_owned()),
            "offset" => offset = Some(value.trim().parse().map_err(|_| "bad offset")?),
            "size" => size = Some(value.trim().parse().map_err(|_| "bad size")?),
            "signed" => signed = value.trim() == "1",
            _ => {}
        }
    }
    let decl = decl.ok_or("no declaration")?;
    // The name is the last identifier of the declaration, without an array suffix.
    let without_array = decl.split('[').next().unwrap_or(&decl).trim_end();
    let name = without_array
        .rsplit(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .next()
        .filter(|n| !n.is_empty())
        .ok_or("no field name")?
        .to_owned();
    Ok(FieldDesc {
        name,
        decl,
        offset: offset.ok_or("no offset")?,
        size: size.ok_or("no size")?,
        signed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_fields_and_ints() {
        let text = "name: demo\nID: 7\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:char comm[16];\toffset:2;\tsize:16;\tsigned:0;\n\tfield:int value;\toffset:18;\tsize:4;\tsigned:1;\n\nprint fmt: \"v=%d\", REC->value\n";
        let f = TracepointFormat::parse(text).unwrap();
        assert_eq!((f.name.as_str(), f.id), ("demo", Some(7)));
        assert_eq!(f.fields.len(), 3);
        let comm = f.field("comm").unwrap();
        assert_eq!(
            (comm.offset, comm.size, comm.decl.as_str()),
            (2, 16, "char comm[16]")
        );
        let value = f.require("value").unwrap();
        let mut raw = vec![0u8; 22];
        raw[18..22].copy_from_slice(&(-5i32).to_ne_bytes());
        assert_eq!(value.read_int(&RawData::Single(&raw)), Some(-5));
        assert_eq!(f.print_fmt, "\"v=%d\", REC->value");
        assert!(matches!(
            f.require("missing"),
            Err(FormatError::MissingField {
                field: "missing",
                ..
            })
        ));
        assert!(f.field("comm").unwrap().expect_int().is_err());
    }

    #[test]
    fn bad_field_line_is_an_error() {
        let err = TracepointFormat::parse("\tfield:int x;\toffset:zz;\tsize:4;").unwrap_err();
        assert_eq!(
            err,
            FormatError::BadLine {
                line: 1,
                reason: "bad offset"
            }
        );
    }
}
