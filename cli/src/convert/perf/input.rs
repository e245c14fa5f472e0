//! A perf.data file or stream as the parser sees it: checked first, so that a damaged or
//! hostile input costs bounded memory and time, never a panic, and yields what it holds
//! before the damage.
//!
//! The parser (`linux-perf-data`) trusts the sizes it reads: a section or a count that lies
//! becomes an allocation of that size, a compressed record an allocation of whatever it
//! decompresses to, a record cut short ends the whole read with the records of its round
//! (perf writes one per buffer flush) lost, and a round is held whole however long it runs.
//! So, before the parser reads a byte:
//!
//! * **A file** (read by seeking, `perf record -o FILE`) is checked by [`check_file`]: the
//!   header's sizes (attribute size 64..=4096 bytes, at most [`MAX_ATTRS`] attributes,
//!   every section inside the file), the id lists of the old `event_types` section and of a
//!   simpleperf file's attributes (inside the file, [`MAX_ID_BYTES`] in all), then the data
//!   section's record framing (each record at least its 8-byte header and inside the
//!   section; each compressed record decompressed and its records framed, at most
//!   [`MAX_DECOMPRESSED_RECORD`] bytes), then the feature sections (inside the file; each
//!   at most [`MAX_FEATURE_SECTION`], all at most [`MAX_FEATURE_BYTES`], the tracing data
//!   [`MAX_TRACING_DATA`]: the parser reads them whole; `EVENT_DESC` and `CMDLINE` walked,
//!   their counts checked against their bytes). The parser then reads a [`FileView`]: the
//!   file with a corrected header whose data section ends after the last whole record, a
//!   synthetic round end wherever a round would hold more than [`MAX_ROUND_BYTES`], and
//!   whose feature list holds only the sections that passed (their table rewritten right
//!   after the kept data). Everything wrong is a [`Damage`] naming its byte offset.
//! * **A stream** (`perf record -o -`, read from standard input or a FIFO) passes through a
//!   [`PipeFilter`]: it checks each record's framing (compressed records too) as it goes,
//!   puts the same synthetic round ends in (the header records count: the parser holds the
//!   attributes it reads before the first round end, so at most [`MAX_ROUND_BYTES`] of
//!   them; later ones are records it counts as skipped), and ends the stream cleanly after
//!   the last whole record, takes out the tracing data record (whose data follows the
//!   record, outside its size, which the parser does not know) and the AUXTRACE records
//!   with their data (hardware trace, not converted: counted), and checks `HEADER_FEATURE`
//!   records as the file's feature sections are checked.
//!
//! Only little-endian recordings are read (every machine with LBR is): a big-endian one is
//! refused by name.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::io::{self, BufRead, Read, Seek, SeekFrom};
use std::rc::Rc;

use super::rounds::{Rounds, FINISHED_ROUND};
pub use super::rounds::{MAX_DECOMPRESSED_RECORD, MAX_ROUND_BYTES, RECORD_OVERHEAD};

/// Bytes of the file header perf writes (`struct perf_file_header`).
pub const FILE_HEADER_LEN: u64 = 104;
/// Bytes of the stream header (`struct perf_pipe_file_header`).
pub const PIPE_HEADER_LEN: u64 = 16;
/// The smallest `perf_event_attr` (`PERF_ATTR_SIZE_VER0`).
pub const MIN_ATTR_SIZE: u64 = 64;
/// The largest attribute accepted (perf's is 136 bytes in 2025).
pub const MAX_ATTR_SIZE: u64 = 4096;
/// Attributes (events) accepted at most.
pub const MAX_ATTRS: u64 = 1 << 16;
/// Tracing data accepted at most, in a file's feature section or a stream's record (its
/// tracepoint formats, kallsyms, printk formats: 20 KiB to a few MiB).
pub const MAX_TRACING_DATA: u64 = 64 << 20;
/// Bytes of a record header.
const RECORD_HEADER: u64 = 8;
/// The magic of a little-endian perf.data.
pub const MAGIC: &[u8; 8] = b"PERFILE2";
/// The magic of a big-endian perf.data.
const MAGIC_BIG_ENDIAN: &[u8; 8] = b"2ELIFREP";

/// `PERF_RECORD_AUXTRACE`: a record followed by `size` bytes of hardware trace.
pub const RECORD_AUXTRACE: u32 = 71;
/// `PERF_RECORD_HEADER_TRACING_DATA`: a record followed by the tracing data.
pub const RECORD_HEADER_TRACING_DATA: u32 = 66;
/// `PERF_RECORD_HEADER_FEATURE`: a feature section in a stream.
const RECORD_HEADER_FEATURE: u32 = 80;

/// `HEADER_TRACING_DATA`.
const FEATURE_TRACING_DATA: u32 = 1;
/// `HEADER_CMDLINE`.
const FEATURE_CMDLINE: u32 = 11;
/// `HEADER_SIMPLEPERF_META_INFO` (a file of Android's simpleperf).
const FEATURE_SIMPLEPERF_META_INFO: u32 = 129;
/// `HEADER_EVENT_DESC`.
const FEATURE_EVENT_DESC: u32 = 12;

/// The name of feature bit `bit` (perf's `HEADER_*`).
pub fn feature_name(bit: u32) -> String {
    const NAMES: [&str; 32] = [
        "RESERVED",
        "TRACING_DATA",
        "BUILD_ID",
        "HOSTNAME",
        "OSRELEASE",
        "VERSION",
        "ARCH",
        "NRCPUS",
        "CPUDESC",
        "CPUID",
        "TOTAL_MEM",
        "CMDLINE",
        "EVENT_DESC",
        "CPU_TOPOLOGY",
        "NUMA_TOPOLOGY",
        "BRANCH_STACK",
        "PMU_MAPPINGS",
        "GROUP_DESC",
        "AUXTRACE",
        "STAT",
        "CACHE",
        "SAMPLE_TIME",
        "MEM_TOPOLOGY",
        "CLOCKID",
        "DIR_FORMAT",
        "BPF_PROG_INFO",
        "BPF_BTF",
        "COMPRESSED",
        "CPU_PMU_CAPS",
        "CLOCK_DATA",
        "HYBRID_TOPOLOGY",
        "PMU_CAPS",
    ];
    NAMES
        .get(bit as usize)
        .map_or_else(|| format!("feature {bit}"), |n| format!("HEADER_{n}"))
}

