//! A connection's life around its responses: accepting, receiving into
//! the session, lingering close, closing, the timeout sweep and the drain
//! on shutdown.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Instant;

use super::datapath::{drain_eventfd, errno};
use super::event_loop::epoll_add;
use super::{Conn, EpollTls, Mover, Phase, Ticket, Worker, ACCEPT_BATCH, MAX_GEN, READ_TURN_BYTES};
use crate::backend::{
    min_timeout, plain_session, proxied_session, AcceptBackoff, LINGER_MAX_BYTES, LINGER_TIMEOUT,
};
use crate::metrics::{Pause, Timeout};
use crate::tls::Received;

impl<M: Mover> Worker<M> {
    // ----- accepting ----------------------------------------------------

    fn can_accept(&self) -> bool {
        !self.draining
            && !self.accept_paused
            && self.live < self.max_conns
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
                        if self.files.shed_half() > 0 {
                            // Cached descriptors were given back: go on.
                            continue;
                        }
                        self.accept_backoff.start(&self.ctx, e, self.now);
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
        let proxied = self.ctx.proxied.contains(&i);
        let (session, per_ip) = if proxied {
            match proxied_session(&self.ctx.cfg, fd.as_raw_fd()) {
                Some(s) => (s, None),
                None => return, // `fd` dropped: closed unanswered
            }
        } else {
            plain_session(&self.ctx, fd.as_raw_fd())
        };
        let tls = if i >= self.ctx.tls_from {
            if let (Some(shared), Some(copy)) = (&self.ctx.tls, &mut self.tls_cfg) {
                shared.refresh(copy);
            }
            let (_, cfg) = self.tls_cfg.as_ref().expect("HTTPS listener without TLS");
            match EpollTls::new(cfg) {
                Ok(t) => Some(t),
                Err(e) => {
                    crate::error!("TLS session: {e}");
                    return;
                }
            }
        } else {
            None
        };
        let slot = crate::backend::vacant_slot(&mut self.free, &mut self.conns);
        let gen = self.next_gen;
        // Generations stay below 2^31, so a connection's token never has
        // the top bit that marks listeners and the other special tokens.
        self.next_gen = (self.next_gen + 1) & MAX_GEN;
        self.next_gen = self.next_gen.max(1);
        let who = Ticket { slot, gen };
        let bits = (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32;
        if let Err(e) = epoll_add(self.epfd.as_raw_fd(), fd.as_raw_fd(), bits, who.token()) {
            crate::error!(
                "worker {}: epoll_ctl: {e}; dropping a connection",
                self.ctx.id
            );
            self.free.push(slot);
            return;
        }
        self.conns[slot as usize] = Some(Conn {
            fd,
            gen,
            session,
            _per_ip: per_ip,
            req_at: self.now,
            phase: Phase::Reading,
            // The first event (EPOLL_CTL_ADD reports present readiness)
            // says whether a request is already waiting.
            can_read: false,
            can_write: true,
            peer_eof: false,
            queued: false,
            // The PROXY header is part of the first request's head.
            deadline: self.now
                + if proxied {
                    self.ctx.cfg.header_timeout
                } else {
                    self.ctx.cfg.keepalive_timeout
                },
            open: None,
            tx: None,
            st: M::State::default(),
            waiting: false,
            lingered: 0,
            tls,
            idle: false,
            listing: false,
        });
        self.live += 1;
        let m = &self.ctx.metrics;
        m.accepted.inc();
        m.open.set(self.live as u64);
        if self.live == self.max_conns {
            // can_accept() stops accepting until a connection closes.
            m.pause(Pause::MaxConnections);
        }
    }

    // ----- reading and the protocol ---------------------------------------

    /// One `recv` into the session. Returns whether anything happened
    /// (bytes or EOF); false when there was nothing to read or the
    /// connection was dropped (then it is gone: check before using it).
    pub(super) fn recv_once(&mut self, who: Ticket) -> Recv {
        let c = self.conns[who.slot as usize]
            .as_mut()
            .expect("live connection");
        if !c.can_read || c.peer_eof {
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
            if c.phase == Phase::Lingering {
                c.lingered += n;
            } else if let Some(tls) = c.tls.as_mut() {
                let session = &mut c.session;
                let fd = c.fd.as_raw_fd();
                match tls.received(fd, &self.rbuf[..n], |p| session.feed(p)) {
                    Received::Ok => {}
                    Received::Closed => {
                        c.peer_eof = true;
                        c.can_read = false;
                    }
                    Received::Failed => {
                        // Plain HTTP or garbage on the HTTPS port: closed
                        // (after rustls's alert, if the socket took it).
                        self.close(who);
                        return Recv::Gone;
                    }
                }
                self.files.batch();
            } else {
                c.session.feed(&self.rbuf[..n]);
                // This loop also reads outside epoll_wait (right after a
                // response): a file change reported before these bytes
                // were sent must be seen by the lookup they lead to.
                self.files.batch();
            }
            return Recv::Data(n);
        }
        if rc == 0 {
            c.peer_eof = true;
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
                c.peer_eof = true;
                self.close(who);
                Recv::Gone
            }
        }
    }

