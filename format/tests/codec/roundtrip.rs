//! Property tests: random records of every type, with every argument type, indexed and
//! inline refs and maximum-size strings, from several providers with clashing table indices,
//! encode → decode to exactly what was written (strings and threads resolved, ticks
//! converted). Sizes are checked against a size model written independently of the encoder.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use proptest::prelude::*;
use proptest::sample::Index;

use fxtrace_format::*;

// === the model ===

#[derive(Debug, Clone)]
enum SRef {
    Empty,
    Index(Index),
    Inline(String),
}

#[derive(Debug, Clone)]
enum TRef {
    Index(Index),
    Inline(u64, u64),
}

#[derive(Debug, Clone)]
enum PRef {
    Index(Index),
    Inline(u64),
}

#[derive(Debug, Clone)]
enum Val {
    Null,
    I32(i32),
    U32(u32),
    I64(i64),
    U64(u64),
    F64(f64),
    Str(SRef),
    Pointer(u64),
    Koid(u64),
    Bool(bool),
    Blob(Vec<u8>),
}

#[derive(Debug, Clone)]
struct MArg {
    name: SRef,
    value: Val,
}

#[derive(Debug, Clone)]
enum M {
    Event {
        ticks: u64,
        thread: TRef,
        cat: SRef,
        name: SRef,
        args: Vec<MArg>,
        kind: EventKind,
    },
    Blob {
        name: SRef,
        blob_type: u8,
        payload: Vec<u8>,
    },
    Userspace {
        pointer: u64,
        process: PRef,
        name: SRef,
        args: Vec<MArg>,
    },
    Kernel {
        koid: u64,
        object_type: u8,
        name: SRef,
        args: Vec<MArg>,
    },
    Switch {
        ticks: u64,
        cpu: u8,
        state: ThreadState,
        out: TRef,
        inc: TRef,
        prio: (u8, u8),
    },
    Sched {
        ticks: u64,
        cpu: u16,
        state: ThreadState,
        tids: (u64, u64),
        args: Vec<MArg>,
    },
    Wakeup {
        ticks: u64,
        cpu: u16,
        tid: u64,
        args: Vec<MArg>,
    },
    Log {
        ticks: u64,
        thread: TRef,
        message: String,
    },
    Large {
        cat: SRef,
        name: SRef,
        meta: Option<(u64, TRef, Vec<MArg>)>,
        payload: Vec<u8>,
    },
    ProviderEvent {
        event: u8,
    },
}

/// One provider's tables and clock.
#[derive(Debug, Clone)]
struct Provider {
    name: String,
    ticks_per_second: u64,
    strings: Vec<(u16, String)>,
    threads: Vec<(u8, u64, u64)>,
}

// === strategies ===

fn small_string() -> impl Strategy<Value = String> {
    "\\PC{0,24}"
}

/// Mostly short strings, sometimes exactly the 32000-byte maximum (ASCII or 2-byte chars).
fn string() -> impl Strategy<Value = String> {
    prop_oneof![
        20 => small_string(),
        1 => prop::char::range('a', 'z').prop_map(|c| c.to_string().repeat(MAX_STRING_LEN)),
        1 => Just("é".repeat(MAX_STRING_LEN / 2)),
    ]
}

fn sref() -> impl Strategy<Value = SRef> {
    prop_oneof![
        1 => Just(SRef::Empty),
        3 => any::<Index>().prop_map(SRef::Index),
        3 => string().prop_map(SRef::Inline),
    ]
}

fn tref() -> impl Strategy<Value = TRef> {
    prop_oneof![
        any::<Index>().prop_map(TRef::Index),
        (any::<u64>(), any::<u64>()).prop_map(|(p, t)| TRef::Inline(p, t)),
    ]
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        10 => prop::collection::vec(any::<u8>(), 0..40),
        1 => prop::collection::vec(any::<u8>(), 0..=max),
    ]
}

fn finite_f64() -> impl Strategy<Value = f64> {
    use prop::num::f64::*;
    POSITIVE | NEGATIVE | NORMAL | SUBNORMAL | ZERO | INFINITE
}

