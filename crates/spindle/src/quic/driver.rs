//! One worker's QUIC: quinn-proto's endpoint and connections, each
//! connection's HTTP/3 state ([`H3Conn`]), and what joins them, without
//! a socket: the loop hands in datagrams and the time, takes requests
//! ([`Quic::poll_event`]) and gives back responses, and sends what
//! [`Quic::send`] has queued.
//!
//! ```text
//!  datagrams ─▶ recv ─▶ Endpoint ─▶ Connection ─▶ stream bytes ─▶ H3Conn ─▶ Happened::Request
//!  deadlines ─▶ timeouts ─────────▶ Connection           respond ─▶ HEADERS ─┐
//!                                                        body ────▶ DATA ────┤ (write_chunks:
//!  send(udp) ◀─ queue ◀─ poll_transmit (GSO batches) ◀── Connection ◀────────┘  no copy)
//! ```
//!
//! A response's body arrives as `Bytes` (the loop's read buffer) and is
//! handed to QUIC whole, after its DATA frame's header: QUIC keeps it
//! until acknowledged and copies it once, into the packet it seals in
//! place. A stream holds at most one chunk QUIC has not taken yet (the
//! loop's chunk buffer: the loop reads the next chunk once told,
//! [`Happened::Drained`]). Per connection, QUIC holds at most
//! [`SEND_WINDOW`] bytes.
//!
//! Which connections to accept: at most `max_connections`, at most
//! [`NEW_CONNECTIONS_PER_SECOND`] new ones from one address (and at most
//! [`PACKETS_PER_SECOND`] datagrams: `rates.rs`), and a Retry
//! for unvalidated addresses once [`RETRY_ABOVE`] handshakes are in
//! progress.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use quinn_proto::{
    Connection, ConnectionHandle, DatagramEvent, Dir, EcnCodepoint, Endpoint, EndpointConfig,
    Event as QuicEvent, Incoming, ReadError, ServerConfig, StreamEvent, StreamId, VarInt,
};
use spindle_core::h3::conn::{Event as H3Event, H3Conn, Request};
use spindle_core::h3::ErrorCode;

use super::udp::Udp;
use super::*;

/// What the driver tells the loop.
#[derive(Debug)]
pub enum Happened {
    /// A request on `stream` of `conn`: answer with [`Quic::respond`],
    /// then [`Quic::body`] and [`Quic::finish`].
    Request {
        conn: ConnectionHandle,
        stream: u64,
        peer: SocketAddr,
        request: Request,
    },
    /// QUIC took all of the stream's body so far: give it the next chunk.
    Drained { conn: ConnectionHandle, stream: u64 },
    /// The stream is gone (reset by either side, or its connection
    /// closed): stop its response.
    Gone { conn: ConnectionHandle, stream: u64 },
}

/// What [`Quic::body`] did with a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wrote {
    /// QUIC took all of it: go on.
    Taken,
    /// Some waits for QUIC's window: [`Happened::Drained`] follows.
    Held,
    /// The stream is gone: stop.
    Gone,
}

/// Datagrams of one size to one address: one GSO send.
#[derive(Debug)]
struct Datagrams {
    to: SocketAddr,
    ecn: u8,
    segment: usize,
    bytes: Vec<u8>,
}

/// Where a connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// TLS under way; no streams yet.
    Handshaking,
    /// Our control stream is open; requests are served.
    Open,
    /// Lost or closed: only draining remains.
    Closed,
}

/// One QUIC connection and its HTTP/3.
struct QConn {
    quic: Connection,
    h3: H3Conn,
    stage: Stage,
    /// Request streams handed to the loop and not yet over.
    requests: BTreeSet<u64>,
    /// Body bytes (DATA headers and payloads) QUIC has not taken yet.
    pending: HashMap<u64, VecDeque<Bytes>>,
    /// Received bytes H3Conn has not taken yet, and whether the FIN
    /// followed them.
    unfed: HashMap<u64, (Bytes, bool)>,
    /// Streams whose FIN HTTP/3 has given, sent once their body is.
    fins: BTreeSet<u64>,
    /// Streams told [`Wrote::Held`], told [`Happened::Drained`] later.
    held: BTreeSet<u64>,
    /// Streams finished whose bytes the client has not all acknowledged.
    unacked: BTreeSet<u64>,
    /// HTTP/3's graceful close (H3_NO_ERROR after a drain), carried out
    /// once every stream's bytes are acknowledged: closing sooner would
    /// throw away what is still in flight.
    closing: Option<VarInt>,
    /// The deadline in the timer heap that counts.
    armed: Option<Instant>,
}

