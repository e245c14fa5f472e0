//! Sections that do not come from a provider of the protocol (the built-in kernel provider):
//! a source encodes records into a [`SectionSink`] from its own thread, and the session's loop
//! ([`SessionDriver`](super::driver::SessionDriver)) copies each batch into the archive under
//! the section's reserved provider id.

use std::sync::mpsc::{self, Receiver, Sender};

use super::server::Waker;
use fxtrace::capture::fxt::{IndexedSwitch, WakeupWords};
use fxtrace_format::{
    BatchError, BatchOut, BatchWriter, ContextSwitch, Encode, EncodeError, Record,
    SchedThreadWakeup,
};

/// Why a [`SectionSink`] refused a record.
#[derive(Debug, thiserror::Error)]
pub enum SectionError {
    /// The record does not encode.
    #[error(transparent)]
    Encode(#[from] EncodeError),
    /// The session's loop is gone.
    #[error("the recorder is gone")]
    Closed,
}

/// Encodes records for a section of the archive and ships them to the session's loop in batches of
/// about 64 KiB (the format's [`BatchWriter`]; the first batch at once, so that a source started
/// before the command opens the archive). Provider Info and Provider Section records are left
/// out: the archive writes its own, under the section's id. Call [`SectionSink::flush`] at the
/// end.
#[derive(Debug)]
pub struct SectionSink {
    id: u32,
    batch: BatchWriter<SectionBatches>,
    sent_any: bool,
}

/// Words per batch (64 KiB).
const SECTION_BATCH_WORDS: usize = 8 * 1024;

/// The channel to the session's loop as the output of a [`BatchWriter`].
#[derive(Debug)]
struct SectionBatches {
    tx: Sender<Vec<u8>>,
    waker: Waker,
}

impl BatchOut for SectionBatches {
    type Error = SectionError;

    fn write_batch(&mut self, words: &[u64]) -> Result<(), SectionError> {
        self.tx
            .send(fxtrace_format::words_to_bytes(words))
            .map_err(|_| SectionError::Closed)?;
        self.waker.wake();
        Ok(())
    }
}

impl SectionSink {
    /// The provider id of the section in the archive.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Encode one record into the batch; returns its size in words (0 for the provider
    /// metadata left out).
    pub fn push(&mut self, record: &Record<'_>) -> Result<usize, SectionError> {
        if matches!(record, Record::ProviderInfo(_) | Record::ProviderSection(_)) {
            return Ok(0);
        }
        self.push_encoded(record)
    }

    /// Encode one context switch into the batch (the two-word form when both threads are
    /// indexed: two stores instead of the general encoder).
    pub fn push_context_switch(&mut self, record: &ContextSwitch) -> Result<usize, SectionError> {
        match IndexedSwitch::of(record) {
            Some(words) => self.push_encoded(&words),
            None => self.push_encoded(record),
        }
    }

    /// Encode one thread wakeup into the batch (five stores for fxtrace's, see
    /// [`WakeupWords`]).
    pub fn push_wakeup(&mut self, record: &SchedThreadWakeup<'_>) -> Result<usize, SectionError> {
        match WakeupWords::of(record) {
            Some(words) => self.push_encoded(&words),
            None => self.push_encoded(record),
        }
    }

    fn push_encoded<R: Encode + ?Sized>(&mut self, record: &R) -> Result<usize, SectionError> {
        let n = self.batch.push(record).map_err(|e| match e {
            BatchError::Encode(e) => SectionError::Encode(e),
            BatchError::Out(e) => e,
        })?;
        if !self.sent_any {
            self.batch.flush()?;
            self.sent_any = true;
        }
        Ok(n)
    }

    /// Ship what is buffered.
    pub fn flush(&mut self) -> Result<(), SectionError> {
        self.batch.flush()
    }

    /// A sink for section `id` whose batches arrive on the returned receiver, `waker` woken
    /// after each (the manager's loop that writes them).
    pub(crate) fn channel(id: u32, waker: Waker) -> (SectionSink, Receiver<Vec<u8>>) {
        let (tx, rx) = mpsc::channel();
        let sink = SectionSink {
            id,
            batch: BatchWriter::new(SectionBatches { tx, waker }, SECTION_BATCH_WORDS),
            sent_any: false,
        };
        (sink, rx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_section_writes_a_context_switch_as_the_general_encoder_does() {
        use fxtrace_format::{ThreadRef, ThreadState};
        let waker = Waker::new().unwrap();
        for (outgoing, incoming) in [
            (ThreadRef::Index(3), ThreadRef::Index(7)),
            (ThreadRef::Inline { pid: 1, tid: 2 }, ThreadRef::Index(7)),
        ] {
            let cs = ContextSwitch {
                ticks: 12345,
                cpu: 3,
                outgoing_state: ThreadState::Blocked,
                outgoing,
                incoming,
                outgoing_priority: 20,
                incoming_priority: 0,
            };
            let (mut fast, fast_rx) = SectionSink::channel(1, waker.clone());
            let (mut general, general_rx) = SectionSink::channel(1, waker.clone());
            fast.push_context_switch(&cs).unwrap();
            general.push(&Record::ContextSwitch(cs)).unwrap();
            fast.flush().unwrap();
            general.flush().unwrap();
            let fast: Vec<u8> = fast_rx.try_iter().flatten().collect();
            let general: Vec<u8> = general_rx.try_iter().flatten().collect();
            assert!(!fast.is_empty());
            assert_eq!(fast, general);
        }
    }
}
