//! The `write_all_records` example's trace: it contains every record type, event type and
//! argument type, from two providers, and decodes to the known content.

use crate::write_all_records;

use std::collections::BTreeSet;

use fxtrace_format::lbr::LbrSample;
use fxtrace_format::*;

fn decode(bytes: &[u8]) -> Vec<Decoded<'_>> {
    Decoder::new(bytes)
        .collect::<Result<_, _>>()
        .expect("the example decodes")
}

#[test]
fn every_kind_is_present() {
    let bytes = write_all_records::build_trace().unwrap();
    let records = decode(&bytes);
    let kinds: BTreeSet<_> = records.iter().map(|d| d.record.kind_name()).collect();
    let all = [
        "magic",
        "provider_info",
        "provider_section",
        "provider_event",
        "initialization",
        "string",
        "thread",
        "event",
        "blob",
        "userspace_object",
        "kernel_object",
        "context_switch",
        "sched_context_switch",
        "thread_wakeup",
        "log",
        "large_blob",
    ];
    assert_eq!(kinds, all.into_iter().collect());

    let event_types: BTreeSet<_> = records
        .iter()
        .filter_map(|d| match &d.record {
            DecodedRecord::Event(e) => Some(e.kind.event_type()),
            _ => None,
        })
        .collect();
    assert_eq!(event_types, EventType::ALL.iter().copied().collect());

    let arg_types: BTreeSet<_> = records
        .iter()
        .flat_map(|d| match &d.record {
            DecodedRecord::Event(e) => e.args.to_vec(),
            _ => vec![],
        })
        .map(|a| a.value.type_name())
        .collect();
    let all_args: BTreeSet<_> = ArgType::ALL.iter().map(|t| t.name()).collect();
    assert_eq!(arg_types, all_args);

    let blob_types: BTreeSet<_> = records
        .iter()
        .filter_map(|d| match &d.record {
            DecodedRecord::Blob { blob_type, .. } => Some(blob_type.0),
            _ => None,
        })
        .collect();
    assert_eq!(blob_types, [1, 2].into_iter().collect());
    let providers: BTreeSet<_> = records.iter().filter_map(|d| d.provider).collect();
    assert_eq!(providers, [1, 2].into_iter().collect());
}

#[test]
fn known_content() {
    let bytes = write_all_records::build_trace().unwrap();
    let records = decode(&bytes);
    let events: Vec<(Option<u32>, &DecodedEvent<'_>)> = records
        .iter()
        .filter_map(|d| match &d.record {
            DecodedRecord::Event(e) => Some((d.provider, e)),
            _ => None,
        })
        .collect();
    let (alpha_pid, alpha_tid) = write_all_records::ALPHA_THREAD;
    let alpha = Thread {
        pid: alpha_pid,
        tid: alpha_tid,
    };

    // Provider 1 runs at 2 GHz: 2000 ticks = 1000 ns; indexed refs resolved.
    let (p, instant) = events[0];
    assert_eq!(p, Some(1));
    assert_eq!(
        instant.time,
        Timestamp {
            ticks: 2_000,
            ns: 1_000
        }
    );
    assert_eq!(
        (instant.category.as_ref(), instant.name.as_ref()),
        ("cat", "instant")
    );
    assert_eq!(instant.thread, alpha);
    assert_eq!(instant.args.len(), 12);
    assert_eq!(instant.args[1].name, "count");
    assert_eq!(instant.args[1].value, DecodedValue::I32(-5));
    assert_eq!(
        instant.args[7].value,
        DecodedValue::Str("indexed-name".into())
    );
    assert_eq!(
        instant.args[11].value,
        DecodedValue::Blob(vec![0xde, 0xad, 0xbe, 0xef, 1].into())
    );

    // The duration's end follows the flow events it encloses: the complete event is fourth.
    let complete = events[3].1;
    assert_eq!(complete.thread, Thread { pid: 100, tid: 102 });
    assert_eq!(
        complete.kind,
        DecodedEventKind::DurationComplete {
            end: Timestamp {
                ticks: 23_000,
                ns: 11_500
            }
        }
    );

    // Provider 2: no initialization record (1 tick = 1 ns) and its own string 1.
    let (p, beta) = events[11];
    assert_eq!(p, Some(2));
    assert_eq!(beta.category, "beta-cat");
    assert_eq!(
        beta.time,
        Timestamp {
            ticks: 5_000,
            ns: 5_000
        }
    );
    let (bpid, btid) = write_all_records::BETA_THREAD;
    assert_eq!(
        beta.thread,
        Thread {
            pid: bpid,
            tid: btid
        }
    );

    // Back in provider 1's section: string 1 is "cat" again, 2 ticks per ns again.
    let (p, last) = events[12];
    assert_eq!(p, Some(1));
    assert_eq!(
        (last.category.as_ref(), last.name.as_ref()),
        ("cat", "back-in-alpha")
    );
    assert_eq!(last.time.ns, 20_000);

    // The last-branch blob decodes.
    let lbr = records
        .iter()
        .find_map(|d| match &d.record {
            DecodedRecord::Blob {
                blob_type: BlobType::LAST_BRANCH,
                payload,
                name,
            } => {
                assert_eq!(name, "cpu3");
                Some(LbrSample::decode(payload).unwrap())
            }
            _ => None,
        })
        .expect("an LBR blob");
    assert_eq!(
        (
            lbr.header.cpu,
            lbr.header.num_branches,
            lbr.header.event_time
        ),
        (3, 2, 26_000)
    );
    let branches: Vec<_> = lbr.branches().collect();
    assert_eq!((branches[1].from, branches[1].to), (0x40_3000, 0x40_1000));
    assert!(branches[1].mispredicted() && !branches[0].mispredicted());
    assert_eq!(branches[0].cycles(), 12);

    // The context switch resolves an indexed and an inline thread.
    let switch = records
        .iter()
        .find_map(|d| match &d.record {
            r @ DecodedRecord::ContextSwitch { .. } => Some(r.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        switch,
        DecodedRecord::ContextSwitch {
            time: Timestamp {
                ticks: 28_000,
                ns: 14_000
            },
            cpu: 3,
            outgoing_state: ThreadState::Blocked.raw(),
            outgoing: alpha,
            incoming: Thread { pid: 100, tid: 102 },
            outgoing_priority: 20,
            incoming_priority: 10,
        }
    );

    let mut summary = Summary::new();
    records.iter().for_each(|d| summary.add(d));
    assert_eq!(summary.first_ns(), Some(1_000));
    assert_eq!(summary.last_ns(), Some(20_000));
    assert_eq!(summary.providers.get(&2).map(String::as_str), Some("beta"));
}

#[test]
fn dump_lines_show_resolved_values() {
    let bytes = write_all_records::build_trace().unwrap();
    let lines: Vec<String> = decode(&bytes).iter().map(|d| d.to_string()).collect();
    assert_eq!(lines[0], "@0 [-] magic");
    assert!(lines.iter().all(|l| !l.contains('\n')));
    assert!(lines.iter().any(|l| l.contains(
        "event duration_complete t=5000ns pid=100 tid=102 cat=\"cat\" name=\"complete\" end=11500ns dur=6500ns"
    )));
    assert!(lines.iter().any(|l| l.contains(
        "lbr cpu=3 time=13000ns aspace=0x1000 branches=2 [0x401000->0x402000 cycles=12, 0x403000->0x401000 cycles=3 mispredicted]"
    )));
    assert!(lines.iter().any(|l| l.ends_with(
        "[p1] context_switch t=14000ns cpu=3 out=100/101 out_state=blocked out_prio=20 in=100/102 in_prio=10"
    )));
}
