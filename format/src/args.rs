//! Arguments: typed key/value pairs appended to events and object records.

use super::error::EncodeError;
use super::fields::{ArgumentHeader, BlobArgument, BoolArgument, Int32Argument, StringArgument};
use super::refs::StringRef;
use super::sink::{stream_words, Counter, Sink};
use super::types::{ArgType, MAX_ARGS, MAX_RECORD_WORDS};

/// One argument: a name and a typed value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Arg<'a> {
    /// Argument name.
    pub name: StringRef<'a>,
    /// Argument value.
    pub value: ArgValue<'a>,
}

/// The value of an argument, one variant per argument type 0..=10.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ArgValue<'a> {
    /// Type 0: name only.
    Null,
    /// Type 1: 32-bit signed integer (in the header word).
    I32(i32),
    /// Type 2: 32-bit unsigned integer (in the header word).
    U32(u32),
    /// Type 3: 64-bit signed integer.
    I64(i64),
    /// Type 4: 64-bit unsigned integer.
    U64(u64),
    /// Type 5: double-precision float.
    F64(f64),
    /// Type 6: string.
    Str(StringRef<'a>),
    /// Type 7: pointer.
    Pointer(u64),
    /// Type 8: kernel object id.
    Koid(u64),
    /// Type 9 (newer writers): boolean (in the header word).
    Bool(bool),
    /// Type 10 (newer writers): bytes, zero-padded to 8.
    Blob(&'a [u8]),
}

impl<'a> Arg<'a> {
    /// An argument named `name`.
    pub fn new(name: impl Into<StringRef<'a>>, value: ArgValue<'a>) -> Self {
        Arg {
            name: name.into(),
            value,
        }
    }

    /// Size of the encoded argument in words: the same checks, in the same order, as
    /// `emit`, without a counting pass.
    #[inline(always)]
    pub fn words(&self) -> Result<usize, EncodeError> {
        self.name.encode()?;
        let value_words = match self.value {
            ArgValue::Null | ArgValue::I32(_) | ArgValue::U32(_) | ArgValue::Bool(_) => 0,
            ArgValue::I64(_)
            | ArgValue::U64(_)
            | ArgValue::F64(_)
            | ArgValue::Pointer(_)
            | ArgValue::Koid(_) => 1,
            ArgValue::Str(value) => {
                value.encode()?;
                value.stream_words()
            }
            ArgValue::Blob(payload) => stream_words(payload.len()),
        };
        let words = 1 + self.name.stream_words() + value_words;
        if words > MAX_RECORD_WORDS {
            return Err(EncodeError::ArgumentTooLarge { words });
        }
        debug_assert_eq!(Ok(words), {
            let mut counter = Counter::default();
            self.emit(&mut counter).map(|()| counter.pos())
        });
        Ok(words)
    }

    /// Appends the argument (the engine's in-place encoding; not API).
    #[doc(hidden)]
    #[inline(always)]
    pub fn emit<S: Sink>(&self, s: &mut S) -> Result<(), EncodeError> {
        let start = s.pos();
        let name = self.name.encode()?;
        let (arg_type, data) = match self.value {
            ArgValue::Null => (ArgType::Null, 0),
            ArgValue::I32(v) => (ArgType::I32, Int32Argument::VALUE.make(u64::from(v as u32))),
            ArgValue::U32(v) => (ArgType::U32, Int32Argument::VALUE.make(u64::from(v))),
            ArgValue::I64(_) => (ArgType::I64, 0),
            ArgValue::U64(_) => (ArgType::U64, 0),
            ArgValue::F64(_) => (ArgType::F64, 0),
            ArgValue::Str(value) => (
                ArgType::Str,
                StringArgument::VALUE_REF.make(u64::from(value.encode()?)),
            ),
            ArgValue::Pointer(_) => (ArgType::Pointer, 0),
            ArgValue::Koid(_) => (ArgType::Koid, 0),
            ArgValue::Bool(v) => (ArgType::Bool, BoolArgument::VALUE.make(u64::from(v))),
            ArgValue::Blob(payload) => {
                // Refuse before streaming anything: the payload could be huge.
                let words = 1 + self.name.stream_words() + stream_words(payload.len());
                if words > MAX_RECORD_WORDS {
                    return Err(EncodeError::ArgumentTooLarge { words });
                }
                // words <= 4095 so the length fits the 32-bit size field.
                (ArgType::Blob, BlobArgument::SIZE.make(payload.len() as u64))
            }
        };
        s.word(
            ArgumentHeader::TYPE.make(u64::from(arg_type.raw()))
                | ArgumentHeader::NAME_REF.make(u64::from(name))
                | data,
        );
        self.name.emit_stream(s);
        match self.value {
            ArgValue::I64(v) => s.word(v as u64),
            ArgValue::U64(v) | ArgValue::Pointer(v) | ArgValue::Koid(v) => s.word(v),
            ArgValue::F64(v) => s.word(v.to_bits()),
            ArgValue::Str(value) => value.emit_stream(s),
            ArgValue::Blob(payload) => s.stream(payload),
            ArgValue::Null | ArgValue::I32(_) | ArgValue::U32(_) | ArgValue::Bool(_) => {}
        }
        let words = s.pos() - start;
        if words > MAX_RECORD_WORDS {
            return Err(EncodeError::ArgumentTooLarge { words });
        }
        s.patch(start, ArgumentHeader::SIZE, words as u64);
        Ok(())
    }
}

/// A scalar argument (any value but a blob or an inline string: a string by index, or the
/// empty string, is one header word like an integer) encoded but for its name: its header
/// word with the name ref left zero, and its value word, which follows the header when the
/// header's size is 2 words. Kept by span guards between their begin and their end, so that
/// the end only adds the name's string index.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScalarArg {
    header: u64,
    word: u64,
}

