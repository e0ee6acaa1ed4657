//! From a request to the socket: asking the session what to do next,
//! opening (through the open-file cache or the mover), transmitting the
//! response through the mover, and applying the mover's completions.

use std::os::fd::{AsRawFd, OwnedFd};
use std::rc::Rc;

use spindle_core::response::{FileKind, FileMeta};
use spindle_core::{ListRequest, OpenError, OpenRequest, Response, Step};

use super::conn::Recv;
use super::datapath::open_error;
use super::{
    Completion, Mover, OpenResult, Opened, Phase, Progress, Ticket, Tx, Worker, READ_TURN_BYTES,
};
use crate::backend::{changed, client_string, inline_body, log_line, read_failed};
use crate::filecache::SMALL_FILE_MAX;

impl<M: Mover> Worker<M> {
    /// Asks the session what to do next, and starts doing it.
    pub(super) fn drive(&mut self, who: Ticket) {
        let cfg = self.ctx.session_cfg.clone();
        let (keepalive, header_timeout) =
            (self.ctx.cfg.keepalive_timeout, self.ctx.cfg.header_timeout);
        let mut budget = READ_TURN_BYTES;
        loop {
            let (now, draining) = (self.now, self.draining);
            let c = self.conns[who.slot as usize]
                .as_mut()
                .expect("live connection");
            debug_assert_eq!(c.phase, Phase::Reading);
            let step = c.session.next(&cfg);
            // A connection waiting for a request with none of it here is
            // idle.
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
                        self.close(who);
                        return;
                    }
                    // A TLS handshake counts as a request head under way.
                    let mid = !idle;
                    c.deadline = now + if mid { header_timeout } else { keepalive };
                    // Draining: only a connection that has had an answer
                    // closes here (see the uring backend's drive).
                    if draining && !mid && c.session.served() > 0 {
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
                Step::Open(req) => {
                    c.req_at = now;
                    self.open_step(who, req);
                    return;
                }
                Step::List(_) => unreachable!("next() never lists"),
                Step::Respond(resp) => {
                    c.req_at = now;
                    self.start_tx(who, resp, None);
                    return;
                }
                Step::Close => {
                    // HTTPS closes gracefully: close_notify, the FIN, then
                    // the peer's own close is awaited.
                    let linger = c.session.linger_advised() || c.tls.is_some();
                    self.begin_close(who, linger);
                    return;
                }
            }
        }
    }

    /// Opens a path the session asked for: from the open-file cache, or by
    /// the mover (at once, or later for posix-aio's helper thread).
    fn open_step(&mut self, who: Ticket, req: OpenRequest) {
        let hit = self.files.lookup(&req.cache_key(), self.now);
        self.ctx.metrics.open_file(matches!(hit, Some(Ok(_))));
        if let Some(hit) = hit {
            // A cached file: no open, metadata fresh (see filecache).
            match hit {
                Ok(h) => self.opened_file(who, &req, h.fd, Ok(h.meta), h.body),
                Err(e) => self.opened_file(who, &req, None, Err(open_error(e)), None),
            }
            return;
        }
        match self.mover.open(who, &req) {
            Opened::Now(res) => self.opened(who, &req, res),
            Opened::Later => {
                let c = self.conn(who);
                c.phase = Phase::Opening;
                c.open = Some(req);
                self.read_ahead(who);
            }
        }
    }

    fn opened(&mut self, who: Ticket, req: &OpenRequest, res: OpenResult) {
        let now = self.now;
        match res {
            Ok((fd, meta, dev)) => {
                let fd = Rc::new(fd);
                let body = if meta.kind == FileKind::Regular {
                    self.files
                        .insert(&req.cache_key(), fd.clone(), meta, dev, now)
                } else {
                    None
                };
                self.opened_file(who, req, Some(fd), Ok(meta), body);
            }
            Err(e) => self.opened_file(who, req, None, Err(e), None),
        }
    }

    /// The session's answer to an open (from the cache or the mover), sent:
    /// a small file's cached bytes go in the head (start_tx then drops the
    /// descriptor, as there is no file range left).
    fn opened_file(
        &mut self,
        who: Ticket,
        req: &OpenRequest,
        file: Option<Rc<OwnedFd>>,
        result: Result<FileMeta, OpenError>,
        body: Option<Rc<[u8]>>,
    ) {
        let cfg = self.ctx.session_cfg.clone();
        let small = result
            .as_ref()
            .is_ok_and(|m| m.kind == FileKind::Regular && m.size > 0 && m.size <= SMALL_FILE_MAX);
        let mut resp = match self.conn(who).session.opened(&cfg, req, result) {
            Step::Respond(r) => r,
            Step::Open(next) => {
                // A precompressed sidecar to look for: this file is not
                // sent (its descriptor closes here, or stays cached).
                self.open_step(who, next);
                return;
            }
            Step::List(list) => {
                self.list_step(who, list);
                return;
            }
            other => unreachable!("opened() gave {other:?}"),
        };
        let from_file = resp.file.is_some();
        let inlined = body.is_some_and(|b| inline_body(&mut resp, &b));
        if small && from_file {
            self.ctx.metrics.small_file(inlined);
        }
        self.start_tx(who, resp, file);
    }

    /// Lists a directory the session asked for: from the worker's cache,
    /// or by the helpers (`crate::lister`), whose answer `on_listed` takes.
    fn list_step(&mut self, who: Ticket, req: ListRequest) {
        let now = self.now;
        let lists = self.lists.as_mut().expect("autoindex on");
        if let Some(l) = lists.lookup(&req, now) {
            self.respond_listed(who, Ok(&l));
            return;
        }
        if !lists.request(&req, who) {
            self.respond_listed(who, Err(OpenError::Busy));
            return;
        }
        let c = self.conn(who);
        c.phase = Phase::Opening;
        c.listing = true;
    }

    fn respond_listed(&mut self, who: Ticket, result: Result<&spindle_core::Listing, OpenError>) {
        let cfg = self.ctx.session_cfg.clone();
        let c = self.conn(who);
        c.listing = false;
        match c.session.listed(&cfg, result) {
            Step::Respond(r) => self.start_tx(who, r, None),
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
            for who in waiters {
                let waiting = matches!(
                    self.live_conn(who),
                    Some(c) if c.listing && c.phase == Phase::Opening
                );
                if waiting {
                    self.respond_listed(who, result.as_deref().map_err(|e| *e));
                }
            }
        }
    }

    // ----- transmitting -------------------------------------------------

    fn start_tx(&mut self, who: Ticket, resp: Response, file: Option<Rc<OwnedFd>>) {
        let now = self.now;
        let rate = self.rate;
        let deadline = now + self.ctx.cfg.send_timeout;
        let c = self.conn(who);
        let (off, left) = resp.file.unwrap_or((0, 0));
        c.phase = Phase::Sending;
        c.deadline = deadline;
        c.tx = Some(Tx {
            resp,
            head_sent: 0,
            file: if left > 0 { file } else { None },
            off,
            left,
            body_sent: 0,
            verified: false,
            started: now,
            rate,
            throttled: false,
            budget: u64::MAX,
            outcome: M::OUTCOME,
        });
        // Input that is already waiting is left in the socket until this
        // response is done (or until the next edge, for a long response):
        // trying to read it now would mostly cost an EAGAIN per request.
        self.pump(who);
    }

    pub(super) fn pump(&mut self, who: Ticket) {
        let send_timeout = self.ctx.cfg.send_timeout;
        let now = self.now;
        let c = self.conns[who.slot as usize]
            .as_mut()
            .expect("live connection");
        if c.phase != Phase::Sending || c.waiting || !c.can_write {
            return;
        }
        let tx = c.tx.as_mut().expect("response in progress");
        if let Some(limit) = tx.rate {
            // --limit-rate: a response that has used its allowance waits
            // for the next tick (on_tick pumps it again).
            tx.budget = limit.allowance(now - tx.started, tx.body_sent);
            if tx.left > 0 && tx.budget == 0 {
                if !std::mem::replace(&mut tx.throttled, true) {
                    self.throttled.push(who);
                }
                return;
            }
        }
        let before = tx.progress();
        let mut sock = super::Sock {
            fd: c.fd.as_raw_fd(),
            tls: c.tls.as_deref_mut(),
        };
        let mut p = self.mover.pump(who, &mut sock, tx, &mut c.st);
        if tx.progress() != before {
            c.deadline = now + send_timeout;
        }
        if p == Progress::Done {
            if let Some(tls) = c.tls.as_mut() {
                // Done means every record is on the socket: the rest waits
                // for EPOLLOUT (service writes it, then pumps here again).
                match tls.flush(c.fd.as_raw_fd()) {
                    Ok(true) => {}
                    Ok(false) => p = Progress::SocketFull,
                    Err(_) => p = Progress::Fail,
                }
            }
        }
        match p {
            Progress::Done => self.finish_tx(who),
            Progress::SocketFull => c.can_write = false,
            Progress::Waiting => c.waiting = true,
            Progress::Yield => self.enqueue(who),
            Progress::Fail => self.close(who),
            Progress::ReadFailed(errno) => self.read_failed(who, Some(errno)),
            Progress::Changed => self.read_failed(who, None),
        }
    }

    /// A disk read of the response failed with `errno`, or (`None`) the
    /// file changed before its last bytes went out: the replacement (500 or
    /// 503) if nothing of it has been sent, else the connection is dropped
    /// (a head promised bytes that cannot follow).
    fn read_failed(&mut self, who: Ticket, errno: Option<i32>) {
        let cfg = self.ctx.session_cfg.clone();
        let c = self.conns[who.slot as usize]
            .as_mut()
            .expect("live connection");
        let tx = c.tx.as_ref().expect("response in progress");
        let answered = tx.progress() == 0 && !tx.resp.continued;
        match errno {
            Some(e) => read_failed(e, answered),
            None => changed(),
        }
        let errno = errno.unwrap_or(libc::EAGAIN);
        if !answered {
            self.close(who);
            return;
        }
        self.mover.release(&mut c.st);
        c.tx = None;
        let resp = c.session.body_failed(&cfg, errno);
        self.start_tx(who, resp, None);
    }

    fn finish_tx(&mut self, who: Ticket) {
        let keepalive = self.now + self.ctx.cfg.keepalive_timeout;
        let c = self.conns[who.slot as usize]
            .as_mut()
            .expect("live connection");
        self.mover.release(&mut c.st);
        let mut tx = c.tx.take().expect("tx");
        if let Some(next) = tx.resp.take_next_part() {
            // A multipart body goes on with its next part, from the same
            // file.
            let file = tx.file.take();
            self.start_tx(who, next, file);
            return;
        }
        self.ctx
            .metrics
            .request(c.session.last_method(), tx.resp.status, tx.resp.body_len);
        if self.ctx.log.enabled() {
            let outcome = if tx.resp.file.is_none() {
                "memory"
            } else {
                tx.outcome
            };
            let line = log_line(
                &self.ctx.cfg,
                &client_string(&c.session, c.fd.as_raw_fd()),
                &c.session,
                tx.resp.body_len,
                self.now.saturating_duration_since(c.req_at),
                outcome,
            );
            self.ctx.log.log(line);
        }
        drop(tx);
        c.session.sent();
        if self.draining {
            c.session.close();
        }
        c.phase = Phase::Reading;
        c.deadline = keepalive;
        // The next request is served on the connection's next turn.
        self.enqueue(who);
    }

    pub(super) fn on_completions(&mut self) {
        let mut done = std::mem::take(&mut self.done);
        self.mover.reap(&mut done);
        for (who, comp) in done.drain(..) {
            match comp {
                Completion::Opened(res) => match self.live_conn(who) {
                    Some(c) if c.phase == Phase::Opening => {
                        let req = c.open.take().expect("open in flight");
                        self.opened(who, &req, res);
                    }
                    _ => drop(res),
                },
                Completion::Chunk(chunk) => match self.conns.get_mut(who.slot as usize) {
                    Some(Some(c)) if c.gen == who.gen && c.phase == Phase::Sending && c.waiting => {
                        c.waiting = false;
                        let tx = c.tx.as_mut().expect("tx");
                        self.mover.chunk_done(tx, &mut c.st, chunk);
                        self.pump(who);
                    }
                    _ => self.mover.discard(chunk),
                },
            }
        }
        self.done = done;
    }

    /// Resumes responses that waited for a mover buffer now free.
    pub(super) fn wake_waiters(&mut self) {
        while let Some(who) = self.mover.next_waiter() {
            if let Some(c) = self.live_conn(who) {
                if c.phase == Phase::Sending && c.waiting {
                    c.waiting = false;
                    self.pump(who);
                }
            }
        }
    }
}
