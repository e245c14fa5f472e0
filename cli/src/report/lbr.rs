//! Aggregation of LAST_BRANCH blobs (blob type 2, payload per [`fxtrace_format::lbr`]) into
//! branch-edge tables: overall, per CPU and per thread.
//!
//! An LBR blob carries its CPU (payload header; the blob is also named `cpu<N>`) but no
//! thread. The thread is found from the context-switch records read before the blob: the
//! sample belongs to the thread that the latest switch on its CPU at or before the sample's
//! time brought in. The last [`SWITCH_HISTORY`] switches per CPU are kept, so blobs
//! written somewhat out of time order are still attributed; a sample with no such switch
//! (or taken while the CPU was idle or running an unknown thread) goes to the "unknown
//! thread" table.
//!
//! # Mappings
//!
//! `"fxtrace:mmap"` blobs ([`fxtrace_format::mmap`]) say which file each process had mapped
//! where. Each branch address of a sample is resolved, the first time it is seen, to the
//! mapping of the sample's process (the attributed thread's) that contains it: the latest
//! one seen at or before the sample's time, else the earliest later one (a mapping whose
//! record came late). When the sample's process is unknown, the address is resolved only if
//! every mapping of every process that contains it names the same file at the same place.
//! An address met again in a sample that resolves it to another file is counted
//! ([`LbrReport::ambiguous_addresses`]); its first resolution is kept.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::Read;

use std::path::PathBuf;

use super::symbolize::Mapping;
use fxtrace_format::lbr::{LbrBranch, LbrSample};
use fxtrace_format::mmap::{MmapRecord, MMAP_BLOB_NAME};
use fxtrace_format::{
    ticks_to_ns, BlobType, DecodeError, Decoded, DecodedRecord, DecodedValue, ObjectType,
    RecordHead, RecordKind,
};

use crate::read::{self, Analysis, Input, ReadError};

/// Context switches remembered per CPU for attributing samples to threads.
pub const SWITCH_HISTORY: usize = 1024;

/// A taken branch: source and target address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Edge {
    /// Branch source address.
    pub from: u64,
    /// Branch target address.
    pub to: u64,
}

/// What was seen of one edge.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EdgeStats {
    /// Times the branch was taken (entries in LBR samples).
    pub count: u64,
    /// Of those, mispredicted.
    pub mispredicted: u64,
    /// Sum of the nonzero cycle counts.
    pub cycles_total: u64,
    /// Entries with a nonzero cycle count (0 means unknown).
    pub cycles_known: u64,
}

impl EdgeStats {
    fn add(&mut self, b: &LbrBranch) {
        self.count += 1;
        self.mispredicted += u64::from(b.mispredicted());
        let cycles = u64::from(b.cycles());
        if cycles != 0 {
            self.cycles_total += cycles;
            self.cycles_known += 1;
        }
    }

    /// Mispredicted fraction, 0.0 ..= 1.0.
    pub fn mispredict_rate(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.mispredicted as f64 / self.count as f64
        }
    }

    /// Average cycles since the previous branch, over the entries that had a cycle count;
    /// `None` when none had.
    pub fn average_cycles(&self) -> Option<f64> {
        (self.cycles_known > 0).then(|| self.cycles_total as f64 / self.cycles_known as f64)
    }
}

/// Edges of a set of samples (a CPU, a thread, or all).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EdgeTable {
    edges: HashMap<Edge, EdgeStats>,
    samples: u64,
    branches: u64,
    mispredicted: u64,
}

impl EdgeTable {
    fn add(&mut self, sample: &LbrSample<'_>) {
        self.samples += 1;
        for b in sample.branches() {
            self.branches += 1;
            self.mispredicted += u64::from(b.mispredicted());
            self.edges
                .entry(Edge {
                    from: b.from,
                    to: b.to,
                })
                .or_default()
                .add(&b);
        }
    }

