//! HTTP/2 on a connection, above its bytes and below the loops, without
//! I/O: [`H2Link`] joins the protocol ([`spindle_core::h2::H2Conn`]) to
//! the streams' exchanges.
//!
//! Each stream is served by a connection slot of its own, a *stream
//! slot*, whose [`super::Life`] holds a [`Session::for_stream`] given the
//! request as the core's protocol-neutral request (built from the
//! stream's fields, never written out as HTTP/1.1 text). The loop opens,
//! reads and transmits for a stream slot as for any connection, with its
//! bodies read into buffers (as for HTTPS): the response's head goes as
//! HEADERS straight from its fields ([`H2Link::respond`]), and the body's
//! plaintext is handed to [`H2Link::write`] instead of a socket, to go as
//! DATA frames. The link frames what its streams hold
//! into one byte stream with [`H2Link::fill`], which the loop writes to
//! the socket (or to TLS): control frames and HEADERS first, then DATA,
//! fairly across streams (RFC 9218 urgency, round robin within one), each
//! frame within the peer's windows and frame size.
//!
//! ```text
//!  socket bytes ─▶ feed ─▶ H2Conn ─▶ Request ─▶ stream slot (Session::for_stream)
//!                                                   │ opens, READs (the loop)
//!  socket ◀─ fill ◀─ HEADERS ◀─ respond(status, fields) ◀┤
//!                 ◀─ DATA ◀──── write(body plaintext) ◀──┘
//! ```
//!
//! Backpressure is the TLS path's: a stream's `write` is reported sent at
//! once when nothing of that stream waits for window ([`Wrote::Now`]), so
//! its next chunk's read overlaps the framing; otherwise it is reported
//! once framed ([`Wrote::Later`], returned by `fill`). A stream holds at
//! most two chunks; a stream slot whose bytes never drain (a client that
//! never opens its window) times out on `send-timeout` like any response,
//! and is reset.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use spindle_core::h2::{ErrorCode, Event, H2Conn, H2Settings, Request};
use spindle_core::request::Request as CoreRequest;
use spindle_core::{Fields, Session};

use super::tls::Sink;
use super::Ticket;
use crate::tlsrec::{RecordLayout, RecordSlot, RecordSlots};

/// Framed bytes [`H2Link::fill`] adds in one call at most; the loop sends
/// them, then fills again. With one batch in flight and one queued, the
/// kernel (bounded by `net::TLS_NOTSENT_LOWAT` on HTTPS) always has the
/// next bytes of a download at hand: at 64 KiB it went idle between
/// batches, and the client woke for each (docs/decisions.md, "HTTPS send
/// queue"). A new stream's first frames wait behind at most two batches.
pub const FILL_BATCH: usize = 256 * 1024;

/// Received bytes a connection holds that `H2Conn::feed` has not taken
/// yet; beyond this the loop stops receiving until they are taken.
pub const MAX_UNFED: usize = 64 * 1024;

/// What a slot's socket speaks, or which HTTP/2 stream the slot serves;
/// `C` is the loop's own state of an HTTP/2 connection (its link and the
/// frames on their way to the socket).
pub enum Proto<C> {
    Http1,
    H2(Box<C>),
    /// A stream of the HTTP/2 connection `parent`; `ended`: its response
    /// is over and END_STREAM is queued.
    Stream {
        parent: Ticket,
        id: u32,
        ended: bool,
    },
    /// Request stream `id` of the worker's QUIC connection `conn`
    /// (`crate::quic::driver`): no slot stands for the connection, which
    /// lives in the worker's QUIC driver; `ended` as for HTTP/2.
    H3Stream {
        conn: usize,
        id: u64,
        ended: bool,
    },
}

impl<C> Proto<C> {
    /// A slot that serves one stream of a connection (HTTP/2 or HTTP/3),
    /// not a connection: it never does I/O on the socket it names.
    pub fn is_stream(&self) -> bool {
        matches!(self, Proto::Stream { .. } | Proto::H3Stream { .. })
    }

    pub fn is_h2(&self) -> bool {
        matches!(self, Proto::H2(_))
    }
}