impl ScalarArg {
    /// A null argument (a placeholder in fixed-size arrays).
    pub const NULL: ScalarArg = ScalarArg {
        header: ArgumentHeader::TYPE.make(ArgType::Null.raw() as u64)
            | ArgumentHeader::SIZE.make(1),
        word: 0,
    };

    /// `value` encoded; `None` for an inline string or a blob (a payload of their own), or an
    /// index out of range. A string by index (or the empty string) is one header word, like
    /// a scalar. Folds to constants where the value's variant is known.
    #[inline(always)]
    pub fn new(value: ArgValue<'_>) -> Option<ScalarArg> {
        let (arg_type, data, word) = match value {
            ArgValue::Null => (ArgType::Null, 0, None),
            ArgValue::I32(v) => (
                ArgType::I32,
                Int32Argument::VALUE.make(u64::from(v as u32)),
                None,
            ),
            ArgValue::U32(v) => (ArgType::U32, Int32Argument::VALUE.make(u64::from(v)), None),
            ArgValue::Bool(v) => (ArgType::Bool, BoolArgument::VALUE.make(u64::from(v)), None),
            ArgValue::I64(v) => (ArgType::I64, 0, Some(v as u64)),
            ArgValue::U64(v) => (ArgType::U64, 0, Some(v)),
            ArgValue::F64(v) => (ArgType::F64, 0, Some(v.to_bits())),
            ArgValue::Pointer(v) => (ArgType::Pointer, 0, Some(v)),
            ArgValue::Koid(v) => (ArgType::Koid, 0, Some(v)),
            ArgValue::Str(text @ (StringRef::Index(_) | StringRef::Empty)) => match text.encode() {
                Ok(text) => (
                    ArgType::Str,
                    StringArgument::VALUE_REF.make(u64::from(text)),
                    None,
                ),
                Err(_) => return None,
            },
            ArgValue::Str(StringRef::Inline(_)) | ArgValue::Blob(_) => return None,
        };
        let words = 1 + u64::from(word.is_some());
        Some(ScalarArg {
            header: ArgumentHeader::TYPE.make(u64::from(arg_type.raw()))
                | ArgumentHeader::SIZE.make(words)
                | data,
            word: word.unwrap_or(0),
        })
    }

