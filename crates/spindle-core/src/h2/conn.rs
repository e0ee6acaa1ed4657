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
use super::hpack::{self, Decoder};
use crate::limits;

/// The client connection preface (§3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Default SETTINGS_MAX_CONCURRENT_STREAMS we advertise (nginx's, and
/// issue 38's): a browser opens a page's resources at once, and each open
/// stream costs a few hundred bytes here plus whatever the driver holds.
pub const DEFAULT_MAX_CONCURRENT_STREAMS: u32 = 128;

/// Default SETTINGS_INITIAL_WINDOW_SIZE we advertise: how much of a
/// request body one stream may send before we open its window again.
/// spindle reads request bodies only to drop them, so a large window
/// costs no memory, and it keeps an upload from stalling at window ÷ RTT
/// (64 KiB at 100 ms is 640 KB/s; 4 MiB is 40 MB/s). The other direction,
/// the files we send, is bounded by the client's windows, which we honour.
pub const DEFAULT_INITIAL_WINDOW: u32 = 4 << 20;

/// Default connection window we open to (with a WINDOW_UPDATE after our
/// SETTINGS): 16 MiB, H2O's, room for four streams' windows at once, the
/// bandwidth-delay product of 1.3 Gbit/s at 100 ms.
pub const DEFAULT_CONNECTION_WINDOW: u32 = 16 << 20;

/// Default SETTINGS_MAX_HEADER_LIST_SIZE (names, values and 32 bytes per
/// field, decoded): twice HTTP/1.1's head limit, as HPACK's per-field
/// overhead counts here and not there. A larger list gets 431.
pub const DEFAULT_MAX_HEADER_LIST_SIZE: u32 = 16 << 10;

/// Default SETTINGS_HEADER_TABLE_SIZE: the HPACK dynamic table the client
/// may fill per connection (RFC 7541's default).
pub const DEFAULT_HEADER_TABLE_SIZE: u32 = 4096;

/// Default most CONTINUATION frames after one HEADERS. One header block
/// within the list limit needs at most one at the default frame size; a
/// flood of them (2024's "CONTINUATION flood") is ENHANCE_YOUR_CALM.
pub const DEFAULT_MAX_CONTINUATION_FRAMES: u32 = 8;

/// Default most bytes of one encoded header block (HEADERS plus its
/// CONTINUATIONs) held until it ends: twice the header list limit (an
/// encoded field is never much larger than its decoded size).
pub const DEFAULT_MAX_HEADER_BLOCK: u32 = 2 * DEFAULT_MAX_HEADER_LIST_SIZE;

/// `feed` takes no more frames while `out` holds this many bytes.
pub const OUT_HIGH_WATER: usize = 64 << 10;

/// `feed` takes no more frames while this many events wait.
pub const MAX_PENDING_EVENTS: usize = 256;

/// Closed streams remembered, so a late frame on one gets the answer
/// §5.1 gives for closed streams rather than for idle ones, and frames
/// after our RST_STREAM are ignored.
const RECENTLY_CLOSED: usize = 64;

/// RFC 9218's default urgency, and the lowest priority (highest value).
const DEFAULT_URGENCY: u8 = 3;
const MAX_URGENCY: u8 = 7;

/// A WINDOW_UPDATE opening less than this counts against
/// [`FloodLimits::window_updates`]; larger ones open room for real work.
pub const SMALL_WINDOW_INCREMENT: u32 = 1024;

/// `out`, the header block buffer and the HPACK encoding buffer keep at
/// most this much capacity once emptied, so an idle connection holds
/// little.
const KEEP_CAPACITY: usize = 4096;

/// The length of the budget windows in [`FloodLimits`].
const FLOOD_WINDOW_MS: u64 = 1000;

/// Per-second budgets for frames that cost the server work and give it
/// none; one over any of them is GOAWAY(ENHANCE_YOUR_CALM). Each is far
/// above what a browser sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FloodLimits {
    /// RST_STREAM from the client on a stream whose response has not
    /// ended (rapid reset, CVE-2023-44487), plus RST_STREAMs we send for
    /// the client's stream errors.
    pub resets: u32,
    pub settings: u32,
    pub pings: u32,
    /// DATA frames with no payload and no END_STREAM.
    pub empty_data: u32,
    /// WINDOW_UPDATE frames opening less than [`SMALL_WINDOW_INCREMENT`].
    pub window_updates: u32,
    pub priorities: u32,
}

