//! A connection's life around its responses: accepting, receiving into
//! the session, lingering close, closing, the timeout sweep and the drain
//! on shutdown.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::event_loop::epoll_add;
use super::{Conn, EpollTls, Mover, Worker, ACCEPT_BATCH, READ_TURN_BYTES};
use crate::conn::policy::{AcceptBackoff, LINGER_MAX_BYTES};
use crate::conn::{Phase, Ticket};
use crate::conn::{Steps, StreamSteps};
use crate::metrics::Pause;
use crate::sys::{drain_eventfd, errno};
use crate::tls::Received;

impl<M: Mover> Worker<M> {
    // ----- accepting ----------------------------------------------------

    fn can_accept(&self) -> bool {
        !self.serve.draining
            && !self.accept_paused
            && !self.conns.full()
            && !self.accept_backoff.paused()
    }

    pub(super) fn can_accept_more(&self) -> bool {
        self.can_accept() && self.accept_ready.iter().any(|&r| r)
    }

    pub(super) fn accept_all(&mut self) {
        for i in 0..self.listeners.len() {
            if self.accept_ready[i] {
                self.accept_some(i);
            }
        }
    }

    pub(super) fn accept_some(&mut self, i: usize) {
        let lfd = self.listeners[i].as_raw_fd();
        for _ in 0..ACCEPT_BATCH {
            if !self.can_accept() || !self.accept_ready[i] {
                return;
            }
            // SAFETY: accept4 with null address pointers writes nothing.
            let fd = unsafe {
                libc::accept4(
                    lfd,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                )
            };
            if fd < 0 {
                let e = errno();
                match e {
                    libc::EAGAIN => self.accept_ready[i] = false,
                    e if AcceptBackoff::applies(e) => {
                        if self.serve.files.shed_half() > 0 {
                            // Cached descriptors were given back: go on.
                            continue;
                        }
                        self.accept_backoff.start(&self.serve.ctx, e, self.now);
                    }
                    // ECONNABORTED, EINTR, EPROTO...: that one is gone; next.
                    _ => {}
                }
                continue;
            }
            // SAFETY: accept4 returned a new descriptor nothing else owns.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            self.add_conn(fd, i);
        }
    }

