//! A connection's life once accepted (accept.rs): receive, the protocol
//! loop (open, respond), lingering close and timeouts.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use spindle_core::{OpenError, OpenRequest};
use std::time::Instant;

use super::ring::{ud, Op};
use super::{Conn, PendingOpen, Recv, Worker, NO_SLOT};
use crate::config::{Cap, FirstMiss};
use crate::conn::policy::LINGER_MAX_BYTES;
use crate::conn::StreamSteps;
use crate::conn::{Connection, Found, Phase, Reply, Steps, Ticket, Transport};
use crate::fs;
use crate::io::{DiskOp, Engine, Sub};
use crate::metrics::Timeout;
use crate::net;

impl<E: Engine> Worker<E> {
    // ----- the protocol loop -------------------------------------------

    pub(super) fn conn(&mut self, slot: u32) -> &mut Conn {
        self.conns.live_at(slot)
    }

    /// The ticket of a live slot.
    pub(super) fn who(&self, slot: u32) -> Ticket {
        self.conns.ticket(slot).expect("live slot")
    }

    pub(super) fn arm_recv(&mut self, slot: u32) {
        let cfg = self.serve.ctx.session_cfg.clone();
        let c = self.conns.live_at(slot);
        if c.proto.is_stream() {
            // A stream slot never receives: its connection does.
            return;
        }
        let h2_room = match &c.proto {
            super::h2::Proto::H2(io) => Some(!io.link.input_full()),
            _ => None,
        };
        let want = match c.life.phase {
            Phase::Lingering => true,
            Phase::Closing => false,
            _ if h2_room.is_some() => h2_room == Some(true),
            // Nothing sent after the last request is read as a request;
            // what arrives anyway is found at the close (see drive).
            _ => c.life.session.wants_input(&cfg) && !c.life.session.closes_after_response(),
        };
        if c.recv != Recv::Off || c.life.peer_eof || !want {
            return;
        }
        c.recv = Recv::Armed;
        let fd = c.fd;
        let multishot = !(c.life.session.served() == 0
            && c.life.phase != Phase::Lingering
            && h2_room.is_none());
        // Until a response has kept the connection open, one-shot: a
        // connection-per-fetch client then leaves no receive armed while
        // its response is sent, so its close needs no cancel and its FIN
        // wakes nothing (5 µs a connection in the profile;
        // docs/decisions.md, "Hot path"). Then multishot: one operation
        // keeps receiving until cancelled, EOF, an error, or no provided
        // buffer is left (ENOBUFS); each completion carries one buffer,
        // picked by the kernel only when data arrives.
        self.push_conn(slot, Op::Recv, Sub::Recv { fd, multishot });
    }

    /// Stops the multishot receive (flow control or closing).
    pub(super) fn cancel_recv(&mut self, slot: u32) {
        let c = self.conn(slot);
        if c.recv != Recv::Armed {
            return;
        }
        c.recv = Recv::Cancelling;
        let gen = self.conns.ticket(slot).expect("live slot").gen;
        let target = ud(Op::Recv, slot, gen);
        self.push(Sub::Cancel { target }, ud(Op::Cancel, NO_SLOT, 0));
    }