/// Defaults for [`FloodLimits`].
pub const DEFAULT_FLOOD_LIMITS: FloodLimits = FloodLimits {
    resets: 200,
    settings: 50,
    pings: 100,
    empty_data: 100,
    window_updates: 10_000,
    priorities: 1000,
};

/// Our limits and the settings we advertise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct H2Settings {
    pub max_concurrent_streams: u32,
    /// At least 65,535 (the window the client assumes until it reads our
    /// SETTINGS), at most 2^31 - 1.
    pub initial_window: u32,
    pub connection_window: u32,
    /// SETTINGS_MAX_FRAME_SIZE: the largest frame we accept.
    pub max_frame_size: u32,
    pub max_header_list_size: u32,
    pub header_table_size: u32,
    pub max_continuation_frames: u32,
    pub max_header_block: u32,
    pub flood: FloodLimits,
}

impl Default for H2Settings {
    fn default() -> H2Settings {
        H2Settings {
            max_concurrent_streams: DEFAULT_MAX_CONCURRENT_STREAMS,
            initial_window: DEFAULT_INITIAL_WINDOW,
            connection_window: DEFAULT_CONNECTION_WINDOW,
            max_frame_size: MIN_MAX_FRAME_SIZE,
            max_header_list_size: DEFAULT_MAX_HEADER_LIST_SIZE,
            header_table_size: DEFAULT_HEADER_TABLE_SIZE,
            max_continuation_frames: DEFAULT_MAX_CONTINUATION_FRAMES,
            max_header_block: DEFAULT_MAX_HEADER_BLOCK,
            flood: DEFAULT_FLOOD_LIMITS,
        }
    }
}