/// An HTTP/2 connection: its link, whether it ends once
/// what is framed is out (GOAWAY was sent, or the drain finished its
/// streams), the clock of its flood budgets, and `out`, the loop's own
/// part (the frames on their way to the socket).
pub struct H2State<O> {
    pub link: H2Link,
    pub closing: bool,
    born: Instant,
    pub out: O,
}

impl<O> H2State<O> {
    pub fn new(link: H2Link, out: O, now: Instant) -> H2State<O> {
        H2State {
            link,
            closing: false,
            born: now,
            out,
        }
    }

    /// The link's clock: milliseconds since the connection turned HTTP/2.
    pub fn ms(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.born).as_millis() as u64
    }
}

/// How much of the preface identifies a client speaking HTTP/2: its
/// request line, `PRI * HTTP/2.0\r\n`. What follows is `H2Conn`'s to
/// check (a wrong rest is GOAWAY(PROTOCOL_ERROR)).
const PREFACE_LINE: usize = 16;

/// Whether the first bytes of a plain connection open HTTP/2's preface
/// (at least `PRI `, a method no HTTP/1.1 client of a file server sends).
pub fn is_preface(data: &[u8]) -> bool {
    let n = data.len().min(PREFACE_LINE);
    n >= 4 && data[..n] == spindle_core::h2::conn::PREFACE[..n]
}

/// An HTTP/2 connection's timeout from its last progress: `--send-timeout`
/// while its frames wait for the socket (the client reads nothing);
/// twice that while it has streams, which time out on their own first
/// (so that their RST_STREAM goes out); `--keepalive-timeout` when idle.
pub fn timeout(cfg: &crate::config::Config, socket_busy: bool, streams: usize) -> Duration {
    if socket_busy {
        cfg.send_timeout
    } else if streams > 0 {
        2 * cfg.send_timeout
    } else {
        cfg.keepalive_timeout
    }
}

/// What became of a stream slot's plaintext.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wrote {
    /// Taken, and nothing else of the stream waits: report it sent now.
    Now,
    /// Taken behind bytes still waiting for window: `fill` reports it.
    Later,
    /// The stream is gone (reset by the client, or the connection is
    /// closing): drop the response.
    Gone,
}

/// File bytes a loop read into one of its chunk buffers in record
/// layout (`RecordLayout` with a 9-byte prefix: each record's DATA frame
/// header): [`H2Link::write_held`] frames them where they lie, and the
/// loop's sink seals each record in place (or, in plaintext, sends the
/// frames as they are). The buffer is the link's until it hands it to
/// the sink ([`Sink::release`]) or back ([`H2Link::take_dropped`]).
pub struct Held {
    pub buf: u32,
    pub layout: RecordLayout,
    /// File bytes in the buffer, from its first record on.
    pub payload: usize,
}

/// DATA frame header bytes: each held record's prefix.
pub const DATA_PREFIX: usize = spindle_core::h2::frame::HEADER_LEN;

/// A stream's body on its way to DATA frames, in order.
enum Piece {
    /// Copied plaintext; `framed` of it is out.
    Bytes { data: Vec<u8>, framed: usize },
    /// A held chunk: its records from `slots` on; `cur`, a record a short
    /// window split (its rest goes by copy from `cur.1`).
    Held {
        buf: u32,
        slots: RecordSlots,
        cur: Option<(RecordSlot, usize)>,
        left: usize,
    },
}

impl Piece {
    fn left(&self) -> usize {
        match self {
            Piece::Bytes { data, framed } => data.len() - framed,
            Piece::Held { left, .. } => *left,
        }
    }
}

/// What the loop does for an event of the connection.
pub enum Todo {
    /// Serve this request on a new stream slot: give it to a session
    /// made by [`H2Link::session`], then [`H2Link::attach`] the slot.
    Serve {
        stream_id: u32,
        request: Box<CoreRequest>,
    },
    /// The client reset the stream: abort its slot (if it still has one).
    Abort(Ticket),
    /// The connection ends: write what is framed, then close.
    Close,
}

