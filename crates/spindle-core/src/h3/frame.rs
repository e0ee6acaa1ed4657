//! HTTP/3 frames (RFC 9114 §7), the QUIC variable-length integers they are
//! made of (RFC 9000 §16), unidirectional stream types (§6.2) and error
//! codes (§8.1).
//!
//! [`parse`] takes a stream's buffered bytes, which may end inside a frame
//! (then it asks for more), and returns one frame, borrowing its payload,
//! or the error it is. Each error it finds ends the connection (§7.1,
//! §7.2.4, §7.2.8; an over-long frame too, whose payload could only be
//! skipped unread), so an error carries only its code. It checks
//! what the frame alone shows: its type (HTTP/2's are refused), its length
//! against [`MAX_FRAME_PAYLOAD`] (decided from the header, before the
//! payload is buffered), and its payload's exact shape (§7.1: a payload
//! with bytes missing or left over is H3_FRAME_ERROR). What depends on the
//! stream (which frames a control or request stream may carry, SETTINGS
//! first and once on the control stream) is the connection's;
//! [`Frame::allowed_from_client`] says what §7.2 allows where.
//!
//! DATA is never buffered whole: request bodies are read only to be
//! dropped here, and one may be gigabytes, so [`parse`] takes DATA's header
//! alone and reports the payload's length, which the caller consumes as it
//! arrives. Unknown and reserved frame types (§9) are passed over the same
//! way, so a peer's grease frames cost nothing however long they are.

use super::qpack::MAX_FIELD_SECTION_SIZE;

/// Largest value a varint holds (2^62 - 1).
pub const VARINT_MAX: u64 = (1 << 62) - 1;

/// Most bytes one varint takes.
pub const MAX_VARINT_LEN: usize = 8;

/// Most bytes a frame header takes: a type and a length, each a varint.
pub const MAX_HEADER_LEN: usize = 2 * MAX_VARINT_LEN;

/// Most bytes a DATA frame's header takes: its one-byte type and a length.
pub const MAX_DATA_HEADER_LEN: usize = 1 + MAX_VARINT_LEN;

/// Largest payload of a frame that is buffered whole (every type but DATA
/// and the unknown ones): a HEADERS frame's encoded field section, whose
/// decoded size [`MAX_FIELD_SECTION_SIZE`] bounds, fits with room to spare
/// (an encoded field is rarely larger than its decoded size). A longer
/// frame is H3_EXCESSIVE_LOAD from its header alone, so a peer cannot
/// make a stream buffer more than this.
pub const MAX_FRAME_PAYLOAD: u64 = 64 << 10;

/// Most settings one SETTINGS frame may carry: a client sends a handful
/// (the three of §7.2.4.1 and RFC 9204, a few extensions' and a reserved
/// one or two), and each is compared with those before it to find
/// duplicates, so the count bounds that work. More is H3_EXCESSIVE_LOAD.
pub const MAX_SETTINGS: usize = 64;

/// Frame types (§7.2, §11.2.1).
pub mod kind {
    pub const DATA: u64 = 0x0;
    pub const HEADERS: u64 = 0x1;
    pub const CANCEL_PUSH: u64 = 0x3;
    pub const SETTINGS: u64 = 0x4;
    pub const PUSH_PROMISE: u64 = 0x5;
    pub const GOAWAY: u64 = 0x7;
    pub const MAX_PUSH_ID: u64 = 0xd;
    /// HTTP/2's PRIORITY, PING, WINDOW_UPDATE and CONTINUATION: reserved
    /// and never sent in HTTP/3 (§7.2.8); receiving one is
    /// H3_FRAME_UNEXPECTED.
    pub const HTTP2_ONLY: [u64; 4] = [0x2, 0x6, 0x8, 0x9];
}