    /// LBR samples (blobs) counted.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Branch entries counted.
    pub fn branches(&self) -> u64 {
        self.branches
    }

    /// Mispredicted branch entries.
    pub fn mispredicted(&self) -> u64 {
        self.mispredicted
    }

    /// Distinct edges.
    pub fn distinct_edges(&self) -> usize {
        self.edges.len()
    }

    /// One edge's numbers.
    pub fn get(&self, edge: Edge) -> Option<EdgeStats> {
        self.edges.get(&edge).copied()
    }

    /// The `n` most taken edges: by count, most first; ties by more mispredictions, then
    /// by address, so the order is stable.
    pub fn top(&self, n: usize) -> Vec<(Edge, EdgeStats)> {
        let mut all: Vec<(Edge, EdgeStats)> = self.edges.iter().map(|(e, s)| (*e, *s)).collect();
        all.sort_unstable_by(|(ea, a), (eb, b)| {
            b.count
                .cmp(&a.count)
                .then(b.mispredicted.cmp(&a.mispredicted))
                .then(ea.cmp(eb))
        });
        all.truncate(n);
        all
    }
}

/// Whether a log message is fxtrace's note that LBR could not be sampled.
fn is_lbr_unavailable(message: &str) -> bool {
    message
        .strip_prefix("fxtrace: ")
        .is_some_and(|m| m.contains("LBR") && m.contains("unavailable"))
}

/// Names known for a thread.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ThreadNames {
    /// Its process koid (pid), if known.
    pub pid: Option<u64>,
    /// Its name, if known.
    pub name: Option<String>,
}

/// Branch edges of all LBR samples of a trace, overall, per CPU and per thread.
#[derive(Debug, Default)]
pub struct LbrReport {
    overall: EdgeTable,
    per_cpu: BTreeMap<u16, EdgeTable>,
    per_thread: BTreeMap<Option<u64>, EdgeTable>,
    invalid_payloads: u64,
    cpu_name_mismatches: u64,
    threads: HashMap<u64, ThreadNames>,
    processes: HashMap<u64, String>,
    /// Per CPU, recent switches: (time in ns, incoming tid or `None` for idle/unknown).
    switches: HashMap<u16, VecDeque<(u64, Option<u64>)>>,
    /// Every mapping read, in trace order.
    mappings: Vec<Mapping>,
    /// Indexes into `mappings`, by process.
    mappings_by_pid: HashMap<u32, MappingIndex>,
    /// Every mapping, by start (for an address whose process is unknown).
    all_mappings: MappingIndex,
    /// Branch address → the mapping it was first resolved to.
    address_mappings: HashMap<u64, usize>,
    invalid_mmaps: u64,
    ambiguous_addresses: u64,
    /// Branch addresses left unresolved because more than [`MAX_COVERING`] mappings hold them.
    crowded_addresses: u64,
    /// Why LBR was not sampled, as recorded in the trace (the `reason` of the events
    /// `fxtrace: LBR … unavailable`, or the log records `fxtrace: LBR … unavailable…` of older
    /// traces), each once with how many sources said it, at most [`MAX_UNAVAILABLE_REASONS`].
    lbr_unavailable: Vec<(String, u64)>,
    /// Distinct such messages beyond [`MAX_UNAVAILABLE_REASONS`], counted.
    lbr_unavailable_more: u64,
}

/// Distinct "LBR unavailable" messages kept (a recorder writes one or two; a trace with
/// more is counted, not kept: checking each against those kept stays cheap).
pub const MAX_UNAVAILABLE_REASONS: usize = 16;

/// The result of reading a whole trace.
#[derive(Debug)]
pub struct LbrRead {
    /// The report of everything decoded.
    pub report: LbrReport,
    /// Where decoding stopped early, if it did (the report covers what came before).
    pub decode_error: Option<DecodeError>,
    /// Records and arguments the decoder skipped (unknown types).
    pub skipped: fxtrace_format::SkipCounts,
}