/// One worker's QUIC.
pub struct Quic {
    endpoint: Endpoint,
    server: Arc<ServerConfig>,
    max_connections: usize,
    conns: HashMap<ConnectionHandle, QConn>,
    timers: BinaryHeap<Reverse<(Instant, usize)>>,
    queue: VecDeque<Datagrams>,
    queued_bytes: usize,
    /// Connections that stopped building packets for a full queue.
    starved: BTreeSet<usize>,
    rates: super::rates::Rates,
    events: VecDeque<Happened>,
    scratch: Vec<u8>,
    /// After [`Quic::shutdown`]: new connections are refused.
    draining: bool,
    /// Datagrams the kernel refused to send, and the last reason.
    send_errors: u64,
    last_send_error: Option<std::io::Error>,
}

impl Quic {
    pub fn new(
        endpoint: EndpointConfig,
        server: Arc<ServerConfig>,
        max_connections: usize,
    ) -> Quic {
        Quic {
            endpoint: Endpoint::new(Arc::new(endpoint), Some(server.clone()), true, None),
            server,
            max_connections,
            conns: HashMap::new(),
            timers: BinaryHeap::new(),
            queue: VecDeque::new(),
            queued_bytes: 0,
            starved: BTreeSet::new(),
            rates: Default::default(),
            events: VecDeque::new(),
            scratch: Vec::new(),
            draining: false,
            send_errors: 0,
            last_send_error: None,
        }
    }

    /// New connections get `server` (a reload's certificates).
    pub fn set_server_config(&mut self, server: Arc<ServerConfig>) {
        self.endpoint.set_server_config(Some(server.clone()));
        self.server = server;
    }

    /// Datagrams dropped because the kernel refused them, and the last
    /// reason (taken: the caller logs it once).
    pub fn send_errors(&mut self) -> (u64, Option<std::io::Error>) {
        (self.send_errors, self.last_send_error.take())
    }

    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// Whether events wait for [`Quic::poll_event`].
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    pub fn poll_event(&mut self) -> Option<Happened> {
        self.events.pop_front()
    }

    /// The earliest deadline of any connection.
    pub fn next_timeout(&mut self) -> Option<Instant> {
        while let Some(&Reverse((at, h))) = self.timers.peek() {
            let live = self.conns.get(&ConnectionHandle(h)).and_then(|c| c.armed);
            if live == Some(at) {
                return Some(at);
            }
            self.timers.pop();
        }
        None
    }

    /// A receive of `data` from `from`: datagrams of `stride` bytes. An
    /// empty datagram (a UDP payload of 0 bytes, which anyone can send)
    /// holds no packet: dropped.
    pub fn recv(&mut self, now: Instant, from: SocketAddr, ecn: u8, data: &[u8], stride: usize) {
        if data.is_empty() {
            return;
        }
        assert!(stride > 0);
        let mut touched = BTreeSet::new();
        for d in data.chunks(stride) {
            if !self.rates.packet(from.ip(), now) {
                continue;
            }
            let ecn = EcnCodepoint::from_bits(ecn);
            let mut buf = std::mem::take(&mut self.scratch);
            let event = self
                .endpoint
                .handle(now, from, None, ecn, BytesMut::from(d), &mut buf);
            match event {
                Some(DatagramEvent::ConnectionEvent(h, e)) => {
                    if let Some(c) = self.conns.get_mut(&h) {
                        c.quic.handle_event(e);
                        touched.insert(h.0);
                    }
                }
                Some(DatagramEvent::NewConnection(incoming)) => {
                    if let Some(h) = self.incoming(now, incoming, &mut buf) {
                        touched.insert(h.0);
                    }
                }
                Some(DatagramEvent::Response(t)) => self.queue_transmit(&t, &buf),
                None => {}
            }
            buf.clear();
            self.scratch = buf;
        }
        for h in touched {
            self.drive(ConnectionHandle(h), now);
        }
    }

