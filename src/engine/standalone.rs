//! A trace without a trace manager: the process creates its own memfd buffer and context,
//! installs it as the current context, and at the end writes a complete FXT archive itself.
//! For tests, examples, and programs that want a trace file without running `fxtrace record`.
//!
//! ```no_run
//! use fxtrace::buffer::header::BufferingMode;
//!
//! let session = fxtrace::standalone::start(BufferingMode::Circular, 4 << 20)?;
//! {
//!     let _d = fxtrace::duration("app", "work");
//!     fxtrace::instant("app", "tick", fxtrace::Scope::Thread, &[]);
//! }
//! let report = session.finish("trace.fxt")?;
//! println!("{} records, {} dropped", report.records, report.stop.records_dropped);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The archive is what a trace manager would write for one provider: the magic number record, a
//! provider info record (id 1, the process name), then the provider's records in the order
//! Fuchsia's trace_manager reads them (`Tracee::TransferRecords`,
//! `src/performance/trace_manager/tracee.cc`): durable buffer, then the older rolling buffer if
//! writing wrapped, then the current one. In streaming mode each full rolling buffer is saved (with
//! the durable records written since the previous save) by the thread that completes its hand-off,
//! and the rest at the end. Records come out of the buffer through the header reader
//! ([`crate::buffer::header::copy_records`]), which skips chunk tags, unused tails and stale
//! chunks. When records were dropped, a provider event record "buffer overflow" ends the archive.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use super::category::CategoryFilter;
use super::context::{
    BufferHandler, Context, ContextConfig, EngineError, StartMode, StopReport, WeakContext,
    DEFAULT_CHUNK_SIZE,
};
use super::global::{self, GlobalError};
use super::record::start_trace;
use crate::buffer::header::{
    copy_records, BufferingMode, ChunkFramingError, ChunkScanStop, Framing, HEADER_SIZE,
};
use crate::buffer::{BufferError, TraceBuffer};
use crate::format::{
    EncodeError, ProviderEvent, ProviderInfo, RecordWriter, MAX_PROVIDER_NAME_LEN,
    PROVIDER_EVENT_BUFFER_OVERFLOW,
};

/// Provider id written in the archive's provider info record.
pub const PROVIDER_ID: u32 = 1;

