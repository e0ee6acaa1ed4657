//! A connection's life once accepted (accept.rs): receive, the protocol
//! loop (open, respond), lingering close and timeouts.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::rc::Rc;
use std::time::Instant;

use io_uring::{cqueue, opcode, squeue, types};
use spindle_core::response::FileKind;
use spindle_core::{ListRequest, OpenError, OpenRequest, Step};

use super::ring::{ud, Op};
use super::{Conn, PendingOpen, Phase, Worker, BGID, NO_SLOT, RECV_BUF_SIZE};
use crate::backend::{inline_body, min_timeout, LINGER_MAX_BYTES, LINGER_TIMEOUT};
use crate::config::FirstMiss;
use crate::filecache::SMALL_FILE_MAX;
use crate::fs;
use crate::metrics::Timeout;
use crate::net;

impl Worker {
    // ----- the protocol loop -------------------------------------------

    pub(super) fn conn(&mut self, slot: u32) -> &mut Conn {
        self.conns[slot as usize].as_mut().expect("live slot")
    }

    /// Asks the session what to do next, and starts doing it.
    pub(super) fn drive(&mut self, slot: u32) {
        let cfg = self.ctx.session_cfg.clone();
        let now = self.now;
        let (keepalive, header_timeout) =
            (self.ctx.cfg.keepalive_timeout, self.ctx.cfg.header_timeout);
        let draining = self.draining;
        let c = self.conns[slot as usize].as_mut().expect("live slot");
        debug_assert_eq!(c.phase, Phase::Reading);
        let step = c.session.next(&cfg);
        // A connection waiting for a request with none of it here is idle.
        let idle = matches!(step, Step::NeedInput)
            && !c.peer_eof
            && !c.session.mid_request()
            && !c.tls.as_ref().is_some_and(|t| t.handshaking());
        if idle != c.idle {
            c.idle = idle;
            if idle {
                self.ctx.metrics.idle.inc();
            } else {
                self.ctx.metrics.idle.sub(1);
            }
        }
        match step {
            Step::NeedInput => {
                if c.peer_eof {
                    self.begin_close(slot, false);
                    return;
                }
                // A TLS handshake counts as the head: --header-timeout.
                let mid = !idle;
                c.deadline = now + if mid { header_timeout } else { keepalive };
                // Draining: a keep-alive connection between requests
                // closes; a new one gets its first answer (it may have
                // been accepted just before a handover).
                if draining && !mid && c.session.served() > 0 {
                    self.begin_close(slot, false);
                    return;
                }
                self.arm_recv(slot);
            }
            Step::Open(req) => {
                c.req_at = now;
                self.open_step(slot, req)
            }
            Step::List(_) => unreachable!("next() never lists"),
            Step::Respond(resp) => {
                c.req_at = now;
                self.start_tx(slot, resp)
            }
            Step::Close => {
                // HTTPS closes gracefully: close_notify, then the FIN, then
                // the peer's own close is awaited (begin_close).
                let mut linger = c.session.linger_advised() || c.tls.is_some();
                if !linger && !c.recv_armed && !c.peer_eof && net::has_unread_input(c.fd) {
                    // Bytes arrived after the last request while nothing
                    // was receiving: closing over them would send a reset,
                    // which can destroy the response before it is read.
                    linger = true;
                }
                self.begin_close(slot, linger);
            }
        }
    }

    pub(super) fn arm_recv(&mut self, slot: u32) {
        let cfg = self.ctx.session_cfg.clone();
        let c = self.conn(slot);
        let want = match c.phase {
            Phase::Lingering => true,
            Phase::Closing => false,
            // Nothing sent after the last request is read as a request;
            // what arrives anyway is found at the close (see drive).
            _ => c.session.wants_input(&cfg) && !c.session.closes_after_response(),
        };
        if c.recv_armed || c.peer_eof || !want {
            return;
        }
        c.recv_armed = true;
        c.recv_cancelling = false;
        let fd = c.fd;
        let sqe = if c.session.served() == 0 && c.phase != Phase::Lingering {
            // Until a response has kept the connection open, one-shot: a
            // connection-per-fetch client then leaves no receive armed
            // while its response is sent, so its close needs no cancel
            // and its FIN wakes nothing (5 µs a connection in the
            // profile; docs/decisions.md, "Hot path").
            opcode::Recv::new(types::Fd(fd), std::ptr::null_mut(), RECV_BUF_SIZE as u32)
                .buf_group(BGID)
                .build()
                .flags(squeue::Flags::BUFFER_SELECT)
        } else {
            // Multishot: one SQE keeps receiving until cancelled, EOF, an
            // error, or no provided buffer is left (ENOBUFS); each
            // completion carries one buffer, picked by the kernel only
            // when data arrives.
            opcode::RecvMulti::new(types::Fd(fd), BGID).build()
        };
        self.push_conn(slot, Op::Recv, sqe);
    }

