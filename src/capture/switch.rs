//! `sched:sched_switch` raw tracepoint data, decoded by the field offsets of the tracepoint's
//! format file (read once when the event is opened).

use super::records::{ParseError, TaskName};
use super::ring::RawData;
use super::state::TaskStateBits;
use super::tracepoint::{FieldDesc, FormatError, TracepointFormat};

/// Where the `sched_switch` fields are, and what `prev_state` bits mean, on this kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedSwitchFormat {
    prev_comm: FieldDesc,
    prev_pid: FieldDesc,
    prev_prio: FieldDesc,
    prev_state: FieldDesc,
    next_comm: FieldDesc,
    next_pid: FieldDesc,
    next_prio: FieldDesc,
    states: TaskStateBits,
    /// The same offsets, checked once, for [`Self::decode_comm16`] (`None` when a comm
    /// field is not the kernel's `char[16]`).
    fixed: Option<FixedLayout>,
}

/// An integer field at a known offset, of a size [`FieldDesc::expect_int`] accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct IntAt {
    offset: usize,
    size: usize,
    signed: bool,
}

impl IntAt {
    fn of(f: &FieldDesc) -> Self {
        Self {
            offset: f.offset,
            size: f.size,
            signed: f.signed,
        }
    }

    /// The field in `raw` (sign-extended when signed); `None` past the end.
    #[inline]
    fn read(self, raw: &[u8]) -> Option<i64> {
        let at = self.offset;
        Some(match (self.size, self.signed) {
            (4, true) => i64::from(i32::from_ne_bytes(array_at(raw, at)?)),
            (4, false) => i64::from(u32::from_ne_bytes(array_at(raw, at)?)),
            (8, _) => i64::from_ne_bytes(array_at(raw, at)?),
            (2, true) => i64::from(i16::from_ne_bytes(array_at(raw, at)?)),
            (2, false) => i64::from(u16::from_ne_bytes(array_at(raw, at)?)),
            (1, true) => i64::from(i8::from_ne_bytes(array_at(raw, at)?)),
            (1, false) => i64::from(u8::from_ne_bytes(array_at(raw, at)?)),
            _ => return None,
        })
    }
}

/// The `N` bytes of `raw` at `at` (a fixed-size load), `None` past the end. `at + N` does not
/// overflow: a [`FixedLayout`] exists only for fields whose end does not.
#[inline]
pub(crate) fn array_at<const N: usize>(raw: &[u8], at: usize) -> Option<[u8; N]> {
    raw.get(at..at + N)?.try_into().ok()
}

/// Where the fields are when both comms are `char[16]` (every kernel so far).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FixedLayout {
    prev_comm: usize,
    next_comm: usize,
    prev_pid: IntAt,
    prev_prio: IntAt,
    prev_state: IntAt,
    next_pid: IntAt,
    next_prio: IntAt,
    /// Both pids and priorities are `int` (4 bytes, signed), as on every kernel so far: read
    /// without a dispatch on their size.
    int4: bool,
}

impl FixedLayout {
    /// `None` when a comm is not `char[16]` or a field's end overflows.
    fn of(
        (prev_comm, next_comm): (&FieldDesc, &FieldDesc),
        [prev_pid, prev_prio, prev_state, next_pid, next_prio]: [&FieldDesc; 5],
    ) -> Option<Self> {
        let all = [
            prev_comm, next_comm, prev_pid, prev_prio, prev_state, next_pid, next_prio,
        ];
        if prev_comm.size != 16
            || next_comm.size != 16
            || all.iter().any(|f| f.offset.checked_add(f.size).is_none())
        {
            return None;
        }
        let int4 = [prev_pid, prev_prio, next_pid, next_prio]
            .iter()
            .all(|f| f.size == 4 && f.signed);
        Some(Self {
            prev_comm: prev_comm.offset,
            next_comm: next_comm.offset,
            prev_pid: IntAt::of(prev_pid),
            prev_prio: IntAt::of(prev_prio),
            prev_state: IntAt::of(prev_state),
            next_pid: IntAt::of(next_pid),
            next_prio: IntAt::of(next_prio),
            int4,
        })
    }
}