    /// Every connection whose deadline has passed.
    pub fn timeouts(&mut self, now: Instant) {
        while let Some(at) = self.next_timeout() {
            if at > now {
                break;
            }
            let Reverse((_, h)) = self.timers.pop().expect("peeked");
            let h = ConnectionHandle(h);
            let c = self.conns.get_mut(&h).expect("live: next_timeout checked");
            c.armed = None;
            c.quic.handle_timeout(now);
            self.drive(h, now);
        }
    }

    /// A client's first packet: accept, Retry, refuse or ignore it.
    fn incoming(
        &mut self,
        now: Instant,
        incoming: Incoming,
        buf: &mut Vec<u8>,
    ) -> Option<ConnectionHandle> {
        if !self.rates.connection(incoming.remote_address().ip(), now) {
            self.endpoint.ignore(incoming);
            return None;
        }
        if self.draining || self.conns.len() >= self.max_connections {
            let t = self.endpoint.refuse(incoming, buf);
            self.queue_transmit(&t, buf);
            return None;
        }
        let handshakes = self
            .conns
            .values()
            .filter(|c| c.stage == Stage::Handshaking)
            .count();
        if handshakes >= RETRY_ABOVE && !incoming.remote_address_validated() {
            match self.endpoint.retry(incoming, buf) {
                Ok(t) => self.queue_transmit(&t, buf),
                Err(e) => self.endpoint.ignore(e.into_incoming()),
            }
            return None;
        }
        match self
            .endpoint
            .accept(incoming, now, buf, Some(self.server.clone()))
        {
            Ok((h, quic)) => {
                self.conns.insert(h, QConn::new(quic));
                Some(h)
            }
            Err(e) => {
                if let Some(t) = e.response {
                    self.queue_transmit(&t, buf);
                }
                None
            }
        }
    }

    fn queue_transmit(&mut self, t: &quinn_proto::Transmit, buf: &[u8]) {
        self.queued_bytes += t.size;
        self.queue.push_back(Datagrams {
            to: t.destination,
            ecn: t.ecn.map_or(0, |e| e as u8),
            segment: t.segment_size.unwrap_or(t.size),
            bytes: buf[..t.size].to_vec(),
        });
    }

    /// Everything a connection has to do after something happened to it:
    /// its endpoint's events, its streams, HTTP/3's events and output,
    /// its packets, its deadline; and it is forgotten once drained.
    fn drive(&mut self, h: ConnectionHandle, now: Instant) {
        let Some(c) = self.conns.get_mut(&h) else {
            return;
        };
        while let Some(e) = c.quic.poll_endpoint_events() {
            if let Some(back) = self.endpoint.handle_event(h, e) {
                c.quic.handle_event(back);
            }
        }
        c.quic_events(h, &mut self.events);
        c.h3_events(h, now, &mut self.events);
        c.feed_unfed();
        c.flush(h, &mut self.events);
        c.close_when_acked(now);
        self.transmit(h, now);
        self.rearm(h);
    }

    /// Builds the connection's packets while the queue has room.
    fn transmit(&mut self, h: ConnectionHandle, now: Instant) {
        let mut buf = std::mem::take(&mut self.scratch);
        loop {
            if self.queued_bytes >= MAX_QUEUED_BYTES {
                self.starved.insert(h.0);
                break;
            }
            buf.clear();
            let c = self.conns.get_mut(&h).expect("live");
            let Some(t) = c.quic.poll_transmit(now, GSO_SEGMENTS, &mut buf) else {
                break;
            };
            self.queue_transmit(&t, &buf);
        }
        buf.clear();
        self.scratch = buf;
    }

    /// Puts the connection's deadline in the heap, or forgets a drained
    /// connection.
    fn rearm(&mut self, h: ConnectionHandle) {
        let c = self.conns.get_mut(&h).expect("live");
        if c.quic.is_drained() {
            for stream in std::mem::take(&mut c.requests) {
                self.events.push_back(Happened::Gone { conn: h, stream });
            }
            self.conns.remove(&h);
            self.starved.remove(&h.0);
            return;
        }
        let at = c.quic.poll_timeout();
        if at != c.armed {
            c.armed = at;
            if let Some(at) = at {
                self.timers.push(Reverse((at, h.0)));
            }
        }
    }