/// Where a stream's response is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Head {
    /// No response yet; `head_only`: the request was HEAD, so no body
    /// will follow its head.
    Awaited { head_only: bool },
    /// The response's head, kept until its first body bytes or its end
    /// (so that a response that fails before any byte is out can still be
    /// replaced by an error's: `Session::body_failed`).
    Pending {
        status: u16,
        fields: Fields,
        head_only: bool,
    },
    /// HEADERS went; DATA follows.
    Sent,
    /// HEADERS went with END_STREAM (HEAD, 204, 304): body bytes, if the
    /// slot writes any, are dropped.
    Final,
}

/// One stream's response on its way out.
struct StreamOut {
    slot: Ticket,
    head: Head,
    /// Body not yet framed, in order.
    body: VecDeque<Piece>,
    /// Plaintext taken with [`Wrote::Later`], reported once framed.
    owed: usize,
    /// The slot's response is over: END_STREAM follows its last bytes.
    ended: bool,
}

impl StreamOut {
    fn left(&self) -> usize {
        self.body.iter().map(Piece::left).sum()
    }
}

/// An HTTP/2 connection's protocol and its streams' output.
pub struct H2Link {
    pub conn: H2Conn,
    streams: HashMap<u32, StreamOut>,
    /// Streams whose bytes are all framed and whose response is over:
    /// an empty DATA frame with END_STREAM goes next.
    ending: VecDeque<u32>,
    /// Received bytes `feed` has not taken yet.
    unfed: Vec<u8>,
    /// The client, for each stream's session.
    client: Option<SocketAddr>,
    /// The connection is over TLS: so is each stream.
    tls: bool,
    /// Chunk buffers of streams that went: the loop's again.
    dropped: Vec<u32>,
}

impl H2Link {
    pub fn new(settings: H2Settings, client: Option<SocketAddr>, tls: bool) -> H2Link {
        H2Link {
            tls,
            conn: H2Conn::new(settings),
            streams: HashMap::new(),
            ending: VecDeque::new(),
            unfed: Vec::new(),
            client,
            dropped: Vec::new(),
        }
    }