impl LbrRead {
    fn of(report: LbrReport, outcome: Result<read::Outcome, ReadError>) -> LbrRead {
        match outcome {
            Ok(outcome) => LbrRead {
                report,
                decode_error: outcome.error,
                skipped: outcome.skipped,
            },
            // The report writes nothing: no output to fail.
            Err(_) => LbrRead {
                report,
                decode_error: None,
                skipped: fxtrace_format::SkipCounts::default(),
            },
        }
    }
}

impl Analysis for LbrReport {
    /// LBR and mapping blobs, switches, threads and their names, log records and instant
    /// events (why LBR was not sampled).
    fn head(&mut self, head: &RecordHead) -> bool {
        matches!(
            head.kind,
            RecordKind::Blob
                | RecordKind::ContextSwitch
                | RecordKind::SchedContextSwitch
                | RecordKind::Thread
                | RecordKind::KernelObject
                | RecordKind::Log
        ) || head.event_type == Some(fxtrace_format::EventType::Instant)
    }

    fn add(&mut self, _: &RecordHead, d: &Decoded<'_>) -> std::io::Result<()> {
        LbrReport::add(self, d);
        Ok(())
    }
}

/// The N of a blob named `cpu<N>`.
fn cpu_of_name(name: &str) -> Option<u16> {
    name.strip_prefix("cpu")?.parse().ok()
}

impl LbrReport {
    /// An empty report.
    pub fn new() -> Self {
        LbrReport::default()
    }

    /// Reads a whole trace (starting with the magic number record) from `input`.
    pub fn read<R: Read>(mut input: R) -> LbrRead {
        let mut report = LbrReport::new();
        let outcome = read::read_stream("<input>".into(), &mut input, &mut report);
        LbrRead::of(report, outcome)
    }

    /// Reads a whole opened trace ([`Input`]).
    pub fn read_input(input: &mut Input) -> Result<LbrRead, ReadError> {
        let mut report = LbrReport::new();
        let outcome = read::read(input, &mut report);
        Ok(LbrRead::of(report, Ok(outcome?)))
    }

    /// Takes one record into account (LBR blobs, context switches, thread and process
    /// names); others are ignored.
    pub fn add(&mut self, d: &Decoded<'_>) {
        match &d.record {
            DecodedRecord::Blob {
                name,
                blob_type,
                payload,
            } if *blob_type == BlobType::LAST_BRANCH => {
                self.sample(name, payload, d.ticks_per_second)
            }
            DecodedRecord::Blob {
                name,
                blob_type,
                payload,
            } if *blob_type == BlobType::DATA && *name == MMAP_BLOB_NAME => {
                self.mmap(payload, d.ticks_per_second)
            }
            DecodedRecord::ContextSwitch {
                time,
                cpu,
                incoming,
                ..
            } => {
                self.threads.entry(incoming.tid).or_default().pid = Some(incoming.pid);
                self.switch(u16::from(*cpu), time.ns, incoming.tid);
            }
            DecodedRecord::SchedContextSwitch {
                time,
                cpu,
                incoming_tid,
                ..
            } => self.switch(*cpu, time.ns, *incoming_tid),
            DecodedRecord::Thread { thread, .. } => {
                self.threads.entry(thread.tid).or_default().pid = Some(thread.pid);
            }
            DecodedRecord::KernelObject {
                koid,
                object_type,
                name,
                args,
            } => {
                if *object_type == ObjectType::PROCESS {
                    self.processes.insert(*koid, crate::kept_name(name));
                } else if *object_type == ObjectType::THREAD {
                    let t = self.threads.entry(*koid).or_default();
                    t.name = Some(crate::kept_name(name));
                    if let Some(pid) = read::names::koid_arg(args, "process") {
                        t.pid = Some(pid);
                    }
                }
            }
            DecodedRecord::Log { message, .. } if is_lbr_unavailable(message) => {
                self.unavailable(message)
            }
            DecodedRecord::Event(e) if is_lbr_unavailable(&e.name) => {
                // Older traces' events carry the whole text as `hint`, beside a log record
                // that says it: only the `reason` of newer ones counts.
                let reason = e.args.iter().find_map(|a| match &a.value {
                    DecodedValue::Str(s) if a.name == "reason" => Some(s),
                    _ => None,
                });
                if let Some(reason) = reason {
                    self.unavailable(reason);
                }
            }
            _ => {}
        }
    }

