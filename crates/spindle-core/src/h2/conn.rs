//! One HTTP/2 connection, server side, without I/O (RFC 9113 §3-8).
//!
//! The driver feeds received bytes to [`H2Conn::feed`], takes what the
//! connection decided with [`H2Conn::poll_event`], and writes
//! [`H2Conn::out`] (control frames and response HEADERS) to the socket
//! before anything else. A response's body goes out as DATA frames whose
//! 9-byte headers [`H2Conn::data_frame`] returns, each followed by that
//! many bytes of the file, as much as [`H2Conn::data_budget`] allows, for
//! the stream [`H2Conn::next_sendable`] names:
//!
//! ```text
//!  driver                                    H2Conn
//!  bytes arrive ──────── feed(bytes, now) ──▶ frames, HPACK, states, limits
//!               ◀─────── poll_event() ─────── Request | StreamReset | WindowOpened | GoAway | Close
//!  write out() first, advance_out(n)
//!  Request: decide (open the file ...)
//!               ──────── send_headers(id, status, fields, end_stream)
//!  loop:        ──────── next_sendable() ───▶ a stream with body left and window
//!               ──────── data_budget(id) ───▶ bytes it may send now
//!               ──────── data_frame(id, n, end) ▶ 9 bytes; write them, then n file bytes
//!  shutdown() (drain, handover): GOAWAY, the streams in flight finish, then Close
//! ```
//!
//! Every error of the peer's ends in GOAWAY with its code (then `Close`)
//! or in RST_STREAM for one stream. Memory is bounded: streams by
//! `max_concurrent_streams`, a header block by `max_header_block`, the
//! HPACK table by `header_table_size`, and `feed` stops taking input
//! while `out` holds more than [`OUT_HIGH_WATER`] bytes or
//! [`MAX_PENDING_EVENTS`] events wait (the driver drains both, then feeds
//! the rest).

use std::collections::{BTreeMap, VecDeque};

use super::frame::{
    self, put_goaway, put_headers, put_ping_ack, put_rst_stream, put_settings, put_settings_ack,
    put_window_update, setting, ErrorCode, Frame, FrameError, Parsed, DEFAULT_WINDOW, HEADER_LEN,
    MAX_WINDOW, MIN_MAX_FRAME_SIZE,
};
use super::hpack::{self, Decoder, Encoder};
use super::settings::*;
use crate::limits;
use crate::stream_request::{request, Packed, Reject};

mod recv;

use super::Request;

/// The client connection preface (§3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// `feed` takes no more frames while `out` holds this many bytes.
pub const OUT_HIGH_WATER: usize = 64 << 10;

/// `feed` takes no more frames while this many events wait.
pub const MAX_PENDING_EVENTS: usize = 256;

/// Closed streams remembered, so a late frame on one gets the answer
/// §5.1 gives for closed streams rather than for idle ones, and frames
/// after our RST_STREAM are ignored.
const RECENTLY_CLOSED: usize = 64;

/// `out`, the header block buffer, its decoded fields' buffer and the
/// HPACK encoding buffer keep at most this much capacity once emptied,
/// so an idle connection holds little.
const KEEP_CAPACITY: usize = 4096;

/// The length of the budget windows in [`FloodLimits`].
const FLOOD_WINDOW_MS: u64 = 1000;

/// What the connection tells its driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A new request: answer it with `send_headers` (and DATA).
    Request(Request),
    /// The stream is gone (the client cancelled it, or it broke a rule):
    /// stop sending its body and drop what it holds.
    StreamReset { stream_id: u32 },
    /// A flow-control window grew: streams may have budget again.
    WindowOpened,
    /// The client is going away: it opens no more streams.
    GoAway { last_stream_id: u32, code: u32 },
    /// Write what `out` holds, then close the connection.
    Close,
}

/// A stream's state (§5.1), open ones only: a closed stream leaves the
/// map. There is no "half-closed (local)": a response that ends before
/// the request's body resets the stream with NO_ERROR (§8.1, as nginx
/// does), since the rest of the body would only be dropped. A body up to
/// `limits::MAX_DISCARD_BODY` is read (and dropped) before the request is
/// handed out, so that case needs a body larger than that.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Open,
    /// The client's END_STREAM came; we still send.
    HalfClosedRemote,
}

