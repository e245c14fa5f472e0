//! Counts over decoded records, as `fxtrace stats` prints them.

use std::collections::BTreeMap;

use super::decode::RecordHead;
use super::decoded::{Decoded, DecodedRecord, DecodedValue, RecordKind};
use super::fields::EventRecord;
use super::refs::STRING_REF_INLINE_FLAG;
use super::types::{ticks_to_ns, EventType};

/// What a trace contains: records by kind and event type, providers, time span.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Records decoded (skipped ones not included).
    pub records: u64,
    /// Records by kind ([`RecordKind`] as an index).
    kinds: [u64; RecordKind::ALL.len()],
    /// Event records by event type (its raw value).
    event_types: [u64; 16],
    /// Providers seen: id → name (empty when only a provider section named it); the first
    /// [`MAX_PROVIDERS_LISTED`] ids.
    pub providers: BTreeMap<u32, String>,
    /// Provider metadata records of providers beyond those listed.
    pub provider_records_not_listed: u64,
    /// Records dropped, by the markers of providers beyond those listed.
    pub records_dropped_not_listed: u64,
    /// Provider event metadata records seen: (provider id, event id) → count.
    pub provider_events: BTreeMap<(u32, u8), u64>,
    /// Earliest and latest timestamp seen (duration ends included), in ns, of the records
    /// whose tick rate left [`Summary::spans`].
    first_last_ns: Option<(u64, u64)>,
    /// Earliest and latest ticks seen, by tick rate (converted at the end: one division per
    /// rate, not per record); at most [`Self::RATES`].
    spans: Vec<TickSpan>,
    /// Records each provider dropped while tracing, from the trace manager's markers (an
    /// instant event in category [`MARKER_CATEGORY`] with `u64` arguments [`DROP_MARKER_ARG`]
    /// and [`MARKER_PROVIDER_ARG`], one per provider and trace, in the manager's section
    /// [`MANAGER_PROVIDER_ID`]).
    pub records_dropped: BTreeMap<u32, u64>,
    /// Drop markers outside the trace manager's section (written by a provider, or by a
    /// manager before its markers had a section of their own): not counted.
    pub markers_not_counted: u64,
    /// The provider whose section the last record was in.
    current_provider: Option<u32>,
    /// The string index of [`MARKER_CATEGORY`] in each provider's table (the first providers
    /// only), so that only the instants in that category are decoded.
    marker_category: BTreeMap<Option<u32>, u16>,
}

/// The earliest and latest ticks of the records of one tick rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TickSpan {
    ticks_per_second: u64,
    first: u64,
    last: u64,
}

impl TickSpan {
    fn ns(&self) -> (u64, u64) {
        (
            ticks_to_ns(self.first, self.ticks_per_second),
            ticks_to_ns(self.last, self.ticks_per_second),
        )
    }
}

/// Most providers a [`Summary`] lists (a trace of a few million one-word provider sections
/// must not cost a map entry each).
pub const MAX_PROVIDERS_LISTED: usize = 65_536;

/// `map`'s value for `key` if the map holds it or has room for it (fewer than
/// [`MAX_PROVIDERS_LISTED`] keys): a reader's per-provider state for the first providers only.
pub fn listed_entry<K: Ord, V: Default>(map: &mut BTreeMap<K, V>, key: K) -> Option<&mut V> {
    if map.len() < MAX_PROVIDERS_LISTED || map.contains_key(&key) {
        Some(map.entry(key).or_default())
    } else {
        None
    }
}

/// Category of the trace manager's marker events (records dropped, provider lost).
pub const MARKER_CATEGORY: &str = "fxtrace";
/// Argument of the manager's "records dropped" marker: the provider's dropped-record count.
pub const DROP_MARKER_ARG: &str = "records_dropped";
/// Argument of a manager's marker: the id of the provider it is about.
pub const MARKER_PROVIDER_ARG: &str = "provider";
/// Provider id of the trace manager's own section, where it writes its markers: no provider
/// is given id 0, and no provider can write into that section (the manager leaves the
/// provider metadata records it finds in a provider's buffer out of the archive), so a marker
/// there is the manager's; one in a provider's section is not.
pub const MANAGER_PROVIDER_ID: u32 = 0;
/// Name of the trace manager's section (its provider info record).
pub const MANAGER_PROVIDER_NAME: &str = "fxtrace";