    /// Size of the encoded argument: 1 or 2 words.
    #[inline(always)]
    pub fn words(self) -> usize {
        ArgumentHeader::SIZE.get(self.header) as usize
    }

    /// The header word, named by string index `name_index`.
    #[inline(always)]
    pub fn header(self, name_index: u16) -> u64 {
        self.header | ArgumentHeader::NAME_REF.make(u64::from(name_index))
    }

    /// The value word (meaningful when [`Self::words`] is 2).
    #[inline(always)]
    pub fn word(self) -> u64 {
        self.word
    }

    /// The argument as two words, its header (name ref zero) then its value word: a copy
    /// that can be kept in two atomics; [`Self::from_words`] gives the argument back.
    #[inline(always)]
    pub fn to_words(self) -> [u64; 2] {
        [self.header, self.word]
    }

    /// The argument whose [`Self::to_words`] these are. (Other words give an argument that
    /// encodes as they say: its header is the first word.)
    #[inline(always)]
    pub fn from_words([header, word]: [u64; 2]) -> ScalarArg {
        ScalarArg { header, word }
    }

    /// The value it was made from.
    pub fn value(self) -> ArgValue<'static> {
        let int32 = Int32Argument::VALUE.get(self.header);
        match ArgType::from_raw(ArgumentHeader::TYPE.get(self.header) as u8) {
            Some(ArgType::I32) => ArgValue::I32(int32 as u32 as i32),
            Some(ArgType::U32) => ArgValue::U32(int32 as u32),
            Some(ArgType::Bool) => ArgValue::Bool(BoolArgument::VALUE.get(self.header) != 0),
            Some(ArgType::I64) => ArgValue::I64(self.word as i64),
            Some(ArgType::U64) => ArgValue::U64(self.word),
            Some(ArgType::F64) => ArgValue::F64(f64::from_bits(self.word)),
            Some(ArgType::Pointer) => ArgValue::Pointer(self.word),
            Some(ArgType::Koid) => ArgValue::Koid(self.word),
            Some(ArgType::Str) => match StringArgument::VALUE_REF.get(self.header) as u16 {
                0 => ArgValue::Str(StringRef::Empty),
                index => ArgValue::Str(StringRef::Index(index)),
            },
            // Only the kinds above are made: the rest is `Null`.
            _ => ArgValue::Null,
        }
    }
}

/// `args` with their inline string values cut, at character boundaries, so that together
/// they take at most `room` words: the longest texts are cut first, all to one common length
/// (texts shorter than it are kept whole). The cut arguments are written into `out`.
/// `None`: more than [`MAX_ARGS`] arguments, an argument that does not encode, or one that
/// does not fit even with every text emptied. For a front end whose texts together exceed
/// one record (each is already cut to its own limit): the record is written with shorter
/// texts rather than dropped.
pub fn fit_args<'a, 'o>(
    args: &[Arg<'a>],
    room: usize,
    out: &'o mut [Arg<'a>; MAX_ARGS],
) -> Option<&'o [Arg<'a>]> {
    let slots = out.get_mut(..args.len())?;
    slots.copy_from_slice(args);
    let args = slots;
    let text_words = |arg: &Arg<'_>| match arg.value {
        ArgValue::Str(StringRef::Inline(text)) => stream_words(text.len()),
        _ => 0,
    };
    // Every argument's words but its text's.
    let mut fixed = 0usize;
    for arg in args.iter() {
        fixed += match arg.value {
            ArgValue::Str(StringRef::Inline(_)) => {
                arg.name.encode().ok()?;
                1 + arg.name.stream_words()
            }
            _ => arg.words().ok()?,
        };
    }
    let budget = room.checked_sub(fixed)?;
    // The largest common cap (in words) whose capped texts fit the budget.
    let longest = args.iter().map(text_words).max().unwrap_or(0);
    let capped = |cap: usize| args.iter().map(|a| text_words(a).min(cap)).sum::<usize>();
    let (mut fits, mut too_big) = (0, longest + 1);
    while too_big - fits > 1 {
        let mid = fits + (too_big - fits) / 2;
        if capped(mid) <= budget {
            fits = mid;
        } else {
            too_big = mid;
        }
    }
    for arg in args.iter_mut() {
        if let ArgValue::Str(StringRef::Inline(text)) = arg.value {
            let text = super::refs::truncate_str(text, fits * 8);
            arg.value = ArgValue::Str(if text.is_empty() {
                StringRef::Empty
            } else {
                StringRef::Inline(text)
            });
        }
    }
    Some(args)
}

