//! Counts over decoded records, as `fxtrace stats` prints them.

use std::collections::BTreeMap;

use super::decoded::{Decoded, DecodedRecord, DecodedValue};

/// What a trace contains: records by kind and event type, providers, time span.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Records decoded (skipped ones not included).
    pub records: u64,
    /// Records by kind name ([`DecodedRecord::kind_name`]).
    pub by_kind: BTreeMap<&'static str, u64>,
    /// Event records by event type name.
    pub by_event_type: BTreeMap<&'static str, u64>,
    /// Providers seen: id → name (empty when only a provider section named it); the first
    /// [`MAX_PROVIDERS_LISTED`] ids.
    pub providers: BTreeMap<u32, String>,
    /// Provider metadata records of providers beyond those listed.
    pub provider_records_not_listed: u64,
    /// Records dropped, by the markers of providers beyond those listed.
    pub records_dropped_not_listed: u64,
    /// Provider event metadata records seen: (provider id, event id) → count.
    pub provider_events: BTreeMap<(u32, u8), u64>,
    /// Earliest timestamp seen, in ns.
    pub first_ns: Option<u64>,
    /// Latest timestamp seen (duration ends included), in ns.
    pub last_ns: Option<u64>,
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
    /// An empty summary.
    pub fn new() -> Self {
        Summary::default()
    }

    /// Counts one record.
    pub fn add(&mut self, decoded: &Decoded<'_>) {
        let record = &decoded.record;
        self.records += 1;
        *self.by_kind.entry(record.kind_name()).or_default() += 1;
        match record {
            DecodedRecord::Event(e) => {
                *self
                    .by_event_type
                    .entry(e.kind.event_type().name())
                    .or_default() += 1;
                if e.category == MARKER_CATEGORY {
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
                        (Some(n), Some(id))
                            if self.current_provider == Some(MANAGER_PROVIDER_ID) =>
                        {
                            // Saturating: a marker's count is the trace's word, not ours.
                            let total = listed_entry(&mut self.records_dropped, id)
                                .unwrap_or(&mut self.records_dropped_not_listed);
                            *total = total.saturating_add(n);
                        }
                        (Some(_), _) => self.markers_not_counted += 1,
                        (None, _) => {}
                    }
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
        if let Some(t) = record.time() {
            self.first_ns = Some(self.first_ns.map_or(t.ns, |f| f.min(t.ns)));
        }
        if let Some(t) = record.end_time() {
            self.last_ns = Some(self.last_ns.map_or(t.ns, |l| l.max(t.ns)));
        }
    }

    /// Latest minus earliest timestamp, in ns.
    pub fn span_ns(&self) -> Option<u64> {
        Some(self.last_ns?.saturating_sub(self.first_ns?))
    }
}
