//! A reader for the small YAML subset `llvm-xray` prints: one flow mapping per line,
//! like `- { id: 1, address: 0x21DB0, function-name: 'leaf(int)', args: [ 1, 2 ] }`.
//!
//! Used for the instrumentation-map extract (`llvm-xray extract --symbolize`) and, in
//! tests and CI, for `llvm-xray convert --output-format=yaml` records. Values are plain,
//! single-quoted (`''` escapes a quote) or double-quoted (backslash escapes) scalars,
//! or flat flow sequences of scalars.

/// A value in a flow mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum YamlValue {
    /// A scalar, unquoted.
    Scalar(String),
    /// A flow sequence of scalars.
    Seq(Vec<String>),
}

impl YamlValue {
    /// The scalar's text, `None` for a sequence.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::Scalar(s) => Some(s),
            Self::Seq(_) => None,
        }
    }
}

/// A flow mapping that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("YAML flow mapping, column {column}: {message}")]
pub struct YamlError {
    /// 1-based character column of the problem.
    pub column: usize,
    /// What was expected.
    pub message: &'static str,
}

/// Parses a flow mapping `{ key: value, ... }` (an optional leading `- ` is skipped)
/// into its entries, in order.
pub fn parse_flow_mapping(line: &str) -> Result<Vec<(String, YamlValue)>, YamlError> {
    let mut p = Parser {
        chars: line.chars().collect(),
        pos: 0,
    };
    p.skip_ws();
    if p.peek() == Some('-') {
        p.pos += 1;
        p.skip_ws();
    }
    p.expect('{', "expected '{'")?;
    let mut entries = Vec::new();
    loop {
        p.skip_ws();
        if p.peek() == Some('}') {
            p.pos += 1;
            break;
        }
        let key = p.plain(&[':'])?;
        if key.is_empty() {
            return Err(p.error("expected a key"));
        }
        p.expect(':', "expected ':' after a key")?;
        p.skip_ws();
        let value = if p.peek() == Some('[') {
            p.pos += 1;
            let mut items = Vec::new();
            loop {
                p.skip_ws();
                if p.peek() == Some(']') {
                    p.pos += 1;
                    break;
                }
                items.push(p.scalar(&[',', ']'])?);
                p.skip_ws();
                match p.peek() {
                    Some(',') => p.pos += 1,
                    Some(']') => {}
                    _ => return Err(p.error("expected ',' or ']' in a sequence")),
                }
            }
            YamlValue::Seq(items)
        } else {
            YamlValue::Scalar(p.scalar(&[',', '}'])?)
        };
        entries.push((key, value));
        p.skip_ws();
        match p.peek() {
            Some(',') => p.pos += 1,
            Some('}') => {}
            _ => return Err(p.error("expected ',' or '}' after a value")),
        }
    }
    p.skip_ws();
    if p.pos != p.chars.len() {
        return Err(p.error("unexpected text after '}'"));
    }
    Ok(entries)
}

/// The value of `key` in parsed entries.
pub fn get<'a>(entries: &'a [(String, YamlValue)], key: &str) -> Option<&'a YamlValue> {
    entries.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// Parses a YAML integer as llvm-xray prints them: decimal, or hex with `0x`.
