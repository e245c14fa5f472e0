//! What the manager's sockets carry beside a provider's messages: a controller's JSON document
//! (tag 9: the trace service's requests, and `fxtrace status`'s, which `fxtrace record`
//! answers too) and the binary status of earlier revisions (tags 6 and 7). The library defines
//! the frame and a provider's messages ([`Message`]); these are the tools' alone.
//!
//! The binary status is frozen: a manager still answers a [`Frame::StatusRequest`] (from
//! `fxtrace status` of an earlier revision) and `fxtrace status` still reads a
//! [`StatusReply`] (from a manager of an earlier revision), both made from or into the one
//! status model, [`SessionInfo`]; nothing new goes into them.
//!
//! | Tag | Frame | Payload |
//! |---:|---|---|
//! | 6 | StatusRequest | optionally `features: u32`: bit 0, [`STATUS_FEATURE_FIGURES`], asks for the figures (revision 3); other bits are refused |
//! | 7 | StatusReply | `state: u8` (FIDL SessionState 1..7), `providers: list<{id: u32, pid: u32, name: str}>` (≤ [`MAX_STATUS_PROVIDERS`]), `categories: list<str>`, then, to a client that asked, the figures: `buffering_mode: u8` (FIDL numbering), `buffer_size_bytes: u64`, `providers: u32`, `records_written: u64`, `bytes_written: u64`, `buffered_bytes: u64`, `records_dropped: u64`, `elapsed_ns: u64`, `output: str` (≤ [`MAX_OUTPUT_NAME_LEN`] bytes) |
//! | 9 | Controller | `fds: u8` (≤ [`MAX_CONTROLLER_FDS`]), `len: u32` (≤ [`MAX_CONTROLLER_BODY`]), `len` bytes of UTF-8 JSON (`service::protocol`); carries `fds` descriptors |
//!
//! A manager of revision 2 or earlier hangs up on a StatusRequest with `features`: the client
//! then asks again without them.

use fxtrace::protocol::control::{
    encode_frame, put_categories, put_count, put_str, put_u32, put_u64, split_body, BodyReader,
    BufferingMode, ControlError, FrameMessage, Message, SessionState, MAX_BODY_LEN, MAX_CATEGORIES,
    MAX_CATEGORY_NAME_LEN, MAX_PROVIDER_NAME_LEN,
};

use super::service::protocol::SessionInfo;

/// Largest JSON document of a [`Frame::Controller`] (bytes).
pub const MAX_CONTROLLER_BODY: usize = 512 << 10;

/// Most descriptors one [`Frame::Controller`] carries.
pub const MAX_CONTROLLER_FDS: u8 = 1;

/// Most providers a [`StatusReply`] lists. Fuchsia's `MAX_NUM_PROVIDERS` is 100; system-wide
/// tracing on Linux (every process with the preload object) can exceed that.
pub const MAX_STATUS_PROVIDERS: usize = 4096;

/// StatusRequest `features` bit 0: the client wants [`SessionFigures`] in the reply.
pub const STATUS_FEATURE_FIGURES: u32 = 1;

/// Longest output file name a [`SessionFigures`] carries (bytes).
pub const MAX_OUTPUT_NAME_LEN: usize = 4096;

const TAG_STATUS_REQUEST: u16 = 6;
const TAG_STATUS_REPLY: u16 = 7;
const TAG_CONTROLLER: u16 = 9;

/// Encoded size of the largest [`StatusReply`]: the largest frame on a control socket.
const STATUS_REPLY_MAX: usize = 4
    + 1
    + 4
    + MAX_STATUS_PROVIDERS * (4 + 4 + 2 + MAX_PROVIDER_NAME_LEN)
    + 4
    + MAX_CATEGORIES * (2 + MAX_CATEGORY_NAME_LEN)
    + (1 + 8 + 4 + 5 * 8 + 2 + MAX_OUTPUT_NAME_LEN);
const _: () = assert!(STATUS_REPLY_MAX == MAX_BODY_LEN);
const _: () = assert!(4 + 1 + 4 + MAX_CONTROLLER_BODY <= MAX_BODY_LEN);