    pub(super) fn on_recv(&mut self, slot: u32, res: i32, flags: u32) {
        let cfg = self.serve.ctx.session_cfg.clone();
        let c = self.conn(slot);
        if !crate::io::more(flags) {
            c.recv = Recv::Off;
        }
        if res > 0 {
            let bid = crate::io::buffer_id(flags).expect("recv completed without a buffer");
            let data = self.io.recv_buf(bid, res as usize);
            let c = self.conns.live_at(slot);
            let mut full = false;
            match c.life.phase {
                Phase::Lingering => c.life.lingered += res as usize,
                Phase::Closing => {}
                _ if c.tls.is_some() => {
                    // Decrypted into the session (the receive buffer goes back
                    // to the ring only after, so `data` stays valid).
                    let data = data.to_vec();
                    self.provide_recv_buf(bid);
                    match self.tls_received(self.who(slot), &data) {
                        super::tls::Received::Ok => {}
                        super::tls::Received::Closed => self.conn(slot).life.peer_eof = true,
                        super::tls::Received::Failed => {
                            // Plain HTTP or garbage on the HTTPS port: closed.
                            self.abort(slot);
                            return;
                        }
                    }
                    let c = self.conn(slot);
                    if c.proto.is_h2() {
                        return self.h2_after_recv(slot);
                    }
                    if !c.life.session.wants_input(&cfg) {
                        self.cancel_recv(slot);
                    }
                    return self.after_recv(slot);
                }
                _ if c.proto.is_h2()
                    || (self.serve.ctx.cfg.serves_http2()
                        && c.life.session.served() == 0
                        && !c.life.session.mid_request()
                        && crate::conn::h2::is_preface(data)) =>
                {
                    // HTTP/2: a connection that is, or one whose first
                    // bytes are the preface (prior knowledge, h2c).
                    let data = data.to_vec();
                    self.provide_recv_buf(bid);
                    if !self.conn(slot).proto.is_h2() {
                        self.h2_begin(self.who(slot));
                    }
                    self.h2_received(self.who(slot), &data);
                    return self.h2_after_recv(slot);
                }
                _ => {
                    c.life.session.feed(data);
                    full = !c.life.session.wants_input(&cfg);
                }
            }
            self.provide_recv_buf(bid);
            if full {
                // Backpressure: a pipelining client is ahead of us by a
                // whole head's worth of bytes; stop receiving until the
                // session has caught up (drive() re-arms).
                self.cancel_recv(slot);
            }
        } else if res == 0 {
            c.life.peer_eof = true;
        } else if res == -libc::ENOBUFS {
            // Every receive buffer is in use at this instant; retry once
            // this batch of completions has returned some.
            self.rearm.push(slot);
            return;
        } else if res != -libc::ECANCELED {
            // ECONNRESET and friends: the peer is gone.
            c.life.peer_eof = true;
            if c.life.phase != Phase::Closing {
                self.abort(slot);
            } else {
                self.maybe_release(slot);
            }
            return;
        }
        self.after_recv(slot);
    }

    /// What a connection does after a receive: parse (when reading),
    /// linger on, or keep receiving.
    pub(super) fn after_recv(&mut self, slot: u32) {
        let c = self.conn(slot);
        match c.life.phase {
            Phase::Reading => self.drive(self.who(slot)),
            Phase::Lingering => {
                if c.life.peer_eof || c.life.lingered > LINGER_MAX_BYTES {
                    c.life.phase = Phase::Closing;
                    self.cancel_recv(slot);
                    self.maybe_release(slot);
                } else {
                    self.arm_recv(slot);
                }
            }
            Phase::Closing => self.maybe_release(slot),
            Phase::Opening | Phase::Sending => self.arm_recv(slot),
        }
    }

    pub(super) fn on_open(&mut self, slot: u32, res: i32) {
        let pending = self.conn(slot).open.take().expect("open in flight");
        let result = if res >= 0 {
            // SAFETY: OPENAT2 returned a new descriptor that nothing else owns.
            let fd = unsafe { OwnedFd::from_raw_fd(res) };
            fs::inspect_opened(fd.as_raw_fd())
                .map(|(meta, dev)| (fd, meta, dev))
                .map_err(fs::open_error)
        } else {
            Err(OpenError::from_errno(-res))
        };
        if self.conn(slot).life.phase == Phase::Closing {
            self.maybe_release(slot);
            return;
        }
        let who = self.conns.ticket(slot).expect("live slot");
        self.opened(who, &pending.req, Found::opened(result));
    }

    // ----- closing --------------------------------------------------------

    /// Drops the connection now (error, timeout, shutdown deadline).
    pub(super) fn abort(&mut self, slot: u32) {
        self.begin_close(slot, false);
    }