/// Setting identifiers (§7.2.4.1, RFC 9204 §5).
pub mod setting {
    pub const QPACK_MAX_TABLE_CAPACITY: u64 = 0x1;
    pub const MAX_FIELD_SECTION_SIZE: u64 = 0x6;
    pub const QPACK_BLOCKED_STREAMS: u64 = 0x7;
    /// HTTP/2's ENABLE_PUSH, MAX_CONCURRENT_STREAMS, INITIAL_WINDOW_SIZE
    /// and MAX_FRAME_SIZE: reserved (§7.2.4.1); receiving one is
    /// H3_SETTINGS_ERROR.
    pub const HTTP2_ONLY: std::ops::RangeInclusive<u64> = 0x2..=0x5;
}

/// Unidirectional stream types (§6.2, RFC 9204 §4.2): the varint that
/// opens each such stream.
pub mod stream_type {
    pub const CONTROL: u64 = 0x00;
    pub const PUSH: u64 = 0x01;
    pub const QPACK_ENCODER: u64 = 0x02;
    pub const QPACK_DECODER: u64 = 0x03;
}

/// The settings we send on our control stream: no QPACK dynamic table, so
/// no stream ever waits for one (see `qpack`), and our limit on a
/// request's field section. The first two are the defaults (RFC 9204 §5);
/// they are sent anyway, so a capture shows them.
pub const OUR_SETTINGS: [(u64, u64); 3] = [
    (setting::QPACK_MAX_TABLE_CAPACITY, 0),
    (setting::QPACK_BLOCKED_STREAMS, 0),
    (
        setting::MAX_FIELD_SECTION_SIZE,
        MAX_FIELD_SECTION_SIZE as u64,
    ),
];

/// Error codes (§8.1, RFC 9204 §6): the application error codes of QUIC's
/// CONNECTION_CLOSE and RESET_STREAM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
pub enum ErrorCode {
    NoError = 0x100,
    GeneralProtocolError = 0x101,
    InternalError = 0x102,
    StreamCreationError = 0x103,
    ClosedCriticalStream = 0x104,
    FrameUnexpected = 0x105,
    FrameError = 0x106,
    ExcessiveLoad = 0x107,
    IdError = 0x108,
    SettingsError = 0x109,
    MissingSettings = 0x10a,
    RequestRejected = 0x10b,
    RequestCancelled = 0x10c,
    RequestIncomplete = 0x10d,
    MessageError = 0x10e,
    ConnectError = 0x10f,
    VersionFallback = 0x110,
    QpackDecompressionFailed = 0x200,
    QpackEncoderStreamError = 0x201,
    QpackDecoderStreamError = 0x202,
}

impl ErrorCode {
    /// The code as it goes on the wire.
    pub fn code(self) -> u64 {
        self as u64
    }
}

/// Whether `v` is of the form 0x1f * N + 0x21: reserved frame types,
/// setting identifiers, stream types and error codes (§7.2.8, §7.2.4.1,
/// §6.2.3, §8.1), which exist to be sent and ignored ("greasing").
pub fn is_reserved(v: u64) -> bool {
    v >= 0x21 && (v - 0x21).is_multiple_of(0x1f)
}

/// What a unidirectional stream is, by the type that opens it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UniStream {
    Control,
    /// Server to client only: a server that receives one closes the
    /// connection with H3_STREAM_CREATION_ERROR (§6.2.2).
    Push,
    QpackEncoder,
    QpackDecoder,
    /// A reserved type (§6.2.3): read and dropped, or the stream stopped
    /// with H3_STREAM_CREATION_ERROR, never an error of the connection.
    Reserved,
    /// Any other type: handled as a reserved one (§6.2, §9).
    Unknown(u64),
}

/// Classifies a unidirectional stream's type.
pub fn classify_stream(t: u64) -> UniStream {
    match t {
        stream_type::CONTROL => UniStream::Control,
        stream_type::PUSH => UniStream::Push,
        stream_type::QPACK_ENCODER => UniStream::QpackEncoder,
        stream_type::QPACK_DECODER => UniStream::QpackDecoder,
        t if is_reserved(t) => UniStream::Reserved,
        t => UniStream::Unknown(t),
    }
}

// Varints (RFC 9000 §16): the two high bits of the first byte give the
// length (1, 2, 4 or 8 bytes), the other 62 bits, big-endian, the value.

