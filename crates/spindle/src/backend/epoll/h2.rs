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

use std::os::fd::{AsRawFd, RawFd};

use super::tls::Filled;
use super::{Mover, Worker, READ_TURN_BYTES};
use crate::conn::h2::{timeout, H2Link, H2State};
use crate::conn::{StreamSteps, Ticket};
use crate::sys::Stop;

impl H2Conn {
    fn written(&self) -> bool {
        self.out.sent == self.out.buf.len()
    }

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
            if self.written() {
                self.out.buf.clear();
                self.out.sent = 0;
                self.link.fill(&mut self.out.buf, sent);
                if self.out.buf.is_empty() {
                    return Ok(false);
                }
            }
            if !*can_write {
                return Ok(true);
            }
            match crate::sys::send_two(fd, &self.out.buf[self.out.sent..], &[], false) {
                Ok(n) => self.out.sent += n,
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
pub(super) type H2Conn = H2State<Frames>;

/// The epoll loop's part of an HTTP/2 connection: framed bytes, written
/// from `sent` on.
#[derive(Default)]
pub(super) struct Frames {
    buf: Vec<u8>,
    sent: usize,
}

impl<M: Mover> Worker<M> {
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
            if h.written() && h.out.buf.capacity() > 4096 && h.link.streams() == 0 {
                h.out = Frames::default();
            }
            let ms = h.ms(now);
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
