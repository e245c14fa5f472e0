//! The 16-byte FIFO packets exchanged by a provider and the manager (Fuchsia's
//! `trace_provider_packet_t` in trace-provider's `provider.h`, and its document "FIFO
//! packets").
//!
//! Wire layout, little-endian, no padding:
//!
//! | Offset | Size | Field |
//! |---:|---:|---|
//! | 0 | 2 | `request` (0 is never valid) |
//! | 2 | 2 | `data16` (must be 0 except in ALERT) |
//! | 4 | 4 | `data32` |
//! | 8 | 8 | `data64` |
//!
//! | Code | Packet | Direction | data32 | data64 |
//! |---:|---|---|---|---|
//! | 0x1 | STARTED | provider → manager | protocol version (1) | 0 |
//! | 0x2 | SAVE_BUFFER | provider → manager (streaming) | wrapped count | durable data end |
//! | 0x3 | STOPPED | provider → manager | 0 | 0 |
//! | 0x4 | ALERT | provider → manager | name bytes 0..14 at packet offset 2, NUL-padded | |
//! | 0x100 | BUFFER_SAVED | manager → provider (streaming) | wrapped count (echo) | durable data end (echo) |
//!
//! [`ProviderPacket::parse`] applies the manager's validation rules, [`ManagerPacket::parse`]
//! the provider's; any error means the peer must be dropped (the manager closes that
//! provider's FIFO and ignores its data; a provider terminates its engine). Rules that need
//! session state — SAVE_BUFFER only in streaming mode, one outstanding at a time, the
//! wrapped count sequence — belong to the manager, not to packet parsing.
//!
//! # Example
//!
//! ```
//! use fxtrace::protocol::fifo::{AlertName, FifoPacket, ProviderPacket, PacketError};
//!
//! let alert = ProviderPacket::Alert { name: AlertName::new("oom").unwrap() };
//! let wire = alert.to_packet().to_bytes();
//! assert_eq!(&wire[..5], &[4, 0, b'o', b'o', b'm']);
//! assert_eq!(ProviderPacket::parse(&FifoPacket::from_bytes(&wire)), Ok(alert));
//!
//! let bad = FifoPacket::new(fxtrace::protocol::fifo::STARTED, 0, 2, 0);
//! assert_eq!(ProviderPacket::parse(&bad), Err(PacketError::UnsupportedVersion { version: 2 }));
//! ```

use thiserror::Error;

/// Size of one FIFO packet in bytes.
pub const PACKET_SIZE: usize = 16;

/// `TRACE_PROVIDER_FIFO_PROTOCOL_VERSION`: the version a provider puts in STARTED.
pub const FIFO_PROTOCOL_VERSION: u32 = 1;

/// Provider → manager: tracing started; `data32` = [`FIFO_PROTOCOL_VERSION`].
pub const STARTED: u16 = 0x1;
/// Provider → manager (streaming): a rolling buffer is full; `data32` = wrapped count
/// (buffer `data32 & 1`), `data64` = durable data end.
pub const SAVE_BUFFER: u16 = 0x2;
/// Provider → manager: tracing stopped; all data zero.
pub const STOPPED: u16 = 0x3;
/// Provider → manager: alert; the name occupies the 14 bytes from packet offset 2.
pub const ALERT: u16 = 0x4;
/// Manager → provider (streaming): the buffer of SAVE_BUFFER was saved; echoes its data.
pub const BUFFER_SAVED: u16 = 0x100;

/// Longest alert name, in bytes (`MAX_ALERT_NAME_LENGTH`).
pub const MAX_ALERT_NAME_LEN: usize = 14;
/// Byte offset of the alert name inside the packet.
pub const ALERT_NAME_OFFSET: usize = 2;