/// Something wrong with the input, at a byte offset of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// Where (bytes from the start of the file or stream).
    pub offset: u64,
    /// What is wrong, and what it costs.
    pub what: String,
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "byte {}: {}", self.offset, self.what)
    }
}

impl Damage {
    fn at(offset: u64, what: impl Into<String>) -> Self {
        Self {
            offset,
            what: what.into(),
        }
    }
}

/// What kind of perf.data the first 16 bytes say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A file with sections (read by seeking).
    File,
    /// A stream (`perf record -o -`).
    Pipe,
}

/// The kind of a perf.data from its first 16 bytes (magic and header size); a damage when it
/// is not a perf.data fxtrace reads.
pub fn kind_of(first: &[u8]) -> Result<Kind, Damage> {
    if first.len() < PIPE_HEADER_LEN as usize {
        return Err(Damage::at(
            first.len() as u64,
            format!(
                "not a perf.data file: {} bytes, shorter than a perf header",
                first.len()
            ),
        ));
    }
    match &first[..8] {
        m if m == MAGIC => {}
        m if m == MAGIC_BIG_ENDIAN => {
            return Err(Damage::at(
                0,
                "a big-endian perf.data (recorded on a big-endian machine): fxtrace reads only \
                 little-endian recordings",
            ))
        }
        b"PERFFILE" => {
            return Err(Damage::at(
                0,
                "a perf.data of format version 1 (perf before 2010): record it again with a \
                 current perf",
            ))
        }
        _ => {
            return Err(Damage::at(
                0,
                "not a perf.data file (no PERFILE2 magic)".to_string(),
            ))
        }
    }
    let size = u64_at(first, 8);
    if size == PIPE_HEADER_LEN {
        Ok(Kind::Pipe)
    } else if size >= FILE_HEADER_LEN {
        Ok(Kind::File)
    } else {
        Err(Damage::at(
            8,
            format!("header size {size}: neither a stream's (16) nor a file's (104 or more)"),
        ))
    }
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(b)
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(b)
}

/// A section of the file: offset and size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Section {
    offset: u64,
    size: u64,
}

impl Section {
    fn read(bytes: &[u8], at: usize) -> Self {
        Self {
            offset: u64_at(bytes, at),
            size: u64_at(bytes, at + 8),
        }
    }

    fn end(&self) -> Option<u64> {
        self.offset.checked_add(self.size)
    }

    /// Whether it lies inside `len` bytes.
    fn inside(&self, len: u64) -> bool {
        self.end().is_some_and(|end| end <= len)
    }

    /// Whether the two share a byte.
    fn overlaps(&self, other: Section) -> bool {
        let end = |s: &Section| s.offset.saturating_add(s.size);
        self.offset < end(&other) && other.offset < end(self)
    }

    fn describe(&self) -> String {
        format!("offset {}, {} bytes", self.offset, self.size)
    }
}

/// Reads exactly `buf.len()` bytes at `offset`.
fn read_at<R: Read + Seek>(r: &mut R, offset: u64, buf: &mut [u8]) -> io::Result<()> {
    r.seek(SeekFrom::Start(offset))?;
    r.read_exact(buf)
}

/// What [`check_file`] found: where the records are, which feature sections can be read, and
/// everything wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileCheck {
    /// The file's size.
    pub file_len: u64,
    /// Where the data section starts.
    pub data_offset: u64,
    /// Bytes of whole, well-framed records from there.
    pub data_len: u64,
    /// Records framed in them.
    pub records: u64,
    /// Where a synthetic round end goes before the record there (runs of more than
    /// [`MAX_ROUND_BYTES`] without one).
    pub round_ends: Vec<u64>,
    /// Feature sections kept: (bit, offset, size), by bit.
    features: Vec<(u32, Section)>,
    /// The header bytes as read (patched for the view).
    header: Vec<u8>,
    /// Everything wrong, in file order of discovery.
    pub damage: Vec<Damage>,
}

/// Checks a perf.data file (see the module docs). `Err`: the file cannot be read at all (a
/// header that lies about where the attributes are, an I/O error); else what can be read, and
/// the damage found.
pub fn check_file<R: BufRead + Seek>(r: &mut R, file_len: u64) -> Result<FileCheck, Damage> {
    if file_len < FILE_HEADER_LEN {
        return Err(Damage::at(
            file_len,
            format!("the file ends inside the {FILE_HEADER_LEN}-byte perf header"),
        ));
    }
    let mut header = vec![0u8; FILE_HEADER_LEN as usize];
    read_at(r, 0, &mut header).map_err(|e| Damage::at(0, format!("cannot read: {e}")))?;
    let sections = check_header(&header, file_len)?;
    let event_types = (sections.event_types, 56, "event_types");
    check_id_lists(r, event_types, sections.attr_size + 16, file_len)?;
    if has_bit(&header, FEATURE_SIMPLEPERF_META_INFO) {
        // A simpleperf file: its attribute entries end with their id section.
        let attrs = (sections.attrs, 24, "attribute");
        check_id_lists(r, attrs, sections.attr_size, file_len)?;
    }
    let data = sections.data;
    let mut damage = Vec::new();
    let data_end = match data.end().filter(|&end| end <= file_len) {
        Some(end) => end,
        None => {
            damage.push(Damage::at(
                file_len,
                format!(
                    "the file ends inside the data section ({}): it was cut short (or the header \
                     lies); its feature sections (build-ids, host, tracepoint formats) are lost",
                    data.describe()
                ),
            ));
            file_len
        }
    };
    let (data_len, records, round_ends) = check_framing(r, data.offset, data_end, &mut damage)?;
    let mut features = Vec::new();
    if data_end == data.end().unwrap_or(u64::MAX) {
        features = check_features(r, &header, data_end, file_len, &mut damage)?;
    }
    // The kept feature table goes right after the kept records: no kept section may overlap
    // it, nor the header.
    let table = Section {
        offset: data.offset + data_len,
        size: 16 * features.len() as u64,
    };
    let header_section = Section {
        offset: 0,
        size: sections.header_size,
    };
    features.retain(|&(bit, s)| {
        let keep = s.size == 0 || !(s.overlaps(table) || s.overlaps(header_section));
        if !keep {
            damage.push(Damage::at(
                s.offset,
                format!(
                    "feature section {} ({}) overlaps the header or the data: not read",
                    feature_name(bit),
                    s.describe()
                ),
            ));
        }
        keep
    });
    Ok(FileCheck {
        file_len,
        data_offset: data.offset,
        data_len,
        records,
        round_ends,
        features,
        header,
        damage,
    })
}

