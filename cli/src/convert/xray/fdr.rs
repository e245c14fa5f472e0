//! The FDR log reader: buffers → blocks of per-thread events with absolute TSCs.
//!
//! File structure by version (the header is read by [`super::header`]):
//!
//! * version 1 (the spec): the data is a sequence of fixed-size thread buffers of
//!   `buffer_size` bytes (from the header). Each holds
//!   `NewBuffer WallTimeMarker NewCPUId Body* EndOfBuffer`, then unused bytes up to the
//!   buffer's end, which are skipped.
//! * versions 2..=5 (compiler-rt since LLVM 7): each buffer is written as a
//!   BufferExtents record giving the number of record bytes that follow, then exactly
//!   those bytes: `NewBuffer WallTimeMarker Pid? NewCPUId Body*` (Pid from version 3).
//!
//! `Body` is NewCPUId, TSCWrap, Function (Entry_Args followed by CallArgument*),
//! CustomEventMarker + payload, or TypedEventMarker + payload. The reader enforces
//! this grammar (as LLVM's BlockVerifier does) and reports the first violation with
//! its offset, keeping every event decoded before it.
//!
//! Differences from LLVM's reader, all deliberate: EndOfBuffer is accepted in any
//! version (it ends the block; the rest of the buffer is skipped and counted); a
//! NewBuffer inside a body starts a new block; bytes between a buffer's extent and the
//! next BufferExtents are an error here (LLVM scans forward for the next BufferExtents
//! byte; compiler-rt never writes such bytes); a CallArgument after an exit record is
//! dropped and counted in `ReadStats::orphan_call_args` instead of turning the exit
//! into an entry.
//!
//! Timestamps: NewCPUId and TSCWrap set an absolute base; each function record (and,
//! from version 5, each custom/typed event marker) adds its delta to the running TSC,
//! which becomes that record's timestamp. Version 1..=4 custom events carry an
//! absolute TSC and leave the running TSC alone.

use super::error::{XrayError, XrayErrorKind};
use super::event::{ReadStats, WallTimeAnchor, XrayEvent, XrayEventKind};
use super::fdr_records::{decode_record, EventTime, FdrRecord, FunctionAction};
use super::header::{FileHeader, BUFFER_SIZE_OFFSET, FILE_HEADER_SIZE};

/// Where a block (one thread buffer's records, from its NewBuffer) lies in the log, and what
/// its leading records said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BlockInfo {
    /// Process id from the Pid record (version >= 3).
    pub(crate) pid: Option<u32>,
    /// Thread id from NewBuffer.
    pub(crate) tid: u32,
    /// The buffer's wall time, anchored to its first NewCPUId.
    pub(crate) wall: Option<WallTimeAnchor>,
    /// Its bytes: from its NewBuffer to where the next block starts, its buffer ends, or
    /// decoding stopped. Decoding this range alone ([`read_block`]) gives the same events.
    pub(crate) start: usize,
    /// See `start`.
    pub(crate) end: usize,
}

/// What the reader hands over, in log order: a block's events (each complete: its
/// CallArguments attached), then the block itself.
pub(crate) trait BlockSink {
    /// An event of the block being read.
    fn event(&mut self, event: XrayEvent);
    /// The block whose events came since the previous block ended.
    fn block(&mut self, info: BlockInfo);
}

/// The events of one thread buffer.
#[derive(Debug)]
pub(crate) struct Block {
    /// Where it lies, and what its leading records said.
    pub(crate) info: BlockInfo,
    /// Decoded events in record order.
    pub(crate) events: Vec<XrayEvent>,
}

/// Collects whole blocks, events included.
#[derive(Debug, Default)]
struct Blocks {
    done: Vec<Block>,
    events: Vec<XrayEvent>,
}

impl BlockSink for Blocks {
    fn event(&mut self, event: XrayEvent) {
        self.events.push(event);
    }

    fn block(&mut self, info: BlockInfo) {
        let events = std::mem::take(&mut self.events);
        self.done.push(Block { info, events });
    }
}

/// Where the block grammar is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Start of a buffer: expecting NewBuffer.
    Start,
    /// After NewBuffer: expecting WallTimeMarker.
    AfterNewBuffer,
    /// After WallTimeMarker: expecting Pid or NewCPUId.
    AfterWallTime,
    /// After Pid: expecting NewCPUId.
    AfterPid,
    /// In the body after a record that is not a function record or argument.
    Body,
    /// In the body right after a function record or CallArgument.
    AfterFunction,
    /// After EndOfBuffer: the rest of the buffer is unused.
    Ended,
}