/// A packet that breaks the protocol. The receiver must drop the sender.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PacketError {
    /// `request` is not a code defined for this direction.
    #[error("unknown FIFO request code {request:#x}")]
    UnknownRequest {
        /// The request code received.
        request: u16,
    },
    /// A code defined for the other direction (e.g. BUFFER_SAVED sent by a provider).
    #[error("FIFO request {request:#x} is not valid in this direction")]
    WrongDirection {
        /// The request code received.
        request: u16,
    },
    /// `data16` is not zero in a packet other than ALERT.
    #[error("FIFO request {request:#x} has non-zero data16 {data16:#x}")]
    NonZeroData16 {
        /// The request code received.
        request: u16,
        /// The offending `data16`.
        data16: u16,
    },
    /// STARTED with a protocol version other than [`FIFO_PROTOCOL_VERSION`].
    #[error("unsupported FIFO protocol version {version} (expected {FIFO_PROTOCOL_VERSION})")]
    UnsupportedVersion {
        /// The version the provider announced.
        version: u32,
    },
    /// A field that must be zero for this request is not.
    #[error(
        "FIFO request {request:#x} has non-zero data (data32 {data32:#x}, data64 {data64:#x})"
    )]
    NonZeroData {
        /// The request code received.
        request: u16,
        /// `data32` as received.
        data32: u32,
        /// `data64` as received.
        data64: u64,
    },
    /// An alert name longer than [`MAX_ALERT_NAME_LEN`] bytes.
    #[error("alert name is {len} bytes, longer than {MAX_ALERT_NAME_LEN}")]
    AlertNameTooLong {
        /// Length of the rejected name in bytes.
        len: usize,
    },
    /// An alert name containing a NUL byte (it would be cut there on the wire).
    #[error("alert name contains a NUL byte")]
    AlertNameHasNul,
}

// === impl FifoPacket ===

/// One raw FIFO packet (`trace_provider_packet_t`), not yet validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FifoPacket {
    /// Request code, offset 0.
    pub request: u16,
    /// Offset 2; zero except in ALERT.
    pub data16: u16,
    /// Offset 4.
    pub data32: u32,
    /// Offset 8.
    pub data64: u64,
}

impl FifoPacket {
    /// A packet from its four fields.
    pub const fn new(request: u16, data16: u16, data32: u32, data64: u64) -> Self {
        FifoPacket {
            request,
            data16,
            data32,
            data64,
        }
    }

    /// The 16 wire bytes, little-endian.
    pub fn to_bytes(&self) -> [u8; PACKET_SIZE] {
        let mut b = [0u8; PACKET_SIZE];
        b[0..2].copy_from_slice(&self.request.to_le_bytes());
        b[2..4].copy_from_slice(&self.data16.to_le_bytes());
        b[4..8].copy_from_slice(&self.data32.to_le_bytes());
        b[8..16].copy_from_slice(&self.data64.to_le_bytes());
        b
    }

    /// A packet from its 16 wire bytes.
    pub fn from_bytes(b: &[u8; PACKET_SIZE]) -> Self {
        FifoPacket {
            request: u16::from_le_bytes([b[0], b[1]]),
            data16: u16::from_le_bytes([b[2], b[3]]),
            data32: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
            data64: u64::from_le_bytes([b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]]),
        }
    }

    /// The 14 bytes from packet offset 2 (data16, data32, data64): an ALERT's name field.
    fn name_field(&self) -> [u8; MAX_ALERT_NAME_LEN] {
        let mut name = [0u8; MAX_ALERT_NAME_LEN];
        name.copy_from_slice(&self.to_bytes()[ALERT_NAME_OFFSET..]);
        name
    }
}

// === impl AlertName ===

/// An alert name: at most [`MAX_ALERT_NAME_LEN`] bytes, no NUL.
///
/// Names received from a provider are taken as bytes up to the first NUL and need not be
/// UTF-8; [`AlertName::new`] (the sending side) accepts only `str`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct AlertName {
    bytes: [u8; MAX_ALERT_NAME_LEN],
    len: u8,
}

impl AlertName {
    /// Checks `name` for the wire: at most 14 bytes and no NUL byte.
    pub fn new(name: &str) -> Result<Self, PacketError> {
        Self::from_bytes(name.as_bytes())
    }