    /// Takes a connection accepted on listener `i`.
    fn add_conn(&mut self, fd: OwnedFd, i: usize) {
        // `None`: `fd` is dropped, closed unanswered.
        let Some(a) = self.serve.admit(i, fd.as_raw_fd(), self.now) else {
            return;
        };
        let tls = match a.tls.map(|cfg| EpollTls::new(&cfg)) {
            None => None,
            Some(Ok(t)) => Some(t),
            Some(Err(e)) => {
                crate::error!("TLS session: {e}");
                return;
            }
        };
        let who = self
            .conns
            .insert(Conn::new(fd, a.life, tls, super::h2::Proto::Http1));
        let c = self.conns.get(who).expect("just inserted");
        let bits = (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32;
        if let Err(e) = epoll_add(self.epfd.as_raw_fd(), c.fd.as_raw_fd(), bits, who.token()) {
            crate::error!(
                "worker {}: epoll_ctl: {e}; dropping a connection",
                self.serve.ctx.id
            );
            self.conns.remove(who.slot);
            return;
        }
        let m = &self.serve.ctx.metrics;
        m.accepted.inc();
        m.open.set((self.conns.live() - self.streams) as u64);
        if self.conns.full() {
            // can_accept() stops accepting until a connection closes.
            m.pause(Pause::MaxConnections);
        }
    }

    // ----- reading and the protocol ---------------------------------------

    /// One `recv` into the session. Returns whether anything happened
    /// (bytes or EOF); false when there was nothing to read or the
    /// connection was dropped (then it is gone: check before using it).
    pub(super) fn recv_once(&mut self, who: Ticket) -> Recv {
        let http2 = self.serve.ctx.cfg.serves_http2();
        let c = self.conns.get(who).expect("live connection");
        if !c.can_read || c.life.peer_eof || c.proto.is_stream() {
            // A stream slot's descriptor is its connection's: never read.
            return Recv::Nothing;
        }
        // SAFETY: receives at most rbuf.len() bytes into the worker's
        // buffer, which is live and not otherwise borrowed.
        let rc = unsafe {
            libc::recv(
                c.fd.as_raw_fd(),
                self.rbuf.as_mut_ptr().cast(),
                self.rbuf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if rc > 0 {
            let n = rc as usize;
            if c.life.phase == Phase::Lingering {
                c.life.lingered += n;
            } else if c.tls.is_some() {
                if !self.tls_input(who, n) {
                    return Recv::Gone;
                }
            } else if c.proto.is_h2()
                || (http2
                    && c.life.session.served() == 0
                    && !c.life.session.mid_request()
                    && crate::conn::h2::is_preface(&self.rbuf[..n]))
            {
                // HTTP/2: a connection that is, or one whose first bytes
                // are the preface (prior knowledge, h2c).
                if !c.proto.is_h2() {
                    self.h2_begin(who);
                }
                let data = self.rbuf[..n].to_vec();
                self.h2_received(who, &data);
                if self.live_conn(who).is_none() {
                    return Recv::Gone;
                }
            } else {
                c.life.session.feed(&self.rbuf[..n]);
                // This loop also reads outside epoll_wait (right after a
                // response): a file change reported before these bytes
                // were sent must be seen by the lookup they lead to.
                self.serve.files.batch();
            }
            return Recv::Data(n);
        }
        if rc == 0 {
            c.life.peer_eof = true;
            c.can_read = false;
            return Recv::Eof;
        }
        match errno() {
            libc::EAGAIN => {
                c.can_read = false;
                Recv::Nothing
            }
            libc::EINTR => Recv::Data(0),
            _ => {
                // ECONNRESET and friends: the peer is gone.
                c.life.peer_eof = true;
                self.close(who);
                Recv::Gone
            }
        }
    }

    /// `n` bytes of ciphertext received in `rbuf`: decrypted and fed to
    /// the session or, once ALPN chose it, to HTTP/2. `false` when the
    /// connection is gone (a failed record, or closed meanwhile).
    fn tls_input(&mut self, who: Ticket, n: usize) -> bool {
        // The buffer is lent out for the call (`conn::Steps::tls_received`).
        let rbuf = std::mem::take(&mut self.rbuf);
        let got = self.tls_received(who, &rbuf[..n]);
        self.rbuf = rbuf;
        let Some(c) = self.live_conn(who) else {
            return false;
        };
        match got {
            Received::Ok => {}
            Received::Closed => {
                c.life.peer_eof = true;
                c.can_read = false;
            }
            Received::Failed => {
                // Plain HTTP or garbage on the HTTPS port: closed
                // (after rustls's alert, if the socket took it).
                self.close(who);
                return false;
            }
        }
        self.serve.files.batch();
        true
    }

    /// Reads pipelined input while a response is being produced, as far as
    /// the session takes it. Returns false if the connection was dropped.
    pub(super) fn take_pipelined(&mut self, who: Ticket) -> bool {
        let cfg = self.serve.ctx.session_cfg.clone();
        let mut budget = READ_TURN_BYTES;
        loop {
            let c = self.conn(who);
            if !c.life.session.wants_input(&cfg) {
                return true;
            }
            match self.recv_once(who) {
                Recv::Data(n) => {
                    budget = budget.saturating_sub(n.max(1));
                    if budget == 0 {
                        self.enqueue(who);
                        return true;
                    }
                }
                Recv::Eof | Recv::Nothing => return true,
                Recv::Gone => return false,
            }
        }
    }

    // ----- closing --------------------------------------------------------

    /// Starts closing. With `linger`, the write side is shut first and
    /// input is drained for a while, so a peer that is still sending
    /// receives our last response instead of a reset.
    pub(super) fn begin_close(&mut self, who: Ticket, linger: bool) {
        let c = self.conns.get(who).expect("live connection");
        if let Some(tls) = c.tls.as_mut() {
            // Every record of the last response is on the socket (see
            // Worker::pump); close_notify follows it if there is room.
            tls.close_notify(c.fd.as_raw_fd());
        }
        if c.life.closing(&self.serve.ctx, linger, self.now) {
            self.mover.release(&mut c.st);
            c.tx = None;
            // SAFETY: shutdown(2) on a socket this connection owns.
            unsafe { libc::shutdown(c.fd.as_raw_fd(), libc::SHUT_WR) };
            self.linger(who);
            return;
        }
        self.close(who);
    }

    pub(super) fn linger(&mut self, who: Ticket) {
        let mut budget = READ_TURN_BYTES;
        loop {
            let c = self.conn(who);
            if c.life.peer_eof || c.life.lingered > LINGER_MAX_BYTES {
                self.close(who);
                return;
            }
            if !self.recv_in_turn(who, &mut budget) {
                return;
            }
        }
    }

    /// One receive of a connection's bounded turn: `true` to go on with
    /// the turn; `false` when it is over (the budget is spent and the
    /// connection queued for another, nothing is left to read, or the
    /// connection is gone).
    pub(super) fn recv_in_turn(&mut self, who: Ticket, budget: &mut usize) -> bool {
        match self.recv_once(who) {
            Recv::Data(n) => {
                *budget = budget.saturating_sub(n.max(1));
                if *budget == 0 {
                    self.enqueue(who);
                    return false;
                }
                true
            }
            Recv::Eof => true,
            Recv::Nothing | Recv::Gone => false,
        }
    }

    /// Drops the connection now: frees the mover's buffers (a read in
    /// flight is freed when it completes), closes the socket (which also
    /// removes it from the epoll set) and the file.
    pub(super) fn close(&mut self, who: Ticket) {
        if self.conns.get(who).is_none() {
            return;
        }
        // A stream slot tells its connection; a connection closes its
        // stream slots first.
        self.h2_closing(who);
        let Some(c) = self.conns.get(who) else {
            return;
        };
        self.mover.release(&mut c.st);
        c.life.gone(&self.serve.ctx);
        self.conns.remove(who.slot);
        self.serve
            .ctx
            .metrics
            .open
            .set((self.conns.live() - self.streams) as u64);
    }

    // ----- timers and shutdown ------------------------------------------

    pub(super) fn on_tick(&mut self) {
        self.tick_steps();
        self.accept_backoff.expire(self.now);
    }

    pub(super) fn on_wake(&mut self) {
        drain_eventfd(self.serve.ctx.shutdown.eventfd);
        let shutdown = &self.serve.ctx.shutdown;
        if !shutdown.requested() {
            // The accept gate moved. epoll keeps nothing armed in the
            // kernel that could take a connection, so closing is immediate;
            // on opening, the listeners are tried at once (edge-triggered:
            // connections that queued meanwhile bring no new edge).
            let closed = shutdown.gate.closed();
            if closed && !self.accept_paused {
                self.accept_paused = true;
                shutdown.gate.ack();
            } else if !closed && self.accept_paused {
                self.accept_paused = false;
                self.accept_ready.iter_mut().for_each(|r| *r = true);
                self.accept_all();
            }
            return;
        }
        for who in self.serve.start_drain(&self.conns, self.now, |c| &c.life) {
            self.close(who);
        }
        self.h2_drain();
    }
}

pub(super) enum Recv {
    /// Bytes were received (0 after EINTR).
    Data(usize),
    /// The peer closed its side.
    Eof,
    /// Nothing to read now.
    Nothing,
    /// The connection failed and was dropped.
    Gone,
}