impl State {
    fn name(self, last: &'static str) -> &'static str {
        match self {
            State::Start => "the start of a buffer",
            State::AfterNewBuffer => "NewBuffer",
            State::AfterWallTime => "WallTimeMarker",
            State::AfterPid => "Pid",
            State::Body | State::AfterFunction => last,
            State::Ended => "EndOfBuffer",
        }
    }
}

/// Decodes every buffer of an FDR log into `blocks`, counting into `stats`.
///
/// Returns the first error; blocks decoded up to it (including the partial block it
/// occurred in) are in `blocks` either way.
pub(crate) fn read_blocks(
    data: &[u8],
    header: &FileHeader,
    blocks: &mut Vec<Block>,
    stats: &mut ReadStats,
) -> Result<(), XrayError> {
    let mut collected = Blocks::default();
    let result = read_into(data, header, &mut collected, stats);
    blocks.append(&mut collected.done);
    result
}

/// Decodes every buffer of an FDR log into `sink`, counting into `stats`; the first error,
/// after everything decoded before it (the partial block it occurred in included).
pub(crate) fn read_into(
    data: &[u8],
    header: &FileHeader,
    sink: &mut dyn BlockSink,
    stats: &mut ReadStats,
) -> Result<(), XrayError> {
    let mut reader = Reader::new(data, header.version, sink, stats);
    let result = if header.version == 1 {
        reader.read_fixed_buffers(header.buffer_size())
    } else {
        reader.read_extent_buffers()
    };
    reader.finish_block();
    result
}

/// Decodes the one block that `info` found ([`BlockSink::block`] of an earlier reading)
/// into `sink`, counting into `stats`.
pub(crate) fn read_block(
    data: &[u8],
    version: u16,
    info: &BlockInfo,
    sink: &mut dyn BlockSink,
    stats: &mut ReadStats,
) -> Result<(), XrayError> {
    let mut reader = Reader::new(data, version, sink, stats);
    let result = reader.read_buffer(info.start, info.end);
    reader.finish_block();
    result
}

struct Reader<'a, 'b> {
    data: &'a [u8],
    version: u16,
    sink: &'b mut dyn BlockSink,
    stats: &'b mut ReadStats,
    state: State,
    /// Name of the last record, for error messages.
    last: &'static str,
    /// Offset of the record being applied.
    pos: usize,
    /// Offset up to which records were taken (or skipped): where the current block ends
    /// if it ends now.
    consumed: usize,
    cur: Option<Cursor>,
}

/// Running state of the block being decoded.
#[derive(Debug)]
struct Cursor {
    info: BlockInfo,
    cpu: u16,
    tsc: u64,
    /// The last function event, held while CallArguments may follow it.
    pending: Option<XrayEvent>,
}

impl<'a, 'b> Reader<'a, 'b> {
    fn new(
        data: &'a [u8],
        version: u16,
        sink: &'b mut dyn BlockSink,
        stats: &'b mut ReadStats,
    ) -> Self {
        Reader {
            data,
            version,
            sink,
            stats,
            state: State::Start,
            last: "",
            pos: 0,
            consumed: 0,
            cur: None,
        }
    }

    /// Version 1: fixed-size buffers of `buffer_size` bytes after the header.
    fn read_fixed_buffers(&mut self, buffer_size: u64) -> Result<(), XrayError> {
        if self.data.len() <= FILE_HEADER_SIZE {
            return Ok(());
        }
        let size = usize::try_from(buffer_size).unwrap_or(usize::MAX);
        if size == 0 {
            return Err(XrayError::new(
                BUFFER_SIZE_OFFSET,
                XrayErrorKind::ZeroBufferSize,
            ));
        }
        let mut start = FILE_HEADER_SIZE;
        while start < self.data.len() {
            let end = start.saturating_add(size);
            self.read_buffer(start, end)?;
            start = end;
        }
        Ok(())
    }

