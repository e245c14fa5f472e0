//! Where the kernel trace writer's string and thread references come from ([`RefTable`]).
//!
//! A [`super::KernelTraceWriter`] that owns a provider section (the recorder's kernel provider,
//! a file) numbers strings and threads in a table of its own, [`LocalRefs`]. Inside a traced
//! process the section is the engine's, whose per-thread caches allocate indices from the
//! engine's two tables: there the table is the engine's (the preload object's `EngineRefs`),
//! the writer's registrations take engine indices, and no index is ever translated.
//!
//! The writer keeps what it registered (string → index, thread → index) for one *epoch*
//! ([`RefTable::epoch`]): when the epoch changes (the engine started a new trace, which
//! cleared the buffer and its tables) every index handed out before means nothing, and the
//! writer registers again and names its threads and processes again.

use super::fxt::{RecordSink, SinkError};
use crate::format::{Record, StringRecord, ThreadRecord, MAX_STRING_INDEX, MAX_THREAD_INDEX};

/// The outcome of a registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registration<I> {
    /// Registered under `index`: its String or Thread record went in.
    Index {
        /// The index.
        index: I,
        /// The size in words of the registration record.
        words: usize,
    },
    /// No index is free in this epoch: refer to the value inline.
    TableFull,
    /// The record was refused (counted as dropped by the writer): inline this time, try again
    /// next time.
    Refused,
    /// Nothing can be written now (no trace is running in the engine; the sink discards and
    /// counts what the writer pushes): inline, try again at the next use.
    Discarded,
}

/// Where a kernel trace writer's string and thread indices come from, and how a registration
/// (an index and its String or Thread record in `sink`) is made. `push` on the sink is how a
/// table writes a record; a refused record is counted by the writer (see [`Registration`]).
pub trait RefTable<S: RecordSink> {
    /// The epoch indices are valid in (see the module docs), `None` while nothing can be
    /// written (no trace is running: the epoch is unchanged). Called before each event; a
    /// table whose indices never expire returns a constant.
    fn epoch(&mut self, sink: &mut S) -> Option<u64>;

    /// Registers string `value`: an index and its String record.
    fn register_string(
        &mut self,
        sink: &mut S,
        value: &str,
    ) -> Result<Registration<u16>, SinkError>;

    /// Registers thread (`pid`, `tid`): an index and its Thread record.
    fn register_thread(
        &mut self,
        sink: &mut S,
        pid: u64,
        tid: u64,
    ) -> Result<Registration<u8>, SinkError>;

    /// Gives back a thread index of this epoch whose thread will not run again.
    fn release_thread(&mut self, index: u8);
}

/// A table of the writer's own: strings 1..=[`MAX_STRING_INDEX`] (never reused), threads
/// 1..=[`MAX_THREAD_INDEX`] (reused once released); one epoch.
#[derive(Debug)]
pub struct LocalRefs {
    next_string: u16,
    next_thread: u16,
    free_threads: Vec<u8>,
}

impl Default for LocalRefs {
    fn default() -> Self {
        Self {
            next_string: 1,
            next_thread: 1,
            free_threads: Vec::new(),
        }
    }
}

/// Pushes a registration record: `Ok(Some(words))` if it went in, `Ok(None)` if it was
/// refused.
fn push_registration<S: RecordSink>(
    sink: &mut S,
    record: &Record<'_>,
) -> Result<Option<usize>, SinkError> {
    match sink.push(record) {
        Ok(words) => Ok(Some(words)),
        Err(SinkError::Encode(_)) | Err(SinkError::Full) => Ok(None),
        Err(e @ SinkError::Io(_)) => Err(e),
    }
}

impl<S: RecordSink> RefTable<S> for LocalRefs {
    fn epoch(&mut self, _sink: &mut S) -> Option<u64> {
        Some(0)
    }

    fn register_string(
        &mut self,
        sink: &mut S,
        value: &str,
    ) -> Result<Registration<u16>, SinkError> {
        if self.next_string > MAX_STRING_INDEX {
            return Ok(Registration::TableFull);
        }
        let index = self.next_string;
        let record = Record::String(StringRecord { index, value });
        let Some(words) = push_registration(sink, &record)? else {
            return Ok(Registration::Refused);
        };
        self.next_string += 1;
        Ok(Registration::Index { index, words })
    }

    fn register_thread(
        &mut self,
        sink: &mut S,
        pid: u64,
        tid: u64,
    ) -> Result<Registration<u8>, SinkError> {
        let index = self.free_threads.pop().or_else(|| {
            (self.next_thread <= u16::from(MAX_THREAD_INDEX)).then(|| {
                self.next_thread += 1;
                (self.next_thread - 1) as u8
            })
        });
        let Some(index) = index else {
            return Ok(Registration::TableFull);
        };
        let record = Record::Thread(ThreadRecord { index, pid, tid });
        let Some(words) = push_registration(sink, &record)? else {
            self.free_threads.push(index);
            return Ok(Registration::Refused);
        };
        Ok(Registration::Index { index, words })
    }

    fn release_thread(&mut self, index: u8) {
        self.free_threads.push(index);
    }
}