    /// One source said LBR was unavailable, for `reason`.
    fn unavailable(&mut self, reason: &str) {
        if let Some((_, n)) = self.lbr_unavailable.iter_mut().find(|(r, _)| r == reason) {
            *n += 1;
        } else if self.lbr_unavailable.len() < MAX_UNAVAILABLE_REASONS {
            self.lbr_unavailable.push((reason.to_owned(), 1));
        } else {
            // Not told apart from those counted before: an upper bound.
            self.lbr_unavailable_more += 1;
        }
    }

    /// Why LBR was not sampled, as recorded in the trace by the kernel provider or the
    /// preload object, each reason once with the number of sources that gave it, in trace
    /// order. Empty when the trace says nothing about it.
    pub fn lbr_unavailable(&self) -> &[(String, u64)] {
        &self.lbr_unavailable
    }

    /// Messages of that kind beyond the [`MAX_UNAVAILABLE_REASONS`] kept, counted (each
    /// repetition of one of them too, once the limit is reached).
    pub fn lbr_unavailable_more(&self) -> u64 {
        self.lbr_unavailable_more
    }

    fn switch(&mut self, cpu: u16, ns: u64, incoming_tid: u64) {
        let history = self.switches.entry(cpu).or_default();
        if history.len() == SWITCH_HISTORY {
            history.pop_front();
        }
        history.push_back((ns, (incoming_tid != 0).then_some(incoming_tid)));
    }

    /// The thread running on `cpu` at `ns`, by the switches seen so far.
    fn thread_at(&self, cpu: u16, ns: u64) -> Option<u64> {
        let history = self.switches.get(&cpu)?;
        history
            .iter()
            .rev()
            .find(|(t, _)| *t <= ns)
            .and_then(|(_, tid)| *tid)
    }

    fn mmap(&mut self, payload: &[u8], ticks_per_second: u64) {
        let Ok(m) = MmapRecord::decode(payload) else {
            self.invalid_mmaps += 1;
            return;
        };
        if m.len > LONG_MAPPING && self.all_mappings.long.len() >= MAX_LONG_MAPPINGS {
            // Larger than any executable mapping: a few are kept (searched one by one), more
            // would make every lookup walk them.
            self.invalid_mmaps += 1;
            return;
        }
        use std::os::unix::ffi::OsStrExt;
        let mapping = Mapping {
            pid: m.pid,
            time_ns: ticks_to_ns(m.time, ticks_per_second),
            start: m.start,
            len: m.len,
            pgoff: m.pgoff,
            build_id: m.build_id.map(<[u8]>::to_vec),
            path: PathBuf::from(std::ffi::OsStr::from_bytes(m.path)),
        };
        let index = self.mappings.len();
        self.mappings_by_pid
            .entry(m.pid)
            .or_default()
            .insert(&mapping, index);
        self.all_mappings.insert(&mapping, index);
        self.mappings.push(mapping);
    }

    /// The mapping of `pid` holding `address` at `ns` (see the module docs).
    fn mapping_in(&self, pid: u32, ns: u64, address: u64) -> Option<usize> {
        let candidates = self.mappings_by_pid.get(&pid)?;
        let covering = || candidates.covering(&self.mappings, address);
        covering()
            .filter(|&i| self.mappings[i].time_ns <= ns)
            .max_by_key(|&i| (self.mappings[i].time_ns, i))
            .or_else(|| covering().min_by_key(|&i| (self.mappings[i].time_ns, i)))
    }

