//! `convert --to chrome-json` streams in bounded memory: the converter's retained state
//! stays small while records are fed in, and the heap used by a whole conversion does not
//! grow with the length of the trace. One test only in this binary, as it measures the
//! process-wide heap through a counting global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};

use fxtrace_format::lbr::{LbrBranch, LbrPayload};
use fxtrace_format::{
    Arg, ArgValue, Blob, BlobType, ContextSwitch, Event, EventKind, KernelObject, Log, ObjectType,
    RecordWriter, SkipCounts, StreamDecoder, StringRecord, StringRef, ThreadRecord, ThreadRef,
    ThreadState,
};
use fxtrace_tools::convert::chrome::{convert, ChromeJsonWriter};

/// The system allocator, counting live and peak bytes.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(by: usize) {
    // ATOMICS: plain statistics read after the measured work on the same thread; no
    // other memory is published through them, so Relaxed suffices.
    let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

fn shrank(by: usize) {
    // ATOMICS: as in `grew`.
    LIVE.fetch_sub(by, Ordering::Relaxed);
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so
// `System`'s guarantees hold; the counters never affect the returned memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout (non-zero size per GlobalAlloc's contract).
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by this allocator (i.e. by `System`) with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` was allocated by `System` with `layout`; `new_size` is the caller's.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            shrank(layout.size());
            grew(new_size);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const THREADS: u64 = 8;
const CPUS: u8 = 4;

/// A trace of about `n` events on 8 threads: nested durations (depth 3), instants,
/// counters, logs, context switches on 4 CPUs and LBR samples, with thread names.
fn generate(n: u64) -> Vec<u8> {
    let mut w = RecordWriter::with_magic();
    w.push(&StringRecord {
        index: 1,
        value: "cat",
    })
    .unwrap();
    for t in 0..THREADS {
        w.push(&ThreadRecord {
            index: t as u8 + 1,
            pid: 100,
            tid: 1000 + t,
        })
        .unwrap();
        let process = [Arg::new("process", ArgValue::Koid(100))];
        w.push(&KernelObject {
            koid: 1000 + t,
            object_type: ObjectType::THREAD,
            name: StringRef::Inline("worker"),
            args: &process,
        })
        .unwrap();
    }
    let args = [Arg::new("i", ArgValue::U64(1))];
    let lbr = LbrPayload::new(0, 0, 0, &[LbrBranch::new(0x1000, 0x2000, 3, false); 16]).unwrap();
    let mut ticks = 0;
    let mut i = 0;
    while i < n {
        for t in 0..THREADS {
            let thread = ThreadRef::Index(t as u8 + 1);
            let event = |ticks, name, kind| Event {
                ticks,
                thread,
                category: StringRef::Index(1),
                name: StringRef::Inline(name),
                args: &args,
                kind,
            };
            for name in ["a", "b", "c"] {
                ticks += 10;
                w.push(&event(ticks, name, EventKind::DurationBegin))
                    .unwrap();
            }
            ticks += 10;
            w.push(&event(ticks, "tick", EventKind::Instant)).unwrap();
            w.push(&event(ticks, "count", EventKind::Counter { id: 1 }))
                .unwrap();
            w.push(&Log {
                ticks,
                thread,
                message: "a log message",
            })
            .unwrap();
            for name in ["c", "b", "a"] {
                ticks += 10;
                w.push(&event(ticks, name, EventKind::DurationEnd)).unwrap();
            }
            w.push(&ContextSwitch {
                ticks,
                cpu: (t % u64::from(CPUS)) as u8,
                outgoing_state: ThreadState::Blocked,
                outgoing: ThreadRef::Index(((t + THREADS - 1) % THREADS) as u8 + 1),
                incoming: thread,
                outgoing_priority: 1,
                incoming_priority: 2,
            })
            .unwrap();
            w.push(&Blob {
                name: StringRef::Inline("cpu0"),
                blob_type: BlobType::LAST_BRANCH,
                payload: lbr.as_bytes(),
            })
            .unwrap();
            i += 11;
        }
    }
    w.to_bytes()
}

/// Peak heap bytes above the level at the start, while converting `trace` to a sink.
fn conversion_peak(trace: &[u8]) -> usize {
    // ATOMICS: single-threaded measurement; see `grew`.
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let done = convert(trace, io::sink()).unwrap();
    assert!(done.decode_error.is_none());
    assert_eq!(done.stats.unclosed_begins_closed, 0);
    PEAK.load(Ordering::Relaxed) - base
}

#[test]
fn memory_does_not_grow_with_trace_length() {
    // 1. Retained state, checked every 1000 records while feeding a long trace.
    let long = generate(100_000);
    let mut writer = ChromeJsonWriter::new(io::sink()).unwrap();
    let mut max = fxtrace_tools::convert::chrome::Retained::default();
    let mut records = 0u64;
    for record in StreamDecoder::new(&long[..]) {
        writer.record(&record.unwrap()).unwrap();
        records += 1;
        if records % 1000 == 0 {
            let r = writer.retained();
            assert!(r.open_slices <= 3 * THREADS, "{r:?}");
            assert!(r.threads_with_open_slices as u64 <= THREADS, "{r:?}");
            assert!(r.cpus <= usize::from(CPUS), "{r:?}");
            assert!(r.running_cpu_slices <= usize::from(CPUS), "{r:?}");
            assert!(r.known_threads as u64 <= THREADS, "{r:?}");
            max.open_slices = max.open_slices.max(r.open_slices);
        }
    }
    assert!(records > 100_000);
    assert!(max.open_slices > 0, "the checkpoints saw open slices");
    let (_, stats) = writer.finish(None, SkipCounts::default()).unwrap();
    assert_eq!(stats.unclosed_begins_closed, 0);
    assert_eq!(stats.unmatched_ends_dropped, 0);

    // 2. Heap: converting 10 times more events needs no more memory.
    let short = generate(10_000);
    assert!(long.len() > 9 * short.len());
    let short_peak = conversion_peak(&short);
    let long_peak = conversion_peak(&long);
    println!(
        "peak heap of a conversion: {short_peak} bytes for {} KiB of trace, {long_peak} bytes for {} KiB",
        short.len() / 1024,
        long.len() / 1024
    );
    assert!(long_peak < 64 * 1024, "{long_peak} bytes");
    assert!(
        long_peak <= short_peak + 4 * 1024,
        "{short_peak} → {long_peak} bytes"
    );
}