/// The sections of a file header that checks out.
struct HeaderSections {
    header_size: u64,
    attr_size: u64,
    attrs: Section,
    data: Section,
    event_types: Section,
}

/// Checks the header's own fields against the file: its size, the attribute size and section
/// (at most [`MAX_ATTRS`] attributes), where the data section starts.
fn check_header(header: &[u8], file_len: u64) -> Result<HeaderSections, Damage> {
    kind_of(header)?;
    let header_size = u64_at(header, 8);
    let attr_size = u64_at(header, 16);
    let attrs = Section::read(header, 24);
    let data = Section::read(header, 40);
    if header_size > file_len {
        return Err(Damage::at(
            8,
            format!("the header claims {header_size} bytes, past the end of the file ({file_len} bytes)"),
        ));
    }
    if !(MIN_ATTR_SIZE..=MAX_ATTR_SIZE).contains(&attr_size) {
        return Err(Damage::at(
            16,
            format!("attribute size {attr_size}: a perf_event_attr takes {MIN_ATTR_SIZE} to {MAX_ATTR_SIZE} bytes"),
        ));
    }
    if !attrs.inside(file_len) {
        return Err(Damage::at(
            24,
            format!(
                "the attribute section ({}) runs past the end of the file ({file_len} bytes)",
                attrs.describe()
            ),
        ));
    }
    let attr_count = attrs.size / attr_size;
    if attr_count > MAX_ATTRS {
        return Err(Damage::at(
            32,
            format!(
                "the attribute section holds {attr_count} attributes: at most {MAX_ATTRS} are read"
            ),
        ));
    }
    if data.offset < header_size || data.offset > file_len {
        return Err(Damage::at(
            40,
            format!(
                "the data section ({}) starts outside the file ({file_len} bytes, header {header_size})",
                data.describe()
            ),
        ));
    }
    Ok(HeaderSections {
        header_size,
        attr_size,
        attrs,
        data,
        event_types: Section::read(header, 56),
    })
}

/// A section of (attr, section of ids) entries, whose id lists the parser reads whole: the
/// old `event_types` section (`header_at` 56: its entries the attribute size and 16 bytes
/// more), or a simpleperf file's attribute section (`header_at` 24: the id section in the
/// attribute size's last 16 bytes). Each id list inside the file, all at most
/// [`MAX_ID_BYTES`].
fn check_id_lists<R: Read + Seek>(
    r: &mut R,
    (section, header_at, what): (Section, u64, &str),
    entry: u64,
    file_len: u64,
) -> Result<(), Damage> {
    if section.size == 0 {
        return Ok(());
    }
    if !section.inside(file_len) {
        return Err(Damage::at(
            header_at,
            format!(
                "the {what} section ({}) runs past the end of the file ({file_len} bytes)",
                section.describe()
            ),
        ));
    }
    let count = section.size / entry;
    if count > MAX_ATTRS {
        return Err(Damage::at(
            header_at + 8,
            format!("the {what} section holds {count} events: at most {MAX_ATTRS} are read"),
        ));
    }
    let mut total = 0u64;
    for i in 0..count {
        let at = section.offset + (i + 1) * entry - 16;
        let mut bytes = [0u8; 16];
        read_at(r, at, &mut bytes).map_err(|e| Damage::at(at, format!("cannot read: {e}")))?;
        let ids = Section::read(&bytes, 0);
        total = total.saturating_add(ids.size);
        let problem = if !ids.inside(file_len) {
            format!("lie past the end of the file ({file_len} bytes)")
        } else if total > MAX_ID_BYTES {
            format!("take the events' ids past {MAX_ID_BYTES} bytes")
        } else {
            continue;
        };
        return Err(Damage::at(
            at,
            format!("the ids of event {i} ({}) {problem}", ids.describe()),
        ));
    }
    Ok(())
}

/// The events' id lists read at most, together (8 bytes an event and CPU or thread).
pub const MAX_ID_BYTES: u64 = 16 << 20;

/// Walks the record headers from `start` to `end`: the bytes of whole records, their count,
/// and where round ends must go ([`Rounds`], which reads the compressed records' bodies);
/// the first bad record is a damage.
fn check_framing<R: BufRead + Seek>(
    r: &mut R,
    start: u64,
    end: u64,
    damage: &mut Vec<Damage>,
) -> Result<(u64, u64, Vec<u64>), Damage> {
    let io = |at: u64| move |e: io::Error| Damage::at(at, format!("cannot read: {e}"));
    r.seek(SeekFrom::Start(start)).map_err(io(start))?;
    let mut at = start;
    let mut records = 0u64;
    let mut round_ends = Vec::new();
    let mut rounds = Rounds::default();
    let mut header = [0u8; RECORD_HEADER as usize];
    let mut body = Vec::new();
    while at < end {
        if end - at < RECORD_HEADER {
            damage.push(Damage::at(
                at,
                format!(
                    "a record header cut short ({} of 8 bytes before the end of the data)",
                    end - at
                ),
            ));
            break;
        }
        r.read_exact(&mut header).map_err(io(at))?;
        let kind = u32_at(&header, 0);
        let size = u64::from(u16::from_le_bytes([header[6], header[7]]));
        if size < RECORD_HEADER {
            damage.push(Damage::at(
                at,
                format!("record of type {kind} has size {size}, less than its 8-byte header: the data after it is not read"),
            ));
            break;
        }
        let mut next = at + size;
        let mut read = RECORD_HEADER;
        if kind == RECORD_AUXTRACE && size >= RECORD_HEADER + 8 {
            let mut aux = [0u8; 8];
            r.read_exact(&mut aux).map_err(io(at))?;
            next = next.saturating_add(u64::from_le_bytes(aux));
            read += 8;
        }
        if next > end {
            damage.push(Damage::at(
                at,
                format!(
                    "record of type {kind} ({} bytes) runs past the end of the data at byte {end}: \
                     it and anything after it are not read",
                    next - at
                ),
            ));
            break;
        }
        body.clear();
        if Rounds::reads_body(kind) {
            body.resize((size - read) as usize, 0);
            r.read_exact(&mut body).map_err(io(at))?;
            read = size;
        }
        match rounds.record(kind, next - at, &body) {
            Ok(true) => round_ends.push(at),
            Ok(false) => {}
            Err(problem) => {
                damage.push(Damage::at(
                    at,
                    format!("{problem}: it and anything after it are not read"),
                ));
                break;
            }
        }
        skip(r, next - at - read).map_err(io(at))?;
        at = next;
        records += 1;
    }
    if let Some(n) = rounds.unfinished() {
        damage.push(Damage::at(
            at,
            format!("the compressed records end inside a record: its first {n} bytes are not read"),
        ));
    }
    Ok((at - start, records, round_ends))
}