    /// A mapping holding `address` when the process is unknown: only if all agree (the
    /// first recorded of them).
    fn mapping_anywhere(&self, address: u64) -> Option<usize> {
        let covering = || self.all_mappings.covering(&self.mappings, address);
        let found = covering().min()?;
        covering()
            .all(|i| same_file_here(&self.mappings[found], &self.mappings[i]))
            .then_some(found)
    }

    fn resolve(&mut self, pid: Option<u32>, ns: u64, address: u64) {
        if self.mappings.is_empty() {
            return;
        }
        // Choosing among the mappings that hold an address walks them all: more than
        // MAX_COVERING (only a crafted trace maps one address so often) leave it unresolved,
        // counted, so that each lookup is bounded.
        let index = match pid {
            Some(pid) => self.mappings_by_pid.get(&pid),
            None => Some(&self.all_mappings),
        };
        if index.is_some_and(|i| {
            i.covering(&self.mappings, address)
                .nth(MAX_COVERING)
                .is_some()
        }) {
            self.crowded_addresses += 1;
            return;
        }
        let found = match pid {
            Some(pid) => self.mapping_in(pid, ns, address),
            None => self.mapping_anywhere(address),
        };
        let Some(found) = found else {
            return;
        };
        match self.address_mappings.get(&address) {
            None => {
                self.address_mappings.insert(address, found);
            }
            Some(&first) => {
                if first != found && !same_file_here(&self.mappings[first], &self.mappings[found]) {
                    self.ambiguous_addresses += 1;
                }
            }
        }
    }

    fn sample(&mut self, name: &str, payload: &[u8], ticks_per_second: u64) {
        let Ok(sample) = LbrSample::decode(payload) else {
            self.invalid_payloads += 1;
            return;
        };
        let cpu = sample.header.cpu;
        if cpu_of_name(name).is_some_and(|n| n != cpu) {
            self.cpu_name_mismatches += 1;
        }
        let ns = ticks_to_ns(sample.header.event_time, ticks_per_second);
        let thread = self.thread_at(cpu, ns);
        if !self.mappings.is_empty() {
            // The sample's own address space (the pid, from fxtrace's capture), else the
            // process of the thread running on its CPU.
            let aspace = Some(sample.header.aspace).filter(|&a| a != 0);
            let pid = aspace
                .or_else(|| {
                    thread
                        .and_then(|t| self.threads.get(&t))
                        .and_then(|t| t.pid)
                })
                .and_then(|p| u32::try_from(p).ok());
            for b in sample.branches() {
                self.resolve(pid, ns, b.from);
                self.resolve(pid, ns, b.to);
            }
        }
        self.overall.add(&sample);
        self.per_cpu.entry(cpu).or_default().add(&sample);
        self.per_thread.entry(thread).or_default().add(&sample);
    }

    /// All samples.
    pub fn overall(&self) -> &EdgeTable {
        &self.overall
    }

    /// Samples by CPU.
    pub fn per_cpu(&self) -> &BTreeMap<u16, EdgeTable> {
        &self.per_cpu
    }

    /// Samples by thread id; `None` holds the samples no context switch attributes.
    pub fn per_thread(&self) -> &BTreeMap<Option<u64>, EdgeTable> {
        &self.per_thread
    }

    /// LAST_BRANCH blobs whose payload did not decode (not counted in any table).
    pub fn invalid_payloads(&self) -> u64 {
        self.invalid_payloads
    }

    /// Blobs named `cpu<N>` whose payload says another CPU (the payload's is used).
    pub fn cpu_name_mismatches(&self) -> u64 {
        self.cpu_name_mismatches
    }

    /// `"fxtrace:mmap"` blobs whose payload did not decode, or that map more than 4 GiB once
    /// 64 such were kept.
    pub fn invalid_mmaps(&self) -> u64 {
        self.invalid_mmaps
    }