fn value() -> impl Strategy<Value = Val> {
    prop_oneof![
        Just(Val::Null),
        any::<i32>().prop_map(Val::I32),
        any::<u32>().prop_map(Val::U32),
        any::<i64>().prop_map(Val::I64),
        any::<u64>().prop_map(Val::U64),
        finite_f64().prop_map(Val::F64),
        sref().prop_map(Val::Str),
        any::<u64>().prop_map(Val::Pointer),
        any::<u64>().prop_map(Val::Koid),
        any::<bool>().prop_map(Val::Bool),
        bytes(34_000).prop_map(Val::Blob),
    ]
}

fn args() -> impl Strategy<Value = Vec<MArg>> {
    prop::collection::vec(
        (sref(), value()).prop_map(|(name, value)| MArg { name, value }),
        0..=15,
    )
}

fn event_kind() -> impl Strategy<Value = EventKind> {
    (0u8..=10, any::<u64>()).prop_map(|(t, data)| {
        EventKind::from_parts(
            EventType::from_raw(t).expect("0..=10 are event types"),
            data,
        )
    })
}

fn thread_state() -> impl Strategy<Value = ThreadState> {
    prop::sample::select(ThreadState::ALL)
}

fn record() -> impl Strategy<Value = M> {
    prop_oneof![
        4 => (any::<u64>(), tref(), sref(), sref(), args(), event_kind()).prop_map(
            |(ticks, thread, cat, name, args, kind)| M::Event { ticks, thread, cat, name, args, kind }
        ),
        1 => (sref(), any::<u8>(), bytes(33_000))
            .prop_map(|(name, blob_type, payload)| M::Blob { name, blob_type, payload }),
        1 => (
            any::<u64>(),
            prop_oneof![
                any::<Index>().prop_map(PRef::Index),
                any::<u64>().prop_map(PRef::Inline)
            ],
            sref(),
            args()
        )
            .prop_map(|(pointer, process, name, args)| M::Userspace { pointer, process, name, args }),
        1 => (any::<u64>(), any::<u8>(), sref(), args())
            .prop_map(|(koid, object_type, name, args)| M::Kernel { koid, object_type, name, args }),
        1 => (any::<u64>(), any::<u8>(), thread_state(), tref(), tref(), any::<(u8, u8)>())
            .prop_map(|(ticks, cpu, state, out, inc, prio)| M::Switch { ticks, cpu, state, out, inc, prio }),
        1 => (any::<u64>(), any::<u16>(), thread_state(), any::<(u64, u64)>(), args())
            .prop_map(|(ticks, cpu, state, tids, args)| M::Sched { ticks, cpu, state, tids, args }),
        1 => (any::<u64>(), any::<u16>(), any::<u64>(), args())
            .prop_map(|(ticks, cpu, tid, args)| M::Wakeup { ticks, cpu, tid, args }),
        1 => (any::<u64>(), tref(), string())
            .prop_map(|(ticks, thread, message)| M::Log { ticks, thread, message }),
        1 => (sref(), sref(), prop::option::of((any::<u64>(), tref(), args())), bytes(40_000))
            .prop_map(|(cat, name, meta, payload)| M::Large { cat, name, meta, payload }),
        1 => (0u8..=15).prop_map(|event| M::ProviderEvent { event }),
    ]
}

fn provider() -> impl Strategy<Value = Provider> {
    (
        "[a-z]{0,12}",
        prop_oneof![Just(1_000_000_000u64), Just(1), 1u64..=u64::MAX],
        prop::collection::btree_map(1u16..=MAX_STRING_INDEX, string(), 1..4),
        prop::collection::btree_map(1u8..=MAX_THREAD_INDEX, any::<(u64, u64)>(), 1..4),
    )
        .prop_map(|(name, ticks_per_second, strings, threads)| Provider {
            name,
            ticks_per_second,
            strings: strings.into_iter().collect(),
            threads: threads.into_iter().map(|(i, (p, t))| (i, p, t)).collect(),
        })
}

// === model → encoder input ===

