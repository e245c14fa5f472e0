//! The 32-byte file header that starts every XRay log (basic and FDR).
//!
//! Layout (spec "Header Section", little-endian):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 2 | version |
//! | 2 | 2 | type: 0 = basic ("naive") log, 1 = Flight Data Recorder log |
//! | 4 | 4 | bitfield: bit 0 `constant_tsc`, bit 1 `nonstop_tsc`, 30 bits reserved |
//! | 8 | 8 | cycle_frequency (Hz of the timestamp counter) |
//! | 16 | 8 | buffer_size: for FDR logs, the size of each thread buffer |
//! | 24 | 8 | reserved |
//!
//! compiler-rt calls bytes 16..32 `FreeForm`; FDR writers put the per-thread
//! buffer size (`ThreadBufferSize`) in its first 8 bytes, basic mode leaves it zero.

use super::bytes::{array_at, u16_at, u32_at, u64_at};
use super::error::{XrayError, XrayErrorKind};

/// Size of the file header in bytes.
pub const FILE_HEADER_SIZE: usize = 32;
/// Offset of the 16-bit version.
pub const VERSION_OFFSET: usize = 0;
/// Offset of the 16-bit log type.
pub const TYPE_OFFSET: usize = 2;
/// Offset of the 32-bit flag word.
pub const BITFIELD_OFFSET: usize = 4;
/// Offset of the 64-bit cycle frequency.
pub const CYCLE_FREQUENCY_OFFSET: usize = 8;
/// Offset of the 64-bit FDR thread buffer size (start of the 16 free-form bytes).
pub const BUFFER_SIZE_OFFSET: usize = 16;
/// Offset of the 16 free-form bytes.
pub const FREE_FORM_OFFSET: usize = 16;
/// Bit of the flag word: the TSC ticks at a constant rate.
pub const CONSTANT_TSC_BIT: u32 = 1 << 0;
/// Bit of the flag word: the TSC keeps counting in low-power states.
pub const NONSTOP_TSC_BIT: u32 = 1 << 1;
/// `type` of a basic-mode ("naive") log.
pub const LOG_TYPE_BASIC: u16 = 0;
/// `type` of a Flight Data Recorder log.
pub const LOG_TYPE_FDR: u16 = 1;
/// FDR log versions this reader decodes (1 = spec; 5 = what compiler-rt writes since LLVM 7).
pub const FDR_VERSIONS: std::ops::RangeInclusive<u16> = 1..=5;
/// Basic-mode log versions this reader decodes (3 = what compiler-rt writes).
pub const BASIC_VERSIONS: std::ops::RangeInclusive<u16> = 1..=3;

/// Which XRay logging mode wrote the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogType {
    /// Basic mode ("naive log"): fixed 32-byte records with absolute TSCs.
    Basic,
    /// Flight Data Recorder mode: per-thread buffers of 8-byte function and 16-byte metadata records.
    Fdr,
}

/// The decoded file header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileHeader {
    /// Format version (FDR: 1..=5, basic: 1..=3).
    pub version: u16,
    /// Which mode wrote the log.
    pub log_type: LogType,
    /// The TSC ticks at a constant rate despite frequency changes.
    pub constant_tsc: bool,
    /// The TSC keeps counting in low-power states.
    pub nonstop_tsc: bool,
    /// Ticks per second of the timestamp counter, as the writer determined it. compiler-rt
    /// writes 1e9 when it cannot determine the TSC frequency (and then usually timestamps
    /// in CLOCK_REALTIME nanoseconds instead of TSC ticks).
    pub cycle_frequency: u64,
    /// The 16 free-form bytes at offset 16.
    pub free_form: [u8; 16],
}

impl FileHeader {
    /// Decodes and validates the header at the start of `data`.
    pub fn parse(data: &[u8]) -> Result<Self, XrayError> {
        let (Some(version), Some(log_type), Some(bits), Some(cycle_frequency), Some(free_form)) = (
            u16_at(data, VERSION_OFFSET),
            u16_at(data, TYPE_OFFSET),
            u32_at(data, BITFIELD_OFFSET),
            u64_at(data, CYCLE_FREQUENCY_OFFSET),
            array_at::<16>(data, FREE_FORM_OFFSET),
        ) else {
            return Err(XrayError::new(
                0,
                XrayErrorKind::TooShortForHeader { len: data.len() },
            ));
        };
        let (mode, supported, range, log_type_enum) = match log_type {
            LOG_TYPE_BASIC => ("basic", "1..=3", BASIC_VERSIONS, LogType::Basic),
            LOG_TYPE_FDR => ("FDR", "1..=5", FDR_VERSIONS, LogType::Fdr),
            other => {
                return Err(XrayError::new(
                    TYPE_OFFSET,
                    big_endian_or(data, XrayErrorKind::UnknownLogType { log_type: other }),
                ));
            }
        };
        if !range.contains(&version) {
            let kind = XrayErrorKind::UnsupportedVersion {
                mode,
                version,
                supported,
            };
            return Err(XrayError::new(VERSION_OFFSET, big_endian_or(data, kind)));
        }
        Ok(Self {
            version,
            log_type: log_type_enum,
            constant_tsc: bits & CONSTANT_TSC_BIT != 0,
            nonstop_tsc: bits & NONSTOP_TSC_BIT != 0,
            cycle_frequency,
            free_form,
        })
    }

