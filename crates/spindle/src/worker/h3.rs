//! HTTP/3 on the worker (`--http3`): its UDP socket and its QUIC driver
//! (`crate::quic`), on either engine.
//!
//! - The socket is watched by one multishot poll (`Op::QuicIn`); each
//!   completion reads every datagram waiting (GRO batches) into the
//!   driver, then runs a turn ([`Worker::quic_turn`]).
//! - The driver's earliest deadline is one timeout in the engine
//!   (`Op::QuicTimer`, its sequence number in the slot field, so that a
//!   timeout replaced by an earlier one is told apart and ignored).
//! - Sends go straight from the driver's queue by `sendmsg` (GSO); a
//!   full socket buffer arms one poll for room (`Op::QuicOut`).
//! - Each request is served by a stream slot (`Proto::H3Stream`), driven
//!   as an HTTP/2 stream's is: its session is given the request
//!   (`Session::for_stream`), it opens and reads like any response, and
//!   what it would send goes to the driver: the head as HEADERS
//!   ([`Worker::h3_stream_respond`]), body bytes as DATA
//!   ([`Worker::h3_stream_send`]), its end as the stream's FIN. A chunk
//!   is reported sent once QUIC took it (at once, or on
//!   `Happened::Drained`), so a stream holds at most one chunk in the
//!   driver beyond QUIC's own send window.
//!
//! Not yet: reads straight into `Bytes` (a chunk is copied from its
//! buffer once, then once more into packets by quinn-proto), `sendmsg`
//! through the ring, and handing the UDP socket over at a binary
//! handover (the new process binds its own; connections of the old one
//! then fail).

use std::collections::HashMap;
use std::time::Instant;

use bytes::Bytes;
use quinn_proto::ConnectionHandle;
use spindle_core::h3::conn::Request;
use spindle_core::h3::ErrorCode;
use spindle_core::{Fields, Session, StreamProtocol};

use super::h2::Proto;
use super::ring::{ud, Op};
use super::tls::Plain;
use super::NO_SLOT;
use super::{Conn, Worker};
use crate::conn::{Life, Phase, Steps, Ticket};
use crate::io::{Engine, Sub, Timespec};
use crate::quic::driver::{Happened, Quic, Wrote};
use crate::quic::udp::Udp;

/// A worker's HTTP/3: its socket, its driver, and the stream slots.
pub(super) struct QuicIo {
    udp: Udp,
    quic: Quic,
    buf: Vec<u8>,
    /// The slot serving each (connection, stream).
    slots: HashMap<(usize, u64), Ticket>,
    /// Body bytes of a stream slot that QUIC holds: reported sent once
    /// drained.
    held: HashMap<u32, usize>,
    /// Whether the multishot poll is in the engine.
    watching: bool,
    /// The drain is over: nothing more is armed.
    stopped: bool,
    /// Whether a poll for room is in the engine.
    waiting_room: bool,
    /// A send error was logged (once per worker).
    warned_send: bool,
    /// A `NOP` is in the engine to read the datagrams a turn left.
    more_armed: bool,
    /// The deadline the engine's timeout is armed for, and its number.
    timer: Option<Instant>,
    timer_seq: u32,
    ts: Box<Timespec>,
    /// The TLS generation the driver's server configuration was built from.
    tls_gen: u64,
    keys: crate::quic::Keys,
}

impl QuicIo {
    fn new(udp: Udp, quic: Quic, tls_gen: u64, keys: crate::quic::Keys) -> QuicIo {
        QuicIo {
            keys,
            udp,
            quic,
            buf: vec![0; crate::quic::RECV_BUFFER],
            slots: HashMap::new(),
            held: HashMap::new(),
            watching: false,
            stopped: false,
            waiting_room: false,
            warned_send: false,
            more_armed: false,
            timer: None,
            timer_seq: 0,
            ts: Box::new(Timespec::of(std::time::Duration::ZERO)),
            tls_gen,
        }
    }

