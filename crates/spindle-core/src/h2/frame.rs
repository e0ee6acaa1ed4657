//! HTTP/2 frames (RFC 9113 §4 and §6): the 9-byte header, parsing each
//! type with its size, stream-id and padding rules, and encoders for the
//! frames a server sends.
//!
//! [`parse`] takes the bytes received so far, which may end inside a
//! frame (then it asks for more), and returns one frame, borrowing its
//! payload, or the error the frame is. It checks what can be checked from
//! the frame alone; what depends on the connection (stream states,
//! CONTINUATION sequencing, flow control) is `conn`'s.

/// Bytes in a frame header.
pub const HEADER_LEN: usize = 9;

/// SETTINGS_MAX_FRAME_SIZE's initial value and smallest allowed value.
pub const MIN_MAX_FRAME_SIZE: u32 = 16_384;

/// SETTINGS_MAX_FRAME_SIZE's largest allowed value (2^24 - 1).
pub const MAX_MAX_FRAME_SIZE: u32 = (1 << 24) - 1;

/// Largest flow-control window (2^31 - 1, §6.9.1).
pub const MAX_WINDOW: u32 = (1 << 31) - 1;

/// The window every stream and the connection start with (§6.9.2).
pub const DEFAULT_WINDOW: u32 = 65_535;

/// Frame types (§6, §11.2).
pub mod kind {
    pub const DATA: u8 = 0x0;
    pub const HEADERS: u8 = 0x1;
    pub const PRIORITY: u8 = 0x2;
    pub const RST_STREAM: u8 = 0x3;
    pub const SETTINGS: u8 = 0x4;
    pub const PUSH_PROMISE: u8 = 0x5;
    pub const PING: u8 = 0x6;
    pub const GOAWAY: u8 = 0x7;
    pub const WINDOW_UPDATE: u8 = 0x8;
    pub const CONTINUATION: u8 = 0x9;
}

/// Frame flags.
pub mod flag {
    pub const END_STREAM: u8 = 0x1;
    pub const ACK: u8 = 0x1;
    pub const END_HEADERS: u8 = 0x4;
    pub const PADDED: u8 = 0x8;
    pub const PRIORITY: u8 = 0x20;
}

/// SETTINGS identifiers (§6.5.2).
pub mod setting {
    pub const HEADER_TABLE_SIZE: u16 = 0x1;
    pub const ENABLE_PUSH: u16 = 0x2;
    pub const MAX_CONCURRENT_STREAMS: u16 = 0x3;
    pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
    pub const MAX_FRAME_SIZE: u16 = 0x5;
    pub const MAX_HEADER_LIST_SIZE: u16 = 0x6;
}

/// Error codes (§7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum ErrorCode {
    NoError = 0x0,
    ProtocolError = 0x1,
    InternalError = 0x2,
    FlowControlError = 0x3,
    SettingsTimeout = 0x4,
    StreamClosed = 0x5,
    FrameSizeError = 0x6,
    RefusedStream = 0x7,
    Cancel = 0x8,
    CompressionError = 0x9,
    ConnectError = 0xa,
    EnhanceYourCalm = 0xb,
    InadequateSecurity = 0xc,
    Http11Required = 0xd,
}

/// What a received frame's error is: the whole connection's (GOAWAY) or
/// one stream's (RST_STREAM).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    Connection(ErrorCode),
    Stream(u32, ErrorCode),
}

/// A frame's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub len: u32,
    pub kind: u8,
    pub flags: u8,
    /// With the reserved bit cleared.
    pub stream_id: u32,
}

impl FrameHeader {
    pub fn parse(b: &[u8; HEADER_LEN]) -> FrameHeader {
        FrameHeader {
            len: u32::from_be_bytes([0, b[0], b[1], b[2]]),
            kind: b[3],
            flags: b[4],
            stream_id: u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & MAX_WINDOW,
        }
    }

    pub fn encode(&self) -> [u8; HEADER_LEN] {
        debug_assert!(self.len <= MAX_MAX_FRAME_SIZE && self.stream_id <= MAX_WINDOW);
        let l = self.len.to_be_bytes();
        let s = self.stream_id.to_be_bytes();
        [
            l[1], l[2], l[3], self.kind, self.flags, s[0], s[1], s[2], s[3],
        ]
    }
}

