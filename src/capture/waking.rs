//! `sched:sched_waking` (or `sched:sched_wakeup`) raw tracepoint data, decoded by the field
//! offsets of the tracepoint's format file (read once when the event is opened).
//!
//! The tracepoint fires where `try_to_wake_up()` runs, in the waker's context: the sample's own
//! `(pid, tid)` is the waker's, and the raw data names the woken task (`comm`, `pid`, `prio`,
//! `target_cpu`: the CPU it is queued on). It is declared with `__perf_task(p)`, but a
//! per-thread event of the woken task sees it only while that event runs (the kernel skips a
//! stopped event), so not for a sleeping task: a process capture records the wake-ups its own
//! threads make, not those of its threads by others (a timer, another process), which only a
//! system-wide capture has.

use super::records::{ParseError, TaskName};
use super::ring::RawData;
use super::switch::array_at;
use super::tracepoint::{FieldDesc, FormatError, TracepointFormat};

/// Where the wake-up fields are on this kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedWakingFormat {
    comm: FieldDesc,
    pid: FieldDesc,
    prio: FieldDesc,
    /// Absent on kernels before 4.? that had `success` only: the sample's CPU is used then.
    target_cpu: Option<FieldDesc>,
    /// The offsets when `comm` is `char[16]` and the integers are 4-byte `int`s (every kernel
    /// so far): read with fixed loads ([`Self::decode_comm16`]).
    fixed: Option<FixedWaking>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FixedWaking {
    comm: usize,
    pid: usize,
    prio: usize,
    target_cpu: Option<usize>,
}

/// One wake-up's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedWakingFields {
    /// The woken task's name.
    pub comm: TaskName,
    /// The woken thread (the tracepoint calls it `pid`; it is the kernel task id).
    pub tid: u32,
    /// Its kernel priority.
    pub prio: i64,
    /// The CPU it is queued on, when the kernel says.
    pub target_cpu: Option<u32>,
}

/// The fields as the capture thread keeps them, the name still the ring's `comm[16]` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WakingComm16 {
    pub(crate) comm: [u8; 16],
    pub(crate) tid: u32,
    pub(crate) prio: i64,
    pub(crate) target_cpu: Option<u32>,
}

impl SchedWakingFormat {
    /// From the parsed format file; fails if a needed field is absent or oddly sized.
    pub fn from_format(format: &TracepointFormat) -> Result<Self, FormatError> {
        let int = |name| format.require_int(name);
        let comm = format.require("comm")?.clone();
        let (pid, prio) = (int("pid")?, int("prio")?);
        let target_cpu = match format.field("target_cpu") {
            Some(f) => Some(f.expect_int()?.clone()),
            None => None,
        };
        let int4 = |f: &FieldDesc| f.size == 4 && f.signed;
        // `array_at` needs every field's end to fit a `usize`.
        let ends_fit = [Some(&comm), Some(&pid), Some(&prio), target_cpu.as_ref()]
            .into_iter()
            .flatten()
            .all(|f| f.offset.checked_add(f.size).is_some());
        let fixed = (ends_fit
            && comm.size == 16
            && int4(&pid)
            && int4(&prio)
            && target_cpu.as_ref().map_or(true, int4))
        .then(|| FixedWaking {
            comm: comm.offset,
            pid: pid.offset,
            prio: prio.offset,
            target_cpu: target_cpu.as_ref().map(|f| f.offset),
        });
        Ok(Self {
            comm,
            pid,
            prio,
            target_cpu,
            fixed,
        })
    }

    /// The fields of one wake-up's contiguous raw data read in place, the name left as the
    /// ring's bytes; `None` for another layout or a field beyond `raw` (then [`Self::decode`]
    /// says why).
    #[inline]
    pub(crate) fn decode_comm16(&self, raw: &[u8]) -> Option<WakingComm16> {
        let f = self.fixed.as_ref()?;
        let int = |at: usize| array_at(raw, at).map(i32::from_ne_bytes);
        let target_cpu = match f.target_cpu {
            Some(at) => Some(int(at)? as u32),
            None => None,
        };
        Some(WakingComm16 {
            comm: array_at(raw, f.comm)?,
            tid: int(f.pid)? as u32,
            prio: i64::from(int(f.prio)?),
            target_cpu,
        })
    }

    /// Decodes one wake-up's raw data (the `PERF_SAMPLE_RAW` bytes).
    pub fn decode(&self, raw: &RawData<'_>) -> Result<SchedWakingFields, ParseError> {
        Ok(SchedWakingFields {
            comm: self.comm.task_name_in(raw)?,
            tid: self.pid.int_in(raw)? as u32,
            prio: self.prio.int_in(raw)?,
            target_cpu: match &self.target_cpu {
                Some(f) => Some(f.int_in(raw)? as u32),
                None => None,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::capture::fake::SCHED_WAKING_FORMAT as FORMAT;

    fn raw(comm: &str, tid: u32, prio: i32, target: i32) -> Vec<u8> {
        let mut b = vec![0u8; 36];
        b[4..8].copy_from_slice(&77i32.to_ne_bytes());
        b[8..8 + comm.len()].copy_from_slice(comm.as_bytes());
        b[24..28].copy_from_slice(&tid.to_ne_bytes());
        b[28..32].copy_from_slice(&prio.to_ne_bytes());
        b[32..36].copy_from_slice(&target.to_ne_bytes());
        b
    }

    #[test]
    fn the_kernels_layout_in_place_and_in_general() {
        let f = SchedWakingFormat::from_format(&TracepointFormat::parse(FORMAT).unwrap()).unwrap();
        let bytes = raw("worker-2", 4243, 120, 1);
        let general = f.decode(&RawData::Single(&bytes)).unwrap();
        assert_eq!(
            general,
            SchedWakingFields {
                comm: TaskName::from_bytes(b"worker-2"),
                tid: 4243,
                prio: 120,
                target_cpu: Some(1)
            }
        );
        let fast = f.decode_comm16(&bytes).unwrap();
        assert_eq!(
            (
                TaskName::from_bytes(&fast.comm),
                fast.tid,
                fast.prio,
                fast.target_cpu
            ),
            (general.comm, general.tid, general.prio, general.target_cpu)
        );
        // Split by the ring's end: the general path reads across.
        let (a, b) = bytes.split_at(26);
        assert_eq!(f.decode(&RawData::Split(a, b)).unwrap(), general);
        // Short: an error, never a panic.
        assert!(f.decode(&RawData::Single(&bytes[..30])).is_err());
        assert!(f.decode_comm16(&bytes[..30]).is_none());
    }

    #[test]
    fn an_older_layout_without_target_cpu() {
        let old = FORMAT.replace(
            "\tfield:int target_cpu;\toffset:32;\tsize:4;\tsigned:1;\n",
            "\tfield:int success;\toffset:32;\tsize:4;\tsigned:1;\n",
        );
        let f = SchedWakingFormat::from_format(&TracepointFormat::parse(&old).unwrap()).unwrap();
        let bytes = raw("a", 5, 100, 1);
        assert_eq!(f.decode(&RawData::Single(&bytes)).unwrap().target_cpu, None);
        assert_eq!(f.decode_comm16(&bytes).unwrap().target_cpu, None);
        let missing = FORMAT.replace("prio;", "priority;");
        assert!(
            SchedWakingFormat::from_format(&TracepointFormat::parse(&missing).unwrap()).is_err()
        );
    }
}