    /// No QUIC connection is left (the drain may end).
    fn idle(&self) -> bool {
        self.quic.connections() == 0
    }
}

impl<E: Engine> Worker<E> {
    /// This worker's HTTP/3, when the server was given a UDP socket for
    /// it: the driver, on the HTTPS configuration of now.
    pub(super) fn quic_setup(&mut self) -> Result<Option<Box<QuicIo>>, String> {
        let Some(setup) = self.serve.ctx.quic.take() else {
            return Ok(None);
        };
        let shared = self.serve.tls_shared().expect("HTTP/3 only beside HTTPS");
        let (gen, https) = shared.current();
        let tls = crate::quic::config::quic_tls(&https)?;
        let server = crate::quic::config::server(tls, &setup.keys.token);
        let endpoint = crate::quic::config::endpoint(self.serve.ctx.id, 0, &setup.keys.reset);
        let max = self.serve.ctx.cfg.max_connections_per_worker();
        let quic = Quic::new(endpoint, server, max);
        Ok(Some(Box::new(QuicIo::new(
            setup.udp, quic, gen, setup.keys,
        ))))
    }

    /// No QUIC connection is left, or HTTP/3 is off.
    pub(super) fn quic_idle(&self) -> bool {
        self.quic.as_ref().is_none_or(|q| q.idle())
    }

    /// At the end of the drain: the socket's poll and the timeout go.
    pub(super) fn stop_quic(&mut self) {
        let Some(q) = self.quic.as_mut() else {
            return;
        };
        q.stopped = true;
        let mut subs = Vec::new();
        if q.watching {
            subs.push(Sub::PollRemove {
                target: ud(Op::QuicIn, NO_SLOT, 0),
            });
        }
        if q.waiting_room {
            subs.push(Sub::PollRemove {
                target: ud(Op::QuicOut, NO_SLOT, 0),
            });
        }
        if q.timer.take().is_some() {
            let target = ud(Op::QuicTimer, q.timer_seq, 0);
            q.timer_seq = (q.timer_seq + 1) % NO_SLOT;
            subs.push(Sub::TimeoutRemove { target });
        }
        for s in subs {
            self.push(s, ud(Op::Cancel, NO_SLOT, 0));
        }
    }

    fn quic_io(&mut self) -> &mut QuicIo {
        self.quic.as_mut().expect("HTTP/3 is on")
    }

    /// Watches the UDP socket (at start, and after a multishot poll ended).
    pub(super) fn arm_quic(&mut self) {
        let Some(q) = self.quic.as_mut() else {
            return;
        };
        // Armed through the drain too: connections finishing still
        // receive (acknowledgements above all).
        if q.watching || q.stopped {
            return;
        }
        q.watching = true;
        let sub = Sub::Poll {
            fd: q.udp.fd(),
            mask: libc::POLLIN as u32,
            multishot: true,
        };
        self.push(sub, ud(Op::QuicIn, NO_SLOT, 0));
    }

    pub(super) fn on_quic_in(&mut self, res: i32, more: bool) {
        if !more {
            self.quic_io().watching = false;
            if res >= 0 || res == -libc::ECANCELED {
                self.arm_quic();
            }
        }
        self.quic_turn();
    }

    pub(super) fn on_quic_more(&mut self) {
        self.quic_io().more_armed = false;
        self.quic_turn();
    }

    pub(super) fn on_quic_out(&mut self) {
        self.quic_io().waiting_room = false;
        self.quic_turn();
    }

    pub(super) fn on_quic_timer(&mut self, seq: u32) {
        let q = self.quic_io();
        if seq != q.timer_seq {
            return;
        }
        q.timer = None;
        self.quic_turn();
    }