    /// Checks raw `name` bytes for the wire: at most 14 bytes and no NUL byte.
    pub fn from_bytes(name: &[u8]) -> Result<Self, PacketError> {
        if name.len() > MAX_ALERT_NAME_LEN {
            return Err(PacketError::AlertNameTooLong { len: name.len() });
        }
        if name.contains(&0) {
            return Err(PacketError::AlertNameHasNul);
        }
        let mut bytes = [0u8; MAX_ALERT_NAME_LEN];
        bytes[..name.len()].copy_from_slice(name);
        Ok(AlertName {
            bytes,
            len: name.len() as u8,
        })
    }

    /// The name as the manager reads it: bytes of the field up to the first NUL.
    fn from_field(field: &[u8; MAX_ALERT_NAME_LEN]) -> Self {
        let len = field.iter().position(|&b| b == 0).unwrap_or(field.len());
        let mut bytes = [0u8; MAX_ALERT_NAME_LEN];
        bytes[..len].copy_from_slice(&field[..len]);
        AlertName {
            bytes,
            len: len as u8,
        }
    }

    /// The name's bytes (no padding).
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// The name as UTF-8, or `None` when a provider sent other bytes.
    pub fn as_str(&self) -> Option<&str> {
        std::str::from_utf8(self.as_bytes()).ok()
    }

    /// The name with invalid UTF-8 replaced, for display.
    pub fn to_string_lossy(&self) -> String {
        String::from_utf8_lossy(self.as_bytes()).into_owned()
    }
}

impl std::fmt::Debug for AlertName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlertName({:?})", self.to_string_lossy())
    }
}

// === impl ProviderPacket ===

/// A validated provider → manager packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderPacket {
    /// Tracing started (STARTED).
    Started {
        /// FIFO protocol version; parsing accepts only [`FIFO_PROTOCOL_VERSION`].
        version: u32,
    },
    /// A rolling buffer is full and must be saved (SAVE_BUFFER, streaming only).
    SaveBuffer {
        /// Wrap count of the buffer that filled; the buffer is `wrapped_count & 1`.
        wrapped_count: u32,
        /// End of durable data, in bytes from the start of the durable buffer.
        durable_data_end: u64,
    },
    /// Tracing stopped (STOPPED).
    Stopped,
    /// An alert was raised (ALERT).
    Alert {
        /// The alert's name.
        name: AlertName,
    },
}

impl ProviderPacket {
    /// STARTED with the current protocol version.
    pub const STARTED: ProviderPacket = ProviderPacket::Started {
        version: FIFO_PROTOCOL_VERSION,
    };

    /// Validates a packet received by the manager (the checks of Fuchsia's trace_manager,
    /// `src/performance/trace_manager/tracee.cc`):
    /// `data16 != 0` except in ALERT, STARTED with a version other than 1 or a non-zero
    /// `data64`, STOPPED with any non-zero data, and every other request code are errors.
    pub fn parse(p: &FifoPacket) -> Result<Self, PacketError> {
        if p.request != ALERT && p.data16 != 0 {
            return Err(PacketError::NonZeroData16 {
                request: p.request,
                data16: p.data16,
            });
        }
        match p.request {
            STARTED => {
                if p.data32 != FIFO_PROTOCOL_VERSION {
                    return Err(PacketError::UnsupportedVersion { version: p.data32 });
                }
                if p.data64 != 0 {
                    return Err(non_zero_data(p));
                }
                Ok(ProviderPacket::Started { version: p.data32 })
            }
            SAVE_BUFFER => Ok(ProviderPacket::SaveBuffer {
                wrapped_count: p.data32,
                durable_data_end: p.data64,
            }),
            STOPPED => {
                if p.data32 != 0 || p.data64 != 0 {
                    return Err(non_zero_data(p));
                }
                Ok(ProviderPacket::Stopped)
            }
            ALERT => Ok(ProviderPacket::Alert {
                name: AlertName::from_field(&p.name_field()),
            }),
            BUFFER_SAVED => Err(PacketError::WrongDirection { request: p.request }),
            request => Err(PacketError::UnknownRequest { request }),
        }
    }

