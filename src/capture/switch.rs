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
        let int = |name| {
            format
                .require(name)
                .and_then(FieldDesc::expect_int)
                .cloned()
        };
        Ok(Self {
            prev_comm: format.require("prev_comm")?.clone(),
            prev_pid: int("prev_pid")?,
            prev_prio: int("prev_prio")?,
            prev_state: int("prev_state")?,
            next_comm: format.require("next_comm")?.clone(),
            next_pid: int("next_pid")?,
            next_prio: int("next_prio")?,
            states: TaskStateBits::from_print_fmt(&format.print_fmt)
                .unwrap_or_else(TaskStateBits::kernel_default),
        })
    }

    /// The `prev_state` letters of this kernel.
    pub fn state_bits(&self) -> &TaskStateBits {
        &self.states
    }

    /// Decodes one event's raw data (the `PERF_SAMPLE_RAW` bytes).
    pub fn decode(&self, raw: &RawData<'_>) -> Result<SchedSwitchFields, ParseError> {
        let int = |f: &FieldDesc| {
            f.read_int(raw).ok_or_else(|| {
                ParseError::Tracepoint(format!(
                    "field {} at {}+{} beyond the {} raw bytes",
                    f.name,
                    f.offset,
                    f.size,
                    raw.len()
                ))
            })
        };
        let comm = |f: &FieldDesc| {
            raw.get(f.offset, f.size)
                .map(|bytes| TaskName::from_raw(&bytes))
                .ok_or_else(|| {
                    ParseError::Tracepoint(format!(
                        "field {} at {}+{} beyond the {} raw bytes",
                        f.name,
                        f.offset,
                        f.size,
                        raw.len()
                    ))
                })
        };
        Ok(SchedSwitchFields {
            prev_comm: comm(&self.prev_comm)?,
            prev_tid: int(&self.prev_pid)? as u32,
            prev_prio: int(&self.prev_prio)?,
            prev_state: int(&self.prev_state)?,
            next_comm: comm(&self.next_comm)?,
            next_tid: int(&self.next_pid)? as u32,
            next_prio: int(&self.next_prio)?,
        })
    }
}