fn sref_of<'a>(r: &'a SRef, p: &Provider) -> StringRef<'a> {
    match r {
        SRef::Empty => StringRef::Empty,
        SRef::Index(i) => StringRef::Index(i.get(&p.strings).0),
        SRef::Inline(s) => StringRef::Inline(s),
    }
}

fn tref_of(r: &TRef, p: &Provider) -> ThreadRef {
    match r {
        TRef::Index(i) => ThreadRef::Index(i.get(&p.threads).0),
        TRef::Inline(pid, tid) => ThreadRef::Inline {
            pid: *pid,
            tid: *tid,
        },
    }
}

fn args_of<'a>(args: &'a [MArg], p: &Provider) -> Vec<Arg<'a>> {
    args.iter()
        .map(|a| Arg {
            name: sref_of(&a.name, p),
            value: match &a.value {
                Val::Null => ArgValue::Null,
                Val::I32(v) => ArgValue::I32(*v),
                Val::U32(v) => ArgValue::U32(*v),
                Val::I64(v) => ArgValue::I64(*v),
                Val::U64(v) => ArgValue::U64(*v),
                Val::F64(v) => ArgValue::F64(*v),
                Val::Str(r) => ArgValue::Str(sref_of(r, p)),
                Val::Pointer(v) => ArgValue::Pointer(*v),
                Val::Koid(v) => ArgValue::Koid(*v),
                Val::Bool(v) => ArgValue::Bool(*v),
                Val::Blob(b) => ArgValue::Blob(b),
            },
        })
        .collect()
}