/// Decodes a varint from the start of `buf`: its value and the bytes it
/// took, or `None` when `buf` ends inside it. Any encoding is accepted,
/// not only the shortest (RFC 9000 §16 allows longer ones).
pub fn decode_varint(buf: &[u8]) -> Option<(u64, usize)> {
    let first = *buf.first()?;
    let len = 1usize << (first >> 6);
    let bytes = buf.get(1..len)?;
    let v = bytes
        .iter()
        .fold(u64::from(first & 0x3f), |v, &b| (v << 8) | u64::from(b));
    Some((v, len))
}

/// Bytes the shortest encoding of `v` takes (`v` at most [`VARINT_MAX`]).
pub fn varint_len(v: u64) -> usize {
    match v {
        0..=0x3f => 1,
        0x40..=0x3fff => 2,
        0x4000..=0x3fff_ffff => 4,
        _ => 8,
    }
}

/// A varint's bytes, on the stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Varint {
    bytes: [u8; MAX_VARINT_LEN],
    len: u8,
}

impl Varint {
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

/// The shortest encoding of `v`, or `None` when it is over
/// [`VARINT_MAX`].
pub fn varint(v: u64) -> Option<Varint> {
    if v > VARINT_MAX {
        return None;
    }
    let len = varint_len(v);
    let mut bytes = [0u8; MAX_VARINT_LEN];
    bytes[..len].copy_from_slice(&v.to_be_bytes()[MAX_VARINT_LEN - len..]);
    bytes[0] |= (len.trailing_zeros() as u8) << 6;
    Some(Varint {
        bytes,
        len: len as u8,
    })
}

/// Appends the shortest encoding of `v`.
///
/// # Panics
///
/// When `v` is over [`VARINT_MAX`]: every value this server sends (a
/// length, a stream or push ID, a setting) is below it by construction,
/// and a frame is better not written than written wrong.
pub fn put_varint(out: &mut Vec<u8>, v: u64) {
    let Some(b) = varint(v) else {
        panic!("{v} is over the largest varint");
    };
    out.extend_from_slice(b.as_bytes());
}

/// A validated SETTINGS payload (§7.2.4): whole (identifier, value)
/// pairs, no HTTP/2 identifier, no identifier twice, at most
/// [`MAX_SETTINGS`] of them. Read with [`Settings::iter`] or
/// [`Settings::get`]; nothing is copied out of the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings<'a> {
    payload: &'a [u8],
}

impl<'a> Settings<'a> {
    fn parse(payload: &'a [u8]) -> Result<Settings<'a>, ErrorCode> {
        let mut pos = 0;
        let mut count = 0;
        while pos < payload.len() {
            let (id, _, n) = pair(&payload[pos..]).ok_or(ErrorCode::FrameError)?;
            count += 1;
            if count > MAX_SETTINGS {
                return Err(ErrorCode::ExcessiveLoad);
            }
            // §7.2.4: a duplicate MAY be an error; it is one here, so no
            // peer can make two values of one setting mean anything.
            let before = Settings {
                payload: &payload[..pos],
            };
            if setting::HTTP2_ONLY.contains(&id) || before.get(id).is_some() {
                return Err(ErrorCode::SettingsError);
            }
            pos += n;
        }
        Ok(Settings { payload })
    }

    /// The (identifier, value) pairs, in the frame's order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + 'a {
        let mut rest = self.payload;
        std::iter::from_fn(move || {
            let (id, value, n) = pair(rest)?;
            rest = &rest[n..];
            Some((id, value))
        })
    }

    /// The value of setting `id`, if the frame carries it.
    pub fn get(&self, id: u64) -> Option<u64> {
        self.iter().find(|&(k, _)| k == id).map(|(_, v)| v)
    }

    /// How many settings the frame carries.
    pub fn len(&self) -> usize {
        self.iter().count()
    }

    pub fn is_empty(&self) -> bool {
        self.payload.is_empty()
    }
}

/// The (identifier, value) pair at the start of `buf` and the bytes it
/// takes, or `None` if `buf` ends inside it.
fn pair(buf: &[u8]) -> Option<(u64, u64, usize)> {
    let (id, a) = decode_varint(buf)?;
    let (value, b) = decode_varint(&buf[a..])?;
    Some((id, value, a + b))
}