    /// Versions 2..=5: BufferExtents-delimited buffers.
    fn read_extent_buffers(&mut self) -> Result<(), XrayError> {
        let mut pos = FILE_HEADER_SIZE;
        while pos < self.data.len() {
            let (record, len) =
                decode_record(self.data, pos, self.version).map_err(|k| XrayError::new(pos, k))?;
            let FdrRecord::BufferExtents { size } = record else {
                let kind = XrayErrorKind::UnexpectedRecord {
                    found: record.name(),
                    after: "the end of a buffer (expected BufferExtents)",
                };
                return Err(XrayError::new(pos, kind));
            };
            self.stats.records += 1;
            let start = pos + len;
            let end = start.saturating_add(usize::try_from(size).unwrap_or(usize::MAX));
            self.read_buffer(start, end)?;
            pos = end;
        }
        Ok(())
    }

    /// Decodes the records of one buffer occupying `start..end` (which may reach past the
    /// end of the file: that is reported as truncation).
    fn read_buffer(&mut self, start: usize, end: usize) -> Result<(), XrayError> {
        self.finish_block();
        self.state = State::Start;
        self.last = "";
        let mut pos = start;
        self.consumed = start;
        while pos < end {
            if pos >= self.data.len() {
                let kind = XrayErrorKind::Truncated {
                    record: "buffer",
                    needed: (end - start) as u64,
                    available: (self.data.len().saturating_sub(start)) as u64,
                };
                return Err(XrayError::new(pos, kind));
            }
            if self.state == State::Ended {
                self.stats.skipped_bytes += (end.min(self.data.len()) - pos) as u64;
                pos = end.min(self.data.len());
                self.consumed = pos;
                continue;
            }
            let (record, len) =
                decode_record(self.data, pos, self.version).map_err(|k| XrayError::new(pos, k))?;
            if pos + len > end {
                let kind = XrayErrorKind::BufferOverrun {
                    record: record.name(),
                    len: len as u64,
                    overrun: (pos + len - end) as u64,
                };
                return Err(XrayError::new(pos, kind));
            }
            self.pos = pos;
            self.apply(record).map_err(|k| XrayError::new(pos, k))?;
            self.stats.records += 1;
            pos += len;
            self.consumed = pos;
        }
        Ok(())
    }

    /// Hands the current block (if any) to the sink, its held event first.
    fn finish_block(&mut self) {
        self.flush_pending();
        if let Some(mut cur) = self.cur.take() {
            cur.info.end = self.consumed;
            self.sink.block(cur.info);
        }
    }

    /// Hands the held function event (if any) to the sink: no CallArgument follows it.
    fn flush_pending(&mut self) {
        if let Some(event) = self.cur.as_mut().and_then(|c| c.pending.take()) {
            self.sink.event(event);
        }
    }

    fn unexpected(&self, record: &FdrRecord<'_>) -> XrayErrorKind {
        XrayErrorKind::UnexpectedRecord {
            found: record.name(),
            after: self.state.name(self.last),
        }
    }