/// A request, its header block decoded and checked (§8.3.1, §8.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub stream_id: u32,
    pub method: String,
    pub scheme: String,
    pub authority: Option<String>,
    /// Visible ASCII, starting with `/` (or `*` for OPTIONS).
    pub path: String,
    /// The regular fields in order: names lowercase tokens, values free
    /// of NUL, CR, LF and surrounding whitespace. `cookie` may come in
    /// several fields (§8.2.3): join them with "; ".
    pub headers: Vec<(String, Vec<u8>)>,
    /// No body follows. A body is read and dropped here: one up to
    /// `limits::MAX_DISCARD_BODY` before the request is handed out (then
    /// this is true), a larger one while the response goes out (reset
    /// with NO_ERROR when the response ends first).
    pub end_stream: bool,
    /// RFC 9218 urgency from the `priority` field, 0 (first) to 7.
    pub urgency: u8,
}

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
    streams: BTreeMap<u32, Stream>,
    /// The highest stream id the client has used (opened, refused or
    /// ignored): GOAWAY's last stream id.
    max_client_stream: u32,
    recently_closed: VecDeque<(u32, Closed)>,
    block: Vec<u8>,
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
    peer_going_away: bool,
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
            conn_recv_window: i64::from(cfg.connection_window),
            cfg,
            phase: Phase::Preface(0),
            streams: BTreeMap::new(),
            max_client_stream: 0,
            recently_closed: VecDeque::new(),
            block: Vec::new(),
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
            peer_going_away: false,
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
            + self.scratch.capacity()
            + self.hpack.table_size()
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
        hpack::encode_status(status, &mut self.scratch);
        for (n, v) in fields {
            hpack::encode_field(n, v, &mut self.scratch);
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

    // Receiving.

    fn on_frame(&mut self, f: Frame<'_>) {
        if self.block_stream != 0 && !matches!(f, Frame::Continuation { .. }) {
            // §6.10: nothing may come between a HEADERS and its last
            // CONTINUATION.
            return self.conn_error(ErrorCode::ProtocolError);
        }
        if matches!(self.phase, Phase::FirstSettings) {
            if !matches!(f, Frame::Settings { ack: false, .. }) {
                return self.conn_error(ErrorCode::ProtocolError);
            }
            self.phase = Phase::Open;
        }
        match f {
            Frame::Data {
                stream_id,
                data,
                flow_len,
                end_stream,
            } => self.on_data(stream_id, data.len(), flow_len, end_stream),
            Frame::Headers {
                stream_id,
                block,
                end_stream,
                end_headers,
                self_dependent,
            } => self.on_headers(stream_id, block, end_stream, end_headers, self_dependent),
            Frame::Continuation {
                stream_id,
                block,
                end_headers,
            } => {
                if stream_id != self.block_stream {
                    return self.conn_error(ErrorCode::ProtocolError);
                }
                self.block_frames += 1;
                if self.block_frames > self.cfg.max_continuation_frames
                    || self.block.len() + block.len() > self.cfg.max_header_block as usize
                {
                    return self.conn_error(ErrorCode::EnhanceYourCalm);
                }
                self.block.extend_from_slice(block);
                if end_headers {
                    self.end_block();
                }
            }
            Frame::Priority { .. } => {
                self.spend(Flood::Priorities);
            }
            Frame::RstStream { stream_id, .. } => {
                if stream_id > self.max_client_stream {
                    return self.conn_error(ErrorCode::ProtocolError);
                }
                // Every open stream's response is unfinished: a reset
                // of one is what rapid reset repeats.
                if let Some(s) = self.streams.remove(&stream_id) {
                    if s.held.is_none() {
                        self.events.push_back(Event::StreamReset { stream_id });
                    }
                    self.remember(stream_id, Closed::Other);
                    if self.spend(Flood::Resets) {
                        self.maybe_done();
                    }
                }
            }
            Frame::Settings { ack, params } => {
                if !ack && self.spend(Flood::Settings) {
                    self.apply_settings(params);
                }
            }
            Frame::Ping { ack, data } => {
                if !ack && self.spend(Flood::Pings) {
                    put_ping_ack(&mut self.out, &data);
                }
            }
            Frame::GoAway {
                last_stream_id,
                code,
            } => {
                self.peer_going_away = true;
                self.events.push_back(Event::GoAway {
                    last_stream_id,
                    code,
                });
                self.maybe_done();
            }
            Frame::WindowUpdate {
                stream_id,
                increment,
            } => self.on_window_update(stream_id, increment),
            Frame::Unknown { .. } => {}
        }
    }

    fn on_data(&mut self, id: u32, len: usize, flow_len: u32, end_stream: bool) {
        if id > self.max_client_stream {
            return self.conn_error(ErrorCode::ProtocolError);
        }
        if i64::from(flow_len) > self.conn_recv_window {
            return self.conn_error(ErrorCode::FlowControlError);
        }
        // Every body byte is dropped on arrival: the connection's window
        // is given back whatever the stream's fate.
        self.conn_recv_window -= i64::from(flow_len);
        self.conn_recv_unacked += flow_len;
        if self.conn_recv_unacked >= self.cfg.connection_window / 2 {
            put_window_update(&mut self.out, 0, self.conn_recv_unacked);
            self.conn_recv_window += i64::from(self.conn_recv_unacked);
            self.conn_recv_unacked = 0;
        }
        if flow_len == 0 && !end_stream && !self.spend(Flood::EmptyData) {
            return;
        }
        let half = self.cfg.initial_window / 2;
        let Some(s) = self.streams.get_mut(&id) else {
            if self.closed_by_us(id) {
                return;
            }
            // §6.1: DATA on a stream not open is STREAM_CLOSED.
            return self.stream_error(id, ErrorCode::StreamClosed);
        };
        if s.state == State::HalfClosedRemote {
            return self.stream_error(id, ErrorCode::StreamClosed);
        }
        if i64::from(flow_len) > s.recv_window {
            return self.stream_error(id, ErrorCode::FlowControlError);
        }
        s.recv_window -= i64::from(flow_len);
        s.received += len as u64;
        let bad_length = match s.content_length {
            Some(cl) => s.received > cl || (end_stream && s.received != cl),
            None => false,
        };
        if bad_length {
            // §8.1.1: content-length disagrees with the DATA.
            return self.stream_error(id, ErrorCode::ProtocolError);
        }
        if s.held.is_some() && (end_stream || s.received > limits::MAX_DISCARD_BODY) {
            let mut req = s.held.take().expect("held");
            req.end_stream = end_stream;
            self.events.push_back(Event::Request(*req));
        }
        let s = self.streams.get_mut(&id).expect("the stream");
        if end_stream {
            self.remote_end(id);
        } else {
            s.recv_unacked += flow_len;
            if s.recv_unacked >= half && s.recv_unacked > 0 {
                put_window_update(&mut self.out, id, s.recv_unacked);
                s.recv_window += i64::from(s.recv_unacked);
                s.recv_unacked = 0;
            }
        }
    }

    fn on_headers(
        &mut self,
        id: u32,
        block: &[u8],
        end_stream: bool,
        end_headers: bool,
        self_dependent: bool,
    ) {
        if id & 1 == 0 {
            // §5.1.1: clients use odd stream ids.
            return self.conn_error(ErrorCode::ProtocolError);
        }
        let block_for = if let Some(s) = self.streams.get(&id) {
            if s.state == State::HalfClosedRemote {
                BlockFor::Discard(Some(ErrorCode::StreamClosed))
            } else if !end_stream {
                // §8.1: a second HEADERS is trailers, and ends the stream.
                BlockFor::Discard(Some(ErrorCode::ProtocolError))
            } else {
                BlockFor::Trailers
            }
        } else if id <= self.max_client_stream {
            match self.recently_closed.iter().find(|(i, _)| *i == id) {
                Some((_, Closed::ByUs)) => BlockFor::Discard(None),
                // §5.1: HEADERS on a closed stream.
                Some((_, Closed::Other)) => return self.conn_error(ErrorCode::StreamClosed),
                // §5.1.1: a stream id lower than one already used.
                None => return self.conn_error(ErrorCode::ProtocolError),
            }
        } else {
            self.max_client_stream = id;
            if self.going_away.is_some_and(|last| id > last) {
                BlockFor::Discard(None)
            } else if self.streams.len() >= self.cfg.max_concurrent_streams as usize {
                BlockFor::Refused
            } else {
                BlockFor::Request
            }
        };
        let block_for = match block_for {
            BlockFor::Request | BlockFor::Trailers if self_dependent => {
                BlockFor::Discard(Some(ErrorCode::ProtocolError))
            }
            b => b,
        };
        if block.len() > self.cfg.max_header_block as usize {
            return self.conn_error(ErrorCode::EnhanceYourCalm);
        }
        self.block.clear();
        self.block.extend_from_slice(block);
        self.block_stream = id;
        self.block_end_stream = end_stream;
        self.block_frames = 0;
        self.block_for = block_for;
        if end_headers {
            self.end_block();
        }
    }

    /// A header block is complete: decode it and act on it.
    fn end_block(&mut self) {
        let id = self.block_stream;
        let end_stream = self.block_end_stream;
        self.block_stream = 0;
        let mut fields: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let block = std::mem::take(&mut self.block);
        let decoded = self.hpack.decode(
            &block,
            self.cfg.max_header_list_size as usize,
            &mut |n, v| fields.push((n.to_vec(), v.to_vec())),
        );
        self.block = block;
        self.block.clear();
        if self.block.capacity() > KEEP_CAPACITY {
            self.block = Vec::new();
        }
        let fits = match decoded {
            Ok(fits) => fits,
            Err(_) => return self.conn_error(ErrorCode::CompressionError),
        };
        match self.block_for {
            BlockFor::Discard(None) => {}
            BlockFor::Discard(Some(code)) => self.stream_error(id, code),
            BlockFor::Refused => {
                put_rst_stream(&mut self.out, id, ErrorCode::RefusedStream);
                self.remember(id, Closed::ByUs);
                self.spend(Flood::Resets);
            }
            // The driver ended or reset the stream while its trailers
            // were still arriving.
            BlockFor::Trailers if !self.streams.contains_key(&id) => {}
            BlockFor::Trailers => {
                let bad = !fits
                    || fields.iter().any(|(n, _)| n.first() == Some(&b':'))
                    || self.streams[&id]
                        .content_length
                        .is_some_and(|cl| cl != self.streams[&id].received);
                if bad {
                    self.stream_error(id, ErrorCode::ProtocolError);
                } else {
                    let s = self.streams.get_mut(&id).expect("checked above");
                    if let Some(mut req) = s.held.take() {
                        req.end_stream = true;
                        self.events.push_back(Event::Request(*req));
                    }
                    self.remote_end(id);
                }
            }
            BlockFor::Request if !fits => self.refuse(id, 431, end_stream),
            BlockFor::Request => match request(id, fields, end_stream) {
                Ok((req, content_length)) => {
                    let cl_bad = end_stream && content_length.is_some_and(|cl| cl != 0);
                    if cl_bad {
                        return self.stream_error(id, ErrorCode::ProtocolError);
                    }
                    // A small body is read before the request is handed
                    // out (as HTTP/1.1's session does), so the answer
                    // never races the upload.
                    let hold = !end_stream
                        && content_length.is_none_or(|cl| cl <= limits::MAX_DISCARD_BODY);
                    let urgency = req.urgency;
                    let held = if hold {
                        Some(Box::new(req))
                    } else {
                        self.events.push_back(Event::Request(req));
                        None
                    };
                    self.streams.insert(
                        id,
                        Stream {
                            state: if end_stream {
                                State::HalfClosedRemote
                            } else {
                                State::Open
                            },
                            send_window: i64::from(self.peer_initial_window),
                            recv_window: i64::from(self.cfg.initial_window),
                            recv_unacked: 0,
                            headers_sent: false,
                            body_pending: false,
                            urgency,
                            content_length,
                            received: 0,
                            held,
                        },
                    );
                    debug_assert!(self.streams.len() <= self.cfg.max_concurrent_streams as usize);
                }
                Err(Reject::Connect) => self.refuse(id, 405, end_stream),
                Err(Reject::Malformed) => self.stream_error(id, ErrorCode::ProtocolError),
            },
        }
    }

    /// Answers a request the driver never sees (a header list over the
    /// limit, CONNECT) with just a status.
    fn refuse(&mut self, id: u32, status: u16, end_stream: bool) {
        self.scratch.clear();
        hpack::encode_status(status, &mut self.scratch);
        put_headers(
            &mut self.out,
            id,
            &self.scratch,
            true,
            self.peer_max_frame_size,
        );
        if !end_stream {
            // §8.1: the response is complete; the body is not wanted.
            put_rst_stream(&mut self.out, id, ErrorCode::NoError);
        }
        self.remember(id, Closed::ByUs);
        self.spend(Flood::Resets);
    }

    fn on_window_update(&mut self, id: u32, increment: u32) {
        // A client reading fast sends many updates, each opening room for
        // a frame or more: only the small ones count against the budget.
        if increment < SMALL_WINDOW_INCREMENT && !self.spend(Flood::WindowUpdates) {
            return;
        }
        if id == 0 {
            self.conn_send_window += i64::from(increment);
            if self.conn_send_window > i64::from(MAX_WINDOW) {
                return self.conn_error(ErrorCode::FlowControlError);
            }
            return self.window_opened();
        }
        if id > self.max_client_stream {
            return self.conn_error(ErrorCode::ProtocolError);
        }
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        s.send_window += i64::from(increment);
        if s.send_window > i64::from(MAX_WINDOW) {
            return self.stream_error(id, ErrorCode::FlowControlError);
        }
        self.window_opened();
    }

    fn apply_settings(&mut self, params: &[u8]) {
        for (k, v) in frame::settings(params) {
            match k {
                setting::INITIAL_WINDOW_SIZE => {
                    // §6.9.2: every stream's window moves by the change.
                    let delta = i64::from(v) - i64::from(self.peer_initial_window);
                    self.peer_initial_window = v;
                    for s in self.streams.values_mut() {
                        s.send_window += delta;
                        if s.send_window > i64::from(MAX_WINDOW) {
                            return self.conn_error(ErrorCode::FlowControlError);
                        }
                    }
                    if delta > 0 {
                        self.window_opened();
                    }
                }
                setting::MAX_FRAME_SIZE => self.peer_max_frame_size = v,
                // HEADER_TABLE_SIZE: our encoder uses no dynamic table.
                // ENABLE_PUSH, MAX_CONCURRENT_STREAMS: we never push.
                // MAX_HEADER_LIST_SIZE: advisory; ours are small.
                _ => {}
            }
        }
        put_settings_ack(&mut self.out);
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

    /// After a GOAWAY either way, Close once the last stream is done.
    fn maybe_done(&mut self) {
        if (self.going_away.is_some() || self.peer_going_away)
            && self.streams.is_empty()
            && !self.is_closed()
        {
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

/// Why a request's header block is not a request we serve.
enum Reject {
    /// §8.1.1: a stream error, PROTOCOL_ERROR.
    Malformed,
    /// CONNECT (§8.5): answered 405.
    Connect,
}

/// Fields HTTP/2 forbids (§8.2.2).
const CONNECTION_SPECIFIC: [&[u8]; 5] = [
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"transfer-encoding",
    b"upgrade",
];

/// Checks a request's fields (§8.3.1, §8.2) and builds it; also returns
/// its content-length, if it has one.
fn request(
    stream_id: u32,
    fields: Vec<(Vec<u8>, Vec<u8>)>,
    end_stream: bool,
) -> Result<(Request, Option<u64>), Reject> {
    let (mut method, mut scheme, mut authority, mut path) = (None, None, None, None);
    let mut headers = Vec::new();
    let mut content_length: Option<u64> = None;
    let mut urgency = DEFAULT_URGENCY;
    for (name, value) in fields {
        if !valid_value(&value) {
            return Err(Reject::Malformed);
        }
        if name.first() == Some(&b':') {
            if !headers.is_empty() {
                // §8.3: pseudo-header fields come first.
                return Err(Reject::Malformed);
            }
            let slot = match &name[..] {
                b":method" => &mut method,
                b":scheme" => &mut scheme,
                b":authority" => &mut authority,
                b":path" => &mut path,
                _ => return Err(Reject::Malformed),
            };
            if slot.is_some() {
                return Err(Reject::Malformed);
            }
            *slot = Some(ascii(value)?);
            continue;
        }
        if name.is_empty() || !name.iter().all(|&b| is_token(b) && !b.is_ascii_uppercase()) {
            return Err(Reject::Malformed);
        }
        if CONNECTION_SPECIFIC.contains(&&name[..]) || (name == b"te" && value != b"trailers") {
            return Err(Reject::Malformed);
        }
        if name == b"content-length" {
            let n = std::str::from_utf8(&value)
                .ok()
                .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or(Reject::Malformed)?;
            if content_length.is_some_and(|c| c != n) {
                return Err(Reject::Malformed);
            }
            content_length = Some(n);
        }
        if name == b"priority" {
            urgency = parse_urgency(&value).unwrap_or(urgency);
        }
        let name = String::from_utf8(name).map_err(|_| Reject::Malformed)?;
        headers.push((name, value));
    }
    let method = method.ok_or(Reject::Malformed)?;
    if method == "CONNECT" {
        return Err(Reject::Connect);
    }
    let (Some(scheme), Some(path)) = (scheme, path) else {
        return Err(Reject::Malformed);
    };
    if !(path.starts_with('/') || (path == "*" && method == "OPTIONS")) {
        return Err(Reject::Malformed);
    }
    if method.is_empty() || !method.bytes().all(is_token) {
        return Err(Reject::Malformed);
    }
    Ok((
        Request {
            stream_id,
            method,
            scheme,
            authority,
            path,
            headers,
            end_stream,
            urgency,
        },
        content_length,
    ))
}

/// A pseudo-header's value: visible ASCII only.
fn ascii(value: Vec<u8>) -> Result<String, Reject> {
    if value.iter().all(|b| (0x21..0x7f).contains(b)) {
        String::from_utf8(value).map_err(|_| Reject::Malformed)
    } else {
        Err(Reject::Malformed)
    }
}

/// §8.2.1: no NUL, CR or LF, and no whitespace at either end.
fn valid_value(v: &[u8]) -> bool {
    let ws = |b: &u8| *b == b' ' || *b == b'\t';
    !v.iter().any(|&b| b == 0 || b == b'\r' || b == b'\n')
        && !v.first().is_some_and(ws)
        && !v.last().is_some_and(ws)
}

/// RFC 9110 §5.6.2 tchar.
fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// RFC 9218 §4.1's `u` parameter from a `priority` field (a structured
/// dictionary; other members ignored).
fn parse_urgency(v: &[u8]) -> Option<u8> {
    let s = std::str::from_utf8(v).ok()?;
    s.split(',').find_map(|m| {
        let m = m.trim();
        let u = m.strip_prefix("u=")?;
        match u.as_bytes() {
            [d] if d.is_ascii_digit() && d - b'0' <= MAX_URGENCY => Some(d - b'0'),
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests;
