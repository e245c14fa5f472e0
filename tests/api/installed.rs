//! The installed context's one-announcement path (issue 11): a thread that wrote into one
//! session's context writes into the next one; spans that begin in one trace are not written
//! into another; `uninstall` refuses to wait for its own writer section; and sessions come
//! and go while other threads write without a torn or misplaced record.

#![cfg(feature = "instrument")]

use crate::traced_support::{decode_events, serial, trace};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use fxtrace::buffer::header::BufferingMode;
use fxtrace::engine::global::{self, GlobalError};
use fxtrace::{duration, instant, standalone, traced, Scope};
use fxtrace_format::{DecodedEventKind, DecodedRecord, DecodedValue, Decoder};

#[traced(category = "app")]
fn traced_call(x: u32) -> u32 {
    x + 1
}

#[traced(category = "app", args(left, right))]
fn traced_pair(left: u64, right: u32) -> u64 {
    left + u64::from(right)
}

fn count(events: &[crate::traced_support::Ev], name: &str, complete: bool) -> usize {
    events
        .iter()
        .filter(|e| e.name == name && e.is_complete() == complete)
        .count()
}

#[test]
fn a_thread_writes_into_each_new_session_through_its_memo() {
    let _serial = serial();
    // The same call sites in three sessions in a row: the first call of each pair takes the
    // general path (binding the thread, filling the memo), the next ones the installed path.
    for round in 0..3 {
        let ((), events) = trace(|| {
            for _ in 0..5 {
                instant("app", "repeat", Scope::Thread, &[]);
                let _span = duration("app", "span");
                assert_eq!(traced_call(round), round + 1);
            }
        });
        assert_eq!(count(&events, "repeat", false), 5, "round {round}");
        assert_eq!(count(&events, "span", true), 5, "round {round}");
        assert_eq!(
            count(&events, "api::installed::traced_call", true),
            5,
            "round {round}"
        );
    }
}

#[test]
fn a_span_that_began_in_another_session_is_not_written() {
    let _serial = serial();
    let first = standalone::start(BufferingMode::Oneshot, 1 << 20).expect("session");
    drop(duration("app", "cross")); // fills the memo in the first trace
    let open = duration("app", "cross");
    let (bytes, _) = first.finish_to_vec().expect("finish");
    assert_eq!(count(&decode_events(&bytes), "cross", true), 1);

    let second = standalone::start(BufferingMode::Oneshot, 1 << 20).expect("session");
    drop(open); // began in the first trace: not written into the second
    drop(duration("app", "cross")); // the memo is refreshed by the general path
    drop(duration("app", "cross")); // and then used
    let (bytes, report) = second.finish_to_vec().expect("finish");
    assert_eq!(count(&decode_events(&bytes), "cross", true), 2);
    assert_eq!(report.stop.records_dropped, 0);
}

#[test]
fn uninstall_from_inside_a_writer_section_is_refused() {
    let _serial = serial();
    let session = standalone::start(BufferingMode::Oneshot, 1 << 20).expect("session");
    let writer = session.context().acquire().expect("started");
    assert!(
        matches!(global::uninstall(), Err(GlobalError::InsideSection)),
        "waiting for its own section would never end"
    );
    drop(writer);
    instant("app", "still installed", Scope::Thread, &[]);
    let (bytes, _) = session.finish_to_vec().expect("finish");
    assert_eq!(count(&decode_events(&bytes), "still installed", false), 1);
}

#[test]
fn sessions_come_and_go_while_threads_write() {
    let _serial = serial();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|_| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut calls = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    instant("app", "spin", Scope::Thread, &[]);
                    let _span = duration("app", "spin span");
                    calls += 1;
                }
                calls
            })
        })
        .collect();
    let mut written = 0;
    for round in 0..20 {
        let mode = if round % 2 == 0 {
            BufferingMode::Oneshot
        } else {
            BufferingMode::Circular
        };
        let session = standalone::start(mode, 1 << 20).expect("session");
        std::thread::sleep(std::time::Duration::from_millis(3));
        let (bytes, report) = session.finish_to_vec().expect("finish");
        // The archive: magic, provider info, the records the session counted, and the
        // overflow event exactly when it counted drops; every record decodes.
        let (mut records, mut overflows) = (0u64, 0u64);
        for (i, record) in Decoder::new(&bytes).enumerate() {
            match record.expect("every record decodes").record {
                DecodedRecord::Magic if i == 0 => {}
                DecodedRecord::ProviderInfo { .. } if i == 1 => {}
                DecodedRecord::ProviderEvent { .. } => overflows += 1,
                _ => records += 1,
            }
        }
        assert_eq!(records, report.records, "{report}");
        assert_eq!(
            overflows,
            u64::from(report.stop.records_dropped > 0),
            "{report}"
        );
        assert_eq!(report.malformed_regions, 0);
        for event in decode_events(&bytes) {
            assert!(
                matches!(
                    event.kind,
                    DecodedEventKind::Instant | DecodedEventKind::DurationComplete { .. }
                ),
                "only the writers' events: {event:?}"
            );
        }
        written += report.records;
    }
    stop.store(true, Ordering::Relaxed);
    let calls: u64 = writers.into_iter().map(|w| w.join().unwrap()).sum();
    assert!(calls > 0 && written > 0, "calls {calls}, records {written}");
}