    /// Everything waiting: datagrams in, deadlines passed, the driver's
    /// events, datagrams out, the next deadline.
    pub(super) fn quic_turn(&mut self) {
        let now = self.now;
        let q = self.quic_io();
        let mut more = true;
        for _ in 0..crate::quic::RECVS_PER_TURN {
            match q.udp.recv(&mut q.buf) {
                Ok(Some(r)) => q.quic.recv(now, r.from, r.ecn, &q.buf[..r.len], r.stride),
                Ok(None) => {
                    more = false;
                    break;
                }
                Err(e) => {
                    crate::warn!("HTTP/3: receive: {e}");
                    more = false;
                    break;
                }
            }
        }
        if more && !q.more_armed && !q.stopped {
            // Datagrams may still wait: the rest on the loop's next turn,
            // after the other connections' completions (a flood must not
            // starve TCP on this worker).
            q.more_armed = true;
            self.push(Sub::Nop, ud(Op::QuicMore, NO_SLOT, 0));
        }
        let q = self.quic_io();
        q.quic.timeouts(now);
        self.quic_events();
        self.quic_flush();
        self.quic_events();
    }

    /// Sends what the driver queued and arms the timeout for its next
    /// deadline: after anything that may have made packets.
    fn quic_flush(&mut self) {
        let now = self.now;
        let q = self.quic_io();
        if !q.waiting_room && !q.quic.send(&mut q.udp, now) {
            q.waiting_room = true;
            let sub = Sub::Poll {
                fd: q.udp.fd(),
                mask: libc::POLLOUT as u32,
                multishot: false,
            };
            self.push(sub, ud(Op::QuicOut, NO_SLOT, 0));
        }
        let q = self.quic_io();
        if let (n, Some(e)) = q.quic.send_errors() {
            if !q.warned_send {
                q.warned_send = true;
                crate::warn!("HTTP/3: a datagram the kernel would not send ({e}); such datagrams are dropped as lost ({n} so far; said once)");
            }
        }
        // Sending may have let starved connections make events (a stream
        // drained, a new request). They are handled from the engine's
        // queue (a NOP), never from here: this runs inside a slot's step,
        // and a new stream's or a gone one's handling must not re-enter it.
        let q = self.quic_io();
        if q.quic.has_events() && !q.more_armed && !q.stopped {
            q.more_armed = true;
            self.push(Sub::Nop, ud(Op::QuicMore, NO_SLOT, 0));
        }
        self.quic_arm_timer();
    }

    fn quic_arm_timer(&mut self) {
        let now = self.now;
        let q = self.quic_io();
        let Some(next) = q.quic.next_timeout() else {
            return;
        };
        if q.timer.is_some_and(|t| t <= next) {
            return;
        }
        // One timeout in the engine at a time: a later one goes (its
        // completion, -ECANCELED under an old number, is ignored), so
        // none is left to hold the end of a drain.
        if q.timer.is_some() {
            let target = ud(Op::QuicTimer, q.timer_seq, 0);
            self.push(Sub::TimeoutRemove { target }, ud(Op::Cancel, NO_SLOT, 0));
        }
        let q = self.quic_io();
        q.timer_seq = (q.timer_seq + 1) % NO_SLOT;
        q.timer = Some(next);
        *q.ts = Timespec::of(next.saturating_duration_since(now));
        let (ts, seq): (*const Timespec, u32) = (&*q.ts, q.timer_seq);
        self.push(Sub::Timeout { ts }, ud(Op::QuicTimer, seq, 0));
    }