impl Summary {
    /// Tick rates whose spans are kept in ticks.
    const RATES: usize = 8;

    /// An empty summary.
    pub fn new() -> Self {
        Summary::default()
    }

    /// Whether a record's contents matter beyond its head ([`Summary::read`]): provider
    /// metadata, string records, and the instant events that may be the manager's drop
    /// markers (category [`MARKER_CATEGORY`], inline or by its index in the table).
    pub fn wants(&self, head: &RecordHead) -> bool {
        match head.kind {
            RecordKind::ProviderInfo
            | RecordKind::ProviderSection
            | RecordKind::ProviderEvent
            | RecordKind::String => true,
            RecordKind::Event if head.event_type == Some(EventType::Instant) => {
                let category = EventRecord::CATEGORY_REF.get(head.header) as u16;
                category & STRING_REF_INLINE_FLAG != 0
                    || self.marker_category.get(&head.provider) == Some(&category)
            }
            _ => false,
        }
    }

    /// Counts one record from its head: its kind, event type and time.
    #[inline]
    pub fn count(&mut self, head: &RecordHead) {
        self.records += 1;
        self.kinds[head.kind as usize] += 1;
        if let Some(t) = head.event_type {
            self.event_types[t as usize] += 1;
        }
        if let Some(ticks) = head.ticks {
            let end = head.end_ticks.map_or(ticks, |end| end.max(ticks));
            self.saw(head.ticks_per_second, ticks, end);
        }
    }

    #[inline]
    fn saw(&mut self, ticks_per_second: u64, first: u64, last: u64) {
        // The rate of the last record, most often.
        if let Some(span) = self.spans.last_mut() {
            if span.ticks_per_second == ticks_per_second {
                span.first = span.first.min(first);
                span.last = span.last.max(last);
                return;
            }
        }
        self.saw_other_rate(ticks_per_second, first, last);
    }

    #[cold]
    fn saw_other_rate(&mut self, ticks_per_second: u64, first: u64, last: u64) {
        if let Some(at) = self
            .spans
            .iter()
            .position(|s| s.ticks_per_second == ticks_per_second)
        {
            // Last: found first next time.
            let span = self.spans.remove(at);
            self.spans.push(span);
        }
        match self
            .spans
            .iter_mut()
            .find(|s| s.ticks_per_second == ticks_per_second)
        {
            Some(span) => {
                span.first = span.first.min(first);
                span.last = span.last.max(last);
            }
            None => {
                if self.spans.len() >= Self::RATES {
                    let (first, last) = self.spans.remove(0).ns();
                    self.merge_ns(first, last);
                }
                self.spans.push(TickSpan {
                    ticks_per_second,
                    first,
                    last,
                });
            }
        }
    }

    fn merge_ns(&mut self, first: u64, last: u64) {
        self.first_last_ns = Some(match self.first_last_ns {
            Some((f, l)) => (f.min(first), l.max(last)),
            None => (first, last),
        });
    }

    /// Counts one decoded record: its head's counts and its contents.
    pub fn add(&mut self, decoded: &Decoded<'_>) {
        let record = &decoded.record;
        self.records += 1;
        self.kinds[record.kind() as usize] += 1;
        if let DecodedRecord::Event(e) = record {
            self.event_types[e.kind.event_type() as usize] += 1;
        }
        if let (Some(t), Some(end)) = (record.time(), record.end_time()) {
            self.merge_ns(t.ns, end.ns);
        }
        self.read(decoded);
    }