#[test]
fn records_of_mixed_sizes_across_many_chunk_ends_are_all_written() {
    let _serial = serial();
    // 2-word instants with a 3-word span every 7th, ~580 KB across ~36 chunk ends: the words
    // left at a chunk's end take every parity, so some records end exactly at a chunk's end
    // (the installed path leaves those to the general reservation) and others do not fit (a
    // refill).
    let ((), events) = trace(|| {
        for i in 0..30_000 {
            instant("app", "fill", Scope::Thread, &[]);
            if i % 7 == 0 {
                let _span = duration("app", "odd");
            }
        }
    });
    assert_eq!(count(&events, "fill", false), 30_000);
    assert_eq!(count(&events, "odd", true), 4286);
}

#[test]
fn once_the_durable_buffer_is_full_every_installed_record_is_counted_dropped() {
    let _serial = serial();
    let mut config = standalone::StandaloneConfig::new(BufferingMode::Circular, 64 * 1024);
    config.chunk_size = 4096;
    let session = standalone::start_with(config).expect("session");
    let ctx = session.context().clone();
    // The thread's memo knows the pair: later calls take the installed path.
    for _ in 0..3 {
        instant("app", "durable full", Scope::Thread, &[]);
    }
    let mut writer = ctx.acquire().expect("started");
    let mut filled = 0;
    while let Some(mut slot) = writer.reserve_durable(7) {
        slot.payload().fill(0);
        // A string record with index 0 (a filler readers skip).
        slot.commit(2 | (7 << 4));
        filled += 1;
    }
    drop(writer);
    assert!(filled > 0 && ctx.stats().durable_buffer_full);
    let before = ctx.records_dropped();
    for _ in 0..5 {
        instant("app", "durable full", Scope::Thread, &[]);
    }
    assert_eq!(ctx.records_dropped(), before + 5, "each one counted");
    let (_, report) = session.finish_to_vec().expect("finish");
    assert!(report.stop.records_dropped >= before + 5);
}

#[test]
fn argument_indices_are_remembered_per_trace_and_per_thread() {
    let _serial = serial();
    // A thread's memo remembers a call site's argument indices per trace: in each new trace
    // other strings come first, so a remembered index of an earlier trace would name another
    // string; every thread writes its own.
    const EXTRA: [&str; 3] = ["extra0", "extra1", "extra2"];
    for round in 0..3u64 {
        let ((), events) = trace(|| {
            for name in &EXTRA[..round as usize] {
                instant("app", *name, Scope::Thread, &[]);
            }
            for i in 0..4 {
                traced_pair(round, i);
            }
            let threads: Vec<_> = (1..3u64)
                .map(|t| {
                    std::thread::spawn(move || {
                        for i in 0..4 {
                            traced_pair(round * 10 + t, i);
                        }
                    })
                })
                .collect();
            for thread in threads {
                thread.join().expect("thread");
            }
        });
        let calls: Vec<_> = events
            .iter()
            .filter(|e| e.name == "api::installed::traced_pair")
            .collect();
        assert_eq!(calls.len(), 12, "round {round}");
        let mut seen = Vec::new();
        for call in calls {
            assert!(call.is_complete(), "round {round}: {call:?}");
            let names: Vec<&str> = call.args.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(names, ["left", "right"], "round {round}: {call:?}");
            let (Some(DecodedValue::U64(left)), Some(DecodedValue::U32(right))) =
                (call.arg("left"), call.arg("right"))
            else {
                panic!("round {round}: {call:?}");
            };
            seen.push((*left, *right));
        }
        seen.sort_unstable();
        let mut expected: Vec<(u64, u32)> = [round, round * 10 + 1, round * 10 + 2]
            .into_iter()
            .flat_map(|left| (0..4).map(move |right| (left, right)))
            .collect();
        expected.sort_unstable();
        assert_eq!(seen, expected, "round {round}");
    }
}