    /// Starts closing. With `linger`, the write side is shut first and
    /// input is drained for a while, so a peer that is still sending
    /// receives our last response instead of a reset.
    pub(super) fn begin_close(&mut self, slot: u32, linger: bool) {
        let c = self.conns.live_at(slot);
        if c.life.phase == Phase::Closing {
            return;
        }
        if let (Phase::Sending, Some(tx)) = (c.life.phase, c.tx.as_ref()) {
            self.serve.cut_off(&c.life, c.fd, tx.body_sent, self.now);
        }
        match c.proto {
            super::h2::Proto::Stream { .. } => return self.h2_stream_close(slot),
            super::h2::Proto::H3Stream { .. } => return self.h3_stream_close(slot),
            _ => {}
        }
        // An HTTP/2 connection's stream slots go before it.
        self.h2_abort_streams(slot);
        let c = self.conns.live_at(slot);
        if c.life.phase == Phase::Closing {
            return;
        }
        if c.life.closing(&self.serve.ctx, linger, self.now) {
            let fd = c.fd;
            if c.tls.is_some() {
                // close_notify goes first, linked to the shutdown.
                self.tls_close_notify(slot);
            }
            self.push_conn(
                slot,
                Op::Shutdown,
                Sub::Shutdown {
                    fd,
                    how: libc::SHUT_WR,
                },
            );
            self.arm_recv(slot);
            return;
        }
        c.life.phase = Phase::Closing;
        let sending = c.inflight > 0
            && (c.tx.is_some() || c.tls.as_ref().is_some_and(|t| t.sending()) || c.proto.is_h2());
        let gen = self.conns.ticket(slot).expect("live slot").gen;
        self.cancel_recv(slot);
        if sending {
            // A SEND (or a POLLOUT wait, or a SEND of TLS records) for a peer
            // that stopped reading waits for socket space forever; cancel it
            // (a no-op if none is in flight). A READ of the file cannot be
            // cut short and simply completes.
            for op in [Op::Send, Op::PollOut, Op::TlsSend, Op::H2Send] {
                let target = ud(op, slot, gen);
                self.push(Sub::Cancel { target }, ud(Op::Cancel, NO_SLOT, 0));
            }
        }
        // The chunk buffer, if any, goes back to the pool only when no
        // READ or SEND can still be using it (see maybe_release).
        self.maybe_release(slot);
    }

    /// Closes the socket and frees the slot once nothing names it.
    pub(super) fn maybe_release(&mut self, slot: u32) {
        let c = self.conn(slot);
        if c.life.phase == Phase::Lingering && c.inflight == 0 && c.recv == Recv::Off {
            c.life.phase = Phase::Closing;
        }
        if c.life.phase != Phase::Closing || c.inflight > 0 {
            return;
        }
        self.release_tx(slot);
        let mut c = self.conns.remove(slot).expect("live slot");
        debug_assert!(c.open.is_none());
        // Chunk buffers still queued to the socket, or held by an HTTP/2
        // link for its streams, go back to the pool.
        let mut freed = Vec::new();
        if let Some(t) = c.tls.as_mut() {
            t.wire.q.clear(&mut freed);
        }
        if let super::h2::Proto::H2(io) = &mut c.proto {
            Self::h2_reclaim(io, &mut freed);
        }
        self.give_bufs(freed);
        if let Some(tx) = &c.tx {
            debug_assert!(tx.buf.is_none(), "chunk buffer leaked");
            debug_assert!(tx.ahead.is_none(), "read-ahead buffer leaked");
        }
        if c.proto.is_stream() {
            self.streams -= 1;
        } else {
            // A stream slot's fd is its connection's, closed by it.
            self.push(Sub::Close { fd: c.fd }, ud(Op::Close, NO_SLOT, 0));
        }
        drop(c.file);
        self.serve
            .ctx
            .metrics
            .open
            .set((self.conns.live() - self.streams) as u64);
        if !self.conns.full() {
            for i in 0..self.accept.listeners.len() {
                if !self.accept.backoff.paused() {
                    self.arm_accept(i);
                }
            }
        }
    }