#[derive(Debug)]
struct Stream {
    state: State,
    /// What we may still send on it (may go negative after a SETTINGS
    /// shrinks the initial window, §6.9.2).
    send_window: i64,
    /// What the client may still send on it.
    recv_window: i64,
    /// Bytes of its body dropped but not yet given back.
    recv_unacked: u32,
    /// Response HEADERS sent.
    headers_sent: bool,
    /// HEADERS sent without END_STREAM and no DATA with it yet.
    body_pending: bool,
    urgency: u8,
    content_length: Option<u64>,
    received: u64,
    /// The request, held back until its body ends or passes
    /// `limits::MAX_DISCARD_BODY`; None once handed out.
    held: Option<Box<Request>>,
}

/// How a remembered stream was closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Closed {
    /// We sent RST_STREAM: later frames on it are ignored (§5.1).
    ByUs,
    /// Both sides ended it, or the client reset it.
    Other,
}

/// The header block being received (HEADERS, then CONTINUATIONs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BlockFor {
    /// A new stream's request.
    Request,
    /// Trailers on an open stream.
    Trailers,
    /// Decoded only to keep HPACK in step; then this stream error, if any.
    Discard(Option<ErrorCode>),
    /// Decoded only to keep HPACK in step; then 431 or 405 or
    /// REFUSED_STREAM, decided when it ends.
    Refused,
}

#[derive(Debug)]
enum Phase {
    /// Bytes of the preface matched so far.
    Preface(usize),
    /// The preface came; the next frame must be SETTINGS (§3.4).
    FirstSettings,
    Open,
    /// GOAWAY sent (or the peer's error): nothing more is read.
    Closed,
}

/// Kinds in [`FloodLimits`], as indices into the counters.
#[derive(Debug, Clone, Copy)]
enum Flood {
    Resets,
    Settings,
    Pings,
    EmptyData,
    WindowUpdates,
    Priorities,
}

/// One HTTP/2 connection, server side.
#[derive(Debug)]
pub struct H2Conn {
    cfg: H2Settings,
    phase: Phase,
    hpack: Decoder,
    /// The response fields' dynamic table (RFC 7541 §4).
    encoder: Encoder,
    streams: BTreeMap<u32, Stream>,
    /// The highest stream id the client has used (opened, refused or
    /// ignored): GOAWAY's last stream id.
    max_client_stream: u32,
    recently_closed: VecDeque<(u32, Closed)>,
    block: Vec<u8>,
    /// The last header block's fields, decoded (empty between blocks).
    fields: Packed,
    block_stream: u32,
    block_end_stream: bool,
    block_frames: u32,
    block_for: BlockFor,
    conn_send_window: i64,
    conn_recv_window: i64,
    conn_recv_unacked: u32,
    peer_initial_window: u32,
    peer_max_frame_size: u32,
    out: Vec<u8>,
    out_start: usize,
    events: VecDeque<Event>,
    window_event_queued: bool,
    flood_since: u64,
    flood_counts: [u32; 6],
    now_ms: u64,
    /// We sent a graceful GOAWAY: streams above this id are ignored, and
    /// Close follows when the last stream ends.
    going_away: Option<u32>,
    rr_cursor: u32,
    scratch: Vec<u8>,
}

impl H2Conn {
    /// A connection with these limits; `out` already holds our SETTINGS
    /// (and the WINDOW_UPDATE that opens the connection window), which
    /// a server may send before the client's preface arrives (§3.4).
    pub fn new(cfg: H2Settings) -> H2Conn {
        assert!((DEFAULT_WINDOW..=MAX_WINDOW).contains(&cfg.initial_window));
        assert!((DEFAULT_WINDOW..=MAX_WINDOW).contains(&cfg.connection_window));
        assert!((MIN_MAX_FRAME_SIZE..=frame::MAX_MAX_FRAME_SIZE).contains(&cfg.max_frame_size));
        let mut out = Vec::new();
        let mut params = vec![
            (setting::ENABLE_PUSH, 0),
            (setting::MAX_CONCURRENT_STREAMS, cfg.max_concurrent_streams),
            (setting::INITIAL_WINDOW_SIZE, cfg.initial_window),
            (setting::MAX_HEADER_LIST_SIZE, cfg.max_header_list_size),
        ];
        if cfg.max_frame_size != MIN_MAX_FRAME_SIZE {
            params.push((setting::MAX_FRAME_SIZE, cfg.max_frame_size));
        }
        if cfg.header_table_size != DEFAULT_HEADER_TABLE_SIZE {
            params.push((setting::HEADER_TABLE_SIZE, cfg.header_table_size));
        }
        put_settings(&mut out, &params);
        if cfg.connection_window > DEFAULT_WINDOW {
            put_window_update(&mut out, 0, cfg.connection_window - DEFAULT_WINDOW);
        }
        H2Conn {
            hpack: Decoder::new(cfg.header_table_size as usize),
            encoder: Encoder::new(),
            conn_recv_window: i64::from(cfg.connection_window),
            cfg,
            phase: Phase::Preface(0),
            streams: BTreeMap::new(),
            max_client_stream: 0,
            recently_closed: VecDeque::new(),
            block: Vec::new(),
            fields: Packed::default(),
            block_stream: 0,
            block_end_stream: false,
            block_frames: 0,
            block_for: BlockFor::Request,
            conn_send_window: i64::from(DEFAULT_WINDOW),
            conn_recv_unacked: 0,
            peer_initial_window: DEFAULT_WINDOW,
            peer_max_frame_size: MIN_MAX_FRAME_SIZE,
            out,
            out_start: 0,
            events: VecDeque::new(),
            window_event_queued: false,
            flood_since: 0,
            flood_counts: [0; 6],
            now_ms: 0,
            going_away: None,
            rr_cursor: 0,
            scratch: Vec::new(),
        }
    }