#[test]
fn a_thread_never_writes_another_threads_argument_index() {
    let _serial = serial();
    // Oneshot: string records are written into the registering thread's chunk. The main
    // thread writes first (its chunk comes first), a second thread registers the names in a
    // later chunk; the main thread's next call must use its own indices, not the second
    // thread's (defined later in the buffer: the trace would not decode).
    let ((), events) = trace(|| {
        traced_pair(1, 1);
        std::thread::spawn(|| {
            traced_pair(2, 2);
            traced_pair(3, 3);
        })
        .join()
        .expect("thread");
        traced_pair(4, 4);
        traced_pair(5, 5);
    });
    let mut seen: Vec<u64> = events
        .iter()
        .filter(|e| e.name == "api::installed::traced_pair")
        .map(|e| match (e.arg("left"), e.arg("right")) {
            (Some(DecodedValue::U64(left)), Some(DecodedValue::U32(right))) => {
                assert_eq!(*left, u64::from(*right), "{e:?}");
                *left
            }
            _ => panic!("{e:?}"),
        })
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, [1, 2, 3, 4, 5]);
}

#[traced(category = "app", name = "shared_pair", args(alpha))]
fn shared_one(alpha: u64) -> u64 {
    alpha
}

#[traced(category = "app", name = "shared_pair", args(beta, gamma))]
fn shared_two(beta: u32, gamma: u64) -> u64 {
    u64::from(beta) + gamma
}

#[test]
fn two_sites_of_one_pair_keep_their_own_argument_names() {
    let _serial = serial();
    // One memo slot per (category, name) pair: the argument indices it keeps are those of
    // one site's names (keyed by them); the other site's calls must not use them.
    let ((), events) = trace(|| {
        for i in 0..6u64 {
            shared_one(i);
            shared_one(i);
            shared_two(i as u32, i);
            shared_two(i as u32, i);
        }
    });
    let mut ones = 0;
    let mut twos = 0;
    for e in events.iter().filter(|e| e.name == "shared_pair") {
        let names: Vec<&str> = e.args.iter().map(|(n, _)| n.as_str()).collect();
        match names.as_slice() {
            ["alpha"] => ones += 1,
            ["beta", "gamma"] => twos += 1,
            other => panic!("{other:?} {e:?}"),
        }
    }
    assert_eq!((ones, twos), (12, 12));
}

#[traced(category = "app", args(a, b, c))]
fn three(a: u32, b: bool, c: u64) -> u64 {
    u64::from(a) + u64::from(b) + c
}

#[traced(category = "app", args(a, b, c, d))]
fn four(a: u64, b: i64, c: f64, d: u64) -> u64 {
    a.wrapping_add(b as u64)
        .wrapping_add(c as u64)
        .wrapping_add(d)
}

#[traced(category = "app", args(a, b, c, d, e))]
fn five(a: u64, b: u64, c: u64, d: u64, e: u32) -> u64 {
    a + b + c + d + u64::from(e)
}

#[test]
fn three_four_and_five_mixed_arguments_on_every_thread_and_trace() {
    let _serial = serial();
    // Payloads of 8 and 10 words (three and four arguments, one-word values past the second
    // slot) on the installed path; five arguments take the general one.
    for round in 0..2u64 {
        let ((), events) = trace(|| {
            let work = move || {
                for i in 0..5u64 {
                    three(i as u32, i % 2 == 0, i + round);
                    four(i, -(i as i64), 0.5, i + round);
                    five(i, i, i, i, i as u32);
                }
            };
            work();
            std::thread::spawn(work).join().unwrap();
            work();
        });
        for (name, names, n) in [
            ("api::installed::three", &["a", "b", "c"][..], 15),
            ("api::installed::four", &["a", "b", "c", "d"][..], 15),
            ("api::installed::five", &["a", "b", "c", "d", "e"][..], 15),
        ] {
            let calls: Vec<_> = events.iter().filter(|e| e.name == name).collect();
            assert_eq!(calls.len(), n, "{name}");
            for c in calls {
                let got: Vec<&str> = c.args.iter().map(|(n, _)| n.as_str()).collect();
                assert_eq!(got, names, "{c:?}");
                if name.ends_with("four") {
                    assert_eq!(c.arg("c"), Some(&DecodedValue::F64(0.5)), "{c:?}");
                    let (Some(DecodedValue::U64(a)), Some(DecodedValue::I64(b))) =
                        (c.arg("a"), c.arg("b"))
                    else {
                        panic!()
                    };
                    assert_eq!(*b, -(*a as i64));
                }
                if name.ends_with("three") {
                    let (Some(DecodedValue::U32(a)), Some(DecodedValue::Bool(b))) =
                        (c.arg("a"), c.arg("b"))
                    else {
                        panic!("{c:?}")
                    };
                    assert_eq!(*b, a % 2 == 0);
                }
            }
        }
    }
}