    /// Addresses that samples resolved to different files (the first resolution is kept).
    pub fn ambiguous_addresses(&self) -> u64 {
        self.ambiguous_addresses
    }

    /// Branch addresses (per sample) left unresolved: more than [`MAX_COVERING`] mappings
    /// held them.
    pub fn crowded_addresses(&self) -> u64 {
        self.crowded_addresses
    }

    /// Every mapping in the trace, in trace order.
    pub fn mappings(&self) -> &[Mapping] {
        &self.mappings
    }

    /// The mapping a branch address was resolved to.
    pub fn mapping_of(&self, address: u64) -> Option<&Mapping> {
        self.address_mappings
            .get(&address)
            .map(|&i| &self.mappings[i])
    }

    /// The mappings some branch address was resolved to (each once, in trace order).
    pub fn used_mappings(&self) -> Vec<&Mapping> {
        let mut used: Vec<usize> = self.address_mappings.values().copied().collect();
        used.sort_unstable();
        used.dedup();
        used.into_iter().map(|i| &self.mappings[i]).collect()
    }

    /// The mapping holding `address` in process `pid` at `ns` (the latest one seen at or before
    /// `ns`, else the earliest later one), or, when the process is unknown, the one every
    /// process agrees on: the lookup of the branch addresses, for other reports' addresses
    /// (call stacks).
    pub fn mapping_at(&self, pid: Option<u32>, ns: u64, address: u64) -> Option<&Mapping> {
        match pid {
            Some(pid) => self.mapping_in(pid, ns, address),
            None => self.mapping_anywhere(address),
        }
        .map(|i| &self.mappings[i])
    }

    /// What is known of thread `tid`.
    pub fn thread(&self, tid: u64) -> Option<&ThreadNames> {
        self.threads.get(&tid)
    }

    /// The name of process `pid`, if a kernel object record gave one.
    pub fn process_name(&self, pid: u64) -> Option<&str> {
        self.processes.get(&pid).map(String::as_str)
    }
}

/// Two mappings that put the same file (and build) at the same place: an address in both
/// means the same file address.
fn same_file_here(a: &Mapping, b: &Mapping) -> bool {
    a.path == b.path
        && a.build_id == b.build_id
        && a.start.wrapping_sub(a.pgoff) == b.start.wrapping_sub(b.pgoff)
}

/// A mapping longer than this (4 GiB, more than any executable's) is kept apart from the
/// index by start: one such would make every lookup walk every mapping.
const LONG_MAPPING: u64 = 1 << 32;

/// Most mappings holding one address that a lookup chooses among (see `LbrReport::resolve`).
pub const MAX_COVERING: usize = 1024;

/// Long mappings kept in a report; more are counted as invalid.
const MAX_LONG_MAPPINGS: usize = 64;

/// Mappings by start address, to find those holding an address without a scan of all of
/// them (a report over many mappings and samples was quadratic).
#[derive(Debug, Default)]
struct MappingIndex {
    /// (start, index into the report's mappings) of mappings up to [`LONG_MAPPING`].
    by_start: std::collections::BTreeSet<(u64, usize)>,
    /// Their longest length: no such mapping starting further below an address holds it.
    max_len: u64,
    /// Longer mappings (at most [`MAX_LONG_MAPPINGS`], see `LbrReport::mmap`).
    long: Vec<usize>,
}

impl MappingIndex {
    fn insert(&mut self, mapping: &Mapping, index: usize) {
        if mapping.len > LONG_MAPPING {
            self.long.push(index);
        } else {
            self.by_start.insert((mapping.start, index));
            self.max_len = self.max_len.max(mapping.len);
        }
    }