/// One frame the manager reads or writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A provider's message.
    Provider(Message),
    /// Controller ↔ manager: one request, reply or event of the controller protocol
    /// (`service::protocol`), with `fds` descriptors (the output file a controller opened).
    Controller {
        /// The JSON document (≤ [`MAX_CONTROLLER_BODY`] bytes).
        body: String,
        /// Descriptors that travel with it (≤ [`MAX_CONTROLLER_FDS`]).
        fds: u8,
    },
    /// Status client of an earlier revision → manager (frozen).
    StatusRequest {
        /// Also the session's figures (`false` encodes as a first-revision StatusRequest).
        figures: bool,
    },
    /// Manager → status client of an earlier revision (frozen).
    StatusReply(Box<StatusReply>),
}

/// The binary status (frozen).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusReply {
    /// Session state.
    pub state: SessionState,
    /// Registered providers.
    pub providers: Vec<StatusEntry>,
    /// Known categories.
    pub categories: Vec<String>,
    /// The session's figures, for a client that asked (`None` encodes as a first-revision
    /// StatusReply).
    pub figures: Option<SessionFigures>,
}

/// One provider in a [`StatusReply`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StatusEntry {
    /// Provider id assigned by the manager.
    pub id: u32,
    /// Process id of the provider.
    pub pid: u32,
    /// Name the provider registered with (≤ 100 bytes).
    pub name: String,
}

/// A session's figures in a [`StatusReply`] (frozen: [`SessionInfo`] is the status model).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionFigures {
    /// Buffering mode of the session.
    pub buffering_mode: BufferingMode,
    /// Buffer size per provider, in bytes.
    pub buffer_size_bytes: u64,
    /// Providers connected now.
    pub providers: u32,
    /// Records written to the output so far (metadata included).
    pub records_written: u64,
    /// Bytes written to the output so far.
    pub bytes_written: u64,
    /// Bytes the providers' buffers hold now.
    pub buffered_bytes: u64,
    /// Records the providers dropped so far.
    pub records_dropped: u64,
    /// Time since the session was created, in ns.
    pub elapsed_ns: u64,
    /// The output file (≤ [`MAX_OUTPUT_NAME_LEN`] bytes; empty when unknown).
    pub output: String,
}

impl SessionFigures {
    /// The figures of `info`, for a client of an earlier revision.
    pub fn of(info: &SessionInfo) -> SessionFigures {
        SessionFigures {
            buffering_mode: info.mode.parse().unwrap_or(BufferingMode::Oneshot),
            buffer_size_bytes: info.buffer_size,
            providers: info.providers,
            records_written: info.records_written,
            bytes_written: info.bytes_written,
            buffered_bytes: info.buffered_bytes,
            records_dropped: info.records_dropped,
            elapsed_ns: info.elapsed_ms.saturating_mul(1_000_000),
            output: super::archive::truncate_str(&info.output, MAX_OUTPUT_NAME_LEN).to_owned(),
        }
    }

    /// A session of a manager of an earlier revision, in `state`, as the status model.
    pub fn into_info(self, state: SessionState) -> SessionInfo {
        SessionInfo {
            state: state.name().to_owned(),
            mode: self.buffering_mode.as_str().to_owned(),
            buffer_size: self.buffer_size_bytes,
            providers: self.providers,
            records_written: self.records_written,
            bytes_written: self.bytes_written,
            buffered_bytes: self.buffered_bytes,
            records_dropped: self.records_dropped,
            elapsed_ms: self.elapsed_ns / 1_000_000,
            output: self.output,
            ..SessionInfo::default()
        }
    }
}

