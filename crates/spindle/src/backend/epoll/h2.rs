//! HTTP/2 on the epoll loop (posix-aio, the backend with a buffer path):
//! the same stream slots as the io-uring loop (`conn::h2` has the
//! design). A stream slot's mover writes to a [`Sock`](super::Sock) that
//! hands its bytes to the connection's `H2Link` instead of a socket; its
//! `can_write` is the link's room for it (two chunks at most), given
//! back when `fill` reports its bytes framed. The connection writes its
//! frames as far as the socket takes them, and again on `EPOLLOUT`.
//!
//! A stream slot holds a duplicate of its connection's descriptor, never
//! registered with epoll and never read or written: it only names the
//! client for the log and the rules. The connection closes its stream
//! slots before itself, so the socket closes with the connection.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Instant;

use spindle_core::h2::H2Settings;
use spindle_core::request::Request as CoreRequest;
use spindle_core::Fields;

use super::tls::Filled;
use super::{Conn, Mover, Worker, READ_TURN_BYTES};
use crate::conn::h2::{timeout, H2Link, Todo};
use crate::conn::{Life, Ticket};
use crate::sys::Stop;

impl H2Conn {
    /// Writes what waits, then frames and writes until the link has
    /// nothing ready or the socket is full: `Ok(true)` when it is full.
    /// Over TLS the frames go straight into records behind the waiting
    /// ones (one copy of a body byte); on a plain socket, through `out`.
    fn write_out(
        &mut self,
        fd: RawFd,
        tls: Option<&mut super::EpollTls>,
        can_write: &mut bool,
        sent: &mut Vec<(Ticket, usize)>,
    ) -> Result<bool, Stop> {
        if let Some(t) = tls {
            // Records the socket did not take last time go first, also
            // when no new frame follows them.
            if t.pending() && !t.flush(fd)? {
                *can_write = false;
                return Ok(true);
            }
            loop {
                match t.fill_records(fd, &mut self.link, sent, *can_write)? {
                    Filled::More => {}
                    Filled::Empty => return Ok(false),
                    Filled::Full => {
                        *can_write = false;
                        return Ok(true);
                    }
                }
            }
        }
        loop {
            if self.out_sent == self.out.len() {
                self.out.clear();
                self.out_sent = 0;
                self.link.fill(&mut self.out, sent);
                if self.out.is_empty() {
                    return Ok(false);
                }
            }
            if !*can_write {
                return Ok(true);
            }
            match crate::sys::send_two(fd, &self.out[self.out_sent..], &[], false) {
                Ok(n) => self.out_sent += n,
                Err(Stop::Full) => {
                    *can_write = false;
                    return Ok(true);
                }
                Err(Stop::Fail) => return Err(Stop::Fail),
            }
        }
    }
}

/// What a slot's socket speaks, or which HTTP/2 stream it serves.
pub(super) type Proto = crate::conn::h2::Proto<H2Conn>;

/// An HTTP/2 connection's protocol and the frames the socket has not
/// taken yet.
pub(super) struct H2Conn {
    pub(super) link: H2Link,
    out: Vec<u8>,
    out_sent: usize,
    /// GOAWAY went (or the drain finished): close once `out` is written.
    closing: bool,
    born: Instant,
}

impl<M: Mover> Worker<M> {
    /// The connection speaks HTTP/2 from now on.
    pub(super) fn h2_begin(&mut self, who: Ticket) {
        let by_address = self.serve.ctx.session_cfg.rules.by_address();
        let now = self.now;
        let c = self.conn(who);
        let client = c.life.session.client().or_else(|| {
            by_address
                .then(|| crate::net::peer_addr(c.fd.as_raw_fd()))
                .flatten()
        });
        let tls = c.tls.is_some();
        c.proto = Proto::H2(Box::new(H2Conn {
            link: H2Link::new(H2Settings::default(), client, tls),
            out: Vec::new(),
            out_sent: 0,
            closing: false,
            born: now,
        }));
    }