    /// What the driver has to say: requests, drained streams, streams gone.
    fn quic_events(&mut self) {
        loop {
            let Some(e) = self.quic_io().quic.poll_event() else {
                return;
            };
            match e {
                Happened::Request {
                    conn,
                    stream,
                    peer,
                    request,
                } => self.h3_serve(conn, stream, peer, request),
                Happened::Drained { conn, stream } => {
                    let q = self.quic_io();
                    let Some(&who) = q.slots.get(&(conn.0, stream)) else {
                        continue;
                    };
                    if let Some(n) = q.held.remove(&who.slot) {
                        if self.conns.get(who).is_some() {
                            self.on_send(who.slot, n as i32);
                        }
                    }
                }
                Happened::Gone { conn, stream } => {
                    let q = self.quic_io();
                    if let Some(who) = q.slots.remove(&(conn.0, stream)) {
                        q.held.remove(&who.slot);
                        if self.conns.get(who).is_some() {
                            self.abort(who.slot);
                        }
                    }
                }
            }
        }
    }

    /// A new request: a stream slot of its own, with a session given it.
    fn h3_serve(
        &mut self,
        conn: ConnectionHandle,
        stream: u64,
        peer: std::net::SocketAddr,
        request: Request,
    ) {
        let now = self.now;
        let core = match request.to_core() {
            Ok(r) => r,
            Err(_) => {
                let q = self.quic_io();
                q.quic.reject(conn, stream, ErrorCode::MessageError, now);
                return;
            }
        };
        if self.conns.full() {
            let q = self.quic_io();
            q.quic.reject(conn, stream, ErrorCode::RequestRejected, now);
            return;
        }
        let mut session = Session::for_stream(Some(peer), core, StreamProtocol::Http3);
        session.set_tls();
        let fd = self.quic_io().udp.fd();
        let life = Life::new(session, None, &self.serve.ctx, false, fd, now);
        let proto = Proto::H3Stream {
            conn: conn.0,
            id: stream,
            ended: false,
        };
        let who = self.conns.insert(Conn::new(fd, life, proto, None, now));
        self.streams += 1;
        self.quic_io().slots.insert((conn.0, stream), who);
        self.drive(who);
    }

    /// A stream slot's response head goes as HEADERS. False: the stream
    /// is gone.
    pub(super) fn h3_stream_respond(&mut self, slot: u32, status: u16, fields: Fields) -> bool {
        let Proto::H3Stream { conn, id, .. } = self.conns.live_at(slot).proto else {
            unreachable!("h3_stream_respond on another slot")
        };
        let now = self.now;
        let sent =
            self.quic_io()
                .quic
                .respond(ConnectionHandle(conn), id, status, &fields, false, now);
        self.quic_flush();
        sent
    }

    /// A stream slot's plaintext (its in-memory body, or body bytes of a
    /// chunk buffer), handed to QUIC as one DATA frame.
    pub(super) fn h3_stream_send(&mut self, slot: u32, what: Plain) {
        let c = self.conns.live_at(slot);
        let Proto::H3Stream { conn, id, .. } = c.proto else {
            unreachable!("h3_stream_send on another slot")
        };
        let tx = c.tx.as_ref().expect("response in progress");
        let chunk = match what {
            Plain::Head(from) => Bytes::copy_from_slice(&tx.resp.front[from..]),
            Plain::Buf(b, from, to) => chunk_bytes(&self.pool.bufs[b as usize].get()[from..to]),
            Plain::Held(..) => unreachable!("no held layout on HTTP/3 (tx.rs held_layout)"),
        };
        let n = chunk.len();
        if n == 0 {
            return self.on_send(slot, 0);
        }
        let now = self.now;
        let wrote = self
            .quic_io()
            .quic
            .body(ConnectionHandle(conn), id, chunk, now);
        match wrote {
            Wrote::Taken => {
                self.quic_flush();
                self.on_send(slot, n as i32);
            }
            Wrote::Held => {
                self.quic_io().held.insert(slot, n);
                self.quic_flush();
            }
            Wrote::Gone => {
                self.quic_flush();
                self.abort(slot);
            }
        }
    }