/// Builds the public encoder type for `m` and hands it to `f`.
fn with_record<T>(m: &M, p: &Provider, provider_id: u32, f: impl FnOnce(&Record<'_>) -> T) -> T {
    match m {
        M::Event {
            ticks,
            thread,
            cat,
            name,
            args,
            kind,
        } => f(&Record::from(Event {
            ticks: *ticks,
            thread: tref_of(thread, p),
            category: sref_of(cat, p),
            name: sref_of(name, p),
            args: &args_of(args, p),
            kind: *kind,
        })),
        M::Blob {
            name,
            blob_type,
            payload,
        } => f(&Record::from(Blob {
            name: sref_of(name, p),
            blob_type: BlobType(*blob_type),
            payload,
        })),
        M::Userspace {
            pointer,
            process,
            name,
            args,
        } => f(&Record::from(UserspaceObject {
            pointer: *pointer,
            process: match process {
                PRef::Index(i) => ProcessRef::Index(i.get(&p.threads).0),
                PRef::Inline(pid) => ProcessRef::Inline(*pid),
            },
            name: sref_of(name, p),
            args: &args_of(args, p),
        })),
        M::Kernel {
            koid,
            object_type,
            name,
            args,
        } => f(&Record::from(KernelObject {
            koid: *koid,
            object_type: ObjectType(*object_type),
            name: sref_of(name, p),
            args: &args_of(args, p),
        })),
        M::Switch {
            ticks,
            cpu,
            state,
            out,
            inc,
            prio,
        } => f(&Record::from(ContextSwitch {
            ticks: *ticks,
            cpu: *cpu,
            outgoing_state: *state,
            outgoing: tref_of(out, p),
            incoming: tref_of(inc, p),
            outgoing_priority: prio.0,
            incoming_priority: prio.1,
        })),
        M::Sched {
            ticks,
            cpu,
            state,
            tids,
            args,
        } => f(&Record::from(SchedContextSwitch {
            ticks: *ticks,
            cpu: *cpu,
            outgoing_state: *state,
            outgoing_tid: tids.0,
            incoming_tid: tids.1,
            args: &args_of(args, p),
        })),
        M::Wakeup {
            ticks,
            cpu,
            tid,
            args,
        } => f(&Record::from(SchedThreadWakeup {
            ticks: *ticks,
            cpu: *cpu,
            waking_tid: *tid,
            args: &args_of(args, p),
        })),
        M::Log {
            ticks,
            thread,
            message,
        } => f(&Record::from(Log {
            ticks: *ticks,
            thread: tref_of(thread, p),
            message,
        })),
        M::Large {
            cat,
            name,
            meta,
            payload,
        } => {
            let meta_args = meta
                .as_ref()
                .map(|(_, _, a)| args_of(a, p))
                .unwrap_or_default();
            f(&Record::from(LargeBlob {
                category: sref_of(cat, p),
                name: sref_of(name, p),
                metadata: meta.as_ref().map(|(ticks, thread, _)| LargeBlobMetadata {
                    ticks: *ticks,
                    thread: tref_of(thread, p),
                    args: &meta_args,
                }),
                payload,
            }))
        }
        M::ProviderEvent { event } => f(&Record::from(ProviderEvent {
            provider_id,
            event: *event,
        })),
    }
}

// === the size model, independent of the encoder ===

fn stream(len: usize) -> usize {
    len.div_ceil(8)
}

fn sw(r: &SRef) -> usize {
    match r {
        SRef::Inline(s) => stream(s.len()),
        _ => 0,
    }
}

fn tw(r: &TRef) -> usize {
    match r {
        TRef::Inline(..) => 2,
        TRef::Index(_) => 0,
    }
}

fn arg_words(a: &MArg) -> usize {
    1 + sw(&a.name)
        + match &a.value {
            Val::I64(_) | Val::U64(_) | Val::F64(_) | Val::Pointer(_) | Val::Koid(_) => 1,
            Val::Str(r) => sw(r),
            Val::Blob(b) => stream(b.len()),
            Val::Null | Val::I32(_) | Val::U32(_) | Val::Bool(_) => 0,
        }
}

/// The encoder's expected answer: the size in words, or the limit error.
fn expected_size(m: &M) -> Result<usize, EncodeError> {
    let args_of = |args: &[MArg]| -> Result<usize, EncodeError> {
        let mut total = 0;
        for a in args {
            let words = arg_words(a);
            if words > MAX_RECORD_WORDS {
                return Err(EncodeError::ArgumentTooLarge { words });
            }
            total += words;
        }
        Ok(total)
    };
    let (words, large) = match m {
        M::Event {
            thread,
            cat,
            name,
            args,
            kind,
            ..
        } => (
            2 + tw(thread)
                + sw(cat)
                + sw(name)
                + args_of(args)?
                + kind.data_word().map_or(0, |_| 1),
            false,
        ),
        M::Blob { name, payload, .. } => {
            if payload.len() > MAX_BLOB_PAYLOAD {
                return Err(EncodeError::BlobTooLarge { len: payload.len() });
            }
            (1 + sw(name) + stream(payload.len()), false)
        }
        M::Userspace {
            process,
            name,
            args,
            ..
        } => (
            2 + usize::from(matches!(process, PRef::Inline(_))) + sw(name) + args_of(args)?,
            false,
        ),
        M::Kernel { name, args, .. } => (2 + sw(name) + args_of(args)?, false),
        M::Switch { out, inc, .. } => (2 + tw(out) + tw(inc), false),
        M::Sched { args, .. } => (4 + args_of(args)?, false),
        M::Wakeup { args, .. } => (3 + args_of(args)?, false),
        M::Log {
            thread, message, ..
        } => (2 + tw(thread) + stream(message.len()), false),
        M::Large {
            cat,
            name,
            meta,
            payload,
        } => {
            let meta = match meta {
                Some((_, thread, args)) => 1 + tw(thread) + args_of(args)?,
                None => 0,
            };
            (
                2 + sw(cat) + sw(name) + meta + 1 + stream(payload.len()),
                true,
            )
        }
        M::ProviderEvent { .. } => (1, false),
    };
    if !large && words > MAX_RECORD_WORDS {
        return Err(EncodeError::RecordTooLarge { words });
    }
    Ok(words)
}

// === the expected decoded records ===

fn ts(ticks: u64, p: &Provider) -> Timestamp {
    let ns = u128::from(ticks) * 1_000_000_000 / u128::from(p.ticks_per_second);
    Timestamp {
        ticks,
        ns: u64::try_from(ns).unwrap_or(u64::MAX),
    }
}

fn s(r: &SRef, p: &Provider) -> Cow<'static, str> {
    match r {
        SRef::Empty => Cow::Borrowed(""),
        SRef::Index(i) => Cow::Owned(i.get(&p.strings).1.clone()),
        SRef::Inline(text) => Cow::Owned(text.clone()),
    }
}