    /// Applies one record to the grammar state and the current block.
    fn apply(&mut self, record: FdrRecord<'_>) -> Result<(), XrayErrorKind> {
        let in_body = matches!(self.state, State::Body | State::AfterFunction);
        if !matches!(record, FdrRecord::CallArgument { .. }) {
            self.flush_pending();
        }
        let next = match record {
            FdrRecord::NewBuffer { tid } => {
                if !(self.state == State::Start || in_body) {
                    return Err(self.unexpected(&record));
                }
                self.finish_block();
                self.stats.buffers += 1;
                self.cur = Some(Cursor {
                    info: BlockInfo {
                        pid: None,
                        tid,
                        wall: None,
                        start: self.pos,
                        end: self.pos,
                    },
                    cpu: 0,
                    tsc: 0,
                    pending: None,
                });
                State::AfterNewBuffer
            }
            FdrRecord::WallTime { seconds, micros } => {
                if self.state != State::AfterNewBuffer {
                    return Err(self.unexpected(&record));
                }
                self.cursor()?.info.wall = Some(WallTimeAnchor {
                    seconds,
                    micros,
                    tsc: None,
                });
                State::AfterWallTime
            }
            FdrRecord::Pid { pid } => {
                if self.state != State::AfterWallTime {
                    return Err(self.unexpected(&record));
                }
                self.cursor()?.info.pid = Some(pid);
                State::AfterPid
            }
            FdrRecord::NewCpuId { cpu, tsc } => {
                if !(matches!(self.state, State::AfterWallTime | State::AfterPid) || in_body) {
                    return Err(self.unexpected(&record));
                }
                let cur = self.cursor()?;
                cur.cpu = cpu;
                cur.tsc = tsc;
                if let Some(wall) = cur.info.wall.as_mut() {
                    wall.tsc.get_or_insert(tsc);
                }
                State::Body
            }
            FdrRecord::TscWrap { tsc } => {
                if !in_body {
                    return Err(self.unexpected(&record));
                }
                self.cursor()?.tsc = tsc;
                self.stats.tsc_wraps += 1;
                State::Body
            }
            FdrRecord::Function {
                action,
                func_id,
                tsc_delta,
            } => {
                if !in_body {
                    return Err(self.unexpected(&record));
                }
                let cur = self.cursor()?;
                cur.tsc = cur.tsc.wrapping_add(u64::from(tsc_delta));
                let func_id = func_id as i32; // 28 bits: always non-negative
                let kind = match action {
                    FunctionAction::Entry => XrayEventKind::Enter { func_id },
                    FunctionAction::EntryArgs => XrayEventKind::EnterWithArgs {
                        func_id,
                        args: Vec::new(),
                    },
                    FunctionAction::Exit => XrayEventKind::Exit { func_id },
                    FunctionAction::TailExit => XrayEventKind::TailExit { func_id },
                };
                cur.pending = Some(cur.event(cur.tsc, cur.cpu, kind));
                State::AfterFunction
            }
            FdrRecord::CallArgument { arg } => {
                if self.state != State::AfterFunction {
                    return Err(self.unexpected(&record));
                }
                let cur = self.cursor()?;
                match cur.pending.as_mut().map(|e| &mut e.kind) {
                    Some(XrayEventKind::EnterWithArgs { args, .. }) => args.push(arg),
                    // llvm-xray turns an entry followed by arguments into an entry with args.
                    Some(kind @ XrayEventKind::Enter { .. }) => {
                        let func_id = kind.func_id().unwrap_or_default();
                        *kind = XrayEventKind::EnterWithArgs {
                            func_id,
                            args: vec![arg],
                        };
                    }
                    _ => self.stats.orphan_call_args += 1,
                }
                State::AfterFunction
            }
            FdrRecord::CustomEvent { time, cpu, data } => {
                if !in_body {
                    return Err(self.unexpected(&record));
                }
                let cur = self.cursor()?;
                let tsc = match time {
                    EventTime::Delta(delta) => {
                        cur.tsc = cur.tsc.wrapping_add_signed(i64::from(delta));
                        cur.tsc
                    }
                    EventTime::Absolute(tsc) => tsc,
                };
                let cpu = cpu.unwrap_or(cur.cpu);
                let kind = XrayEventKind::CustomEvent {
                    data: data.to_vec(),
                };
                let event = cur.event(tsc, cpu, kind);
                self.sink.event(event);
                State::Body
            }
            FdrRecord::TypedEvent {
                tsc_delta,
                event_type,
                data,
            } => {
                if !in_body {
                    return Err(self.unexpected(&record));
                }
                let cur = self.cursor()?;
                cur.tsc = cur.tsc.wrapping_add_signed(i64::from(tsc_delta));
                let kind = XrayEventKind::TypedEvent {
                    event_type,
                    data: data.to_vec(),
                };
                let event = cur.event(cur.tsc, cur.cpu, kind);
                self.sink.event(event);
                State::Body
            }
            FdrRecord::EndOfBuffer => {
                if !in_body {
                    return Err(self.unexpected(&record));
                }
                State::Ended
            }
            FdrRecord::BufferExtents { .. } => return Err(self.unexpected(&record)),
        };
        self.state = next;
        self.last = record.name();
        Ok(())
    }

