//! One HTTP/3 connection, server side, without I/O (RFC 9114 §3-7, with
//! QPACK's streams, RFC 9204 §4.2-4.4), modelled on [`crate::h2::conn`].
//!
//! QUIC itself (packets, TLS, loss recovery, flow control, stream ids and
//! their limits) is the driver's, through quinn-proto; this state machine
//! sees QUIC *streams*. The driver hands it what arrives on each stream
//! the client opened ([`H3Conn::recv`], with the FIN), and the client's
//! RESET_STREAM ([`H3Conn::stream_reset`]) and STOP_SENDING
//! ([`H3Conn::stop_sending`]); it takes back events ([`H3Conn::poll_event`]:
//! requests, streams to reset or stop, Close with an error code) and the
//! bytes to write on each stream ([`H3Conn::writable`], [`H3Conn::out`],
//! [`H3Conn::advance_out`]), a FIN after them when [`Out::fin`] says so.
//!
//! ```text
//!  driver (quinn-proto)                         H3Conn
//!  open a uni stream ───── control_opened(id) ─▶ our control stream: type, SETTINGS
//!  stream data/FIN ─────── recv(id, bytes, fin) ▶ stream types, frames, QPACK, states, limits
//!  RESET_STREAM ────────── stream_reset(id, code)
//!  STOP_SENDING ────────── stop_sending(id, code)
//!                ◀──────── poll_event() ──────── Request | Reset | StopSending | GoAway | Close
//!  Request: decide (open the file ...)
//!                ───────── send_headers(id, status, fields, end_stream)
//!  body:         ───────── data_header(id, n) ──▶ its bytes; write them, then n file bytes
//!                ───────── finish(id)
//!  for id in writable(): write out(id).bytes, advance_out(id, n); FIN when out(id).fin
//!  shutdown() (drain, handover): GOAWAY, the streams in flight finish, then Close
//! ```
//!
//! Our unidirectional streams (§6.2): the control stream, which the
//! driver opens first of all and names with [`H3Conn::control_opened`];
//! its bytes (type 0x00, then SETTINGS, §6.2.1) wait in `out` until then.
//! QPACK's encoder and decoder streams are never opened: RFC 9204 §4.2
//! lets an encoder that will not use the dynamic table skip its encoder
//! stream, and a decoder whose table capacity is 0 (ours, `frame::
//! OUR_SETTINGS`) skip its decoder stream, and both hold here.
//!
//! The client's errors end in `Close` with their code (a connection
//! error, §8) or in `Reset` of one stream (a stream error): a malformed
//! request is H3_MESSAGE_ERROR on its stream alone (§4.1.2). Memory is
//! bounded: request streams by [`MAX_CONCURRENT_STREAMS`], the client's
//! unidirectional streams by [`MAX_UNI_STREAMS`], a stream's partial frame
//! by [`MAX_STREAM_BUFFER`] and all of them together by [`MAX_BUFFERED`],
//! a field section by QPACK's limits, and `recv` stops taking bytes while
//! the unwritten `out` bytes pass [`OUT_HIGH_WATER`] or
//! [`MAX_PENDING_EVENTS`] events wait (the driver drains both, then feeds
//! the rest). Request bodies are never buffered: DATA payloads are counted
//! as they pass and dropped, and response bodies never enter here (the
//! driver writes a file's bytes after each DATA header).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::frame::{self, put_goaway, put_headers, DataHeader, ErrorCode, MAX_FRAME_PAYLOAD};
use super::qpack::{self, Decoder};
use crate::fields::Packed;

mod recv;

/// A request on an HTTP/3 request stream (QUIC's 62-bit stream ids).
pub type Request = crate::stream_request::Request<u64>;

/// Most request streams open at once (the client's bidirectional streams,
/// counting those QUIC has opened but nothing has arrived on yet): the
/// driver gives quinn-proto the same number
/// (`TransportConfig::max_concurrent_bidi_streams`), so a client that
/// keeps to it never meets this one. HTTP/2's default (nginx's).
pub const MAX_CONCURRENT_STREAMS: usize =
    crate::h2::settings::DEFAULT_MAX_CONCURRENT_STREAMS as usize;