/// A PRIORITY frame's or HEADERS frame's priority fields (§5.3.2, §6.3;
/// deprecated by RFC 9113 and parsed only to be checked and ignored).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Priority {
    pub exclusive: bool,
    pub dependency: u32,
    pub weight: u8,
}

/// A parsed frame, its payload borrowed from the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    Data {
        stream_id: u32,
        /// Without padding.
        data: &'a [u8],
        /// The whole payload's length, padding included: what flow
        /// control counts (§6.9.1).
        flow_len: u32,
        end_stream: bool,
    },
    Headers {
        stream_id: u32,
        /// The header block fragment, without padding or priority.
        block: &'a [u8],
        end_stream: bool,
        end_headers: bool,
        /// Its priority names the stream itself (§5.3.1): a stream error,
        /// once the block is decoded (the HPACK table must stay in step).
        self_dependent: bool,
    },
    Priority {
        stream_id: u32,
    },
    RstStream {
        stream_id: u32,
        code: u32,
    },
    /// Values already checked (§6.5.2); `params` is whole 6-byte entries.
    Settings {
        ack: bool,
        params: &'a [u8],
    },
    Ping {
        ack: bool,
        data: [u8; 8],
    },
    GoAway {
        last_stream_id: u32,
        code: u32,
    },
    WindowUpdate {
        stream_id: u32,
        increment: u32,
    },
    Continuation {
        stream_id: u32,
        block: &'a [u8],
        end_headers: bool,
    },
    /// A type this endpoint does not know: ignored (§4.1, §5.5).
    Unknown {
        kind: u8,
        stream_id: u32,
    },
}

/// What [`parse`] found at the start of the input.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed<'a> {
    /// The input ends inside a frame.
    NeedMore,
    /// A frame and the bytes it took.
    Frame(Frame<'a>, usize),
    /// A frame that breaks a rule, and the bytes it took (a stream error
    /// leaves the connection usable past it; after a connection error
    /// nothing more is read).
    Error(FrameError, usize),
}

/// The settings in a checked SETTINGS payload: (identifier, value).
pub fn settings(params: &[u8]) -> impl Iterator<Item = (u16, u32)> + '_ {
    params.chunks_exact(6).map(|c| {
        (
            u16::from_be_bytes([c[0], c[1]]),
            u32::from_be_bytes([c[2], c[3], c[4], c[5]]),
        )
    })
}