    // ----- timers and shutdown ------------------------------------------

    pub(super) fn on_tick(&mut self) {
        let now = self.now;
        self.tick_steps();
        if self.serve.ctx.id == 0
            && self.direct_reads()
            && self.serve.ctx.cfg.first_miss == FirstMiss::Auto
        {
            // One file read per tick, for every worker (memory.rs).
            self.serve.ctx.memory.refresh();
        }
        if !self.armed.helpers {
            // The eventfd's READ failed (it is armed again after every
            // completion otherwise): look for finished listings and checks
            // by the tick instead, and try the READ again.
            self.arm_helpers();
            self.on_helpers();
        }
        self.quic_tick();
        if self.accept.backoff.expire(now) {
            for i in 0..self.accept.listeners.len() {
                self.arm_accept(i);
            }
        }
        if !(self.serve.draining && self.conns.live() == 0 && self.quic_idle()) {
            self.arm_tick();
        }
    }
}

impl Connection for Conn {
    type H2Out = super::h2::H2Out;

    fn life(&self) -> &crate::conn::Life {
        &self.life
    }

    fn life_mut(&mut self) -> &mut crate::conn::Life {
        &mut self.life
    }

    fn proto(&self) -> &super::h2::Proto {
        &self.proto
    }

    fn proto_mut(&mut self) -> &mut super::h2::Proto {
        &mut self.proto
    }

    fn fd(&self) -> std::os::fd::RawFd {
        self.fd
    }

    fn tls_handshaking(&self) -> Option<bool> {
        self.tls.as_ref().map(|t| t.tls.handshaking())
    }

    /// An HTTP/2 connection keeps its deadline itself (`h2_touch`), also
    /// while its input waits and no receive is armed.
    fn receiving(&self) -> bool {
        self.recv != Recv::Off || self.proto.is_h2()
    }

    fn tls_parts(
        &mut self,
    ) -> Option<(
        &mut crate::conn::tls::Tls,
        &mut Vec<u8>,
        &mut crate::conn::Life,
    )> {
        let life = &mut self.life;
        self.tls.as_mut().map(|t| {
            let (dst, tls) = t.dst();
            (tls, dst, life)
        })
    }
}

/// The ring's primitives for a connection's steps (`conn::Steps`).
impl<E: Engine> Transport for Worker<E> {
    type Conn = Conn;
    /// A first use missing the page cache is read with `O_DIRECT`
    /// (`--first-miss`), where the ring reads.
    fn direct_reads(&self) -> bool {
        self.serve.ctx.cfg.backend.has(Cap::FirstMiss)
    }

    fn parts(&mut self) -> (&mut crate::conn::Serving, &mut crate::conn::Slots<Conn>) {
        (&mut self.serve, &mut self.conns)
    }

    fn now(&self) -> Instant {
        self.now
    }

    fn receive(&mut self, who: Ticket) {
        self.arm_recv(who.slot);
    }

    /// An asynchronous `OPENAT2` beneath the root.
    fn open_file(
        &mut self,
        who: Ticket,
        req: OpenRequest,
    ) -> Option<(OpenRequest, crate::conn::OpenResult)> {
        let slot = who.slot;
        let c = self.conn(slot);
        c.life.phase = Phase::Opening;
        let pending = Box::new(PendingOpen {
            req,
            how: fs::open_how(),
        });
        let path = pending.req.path.as_ptr();
        let how: *const libc::open_how = &pending.how;
        let req_root = pending.req.root;
        c.open = Some(pending);
        let root = self.serve.ctx.root.get(req_root).fd();
        self.push_conn(
            slot,
            Op::Open,
            Sub::Disk(DiskOp::Open {
                dir: root,
                path,
                how,
            }),
        );
        self.arm_recv(slot);
        None
    }