/// One `sched_switch` event's fields with the task names as the ring holds them
/// (`comm[16]`, NUL-padded): what the capture thread keeps per switch, converted to a
/// [`TaskName`] only when a thread is announced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Comm16Fields {
    pub(crate) prev_comm: [u8; 16],
    pub(crate) prev_tid: u32,
    pub(crate) prev_prio: i64,
    pub(crate) prev_state: i64,
    pub(crate) next_comm: [u8; 16],
    pub(crate) next_tid: u32,
    pub(crate) next_prio: i64,
}

/// The fields of one `sched_switch` event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedSwitchFields {
    /// Outgoing task name.
    pub prev_comm: TaskName,
    /// Outgoing thread id (the tracepoint calls it `prev_pid`; it is the kernel task id).
    pub prev_tid: u32,
    /// Outgoing kernel priority.
    pub prev_prio: i64,
    /// Outgoing `prev_state` bits.
    pub prev_state: i64,
    /// Incoming task name.
    pub next_comm: TaskName,
    /// Incoming thread id.
    pub next_tid: u32,
    /// Incoming kernel priority.
    pub next_prio: i64,
}

impl SchedSwitchFormat {
    /// From the parsed format file; fails if a needed field is absent or oddly sized.
    pub fn from_format(format: &TracepointFormat) -> Result<Self, FormatError> {
        let int = |name| format.require_int(name);
        let prev_comm = format.require("prev_comm")?.clone();
        let next_comm = format.require("next_comm")?.clone();
        let (prev_pid, prev_prio, prev_state) =
            (int("prev_pid")?, int("prev_prio")?, int("prev_state")?);
        let (next_pid, next_prio) = (int("next_pid")?, int("next_prio")?);
        let fixed = FixedLayout::of(
            (&prev_comm, &next_comm),
            [&prev_pid, &prev_prio, &prev_state, &next_pid, &next_prio],
        );
        Ok(Self {
            prev_comm,
            prev_pid,
            prev_prio,
            prev_state,
            next_comm,
            next_pid,
            next_prio,
            states: TaskStateBits::from_print_fmt(&format.print_fmt)
                .unwrap_or_else(TaskStateBits::kernel_default),
            fixed,
        })
    }

    /// Decodes one event's contiguous raw data in place when both comms are `char[16]`:
    /// loads at the offsets checked when the format was read, the names left as raw bytes.
    /// `None` when the layout is another or a field lies beyond `raw` (then [`Self::decode`]
    /// says why).
    #[inline]
    pub(crate) fn decode_comm16(&self, raw: &[u8]) -> Option<Comm16Fields> {
        let f = self.fixed.as_ref()?;
        let (prev_tid, prev_prio, next_tid, next_prio) = if f.int4 {
            let int = |at: usize| array_at(raw, at).map(|b| i64::from(i32::from_ne_bytes(b)));
            (
                int(f.prev_pid.offset)?,
                int(f.prev_prio.offset)?,
                int(f.next_pid.offset)?,
                int(f.next_prio.offset)?,
            )
        } else {
            (
                f.prev_pid.read(raw)?,
                f.prev_prio.read(raw)?,
                f.next_pid.read(raw)?,
                f.next_prio.read(raw)?,
            )
        };
        Some(Comm16Fields {
            prev_comm: array_at(raw, f.prev_comm)?,
            prev_tid: prev_tid as u32,
            prev_prio,
            prev_state: f.prev_state.read(raw)?,
            next_comm: array_at(raw, f.next_comm)?,
            next_tid: next_tid as u32,
            next_prio,
        })
    }

    /// The `prev_state` letters of this kernel.
    pub fn state_bits(&self) -> &TaskStateBits {
        &self.states
    }