    /// Takes received bytes; returns how many it consumed. The rest (a
    /// partial frame, or input held back while `out` or the events are
    /// full) must be fed again, with more after it. `now_ms` is any
    /// monotonic clock in milliseconds (for the flood budgets). After a
    /// connection error everything is consumed and ignored.
    pub fn feed(&mut self, bytes: &[u8], now_ms: u64) -> usize {
        self.now_ms = now_ms;
        let mut pos = 0;
        if let Phase::Preface(seen) = self.phase {
            let want = &PREFACE[seen..];
            let n = want.len().min(bytes.len());
            if bytes[..n] != want[..n] {
                self.conn_error(ErrorCode::ProtocolError);
                return bytes.len();
            }
            pos = n;
            self.phase = if seen + n == PREFACE.len() {
                Phase::FirstSettings
            } else {
                Phase::Preface(seen + n)
            };
        }
        while !matches!(self.phase, Phase::Closed | Phase::Preface(_)) {
            if self.out.len() - self.out_start > OUT_HIGH_WATER
                || self.events.len() >= MAX_PENDING_EVENTS
            {
                break;
            }
            match frame::parse(&bytes[pos..], self.cfg.max_frame_size) {
                Parsed::NeedMore => break,
                Parsed::Frame(f, n) => {
                    pos += n;
                    self.on_frame(f);
                }
                Parsed::Error(FrameError::Connection(code), _) => self.conn_error(code),
                Parsed::Error(FrameError::Stream(id, code), n) => {
                    pos += n;
                    if self.block_stream != 0 || matches!(self.phase, Phase::FirstSettings) {
                        self.conn_error(ErrorCode::ProtocolError);
                    } else {
                        self.stream_error(id, code);
                    }
                }
            }
        }
        if matches!(self.phase, Phase::Closed) {
            return bytes.len();
        }
        pos
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        let e = self.events.pop_front();
        if e == Some(Event::WindowOpened) {
            self.window_event_queued = false;
        }
        e
    }

    /// Bytes to write to the peer, before any DATA frame.
    pub fn out(&self) -> &[u8] {
        &self.out[self.out_start..]
    }

    /// `n` bytes of `out` were written.
    pub fn advance_out(&mut self, n: usize) {
        assert!(n <= self.out.len() - self.out_start, "advanced past out");
        self.out_start += n;
        if self.out_start == self.out.len() {
            self.out.clear();
            self.out_start = 0;
            if self.out.capacity() > KEEP_CAPACITY {
                self.out = Vec::new();
            }
        } else if self.out_start > OUT_HIGH_WATER {
            self.out.drain(..self.out_start);
            self.out_start = 0;
        }
    }

    /// After GOAWAY: the driver writes `out` and closes.
    pub fn is_closed(&self) -> bool {
        matches!(self.phase, Phase::Closed)
    }

    /// Streams open now.
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// Bytes the connection holds besides its fixed size (buffers and
    /// the HPACK table), for a check that it stays bounded.
    pub fn buffered(&self) -> usize {
        self.out.capacity()
            + self.block.capacity()
            + self.fields.capacity()
            + self.scratch.capacity()
            + self.hpack.table_size()
            + self.encoder.table_size()
    }

    /// Sends a response's HEADERS (status and fields; names are
    /// lowercased, and connection-specific fields must not be among
    /// them, §8.2.2). Returns false, sending nothing, when the stream is
    /// gone (reset since its request came).
    pub fn send_headers(
        &mut self,
        stream_id: u32,
        status: u16,
        fields: &[(&[u8], &[u8])],
        end_stream: bool,
    ) -> bool {
        self.headers_of(stream_id, status, fields.iter().copied(), end_stream)
    }