    /// Chunk buffers the link held for streams that are gone: the loop
    /// puts them back in its pool.
    pub fn take_dropped(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.dropped)
    }

    /// The connection goes: every chunk buffer the link holds.
    pub fn drop_all(&mut self) -> Vec<u32> {
        let ids: Vec<u32> = self.streams.keys().copied().collect();
        for id in ids {
            self.remove(id);
        }
        self.take_dropped()
    }

    /// Takes a stream out, its held chunks to `dropped`.
    fn remove(&mut self, stream_id: u32) -> Option<Ticket> {
        let s = self.streams.remove(&stream_id)?;
        for p in s.body {
            if let Piece::Held { buf, .. } = p {
                self.dropped.push(buf);
            }
        }
        Some(s.slot)
    }

    /// Bytes the stream may send now without waiting for a WINDOW_UPDATE:
    /// a loop reads a chunk into a held buffer only when its DATA can go
    /// at once, so that a client that keeps its window shut cannot pin
    /// the pool's buffers.
    pub fn window(&self, stream_id: u32) -> usize {
        self.conn.send_window(stream_id)
    }

    /// A stream's session, given its request, as the connection's
    /// client, over TLS if the connection is.
    pub fn session(&self, request: Box<CoreRequest>) -> Session {
        let mut s = Session::for_stream(self.client, request, spindle_core::StreamProtocol::Http2);
        if self.tls {
            s.set_tls();
        }
        s
    }

    /// Stream slots serving now.
    pub fn streams(&self) -> usize {
        self.streams.len()
    }

    /// The slots of every stream (to abort them when the connection goes).
    pub fn slots(&self) -> Vec<Ticket> {
        self.streams.values().map(|s| s.slot).collect()
    }

    /// Whether received bytes wait for `feed` beyond [`MAX_UNFED`].
    pub fn input_full(&self) -> bool {
        self.unfed.len() >= MAX_UNFED
    }

    /// Received bytes: parsed as far as the connection takes them now
    /// (the rest waits in `unfed` for the next call). Returns what the
    /// loop must do, in order.
    pub fn receive(&mut self, bytes: &[u8], now_ms: u64) -> Vec<Todo> {
        if self.unfed.is_empty() {
            let n = self.conn.feed(bytes, now_ms);
            self.unfed.extend_from_slice(&bytes[n..]);
        } else {
            self.unfed.extend_from_slice(bytes);
            let n = self.conn.feed(&self.unfed, now_ms);
            self.unfed.drain(..n);
        }
        self.events()
    }

    /// Feeds what waits in `unfed` (after `out` was drained), and returns
    /// the events.
    pub fn resume(&mut self, now_ms: u64) -> Vec<Todo> {
        if !self.unfed.is_empty() {
            let n = self.conn.feed(&self.unfed, now_ms);
            self.unfed.drain(..n);
        }
        self.events()
    }

    fn events(&mut self) -> Vec<Todo> {
        let mut todo = Vec::new();
        while let Some(e) = self.conn.poll_event() {
            match e {
                Event::Request(req) => {
                    if let Some(t) = self.request(req) {
                        todo.push(t);
                    }
                }
                Event::StreamReset { stream_id } => {
                    if let Some(slot) = self.remove(stream_id) {
                        todo.push(Todo::Abort(slot));
                    }
                }
                Event::WindowOpened | Event::GoAway { .. } => {}
                Event::Close => todo.push(Todo::Close),
            }
        }
        if self.unfed.capacity() > MAX_UNFED && self.unfed.is_empty() {
            self.unfed = Vec::new();
        }
        todo
    }

    /// A request, as the core's request for its stream's session; one
    /// the core cannot take resets its stream (RFC 9113 §8.1.1).
    fn request(&mut self, req: Request) -> Option<Todo> {
        match req.to_core() {
            Ok(request) => Some(Todo::Serve {
                stream_id: req.stream_id,
                request,
            }),
            Err(_) => {
                self.conn.reset(req.stream_id, ErrorCode::ProtocolError);
                None
            }
        }
    }

    /// The stream is served by `slot` (the loop made it for a
    /// [`Todo::Serve`]); `head_only` for a HEAD request.
    pub fn attach(&mut self, stream_id: u32, slot: Ticket, head_only: bool) {
        let old = self.streams.insert(
            stream_id,
            StreamOut {
                slot,
                head: Head::Awaited { head_only },
                body: VecDeque::new(),
                owed: 0,
                ended: false,
            },
        );
        assert!(old.is_none(), "stream {stream_id} served twice");
    }

    /// The stream cannot be served (no slot free): REFUSED_STREAM, which
    /// tells the client it may retry it (§8.7).
    pub fn refuse(&mut self, stream_id: u32) {
        self.conn.reset(stream_id, ErrorCode::RefusedStream);
    }

    /// A stream slot's response begins (again, for an error in place of
    /// one that failed before any of its bytes went): its head is kept
    /// until the first body bytes or the end, then goes as HEADERS.
    /// `false`: the stream is gone (reset by the client, or the connection
    /// is closing): drop the response.
    pub fn respond(&mut self, stream_id: u32, status: u16, fields: Fields) -> bool {
        let Some(s) = self.streams.get_mut(&stream_id) else {
            return false;
        };
        let head_only = match s.head {
            Head::Awaited { head_only } | Head::Pending { head_only, .. } => head_only,
            Head::Sent | Head::Final => {
                debug_assert!(false, "stream {stream_id}: a head after its HEADERS");
                return true;
            }
        };
        s.head = Head::Pending {
            status,
            fields,
            head_only,
        };
        true
    }

    /// Sends the stream's kept head as HEADERS, with END_STREAM when no
    /// body can follow (HEAD, 204, 304) or `last`. `false`: the stream is
    /// gone (no longer in `streams`).
    fn send_head(&mut self, stream_id: u32, last: bool) -> bool {
        let s = self.streams.get_mut(&stream_id).expect("stream");
        let Head::Pending {
            status,
            fields,
            head_only,
        } = std::mem::replace(&mut s.head, Head::Sent)
        else {
            unreachable!("send_head without a kept head")
        };
        let no_body = last || head_only || status == 204 || status == 304;
        if no_body {
            s.head = Head::Final;
        }
        if !self.conn.send_fields(stream_id, status, &fields, no_body) {
            self.remove(stream_id);
            return false;
        }
        true
    }

    /// A stream slot's body plaintext, framed as DATA by `fill`.
    pub fn write(&mut self, stream_id: u32, bytes: &[u8]) -> Wrote {
        let n = bytes.len();
        self.take(stream_id, n, |body| match body.back_mut() {
            Some(Piece::Bytes { data, .. }) => data.extend_from_slice(bytes),
            _ => body.push_back(Piece::Bytes {
                data: bytes.to_vec(),
                framed: 0,
            }),
        })
    }

    /// A stream slot's body, read into a chunk buffer in record layout:
    /// framed where it lies. On [`Wrote::Gone`] the buffer stays the
    /// caller's; otherwise it is the link's.
    pub fn write_held(&mut self, stream_id: u32, held: Held) -> Wrote {
        debug_assert_eq!(held.layout.prefix, DATA_PREFIX);
        assert!(held.payload > 0, "an empty held chunk");
        let Held {
            buf,
            layout,
            payload,
        } = held;
        let wrote = self.take(stream_id, payload, |body| {
            body.push_back(Piece::Held {
                buf,
                slots: layout.slots(usize::MAX, payload),
                cur: None,
                left: payload,
            })
        });
        if wrote == Wrote::Now && matches!(self.head_of(stream_id), Some(Head::Final)) {
            // HEADERS ended the stream: the bytes go nowhere.
            self.dropped.push(buf);
        }
        wrote
    }

    fn head_of(&self, stream_id: u32) -> Option<&Head> {
        self.streams.get(&stream_id).map(|s| &s.head)
    }

    /// Takes `n` bytes of a stream's body (`push` queues them) once its
    /// head is out.
    fn take(&mut self, stream_id: u32, n: usize, push: impl FnOnce(&mut VecDeque<Piece>)) -> Wrote {
        let Some(s) = self.streams.get_mut(&stream_id) else {
            return Wrote::Gone;
        };
        match s.head {
            Head::Awaited { .. } => {
                // A body before its head cannot be: the slot went wrong.
                debug_assert!(false, "stream {stream_id}: body before head");
                self.abort(stream_id);
                return Wrote::Gone;
            }
            Head::Pending { .. } => {
                if !self.send_head(stream_id, false) {
                    return Wrote::Gone;
                }
                return self.take(stream_id, n, push);
            }
            // HEADERS ended the stream: nothing more goes to the client.
            Head::Final => return Wrote::Now,
            Head::Sent => {}
        }
        let idle = s.body.is_empty();
        push(&mut s.body);
        if idle {
            Wrote::Now
        } else {
            s.owed += n;
            Wrote::Later
        }
    }

    /// The stream slot's response is over (its last bytes were written):
    /// END_STREAM goes after them.
    pub fn end(&mut self, stream_id: u32) {
        let Some(s) = self.streams.get_mut(&stream_id) else {
            return;
        };
        match s.head {
            Head::Final => {
                // HEADERS carried END_STREAM already.
                self.remove(stream_id);
                return;
            }
            Head::Pending { .. } => {
                // No body came: HEADERS end the stream.
                if self.send_head(stream_id, true) {
                    self.remove(stream_id);
                }
                return;
            }
            Head::Awaited { .. } => {
                // A response with no head cannot be: the slot failed first.
                self.abort(stream_id);
                return;
            }
            Head::Sent => {}
        }
        s.ended = true;
        if s.body.is_empty() {
            self.ending.push_back(stream_id);
        }
    }

    /// The stream slot went away before its response ended (an error, a
    /// timeout): RST_STREAM(INTERNAL_ERROR), as nginx does.
    pub fn abort(&mut self, stream_id: u32) {
        if self.remove(stream_id).is_some() {
            self.conn.reset(stream_id, ErrorCode::InternalError);
        }
    }

    /// Graceful shutdown (drain, handover): GOAWAY with the last stream
    /// taken; the streams in flight finish.
    pub fn shutdown(&mut self) {
        self.conn.shutdown();
    }

    /// Whether `fill` may add anything now.
    pub fn has_output(&self) -> bool {
        !self.conn.out().is_empty()
            || !self.conn.is_closed()
                && (!self.ending.is_empty() || self.streams.values().any(|s| !s.body.is_empty()))
    }

    /// Frames what is ready into `out` (control frames and HEADERS first,
    /// then DATA), up to about [`FILL_BATCH`] bytes (plaintext, framed into
    /// a plain connection's buffer or into TLS records); the slots whose
    /// [`Wrote::Later`] plaintext is now framed are pushed to `sent` with
    /// its length, to be reported sent.
    pub fn fill(&mut self, out: &mut impl Sink, sent: &mut Vec<(Ticket, usize)>) {
        let start = out.plain_len();
        let ctl = self.conn.out();
        let n = ctl.len().min(FILL_BATCH);
        out.put(&ctl[..n]);
        self.conn.advance_out(n);
        while let Some(id) = self.ending.pop_front() {
            if let Some(h) = self.conn.data_frame(id, 0, true) {
                out.put(&h);
            }
            self.remove(id);
        }
        // DATA, one frame per pick; a pick with nothing buffered counts
        // against `misses`, so a round of streams with no bytes ends it.
        let mut misses = 0;
        while out.plain_len() - start < FILL_BATCH && misses <= self.streams.len() {
            let Some(id) = self.conn.next_sendable() else {
                break;
            };
            if self.frame_one(id, out, sent) {
                misses = 0;
            } else {
                misses += 1;
            }
        }
    }

    /// One DATA frame of stream `id`'s body, within its budget; `false`
    /// when it had nothing to frame (or is gone).
    fn frame_one(&mut self, id: u32, out: &mut impl Sink, sent: &mut Vec<(Ticket, usize)>) -> bool {
        let budget = self.conn.data_budget(id);
        let Some(s) = self.streams.get_mut(&id) else {
            return false;
        };
        let avail = s.left();
        if avail == 0 || budget == 0 {
            return false;
        }
        let ended = s.ended;
        let front = s.body.front_mut().expect("bytes left");
        let (len, whole) = match front {
            Piece::Bytes { data, framed } => ((data.len() - *framed).min(budget), None),
            Piece::Held { slots, cur, .. } => match cur {
                Some((slot, from)) => ((slot.payload.end - *from).min(budget), None),
                None => {
                    let slot = slots.next().expect("a held record left");
                    if slot.payload.len() <= budget {
                        (slot.payload.len(), Some(slot))
                    } else {
                        *cur = Some((slot.clone(), slot.payload.start));
                        (budget, None)
                    }
                }
            },
        };
        let last = ended && len == avail;
        let Some(h) = self.conn.data_frame(id, len, last) else {
            self.remove(id);
            return false;
        };
        let s = self.streams.get_mut(&id).expect("stream");
        let front = s.body.front_mut().expect("bytes left");
        let done = match front {
            Piece::Bytes { data, framed } => {
                out.put(&h);
                out.put(&data[*framed..*framed + len]);
                *framed += len;
                *framed == data.len()
            }
            Piece::Held { buf, cur, left, .. } => {
                match (whole, cur.as_mut()) {
                    (Some(slot), _) => out.put_held(*buf, &slot, &h),
                    (None, Some((slot, from))) => {
                        out.put(&h);
                        out.put_copy(*buf, *from..*from + len);
                        *from += len;
                        if *from == slot.payload.end {
                            *cur = None;
                        }
                    }
                    (None, None) => unreachable!("a held frame with no record"),
                }
                *left -= len;
                if *left == 0 {
                    out.release(*buf);
                }
                *left == 0
            }
        };
        if done {
            s.body.pop_front();
            if s.body.is_empty() {
                if s.owed > 0 {
                    sent.push((s.slot, std::mem::take(&mut s.owed)));
                }
                if last {
                    self.streams.remove(&id);
                }
            }
        }
        true
    }
}