fn t(r: &TRef, p: &Provider) -> Thread {
    match r {
        TRef::Index(i) => {
            let (_, pid, tid) = *i.get(&p.threads);
            Thread { pid, tid }
        }
        TRef::Inline(pid, tid) => Thread {
            pid: *pid,
            tid: *tid,
        },
    }
}

fn a(args: &[MArg], p: &Provider) -> DecodedArgs<'static> {
    args.iter()
        .map(|arg| DecodedArg {
            name: s(&arg.name, p),
            value: match &arg.value {
                Val::Null => DecodedValue::Null,
                Val::I32(v) => DecodedValue::I32(*v),
                Val::U32(v) => DecodedValue::U32(*v),
                Val::I64(v) => DecodedValue::I64(*v),
                Val::U64(v) => DecodedValue::U64(*v),
                Val::F64(v) => DecodedValue::F64(*v),
                Val::Str(r) => DecodedValue::Str(s(r, p)),
                Val::Pointer(v) => DecodedValue::Pointer(*v),
                Val::Koid(v) => DecodedValue::Koid(*v),
                Val::Bool(v) => DecodedValue::Bool(*v),
                Val::Blob(b) => DecodedValue::Blob(Cow::Owned(b.clone())),
            },
        })
        .collect::<Vec<_>>()
        .into()
}

fn expected(m: &M, p: &Provider, provider_id: u32) -> DecodedRecord<'static> {
    match m {
        M::Event {
            ticks,
            thread,
            cat,
            name,
            args,
            kind,
        } => {
            let kind = match *kind {
                EventKind::Instant => DecodedEventKind::Instant,
                EventKind::Counter { id } => DecodedEventKind::Counter { id },
                EventKind::DurationBegin => DecodedEventKind::DurationBegin,
                EventKind::DurationEnd => DecodedEventKind::DurationEnd,
                EventKind::DurationComplete { end_ticks } => DecodedEventKind::DurationComplete {
                    end: ts(end_ticks, p),
                },
                EventKind::AsyncBegin { id } => DecodedEventKind::AsyncBegin { id },
                EventKind::AsyncInstant { id } => DecodedEventKind::AsyncInstant { id },
                EventKind::AsyncEnd { id } => DecodedEventKind::AsyncEnd { id },
                EventKind::FlowBegin { id } => DecodedEventKind::FlowBegin { id },
                EventKind::FlowStep { id } => DecodedEventKind::FlowStep { id },
                EventKind::FlowEnd { id } => DecodedEventKind::FlowEnd { id },
            };
            DecodedRecord::Event(DecodedEvent {
                time: ts(*ticks, p),
                thread: t(thread, p),
                category: s(cat, p),
                name: s(name, p),
                args: a(args, p),
                kind,
            })
        }
        M::Blob {
            name,
            blob_type,
            payload,
        } => DecodedRecord::Blob {
            name: s(name, p),
            blob_type: BlobType(*blob_type),
            payload: Cow::Owned(payload.clone()),
        },
        M::Userspace {
            pointer,
            process,
            name,
            args,
        } => DecodedRecord::UserspaceObject {
            pointer: *pointer,
            pid: match process {
                PRef::Index(i) => i.get(&p.threads).1,
                PRef::Inline(pid) => *pid,
            },
            name: s(name, p),
            args: a(args, p),
        },
        M::Kernel {
            koid,
            object_type,
            name,
            args,
        } => DecodedRecord::KernelObject {
            koid: *koid,
            object_type: ObjectType(*object_type),
            name: s(name, p),
            args: a(args, p),
        },
        M::Switch {
            ticks,
            cpu,
            state,
            out,
            inc,
            prio,
        } => DecodedRecord::ContextSwitch {
            time: ts(*ticks, p),
            cpu: *cpu,
            outgoing_state: state.raw(),
            outgoing: t(out, p),
            incoming: t(inc, p),
            outgoing_priority: prio.0,
            incoming_priority: prio.1,
        },
        M::Sched {
            ticks,
            cpu,
            state,
            tids,
            args,
        } => DecodedRecord::SchedContextSwitch {
            time: ts(*ticks, p),
            cpu: *cpu,
            outgoing_state: state.raw(),
            outgoing_tid: tids.0,
            incoming_tid: tids.1,
            args: a(args, p),
        },
        M::Wakeup {
            ticks,
            cpu,
            tid,
            args,
        } => DecodedRecord::SchedThreadWakeup {
            time: ts(*ticks, p),
            cpu: *cpu,
            waking_tid: *tid,
            args: a(args, p),
        },
        M::Log {
            ticks,
            thread,
            message,
        } => DecodedRecord::Log {
            time: ts(*ticks, p),
            thread: t(thread, p),
            message: Cow::Owned(message.clone()),
        },
        M::Large {
            cat,
            name,
            meta,
            payload,
        } => DecodedRecord::LargeBlob {
            category: s(cat, p),
            name: s(name, p),
            metadata: meta.as_ref().map(|(ticks, thread, args)| LargeBlobEvent {
                time: ts(*ticks, p),
                thread: t(thread, p),
                args: a(args, p),
            }),
            payload: Cow::Owned(payload.clone()),
        },
        M::ProviderEvent { event } => DecodedRecord::ProviderEvent {
            provider_id,
            event: *event,
        },
    }
}

