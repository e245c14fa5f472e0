//! Shared helpers for the engine tests: a minimal record format, a manager-like reader, and
//! a saving handler for streaming mode.
//!
//! Test records are framed by hand (the FXT codec is not used here): an event-type record (4)
//! or, for durable records, a string-type record (2) with index bits set, carrying
//! `[thread, seq, pattern...]` so that every word of every record can be checked.

#![allow(dead_code, unreachable_pub)]

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use fxtrace::buffer::header::{
    copy_records, BufferingMode, ChunkScanStop, Framing, HeaderFields, HEADER_SIZE,
};
use fxtrace::buffer::TraceBuffer;
use fxtrace::engine::{BufferHandler, Context, WeakContext, Writer};

pub const EVENT_TYPE: u64 = 4;
pub const DURABLE_TYPE: u64 = 2;

/// Pattern word `i` of record (thread, seq).
pub fn pattern(thread: u64, seq: u64, i: usize) -> u64 {
    (thread << 48) ^ seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (i as u64).wrapping_mul(0x1234_5678)
}

/// Fill a record's payload.
pub fn fill(payload: &mut [u64], thread: u64, seq: u64) {
    payload[0] = thread;
    payload[1] = seq;
    for (i, word) in payload.iter_mut().enumerate().skip(2) {
        *word = pattern(thread, seq, i);
    }
}

/// Write one rolling test record of `words` words (>= 3). True if written.
pub fn write_event(writer: &mut Writer<'_>, thread: u64, seq: u64, words: usize) -> bool {
    match writer.reserve(words) {
        Some(mut slot) => {
            fill(slot.payload(), thread, seq);
            slot.commit(EVENT_TYPE | (thread << 16));
            true
        }
        None => false,
    }
}

/// Write one durable test record. True if written.
pub fn write_durable(writer: &mut Writer<'_>, thread: u64, seq: u64, words: usize) -> bool {
    match writer.reserve_durable(words) {
        Some(mut slot) => {
            fill(slot.payload(), thread, seq);
            slot.commit(DURABLE_TYPE | (1 << 16) | (thread << 32));
            true
        }
        None => false,
    }
}

/// Acquire and write one record; `Some(true)` written, `Some(false)` dropped, `None` if the
/// writer section itself was refused.
pub fn try_write(ctx: &Context, thread: u64, seq: u64, words: usize, durable: bool) -> bool {
    let Some(mut writer) = ctx.acquire() else {
        return false;
    };
    if durable {
        write_durable(&mut writer, thread, seq, words)
    } else {
        write_event(&mut writer, thread, seq, words)
    }
}

/// One decoded test record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Rec {
    pub thread: u64,
    pub seq: u64,
    pub words: u64,
    pub durable: bool,
}

/// Decode dense record bytes into test records, checking every word. Durable filler records
/// (string index 0) are skipped.
pub fn decode(bytes: &[u8]) -> Vec<Rec> {
    let words: Vec<u64> = bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let header = words[i];
        let size = fxtrace_format::record_words(header);
        assert!(
            size >= 1 && i + size <= words.len(),
            "bad framing at word {i}: {header:#x}"
        );
        let rtype = header & 0xf;
        if rtype == DURABLE_TYPE && (header >> 16) & 0x7fff == 0 {
            i += size; // filler
            continue;
        }
        assert!(
            rtype == EVENT_TYPE || rtype == DURABLE_TYPE,
            "unexpected type {header:#x}"
        );
        assert!(size >= 3, "record too small: {header:#x}");
        let body = &words[i + 1..i + size];
        let (thread, seq) = (body[0], body[1]);
        if rtype == EVENT_TYPE {
            assert_eq!(header >> 16, thread, "header marker");
        } else {
            assert_eq!(header >> 32, thread, "durable header marker");
        }
        for (k, &w) in body.iter().enumerate().skip(2) {
            assert_eq!(
                w,
                pattern(thread, seq, k),
                "payload word {k} of ({thread},{seq})"
            );
        }
        out.push(Rec {
            thread,
            seq,
            words: size as u64,
            durable: rtype == DURABLE_TYPE,
        });
        i += size;
    }
    out
}

/// Scan one buffer region and decode it, asserting the scan found no malformed record.
pub fn scan_decode(bytes: &[u8], data_end: u64, framing: Framing) -> Vec<Rec> {
    let mut dense = Vec::new();
    let (stop, _) = copy_records(bytes, data_end, framing, &mut dense).expect("framing args");
    assert_eq!(stop, ChunkScanStop::Complete, "scan stopped early");
    // `decode` re-walks the framing: a zero header word would fail its size check.
    decode(&dense)
}

/// Everything a manager-like final read finds, in archive order.
#[derive(Debug, Default)]
pub struct FinalRead {
    pub header: HeaderFields,
    pub durable: Vec<Rec>,
    pub rolling: Vec<Rec>,
}