pub fn parse_int(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn error(&self, message: &'static str) -> YamlError {
        YamlError {
            column: self.pos + 1,
            message,
        }
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(' ' | '\t')) {
            self.pos += 1;
        }
    }

    fn expect(&mut self, c: char, message: &'static str) -> Result<(), YamlError> {
        if self.peek() == Some(c) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.error(message))
        }
    }

    /// A plain scalar up to one of `stops` (not included), trimmed.
    fn plain(&mut self, stops: &[char]) -> Result<String, YamlError> {
        let start = self.pos;
        while let Some(c) = self.peek() {
            if stops.contains(&c) {
                break;
            }
            self.pos += 1;
        }
        if self.peek().is_none() {
            return Err(self.error("unterminated flow mapping"));
        }
        Ok(self.chars[start..self.pos]
            .iter()
            .collect::<String>()
            .trim()
            .to_string())
    }

    fn scalar(&mut self, stops: &[char]) -> Result<String, YamlError> {
        match self.peek() {
            Some('\'') => self.single_quoted(),
            Some('"') => self.double_quoted(),
            _ => self.plain(stops),
        }
    }

    fn single_quoted(&mut self) -> Result<String, YamlError> {
        self.pos += 1;
        let mut out = String::new();
        loop {
            match self.peek() {
                None => return Err(self.error("unterminated single-quoted scalar")),
                Some('\'') if self.chars.get(self.pos + 1) == Some(&'\'') => {
                    out.push('\'');
                    self.pos += 2;
                }
                Some('\'') => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some(c) => {
                    out.push(c);
                    self.pos += 1;
                }
            }
        }
    }

    fn double_quoted(&mut self) -> Result<String, YamlError> {
        self.pos += 1;
        let mut out = String::new();
        loop {
            let Some(c) = self.peek() else {
                return Err(self.error("unterminated double-quoted scalar"));
            };
            self.pos += 1;
            match c {
                '"' => return Ok(out),
                '\\' => {
                    let Some(e) = self.peek() else {
                        return Err(self.error("unterminated escape"));
                    };
                    self.pos += 1;
                    let digits = match e {
                        'x' => 2,
                        'u' => 4,
                        'U' => 8,
                        _ => 0,
                    };
                    if digits > 0 {
                        let end = self.pos + digits;
                        let hex: String = self
                            .chars
                            .get(self.pos..end)
                            .ok_or_else(|| self.error("short escape"))?
                            .iter()
                            .collect();
                        let code = u32::from_str_radix(&hex, 16)
                            .map_err(|_| self.error("bad hex escape"))?;
                        out.push(char::from_u32(code).ok_or_else(|| self.error("bad code point"))?);
                        self.pos = end;
                    } else {
                        out.push(match e {
                            'n' => '\n',
                            't' => '\t',
                            'r' => '\r',
                            '0' => '\0',
                            other => other,
                        });
                    }
                }
                c => out.push(c),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> YamlValue {
        YamlValue::Scalar(v.to_string())
    }

    #[test]
    fn parses_llvm_xray_extract_lines() {
        let line = "- { id: 2, address: 0x21DE0, kind: log-args-enter, always-instrument: true, function-name: 'with_arg(unsigned long)', version: 2 }";
        let e = parse_flow_mapping(line).unwrap();
        assert_eq!(e.len(), 6);
        assert_eq!(
            get(&e, "function-name"),
            Some(&s("with_arg(unsigned long)"))
        );
        assert_eq!(
            get(&e, "address")
                .and_then(|v| v.as_str())
                .and_then(parse_int),
            Some(0x21DE0)
        );
        assert_eq!(get(&e, "always-instrument"), Some(&s("true")));
        assert_eq!(get(&e, "missing"), None);
    }

    #[test]
    fn parses_sequences_quotes_and_plain_text_with_spaces() {
        let line = r#"  - { type: 0, args: [ 100, 0x2 ], data: custom event from thread 1, q: 'it''s, ok', d: "a\x41\"\n" }"#;
        let e = parse_flow_mapping(line).unwrap();
        assert_eq!(
            get(&e, "args"),
            Some(&YamlValue::Seq(vec!["100".into(), "0x2".into()]))
        );
        assert_eq!(get(&e, "data"), Some(&s("custom event from thread 1")));
        assert_eq!(get(&e, "q"), Some(&s("it's, ok")));
        assert_eq!(get(&e, "d"), Some(&s("aA\"\n")));
        assert_eq!(parse_flow_mapping("{ }").unwrap(), vec![]);
        assert_eq!(parse_int("0x1f"), Some(31));
        assert_eq!(parse_int("12"), Some(12));
        assert_eq!(parse_int("x"), None);
    }

    #[test]
    fn reports_malformed_input_without_panicking() {
        for bad in [
            "",
            "{",
            "{ a: 1",
            "{ a 1 }",
            "{ a: 'x }",
            "{ a: [1, 2 }",
            "{ a: 1 } x",
            "{ : 1 }",
            "{ a: \"\\x4\" }",
            "- x",
        ] {
            assert!(parse_flow_mapping(bad).is_err(), "{bad:?}");
        }
    }
}