/// How long [`StandaloneSession::finish`] waits for writers in flight.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// Errors of a standalone session.
#[derive(Debug, thiserror::Error)]
pub enum StandaloneError {
    /// The buffer could not be created.
    #[error(transparent)]
    Buffer(#[from] BufferError),
    /// The engine refused an operation.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// Installing or uninstalling the context failed (e.g. another context is installed).
    #[error(transparent)]
    Global(#[from] GlobalError),
    /// The initialization record could not be written (no room for it).
    #[error("the initialization record could not be written")]
    InitializationDropped,
    /// The archive's metadata could not be encoded.
    #[error(transparent)]
    Encode(#[from] EncodeError),
    /// The buffer's header gave offsets the reader refused.
    #[error(transparent)]
    Framing(#[from] ChunkFramingError),
    /// A streaming save failed (the session's data is incomplete).
    #[error("streaming save failed: {0}")]
    Save(String),
    /// The archive could not be written.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The archive path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// Settings of a standalone session.
#[derive(Debug, Clone)]
pub struct StandaloneConfig {
    /// Buffering mode.
    pub mode: BufferingMode,
    /// Buffer size in bytes (a multiple of 4096, 4 KiB..4 GiB).
    pub buffer_size: u64,
    /// Enabled categories.
    pub categories: CategoryFilter,
    /// Requested chunk size (see [`ContextConfig::chunk_size`]).
    pub chunk_size: u64,
}

impl StandaloneConfig {
    /// Every category, the default chunk size.
    pub fn new(mode: BufferingMode, buffer_size: u64) -> Self {
        Self {
            mode,
            buffer_size,
            categories: CategoryFilter::all(),
            chunk_size: DEFAULT_CHUNK_SIZE,
        }
    }
}

/// What [`StandaloneSession::finish`] produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FinishReport {
    /// The header after stop (records dropped, wrapped count, data ends).
    pub stop: StopReport,
    /// Provider records in the archive (magic and metadata excluded).
    pub records: u64,
    /// Size of the archive in bytes.
    pub bytes: u64,
    /// Buffer regions whose scan stopped at a malformed record (nothing after it was kept);
    /// 0 unless the buffer was damaged.
    pub malformed_regions: u64,
}

/// One line for a person: records and bytes written, then what was lost or overwritten.
impl std::fmt::Display for FinishReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} records, {} bytes", self.records, self.bytes)?;
        match self.stop.records_dropped {
            0 => f.write_str("; no record dropped")?,
            n => write!(
                f,
                "; {n} records dropped (buffer full; a larger buffer keeps more)"
            )?,
        }
        if self.stop.wrapped_count > 0 {
            write!(
                f,
                "; the buffer wrapped {} times (the oldest events were overwritten)",
                self.stop.wrapped_count
            )?;
        }
        if self.stop.durable_buffer_full {
            f.write_str("; the durable buffer filled up")?;
        }
        if self.malformed_regions > 0 {
            write!(
                f,
                "; {} damaged buffer regions cut at a malformed record",
                self.malformed_regions
            )?;
        }
        Ok(())
    }
}

/// Records read out of the buffer so far.
#[derive(Debug, Default)]
struct Collected {
    bytes: Vec<u8>,
    records: u64,
    malformed_regions: u64,
    /// Durable bytes already collected (streaming).
    durable_end: u64,
    error: Option<String>,
}

impl Collected {
    fn append(&mut self, region: &[u8], end: u64, framing: Framing) -> Result<(), StandaloneError> {
        let (stop, stats) = copy_records(region, end, framing, &mut self.bytes)?;
        self.records += stats.records;
        if matches!(stop, ChunkScanStop::Malformed(_)) {
            self.malformed_regions += 1;
        }
        Ok(())
    }
}

/// The streaming handler: saves each full buffer as the manager would, then marks it saved.
#[derive(Debug, Default)]
struct Saver {
    context: OnceLock<WeakContext>,
    collected: Mutex<Collected>,
}

impl Saver {
    fn collected(&self) -> MutexGuard<'_, Collected> {
        // Plain data: a panic while holding the lock leaves nothing half-updated that matters.
        self.collected
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn save(
        &self,
        context: &Context,
        wrapped_count: u32,
        durable_data_end: u64,
    ) -> Result<(), StandaloneError> {
        let buffer = context.buffer();
        let header = buffer.header().load();
        let geometry = context.geometry();
        let mut collected = self.collected();
        let from = collected.durable_end;
        if durable_data_end > from {
            let durable = buffer.copy_range(HEADER_SIZE + from, durable_data_end - from)?;
            collected.append(&durable, durable.len() as u64, Framing::Dense)?;
            collected.durable_end = durable_data_end;
        }
        let index = (wrapped_count & 1) as usize;
        let end = header.rolling_data_end[index];
        let rolling = buffer.copy_range(geometry.rolling_offset(index), end)?;
        collected.append(&rolling, end, header.rolling_framing(wrapped_count))?;
        drop(collected);
        context.mark_buffer_saved(wrapped_count, durable_data_end)?;
        Ok(())
    }
}

impl BufferHandler for Saver {
    fn notify_buffer_full(&self, wrapped_count: u32, durable_data_end: u64) {
        let Some(context) = self.context.get().and_then(WeakContext::upgrade) else {
            return;
        };
        if let Err(error) = self.save(&context, wrapped_count, durable_data_end) {
            let mut collected = self.collected();
            collected.error.get_or_insert_with(|| error.to_string());
        }
    }
}

/// A running standalone trace. [`Self::finish`] ends it and writes the archive; dropping it
/// without finishing stops the trace and discards it.
#[derive(Debug)]
pub struct StandaloneSession {
    context: Context,
    saver: Arc<Saver>,
    finished: bool,
}

/// Start a standalone trace of every category: create a `buffer_size`-byte memfd buffer and a
/// context in `mode`, start it (writing the initialization record), and install it as the
/// process's current context. Fails if a context is already installed.
pub fn start(mode: BufferingMode, buffer_size: u64) -> Result<StandaloneSession, StandaloneError> {
    start_with(StandaloneConfig::new(mode, buffer_size))
}

/// [`start`] with every setting.
pub fn start_with(config: StandaloneConfig) -> Result<StandaloneSession, StandaloneError> {
    if global::is_installed() {
        return Err(GlobalError::AlreadyInstalled.into());
    }
    let buffer = TraceBuffer::create(config.buffer_size)?;
    let saver = Arc::new(Saver::default());
    let context_config = ContextConfig {
        mode: config.mode,
        chunk_size: config.chunk_size,
        ..ContextConfig::default()
    };
    let context = Context::new(buffer, context_config, saver.clone())?;
    // A fresh `OnceLock`: the set cannot fail.
    let _ = saver.context.set(context.downgrade());
    let session = StandaloneSession {
        context: context.clone(),
        saver,
        finished: false,
    };
    if !start_trace(&context, StartMode::ClearEntire, config.categories)? {
        return Err(StandaloneError::InitializationDropped);
    }
    context.prefault();
    global::install(context)?;
    Ok(session)
}

impl StandaloneSession {
    /// The session's context (for explicit [`Context::trace_writer`] use, stats, ...).
    pub fn context(&self) -> &Context {
        &self.context
    }