    /// Decodes one event's raw data (the `PERF_SAMPLE_RAW` bytes).
    pub fn decode(&self, raw: &RawData<'_>) -> Result<SchedSwitchFields, ParseError> {
        Ok(SchedSwitchFields {
            prev_comm: self.prev_comm.task_name_in(raw)?,
            prev_tid: self.prev_pid.int_in(raw)? as u32,
            prev_prio: self.prev_prio.int_in(raw)?,
            prev_state: self.prev_state.int_in(raw)?,
            next_comm: self.next_comm.task_name_in(raw)?,
            next_tid: self.next_pid.int_in(raw)? as u32,
            next_prio: self.next_prio.int_in(raw)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn format(fields: &[(&str, usize, usize, bool)]) -> SchedSwitchFormat {
        let mut text = String::from("name: sched_switch\nID: 1\nformat:\n");
        for (name, offset, size, signed) in fields {
            text.push_str(&format!(
                "\tfield:x {name};\toffset:{offset};\tsize:{size};\tsigned:{};\n",
                u8::from(*signed)
            ));
        }
        text.push_str("\nprint fmt: \"x\"\n");
        SchedSwitchFormat::from_format(&TracepointFormat::parse(&text).unwrap()).unwrap()
    }

    /// The in-place decode gives exactly what the general one gives, for the layout of every
    /// kernel so far (`int` pids) and for another, and declines what the general one rejects.
    #[test]
    fn in_place_decode_matches_the_general_one() {
        let kernel = format(&[
            ("prev_comm", 8, 16, false),
            ("prev_pid", 24, 4, true),
            ("prev_prio", 28, 4, true),
            ("prev_state", 32, 8, true),
            ("next_comm", 40, 16, false),
            ("next_pid", 56, 4, true),
            ("next_prio", 60, 4, true),
        ]);
        let odd = format(&[
            ("prev_comm", 0, 16, false),
            ("prev_pid", 16, 2, false),
            ("prev_prio", 18, 1, true),
            ("prev_state", 20, 4, false),
            ("next_comm", 24, 16, false),
            ("next_pid", 40, 8, true),
            ("next_prio", 48, 2, true),
        ]);
        assert!(kernel.fixed.is_some_and(|f| f.int4));
        assert!(odd.fixed.is_some_and(|f| !f.int4));
        let mut seed = 0x1234_5678_9abc_def0u64;
        for fmt in [&kernel, &odd] {
            for _ in 0..200 {
                let raw: Vec<u8> = (0..68)
                    .map(|_| {
                        seed = seed
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        (seed >> 56) as u8
                    })
                    .collect();
                let general = fmt.decode(&RawData::Single(&raw)).unwrap();
                let fast = fmt.decode_comm16(&raw).unwrap();
                assert_eq!(
                    (fast.prev_tid, fast.prev_prio, fast.prev_state),
                    (general.prev_tid, general.prev_prio, general.prev_state)
                );
                assert_eq!(
                    (fast.next_tid, fast.next_prio),
                    (general.next_tid, general.next_prio)
                );
                assert_eq!(TaskName::from_bytes(&fast.prev_comm), general.prev_comm);
                assert_eq!(TaskName::from_bytes(&fast.next_comm), general.next_comm);
            }
            let short = [0u8; 45];
            assert!(fmt.decode(&RawData::Single(&short)).is_err());
            assert!(fmt.decode_comm16(&short).is_none());
        }
        let wide_comm = format(&[
            ("prev_comm", 8, 32, false),
            ("prev_pid", 40, 4, true),
            ("prev_prio", 44, 4, true),
            ("prev_state", 48, 8, true),
            ("next_comm", 56, 16, false),
            ("next_pid", 72, 4, true),
            ("next_prio", 76, 4, true),
        ]);
        assert!(
            wide_comm.decode_comm16(&[0; 80]).is_none(),
            "not comm[16]: general path"
        );
    }
}