    /// [`H2Conn::send_headers`] for a response head the core made
    /// ([`crate::Fields`], names as written: HPACK lowercases them).
    pub fn send_fields(
        &mut self,
        stream_id: u32,
        status: u16,
        fields: &crate::Fields,
        end_stream: bool,
    ) -> bool {
        self.headers_of(stream_id, status, fields.iter(), end_stream)
    }

    fn headers_of<'f>(
        &mut self,
        stream_id: u32,
        status: u16,
        fields: impl Iterator<Item = (&'f [u8], &'f [u8])>,
        end_stream: bool,
    ) -> bool {
        if self.is_closed() {
            return false;
        }
        let Some(s) = self
            .streams
            .get_mut(&stream_id)
            .filter(|s| s.held.is_none())
        else {
            return false;
        };
        assert!(!s.headers_sent, "stream {stream_id}: HEADERS twice");
        s.headers_sent = true;
        s.body_pending = !end_stream;
        self.scratch.clear();
        self.encoder.begin_block(&mut self.scratch);
        hpack::encode_status(status, &mut self.scratch);
        for (n, v) in fields {
            self.encoder.field(n, v, &mut self.scratch);
        }
        put_headers(
            &mut self.out,
            stream_id,
            &self.scratch,
            end_stream,
            self.peer_max_frame_size,
        );
        if self.scratch.capacity() > KEEP_CAPACITY {
            self.scratch = Vec::new();
        }
        if end_stream {
            self.local_end(stream_id);
        }
        true
    }

    /// Bytes of DATA `stream_id` may send now: the least of its window,
    /// the connection's window and the peer's SETTINGS_MAX_FRAME_SIZE; 0
    /// for a stream with no body to send.
    pub fn data_budget(&self, stream_id: u32) -> usize {
        match self.streams.get(&stream_id) {
            Some(s) if s.body_pending && !self.is_closed() => s
                .send_window
                .min(self.conn_send_window)
                .min(i64::from(self.peer_max_frame_size))
                .max(0) as usize,
            _ => 0,
        }
    }

    /// Bytes of DATA `stream_id` may send before it needs a
    /// WINDOW_UPDATE: the lesser of its window and the connection's
    /// (0 for a stream that is gone).
    pub fn send_window(&self, stream_id: u32) -> usize {
        match self.streams.get(&stream_id) {
            Some(s) if !self.is_closed() => {
                s.send_window.min(self.conn_send_window).max(0) as usize
            }
            _ => 0,
        }
    }

    /// A DATA frame of `len` bytes on `stream_id`: debits the windows and
    /// returns the 9-byte frame header. The driver writes `out` first,
    /// then this header and then exactly `len` bytes of the body.
    /// `len` is at most [`H2Conn::data_budget`]; with `end_stream` the
    /// body is done (`len` may then be 0). None, and nothing to write,
    /// when the stream is gone (reset, or the connection closed).
    pub fn data_frame(
        &mut self,
        stream_id: u32,
        len: usize,
        end_stream: bool,
    ) -> Option<[u8; HEADER_LEN]> {
        let budget = self.data_budget(stream_id);
        assert!(
            len <= budget,
            "stream {stream_id}: {len} bytes over budget {budget}"
        );
        assert!(
            len > 0 || end_stream,
            "an empty DATA frame that ends nothing"
        );
        if self.is_closed() {
            return None;
        }
        let s = self
            .streams
            .get_mut(&stream_id)
            .filter(|s| s.body_pending)?;
        s.send_window -= len as i64;
        self.conn_send_window -= len as i64;
        if end_stream {
            s.body_pending = false;
            self.local_end(stream_id);
        }
        Some(frame::data_header(stream_id, len as u32, end_stream))
    }

    /// A stream with body to send and window to send it, chosen fairly:
    /// the lowest RFC 9218 urgency first, round-robin among streams of
    /// one urgency (each call moves past the stream it returns).
    pub fn next_sendable(&mut self) -> Option<u32> {
        if self.conn_send_window <= 0 || self.is_closed() {
            return None;
        }
        let ready = |s: &Stream| s.body_pending && s.send_window > 0;
        let urgency = self
            .streams
            .values()
            .filter(|s| ready(s))
            .map(|s| s.urgency)
            .min()?;
        let pick = |(id, s): (&u32, &Stream)| (ready(s) && s.urgency == urgency).then_some(*id);
        let id = self
            .streams
            .range(self.rr_cursor + 1..)
            .find_map(pick)
            .or_else(|| self.streams.iter().find_map(pick))?;
        self.rr_cursor = id;
        Some(id)
    }

    /// Bodies wait and no window lets any of them move: what a driver's
    /// send timeout watches (a client that never opens its window).
    pub fn window_stalled(&self) -> bool {
        let waiting = self.streams.values().filter(|s| s.body_pending);
        let mut any = false;
        for s in waiting {
            any = true;
            if s.send_window > 0 && self.conn_send_window > 0 {
                return false;
            }
        }
        any
    }

    /// Resets one stream (RST_STREAM with `code`), e.g. when its file
    /// cannot be read after its HEADERS went out.
    pub fn reset(&mut self, stream_id: u32, code: ErrorCode) {
        if self.streams.remove(&stream_id).is_some() && !self.is_closed() {
            put_rst_stream(&mut self.out, stream_id, code);
            self.remember(stream_id, Closed::ByUs);
            self.maybe_done();
        }
    }

    /// Ends the connection now: GOAWAY with `code`, then Close.
    pub fn go_away(&mut self, code: ErrorCode) {
        self.conn_error(code);
    }

    /// Graceful shutdown (drain, handover): GOAWAY(NO_ERROR) naming the
    /// last stream we took; streams above it are ignored, the ones in
    /// flight finish, then Close.
    pub fn shutdown(&mut self) {
        if self.going_away.is_none() && !self.is_closed() {
            put_goaway(&mut self.out, self.max_client_stream, ErrorCode::NoError);
            self.going_away = Some(self.max_client_stream);
            self.maybe_done();
        }
    }

    // State changes.

    /// The client's END_STREAM.
    fn remote_end(&mut self, id: u32) {
        let s = self.streams.get_mut(&id).expect("an open stream");
        assert_eq!(s.state, State::Open, "END_STREAM twice on {id}");
        s.state = State::HalfClosedRemote;
    }

    /// Our END_STREAM.
    fn local_end(&mut self, id: u32) {
        let s = self.streams.remove(&id).expect("an open stream");
        if s.state == State::Open {
            // §8.1: the response is complete before the request's body
            // (one over MAX_DISCARD_BODY): the client may stop sending it.
            put_rst_stream(&mut self.out, id, ErrorCode::NoError);
            self.remember(id, Closed::ByUs);
        } else {
            self.remember(id, Closed::Other);
        }
        self.maybe_done();
    }

    fn remember(&mut self, id: u32, how: Closed) {
        if self.recently_closed.len() == RECENTLY_CLOSED {
            self.recently_closed.pop_front();
        }
        self.recently_closed.push_back((id, how));
    }

    fn closed_by_us(&self, id: u32) -> bool {
        self.recently_closed.contains(&(id, Closed::ByUs))
    }

    fn stream_error(&mut self, id: u32, code: ErrorCode) {
        if self.streams.remove(&id).is_some_and(|s| s.held.is_none()) {
            self.events.push_back(Event::StreamReset { stream_id: id });
        }
        put_rst_stream(&mut self.out, id, code);
        self.remember(id, Closed::ByUs);
        if self.spend(Flood::Resets) {
            self.maybe_done();
        }
    }

    fn conn_error(&mut self, code: ErrorCode) {
        if self.is_closed() {
            return;
        }
        put_goaway(&mut self.out, self.max_client_stream, code);
        self.phase = Phase::Closed;
        self.streams.clear();
        self.block_stream = 0;
        self.block = Vec::new();
        self.events.push_back(Event::Close);
    }

    /// After our GOAWAY, Close once the last stream is done.
    fn maybe_done(&mut self) {
        if self.going_away.is_some() && self.streams.is_empty() && !self.is_closed() {
            self.phase = Phase::Closed;
            self.events.push_back(Event::Close);
        }
    }

    fn window_opened(&mut self) {
        if !self.window_event_queued {
            self.window_event_queued = true;
            self.events.push_back(Event::WindowOpened);
        }
    }

    /// Counts one frame against its budget; false (and GOAWAY) when the
    /// budget is spent.
    fn spend(&mut self, kind: Flood) -> bool {
        if self.now_ms.saturating_sub(self.flood_since) >= FLOOD_WINDOW_MS {
            self.flood_since = self.now_ms;
            self.flood_counts = [0; 6];
        }
        let l = &self.cfg.flood;
        let limit = match kind {
            Flood::Resets => l.resets,
            Flood::Settings => l.settings,
            Flood::Pings => l.pings,
            Flood::EmptyData => l.empty_data,
            Flood::WindowUpdates => l.window_updates,
            Flood::Priorities => l.priorities,
        };
        let c = &mut self.flood_counts[kind as usize];
        *c += 1;
        if *c > limit {
            self.conn_error(ErrorCode::EnhanceYourCalm);
            return false;
        }
        true
    }
}

#[cfg(test)]
mod tests;