    /// The raw packet to send.
    pub fn to_packet(&self) -> FifoPacket {
        match *self {
            ProviderPacket::Started { version } => FifoPacket::new(STARTED, 0, version, 0),
            ProviderPacket::SaveBuffer {
                wrapped_count,
                durable_data_end,
            } => FifoPacket::new(SAVE_BUFFER, 0, wrapped_count, durable_data_end),
            ProviderPacket::Stopped => FifoPacket::new(STOPPED, 0, 0, 0),
            ProviderPacket::Alert { name } => {
                let mut b = [0u8; PACKET_SIZE];
                b[0..2].copy_from_slice(&ALERT.to_le_bytes());
                b[ALERT_NAME_OFFSET..].copy_from_slice(&name.bytes);
                FifoPacket::from_bytes(&b)
            }
        }
    }
}

fn non_zero_data(p: &FifoPacket) -> PacketError {
    PacketError::NonZeroData {
        request: p.request,
        data32: p.data32,
        data64: p.data64,
    }
}

// === impl ManagerPacket ===

/// A validated manager → provider packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ManagerPacket {
    /// The buffer named by a SAVE_BUFFER was saved (BUFFER_SAVED); echoes its data.
    BufferSaved {
        /// Wrap count from the SAVE_BUFFER.
        wrapped_count: u32,
        /// Durable data end from the SAVE_BUFFER.
        durable_data_end: u64,
    },
}

impl ManagerPacket {
    /// Validates a packet received by a provider: only BUFFER_SAVED with `data16 == 0` is
    /// accepted; anything else means the provider must stop and terminate its engine.
    pub fn parse(p: &FifoPacket) -> Result<Self, PacketError> {
        match p.request {
            BUFFER_SAVED if p.data16 != 0 => Err(PacketError::NonZeroData16 {
                request: p.request,
                data16: p.data16,
            }),
            BUFFER_SAVED => Ok(ManagerPacket::BufferSaved {
                wrapped_count: p.data32,
                durable_data_end: p.data64,
            }),
            STARTED | SAVE_BUFFER | STOPPED | ALERT => {
                Err(PacketError::WrongDirection { request: p.request })
            }
            request => Err(PacketError::UnknownRequest { request }),
        }
    }