    /// Reads what a record says beyond its head (the records [`Summary::wants`]): providers,
    /// provider events, the manager's drop markers.
    pub fn read(&mut self, decoded: &Decoded<'_>) {
        match &decoded.record {
            DecodedRecord::String { index, value } => {
                if value == MARKER_CATEGORY {
                    if let Some(listed) = listed_entry(&mut self.marker_category, decoded.provider)
                    {
                        *listed = *index;
                    }
                } else if self.marker_category.get(&decoded.provider) == Some(index) {
                    self.marker_category.remove(&decoded.provider);
                }
            }
            DecodedRecord::Event(e) if e.category == MARKER_CATEGORY => {
                let arg = |name: &str| {
                    e.args.iter().find_map(|a| match a.value {
                        DecodedValue::U64(n) if a.name == name => Some(n),
                        DecodedValue::U32(n) if a.name == name => Some(u64::from(n)),
                        _ => None,
                    })
                };
                // Only the manager's section holds the manager's markers.
                let of = arg(MARKER_PROVIDER_ARG).and_then(|id| u32::try_from(id).ok());
                match (arg(DROP_MARKER_ARG), of) {
                    (Some(n), Some(id)) if self.current_provider == Some(MANAGER_PROVIDER_ID) => {
                        // Saturating: a marker's count is the trace's word, not ours.
                        let total = listed_entry(&mut self.records_dropped, id)
                            .unwrap_or(&mut self.records_dropped_not_listed);
                        *total = total.saturating_add(n);
                    }
                    (Some(_), _) => self.markers_not_counted += 1,
                    (None, _) => {}
                }
            }
            // The manager's own section is not a provider's.
            DecodedRecord::ProviderInfo { provider_id, .. }
            | DecodedRecord::ProviderSection { provider_id }
                if *provider_id == MANAGER_PROVIDER_ID =>
            {
                self.current_provider = Some(*provider_id);
            }
            DecodedRecord::ProviderInfo { provider_id, name } => {
                match listed_entry(&mut self.providers, *provider_id) {
                    Some(listed) => *listed = name.to_string(),
                    None => self.provider_records_not_listed += 1,
                }
                self.current_provider = Some(*provider_id);
            }
            DecodedRecord::ProviderSection { provider_id } => {
                if listed_entry(&mut self.providers, *provider_id).is_none() {
                    self.provider_records_not_listed += 1;
                }
                self.current_provider = Some(*provider_id);
            }
            DecodedRecord::ProviderEvent { provider_id, event } => {
                match listed_entry(&mut self.provider_events, (*provider_id, *event)) {
                    Some(n) => *n += 1,
                    None => self.provider_records_not_listed += 1,
                }
            }
            _ => {}
        }
    }

    /// Records by kind name ([`DecodedRecord::kind_name`]), the kinds seen.
    pub fn by_kind(&self) -> BTreeMap<&'static str, u64> {
        RecordKind::ALL
            .iter()
            .zip(self.kinds)
            .filter(|(_, n)| *n > 0)
            .map(|(kind, n)| (kind.name(), n))
            .collect()
    }

    /// Event records by event type name, the types seen.
    pub fn by_event_type(&self) -> BTreeMap<&'static str, u64> {
        EventType::ALL
            .iter()
            .map(|t| (t.name(), self.event_types[*t as usize]))
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    /// Event records.
    pub fn events(&self) -> u64 {
        self.event_types.iter().sum()
    }

    /// Earliest and latest timestamp seen (duration ends included), in ns.
    fn first_last(&self) -> Option<(u64, u64)> {
        self.spans
            .iter()
            .map(TickSpan::ns)
            .chain(self.first_last_ns)
            .reduce(|(f, l), (first, last)| (f.min(first), l.max(last)))
    }

    /// Earliest timestamp seen, in ns.
    pub fn first_ns(&self) -> Option<u64> {
        self.first_last().map(|(first, _)| first)
    }

    /// Latest timestamp seen (duration ends included), in ns.
    pub fn last_ns(&self) -> Option<u64> {
        self.first_last().map(|(_, last)| last)
    }

    /// Latest minus earliest timestamp, in ns.
    pub fn span_ns(&self) -> Option<u64> {
        let (first, last) = self.first_last()?;
        Some(last.saturating_sub(first))
    }
}