    /// Sends what is queued; `false`: the socket is full, call again
    /// once it is writable. Connections that stopped for a full queue
    /// build their next packets as it empties. Datagrams the kernel
    /// refuses (an unreachable address) are dropped, counted in
    /// [`Quic::send_errors`]: QUIC treats them as lost.
    pub fn send(&mut self, udp: &mut Udp, now: Instant) -> bool {
        loop {
            while let Some(d) = self.queue.front() {
                match udp.send(d.to, d.ecn, d.segment, &d.bytes) {
                    Ok(true) => {}
                    Ok(false) => return false,
                    Err(e) => {
                        self.send_errors += 1;
                        self.last_send_error = Some(e);
                    }
                }
                self.queued_bytes -= d.bytes.len();
                self.queue.pop_front();
            }
            let Some(h) = self.starved.pop_first() else {
                return true;
            };
            self.drive(ConnectionHandle(h), now);
        }
    }

    /// Whether datagrams wait for the socket.
    pub fn sending(&self) -> bool {
        !self.queue.is_empty()
    }

    /// A response's head on `stream`; `end`: no body follows. False: the
    /// stream is gone.
    pub fn respond(
        &mut self,
        h: ConnectionHandle,
        stream: u64,
        status: u16,
        fields: &spindle_core::Fields,
        end: bool,
        now: Instant,
    ) -> bool {
        let Some(c) = self.conns.get_mut(&h) else {
            return false;
        };
        let sent = c.h3.send_fields(stream, status, fields, end);
        if sent && end {
            c.requests.remove(&stream);
        }
        self.drive(h, now);
        sent
    }

    /// The next chunk of a response's body, as one DATA frame.
    pub fn body(&mut self, h: ConnectionHandle, stream: u64, chunk: Bytes, now: Instant) -> Wrote {
        assert!(!chunk.is_empty());
        let Some(c) = self.conns.get_mut(&h) else {
            return Wrote::Gone;
        };
        let Some(head) = c.h3.data_header(stream, chunk.len() as u64) else {
            return Wrote::Gone;
        };
        let q = c.pending.entry(stream).or_default();
        assert!(
            q.is_empty(),
            "a stream's next chunk comes only once the last was taken (Drained)"
        );
        q.push_back(Bytes::copy_from_slice(head.as_bytes()));
        q.push_back(chunk);
        self.drive(h, now);
        match self.conns.get_mut(&h) {
            Some(c) if c.requests.contains(&stream) => {
                if c.pending.contains_key(&stream) {
                    c.held.insert(stream);
                    Wrote::Held
                } else {
                    Wrote::Taken
                }
            }
            _ => Wrote::Gone,
        }
    }

    /// The response's body is all given: the stream ends once QUIC has
    /// taken it.
    pub fn finish(&mut self, h: ConnectionHandle, stream: u64, now: Instant) {
        if let Some(c) = self.conns.get_mut(&h) {
            if c.h3.finish(stream) {
                c.requests.remove(&stream);
            }
            self.drive(h, now);
        }
    }

    /// Aborts a response (its file failed mid-body, its slot closed).
    pub fn abort(&mut self, h: ConnectionHandle, stream: u64, now: Instant) {
        self.reject(h, stream, ErrorCode::InternalError, now);
    }

    /// Resets a request's stream with `code` (a request the core cannot
    /// take: H3_MESSAGE_ERROR; no room: H3_REQUEST_REJECTED).
    pub fn reject(&mut self, h: ConnectionHandle, stream: u64, code: ErrorCode, now: Instant) {
        if let Some(c) = self.conns.get_mut(&h) {
            c.h3.reset(stream, code);
            self.drive(h, now);
        }
    }

    /// The drain's deadline: every connection closes now (H3_NO_ERROR),
    /// whatever is in flight.
    pub fn close_all(&mut self, now: Instant) {
        let code = VarInt::from_u64(ErrorCode::NoError.code()).expect("an h3 code");
        let all: Vec<ConnectionHandle> = self.conns.keys().copied().collect();
        for h in all {
            if let Some(c) = self.conns.get_mut(&h) {
                c.quic.close(now, code, Bytes::new());
            }
            self.drive(h, now);
        }
    }