/// The final read of Fuchsia's `Tracee::TransferRecords` on a copy of the whole buffer: durable
/// `[from_durable, durable_data_end)`, then (when wrapped) the earlier rolling buffer unless
/// `skip_earlier`, then the current one. A zero data end (never finalised, e.g. after a crash)
/// means "scan the whole buffer".
pub fn final_read(bytes: &[u8], from_durable: u64, skip_earlier: bool) -> FinalRead {
    let (mut durable, mut rolling) = (Vec::new(), Vec::new());
    let header = final_regions(
        bytes,
        from_durable,
        skip_earlier,
        |region, end, framing, d| {
            let records = scan_decode(region, end, framing);
            if d { &mut durable } else { &mut rolling }.extend(records);
        },
    );
    FinalRead {
        header,
        durable,
        rolling,
    }
}

/// [`final_read`] as bytes: the records of every region read, in archive order (real FXT
/// records, not this module's test records).
pub fn final_read_raw(bytes: &[u8], from_durable: u64, skip_earlier: bool) -> Vec<u8> {
    let mut out = Vec::new();
    final_regions(
        bytes,
        from_durable,
        skip_earlier,
        |region, end, framing, _| {
            let (stop, _) = copy_records(region, end, framing, &mut out).expect("framing args");
            assert_eq!(stop, ChunkScanStop::Complete, "scan stopped early");
        },
    );
    out
}

/// The regions of [`final_read`], each given to `read` (its bytes, data end, framing, and
/// whether it is the durable buffer), in archive order; the header.
fn final_regions(
    bytes: &[u8],
    from_durable: u64,
    skip_earlier: bool,
    mut read: impl FnMut(&[u8], u64, Framing, bool),
) -> HeaderFields {
    let header = HeaderFields::from_bytes(bytes[..128].try_into().unwrap());
    let geometry = header
        .validate(bytes.len() as u64)
        .expect("header validates");
    header
        .validate_fxtrace_extension()
        .expect("extension validates");
    if geometry.mode != BufferingMode::Oneshot {
        let start = HEADER_SIZE as usize;
        let durable = &bytes[start..start + geometry.durable_buffer_size as usize];
        let end = if header.durable_data_end == 0 {
            geometry.durable_buffer_size
        } else {
            header.durable_data_end
        };
        let region = &durable[from_durable as usize..];
        read(region, end - from_durable, Framing::Dense, true);
    }
    let wc = header.wrapped_count;
    let mut rolling = |index: usize, wrapped: u32| {
        let off = geometry.rolling_offset(index) as usize;
        let buf = &bytes[off..off + geometry.rolling_buffer_size as usize];
        let end = match header.rolling_data_end[index] {
            0 => geometry.rolling_buffer_size,
            e => e,
        };
        read(buf, end, header.rolling_framing(wrapped), false);
    };
    if wc > 0 && geometry.mode != BufferingMode::Oneshot && !skip_earlier {
        rolling(((wc - 1) & 1) as usize, wc - 1);
    }
    rolling((wc & 1) as usize, wc);
    header
}

/// Copy the whole buffer with `pread`.
pub fn snapshot(buffer: &TraceBuffer) -> Vec<u8> {
    buffer.copy_range(0, buffer.size()).expect("pread")
}

/// A streaming saver: the handler forwards requests to a thread that copies the durable delta
/// and the full rolling buffer out of a second mapping of the memfd (as the manager will),
/// optionally sleeps, then marks the buffer saved.
pub struct Saver {
    pub saved: Arc<Mutex<SavedData>>,
    pub notified: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
    tx: Option<mpsc::Sender<(u32, u64)>>,
}

#[derive(Debug, Default)]
pub struct SavedData {
    /// Keep each saved region's records as bytes in `raw` (real FXT records, not this
    /// module's test records) instead of decoding them into `records`.
    pub keep_raw: bool,
    /// The saved records' bytes, in save order (with `keep_raw`).
    pub raw: Vec<u8>,
    pub records: Vec<Rec>,
    pub last_wrapped: Option<u32>,
    pub last_durable_end: u64,
    pub saves: u64,
}

pub struct ChannelHandler {
    tx: Mutex<mpsc::Sender<(u32, u64)>>,
    notified: Arc<AtomicU64>,
}

impl BufferHandler for ChannelHandler {
    fn notify_buffer_full(&self, wrapped_count: u32, durable_data_end: u64) {
        self.notified.fetch_add(1, Ordering::SeqCst);
        let _ = self
            .tx
            .lock()
            .unwrap()
            .send((wrapped_count, durable_data_end));
    }
}