/// A parsed frame, its payload borrowed from the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// DATA's header: `len` payload bytes follow, which the caller
    /// consumes as they arrive.
    Data {
        len: u64,
    },
    /// HEADERS: an encoded field section (see `qpack`).
    Headers(&'a [u8]),
    /// CANCEL_PUSH: a push ID.
    CancelPush(u64),
    Settings(Settings<'a>),
    /// PUSH_PROMISE: server to client only; a server that receives one
    /// closes with H3_FRAME_UNEXPECTED (§7.2.5).
    PushPromise {
        push_id: u64,
        section: &'a [u8],
    },
    /// GOAWAY: a stream ID from a server, a push ID from a client.
    Goaway(u64),
    MaxPushId(u64),
    /// A reserved or unknown type (§9): `len` payload bytes follow, to be
    /// passed over unread.
    Unknown {
        kind: u64,
        len: u64,
    },
}

/// Which stream a frame came on, for [`Frame::allowed_from_client`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    Control,
    Request,
}

impl Frame<'_> {
    /// Payload bytes that follow the header [`parse`] took: DATA's and an
    /// unknown frame's; 0 for the others, which were taken whole.
    pub fn payload_follows(&self) -> u64 {
        match *self {
            Frame::Data { len } | Frame::Unknown { len, .. } => len,
            _ => 0,
        }
    }

    /// Whether a client may send this frame on this stream (§7.2's
    /// table); one it may not is H3_FRAME_UNEXPECTED. That SETTINGS comes
    /// first on the control stream and only once is the caller's to check
    /// (§6.2.1, §7.2.4).
    pub fn allowed_from_client(&self, on: StreamKind) -> bool {
        match self {
            Frame::Data { .. } | Frame::Headers(_) => on == StreamKind::Request,
            Frame::CancelPush(_) | Frame::Settings(_) | Frame::Goaway(_) | Frame::MaxPushId(_) => {
                on == StreamKind::Control
            }
            Frame::PushPromise { .. } => false,
            Frame::Unknown { .. } => true,
        }
    }
}

/// What [`parse`] found at the start of the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed<'a> {
    /// The input ends inside a frame (or, for DATA and unknown types,
    /// inside its header).
    NeedMore,
    /// A frame and the bytes it took: all of it, except for DATA and
    /// unknown types, whose header alone is taken
    /// ([`Frame::payload_follows`]).
    Frame(Frame<'a>, usize),
    /// A connection error (§8): nothing more is read.
    Error(ErrorCode),
}

/// Parses one frame from the start of `buf`.
pub fn parse(buf: &[u8]) -> Parsed<'_> {
    let Some((kind, a)) = decode_varint(buf) else {
        return Parsed::NeedMore;
    };
    if kind::HTTP2_ONLY.contains(&kind) {
        return Parsed::Error(ErrorCode::FrameUnexpected);
    }
    let Some((len, b)) = decode_varint(&buf[a..]) else {
        return Parsed::NeedMore;
    };
    let head = a + b;
    match kind {
        kind::DATA => return Parsed::Frame(Frame::Data { len }, head),
        kind::HEADERS
        | kind::CANCEL_PUSH
        | kind::SETTINGS
        | kind::PUSH_PROMISE
        | kind::GOAWAY
        | kind::MAX_PUSH_ID => {}
        _ => return Parsed::Frame(Frame::Unknown { kind, len }, head),
    }
    if let Some(e) = bad_length(kind, len) {
        return Parsed::Error(e);
    }
    // `len` is at most MAX_FRAME_PAYLOAD here: no overflow.
    let total = head + len as usize;
    let Some(payload) = buf.get(head..total) else {
        return Parsed::NeedMore;
    };
    match whole_frame(kind, payload) {
        Ok(f) => Parsed::Frame(f, total),
        Err(e) => Parsed::Error(e),
    }
}