/// Skips `n` bytes: through the reader's buffer (no copy; the file read in order, once), or
/// by a seek when more than a MiB lies beyond it (hardware trace data).
fn skip<R: BufRead + Seek>(r: &mut R, mut n: u64) -> io::Result<()> {
    while n > 0 {
        let buffered = r.fill_buf()?.len() as u64;
        if buffered == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        if n > buffered + (1 << 20) {
            // The seek is relative to the logical position: the buffer is accounted for.
            r.seek(SeekFrom::Current(n as i64))?;
            return Ok(());
        }
        let here = n.min(buffered);
        r.consume(here as usize);
        n -= here;
    }
    Ok(())
}

/// The feature sections named by the header's bitmap whose table (at `table_at`) and contents
/// can be read; the others are damage.
fn check_features<R: Read + Seek>(
    r: &mut R,
    header: &[u8],
    table_at: u64,
    file_len: u64,
    damage: &mut Vec<Damage>,
) -> Result<Vec<(u32, Section)>, Damage> {
    let bits: Vec<u32> = (0..256u32).filter(|&bit| has_bit(header, bit)).collect();
    let table = Section {
        offset: table_at,
        size: 16 * bits.len() as u64,
    };
    if !table.inside(file_len) {
        damage.push(Damage::at(
            table_at,
            format!(
                "the table of {} feature sections runs past the end of the file ({file_len} bytes): \
                 no feature section (build-ids, host, tracepoint formats) is read",
                bits.len()
            ),
        ));
        return Ok(Vec::new());
    }
    let mut entries = vec![0u8; table.size as usize];
    read_at(r, table_at, &mut entries)
        .map_err(|e| Damage::at(table_at, format!("cannot read: {e}")))?;
    let mut kept = Vec::new();
    // The parser reads every kept section whole: what they take together is bounded.
    let mut kept_bytes = 0u64;
    for (i, &bit) in bits.iter().enumerate() {
        let s = Section::read(&entries, 16 * i);
        let at = table_at + 16 * i as u64;
        let limit = if bit == FEATURE_TRACING_DATA {
            MAX_TRACING_DATA
        } else {
            MAX_FEATURE_SECTION
        };
        let problem = if !s.inside(file_len) {
            Some(format!("runs past the end of the file ({file_len} bytes)"))
        } else if s.size > limit {
            Some(format!("is larger than {limit} bytes"))
        } else if bit != FEATURE_TRACING_DATA && kept_bytes + s.size > MAX_FEATURE_BYTES {
            Some(format!(
                "would take the feature sections read past {MAX_FEATURE_BYTES} bytes"
            ))
        } else if bit == FEATURE_EVENT_DESC || bit == FEATURE_CMDLINE {
            // Small sections (a few KiB): read whole and walked.
            let mut bytes = vec![0u8; s.size as usize];
            read_at(r, s.offset, &mut bytes)
                .map_err(|e| Damage::at(s.offset, format!("cannot read: {e}")))?;
            check_feature(bit, &bytes).err()
        } else {
            None
        };
        match problem {
            Some(p) => damage.push(Damage::at(
                at,
                format!(
                    "feature section {} ({}) {p}: not read",
                    feature_name(bit),
                    s.describe()
                ),
            )),
            None => {
                if bit != FEATURE_TRACING_DATA {
                    kept_bytes += s.size;
                }
                kept.push((bit, s));
            }
        }
    }
    Ok(kept)
}

/// Whether the file header's feature bitmap has `bit`.
fn has_bit(header: &[u8], bit: u32) -> bool {
    u64_at(header, 72 + 8 * (bit as usize / 64)) >> (bit % 64) & 1 != 0
}

/// The largest feature section read but the tracing data.
pub const MAX_FEATURE_SECTION: u64 = 16 << 20;

/// The feature sections read but the tracing data, at most together (a few hundred KiB in
/// a system-wide recording: build-ids, topology, BPF programs).
pub const MAX_FEATURE_BYTES: u64 = 32 << 20;