/// Most unidirectional streams of the client's open at once (also for
/// quinn-proto's `max_concurrent_uni_streams`): its control stream and
/// QPACK's two (§6.2: at least 3 must be allowed) stay open for the whole
/// connection; the rest are for the reserved types clients send to grease
/// the protocol (§6.2.3), which are stopped once their type is read.
pub const MAX_UNI_STREAMS: usize = 16;

/// Most bytes one stream holds of a frame not yet whole: the largest
/// frame that is buffered ([`frame::MAX_FRAME_PAYLOAD`], which bounds a
/// HEADERS frame's field section, itself checked against
/// `qpack::MAX_FIELD_SECTION_SIZE` once decoded) and its header. DATA
/// payloads are never held.
pub const MAX_STREAM_BUFFER: usize = frame::MAX_HEADER_LEN + MAX_FRAME_PAYLOAD as usize;

/// Most bytes all streams together hold of frames not yet whole. A client
/// with every request stream part-way through a HEADERS frame of a few
/// kilobytes stays far below it; one that sends the first bytes of large
/// frames on many streams and stalls would otherwise hold
/// [`MAX_STREAM_BUFFER`] per stream: past this it is H3_EXCESSIVE_LOAD
/// (§8.1, §10.5).
pub const MAX_BUFFERED: usize = 1 << 20;

/// `recv` takes no more frames while this many events wait (HTTP/2's).
pub const MAX_PENDING_EVENTS: usize = crate::h2::conn::MAX_PENDING_EVENTS;

/// `recv` takes no more frames while the streams' unwritten `out` bytes
/// pass this (HTTP/2's).
pub const OUT_HIGH_WATER: usize = crate::h2::conn::OUT_HIGH_WATER;

/// Buffers (a stream's partial frame, the decoded fields, the QPACK
/// encoding buffer) keep at most this much capacity once emptied.
const KEEP_CAPACITY: usize = 4096;

/// What the connection tells its driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A new request: answer it with `send_headers` (and `data_header`s,
    /// then `finish`).
    Request(Request),
    /// Abort the stream with `code` both ways it still goes: RESET_STREAM
    /// on our side, STOP_SENDING on the client's (RFC 9000 §3.5); a
    /// response the driver was sending on it is dropped. It may name a
    /// stream whose request the driver never saw (one refused, malformed,
    /// or cancelled before it was whole): QUIC still needs its sides
    /// closed for the stream to count as closed.
    Reset { stream_id: u64, code: ErrorCode },
    /// STOP_SENDING with `code` on the client's side of the stream alone:
    /// a unidirectional stream of a type we do not read (§6.2), or a
    /// request whose body we no longer want once the response has ended
    /// (H3_NO_ERROR, §4.1), which still goes out whole.
    StopSending { stream_id: u64, code: ErrorCode },
    /// The client's GOAWAY (§5.2): the first push ID it will refuse. It
    /// is closing; its requests in flight still get answers.
    GoAway { push_id: u64 },
    /// Close the connection: CONNECTION_CLOSE with this application error
    /// code (§8). H3_NO_ERROR after `shutdown`, once every stream is
    /// done: write what `out` holds on each stream first. Any other code
    /// is an error: nothing more is written.
    Close { code: ErrorCode },
}

/// Bytes to write on one stream, and whether a FIN follows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Out<'a> {
    pub bytes: &'a [u8],
    /// Once `bytes` are written (and `advance_out` says so), the stream
    /// is finished: the response is whole.
    pub fin: bool,
}

/// What a request stream has received (§4.1: HEADERS, then DATA frames,
/// then trailing HEADERS; frames of unknown types anywhere).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Recv {
    /// Before the request's HEADERS.
    Head,
    /// After them: DATA or the trailers may come.
    Body,
    /// After the trailers: no more DATA or HEADERS.
    Trailers,
    /// The client's FIN, every frame before it whole.
    Ended,
}

/// What a request stream's response side is at.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Reply {
    /// No request yet.
    Waiting,
    /// The request, held back until its body ends or passes
    /// `limits::MAX_DISCARD_BODY` (as HTTP/2 does), so the answer never
    /// races the upload.
    Held(Box<Request>),
    /// Handed out: `send_headers` is awaited.
    Handed,
    /// HEADERS sent: DATA frames follow, then `finish`.
    Body,
    /// Our side ended: a FIN follows what `out` holds.
    Done,
}