/// Appends `args` and returns their count, after checking there are at most 15.
#[inline(always)]
pub(crate) fn emit_args<S: Sink>(args: &[Arg<'_>], s: &mut S) -> Result<u64, EncodeError> {
    check_arg_count(args)?;
    for arg in args {
        arg.emit(s)?;
    }
    Ok(args.len() as u64)
}

/// Checks the argument count limit.
#[inline]
pub(crate) fn check_arg_count(args: &[Arg<'_>]) -> Result<u64, EncodeError> {
    if args.len() > MAX_ARGS {
        Err(EncodeError::TooManyArgs { count: args.len() })
    } else {
        Ok(args.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::Cursor;

    #[test]
    fn a_scalar_argument_comes_back_from_its_words() {
        let values = [
            ArgValue::Null,
            ArgValue::I32(-3),
            ArgValue::U32(3),
            ArgValue::Bool(true),
            ArgValue::I64(-1 << 40),
            ArgValue::U64(u64::MAX),
            ArgValue::F64(2.5),
            ArgValue::Pointer(0x1000),
            ArgValue::Koid(7),
            ArgValue::Str(StringRef::Index(12)),
            ArgValue::Str(StringRef::Empty),
        ];
        for value in values {
            let arg = ScalarArg::new(value).expect("a scalar");
            let back = ScalarArg::from_words(arg.to_words());
            assert_eq!(back, arg);
            assert_eq!(back.value(), value);
        }
    }

    fn total_words(args: &[Arg<'_>]) -> usize {
        args.iter().map(|a| a.words().unwrap()).sum()
    }

    #[test]
    fn fitted_args_cut_the_longest_texts_to_one_length_and_keep_the_rest() {
        let long = "x".repeat(5000);
        let longer = "é".repeat(4000); // 8000 bytes, two per character
        let args = [
            Arg::new(StringRef::Index(1), ArgValue::Str(StringRef::Inline(&long))),
            Arg::new(StringRef::Index(2), ArgValue::U64(7)),
            Arg::new(
                StringRef::Index(3),
                ArgValue::Str(StringRef::Inline("short")),
            ),
            Arg::new(
                StringRef::Index(4),
                ArgValue::Str(StringRef::Inline(&longer)),
            ),
        ];
        let room = 1000;
        let mut out = [Arg::new(StringRef::Empty, ArgValue::Null); MAX_ARGS];
        let fitted = fit_args(&args, room, &mut out).expect("fits");
        assert_eq!(fitted.len(), 4);
        assert!(total_words(fitted) <= room, "{}", total_words(fitted));
        // Fixed words: 4 headers, the u64's value, "short"'s one word: 6; the two long texts
        // share the other 994 words, 497 each (3 976 bytes), the second at a character
        // boundary.
        let text = |i: usize| match fitted[i].value {
            ArgValue::Str(StringRef::Inline(t)) => t,
            other => panic!("{other:?}"),
        };
        assert_eq!(text(0).len(), 497 * 8);
        assert_eq!(text(2), "short");
        assert_eq!(text(3).len(), 497 * 8);
        assert!(longer.starts_with(text(3)));
        assert_eq!(fitted[1], args[1]);
        // Room for everything: unchanged.
        let mut out = [Arg::new(StringRef::Empty, ArgValue::Null); MAX_ARGS];
        let exact = total_words(&args);
        assert_eq!(fit_args(&args, exact, &mut out), Some(&args[..]));
    }

    #[test]
    fn args_that_cannot_fit_even_without_their_texts_are_refused() {
        let args = [
            Arg::new(StringRef::Index(1), ArgValue::U64(1)),
            Arg::new(
                StringRef::Index(2),
                ArgValue::Str(StringRef::Inline("text")),
            ),
        ];
        let mut out = [Arg::new(StringRef::Empty, ArgValue::Null); MAX_ARGS];
        // Two words for the u64, one header for the text: 3.
        assert!(fit_args(&args, 2, &mut out).is_none());
        let fitted = fit_args(&args, 3, &mut out).expect("the text emptied");
        assert_eq!(fitted[1].value, ArgValue::Str(StringRef::Empty));
        let sixteen = [Arg::new(StringRef::Index(1), ArgValue::Null); MAX_ARGS + 1];
        assert!(fit_args(&sixteen, 4095, &mut out).is_none());
    }

    fn encode(arg: &Arg<'_>) -> Vec<u64> {
        let n = arg.words().unwrap();
        let mut out = vec![0; n];
        let mut c = Cursor::new(&mut out);
        arg.emit(&mut c).unwrap();
        assert_eq!(c.finish(), Ok(n));
        out
    }

    #[test]
    fn scalar_args_are_what_emit_writes_and_give_their_value_back() {
        let values = [
            ArgValue::Null,
            ArgValue::I32(-7),
            ArgValue::U32(u32::MAX),
            ArgValue::Bool(true),
            ArgValue::Bool(false),
            ArgValue::I64(-1),
            ArgValue::U64(0x1234_5678_9abc_def0),
            ArgValue::F64(2.5),
            ArgValue::Pointer(0xdead_beef),
            ArgValue::Koid(42),
            ArgValue::Str(StringRef::Index(2)),
            ArgValue::Str(StringRef::Index(0x7fff)),
            ArgValue::Str(StringRef::Empty),
        ];
        for value in values {
            let scalar = ScalarArg::new(value).expect("scalar");
            let mut words = vec![scalar.header(0x7abc)];
            if scalar.words() == 2 {
                words.push(scalar.word());
            }
            assert_eq!(
                words,
                encode(&Arg::new(StringRef::Index(0x7abc), value)),
                "{value:?}"
            );
            assert_eq!(scalar.value(), value);
        }
        assert_eq!(ScalarArg::new(ArgValue::Null), Some(ScalarArg::NULL));
        assert!(ScalarArg::new(ArgValue::Str(StringRef::Inline("text"))).is_none());
        assert!(ScalarArg::new(ArgValue::Str(StringRef::Index(0))).is_none());
        assert!(ScalarArg::new(ArgValue::Str(StringRef::Index(0x8000))).is_none());
        assert!(ScalarArg::new(ArgValue::Blob(&[1])).is_none());
    }

    #[test]
    fn spec_header_words() {
        // i32 -2 named by index 3: type 1, size 1, name 3, value in [32..63].
        assert_eq!(
            encode(&Arg::new(StringRef::Index(3), ArgValue::I32(-2))),
            [0xffff_fffe_0003_0011]
        );
        // u64 named inline "ab": type 4, size 3, name 0x8002, then "ab" stream, then value.
        assert_eq!(
            encode(&Arg::new("ab", ArgValue::U64(7))),
            [0x8002_0034, u64::from_ne_bytes(*b"ab\0\0\0\0\0\0"), 7]
        );
        // bool true: type 9, size 1, bit 32.
        assert_eq!(
            encode(&Arg::new(StringRef::Index(1), ArgValue::Bool(true))),
            [0x1_0001_0019]
        );
        // blob of 3 bytes: type 10, size 2, [32..63] = 3.
        assert_eq!(
            encode(&Arg::new(StringRef::Index(1), ArgValue::Blob(&[1, 2, 3]))),
            [0x3_0001_002a, 0x0003_0201]
        );
    }

    #[test]
    fn oversized_blob_is_refused() {
        let big = vec![0u8; MAX_RECORD_WORDS * 8];
        let arg = Arg::new(StringRef::Index(1), ArgValue::Blob(&big));
        assert_eq!(
            arg.words(),
            Err(EncodeError::ArgumentTooLarge { words: 4096 })
        );
    }
}