    /// Stop tracing and write the archive to `path`.
    pub fn finish(self, path: impl AsRef<Path>) -> Result<FinishReport, StandaloneError> {
        let path = path.as_ref();
        let (bytes, report) = self.finish_to_vec()?;
        std::fs::write(path, &bytes).map_err(|source| StandaloneError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(report)
    }

    /// Stop tracing and return the archive bytes.
    pub fn finish_to_vec(mut self) -> Result<(Vec<u8>, FinishReport), StandaloneError> {
        self.finished = true;
        global::uninstall_if(&self.context)?;
        let stop = self.context.stop(STOP_TIMEOUT)?;
        let mut collected = std::mem::take(&mut *self.saver.collected());
        if let Some(error) = collected.error.take() {
            return Err(StandaloneError::Save(error));
        }
        self.read_rest(&stop, &mut collected)?;

        let mut out = RecordWriter::with_magic();
        let name = provider_name();
        out.push(&ProviderInfo {
            provider_id: PROVIDER_ID,
            name: &name,
        })?;
        let mut bytes = out.to_bytes();
        bytes.extend_from_slice(&collected.bytes);
        if stop.records_dropped > 0 {
            let mut tail = RecordWriter::new();
            tail.push(&ProviderEvent {
                provider_id: PROVIDER_ID,
                event: PROVIDER_EVENT_BUFFER_OVERFLOW,
            })?;
            bytes.extend_from_slice(&tail.to_bytes());
        }
        let report = FinishReport {
            stop,
            records: collected.records,
            bytes: bytes.len() as u64,
            malformed_regions: collected.malformed_regions,
        };
        Ok((bytes, report))
    }

    /// The final read: what the streaming saves did not take.
    fn read_rest(&self, stop: &StopReport, out: &mut Collected) -> Result<(), StandaloneError> {
        let buffer = self.context.buffer();
        let whole = buffer.copy_range(0, buffer.size())?;
        let header = buffer.header().load();
        let geometry = self.context.geometry();
        let mode = self.context.mode();
        if mode != BufferingMode::Oneshot {
            let start = HEADER_SIZE as usize;
            let durable = &whole[start..start + geometry.durable_buffer_size as usize];
            let end = stop.durable_data_end;
            if end > out.durable_end {
                let from = out.durable_end as usize;
                out.append(&durable[from..], end - out.durable_end, Framing::Dense)?;
                out.durable_end = end;
            }
        }
        let rolling = |index: usize| {
            let offset = geometry.rolling_offset(index) as usize;
            &whole[offset..offset + geometry.rolling_buffer_size as usize]
        };
        let data_end = |index: usize| match stop.rolling_data_end[index] {
            0 => geometry.rolling_buffer_size,
            end => end,
        };
        let wc = stop.wrapped_count;
        if mode == BufferingMode::Circular && wc > 0 {
            let earlier = ((wc - 1) & 1) as usize;
            out.append(
                rolling(earlier),
                data_end(earlier),
                header.rolling_framing(wc - 1),
            )?;
        }
        let current = (wc & 1) as usize;
        out.append(
            rolling(current),
            data_end(current),
            header.rolling_framing(wc),
        )
    }
}

impl Drop for StandaloneSession {
    fn drop(&mut self) {
        if !self.finished {
            // Best effort: nothing is written, and a failure here has nobody to report to.
            let _ = global::uninstall_if(&self.context);
            let _ = self.context.stop(STOP_TIMEOUT);
        }
    }
}

/// The provider name: the process name, cut to 255 bytes on a character boundary.
fn provider_name() -> String {
    crate::format::truncate_str(super::cache::process_name(), MAX_PROVIDER_NAME_LEN).to_owned()
}