/// Checks a feature section's contents where the parser would trust a count: `EVENT_DESC`
/// (events, ids, names) and `CMDLINE` (strings). Other sections pass.
pub fn check_feature(bit: u32, bytes: &[u8]) -> Result<(), String> {
    let mut at = 0usize;
    let mut take = |n: u64, what: &str| -> Result<usize, String> {
        let left = bytes.len() - at;
        let n = usize::try_from(n)
            .ok()
            .filter(|&n| n <= left)
            .ok_or_else(|| format!("claims {n} bytes of {what} at byte {at}, {left} left"))?;
        let start = at;
        at += n;
        Ok(start)
    };
    match bit {
        FEATURE_EVENT_DESC => {
            let nr = u64::from(u32_at(bytes, take(4, "event count")?));
            let attr_size = u64::from(u32_at(bytes, take(4, "attribute size")?));
            if !(MIN_ATTR_SIZE..=MAX_ATTR_SIZE).contains(&attr_size) {
                return Err(format!("has attribute size {attr_size}"));
            }
            if nr > MAX_ATTRS {
                return Err(format!("claims {nr} events (at most {MAX_ATTRS} are read)"));
            }
            for _ in 0..nr {
                take(attr_size, "attribute")?;
                let ids = u64::from(u32_at(bytes, take(4, "id count")?));
                let name = u64::from(u32_at(bytes, take(4, "name length")?));
                take(name, "event name")?;
                take(ids.saturating_mul(8), "event ids")?;
            }
            Ok(())
        }
        FEATURE_CMDLINE => {
            let nr = u64::from(u32_at(bytes, take(4, "argument count")?));
            for _ in 0..nr {
                let len = u64::from(u32_at(bytes, take(4, "argument length")?));
                take(len, "argument")?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

impl FileCheck {
    /// The file as the parser should read it (see the module docs): `file` with the header's
    /// data size and feature list corrected, the synthetic round ends inserted, and the kept
    /// features' table after the records.
    pub fn view<R: Read + Seek>(&self, file: R) -> FileView<R> {
        let inserted = 8 * self.round_ends.len() as u64;
        let mut header = self.header.clone();
        header[48..56].copy_from_slice(&(self.data_len + inserted).to_le_bytes());
        let mut bitmap = [0u64; 4];
        let mut table = Vec::with_capacity(16 * self.features.len());
        for &(bit, s) in &self.features {
            bitmap[bit as usize / 64] |= 1 << (bit % 64);
            // Sections after the data move with it; one before it (never written by perf)
            // stays where it is.
            let offset = if s.offset >= self.data_offset {
                s.offset + inserted
            } else {
                s.offset
            };
            table.extend_from_slice(&offset.to_le_bytes());
            table.extend_from_slice(&s.size.to_le_bytes());
        }
        for (i, word) in bitmap.iter().enumerate() {
            header[72 + 8 * i..80 + 8 * i].copy_from_slice(&word.to_le_bytes());
        }
        let header_len = header.len() as u64;
        let mut segments = vec![Segment {
            start: 0,
            source: Source::Bytes(header),
        }];
        let from_file = |segments: &mut Vec<Segment>, start: u64, delta: u64| {
            segments.push(Segment {
                start,
                source: Source::File { delta },
            })
        };
        from_file(&mut segments, header_len, 0);
        let mut delta = 0;
        for &at in &self.round_ends {
            segments.push(Segment {
                start: at + delta,
                source: Source::Bytes(FINISHED_ROUND.to_vec()),
            });
            delta += 8;
            from_file(&mut segments, at + delta, delta);
        }
        let table_at = self.data_offset + self.data_len + delta;
        let table_len = table.len() as u64;
        segments.push(Segment {
            start: table_at,
            source: Source::Bytes(table),
        });
        from_file(&mut segments, table_at + table_len, delta);
        FileView {
            inner: file,
            inner_pos: None,
            pos: 0,
            len: (self.file_len + delta).max(table_at + table_len),
            file_len: self.file_len,
            segments,
            position: Rc::new(Cell::new(0)),
        }
    }

    /// Whether feature `bit` can be read.
    pub fn has_feature(&self, bit: u32) -> bool {
        self.features.iter().any(|&(b, _)| b == bit)
    }
}

/// Where a run of the view's bytes comes from.
#[derive(Debug)]
enum Source {
    /// Bytes of its own (corrected header, inserted round ends, feature table).
    Bytes(Vec<u8>),
    /// The file, `delta` bytes earlier than in the view.
    File { delta: u64 },
}

/// A run of the view, from `start` to the next segment's start.
#[derive(Debug)]
struct Segment {
    start: u64,
    source: Source,
}

/// A file with a corrected header and feature table over its bytes, and synthetic round ends
/// inserted (see [`FileCheck::view`]): what the parser reads.
#[derive(Debug)]
pub struct FileView<R> {
    inner: R,
    /// Where `inner` stands, when known.
    inner_pos: Option<u64>,
    pos: u64,
    len: u64,
    file_len: u64,
    /// By `start`, the first at 0.
    segments: Vec<Segment>,
    /// Where the last read started (shared with [`Self::position`]'s holders).
    position: Rc<Cell<u64>>,
}

impl<R> FileView<R> {
    /// Where the parser's last read started, as it reads: the offset an error names.
    pub fn position(&self) -> Rc<Cell<u64>> {
        self.position.clone()
    }
}

impl<R: Read + Seek> Read for FileView<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.position.set(self.pos);
        if self.pos >= self.len || buf.is_empty() {
            return Ok(0);
        }
        let i = self.segments.partition_point(|s| s.start <= self.pos) - 1;
        let end = self.segments.get(i + 1).map_or(self.len, |next| next.start);
        let room = (end - self.pos).min(buf.len() as u64) as usize;
        let segment = &self.segments[i];
        let n = match &segment.source {
            Source::Bytes(bytes) => {
                let at = (self.pos - segment.start) as usize;
                let n = room.min(bytes.len().saturating_sub(at));
                buf[..n].copy_from_slice(&bytes[at..at + n]);
                n
            }
            Source::File { delta } => {
                let real = self.pos - delta;
                let room = room.min(self.file_len.saturating_sub(real) as usize);
                if room == 0 {
                    return Ok(0);
                }
                if self.inner_pos != Some(real) {
                    self.inner.seek(SeekFrom::Start(real))?;
                }
                let n = match self.inner.read(&mut buf[..room]) {
                    Ok(n) => n,
                    Err(e) => {
                        self.inner_pos = None;
                        return Err(e);
                    }
                };
                self.inner_pos = Some(real + n as u64);
                n
            }
        };
        self.pos += n as u64;
        Ok(n)
    }
}

impl<R: Read + Seek> Seek for FileView<R> {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let target = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => self.len.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = target.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "seek before the start of the file",
            )
        })?;
        Ok(self.pos)
    }
}

// === impl PipeFilter ===