/// The error a buffered frame's declared length is, seen before its
/// payload: over our limit, or not what a one-varint payload can be.
fn bad_length(kind: u64, len: u64) -> Option<ErrorCode> {
    let one_varint = matches!(kind, kind::CANCEL_PUSH | kind::GOAWAY | kind::MAX_PUSH_ID);
    if one_varint && !(1..=MAX_VARINT_LEN as u64).contains(&len) {
        Some(ErrorCode::FrameError)
    } else if len > MAX_FRAME_PAYLOAD {
        Some(ErrorCode::ExcessiveLoad)
    } else {
        None
    }
}

/// A buffered frame of a known type other than DATA, from its payload.
fn whole_frame(kind: u64, payload: &[u8]) -> Result<Frame<'_>, ErrorCode> {
    match kind {
        kind::HEADERS => Ok(Frame::Headers(payload)),
        kind::SETTINGS => Settings::parse(payload).map(Frame::Settings),
        kind::PUSH_PROMISE => {
            let (push_id, n) = decode_varint(payload).ok_or(ErrorCode::FrameError)?;
            Ok(Frame::PushPromise {
                push_id,
                section: &payload[n..],
            })
        }
        kind::CANCEL_PUSH => only_varint(payload).map(Frame::CancelPush),
        kind::GOAWAY => only_varint(payload).map(Frame::Goaway),
        _ => {
            debug_assert_eq!(kind, kind::MAX_PUSH_ID);
            only_varint(payload).map(Frame::MaxPushId)
        }
    }
}

/// A payload that is exactly one varint (§7.1: nothing missing, nothing
/// left over).
fn only_varint(payload: &[u8]) -> Result<u64, ErrorCode> {
    match decode_varint(payload) {
        Some((v, n)) if n == payload.len() => Ok(v),
        _ => Err(ErrorCode::FrameError),
    }
}

// Encoders: each appends one frame to `out`, but `data_header`, which
// returns DATA's header for the driver to send before the payload.

fn put_header(out: &mut Vec<u8>, kind: u64, len: usize) {
    put_varint(out, kind);
    put_varint(out, len as u64);
}

/// HEADERS carrying an encoded field section.
pub fn put_headers(out: &mut Vec<u8>, section: &[u8]) {
    put_header(out, kind::HEADERS, section.len());
    out.extend_from_slice(section);
}

/// SETTINGS with these (identifier, value) pairs.
pub fn put_settings(out: &mut Vec<u8>, params: &[(u64, u64)]) {
    let len = params
        .iter()
        .map(|&(k, v)| varint_len(k) + varint_len(v))
        .sum();
    put_header(out, kind::SETTINGS, len);
    for &(k, v) in params {
        put_varint(out, k);
        put_varint(out, v);
    }
}

/// SETTINGS with [`OUR_SETTINGS`]: the first frame on our control stream.
pub fn put_our_settings(out: &mut Vec<u8>) {
    put_settings(out, &OUR_SETTINGS);
}

/// GOAWAY naming `id`: from a server, the first request stream it will not
/// process (§5.2).
pub fn put_goaway(out: &mut Vec<u8>, id: u64) {
    put_header(out, kind::GOAWAY, varint_len(id));
    put_varint(out, id);
}

/// A DATA frame's header, on the stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataHeader {
    bytes: [u8; MAX_DATA_HEADER_LEN],
    len: u8,
}

impl DataHeader {
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

/// A DATA frame's header alone: `len` payload bytes follow it, written by
/// the driver from wherever they are (a file, a buffer).
///
/// # Panics
///
/// When `len` is over [`VARINT_MAX`] (4 EiB: a driver sends a file in
/// pieces far smaller).
pub fn data_header(len: u64) -> DataHeader {
    let Some(l) = varint(len) else {
        panic!("a DATA frame of {len} bytes");
    };
    let mut bytes = [0u8; MAX_DATA_HEADER_LEN];
    bytes[0] = kind::DATA as u8;
    let l = l.as_bytes();
    bytes[1..1 + l.len()].copy_from_slice(l);
    DataHeader {
        bytes,
        len: 1 + l.len() as u8,
    }
}

#[cfg(test)]
mod tests;