impl FrameMessage for Frame {
    fn name(&self) -> &'static str {
        match self {
            Frame::Provider(m) => m.name(),
            Frame::Controller { .. } => "Controller",
            Frame::StatusRequest { .. } => "StatusRequest",
            Frame::StatusReply(_) => "StatusReply",
        }
    }

    fn fd_count(&self) -> usize {
        match self {
            Frame::Provider(m) => m.fd_count(),
            Frame::Controller { fds, .. } => usize::from(*fds),
            Frame::StatusRequest { .. } | Frame::StatusReply(_) => 0,
        }
    }

    fn encode(&self) -> Result<Vec<u8>, ControlError> {
        match self {
            Frame::Provider(m) => m.encode(),
            Frame::Controller { body, fds } => encode_frame(TAG_CONTROLLER, |w| {
                if body.len() > MAX_CONTROLLER_BODY {
                    return Err(ControlError::TooLong {
                        field: "controller document",
                        len: body.len(),
                        max: MAX_CONTROLLER_BODY,
                    });
                }
                if *fds > MAX_CONTROLLER_FDS {
                    return Err(ControlError::InvalidValue {
                        field: "controller descriptors",
                        value: u64::from(*fds),
                    });
                }
                w.push(*fds);
                put_u32(w, body.len() as u32);
                w.extend_from_slice(body.as_bytes());
                Ok(())
            }),
            Frame::StatusRequest { figures } => encode_frame(TAG_STATUS_REQUEST, |w| {
                if *figures {
                    put_u32(w, STATUS_FEATURE_FIGURES);
                }
                Ok(())
            }),
            Frame::StatusReply(reply) => encode_frame(TAG_STATUS_REPLY, |w| reply.put(w)),
        }
    }

    fn decode_body(body: &[u8]) -> Result<Frame, ControlError> {
        let (tag, mut r) = split_body(body)?;
        let frame = match tag {
            TAG_CONTROLLER => {
                let fds = r.u8("controller descriptors")?;
                if fds > MAX_CONTROLLER_FDS {
                    return Err(ControlError::InvalidValue {
                        field: "controller descriptors",
                        value: u64::from(fds),
                    });
                }
                let len = r.u32("controller document")? as usize;
                if len > MAX_CONTROLLER_BODY {
                    return Err(ControlError::TooLong {
                        field: "controller document",
                        len,
                        max: MAX_CONTROLLER_BODY,
                    });
                }
                let bytes = r.take(len, "controller document")?;
                let body = std::str::from_utf8(bytes)
                    .map_err(|_| ControlError::InvalidUtf8 {
                        field: "controller document",
                    })?
                    .to_owned();
                Frame::Controller { body, fds }
            }
            TAG_STATUS_REQUEST => Frame::StatusRequest {
                figures: match r.optional_u32("features")? {
                    None => false,
                    Some(STATUS_FEATURE_FIGURES) => true,
                    // 0 is never written; other bits are not known here (a client that sets
                    // them asks again without, as of an older manager).
                    Some(other) => {
                        return Err(ControlError::InvalidValue {
                            field: "status features",
                            value: u64::from(other),
                        })
                    }
                },
            },
            TAG_STATUS_REPLY => Frame::StatusReply(Box::new(StatusReply::read(&mut r)?)),
            _ => return Message::decode_body(body).map(Frame::Provider),
        };
        r.finish(frame.name())?;
        Ok(frame)
    }
}

impl StatusReply {
    fn put(&self, w: &mut Vec<u8>) -> Result<(), ControlError> {
        w.push(self.state.to_u8());
        put_count(w, "providers", self.providers.len(), MAX_STATUS_PROVIDERS)?;
        for p in &self.providers {
            put_u32(w, p.id);
            put_u32(w, p.pid);
            put_str(w, "provider name", &p.name, MAX_PROVIDER_NAME_LEN)?;
        }
        put_categories(w, &self.categories)?;
        if let Some(f) = &self.figures {
            w.push(f.buffering_mode.to_fidl());
            put_u64(w, f.buffer_size_bytes);
            put_u32(w, f.providers);
            for v in [
                f.records_written,
                f.bytes_written,
                f.buffered_bytes,
                f.records_dropped,
                f.elapsed_ns,
            ] {
                put_u64(w, v);
            }
            put_str(w, "output name", &f.output, MAX_OUTPUT_NAME_LEN)?;
        }
        Ok(())
    }