/// Parses one frame from the start of `buf`, accepting payloads up to
/// `max_frame_size` (our SETTINGS_MAX_FRAME_SIZE).
pub fn parse<'a>(buf: &'a [u8], max_frame_size: u32) -> Parsed<'a> {
    use ErrorCode::*;
    use FrameError::{Connection, Stream};
    let Some(head) = buf.first_chunk::<HEADER_LEN>() else {
        return Parsed::NeedMore;
    };
    let h = FrameHeader::parse(head);
    if h.len > max_frame_size {
        // §4.2: any frame could be one that alters the connection's state
        // (a HEADERS block, a SETTINGS): always a connection error.
        return Parsed::Error(Connection(FrameSizeError), 0);
    }
    let total = HEADER_LEN + h.len as usize;
    let Some(payload) = buf.get(HEADER_LEN..total) else {
        return Parsed::NeedMore;
    };
    let id = h.stream_id;
    let err = |e| Parsed::Error(e, total);
    let on_stream = |ok: Frame<'a>| -> Parsed<'a> {
        if id == 0 {
            Parsed::Error(Connection(ProtocolError), total)
        } else {
            Parsed::Frame(ok, total)
        }
    };
    match h.kind {
        kind::DATA => match unpad(payload, h.flags) {
            Some(data) => on_stream(Frame::Data {
                stream_id: id,
                data,
                flow_len: h.len,
                end_stream: h.flags & flag::END_STREAM != 0,
            }),
            None => err(Connection(ProtocolError)),
        },
        kind::HEADERS => {
            let Some(mut block) = unpad(payload, h.flags) else {
                return err(Connection(ProtocolError));
            };
            if id == 0 {
                return err(Connection(ProtocolError));
            }
            let mut self_dependent = false;
            if h.flags & flag::PRIORITY != 0 {
                let Some((p, rest)) = block.split_first_chunk::<5>() else {
                    return err(Connection(FrameSizeError));
                };
                self_dependent = priority(p).dependency == id;
                block = rest;
            }
            Parsed::Frame(
                Frame::Headers {
                    stream_id: id,
                    block,
                    end_stream: h.flags & flag::END_STREAM != 0,
                    end_headers: h.flags & flag::END_HEADERS != 0,
                    self_dependent,
                },
                total,
            )
        }
        kind::PRIORITY => {
            if id == 0 {
                err(Connection(ProtocolError))
            } else if let Ok(p) = <&[u8; 5]>::try_from(payload) {
                if priority(p).dependency == id {
                    err(Stream(id, ProtocolError))
                } else {
                    Parsed::Frame(Frame::Priority { stream_id: id }, total)
                }
            } else {
                err(Stream(id, FrameSizeError))
            }
        }
        kind::RST_STREAM => match <[u8; 4]>::try_from(payload) {
            Ok(c) => on_stream(Frame::RstStream {
                stream_id: id,
                code: u32::from_be_bytes(c),
            }),
            Err(_) => err(Connection(FrameSizeError)),
        },
        kind::SETTINGS => {
            let ack = h.flags & flag::ACK != 0;
            if id != 0 {
                err(Connection(ProtocolError))
            } else if (ack && !payload.is_empty()) || payload.len() % 6 != 0 {
                err(Connection(FrameSizeError))
            } else if let Some(e) = settings(payload).find_map(|(k, v)| bad_setting(k, v)) {
                err(Connection(e))
            } else {
                Parsed::Frame(
                    Frame::Settings {
                        ack,
                        params: payload,
                    },
                    total,
                )
            }
        }
        // §8.4: a client cannot push.
        kind::PUSH_PROMISE => err(Connection(ProtocolError)),
        kind::PING => {
            if id != 0 {
                err(Connection(ProtocolError))
            } else if let Ok(data) = <[u8; 8]>::try_from(payload) {
                Parsed::Frame(
                    Frame::Ping {
                        ack: h.flags & flag::ACK != 0,
                        data,
                    },
                    total,
                )
            } else {
                err(Connection(FrameSizeError))
            }
        }
        kind::GOAWAY => {
            if id != 0 {
                err(Connection(ProtocolError))
            } else if let Some((a, rest)) = payload.split_first_chunk::<4>() {
                match rest.first_chunk::<4>() {
                    Some(c) => Parsed::Frame(
                        Frame::GoAway {
                            last_stream_id: u32::from_be_bytes(*a) & MAX_WINDOW,
                            code: u32::from_be_bytes(*c),
                        },
                        total,
                    ),
                    None => err(Connection(FrameSizeError)),
                }
            } else {
                err(Connection(FrameSizeError))
            }
        }
        kind::WINDOW_UPDATE => match <[u8; 4]>::try_from(payload) {
            Err(_) => err(Connection(FrameSizeError)),
            Ok(c) => {
                let increment = u32::from_be_bytes(c) & MAX_WINDOW;
                match (increment, id) {
                    (0, 0) => err(Connection(ProtocolError)),
                    (0, _) => err(Stream(id, ProtocolError)),
                    _ => Parsed::Frame(
                        Frame::WindowUpdate {
                            stream_id: id,
                            increment,
                        },
                        total,
                    ),
                }
            }
        },
        kind::CONTINUATION => on_stream(Frame::Continuation {
            stream_id: id,
            block: payload,
            end_headers: h.flags & flag::END_HEADERS != 0,
        }),
        k => Parsed::Frame(
            Frame::Unknown {
                kind: k,
                stream_id: id,
            },
            total,
        ),
    }
}

/// A payload without its padding (§6.1): None when the pad length leaves
/// no room (a PROTOCOL_ERROR).
fn unpad(payload: &[u8], flags: u8) -> Option<&[u8]> {
    if flags & flag::PADDED == 0 {
        return Some(payload);
    }
    let (&pad, rest) = payload.split_first()?;
    rest.len()
        .checked_sub(usize::from(pad))
        .map(|end| &rest[..end])
}