/// Payload bytes a stream is passing over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Skip {
    #[default]
    None,
    /// A DATA frame's, counted as request body (never 0).
    Body(u64),
    /// An unknown or reserved frame type's (never 0; §9).
    Unknown(u64),
}

/// A stream's frame reader: the first bytes of a frame that is not all
/// here yet, and the payload bytes still to pass over.
#[derive(Debug, Default)]
struct Reader {
    /// At most [`MAX_STREAM_BUFFER`] bytes, and only ever part of one
    /// frame.
    buf: Vec<u8>,
    skip: Skip,
}

#[derive(Debug)]
struct Stream {
    recv: Recv,
    reply: Reply,
    reader: Reader,
    content_length: Option<u64>,
    /// Bytes of the body that passed.
    received: u64,
}

/// One of the client's unidirectional streams (§6.2), while we read it.
/// A stream of a type we do not read leaves the map once stopped.
#[derive(Debug)]
enum Uni {
    /// Its type, a varint, not all here yet: the bytes so far.
    Type {
        bytes: [u8; frame::MAX_VARINT_LEN],
        len: u8,
    },
    /// Its control stream (§6.2.1).
    Control(Reader),
    /// Its QPACK encoder stream (RFC 9204 §4.2): only "Set Dynamic Table
    /// Capacity 0" may come on it.
    QpackEncoder,
    /// Its QPACK decoder stream: instructions read and dropped.
    QpackDecoder(DecoderStream),
}

/// Where the client's QPACK decoder stream is (RFC 9204 §4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DecoderStream {
    /// Between instructions.
    Start,
    /// Inside a Stream Cancellation's integer, this many continuation
    /// bytes in (RFC 9204 §4.1.1: 62 bits at most, so at most 9).
    Int(u8),
}

/// The client's control stream, as far as SETTINGS go (§6.2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PeerControl {
    /// Not opened yet (requests may come first; nothing waits for it).
    Absent,
    /// Opened; SETTINGS must be its first frame.
    AwaitingSettings,
    /// SETTINGS came: a second one is H3_FRAME_UNEXPECTED (§7.2.4).
    Ready,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Open,
    /// Our GOAWAY named this stream id (§5.2): requests on it and above
    /// are refused; Close when the last one below is done.
    Draining {
        goaway_id: u64,
    },
    /// `Close` was reported: nothing more is read or written.
    Closed,
}

/// The client's stream ids of one type (RFC 9000 §2.1, §3.2: opening
/// stream N opens every lower stream of its type, whose bytes may arrive
/// later). Each id below `next` is open (in the caller's map), a gap
/// (opened, nothing arrived yet) or done; one at or above is new.
#[derive(Debug)]
struct Ids {
    next: u64,
    gaps: BTreeSet<u64>,
}

/// What an id not in the caller's map is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arrival {
    New,
    Done,
    /// It would open more streams than [`Ids::arrive`]'s limit, which
    /// QUIC's stream limit (RFC 9000 §4.6) forbids: H3_ID_ERROR.
    TooFar,
}

impl Ids {
    /// Ids of the type whose lowest is `first` (0: client-initiated
    /// bidirectional, 2: unidirectional).
    fn new(first: u64) -> Ids {
        Ids {
            next: first,
            gaps: BTreeSet::new(),
        }
    }

    /// What `id` (not open) is; a new one above `next` leaves the ids it
    /// skips as gaps, at most `max` of them.
    fn arrive(&mut self, id: u64, max: usize) -> Arrival {
        debug_assert_eq!(id & 3, self.next & 3);
        if id < self.next {
            return if self.gaps.remove(&id) {
                Arrival::New
            } else {
                Arrival::Done
            };
        }
        let skipped = (id - self.next) / 4;
        if skipped > (max - self.gaps.len()) as u64 {
            return Arrival::TooFar;
        }
        self.gaps.extend((self.next..id).step_by(4));
        self.next = id + 4;
        debug_assert!(self.gaps.len() <= max);
        Arrival::New
    }
}