// === the properties ===

/// A record the decoder must yield, with its provider.
type Expected = (Option<u32>, DecodedRecord<'static>);

/// Builds a trace from sections `(provider slot, records)` and returns its bytes with the
/// records the decoder must yield, as (provider, record).
fn build(
    providers: &[Provider],
    sections: &[(Index, Vec<M>)],
) -> Result<(Vec<u8>, Vec<Expected>), TestCaseError> {
    let mut w = RecordWriter::with_magic();
    let mut want = vec![(None, DecodedRecord::Magic)];
    let mut introduced = HashMap::new();
    for (slot, records) in sections {
        let id = slot.index(providers.len()) as u32 + 1;
        let p = &providers[id as usize - 1];
        if introduced.insert(id, ()).is_none() {
            w.push(&ProviderInfo {
                provider_id: id,
                name: &p.name,
            })
            .unwrap();
            want.push((
                Some(id),
                DecodedRecord::ProviderInfo {
                    provider_id: id,
                    name: p.name.clone().into(),
                },
            ));
            w.push(&Initialization {
                ticks_per_second: p.ticks_per_second,
            })
            .unwrap();
            want.push((
                Some(id),
                DecodedRecord::Initialization {
                    ticks_per_second: p.ticks_per_second,
                },
            ));
            for (index, value) in &p.strings {
                w.push(&StringRecord {
                    index: *index,
                    value,
                })
                .unwrap();
                want.push((
                    Some(id),
                    DecodedRecord::String {
                        index: *index,
                        value: value.clone().into(),
                    },
                ));
            }
            for &(index, pid, tid) in &p.threads {
                w.push(&ThreadRecord { index, pid, tid }).unwrap();
                want.push((
                    Some(id),
                    DecodedRecord::Thread {
                        index,
                        thread: Thread { pid, tid },
                    },
                ));
            }
        } else {
            w.push(&ProviderSection { provider_id: id }).unwrap();
            want.push((Some(id), DecodedRecord::ProviderSection { provider_id: id }));
        }
        for m in records {
            let before = w.words().len();
            let result = with_record(m, p, id, |r| w.push(r));
            prop_assert_eq!(result, expected_size(m), "record {:?}", m);
            if let Ok(words) = result {
                prop_assert_eq!(w.words().len() - before, words);
                want.push((Some(id), expected(m, p, id)));
            } else {
                prop_assert_eq!(w.words().len(), before, "a failed push must not write");
            }
        }
    }
    Ok((w.to_bytes(), want))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn encode_decode_round_trip(
        providers in prop::collection::vec(provider(), 1..=3),
        sections in prop::collection::vec((any::<Index>(), prop::collection::vec(record(), 0..6)), 1..5),
    ) {
        let (bytes, want) = build(&providers, &sections)?;

        let decoded: Vec<Decoded<'_>> = Decoder::new(&bytes)
            .collect::<Result<_, _>>()
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let got: Vec<_> = decoded.iter().map(|d| (d.provider, d.record.clone())).collect();
        prop_assert_eq!(&got, &want);
        // Offsets increase and every record ends where the next begins.
        for pair in decoded.windows(2) {
            prop_assert!(pair[0].offset < pair[1].offset);
        }
        // Each record carries its provider's clock (from its initialization record on,
        // which directly follows the provider info).
        for d in &decoded {
            if matches!(d.record, DecodedRecord::ProviderInfo { .. }) {
                continue;
            }
            if let Some(id) = d.provider {
                prop_assert_eq!(d.ticks_per_second, providers[id as usize - 1].ticks_per_second);
            }
        }

        // The streaming decoder yields the same records at the same offsets.
        let streamed: Vec<Decoded<'static>> = StreamDecoder::new(&bytes[..])
            .collect::<Result<_, _>>()
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&streamed, &decoded);

        // Framing alone finds the same records.
        let scan = scan_records(&bytes);
        prop_assert_eq!(scan, Scan { valid_len: bytes.len(), records: want.len(), stop: ScanStop::End });
    }

    #[test]
    fn slice_write_matches_words_and_stays_in_bounds(m in record(), p in provider(), spare in 0usize..3) {
        with_record(&m, &p, 1, |r| {
            let Ok(n) = r.words() else { return Ok(()) };
            // A slot of exactly words() plus spare: write() fills n words, leaves the rest.
            const SENTINEL: u64 = 0xa5a5_a5a5_a5a5_a5a5;
            let mut slot = vec![SENTINEL; n + spare];
            prop_assert_eq!(r.write(&mut slot), Ok(n));
            prop_assert!(slot[n..].iter().all(|&x| x == SENTINEL));
            prop_assert_eq!(&slot[..n], &encode_to_vec(r).unwrap()[..]);
            prop_assert_eq!(record_words(slot[0]), n);
            // Any smaller slot is refused with the exact size needed.
            let mut small = vec![0u64; n - 1];
            prop_assert_eq!(
                r.write(&mut small),
                Err(EncodeError::BufferTooSmall { needed: n, available: n - 1 })
            );
            Ok(())
        })?;
    }
}