    /// Drain: GOAWAY on every connection; each closes once its streams
    /// in flight are done.
    pub fn shutdown(&mut self, now: Instant) {
        self.draining = true;
        let all: Vec<ConnectionHandle> = self.conns.keys().copied().collect();
        for h in all {
            if let Some(c) = self.conns.get_mut(&h) {
                c.h3.shutdown();
            }
            self.drive(h, now);
        }
    }
}

impl QConn {
    fn new(quic: Connection) -> QConn {
        QConn {
            quic,
            h3: H3Conn::new(),
            stage: Stage::Handshaking,
            requests: BTreeSet::new(),
            pending: HashMap::new(),
            unfed: HashMap::new(),
            fins: BTreeSet::new(),
            held: BTreeSet::new(),
            unacked: BTreeSet::new(),
            closing: None,
            armed: None,
        }
    }

    /// quinn-proto's events: the handshake's end, streams to read,
    /// windows opened, streams stopped, the connection lost.
    fn quic_events(&mut self, h: ConnectionHandle, out: &mut VecDeque<Happened>) {
        while let Some(e) = self.quic.poll() {
            match e {
                QuicEvent::Connected => {
                    let id = self
                        .quic
                        .streams()
                        .open(Dir::Uni)
                        .expect("a client allows 3 (RFC 9114 §6.2)");
                    self.h3.control_opened(u64::from(id));
                    self.stage = Stage::Open;
                }
                QuicEvent::ConnectionLost { .. } => {
                    self.stage = Stage::Closed;
                    for stream in std::mem::take(&mut self.requests) {
                        out.push_back(Happened::Gone { conn: h, stream });
                    }
                }
                QuicEvent::Stream(StreamEvent::Opened { dir }) => {
                    while let Some(id) = self.quic.streams().accept(dir) {
                        self.read(id);
                    }
                }
                QuicEvent::Stream(StreamEvent::Readable { id }) => self.read(id),
                QuicEvent::Stream(StreamEvent::Stopped { id, error_code }) => {
                    self.unacked.remove(&u64::from(id));
                    self.h3.stop_sending(u64::from(id), error_code.into_inner())
                }
                QuicEvent::Stream(StreamEvent::Finished { id }) => {
                    self.unacked.remove(&u64::from(id));
                }
                QuicEvent::Stream(_) | QuicEvent::HandshakeDataReady => {}
                QuicEvent::DatagramReceived | QuicEvent::DatagramsUnblocked => {}
            }
        }
    }

    /// Reads what arrived on a client's stream into HTTP/3.
    fn read(&mut self, id: StreamId) {
        let sid = u64::from(id);
        if self.unfed.contains_key(&sid) || self.stage == Stage::Closed {
            return;
        }
        let mut rs = self.quic.recv_stream(id);
        let Ok(mut chunks) = rs.read(true) else {
            return;
        };
        loop {
            match chunks.next(usize::MAX) {
                Ok(Some(chunk)) => {
                    let n = self.h3.recv(sid, &chunk.bytes, false);
                    if n < chunk.bytes.len() {
                        self.unfed.insert(sid, (chunk.bytes.slice(n..), false));
                        break;
                    }
                }
                Ok(None) => {
                    self.h3.recv(sid, &[], true);
                    break;
                }
                Err(ReadError::Blocked) => break,
                Err(ReadError::Reset(code)) => {
                    self.h3.stream_reset(sid, code.into_inner());
                    break;
                }
            }
        }
        let _ = chunks.finalize();
    }

    /// A graceful close goes once nothing waits to be sent or acknowledged.
    fn close_when_acked(&mut self, now: Instant) {
        let idle = self.unacked.is_empty() && self.pending.is_empty() && self.fins.is_empty();
        if let (Some(code), true) = (self.closing, idle) {
            self.closing = None;
            self.quic.close(now, code, Bytes::new());
        }
    }