/// One HTTP/3 connection, server side.
#[derive(Debug)]
pub struct H3Conn {
    phase: Phase,
    streams: BTreeMap<u64, Stream>,
    bidi: Ids,
    unis: BTreeMap<u64, Uni>,
    uni_ids: Ids,
    peer_control: PeerControl,
    /// The client's last GOAWAY (a push ID: it may only shrink, §5.2).
    peer_goaway: Option<u64>,
    /// The client's MAX_PUSH_ID (it may only grow, §7.2.7).
    max_push_id: Option<u64>,
    decoder: Decoder,
    /// A field section's fields, decoded (empty between sections).
    fields: Packed,
    /// Bytes held in all readers' `buf`s.
    partial: usize,
    /// Our control stream: its id once the driver opened it, and its
    /// unwritten bytes.
    control_id: Option<u64>,
    control_out: Vec<u8>,
    /// Unwritten bytes (and FINs) of request streams.
    outs: BTreeMap<u64, Outbox>,
    /// Unwritten bytes in `control_out` and `outs`.
    out_len: usize,
    events: VecDeque<Event>,
    scratch: Vec<u8>,
}

/// A request stream's bytes still to write.
#[derive(Debug, Default)]
struct Outbox {
    bytes: Vec<u8>,
    start: usize,
    fin: bool,
}

impl Default for H3Conn {
    fn default() -> H3Conn {
        H3Conn::new()
    }
}

impl H3Conn {
    /// A connection whose control stream's bytes (its type and our
    /// SETTINGS, §6.2.1) wait for [`H3Conn::control_opened`].
    pub fn new() -> H3Conn {
        let mut control_out = Vec::new();
        frame::put_varint(&mut control_out, frame::stream_type::CONTROL);
        frame::put_our_settings(&mut control_out);
        H3Conn {
            phase: Phase::Open,
            streams: BTreeMap::new(),
            bidi: Ids::new(0),
            unis: BTreeMap::new(),
            uni_ids: Ids::new(2),
            peer_control: PeerControl::Absent,
            peer_goaway: None,
            max_push_id: None,
            decoder: Decoder::new(),
            fields: Packed::default(),
            partial: 0,
            control_id: None,
            out_len: control_out.len(),
            control_out,
            outs: BTreeMap::new(),
            events: VecDeque::new(),
            scratch: Vec::new(),
        }
    }

    /// The driver opened a unidirectional stream for our control stream
    /// (the first it opens, §6.2.1): what `out(stream_id)` holds goes on
    /// it, and it is never finished (closing it is a connection error).
    pub fn control_opened(&mut self, stream_id: u64) {
        assert_eq!(stream_id & 3, 3, "{stream_id} is not a server uni stream");
        assert!(self.control_id.is_none(), "a second control stream");
        self.control_id = Some(stream_id);
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Streams with bytes to write or a FIN to send: our control stream
    /// first, then request streams by id.
    pub fn writable(&self) -> impl Iterator<Item = u64> + '_ {
        let control = self.control_id.filter(|_| !self.control_out.is_empty());
        control.into_iter().chain(self.outs.keys().copied())
    }