/// Save one buffer from `mapping` into `saved`; returns false if the request is invalid.
pub fn save_buffer(mapping: &TraceBuffer, saved: &mut SavedData, wc: u32, dde: u64) {
    let header = mapping.header().load();
    let geometry = header
        .validate(mapping.size())
        .expect("header validates during streaming");
    match saved.last_wrapped {
        None => assert_eq!(wc, 0, "first save must be wrapped count 0"),
        Some(last) => assert_eq!(wc, last + 1, "saves must be consecutive"),
    }
    assert!(dde >= saved.last_durable_end && dde % 8 == 0 && dde <= geometry.durable_buffer_size);
    if dde > saved.last_durable_end {
        let bytes = mapping
            .copy_range(
                HEADER_SIZE + saved.last_durable_end,
                dde - saved.last_durable_end,
            )
            .unwrap();
        saved.keep(&bytes, bytes.len() as u64, Framing::Dense);
    }
    let index = (wc & 1) as usize;
    let end = header.rolling_data_end[index];
    assert!(end > 0, "a saved buffer has a data end");
    let bytes = mapping
        .copy_range(geometry.rolling_offset(index), end)
        .unwrap();
    saved.keep(&bytes, end, header.rolling_framing(wc));
    saved.last_wrapped = Some(wc);
    saved.last_durable_end = dde;
    saved.saves += 1;
}

impl SavedData {
    /// Keep the records of one saved region.
    fn keep(&mut self, bytes: &[u8], data_end: u64, framing: Framing) {
        if self.keep_raw {
            let (stop, _) =
                copy_records(bytes, data_end, framing, &mut self.raw).expect("framing args");
            assert_eq!(stop, ChunkScanStop::Complete, "scan stopped early");
        } else {
            self.records.extend(scan_decode(bytes, data_end, framing));
        }
    }
}

impl Saver {
    /// A handler and the saver thread behind it. `delay` is slept before each save.
    pub fn new(mapping: TraceBuffer, delay: Duration) -> (Self, Arc<ChannelHandler>, SaverLink) {
        Self::with(mapping, delay, SavedData::default())
    }

    /// [`Self::new`] keeping the saved records as bytes (`SavedData::raw`): for real FXT
    /// records.
    pub fn raw(mapping: TraceBuffer, delay: Duration) -> (Self, Arc<ChannelHandler>, SaverLink) {
        let saved = SavedData {
            keep_raw: true,
            ..SavedData::default()
        };
        Self::with(mapping, delay, saved)
    }

    fn with(
        mapping: TraceBuffer,
        delay: Duration,
        saved: SavedData,
    ) -> (Self, Arc<ChannelHandler>, SaverLink) {
        let (tx, rx) = mpsc::channel::<(u32, u64)>();
        let notified = Arc::new(AtomicU64::new(0));
        let handler = Arc::new(ChannelHandler {
            tx: Mutex::new(tx.clone()),
            notified: notified.clone(),
        });
        let saved = Arc::new(Mutex::new(saved));
        let link = SaverLink {
            ctx: Arc::new(Mutex::new(None)),
        };
        let thread = {
            let saved = saved.clone();
            let link = link.clone();
            std::thread::spawn(move || {
                while let Ok((wc, dde)) = rx.recv() {
                    if wc == u32::MAX {
                        break;
                    }
                    std::thread::sleep(delay);
                    save_buffer(&mapping, &mut saved.lock().unwrap(), wc, dde);
                    if let Some(ctx) = link.ctx.lock().unwrap().as_ref().and_then(|w| w.upgrade()) {
                        ctx.mark_buffer_saved(wc, dde).expect("mark_buffer_saved");
                    }
                }
            })
        };
        (
            Self {
                saved,
                notified,
                thread: Some(thread),
                tx: Some(tx),
            },
            handler,
            link,
        )
    }

    /// Stop the saver thread after it handled every pending request.
    pub fn finish(&mut self) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.send((u32::MAX, 0));
        }
        if let Some(thread) = self.thread.take() {
            thread.join().expect("saver thread");
        }
    }
}

/// Lets the saver reach the context once it exists.
#[derive(Clone)]
pub struct SaverLink {
    ctx: Arc<Mutex<Option<WeakContext>>>,
}

impl SaverLink {
    pub fn connect(&self, ctx: &Context) {
        *self.ctx.lock().unwrap() = Some(ctx.downgrade());
    }
}

/// Per-thread sequences found, checking there are no duplicates.
pub fn by_thread(records: &[Rec]) -> BTreeMap<u64, Vec<u64>> {
    let mut seen = HashSet::new();
    let mut map: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for r in records {
        assert!(
            seen.insert((r.thread, r.seq, r.durable)),
            "duplicate record {r:?}"
        );
        map.entry(r.thread).or_default().push(r.seq);
    }
    map
}