    /// The raw packet to send.
    pub fn to_packet(&self) -> FifoPacket {
        match *self {
            ManagerPacket::BufferSaved {
                wrapped_count,
                durable_data_end,
            } => FifoPacket::new(BUFFER_SAVED, 0, wrapped_count, durable_data_end),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn codes_and_version_match_the_spec() {
        assert_eq!(STARTED, 0x1);
        assert_eq!(SAVE_BUFFER, 0x2);
        assert_eq!(STOPPED, 0x3);
        assert_eq!(ALERT, 0x4);
        assert_eq!(BUFFER_SAVED, 0x100);
        assert_eq!(FIFO_PROTOCOL_VERSION, 1);
        assert_eq!(PACKET_SIZE, 2 + 2 + 4 + 8);
        assert_eq!(MAX_ALERT_NAME_LEN, PACKET_SIZE - ALERT_NAME_OFFSET);
    }

    #[test]
    fn field_offsets_are_little_endian_at_0_2_4_8() {
        let p = FifoPacket::new(0x0102, 0x0304, 0x0506_0708, 0x090a_0b0c_0d0e_0f10);
        let b = p.to_bytes();
        assert_eq!(
            b,
            [
                0x02, 0x01, // request @0
                0x04, 0x03, // data16 @2
                0x08, 0x07, 0x06, 0x05, // data32 @4
                0x10, 0x0f, 0x0e, 0x0d, 0x0c, 0x0b, 0x0a, 0x09, // data64 @8
            ]
        );
        assert_eq!(FifoPacket::from_bytes(&b), p);
    }

    #[test]
    fn started_wire_bytes() {
        let b = ProviderPacket::STARTED.to_packet().to_bytes();
        assert_eq!(b, [1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        let p = FifoPacket::from_bytes(&b);
        assert_eq!(
            ProviderPacket::parse(&p),
            Ok(ProviderPacket::Started { version: 1 })
        );
    }

    #[test]
    fn save_buffer_and_buffer_saved_wire_bytes() {
        let save = ProviderPacket::SaveBuffer {
            wrapped_count: 3,
            durable_data_end: 0x1_0000_0010,
        };
        let b = save.to_packet().to_bytes();
        assert_eq!(b, [2, 0, 0, 0, 3, 0, 0, 0, 0x10, 0, 0, 0, 1, 0, 0, 0]);
        assert_eq!(ProviderPacket::parse(&FifoPacket::from_bytes(&b)), Ok(save));

        let saved = ManagerPacket::BufferSaved {
            wrapped_count: 3,
            durable_data_end: 0x1_0000_0010,
        };
        let b = saved.to_packet().to_bytes();
        assert_eq!(b, [0, 1, 0, 0, 3, 0, 0, 0, 0x10, 0, 0, 0, 1, 0, 0, 0]);
        assert_eq!(ManagerPacket::parse(&FifoPacket::from_bytes(&b)), Ok(saved));
    }

    #[test]
    fn stopped_must_be_all_zero() {
        assert_eq!(
            ProviderPacket::parse(&FifoPacket::new(STOPPED, 0, 0, 0)),
            Ok(ProviderPacket::Stopped)
        );
        assert_eq!(
            ProviderPacket::Stopped.to_packet().to_bytes(),
            [3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        for p in [
            FifoPacket::new(STOPPED, 0, 1, 0),
            FifoPacket::new(STOPPED, 0, 0, 1),
        ] {
            assert!(matches!(
                ProviderPacket::parse(&p),
                Err(PacketError::NonZeroData {
                    request: STOPPED,
                    ..
                })
            ));
        }
    }

    #[test]
    fn started_rules() {
        assert_eq!(
            ProviderPacket::parse(&FifoPacket::new(STARTED, 0, 2, 0)),
            Err(PacketError::UnsupportedVersion { version: 2 })
        );
        assert_eq!(
            ProviderPacket::parse(&FifoPacket::new(STARTED, 0, 0, 0)),
            Err(PacketError::UnsupportedVersion { version: 0 })
        );
        assert!(matches!(
            ProviderPacket::parse(&FifoPacket::new(STARTED, 0, 1, 7)),
            Err(PacketError::NonZeroData {
                request: STARTED,
                data64: 7,
                ..
            })
        ));
    }

    #[test]
    fn data16_must_be_zero_except_alert() {
        for req in [STARTED, SAVE_BUFFER, STOPPED] {
            assert_eq!(
                ProviderPacket::parse(&FifoPacket::new(req, 1, 1, 0)),
                Err(PacketError::NonZeroData16 {
                    request: req,
                    data16: 1
                })
            );
        }
        assert_eq!(
            ManagerPacket::parse(&FifoPacket::new(BUFFER_SAVED, 9, 0, 0)),
            Err(PacketError::NonZeroData16 {
                request: BUFFER_SAVED,
                data16: 9
            })
        );
        // ALERT uses data16 for its first two name bytes.
        assert!(
            ProviderPacket::parse(&FifoPacket::new(ALERT, u16::from_le_bytes(*b"ab"), 0, 0))
                .is_ok()
        );
    }

    #[test]
    fn unknown_and_wrong_direction_requests() {
        for req in [0u16, 5, 0xff, 0x101, 0xffff] {
            assert_eq!(
                ProviderPacket::parse(&FifoPacket::new(req, 0, 0, 0)),
                Err(PacketError::UnknownRequest { request: req })
            );
            assert_eq!(
                ManagerPacket::parse(&FifoPacket::new(req, 0, 0, 0)),
                Err(PacketError::UnknownRequest { request: req })
            );
        }
        assert_eq!(
            ProviderPacket::parse(&FifoPacket::new(BUFFER_SAVED, 0, 0, 0)),
            Err(PacketError::WrongDirection {
                request: BUFFER_SAVED
            })
        );
        for req in [STARTED, SAVE_BUFFER, STOPPED, ALERT] {
            assert_eq!(
                ManagerPacket::parse(&FifoPacket::new(req, 0, 1, 0)),
                Err(PacketError::WrongDirection { request: req })
            );
        }
    }

    #[test]
    fn alert_name_sits_at_offset_2_nul_padded() {
        let name = AlertName::new("oom").expect("short name");
        let b = ProviderPacket::Alert { name }.to_packet().to_bytes();
        assert_eq!(&b[0..2], &[4, 0]);
        assert_eq!(&b[2..5], b"oom");
        assert!(b[5..].iter().all(|&x| x == 0));
        match ProviderPacket::parse(&FifoPacket::from_bytes(&b)) {
            Ok(ProviderPacket::Alert { name }) => assert_eq!(name.as_str(), Some("oom")),
            other => panic!("expected alert, got {other:?}"),
        }

        // Exactly 14 bytes fills offsets 2..16 with no NUL.
        let full = AlertName::new("abcdefghijklmn").expect("14 bytes");
        let b = ProviderPacket::Alert { name: full }.to_packet().to_bytes();
        assert_eq!(&b[2..16], b"abcdefghijklmn");
        match ProviderPacket::parse(&FifoPacket::from_bytes(&b)) {
            Ok(ProviderPacket::Alert { name }) => assert_eq!(name.as_bytes(), b"abcdefghijklmn"),
            other => panic!("expected alert, got {other:?}"),
        }
    }

    #[test]
    fn alert_names_over_14_bytes_or_with_nul_are_rejected() {
        assert_eq!(
            AlertName::new("abcdefghijklmno"),
            Err(PacketError::AlertNameTooLong { len: 15 })
        );
        // 5 three-byte characters = 15 bytes.
        assert_eq!(
            AlertName::new("€€€€€"),
            Err(PacketError::AlertNameTooLong { len: 15 })
        );
        assert_eq!(AlertName::new("a\0b"), Err(PacketError::AlertNameHasNul));
    }

    #[test]
    fn received_alert_name_stops_at_first_nul_and_may_be_non_utf8() {
        let mut b = [0u8; PACKET_SIZE];
        b[0] = 4;
        b[2..6].copy_from_slice(b"ab\0z");
        b[6] = 0xff;
        match ProviderPacket::parse(&FifoPacket::from_bytes(&b)) {
            Ok(ProviderPacket::Alert { name }) => assert_eq!(name.as_bytes(), b"ab"),
            other => panic!("expected alert, got {other:?}"),
        }
        b[2..6].copy_from_slice(&[0xff, 0xfe, b'x', 0]);
        match ProviderPacket::parse(&FifoPacket::from_bytes(&b)) {
            Ok(ProviderPacket::Alert { name }) => {
                assert_eq!(name.as_bytes(), &[0xff, 0xfe, b'x']);
                assert_eq!(name.as_str(), None);
                assert_eq!(name.to_string_lossy(), "\u{fffd}\u{fffd}x");
            }
            other => panic!("expected alert, got {other:?}"),
        }
    }

    proptest! {
        #[test]
        fn any_bytes_round_trip_and_parse_without_panic(bytes in any::<[u8; PACKET_SIZE]>()) {
            let p = FifoPacket::from_bytes(&bytes);
            prop_assert_eq!(p.to_bytes(), bytes);
            // A packet that parses re-encodes to an equivalent packet.
            if let Ok(pp) = ProviderPacket::parse(&p) {
                prop_assert_eq!(ProviderPacket::parse(&pp.to_packet()), Ok(pp));
            }
            if let Ok(mp) = ManagerPacket::parse(&p) {
                prop_assert_eq!(mp.to_packet(), p);
            }
        }

        #[test]
        fn save_buffer_round_trips(wc in any::<u32>(), dde in any::<u64>()) {
            let pp = ProviderPacket::SaveBuffer { wrapped_count: wc, durable_data_end: dde };
            let wire = FifoPacket::from_bytes(&pp.to_packet().to_bytes());
            prop_assert_eq!(ProviderPacket::parse(&wire), Ok(pp));
        }

        #[test]
        fn alert_names_round_trip(name in "[a-zA-Z0-9_.-]{0,14}") {
            let n = AlertName::new(&name).expect("valid name");
            let wire = FifoPacket::from_bytes(&ProviderPacket::Alert { name: n }.to_packet().to_bytes());
            prop_assert_eq!(ProviderPacket::parse(&wire), Ok(ProviderPacket::Alert { name: n }));
        }
    }
}