    /// The indices of the mappings holding `address`.
    fn covering<'m>(
        &'m self,
        mappings: &'m [Mapping],
        address: u64,
    ) -> impl Iterator<Item = usize> + 'm {
        let lowest = address.saturating_sub(self.max_len.saturating_sub(1));
        self.by_start
            .range((lowest, 0)..=(address, usize::MAX))
            .map(|&(_, i)| i)
            .chain(self.long.iter().copied())
            .filter(move |&i| mappings[i].contains(address))
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_mapping_index_finds_every_mapping_holding_an_address() {
        let mapping = |start: u64, len: u64| Mapping {
            pid: 1,
            time_ns: 0,
            start,
            len,
            pgoff: 0,
            build_id: None,
            path: PathBuf::from("/bin/x"),
        };
        let mappings = [
            mapping(0x1000, 0x1000),
            mapping(0x1800, 0x100),
            mapping(0x10_0000, 0x10_0000),
            mapping(0x3000, 0x1000),
        ];
        let mut index = MappingIndex::default();
        for (i, m) in mappings.iter().enumerate() {
            index.insert(m, i);
        }
        let holding = |address| index.covering(&mappings, address).collect::<Vec<_>>();
        assert_eq!(holding(0x1850), [0, 1]);
        assert_eq!(holding(0x1fff), [0]);
        assert_eq!(holding(0x2000), [] as [usize; 0]);
        assert_eq!(holding(0x3000), [3]);
        assert_eq!(holding(0x1f_ffff), [2]);
        assert_eq!(holding(0x20_0000), [] as [usize; 0]);
        // A huge mapping is searched apart: the index by start still spans 1 MiB.
        let mut mappings = mappings.to_vec();
        mappings.push(mapping(0, u64::MAX / 2));
        index.insert(&mappings[4], 4);
        assert_eq!(index.max_len, 0x10_0000);
        let holding = |address| index.covering(&mappings, address).collect::<Vec<_>>();
        assert_eq!(holding(0x1850), [0, 1, 4]);
        assert_eq!(holding(0x2000), [4]);
    }

    use super::*;

    #[test]
    fn edge_stats_rates() {
        let mut s = EdgeStats::default();
        assert_eq!(s.mispredict_rate(), 0.0);
        assert_eq!(s.average_cycles(), None);
        s.add(&LbrBranch::new(1, 2, 0, true));
        s.add(&LbrBranch::new(1, 2, 10, false));
        s.add(&LbrBranch::new(1, 2, 20, false));
        s.add(&LbrBranch::new(1, 2, 0, true));
        assert_eq!(s.count, 4);
        assert_eq!(s.mispredict_rate(), 0.5);
        assert_eq!(
            s.average_cycles(),
            Some(15.0),
            "unknown (0) cycles are left out"
        );
    }

    #[test]
    fn blob_names() {
        assert_eq!(cpu_of_name("cpu0"), Some(0));
        assert_eq!(cpu_of_name("cpu17"), Some(17));
        assert_eq!(cpu_of_name("cpux"), None);
        assert_eq!(cpu_of_name("system"), None);
    }

    #[test]
    fn switch_history_is_bounded_and_searched_backwards() {
        let mut r = LbrReport::new();
        for i in 0..(SWITCH_HISTORY as u64 + 10) {
            r.switch(0, i * 10, 100 + i);
        }
        assert_eq!(r.switches[&0].len(), SWITCH_HISTORY);
        assert_eq!(r.thread_at(0, 55), None, "older than the history kept");
        assert_eq!(r.thread_at(0, 10_005), Some(1100));
        assert_eq!(r.thread_at(0, 10_000), Some(1100));
        assert_eq!(
            r.thread_at(0, u64::MAX),
            Some(100 + SWITCH_HISTORY as u64 + 9)
        );
        assert_eq!(r.thread_at(1, 10), None, "no switch on that CPU");
        r.switch(0, u64::MAX - 1, 0);
        assert_eq!(r.thread_at(0, u64::MAX), None, "idle");
    }
}