    /// Offers HTTP/3 the bytes it did not take before.
    fn feed_unfed(&mut self) {
        let ids: Vec<u64> = self.unfed.keys().copied().collect();
        for sid in ids {
            let (bytes, fin) = self.unfed.remove(&sid).expect("listed");
            let n = self.h3.recv(sid, &bytes, fin);
            if n < bytes.len() {
                self.unfed.insert(sid, (bytes.slice(n..), fin));
            } else {
                self.read(StreamId::from(VarInt::from_u64(sid).expect("a stream id")));
            }
        }
    }

    /// HTTP/3's events carried out on QUIC.
    fn h3_events(&mut self, h: ConnectionHandle, now: Instant, out: &mut VecDeque<Happened>) {
        while let Some(e) = self.h3.poll_event() {
            match e {
                H3Event::Request(request) => {
                    let stream = request.stream_id;
                    self.requests.insert(stream);
                    let peer = self.quic.remote_address();
                    out.push_back(Happened::Request {
                        conn: h,
                        stream,
                        peer,
                        request,
                    });
                }
                H3Event::Reset { stream_id, code } => {
                    let id = StreamId::from(VarInt::from_u64(stream_id).expect("a stream id"));
                    let code = VarInt::from_u64(code.code()).expect("an h3 code");
                    let _ = self.quic.send_stream(id).reset(code);
                    let _ = self.quic.recv_stream(id).stop(code);
                    self.pending.remove(&stream_id);
                    self.unfed.remove(&stream_id);
                    self.fins.remove(&stream_id);
                    self.held.remove(&stream_id);
                    self.unacked.remove(&stream_id);
                    if self.requests.remove(&stream_id) {
                        out.push_back(Happened::Gone {
                            conn: h,
                            stream: stream_id,
                        });
                    }
                }
                H3Event::StopSending { stream_id, code } => {
                    let id = StreamId::from(VarInt::from_u64(stream_id).expect("a stream id"));
                    let code = VarInt::from_u64(code.code()).expect("an h3 code");
                    let _ = self.quic.recv_stream(id).stop(code);
                    self.unfed.remove(&stream_id);
                }
                H3Event::GoAway { .. } => {}
                H3Event::Close { code } => {
                    let graceful = code == ErrorCode::NoError;
                    let code = VarInt::from_u64(code.code()).expect("an h3 code");
                    if graceful {
                        self.closing = Some(code);
                    } else {
                        self.quic.close(now, code, Bytes::new());
                    }
                }
            }
        }
    }

    /// Writes to QUIC what each stream has: HTTP/3's bytes (HEADERS, the
    /// control stream), then body chunks, then the FIN (HTTP/3 hands its
    /// FIN over with its last bytes, and it waits here behind the body).
    fn flush(&mut self, h: ConnectionHandle, out: &mut VecDeque<Happened>) {
        if self.stage != Stage::Open {
            return;
        }
        let mut ids: BTreeSet<u64> = self.h3.writable().collect();
        ids.extend(self.pending.keys().copied());
        ids.extend(self.fins.iter().copied());
        for sid in ids {
            let id = StreamId::from(VarInt::from_u64(sid).expect("a stream id"));
            let o = self.h3.out(sid);
            let (len, fin) = (o.bytes.len(), o.fin);
            let n = match len {
                0 => 0,
                _ => self.quic.send_stream(id).write(o.bytes).unwrap_or(0),
            };
            self.h3.advance_out(sid, n);
            if n < len {
                continue;
            }
            if fin {
                self.fins.insert(sid);
            }
            if !self.write_pending(id) {
                continue;
            }
            if self.held.remove(&sid) && self.requests.contains(&sid) {
                out.push_back(Happened::Drained {
                    conn: h,
                    stream: sid,
                });
            }
            if self.fins.remove(&sid) && self.quic.send_stream(id).finish().is_ok() {
                self.unacked.insert(sid);
            }
        }
    }

    /// Hands the stream's waiting body chunks to QUIC; true when none
    /// wait any more.
    fn write_pending(&mut self, id: StreamId) -> bool {
        let sid = u64::from(id);
        let Some(q) = self.pending.get_mut(&sid) else {
            return true;
        };
        let taken = match self.quic.send_stream(id).write_chunks(q.make_contiguous()) {
            Ok(w) => w.chunks,
            Err(_) => 0,
        };
        q.drain(..taken);
        if !q.is_empty() {
            return false;
        }
        self.pending.remove(&sid);
        true
    }
}