    fn read(r: &mut BodyReader<'_>) -> Result<StatusReply, ControlError> {
        let state = SessionState::from_u8(r.u8("session state")?)?;
        let count = r.count("providers", MAX_STATUS_PROVIDERS)?;
        let mut providers = Vec::with_capacity(count);
        for _ in 0..count {
            providers.push(StatusEntry {
                id: r.u32("provider id")?,
                pid: r.u32("provider pid")?,
                name: r.str("provider name", MAX_PROVIDER_NAME_LEN)?,
            });
        }
        let categories = r.categories()?;
        let figures = if r.at_end() {
            None
        } else {
            Some(SessionFigures {
                buffering_mode: BufferingMode::from_fidl(r.u8("buffering mode")?)?,
                buffer_size_bytes: r.u64("buffer size")?,
                providers: r.u32("providers")?,
                records_written: r.u64("records written")?,
                bytes_written: r.u64("bytes written")?,
                buffered_bytes: r.u64("buffered bytes")?,
                records_dropped: r.u64("records dropped")?,
                elapsed_ns: r.u64("elapsed")?,
                output: r.str("output name", MAX_OUTPUT_NAME_LEN)?,
            })
        };
        Ok(StatusReply {
            state,
            providers,
            categories,
            figures,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn decode(bytes: &[u8]) -> Result<Frame, ControlError> {
        let len = fxtrace::protocol::control::body_len_from_prefix(
            bytes[..4].try_into().expect("a prefix"),
        )?;
        if len != bytes.len() - 4 {
            return Err(ControlError::LengthMismatch {
                declared: len,
                actual: bytes.len() - 4,
            });
        }
        Frame::decode_body(&bytes[4..])
    }

    fn figures() -> SessionFigures {
        SessionFigures {
            buffering_mode: BufferingMode::Streaming,
            buffer_size_bytes: 64 << 10,
            providers: 3,
            records_written: 1000,
            bytes_written: 80_000,
            buffered_bytes: 4096,
            records_dropped: 7,
            elapsed_ns: 2_500_000_000,
            output: "/tmp/trace.fxt".into(),
        }
    }

    #[test]
    fn controller_wire_bytes() {
        let c = Frame::Controller {
            body: "{}".into(),
            fds: 1,
        };
        assert_eq!(c.fd_count(), 1);
        let bytes = c.encode().expect("encodes");
        assert_eq!(bytes, [11, 0, 0, 0, 1, 0, 9, 0, 1, 2, 0, 0, 0, b'{', b'}']);
        assert_eq!(decode(&bytes), Ok(c));
        let mut two_fds = bytes.clone();
        two_fds[8] = 2;
        assert!(decode(&two_fds).is_err(), "at most one descriptor");
        let too_long = Frame::Controller {
            body: "x".repeat(MAX_CONTROLLER_BODY + 1),
            fds: 0,
        };
        assert!(too_long.encode().is_err());
        // A provider's message goes through as one.
        let stop = Frame::Provider(Message::Stop).encode().unwrap();
        assert_eq!(stop, Message::Stop.encode().unwrap());
        assert_eq!(decode(&stop), Ok(Frame::Provider(Message::Stop)));
    }

    #[test]
    fn status_figures_are_optional_both_ways() {
        // Without figures: byte for byte the first revision (an empty request body, a reply
        // ending with the categories).
        let plain = Frame::StatusRequest { figures: false }.encode().unwrap();
        assert_eq!(plain, [4, 0, 0, 0, 1, 0, 6, 0]);
        let asking = Frame::StatusRequest { figures: true }.encode().unwrap();
        assert_eq!(&asking[8..], &STATUS_FEATURE_FIGURES.to_le_bytes());
        assert_eq!(decode(&asking), Ok(Frame::StatusRequest { figures: true }));
        let reply = |figures| {
            Frame::StatusReply(Box::new(StatusReply {
                state: SessionState::Started,
                providers: vec![],
                categories: vec![],
                figures,
            }))
        };
        let old = reply(None).encode().unwrap();
        assert_eq!(old.len(), 8 + 1 + 4 + 4);
        let new = reply(Some(figures())).encode().unwrap();
        assert_eq!(new.len(), old.len() + 1 + 8 + 4 + 5 * 8 + 2 + 14);
        assert_eq!(decode(&new), Ok(reply(Some(figures()))));
        // Cut figures are an error, not a silent None.
        let mut cut = new.clone();
        cut.truncate(new.len() - 3);
        let body = (cut.len() - 4) as u32;
        cut[..4].copy_from_slice(&body.to_le_bytes());
        assert!(decode(&cut).is_err());
        // A bad state.
        assert!(matches!(
            Frame::decode_body(&[1, 0, 7, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0]),
            Err(ControlError::InvalidValue { value: 8, .. })
        ));
    }

    #[test]
    fn figures_and_the_status_model_carry_the_same_values() {
        let info = figures().into_info(SessionState::Stopped);
        assert_eq!(info.state, "STOPPED");
        assert_eq!(SessionFigures::of(&info), figures());
    }

    #[test]
    fn largest_status_reply_is_exactly_max_body_len() {
        let name = "n".repeat(MAX_PROVIDER_NAME_LEN);
        let cat = "c".repeat(MAX_CATEGORY_NAME_LEN);
        let m = Frame::StatusReply(Box::new(StatusReply {
            state: SessionState::Started,
            providers: (0..MAX_STATUS_PROVIDERS as u32)
                .map(|i| StatusEntry {
                    id: i,
                    pid: i + 100,
                    name: name.clone(),
                })
                .collect(),
            categories: vec![cat; MAX_CATEGORIES],
            figures: Some(SessionFigures {
                output: "o".repeat(MAX_OUTPUT_NAME_LEN),
                ..figures()
            }),
        }));
        let bytes = m.encode().expect("largest reply encodes");
        assert_eq!(
            bytes.len(),
            fxtrace::protocol::control::FRAME_PREFIX_LEN + MAX_BODY_LEN
        );
        assert_eq!(decode(&bytes), Ok(m));
    }

    fn frame_strategy() -> impl Strategy<Value = Frame> {
        let state = (1u8..=7).prop_map(|v| SessionState::from_u8(v).expect("1..=7"));
        let entry = (any::<u32>(), any::<u32>(), "[a-z0-9é€]{0,30}")
            .prop_map(|(id, pid, name)| StatusEntry { id, pid, name });
        prop_oneof![
            ("[ -~]{0,200}", 0u8..=MAX_CONTROLLER_FDS)
                .prop_map(|(body, fds)| Frame::Controller { body, fds }),
            any::<bool>().prop_map(|figures| Frame::StatusRequest { figures }),
            (
                state,
                proptest::collection::vec(entry, 0..10),
                proptest::collection::vec("[a-z:]{0,30}", 0..10),
                proptest::option::of((any::<u64>(), "[a-z/]{0,20}"))
            )
                .prop_map(|(state, providers, categories, extra)| {
                    Frame::StatusReply(Box::new(StatusReply {
                        state,
                        providers,
                        categories,
                        figures: extra.map(|(n, output)| SessionFigures {
                            records_written: n,
                            output,
                            ..figures()
                        }),
                    }))
                }),
        ]
    }

    proptest! {
        #[test]
        fn frames_round_trip(f in frame_strategy()) {
            let bytes = f.encode().expect("generated frames respect the limits");
            prop_assert_eq!(decode(&bytes), Ok(f));
        }

        #[test]
        fn mutated_frames_never_panic(
            f in frame_strategy(),
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
        ) {
            let mut bytes = f.encode().expect("encodes");
            for (at, v) in flips {
                let i = at % bytes.len();
                bytes[i] = v;
            }
            if let Ok(decoded) = decode(&bytes) {
                let again = decoded.encode().expect("decoded frames respect the limits");
                prop_assert_eq!(decode(&again).expect("re-encoded frames decode"), decoded);
            }
        }
    }
}