    /// The FDR per-thread buffer size (first 8 free-form bytes); 0 when not recorded.
    pub fn buffer_size(&self) -> u64 {
        u64::from_le_bytes(self.free_form[..8].try_into().unwrap_or([0; 8]))
    }
}

/// `fallback`, unless the header makes sense read big-endian: then a clearer error.
fn big_endian_or(data: &[u8], fallback: XrayErrorKind) -> XrayErrorKind {
    let (Some(v), Some(t)) = (
        array_at::<2>(data, VERSION_OFFSET),
        array_at::<2>(data, TYPE_OFFSET),
    ) else {
        return fallback;
    };
    let (version, log_type) = (u16::from_be_bytes(v), u16::from_be_bytes(t));
    let plausible = match log_type {
        LOG_TYPE_BASIC => BASIC_VERSIONS.contains(&version),
        LOG_TYPE_FDR => FDR_VERSIONS.contains(&version),
        _ => false,
    };
    if plausible {
        XrayErrorKind::BigEndian { version, log_type }
    } else {
        fallback
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(version: u16, ty: u16, bits: u32, freq: u64, buffer: u64) -> Vec<u8> {
        let mut h = Vec::new();
        h.extend_from_slice(&version.to_le_bytes());
        h.extend_from_slice(&ty.to_le_bytes());
        h.extend_from_slice(&bits.to_le_bytes());
        h.extend_from_slice(&freq.to_le_bytes());
        h.extend_from_slice(&buffer.to_le_bytes());
        h.extend_from_slice(&[0; 8]);
        h
    }

    #[test]
    fn layout_matches_spec_table() {
        // Spec: version 2 bytes, type 2, bitfield 4, cycle_frequency 8, buffer_size 8, reserved 8.
        assert_eq!(
            (
                VERSION_OFFSET,
                TYPE_OFFSET,
                BITFIELD_OFFSET,
                CYCLE_FREQUENCY_OFFSET,
                BUFFER_SIZE_OFFSET
            ),
            (0, 2, 4, 8, 16)
        );
        assert_eq!(FILE_HEADER_SIZE, 2 + 2 + 4 + 8 + 8 + 8);
        // "Flight Data Recorder mode traces have type == 1"; constant_tsc is the first bit.
        assert_eq!(LOG_TYPE_FDR, 1);
        assert_eq!((CONSTANT_TSC_BIT, NONSTOP_TSC_BIT), (0b01, 0b10));
    }

    #[test]
    fn parses_fdr_header() {
        let h = FileHeader::parse(&header(1, 1, 0b10, 2_500_000_000, 16384)).unwrap();
        assert_eq!(h.version, 1);
        assert_eq!(h.log_type, LogType::Fdr);
        assert!(!h.constant_tsc);
        assert!(h.nonstop_tsc);
        assert_eq!(h.cycle_frequency, 2_500_000_000);
        assert_eq!(h.buffer_size(), 16384);
    }

    #[test]
    fn parses_basic_header_and_ignores_reserved_bits() {
        let h = FileHeader::parse(&header(3, 0, 0xffff_fffd, 1_000_000_000, 0)).unwrap();
        assert_eq!((h.version, h.log_type), (3, LogType::Basic));
        assert!(h.constant_tsc && !h.nonstop_tsc);
    }

    #[test]
    fn rejects_short_unknown_and_unsupported() {
        let e = FileHeader::parse(&[1, 0, 1, 0]).unwrap_err();
        assert_eq!(e.kind, XrayErrorKind::TooShortForHeader { len: 4 });
        let e = FileHeader::parse(&header(1, 7, 0, 0, 0)).unwrap_err();
        assert_eq!(
            (e.offset, e.kind),
            (2, XrayErrorKind::UnknownLogType { log_type: 7 })
        );
        let e = FileHeader::parse(&header(6, 1, 0, 0, 0)).unwrap_err();
        assert!(matches!(
            e.kind,
            XrayErrorKind::UnsupportedVersion { version: 6, .. }
        ));
        let e = FileHeader::parse(&header(4, 0, 0, 0, 0)).unwrap_err();
        assert!(matches!(
            e.kind,
            XrayErrorKind::UnsupportedVersion {
                mode: "basic",
                version: 4,
                ..
            }
        ));
    }

    #[test]
    fn recognizes_big_endian_header() {
        let mut h = header(0, 0, 0, 0, 0);
        h[..4].copy_from_slice(&[0, 5, 0, 1]); // version 5, type 1, big-endian
        let e = FileHeader::parse(&h).unwrap_err();
        assert_eq!(
            e.kind,
            XrayErrorKind::BigEndian {
                version: 5,
                log_type: 1
            }
        );
    }
}