    /// Reads pipelined input while a response is being produced, as far as
    /// the session takes it. Returns false if the connection was dropped.
    pub(super) fn read_ahead(&mut self, who: Ticket) -> bool {
        let cfg = self.ctx.session_cfg.clone();
        let mut budget = READ_TURN_BYTES;
        loop {
            let c = self.conn(who);
            if !c.session.wants_input(&cfg) {
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
        let deadline = self.now + LINGER_TIMEOUT;
        let c = self.conns[who.slot as usize]
            .as_mut()
            .expect("live connection");
        c.session.close();
        if std::mem::take(&mut c.idle) {
            self.ctx.metrics.idle.sub(1);
        }
        if let Some(tls) = c.tls.as_mut() {
            // Every record of the last response is on the socket (see
            // Worker::pump); close_notify follows it if there is room.
            tls.close_notify(c.fd.as_raw_fd());
        }
        if linger && !c.peer_eof && c.phase != Phase::Lingering {
            self.mover.release(&mut c.st);
            c.tx = None;
            c.phase = Phase::Lingering;
            c.deadline = deadline;
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
            if c.peer_eof || c.lingered > LINGER_MAX_BYTES {
                self.close(who);
                return;
            }
            match self.recv_once(who) {
                Recv::Data(n) => {
                    budget = budget.saturating_sub(n.max(1));
                    if budget == 0 {
                        self.enqueue(who);
                        return;
                    }
                }
                Recv::Eof => {}
                Recv::Nothing | Recv::Gone => return,
            }
        }
    }

    /// Drops the connection now: frees the mover's buffers (a read in
    /// flight is freed when it completes), closes the socket (which also
    /// removes it from the epoll set) and the file.
    pub(super) fn close(&mut self, who: Ticket) {
        let Some(mut c) = self.conns[who.slot as usize].take() else {
            return;
        };
        debug_assert_eq!(c.gen, who.gen);
        self.mover.release(&mut c.st);
        if c.idle {
            self.ctx.metrics.idle.sub(1);
        }
        drop(c);
        self.free.push(who.slot);
        self.live -= 1;
        self.ctx.metrics.open.set(self.live as u64);
    }

    // ----- timers and shutdown ------------------------------------------

    pub(super) fn on_tick(&mut self) {
        let now = self.now;
        // SIGHUP: a new configuration, taken between requests (reload.rs).
        if self.ctx.take_reload() {
            self.mover.set_roots(self.ctx.root.clone());
            // Paths may name other files now (a new root, say).
            self.files.clear();
            if let Some(l) = self.lists.as_mut() {
                l.set_roots(self.ctx.root.clone(), self.ctx.cfg.dotfiles);
            }
            self.rate = crate::backend::RateLimit::from_config(&self.ctx.cfg);
        }
        // --limit-rate: the responses that used their allowance go on.
        for who in std::mem::take(&mut self.throttled) {
            let resume = self.live_conn(who).is_some_and(|c| {
                c.phase == Phase::Sending
                    && c.tx
                        .as_mut()
                        .is_some_and(|t| std::mem::replace(&mut t.throttled, false))
            });
            if resume {
                self.pump(who);
            }
        }
        self.accept_backoff.expire(now);
        let force = self.drain_deadline.is_some_and(|d| now >= d);
        if !force && now < self.next_scan {
            // Skipping the scan is sound: every deadline is the loop's time
            // plus one of the timeouts in `backend::min_timeout`, so none set since
            // the last scan falls before `next_scan` (see uring/conn.rs).
            #[cfg(debug_assertions)]
            for c in self.conns.iter().flatten() {
                debug_assert!(
                    !Self::expired(c, now),
                    "a connection expired before next_scan"
                );
            }
            return;
        }
        let mut earliest = now + min_timeout(&self.ctx.cfg);
        for slot in 0..self.conns.len() {
            let Some(c) = &self.conns[slot] else { continue };
            let who = Ticket {
                slot: slot as u32,
                gen: c.gen,
            };
            if force || Self::expired(c, now) {
                self.ctx.metrics.timeout(match c.phase {
                    _ if force => Timeout::Drain,
                    Phase::Reading if c.idle => Timeout::Keepalive,
                    Phase::Reading => Timeout::Header,
                    Phase::Lingering => Timeout::Linger,
                    _ => Timeout::Send,
                });
                self.close(who);
            } else {
                // Opening keeps a deadline it cannot expire on; a passed one
                // brings the next scan to the next tick, as before.
                earliest = earliest.min(c.deadline);
            }
        }
        self.next_scan = earliest;
    }

    /// Whether a connection's deadline has passed in a phase that has one.
    fn expired(c: &Conn<M::State>, now: Instant) -> bool {
        match c.phase {
            Phase::Reading | Phase::Sending | Phase::Lingering => now >= c.deadline,
            Phase::Opening => false,
        }
    }

    pub(super) fn on_wake(&mut self) {
        drain_eventfd(self.ctx.shutdown.eventfd);
        if !self.ctx.shutdown.requested() {
            // The accept gate moved. epoll keeps nothing armed in the
            // kernel that could take a connection, so closing is immediate;
            // on opening, the listeners are tried at once (edge-triggered:
            // connections that queued meanwhile bring no new edge).
            let closed = self.ctx.shutdown.gate.closed();
            if closed && !self.accept_paused {
                self.accept_paused = true;
                self.ctx.shutdown.gate.ack();
            } else if !closed && self.accept_paused {
                self.accept_paused = false;
                self.accept_ready.iter_mut().for_each(|r| *r = true);
                self.accept_all();
            }
            return;
        }
        if self.draining {
            return;
        }
        self.draining = true;
        self.drain_deadline = Some(self.now + self.ctx.cfg.drain_timeout);
        for slot in 0..self.conns.len() {
            let idle = match &self.conns[slot] {
                Some(c)
                    if c.phase == Phase::Reading
                        && !c.session.mid_request()
                        && c.session.served() > 0 =>
                {
                    Some(c.gen)
                }
                _ => None,
            };
            if let Some(gen) = idle {
                self.close(Ticket {
                    slot: slot as u32,
                    gen,
                });
            }
        }
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