fn priority(p: &[u8; 5]) -> Priority {
    let d = u32::from_be_bytes([p[0], p[1], p[2], p[3]]);
    Priority {
        exclusive: d & !MAX_WINDOW != 0,
        dependency: d & MAX_WINDOW,
        weight: p[4],
    }
}

/// The error a setting's value is, if any (§6.5.2).
fn bad_setting(id: u16, value: u32) -> Option<ErrorCode> {
    match id {
        setting::ENABLE_PUSH if value > 1 => Some(ErrorCode::ProtocolError),
        setting::INITIAL_WINDOW_SIZE if value > MAX_WINDOW => Some(ErrorCode::FlowControlError),
        setting::MAX_FRAME_SIZE if !(MIN_MAX_FRAME_SIZE..=MAX_MAX_FRAME_SIZE).contains(&value) => {
            Some(ErrorCode::ProtocolError)
        }
        _ => None,
    }
}

// Encoders: each appends one frame to `out`.

fn put_header(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream_id: u32) {
    out.extend_from_slice(
        &FrameHeader {
            len: len as u32,
            kind,
            flags,
            stream_id,
        }
        .encode(),
    );
}

/// SETTINGS with these (identifier, value) pairs.
pub fn put_settings(out: &mut Vec<u8>, params: &[(u16, u32)]) {
    put_header(out, params.len() * 6, kind::SETTINGS, 0, 0);
    for (k, v) in params {
        out.extend_from_slice(&k.to_be_bytes());
        out.extend_from_slice(&v.to_be_bytes());
    }
}

pub fn put_settings_ack(out: &mut Vec<u8>) {
    put_header(out, 0, kind::SETTINGS, flag::ACK, 0);
}

pub fn put_ping_ack(out: &mut Vec<u8>, data: &[u8; 8]) {
    put_header(out, 8, kind::PING, flag::ACK, 0);
    out.extend_from_slice(data);
}

pub fn put_goaway(out: &mut Vec<u8>, last_stream_id: u32, code: ErrorCode) {
    put_header(out, 8, kind::GOAWAY, 0, 0);
    out.extend_from_slice(&last_stream_id.to_be_bytes());
    out.extend_from_slice(&(code as u32).to_be_bytes());
}

pub fn put_rst_stream(out: &mut Vec<u8>, stream_id: u32, code: ErrorCode) {
    put_header(out, 4, kind::RST_STREAM, 0, stream_id);
    out.extend_from_slice(&(code as u32).to_be_bytes());
}

pub fn put_window_update(out: &mut Vec<u8>, stream_id: u32, increment: u32) {
    debug_assert!(increment > 0 && increment <= MAX_WINDOW);
    put_header(out, 4, kind::WINDOW_UPDATE, 0, stream_id);
    out.extend_from_slice(&increment.to_be_bytes());
}

/// HEADERS carrying `block`, split into CONTINUATION frames of at most
/// `max_frame_size` bytes each.
pub fn put_headers(
    out: &mut Vec<u8>,
    stream_id: u32,
    block: &[u8],
    end_stream: bool,
    max_frame_size: u32,
) {
    let max = max_frame_size as usize;
    let mut chunks = block.chunks(max).peekable();
    let first = chunks.next().unwrap_or(&[]);
    let mut flags = if end_stream { flag::END_STREAM } else { 0 };
    if chunks.peek().is_none() {
        flags |= flag::END_HEADERS;
    }
    put_header(out, first.len(), kind::HEADERS, flags, stream_id);
    out.extend_from_slice(first);
    while let Some(c) = chunks.next() {
        let flags = if chunks.peek().is_none() {
            flag::END_HEADERS
        } else {
            0
        };
        put_header(out, c.len(), kind::CONTINUATION, flags, stream_id);
        out.extend_from_slice(c);
    }
}

/// A DATA frame's header alone: `len` payload bytes follow it, written by
/// the driver from wherever they are.
pub fn data_header(stream_id: u32, len: u32, end_stream: bool) -> [u8; HEADER_LEN] {
    FrameHeader {
        len,
        kind: kind::DATA,
        flags: if end_stream { flag::END_STREAM } else { 0 },
        stream_id,
    }
    .encode()
}

#[cfg(test)]
mod tests;