    /// Closes a stream slot: the stream is reset unless its response
    /// ended, then the slot goes once its own operations are done.
    pub(super) fn h3_stream_close(&mut self, slot: u32) {
        let now = self.now;
        let c = self.conns.live_at(slot);
        if c.life.phase == Phase::Closing {
            return;
        }
        let Proto::H3Stream { conn, id, ended } = c.proto else {
            unreachable!("h3_stream_close on another slot")
        };
        c.life.closing(&self.serve.ctx, false, now);
        c.life.phase = Phase::Closing;
        let q = self.quic_io();
        q.slots.remove(&(conn, id));
        q.held.remove(&slot);
        if !ended {
            q.quic.abort(ConnectionHandle(conn), id, now);
            self.quic_flush();
        }
        self.maybe_release(slot);
    }

    /// The stream slot's response is over: the stream's FIN.
    pub(super) fn h3_finish(&mut self, who: Ticket) {
        let Proto::H3Stream { conn, id, .. } = self.conns.live_at(who.slot).proto else {
            unreachable!("h3_finish on another slot")
        };
        let now = self.now;
        self.quic_io().quic.finish(ConnectionHandle(conn), id, now);
        self.quic_flush();
    }

    /// The drain: GOAWAY on every QUIC connection, no new ones; each
    /// closes once its streams are done.
    pub(super) fn quic_drain(&mut self) {
        let now = self.now;
        let Some(q) = self.quic.as_mut() else {
            return;
        };
        // Datagrams still come for the connections finishing: the poll
        // stays, and the driver refuses new connections.
        q.quic.shutdown(now);
        self.quic_flush();
    }

    /// The tick: new certificates, and the drain's deadline, past which
    /// every QUIC connection is closed (as the sweep closes TCP ones).
    pub(super) fn quic_tick(&mut self) {
        if self.quic.is_none() {
            return;
        }
        self.quic_refresh_tls();
        let late = self.serve.drain_deadline.is_some_and(|d| self.now >= d);
        if late && !self.quic_idle() {
            let now = self.now;
            self.quic_io().quic.close_all(now);
            self.quic_flush();
        }
    }

    /// A reload may have brought new certificates: new connections get
    /// them.
    fn quic_refresh_tls(&mut self) {
        let Some(shared) = self.serve.tls_shared() else {
            return;
        };
        let Some(q) = self.quic.as_mut() else {
            return;
        };
        let (gen, cfg) = shared.current();
        if gen == q.tls_gen {
            return;
        }
        match crate::quic::config::quic_tls(&cfg) {
            Ok(tls) => {
                q.quic
                    .set_server_config(crate::quic::config::server(tls, &q.keys.token));
                q.tls_gen = gen;
            }
            Err(e) => crate::warn!("HTTP/3: {e}"),
        }
    }
}

/// Chunk copies QUIC has let go of, kept for the next chunks: a fresh
/// allocation of a chunk's size is mapped and zeroed by the kernel each
/// time (page faults were 8% of a download's CPU), so each worker keeps
/// up to [`KEPT_CHUNKS`] of them.
const KEPT_CHUNKS: usize = 16;

thread_local! {
    static CHUNKS: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A chunk's copy that goes back to [`CHUNKS`] when QUIC drops it (once
/// the client acknowledged it; on the worker's thread, which owns QUIC).
struct KeptChunk(Vec<u8>);

impl AsRef<[u8]> for KeptChunk {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for KeptChunk {
    fn drop(&mut self) {
        let mut v = std::mem::take(&mut self.0);
        v.clear();
        let _ = CHUNKS.try_with(|c| {
            let mut c = c.borrow_mut();
            if c.len() < KEPT_CHUNKS {
                c.push(v);
            }
        });
    }
}

/// `bytes` copied into a kept buffer, as `Bytes` for QUIC.
fn chunk_bytes(bytes: &[u8]) -> Bytes {
    let mut v = CHUNKS.with(|c| c.borrow_mut().pop()).unwrap_or_default();
    v.extend_from_slice(bytes);
    Bytes::from_owner(KeptChunk(v))
}