    /// What to write on `stream_id` now: for a request stream, before any
    /// DATA header [`H3Conn::data_header`] returned since.
    pub fn out(&self, stream_id: u64) -> Out<'_> {
        if Some(stream_id) == self.control_id {
            return Out {
                bytes: &self.control_out,
                fin: false,
            };
        }
        match self.outs.get(&stream_id) {
            Some(o) => Out {
                bytes: &o.bytes[o.start..],
                fin: o.fin,
            },
            None => Out {
                bytes: &[],
                fin: false,
            },
        }
    }

    /// `n` bytes of `out(stream_id)` were written. When that is all of
    /// them and `out` said `fin`, the driver finishes the stream now.
    pub fn advance_out(&mut self, stream_id: u64, n: usize) {
        assert!(n <= self.out(stream_id).bytes.len(), "advanced past out");
        self.out_len -= n;
        if Some(stream_id) == self.control_id {
            self.control_out.drain(..n);
            if self.control_out.is_empty() {
                self.control_out = Vec::new();
            }
            return;
        }
        let Some(o) = self.outs.get_mut(&stream_id) else {
            return;
        };
        o.start += n;
        if o.start == o.bytes.len() {
            self.outs.remove(&stream_id);
        }
    }

    /// `Close` was reported: nothing more is read or written.
    pub fn is_closed(&self) -> bool {
        self.phase == Phase::Closed
    }

    /// Request streams open now.
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// Bytes the connection holds besides its fixed size (buffers, and
    /// the unwritten `out`), for a check that it stays bounded.
    pub fn buffered(&self) -> usize {
        let readers: usize = self.streams.values().map(|s| s.reader.buf.capacity()).sum();
        let control = match self.unis.values().find(|u| matches!(u, Uni::Control(_))) {
            Some(Uni::Control(r)) => r.buf.capacity(),
            _ => 0,
        };
        let outs: usize = self.outs.values().map(|o| o.bytes.capacity()).sum();
        readers
            + control
            + outs
            + self.control_out.capacity()
            + self.fields.capacity()
            + self.scratch.capacity()
    }

    /// Sends a response's HEADERS (the final status and fields; names are
    /// lowercased, and connection-specific fields must not be among them,
    /// §4.2). Returns false, sending nothing, when the stream is gone
    /// (reset since its request came) or has no request handed out.
    pub fn send_headers(
        &mut self,
        stream_id: u64,
        status: u16,
        fields: &[(&[u8], &[u8])],
        end_stream: bool,
    ) -> bool {
        self.headers_of(stream_id, status, fields.iter().copied(), end_stream)
    }

    /// [`H3Conn::send_headers`] for a response head the core made
    /// ([`crate::Fields`], names as written: QPACK lowercases them).
    pub fn send_fields(
        &mut self,
        stream_id: u64,
        status: u16,
        fields: &crate::Fields,
        end_stream: bool,
    ) -> bool {
        self.headers_of(stream_id, status, fields.iter(), end_stream)
    }

    fn headers_of<'f>(
        &mut self,
        stream_id: u64,
        status: u16,
        fields: impl Iterator<Item = (&'f [u8], &'f [u8])>,
        end_stream: bool,
    ) -> bool {
        if self.is_closed() {
            return false;
        }
        let Some(s) = self.streams.get_mut(&stream_id) else {
            return false;
        };
        match s.reply {
            Reply::Handed => {}
            Reply::Body | Reply::Done => panic!("stream {stream_id}: HEADERS twice"),
            Reply::Waiting | Reply::Held(_) => return false,
        }
        s.reply = if end_stream { Reply::Done } else { Reply::Body };
        self.scratch.clear();
        qpack::encode_section_prefix(&mut self.scratch);
        qpack::encode_status(status, &mut self.scratch);
        for (n, v) in fields {
            qpack::encode_field(n, v, &mut self.scratch);
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        self.write(stream_id, |out| put_headers(out, &scratch), end_stream);
        scratch.clear();
        if scratch.capacity() <= KEEP_CAPACITY {
            self.scratch = scratch;
        }
        if end_stream {
            self.settle(stream_id);
        }
        true
    }

    /// The header of a DATA frame of `len` bytes (§7.2.1) on `stream_id`:
    /// the driver writes `out(stream_id)` first, then these bytes, then
    /// exactly `len` bytes of the body, straight from the file (they never
    /// pass through here). QUIC's flow control is the driver's: a large
    /// `len` (a whole file) is one frame written over many calls. None,
    /// and nothing to write, when the stream is gone.
    pub fn data_header(&mut self, stream_id: u64, len: u64) -> Option<DataHeader> {
        assert!(len > 0, "an empty DATA frame");
        if self.is_closed() {
            return None;
        }
        let s = self.streams.get(&stream_id)?;
        (s.reply == Reply::Body).then(|| frame::data_header(len))
    }

    /// The response's body is all written (every DATA frame's bytes):
    /// the stream gets its FIN after `out`. Returns false when the stream
    /// is gone. If the request's body is still coming, the client is asked
    /// to stop sending it (STOP_SENDING with H3_NO_ERROR, §4.1).
    pub fn finish(&mut self, stream_id: u64) -> bool {
        if self.is_closed() {
            return false;
        }
        let Some(s) = self.streams.get_mut(&stream_id) else {
            return false;
        };
        assert_eq!(
            s.reply,
            Reply::Body,
            "stream {stream_id}: finish without a body"
        );
        s.reply = Reply::Done;
        self.write(stream_id, |_| {}, true);
        self.settle(stream_id);
        true
    }

    /// Aborts one stream with `code` (e.g. its file cannot be read after
    /// its HEADERS went out): an `Event::Reset` follows, to carry out as
    /// any other.
    pub fn reset(&mut self, stream_id: u64, code: ErrorCode) {
        if !self.is_closed() && self.streams.contains_key(&stream_id) {
            self.stream_error(stream_id, code);
        }
    }

    /// Ends the connection now: `Close` with `code`.
    pub fn close(&mut self, code: ErrorCode) {
        self.conn_error(code);
    }

    /// Graceful shutdown (drain, handover): GOAWAY on our control stream
    /// naming the first request stream we will not process (§5.2: the
    /// lowest client-initiated bidirectional id not seen yet; streams below
    /// it that QUIC opened but whose bytes are still on their way are
    /// still served). Requests on streams from it on are refused with
    /// H3_REQUEST_REJECTED (§4.1.1: safe to retry elsewhere); `Close`
    /// (H3_NO_ERROR) follows when the last stream in flight is done.
    /// One GOAWAY only, not §5.2's two-step close (a first GOAWAY of
    /// 2^62-4, then the real one): QUIC opens streams in order, so the id
    /// sent is exact for every stream whose bytes have arrived.
    pub fn shutdown(&mut self) {
        if self.phase != Phase::Open {
            return;
        }
        let goaway_id = self.bidi.next;
        self.put_control(|out| put_goaway(out, goaway_id));
        self.phase = Phase::Draining { goaway_id };
        self.maybe_done();
    }

    // State changes.

    /// Appends to `stream_id`'s unwritten bytes (and sets its FIN).
    fn write(&mut self, stream_id: u64, put: impl FnOnce(&mut Vec<u8>), fin: bool) {
        let o = self.outs.entry(stream_id).or_default();
        debug_assert!(!o.fin, "stream {stream_id}: bytes after the FIN");
        let before = o.bytes.len();
        put(&mut o.bytes);
        o.fin |= fin;
        self.out_len += o.bytes.len() - before;
    }

    fn put_control(&mut self, put: impl FnOnce(&mut Vec<u8>)) {
        let before = self.control_out.len();
        put(&mut self.control_out);
        self.out_len += self.control_out.len() - before;
    }

    /// A stream whose response has ended leaves the map: at once if the
    /// request's FIN came, else after asking the client to stop sending a
    /// body we no longer read (§4.1).
    fn settle(&mut self, id: u64) {
        let Some(s) = self.streams.get(&id) else {
            return;
        };
        if s.reply != Reply::Done {
            return;
        }
        if s.recv != Recv::Ended {
            self.events.push_back(Event::StopSending {
                stream_id: id,
                code: ErrorCode::NoError,
            });
        }
        self.remove(id);
        self.maybe_done();
    }

    /// Forgets a stream (its partial frame with it).
    fn remove(&mut self, id: u64) {
        if let Some(s) = self.streams.remove(&id) {
            self.partial -= s.reader.buf.len();
        }
    }

    /// A stream error: the stream is reset both ways with `code`, and
    /// what it had to write is dropped.
    fn stream_error(&mut self, id: u64, code: ErrorCode) {
        self.remove(id);
        if let Some(o) = self.outs.remove(&id) {
            self.out_len -= o.bytes.len() - o.start;
        }
        self.events.push_back(Event::Reset {
            stream_id: id,
            code,
        });
        self.maybe_done();
    }

    /// A connection error (§8): `Close` with `code`, and nothing more.
    fn conn_error(&mut self, code: ErrorCode) {
        if self.is_closed() {
            return;
        }
        self.phase = Phase::Closed;
        self.streams.clear();
        self.unis.clear();
        self.outs.clear();
        self.control_out = Vec::new();
        self.out_len = 0;
        self.partial = 0;
        self.events.push_back(Event::Close { code });
    }

    /// After our GOAWAY, Close once the last stream is done.
    fn maybe_done(&mut self) {
        if matches!(self.phase, Phase::Draining { .. }) && self.streams.is_empty() {
            self.phase = Phase::Closed;
            self.events.push_back(Event::Close {
                code: ErrorCode::NoError,
            });
        }
    }

    /// Past a bound: take no more frames until the driver drains.
    fn backed_up(&self) -> bool {
        self.out_len > OUT_HIGH_WATER || self.events.len() >= MAX_PENDING_EVENTS
    }
}

#[cfg(test)]
mod tests;