    /// Stops the multishot receive (flow control or closing).
    pub(super) fn cancel_recv(&mut self, slot: u32) {
        let c = self.conn(slot);
        if !c.recv_armed || c.recv_cancelling {
            return;
        }
        c.recv_cancelling = true;
        let gen = c.gen;
        self.push(
            opcode::AsyncCancel::new(ud(Op::Recv, slot, gen)).build(),
            ud(Op::Cancel, NO_SLOT, 0),
        );
    }

    pub(super) fn on_recv(&mut self, slot: u32, res: i32, flags: u32) {
        let cfg = self.ctx.session_cfg.clone();
        let c = self.conn(slot);
        if !cqueue::more(flags) {
            c.recv_armed = false;
            c.recv_cancelling = false;
        }
        if res > 0 {
            let bid = cqueue::buffer_select(flags).expect("recv completed without a buffer");
            let start = bid as usize * RECV_BUF_SIZE;
            let data = &self.recv_bufs[start..start + res as usize];
            let c = self.conns[slot as usize].as_mut().expect("live slot");
            let mut full = false;
            match c.phase {
                Phase::Lingering => c.lingered += res as usize,
                Phase::Closing => {}
                _ if c.tls.is_some() => {
                    // Decrypted into the session (the receive buffer goes back
                    // to the ring only after, so `data` stays valid).
                    let data = data.to_vec();
                    self.provide_recv_buf(bid);
                    match self.tls_received(slot, &data) {
                        super::tls::Received::Ok => {}
                        super::tls::Received::Closed => self.conn(slot).peer_eof = true,
                        super::tls::Received::Failed => {
                            // Plain HTTP or garbage on the HTTPS port: closed.
                            self.abort(slot);
                            return;
                        }
                    }
                    let c = self.conn(slot);
                    if !c.session.wants_input(&cfg) {
                        self.cancel_recv(slot);
                    }
                    return self.after_recv(slot);
                }
                _ => {
                    c.session.feed(data);
                    full = !c.session.wants_input(&cfg);
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
            c.peer_eof = true;
        } else if res == -libc::ENOBUFS {
            // Every receive buffer is in use at this instant; retry once
            // this batch of completions has returned some.
            self.rearm.push(slot);
            return;
        } else if res != -libc::ECANCELED {
            // ECONNRESET and friends: the peer is gone.
            c.peer_eof = true;
            if c.phase != Phase::Closing {
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
    fn after_recv(&mut self, slot: u32) {
        let c = self.conn(slot);
        match c.phase {
            Phase::Reading => self.drive(slot),
            Phase::Lingering => {
                if c.peer_eof || c.lingered > LINGER_MAX_BYTES {
                    c.phase = Phase::Closing;
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
        let mut file = None;
        let mut fresh = None;
        let result = if res >= 0 {
            // SAFETY: OPENAT2 returned a new descriptor that nothing else owns.
            let fd = unsafe { OwnedFd::from_raw_fd(res) };
            match fs::inspect_opened(fd.as_raw_fd()) {
                Ok((meta, dev)) => {
                    file = Some(Rc::new(fd));
                    if meta.kind == FileKind::Regular {
                        fresh = Some((meta, dev));
                    }
                    Ok(meta)
                }
                Err(e) => Err(OpenError::from_errno(e.raw_os_error().unwrap_or(libc::EIO))),
            }
        } else {
            Err(OpenError::from_errno(-res))
        };
        let c = self.conn(slot);
        if c.phase == Phase::Closing {
            self.maybe_release(slot);
            return;
        }
        self.respond_opened(slot, &pending.req, result, file, None, fresh);
    }

    /// Opens a path the session asked for: from the open-file cache, or
    /// by an asynchronous `OPENAT2`.
    fn open_step(&mut self, slot: u32, req: OpenRequest) {
        let now = self.now;
        // A cached file: no open, metadata fresh (see filecache).
        let hit = self.files.lookup(&req.cache_key(), now);
        self.ctx.metrics.open_file(matches!(hit, Some(Ok(_))));
        if let Some(hit) = hit {
            match hit {
                Ok(h) => {
                    let d = self.device(h.dev);
                    self.conn(slot).dev = d;
                    self.respond_opened(slot, &req, Ok(h.meta), h.fd, h.body, None)
                }
                Err(e) => self.respond_opened(
                    slot,
                    &req,
                    Err(OpenError::from_errno(e.raw_os_error().unwrap_or(libc::EIO))),
                    None,
                    None,
                    None,
                ),
            }
            return;
        }
        let c = self.conn(slot);
        c.phase = Phase::Opening;
        let pending = Box::new(PendingOpen {
            req,
            how: types::OpenHow::new()
                .flags(fs::OPEN_FLAGS)
                .resolve(fs::RESOLVE_FLAGS),
        });
        let path = pending.req.path.as_ptr();
        let how: *const types::OpenHow = &pending.how;
        let req_root = pending.req.root;
        c.open = Some(pending);
        let root = self.ctx.root.get(req_root).fd();
        self.push_conn(
            slot,
            Op::Open,
            opcode::OpenAt2::new(types::Fd(root), path, how).build(),
        );
        self.arm_recv(slot);
    }

    /// The session's answer to an open, sent. `body`: a small file's bytes
    /// from the open-file cache, which go in the head; otherwise the
    /// connection keeps the descriptor for the body. `fresh`: the file was
    /// just opened (not from the cache); a second use (see recent.rs)
    /// enters the open-file cache, a first use keeps its descriptor to
    /// itself so that a page-cache miss may read it with O_DIRECT.
    pub(super) fn respond_opened(
        &mut self,
        slot: u32,
        req: &OpenRequest,
        result: Result<spindle_core::FileMeta, OpenError>,
        file: Option<Rc<OwnedFd>>,
        mut body: Option<Rc<[u8]>>,
        fresh: Option<(spindle_core::FileMeta, u64)>,
    ) {
        let small = result
            .as_ref()
            .is_ok_and(|m| m.kind == FileKind::Regular && m.size > 0 && m.size <= SMALL_FILE_MAX);
        let c = self.conns[slot as usize].as_mut().expect("live slot");
        let mut resp = match c.session.opened(&self.ctx.session_cfg, req, result) {
            Step::Respond(r) => r,
            Step::Open(next) => {
                // A precompressed sidecar to look for: this file is not
                // sent (its descriptor closes here, or stays cached).
                self.open_step(slot, next);
                return;
            }
            Step::List(list) => {
                self.list_step(slot, list);
                return;
            }
            other => unreachable!("opened() gave {other:?}"),
        };
        let mut first_use = false;
        if let (Some((meta, dev)), Some(fd)) = (fresh, &file) {
            let d = self.device(dev);
            self.conn(slot).dev = d;
            let bytes = resp.file.map_or(0, |(_, n)| n);
            let again = match self.ctx.cfg.first_miss {
                FirstMiss::Cache => true,
                FirstMiss::Direct => self.ctx.recent.used(dev, meta.ino, bytes),
                // Recorded in either case, so that a file used while memory
                // had room is remembered once it is full.
                FirstMiss::Auto => {
                    self.ctx.recent.used(dev, meta.ino, bytes) | self.ctx.memory.has_room()
                }
            };
            if again {
                body = self
                    .files
                    .insert(&req.cache_key(), fd.clone(), meta, dev, self.now);
            } else {
                first_use = true;
            }
        }
        let c = self.conns[slot as usize].as_mut().expect("live slot");
        let from_file = resp.file.is_some();
        let inlined = body.is_some_and(|b| inline_body(&mut resp, &b));
        if small && from_file {
            self.ctx.metrics.small_file(inlined);
        }
        if !inlined && resp.file.is_some() {
            c.file = file;
            // Not O_DIRECT for a multipart body: the flag would outlive
            // the part that set it, under the next part's sendfile.
            c.first_use = first_use && resp.parts.is_empty();
        }
        self.start_tx(slot, resp);
    }

    /// Lists a directory the session asked for: from the worker's cache,
    /// or by the helpers (`crate::lister`), whose answer `on_listed` takes.
    fn list_step(&mut self, slot: u32, req: ListRequest) {
        let now = self.now;
        let gen = self.conn(slot).gen;
        let lists = self.lists.as_mut().expect("autoindex on");
        if let Some(l) = lists.lookup(&req, now) {
            self.respond_listed(slot, Ok(&l));
            return;
        }
        if !lists.request(&req, (slot, gen)) {
            self.respond_listed(slot, Err(OpenError::Busy));
            return;
        }
        let c = self.conn(slot);
        c.phase = Phase::Opening;
        c.listing = true;
        self.arm_recv(slot);
    }

    fn respond_listed(&mut self, slot: u32, result: Result<&spindle_core::Listing, OpenError>) {
        let cfg = self.ctx.session_cfg.clone();
        let c = self.conn(slot);
        c.listing = false;
        match c.session.listed(&cfg, result) {
            Step::Respond(r) => self.start_tx(slot, r),
            other => unreachable!("listed() gave {other:?}"),
        }
    }

    /// Listings the helpers finished: each to the connections still
    /// waiting for it.
    pub(super) fn on_listed(&mut self) {
        let now = self.now;
        let Some(lists) = self.lists.as_mut() else {
            return;
        };
        let done = lists.take_done(now);
        for (waiters, result) in done {
            for (slot, gen) in waiters {
                let waiting = matches!(
                    self.conns.get(slot as usize),
                    Some(Some(c)) if c.gen == gen && c.listing && c.phase == Phase::Opening
                );
                if waiting {
                    self.respond_listed(slot, result.as_deref().map_err(|e| *e));
                }
            }
        }
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
        let now = self.now;
        let c = self.conns[slot as usize].as_mut().expect("live slot");
        if c.phase == Phase::Closing {
            return;
        }
        if std::mem::take(&mut c.idle) {
            self.ctx.metrics.idle.sub(1);
        }
        c.session.close();
        if linger && !c.peer_eof && c.phase != Phase::Lingering {
            c.phase = Phase::Lingering;
            c.deadline = now + LINGER_TIMEOUT;
            let fd = c.fd;
            if c.tls.is_some() {
                // close_notify goes first, linked to the shutdown.
                self.tls_close_notify(slot);
            }
            self.push_conn(
                slot,
                Op::Shutdown,
                opcode::Shutdown::new(types::Fd(fd), libc::SHUT_WR).build(),
            );
            self.arm_recv(slot);
            return;
        }
        c.phase = Phase::Closing;
        let gen = c.gen;
        let sending =
            c.inflight > 0 && (c.tx.is_some() || c.tls.as_ref().is_some_and(|t| t.sending()));
        self.cancel_recv(slot);
        if sending {
            // A SEND (or a POLLOUT wait, or a SEND of TLS records) for a peer
            // that stopped reading waits for socket space forever; cancel it
            // (a no-op if none is in flight). A READ of the file cannot be
            // cut short and simply completes.
            for op in [Op::Send, Op::PollOut, Op::TlsSend] {
                self.push(
                    opcode::AsyncCancel::new(ud(op, slot, gen)).build(),
                    ud(Op::Cancel, NO_SLOT, 0),
                );
            }
        }
        // The chunk buffer, if any, goes back to the pool only when no
        // READ or SEND can still be using it (see maybe_release).
        self.maybe_release(slot);
    }

    /// Closes the socket and frees the slot once nothing names it.
    pub(super) fn maybe_release(&mut self, slot: u32) {
        let c = self.conn(slot);
        if c.phase == Phase::Lingering && c.inflight == 0 && !c.recv_armed {
            c.phase = Phase::Closing;
        }
        if c.phase != Phase::Closing || c.inflight > 0 {
            return;
        }
        self.release_tx(slot);
        let c = self.conns[slot as usize].take().expect("live slot");
        debug_assert!(c.open.is_none());
        if let Some(tx) = &c.tx {
            debug_assert!(tx.buf.is_none(), "chunk buffer leaked");
            debug_assert!(tx.ahead.is_none(), "read-ahead buffer leaked");
        }
        self.push(
            opcode::Close::new(types::Fd(c.fd)).build(),
            ud(Op::Close, NO_SLOT, 0),
        );
        drop(c.file);
        self.free.push(slot);
        self.live -= 1;
        self.ctx.metrics.open.set(self.live as u64);
        if self.live < self.max_conns {
            for i in 0..self.listeners.len() {
                if !self.accept_backoff.paused() {
                    self.arm_accept(i);
                }
            }
        }
    }

    // ----- timers and shutdown ------------------------------------------

    pub(super) fn on_tick(&mut self) {
        let now = self.now;
        // SIGHUP: a new configuration, taken between requests (reload.rs).
        if self.ctx.take_reload() {
            // Paths may name other files now (a new root, say).
            self.files.clear();
            if let Some(l) = self.lists.as_mut() {
                l.set_roots(self.ctx.root.clone(), self.ctx.cfg.dotfiles);
            }
            self.rate = crate::backend::RateLimit::from_config(&self.ctx.cfg);
        }
        // --limit-rate: the responses that used their allowance go on.
        for (slot, gen) in std::mem::take(&mut self.throttled) {
            let resume = match self.conns.get_mut(slot as usize) {
                Some(Some(c)) if c.gen == gen && c.phase == Phase::Sending => {
                    c.tx.as_mut()
                        .is_some_and(|t| std::mem::replace(&mut t.throttled, false))
                }
                _ => false,
            };
            if resume {
                self.pump(slot);
            }
        }
        if self.ctx.id == 0 && self.ctx.cfg.first_miss == FirstMiss::Auto {
            // One file read per tick, for every worker (memory.rs).
            self.ctx.memory.refresh();
        }
        if self.lists.is_some() && !self.listed_armed {
            // The eventfd's READ failed (it is armed again after every
            // completion otherwise): look for finished listings by the
            // tick instead, and try the READ again.
            self.arm_listed();
            self.on_listed();
        }
        if self.accept_backoff.expire(now) {
            for i in 0..self.listeners.len() {
                self.arm_accept(i);
            }
        }
        let force = self.drain_deadline.is_some_and(|d| now >= d);
        if force || now >= self.next_scan {
            self.scan_timeouts(force);
        } else {
            // The scan visits every slot; with 10,000 idle keep-alive
            // connections, doing it every tick cost about 2.5% of the
            // worker's CPU per request (docs/decisions.md, "Idle connections"). Skipping
            // it is sound because every deadline is set to the loop's time
            // plus one of the timeouts in `backend::min_timeout`, so none set since
            // the last scan falls before `next_scan`.
            #[cfg(debug_assertions)]
            for c in self.conns.iter().flatten() {
                debug_assert!(
                    !Self::expired(c, now),
                    "a connection expired before next_scan"
                );
            }
        }
        if !(self.draining && self.live == 0) {
            self.arm_tick();
        }
    }

    /// Whether a connection's deadline has passed in a phase that has one.
    pub(super) fn expired(c: &Conn, now: Instant) -> bool {
        match c.phase {
            Phase::Reading => c.recv_armed && now >= c.deadline,
            Phase::Sending | Phase::Lingering => now >= c.deadline,
            Phase::Opening | Phase::Closing => false,
        }
    }

    /// Drops the connections whose deadline has passed (all but those
    /// closing, with `force`), and sets `next_scan` to the earliest
    /// deadline left. A connection that cannot expire now but keeps its
    /// deadline (Opening; Reading without a receive armed) counts too, so
    /// a passed one brings the next scan to the next tick, as before.
    pub(super) fn scan_timeouts(&mut self, force: bool) {
        let now = self.now;
        let mut earliest = now + min_timeout(&self.ctx.cfg);
        for slot in 0..self.conns.len() as u32 {
            let Some(c) = &self.conns[slot as usize] else {
                continue;
            };
            if force && c.phase != Phase::Closing {
                self.ctx.metrics.timeout(Timeout::Drain);
                self.abort(slot);
            } else if Self::expired(c, now) {
                self.ctx.metrics.timeout(match c.phase {
                    Phase::Reading if c.idle => Timeout::Keepalive,
                    Phase::Reading => Timeout::Header,
                    Phase::Lingering => Timeout::Linger,
                    _ => Timeout::Send,
                });
                if c.phase == Phase::Lingering {
                    self.conn(slot).phase = Phase::Closing;
                    self.cancel_recv(slot);
                    self.maybe_release(slot);
                } else {
                    self.abort(slot);
                }
            } else if c.phase != Phase::Closing {
                earliest = earliest.min(c.deadline);
            }
        }
        self.next_scan = earliest;
    }
}