    /// The current block. Every state past `Start` has one; the error is unreachable
    /// unless the grammar above is wrong, and then it is reported rather than panicking.
    fn cursor(&mut self) -> Result<&mut Cursor, XrayErrorKind> {
        let after = self.state.name(self.last);
        self.cur.as_mut().ok_or(XrayErrorKind::UnexpectedRecord {
            found: "record",
            after,
        })
    }
}

impl Cursor {
    /// An event of this block.
    fn event(&self, tsc: u64, cpu: u16, kind: XrayEventKind) -> XrayEvent {
        XrayEvent {
            tsc,
            cpu,
            pid: self.info.pid,
            tid: self.info.tid,
            kind,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fdr_records::encode::{fields, function, metadata};
    use super::super::fdr_records::METADATA_RECORD_SIZE;
    use super::*;

    fn header(version: u16, buffer_size: u64) -> Vec<u8> {
        let mut h = fields(&[
            &version.to_le_bytes(),
            &1u16.to_le_bytes(),
            &3u32.to_le_bytes(),
            &1_000_000u64.to_le_bytes(),
        ]);
        h.extend_from_slice(&buffer_size.to_le_bytes());
        h.extend_from_slice(&[0; 8]);
        h
    }

    fn new_buffer(tid: u32) -> Vec<u8> {
        metadata(0, &tid.to_le_bytes())
    }
    fn wall(seconds: i64, micros: u32) -> Vec<u8> {
        metadata(4, &fields(&[&seconds.to_le_bytes(), &micros.to_le_bytes()]))
    }
    fn new_cpu(cpu: u16, tsc: u64) -> Vec<u8> {
        metadata(2, &fields(&[&cpu.to_le_bytes(), &tsc.to_le_bytes()]))
    }
    fn pid(pid: u32) -> Vec<u8> {
        metadata(9, &pid.to_le_bytes())
    }
    fn extents(size: usize) -> Vec<u8> {
        metadata(7, &(size as u64).to_le_bytes())
    }

    fn decode(data: &[u8]) -> (Vec<Block>, ReadStats, Result<(), XrayError>) {
        let h = FileHeader::parse(data).unwrap();
        let mut blocks = Vec::new();
        let mut stats = ReadStats::default();
        let r = read_blocks(data, &h, &mut blocks, &mut stats);
        (blocks, stats, r)
    }

    fn kinds(b: &Block) -> Vec<(u64, u16, XrayEventKind)> {
        b.events
            .iter()
            .map(|e| (e.tsc, e.cpu, e.kind.clone()))
            .collect()
    }

    #[test]
    fn version1_fixed_buffers_with_end_of_buffer_skip() {
        let bs = 128;
        let mut buf = [
            new_buffer(7),
            wall(10, 5),
            new_cpu(1, 1000),
            function(0, 3, 10),
            function(1, 3, 5),
            metadata(1, &[]),
        ]
        .concat();
        assert!(buf.len() <= bs);
        buf.resize(bs, 0xEE); // garbage after EndOfBuffer is skipped, never parsed
        let buf2 = [
            new_buffer(8),
            wall(11, 0),
            new_cpu(0, 5000),
            function(0, 4, 1),
        ]
        .concat();
        let data = [header(1, bs as u64), buf.clone(), buf2].concat();
        let (blocks, stats, r) = decode(&data);
        // The second buffer is short of its 128 bytes: truncated, but its events are kept.
        let e = r.unwrap_err();
        assert_eq!(e.offset as usize, data.len());
        assert!(matches!(
            e.kind,
            XrayErrorKind::Truncated {
                record: "buffer",
                ..
            }
        ));
        assert_eq!(blocks.len(), 2);
        assert_eq!((blocks[0].info.tid, blocks[0].info.pid), (7, None));
        assert_eq!(
            kinds(&blocks[0]),
            vec![
                (1010, 1, XrayEventKind::Enter { func_id: 3 }),
                (1015, 1, XrayEventKind::Exit { func_id: 3 })
            ]
        );
        assert_eq!(
            blocks[0].info.wall,
            Some(WallTimeAnchor {
                seconds: 10,
                micros: 5,
                tsc: Some(1000)
            })
        );
        assert_eq!(
            kinds(&blocks[1]),
            vec![(5001, 0, XrayEventKind::Enter { func_id: 4 })]
        );
        assert_eq!(stats.skipped_bytes, 128 - (4 * 16 + 2 * 8));
        assert_eq!(stats.buffers, 2);
    }

    #[test]
    fn version1_needs_a_buffer_size() {
        let data = [header(1, 0), new_buffer(1)].concat();
        let (_, _, r) = decode(&data);
        assert_eq!(
            r.unwrap_err(),
            XrayError::new(16, XrayErrorKind::ZeroBufferSize)
        );
    }

    /// One version-5 buffer: extents + records.
    fn v5_buffer(records: &[Vec<u8>]) -> Vec<u8> {
        let body = records.concat();
        [extents(body.len()), body].concat()
    }

    #[test]
    fn version5_buffers_deltas_wraps_migrations_args_events() {
        let mut custom = metadata(5, &fields(&[&4i32.to_le_bytes(), &7i32.to_le_bytes()]));
        custom.extend_from_slice(b"ping");
        let mut typed = metadata(
            8,
            &fields(&[
                &2i32.to_le_bytes(),
                &(-2i32).to_le_bytes(),
                &33u16.to_le_bytes(),
            ]),
        );
        typed.extend_from_slice(b"ok");
        let b1 = v5_buffer(&[
            new_buffer(100),
            wall(50, 250),
            pid(99),
            new_cpu(2, 1_000),
            function(3, 5, 0),                    // Entry_Args at 1000
            metadata(6, &42u64.to_le_bytes()),    // arg 0
            metadata(6, &43u64.to_le_bytes()),    // arg 1
            function(0, 6, 20),                   // 1020
            custom.clone(),                       // 1027
            typed,                                // 1025
            metadata(3, &u64::MAX.to_le_bytes()), // TSCWrap: base u64::MAX
            function(1, 6, 3),                    // wraps to 2
            new_cpu(3, 9_000),                    // migration
            function(2, 5, 1),                    // 9001, tail exit
        ]);
        let b2 = v5_buffer(&[
            new_buffer(101),
            wall(50, 300),
            pid(99),
            new_cpu(0, 2_000),
            function(0, 1, 1),
        ]);
        let data = [header(5, 4096), b1, b2].concat();
        let (blocks, stats, r) = decode(&data);
        r.unwrap();
        assert_eq!(blocks.len(), 2);
        assert_eq!((blocks[0].info.pid, blocks[0].info.tid), (Some(99), 100));
        assert_eq!(
            kinds(&blocks[0]),
            vec![
                (
                    1000,
                    2,
                    XrayEventKind::EnterWithArgs {
                        func_id: 5,
                        args: vec![42, 43]
                    }
                ),
                (1020, 2, XrayEventKind::Enter { func_id: 6 }),
                (
                    1027,
                    2,
                    XrayEventKind::CustomEvent {
                        data: b"ping".to_vec()
                    }
                ),
                (
                    1025,
                    2,
                    XrayEventKind::TypedEvent {
                        event_type: 33,
                        data: b"ok".to_vec()
                    }
                ),
                (2, 2, XrayEventKind::Exit { func_id: 6 }),
                (9001, 3, XrayEventKind::TailExit { func_id: 5 }),
            ]
        );
        assert!(blocks[0]
            .events
            .iter()
            .all(|e| e.pid == Some(99) && e.tid == 100));
        assert_eq!(
            blocks[0].info.wall,
            Some(WallTimeAnchor {
                seconds: 50,
                micros: 250,
                tsc: Some(1000)
            })
        );
        assert_eq!(
            kinds(&blocks[1]),
            vec![(2001, 0, XrayEventKind::Enter { func_id: 1 })]
        );
        assert_eq!(
            (stats.tsc_wraps, stats.buffers, stats.orphan_call_args),
            (1, 2, 0)
        );
        assert_eq!(stats.records, 2 + 14 + 5);
    }

    #[test]
    fn version4_custom_event_has_absolute_tsc_and_cpu() {
        let mut custom = metadata(
            5,
            &fields(&[
                &1i32.to_le_bytes(),
                &777u64.to_le_bytes(),
                &6u16.to_le_bytes(),
            ]),
        );
        custom.push(b'x');
        let data = [
            header(4, 0),
            v5_buffer(&[
                new_buffer(1),
                wall(0, 0),
                pid(1),
                new_cpu(2, 100),
                custom,
                function(0, 1, 5),
            ]),
        ]
        .concat();
        let (blocks, _, r) = decode(&data);
        r.unwrap();
        assert_eq!(
            kinds(&blocks[0]),
            vec![
                (
                    777,
                    6,
                    XrayEventKind::CustomEvent {
                        data: b"x".to_vec()
                    }
                ),
                (105, 2, XrayEventKind::Enter { func_id: 1 })
            ]
        );
    }

    #[test]
    fn call_arguments_after_exit_are_counted_not_attached() {
        let data = [
            header(5, 0),
            v5_buffer(&[
                new_buffer(1),
                wall(0, 0),
                new_cpu(0, 0),
                function(0, 1, 1),
                metadata(6, &5u64.to_le_bytes()), // after a plain entry: becomes EnterWithArgs
                function(1, 1, 1),
                metadata(6, &6u64.to_le_bytes()), // after an exit: orphan
            ]),
        ]
        .concat();
        let (blocks, stats, r) = decode(&data);
        r.unwrap();
        assert_eq!(
            blocks[0].events[0].kind,
            XrayEventKind::EnterWithArgs {
                func_id: 1,
                args: vec![5]
            }
        );
        assert_eq!(blocks[0].events[1].kind, XrayEventKind::Exit { func_id: 1 });
        assert_eq!(stats.orphan_call_args, 1);
    }

    #[test]
    fn grammar_violations_report_offset_and_keep_earlier_events() {
        // CallArgument right after NewCPUId is not allowed.
        let body = [
            new_buffer(1),
            wall(0, 0),
            new_cpu(0, 10),
            function(0, 1, 1),
            new_cpu(0, 20),
            metadata(6, &1u64.to_le_bytes()),
        ];
        let data = [header(5, 0), v5_buffer(&body)].concat();
        let (blocks, _, r) = decode(&data);
        let e = r.unwrap_err();
        assert_eq!(
            e.offset as usize,
            32 + METADATA_RECORD_SIZE + 4 * METADATA_RECORD_SIZE + 8
        );
        assert_eq!(
            e.kind,
            XrayErrorKind::UnexpectedRecord {
                found: "CallArgument",
                after: "NewCPUId"
            }
        );
        assert_eq!(
            kinds(&blocks[0]),
            vec![(11, 0, XrayEventKind::Enter { func_id: 1 })]
        );

        // A function record before any NewCPUId has no TSC base.
        let data = [
            header(5, 0),
            v5_buffer(&[new_buffer(1), wall(0, 0), function(0, 1, 1)]),
        ]
        .concat();
        let e = decode(&data).2.unwrap_err();
        assert_eq!(
            (e.offset, e.kind),
            (
                80,
                XrayErrorKind::UnexpectedRecord {
                    found: "Function",
                    after: "WallTimeMarker"
                }
            )
        );

        // A buffer must start with NewBuffer.
        let data = [header(5, 0), v5_buffer(&[wall(0, 0)])].concat();
        let e = decode(&data).2.unwrap_err();
        assert_eq!(
            e.kind,
            XrayErrorKind::UnexpectedRecord {
                found: "WallTimeMarker",
                after: "the start of a buffer"
            }
        );

        // Version >= 2 buffers must start with BufferExtents.
        let data = [header(5, 0), new_buffer(1)].concat();
        let e = decode(&data).2.unwrap_err();
        assert_eq!(e.offset, 32);
        assert!(matches!(
            e.kind,
            XrayErrorKind::UnexpectedRecord {
                found: "NewBuffer",
                ..
            }
        ));
    }

    #[test]
    fn records_may_not_overrun_their_extent() {
        let mut buf = v5_buffer(&[new_buffer(1), wall(0, 0), new_cpu(0, 0)]);
        buf[1..9].copy_from_slice(&(40u64).to_le_bytes()); // extents cut the NewCPUId in half
        let data = [header(5, 0), buf].concat();
        let e = decode(&data).2.unwrap_err();
        assert_eq!(
            (e.offset, e.kind),
            (
                80,
                XrayErrorKind::BufferOverrun {
                    record: "NewCPUId",
                    len: 16,
                    overrun: 8
                }
            )
        );
    }

    #[test]
    fn extents_past_the_end_of_the_file_are_truncation() {
        let mut buf = v5_buffer(&[new_buffer(1), wall(0, 0), new_cpu(0, 0), function(0, 1, 1)]);
        buf[1..9].copy_from_slice(&(1000u64).to_le_bytes());
        let data = [header(5, 0), buf].concat();
        let (blocks, _, r) = decode(&data);
        let e = r.unwrap_err();
        assert_eq!(e.offset as usize, data.len());
        assert!(matches!(
            e.kind,
            XrayErrorKind::Truncated {
                record: "buffer",
                needed: 1000,
                ..
            }
        ));
        assert_eq!(blocks[0].events.len(), 1);
    }
}