    /// Plaintext received on an HTTP/2 connection.
    pub(super) fn h2_received(&mut self, who: Ticket, data: &[u8]) {
        let now = self.now;
        let Proto::H2(h) = &mut self.conn(who).proto else {
            unreachable!("not an HTTP/2 connection")
        };
        let ms = now.saturating_duration_since(h.born).as_millis() as u64;
        let todo = h.link.receive(data, ms);
        self.h2_todo(who, todo);
    }

    fn h2_todo(&mut self, who: Ticket, todo: Vec<Todo>) {
        for t in todo {
            // A todo before this one may have closed the connection (a
            // stream's failure flushed its GOAWAY): the rest is moot.
            if self.live_conn(who).is_none() {
                return;
            }
            match t {
                Todo::Serve { stream_id, request } => self.h2_serve(who, stream_id, request),
                Todo::Abort(s) => self.close(s),
                Todo::Close => {
                    if let Proto::H2(h) = &mut self.conn(who).proto {
                        h.closing = true;
                    }
                }
            }
        }
    }

    /// A new stream: a slot of its own, with a session given its request.
    fn h2_serve(&mut self, who: Ticket, stream_id: u32, request: Box<CoreRequest>) {
        let full = self.conns.full();
        let now = self.now;
        let c = self.conn(who);
        let Proto::H2(h) = &mut c.proto else {
            unreachable!()
        };
        // SAFETY: F_DUPFD_CLOEXEC on a socket this connection owns returns
        // a new descriptor (or -1) that nothing else owns.
        let dup = unsafe { libc::fcntl(c.fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
        if full || dup < 0 {
            h.link.refuse(stream_id);
            return;
        }
        // SAFETY: as above.
        let fd = unsafe { OwnedFd::from_raw_fd(dup) };
        let head_only = request.method == spindle_core::request::Method::Head;
        let session = h.link.session(request);
        let life = Life::new(session, None, &self.serve.ctx, false, fd.as_raw_fd(), now);
        let proto = Proto::Stream {
            parent: who,
            id: stream_id,
            ended: false,
        };
        let slot = self.conns.insert(Conn::new(fd, life, None, proto));
        self.streams += 1;
        let Proto::H2(h) = &mut self.conn(who).proto else {
            unreachable!()
        };
        h.link.attach(stream_id, slot, head_only);
        // Its first step waits for the ready queue, not run from inside
        // the connection's own turn: a response found at once (a small
        // cached file) would take the connection's link out of its slot
        // while that turn still works on it, and about 1 stream in 140
        // under h2load -c 10 -m 32 was reset.
        self.enqueue(slot);
    }

    /// An HTTP/2 connection's turn: read what has arrived (a bounded
    /// amount), then write what is framed.
    pub(super) fn h2_service(&mut self, who: Ticket) {
        let mut budget = READ_TURN_BYTES;
        loop {
            let c = self.conn(who);
            let full = matches!(&c.proto, Proto::H2(h) if h.link.input_full());
            if full || !self.recv_in_turn(who, &mut budget) {
                break;
            }
            if self.live_conn(who).is_none() {
                return;
            }
        }
        let Some(c) = self.live_conn(who) else {
            return;
        };
        if c.life.peer_eof {
            self.close(who);
            return;
        }
        self.h2_flush(who);
    }

    /// Frames what is ready and writes it as far as the socket takes it;
    /// the stream slots whose bytes are framed may write again. Closes
    /// the connection once it is over and written.
    pub(super) fn h2_flush(&mut self, who: Ticket) {
        let now = self.now;
        loop {
            let Some(c) = self.conns.get(who) else {
                return;
            };
            let Proto::H2(h) = &mut c.proto else {
                return;
            };
            let mut sent = Vec::new();
            let fd = c.fd.as_raw_fd();
            let mut full = match h.write_out(fd, c.tls.as_deref_mut(), &mut c.can_write, &mut sent)
            {
                Ok(full) => full,
                Err(_) => {
                    self.close(who);
                    return;
                }
            };
            if h.out_sent == h.out.len() && h.out.capacity() > 4096 && h.link.streams() == 0 {
                h.out = Vec::new();
            }
            let ms = now.saturating_duration_since(h.born).as_millis() as u64;
            let todo = h.link.resume(ms);
            // TLS records the socket has not taken count as waiting.
            full |= c.tls.as_ref().is_some_and(|t| t.pending());
            let done = h.closing && !full && !h.link.has_output();
            c.life.deadline = now + timeout(&self.serve.ctx.cfg, full, h.link.streams());
            let idle = h.link.streams() == 0;
            c.life.set_idle(&self.serve.ctx, idle);
            self.h2_todo(who, todo);
            let again = !sent.is_empty();
            for (s, _) in sent {
                if let Some(sc) = self.live_conn(s) {
                    sc.can_write = true;
                    self.enqueue(s);
                }
            }
            if done {
                self.close(who);
                return;
            }
            if !again {
                return;
            }
        }
    }

    /// A stream slot's response is over: END_STREAM after its bytes.
    pub(super) fn h2_stream_done(&mut self, who: Ticket) {
        let Proto::Stream { parent, id, ended } = &mut self.conn(who).proto else {
            return;
        };
        *ended = true;
        let (parent, id) = (*parent, *id);
        if let Some(p) = self.live_conn(parent) {
            if let Proto::H2(h) = &mut p.proto {
                h.link.end(id);
            }
            self.enqueue(parent);
        }
    }

    /// Before a slot goes: a stream slot tells its connection (RST_STREAM
    /// unless its response ended); a connection closes its stream slots.
    pub(super) fn h2_closing(&mut self, who: Ticket) {
        let c = self.conn(who);
        match &mut c.proto {
            Proto::Http1 => {}
            Proto::Stream { parent, id, ended } => {
                let (parent, id, ended) = (*parent, *id, *ended);
                self.streams -= 1;
                if let Some(p) = self.live_conn(parent) {
                    if let Proto::H2(h) = &mut p.proto {
                        if !ended {
                            h.link.abort(id);
                        }
                    }
                    self.enqueue(parent);
                }
            }
            Proto::H2(h) => {
                let slots = h.link.slots();
                for s in slots {
                    self.close(s);
                }
            }
        }
    }

    /// The drain: GOAWAY on every HTTP/2 connection.
    pub(super) fn h2_drain(&mut self) {
        for who in self.conns.select(|c| c.proto.is_h2()) {
            if let Proto::H2(h) = &mut self.conn(who).proto {
                h.link.shutdown();
            }
            self.enqueue(who);
        }
    }

    /// Runs `f` with the link of stream slot `who`'s connection taken out
    /// of its slot, so that the stream's own slot can be borrowed beside
    /// it; `None` (and `f` not run) when `who` is not a live stream.
    /// A stream slot's response begins: its head goes to the link (as
    /// HEADERS, once its first body bytes or its end come). `false`: the
    /// stream or its connection is gone.
    pub(super) fn h2_stream_respond(&mut self, who: Ticket, status: u16, fields: Fields) -> bool {
        self.with_parent_link(who, |_, link, id| link.respond(id, status, fields))
            .unwrap_or(false)
    }

    pub(super) fn with_parent_link<R>(
        &mut self,
        who: Ticket,
        f: impl FnOnce(&mut Self, &mut H2Link, u32) -> R,
    ) -> Option<R> {
        let Proto::Stream { parent, id, .. } = self.live_conn(who)?.proto else {
            return None;
        };
        let p = self.live_conn(parent)?;
        let Proto::H2(mut h) = std::mem::replace(&mut p.proto, Proto::Http1) else {
            return None;
        };
        let r = f(self, &mut h.link, id);
        if let Some(p) = self.live_conn(parent) {
            p.proto = Proto::H2(h);
        }
        Some(r)
    }
}