    /// A file's first use (see recent.rs) keeps its descriptor to
    /// itself, so that a page-cache miss may read it with `O_DIRECT`.
    fn transmit(&mut self, who: Ticket, r: Reply) {
        let slot = who.slot;
        if let Some(dev) = r.dev {
            let d = self.device(dev);
            self.conn(slot).dev = d;
        }
        if r.file.is_some() {
            let c = self.conn(slot);
            c.file = r.file;
            c.first_use = r.first_use;
        }
        self.start_tx(slot, r.resp);
    }

    fn await_helpers(&mut self, who: Ticket) {
        self.arm_recv(who.slot);
    }

    fn h2_turn(&mut self, who: Ticket) {
        self.h2_after_recv(who.slot);
    }

    fn close_conn(&mut self, who: Ticket, mut linger: bool) {
        let c = self.conn(who.slot);
        if !linger && c.recv == Recv::Off && !c.life.peer_eof && net::has_unread_input(c.fd) {
            // Bytes arrived after the last request while nothing was
            // receiving: closing over them would send a reset, which can
            // destroy the response before it is read.
            linger = true;
        }
        self.begin_close(who.slot, linger);
    }

    fn abort_slot(&mut self, who: Ticket) {
        if self.conns.get(who).is_some() {
            self.abort(who.slot);
        }
    }

    fn end_tx(&mut self, who: Ticket) -> Option<(spindle_core::Response, &'static str)> {
        let slot = who.slot;
        self.release_tx(slot);
        let c = self.conns.live_at(slot);
        let mut tx = c.tx.take().expect("tx");
        if let Some(next) = tx.resp.take_next_part() {
            // A multipart body goes on with its next part, from the same
            // file (the connection keeps it).
            self.start_tx(slot, next);
            return None;
        }
        c.file = None;
        // The body's last bytes are queued: send what Nagle holds.
        net::end_bulk(c.fd, std::mem::replace(&mut c.bulk, net::Bulk::Off));
        let outcome = tx.outcome();
        Some((tx.resp, outcome))
    }

    fn reloaded(&mut self) {}

    fn resume(&mut self, who: Ticket, waited: crate::conn::Waited) {
        let wait = match waited {
            crate::conn::Waited::Tick => super::Wait::Tick,
            crate::conn::Waited::Slices => super::Wait::Slices,
        };
        let c = self.conn(who.slot);
        if c.tx.as_mut().is_some_and(|t| t.wake(wait)) {
            self.pump(who.slot);
        }
    }

    fn expire(&mut self, who: Ticket, phase: Phase, why: Timeout) {
        if phase == Phase::Lingering && why != Timeout::Drain {
            self.conn(who.slot).life.phase = Phase::Closing;
            self.cancel_recv(who.slot);
            self.maybe_release(who.slot);
        } else {
            self.abort(who.slot);
        }
    }

    fn tls_records_out(&mut self, who: Ticket, got: crate::tls::Received) -> crate::tls::Received {
        self.tls_flush(who.slot);
        got
    }

    fn h2_out(&mut self, _who: Ticket) -> super::h2::H2Out {
        super::h2::H2Out::new()
    }

    /// Its frames go out, and its deadline moves.
    fn h2_input_taken(&mut self, who: Ticket) {
        self.h2_flush(who.slot);
        self.h2_touch(who.slot);
    }

    fn h2_output(&mut self, who: Ticket) {
        self.h2_flush(who.slot);
    }

    /// A stream slot names its connection's socket, and never does I/O
    /// on it.
    fn add_stream(&mut self, parent: Ticket, id: u32, life: crate::conn::Life) -> Option<Ticket> {
        let proto = super::h2::Proto::Stream {
            parent,
            id,
            ended: false,
        };
        let fd = self.conn(parent.slot).fd;
        let who = self
            .conns
            .insert(Conn::new(fd, life, proto, None, self.now));
        self.streams += 1;
        Some(who)
    }

    fn proceed(&mut self, who: Ticket) {
        self.drive(who);
    }

    fn h3_stream_done(&mut self, who: Ticket) {
        self.h3_finish(who);
    }
}