/// Reads up to `buf.len()` bytes; fewer only at the end of the stream.
fn fill(inner: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match inner.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// What a [`PipeFilter`] took out of the stream and found wrong.
#[derive(Debug, Default)]
pub struct PipeState {
    /// The tracing data (tracepoint formats), when the stream had it.
    pub tracing_data: Option<Vec<u8>>,
    /// Where the stream stopped being readable, if it did.
    pub damage: Vec<Damage>,
    /// AUXTRACE records taken out (hardware trace data is not converted).
    pub auxtrace_records: u64,
    /// Bytes passed through so far (the stream's offset of the next record).
    pub offset: u64,
}

/// A perf.data stream checked record by record on its way to the parser (see the module docs).
#[derive(Debug)]
pub struct PipeFilter<R> {
    inner: R,
    /// Bytes ready for the parser, from `out_at`.
    out: Vec<u8>,
    out_at: usize,
    header_done: bool,
    ended: bool,
    /// Where round ends go; the compressed records checked.
    rounds: Rounds,
    state: Rc<RefCell<PipeState>>,
}

impl<R: Read> PipeFilter<R> {
    /// A filter over `inner` (positioned at the stream's first byte); `state` is shared with
    /// the caller, who reads it once the parser is done.
    pub fn new(inner: R, state: Rc<RefCell<PipeState>>) -> Self {
        Self {
            inner,
            out: Vec::new(),
            out_at: 0,
            header_done: false,
            ended: false,
            rounds: Rounds::default(),
            state,
        }
    }

    fn end(&mut self, damage: Option<Damage>) {
        self.ended = true;
        if let Some(d) = damage {
            self.state.borrow_mut().damage.push(d);
        }
    }

    /// Puts the next bytes for the parser into `out` (nothing at the end).
    fn next_record(&mut self) -> io::Result<()> {
        self.out.clear();
        self.out_at = 0;
        if !self.header_done {
            return self.stream_header();
        }
        loop {
            let offset = self.state.borrow().offset;
            let Some((kind, size)) = self.read_record(offset)? else {
                return Ok(());
            };
            let mut passed = size;
            let keep = match kind {
                RECORD_HEADER_TRACING_DATA | RECORD_AUXTRACE => {
                    match self.take_trailing(kind, offset)? {
                        Some(read) => passed += read,
                        None => return Ok(()),
                    }
                    false
                }
                RECORD_HEADER_FEATURE => self.feature_readable(offset),
                _ => true,
            };
            self.state.borrow_mut().offset += passed;
            if keep {
                self.count_in_round(kind, offset);
                return Ok(());
            }
            self.out.clear();
        }
    }

    /// Counts the record in `out` into its round: a round end put before it when one is due;
    /// the stream ended before it when the parser must not read it.
    fn count_in_round(&mut self, kind: u32, offset: u64) {
        match self.rounds.record(
            kind,
            self.out.len() as u64,
            &self.out[RECORD_HEADER as usize..],
        ) {
            Ok(false) => {}
            Ok(true) => {
                self.out.splice(0..0, FINISHED_ROUND);
            }
            Err(problem) => {
                self.out.clear();
                self.end(Some(Damage::at(
                    offset,
                    format!("{problem}: the stream after it is not read"),
                )));
            }
        }
    }

    /// The stream's 16-byte header, passed on when it is a perf.data stream's.
    fn stream_header(&mut self) -> io::Result<()> {
        self.header_done = true;
        let mut header = [0u8; PIPE_HEADER_LEN as usize];
        let n = fill(&mut self.inner, &mut header)?;
        if let Err(d) = kind_of(&header[..n]) {
            self.end(Some(d));
            return Ok(());
        }
        self.out.extend_from_slice(&header);
        self.state.borrow_mut().offset += PIPE_HEADER_LEN;
        Ok(())
    }

    /// Reads the record at `offset` whole into `out`: its type and size, or `None` when the
    /// stream ended (cleanly, or at damage).
    fn read_record(&mut self, offset: u64) -> io::Result<Option<(u32, u64)>> {
        let mut header = [0u8; RECORD_HEADER as usize];
        let n = fill(&mut self.inner, &mut header)?;
        if n == 0 {
            let unfinished = self.rounds.unfinished().map(|n| {
                Damage::at(
                    offset,
                    format!("the compressed records end inside a record: its first {n} bytes are not read"),
                )
            });
            self.end(unfinished);
            return Ok(None);
        }
        if n < header.len() {
            self.end(Some(Damage::at(
                offset,
                format!("the stream ends inside a record header ({n} of 8 bytes)"),
            )));
            return Ok(None);
        }
        let kind = u32_at(&header, 0);
        let size = usize::from(u16::from_le_bytes([header[6], header[7]]));
        if (size as u64) < RECORD_HEADER {
            self.end(Some(Damage::at(
                offset,
                format!("record of type {kind} has size {size}, less than its 8-byte header: the stream after it is not read"),
            )));
            return Ok(None);
        }
        self.out.extend_from_slice(&header);
        self.out.resize(size, 0);
        let n = fill(&mut self.inner, &mut self.out[RECORD_HEADER as usize..])?;
        if n < size - RECORD_HEADER as usize {
            self.out.clear();
            self.end(Some(Damage::at(
                offset,
                format!(
                    "record of type {kind} ({size} bytes): the stream ends after {} of them",
                    n + RECORD_HEADER as usize
                ),
            )));
            return Ok(None);
        }
        Ok(Some((kind, size as u64)))
    }

    /// The data that follows a tracing data or AUXTRACE record (in `out`), outside its size:
    /// the tracing data kept, hardware trace discarded and counted. The bytes read, or `None`
    /// when the stream ended.
    fn take_trailing(&mut self, kind: u32, offset: u64) -> io::Result<Option<u64>> {
        let tracing = kind == RECORD_HEADER_TRACING_DATA;
        let trailing = match self.out.get(8..16) {
            Some(_) if tracing => u64::from(u32_at(&self.out, 8)).next_multiple_of(8),
            Some(_) => u64_at(&self.out, 8),
            None => 0,
        };
        self.out.clear();
        if tracing && trailing > MAX_TRACING_DATA {
            self.end(Some(Damage::at(
                offset,
                format!("tracing data of {trailing} bytes (at most {MAX_TRACING_DATA} are read)"),
            )));
            return Ok(None);
        }
        let mut data = (&mut self.inner).take(trailing);
        let read = if tracing {
            let mut bytes = Vec::new();
            let read = data.read_to_end(&mut bytes)? as u64;
            self.state.borrow_mut().tracing_data = Some(bytes);
            read
        } else {
            self.state.borrow_mut().auxtrace_records += 1;
            io::copy(&mut data, &mut io::sink())?
        };
        if read < trailing {
            self.end(Some(Damage::at(
                offset,
                format!("record of type {kind}: the stream ends after {read} of its {trailing} bytes of data"),
            )));
            return Ok(None);
        }
        Ok(Some(read))
    }

    /// Whether the feature record in `out` can be given to the parser (else a damage).
    fn feature_readable(&mut self, offset: u64) -> bool {
        let Some(bit) = self.out.get(8..16).map(|_| u64_at(&self.out, 8)) else {
            return true;
        };
        let Ok(bit) = u32::try_from(bit) else {
            return true;
        };
        match check_feature(bit, &self.out[16..]) {
            Ok(()) => true,
            Err(problem) => {
                self.state.borrow_mut().damage.push(Damage::at(
                    offset,
                    format!("feature record {} {problem}: not read", feature_name(bit)),
                ));
                false
            }
        }
    }
}

impl<R: Read> Read for PipeFilter<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.out_at == self.out.len() {
            if self.ended {
                return Ok(0);
            }
            self.next_record()?;
        }
        let n = buf.len().min(self.out.len() - self.out_at);
        buf[..n].copy_from_slice(&self.out[self.out_at..self.out_at + n]);
        self.out_at += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    /// A minimal file: header, one 64-byte attribute (attr section), records, a HOSTNAME
    /// feature.
    fn file(records: &[Vec<u8>]) -> Vec<u8> {
        let data: Vec<u8> = records.concat();
        let attr_at = FILE_HEADER_LEN;
        let data_at = attr_at + 64;
        let data_end = data_at + data.len() as u64;
        let feature_at = data_end + 16;
        let mut f = Vec::new();
        f.extend_from_slice(MAGIC);
        for w in [
            FILE_HEADER_LEN,
            64,
            attr_at,
            64,
            data_at,
            data.len() as u64,
            0,
            0,
        ] {
            f.extend_from_slice(&w.to_le_bytes());
        }
        f.extend_from_slice(&(1u64 << 3).to_le_bytes());
        f.extend_from_slice(&[0; 24]);
        let mut attr = vec![0u8; 64];
        attr[4..8].copy_from_slice(&64u32.to_le_bytes());
        f.extend_from_slice(&attr);
        f.extend_from_slice(&data);
        f.extend_from_slice(&feature_at.to_le_bytes());
        f.extend_from_slice(&8u64.to_le_bytes());
        f.extend_from_slice(&4u32.to_le_bytes());
        f.extend_from_slice(b"box\0");
        f
    }

    fn record(kind: u32, size: u16) -> Vec<u8> {
        let mut r = kind.to_le_bytes().to_vec();
        r.extend_from_slice(&0u16.to_le_bytes());
        r.extend_from_slice(&size.to_le_bytes());
        r.resize(usize::from(size.max(8)), 0xaa);
        r
    }

    #[test]
    fn a_sound_file_is_read_as_it_is() {
        let f = file(&[record(9, 24), record(3, 16)]);
        let check = check_file(&mut Cursor::new(&f), f.len() as u64).unwrap();
        assert_eq!(check.damage, []);
        assert_eq!((check.records, check.data_len), (2, 40));
        assert!(check.has_feature(3));
        let mut viewed = Vec::new();
        check
            .view(Cursor::new(&f))
            .read_to_end(&mut viewed)
            .unwrap();
        assert_eq!(viewed, f, "nothing to correct");
    }

    #[test]
    fn a_bad_record_ends_the_data_before_it_and_keeps_the_features() {
        // A size below the header's, and one beyond the data (the record claims 65 535 bytes,
        // the data holds 24 after it).
        let mut huge = record(9, 16);
        huge[6..8].copy_from_slice(&u16::MAX.to_le_bytes());
        for bad in [record(9, 0), huge] {
            let f = file(&[record(9, 24), bad.clone(), record(3, 16)]);
            let check = check_file(&mut Cursor::new(&f), f.len() as u64).unwrap();
            assert_eq!((check.records, check.data_len), (1, 24));
            assert_eq!(check.damage.len(), 1, "{:?}", check.damage);
            assert_eq!(check.damage[0].offset, FILE_HEADER_LEN + 64 + 24);
            assert!(check.has_feature(3));
            // The view: data size 24, the feature table right after the first record.
            let mut view = check.view(Cursor::new(&f));
            let mut header = [0u8; 104];
            view.read_exact(&mut header).unwrap();
            assert_eq!(u64_at(&header, 48), 24);
            view.seek(SeekFrom::Start(FILE_HEADER_LEN + 64 + 24))
                .unwrap();
            let mut table = [0u8; 16];
            view.read_exact(&mut table).unwrap();
            assert_eq!(u64_at(&table, 8), 8, "the hostname section's size");
        }
    }

    #[test]
    fn lies_and_cuts_are_damage_never_a_panic() {
        let f = file(&[record(9, 24), record(3, 16)]);
        for cut in 0..f.len() {
            let _ = check_file(&mut Cursor::new(&f[..cut]), cut as u64);
        }
        let cut = f.len() - 30;
        let check = check_file(&mut Cursor::new(&f[..cut]), cut as u64).unwrap();
        assert_eq!(check.records, 1);
        assert!(check.damage.iter().any(|d| d.what.contains("cut short")));
        assert!(!check.has_feature(3));
        // Attributes far past the end; 2^32 attributes.
        for (at, value, says) in [
            (24, 1u64 << 40, "attribute section"),
            (32, (1u64 << 32) * 64, "attribute section"),
            (16, 0, "attribute size"),
            (48, u64::MAX, "data section"),
        ] {
            let mut lying = f.clone();
            lying[at..at + 8].copy_from_slice(&value.to_le_bytes());
            let message = match check_file(&mut Cursor::new(&lying), lying.len() as u64) {
                Err(d) => d.to_string(),
                Ok(c) => c.damage.iter().map(|d| d.to_string()).collect(),
            };
            assert!(message.contains(says), "{at}: {message}");
        }
    }

    #[test]
    fn event_desc_counts_are_checked_against_their_bytes() {
        let mut desc = Vec::new();
        desc.extend_from_slice(&u32::MAX.to_le_bytes());
        desc.extend_from_slice(&64u32.to_le_bytes());
        assert!(check_feature(FEATURE_EVENT_DESC, &desc).is_err());
        let mut one = 1u32.to_le_bytes().to_vec();
        one.extend_from_slice(&64u32.to_le_bytes());
        one.extend_from_slice(&[0; 64]);
        one.extend_from_slice(&u32::MAX.to_le_bytes()); // ids
        one.extend_from_slice(&0u32.to_le_bytes());
        assert!(check_feature(FEATURE_EVENT_DESC, &one)
            .unwrap_err()
            .contains("event ids"));
        let mut cmdline = 2u32.to_le_bytes().to_vec();
        cmdline.extend_from_slice(&4u32.to_le_bytes());
        cmdline.extend_from_slice(b"perf");
        assert!(check_feature(FEATURE_CMDLINE, &cmdline).is_err());
    }

    #[test]
    fn a_stream_ends_cleanly_before_damage_and_gives_its_tracing_data() {
        let mut s = MAGIC.to_vec();
        s.extend_from_slice(&16u64.to_le_bytes());
        s.extend(record(9, 24));
        let mut tracing = record(RECORD_HEADER_TRACING_DATA, 16);
        tracing[8..12].copy_from_slice(&5u32.to_le_bytes());
        s.extend(tracing);
        s.extend_from_slice(b"abcde\0\0\0");
        s.extend(record(3, 16));
        let whole = s.len();
        s.extend(record(9, 0));
        s.extend(record(3, 16));
        let state = Rc::new(RefCell::new(PipeState::default()));
        let mut passed = Vec::new();
        PipeFilter::new(Cursor::new(&s), state.clone())
            .read_to_end(&mut passed)
            .unwrap();
        let state = state.borrow();
        assert_eq!(state.tracing_data.as_deref(), Some(&b"abcde\0\0\0"[..]));
        assert_eq!(
            passed.len(),
            whole - 24,
            "everything but the tracing data record"
        );
        assert_eq!(state.damage.len(), 1);
        assert_eq!(state.damage[0].offset, whole as u64);
        // Cut anywhere: no panic, and only whole records pass.
        for cut in 0..s.len() {
            let state = Rc::new(RefCell::new(PipeState::default()));
            let mut out = Vec::new();
            PipeFilter::new(Cursor::new(&s[..cut]), state)
                .read_to_end(&mut out)
                .unwrap();
            assert!(out.len() <= cut);
        }
    }

    /// The stream of `records` through a filter: what it passed, and the damage found.
    fn filtered(records: &[Vec<u8>]) -> (Vec<u8>, Vec<Damage>) {
        let mut s = MAGIC.to_vec();
        s.extend_from_slice(&16u64.to_le_bytes());
        s.extend(records.concat());
        let state = Rc::new(RefCell::new(PipeState::default()));
        let mut passed = Vec::new();
        PipeFilter::new(Cursor::new(&s), state.clone())
            .read_to_end(&mut passed)
            .unwrap();
        let damage = state.borrow().damage.clone();
        (passed, damage)
    }

    /// The type and offset of each record passed (after the 16-byte header).
    fn kinds(passed: &[u8]) -> Vec<(u32, usize)> {
        let mut at = PIPE_HEADER_LEN as usize;
        let mut out = Vec::new();
        while at < passed.len() {
            out.push((u32_at(passed, at), at));
            at += usize::from(u16::from_le_bytes([passed[at + 6], passed[at + 7]]));
        }
        out
    }

    /// A stream with no round end of its own gets one before the parser would hold more than
    /// `MAX_ROUND_BYTES` of it, as a file does.
    #[test]
    fn a_stream_without_round_ends_gets_them() {
        let n = (MAX_ROUND_BYTES / 65_528) as usize + 2;
        let (passed, damage) = filtered(&vec![record(9, 65_528); n]);
        assert_eq!(damage, []);
        let kinds = kinds(&passed);
        let ends: Vec<usize> = kinds
            .iter()
            .filter(|(k, _)| *k == 68)
            .map(|&(_, at)| at)
            .collect();
        assert_eq!(ends.len(), 1, "one round end in {} records", n);
        assert!(ends[0] - PIPE_HEADER_LEN as usize <= MAX_ROUND_BYTES as usize);
        assert_eq!(kinds.len(), n + 1, "every record passed");
    }

    /// A compressed record that decompresses to more than `MAX_DECOMPRESSED_RECORD` ends the
    /// stream before it: the parser never holds what it decompresses to.
    #[test]
    fn a_stream_ends_before_a_zstd_bomb() {
        // A zstd frame (128 KiB window) of RLE blocks of 128 KiB: 4 bytes each.
        let blocks = (MAX_DECOMPRESSED_RECORD >> 17) as u32 + 1;
        let mut frame = 0xFD2F_B528u32.to_le_bytes().to_vec();
        frame.extend_from_slice(&[0x00, 7 << 3]);
        for i in 0..blocks {
            let header = u32::from(i + 1 == blocks) | 1 << 1 | (128 << 10) << 3;
            frame.extend_from_slice(&header.to_le_bytes()[..3]);
            frame.push(8);
        }
        let mut bomb = record(81, 8 + frame.len() as u16);
        bomb[8..].copy_from_slice(&frame);
        let (passed, damage) = filtered(&[record(9, 24), bomb, record(9, 24)]);
        assert_eq!(passed.len(), 16 + 24, "the record before the bomb");
        assert_eq!(damage.len(), 1);
        assert_eq!(damage[0].offset, 16 + 24);
        assert!(
            damage[0].what.contains("decompresses to more than"),
            "{}",
            damage[0]
        );
    }
}