#[test]
fn string_tables_are_per_provider() {
    // Both providers register index 1; each section resolves its own.
    let mut w = RecordWriter::with_magic();
    for (id, value) in [(1, "one"), (2, "two")] {
        w.push(&ProviderInfo {
            provider_id: id,
            name: "p",
        })
        .unwrap();
        w.push(&StringRecord { index: 1, value }).unwrap();
    }
    let event = Event {
        ticks: 1,
        thread: ThreadRef::Inline { pid: 1, tid: 2 },
        category: StringRef::Index(1),
        name: StringRef::Empty,
        args: &[],
        kind: EventKind::Instant,
    };
    w.push(&ProviderSection { provider_id: 1 }).unwrap();
    w.push(&event).unwrap();
    w.push(&ProviderSection { provider_id: 2 }).unwrap();
    w.push(&event).unwrap();
    let bytes = w.to_bytes();
    let cats: BTreeMap<u32, String> = Decoder::new(&bytes)
        .filter_map(|d| match d.unwrap() {
            Decoded {
                provider: Some(p),
                record: DecodedRecord::Event(e),
                ..
            } => Some((p, e.category.into_owned())),
            _ => None,
        })
        .collect();
    assert_eq!(
        cats,
        BTreeMap::from([(1, "one".to_string()), (2, "two".to_string())])
    );
}
