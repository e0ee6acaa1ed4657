//! From a request to the socket: asking the session what to do next,
//! opening (through the open-file cache or the mover), transmitting the
//! response through the mover, and applying the mover's completions.

use std::os::fd::{AsRawFd, OwnedFd};
use std::rc::Rc;

use spindle_core::{OpenRequest, Response};

use super::{Completion, Mover, Opened, Progress, Tx, Wait, Worker, READ_TURN_BYTES};
use crate::conn::policy::{changed, read_failed};
use crate::conn::{
    Connection, Found, OpenResult, Phase, Reply, Steps, StreamSteps, Ticket, Transport,
};
use crate::tls::Received;

impl<M: Mover> Worker<M> {
    // ----- transmitting -------------------------------------------------

    fn start_tx(&mut self, who: Ticket, mut resp: Response, file: Option<Rc<OwnedFd>>) {
        if self.conn(who).proto.is_stream() && !resp.continued {
            // An HTTP/2 stream's head goes to its link, as fields.
            let fields = std::mem::take(&mut resp.fields);
            if !self.h2_stream_respond(who, resp.status, fields) {
                return self.close(who);
            }
        }
        let now = self.now;
        let rate = self.serve.rate;
        let c = self.conns.get(who).expect("live connection");
        let (off, left) = resp.file.unwrap_or((0, 0));
        c.life.sending(&self.serve.ctx, now);
        let unchecked = resp.version;
        c.tx = Some(Tx {
            resp,
            head_sent: 0,
            file: if left > 0 { file } else { None },
            off,
            left,
            body_sent: 0,
            unchecked,
            started: now,
            rate,
            wait: Wait::Nothing,
            budget: u64::MAX,
            outcome: M::OUTCOME,
        });
        // Input that is already waiting is left in the socket until this
        // response is done (or until the next edge, for a long response):
        // trying to read it now would mostly cost an EAGAIN per request.
        self.pump(who);
    }

    pub(super) fn pump(&mut self, who: Ticket) {
        let c = self.conns.get(who).expect("live connection");
        let waits = c.tx.as_ref().is_some_and(|t| t.wait == Wait::Mover);
        if c.life.phase != Phase::Sending || waits || !c.can_write {
            return;
        }
        if let super::h2::Proto::Stream { parent, .. } = c.proto {
            // An HTTP/2 stream: the mover writes into the connection's
            // link, taken out of its slot meanwhile; then the connection
            // writes what it framed.
            let p = self
                .with_parent_link(who, |w, link, id| w.pump_into(who, Some((link, id))))
                .flatten();
            match p {
                Some(p) => self.pumped(who, p),
                None => self.close(who),
            }
            if self.live_conn(parent).is_some() {
                self.h2_flush(parent);
            }
            return;
        }
        if let Some(p) = self.pump_into(who, None) {
            self.pumped(who, p);
        }
    }

    /// One mover pump of `who`'s response into its socket (or, `h2`, its
    /// stream's link). `None`: throttled, nothing to do this turn.
    fn pump_into(
        &mut self,
        who: Ticket,
        h2: Option<(&mut crate::conn::h2::H2Link, u32)>,
    ) -> Option<Progress> {
        let now = self.now;
        let c = self.conns.get(who).expect("live connection");
        let tx = c.tx.as_mut().expect("response in progress");
        if let Some(limit) = tx.rate {
            // --limit-rate: a response that has used its allowance waits
            // for the next tick (on_tick pumps it again).
            tx.budget = limit.allowance(now - tx.started, tx.body_sent);
            if tx.left > 0 && tx.budget == 0 {
                if std::mem::replace(&mut tx.wait, Wait::Tick) != Wait::Tick {
                    self.serve.throttled.push(who);
                }
                return None;
            }
        }
        let before = tx.progress();
        let mut sock = super::Sock {
            fd: c.fd.as_raw_fd(),
            tls: c.tls.as_deref_mut(),
            h2,
        };
        let mut p = self.mover.pump(who, &mut sock, tx, &mut c.st);
        if tx.progress() != before {
            c.life.progressed(&self.serve.ctx, now);
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
        Some(p)
    }

    /// What the loop does after a pump.
    fn pumped(&mut self, who: Ticket, p: Progress) {
        let c = self.conns.get(who).expect("live connection");
        match p {
            Progress::Done => self.finish(who),
            Progress::SocketFull => c.can_write = false,
            Progress::Waiting => c.tx.as_mut().expect("tx").wait = Wait::Mover,
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
        let c = self.conns.get(who).expect("live connection");
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
        let resp = c
            .life
            .session
            .body_failed(&self.serve.ctx.session_cfg, errno);
        self.start_tx(who, resp, None);
    }

    pub(super) fn on_completions(&mut self) {
        let mut done = std::mem::take(&mut self.done);
        self.mover.reap(&mut done);
        for (who, comp) in done.drain(..) {
            match comp {
                Completion::Opened(res) => match self.live_conn(who) {
                    Some(c) if c.life.phase == Phase::Opening => {
                        let req = c.open.take().expect("open in flight");
                        self.opened(who, &req, Found::opened(res));
                    }
                    _ => drop(res),
                },
                Completion::Chunk(chunk) => {
                    let Some(c) = self.conns.get(who) else {
                        self.mover.discard(chunk);
                        continue;
                    };
                    let sending = c.life.phase == Phase::Sending;
                    match c.tx.as_mut().filter(|t| sending && t.wait == Wait::Mover) {
                        Some(tx) => {
                            tx.wait = Wait::Nothing;
                            self.mover.chunk_done(tx, &mut c.st, chunk);
                            self.pump(who);
                        }
                        None => self.mover.discard(chunk),
                    }
                }
            }
        }
        self.done = done;
    }

    /// Resumes responses that waited for a mover buffer now free.
    pub(super) fn wake_waiters(&mut self) {
        while let Some(who) = self.mover.next_waiter() {
            if let Some(c) = self.live_conn(who) {
                if c.life.phase == Phase::Sending
                    && c.tx.as_mut().is_some_and(|t| t.wake(Wait::Mover))
                {
                    self.pump(who);
                }
            }
        }
    }
}

impl<S> Connection for super::Conn<S> {
    type H2Out = super::h2::Frames;

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
        self.fd.as_raw_fd()
    }

    fn tls_handshaking(&self) -> Option<bool> {
        self.tls.as_ref().map(|t| t.tls.handshaking())
    }

    /// The loop watches every socket for input.
    fn receiving(&self) -> bool {
        true
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
            let (tls, out) = t.parts();
            (tls, out, life)
        })
    }
}

/// The epoll loop's primitives for a connection's steps
/// (`conn::Steps`).
impl<M: Mover> Transport for Worker<M> {
    type Conn = super::Conn<M::State>;
    fn direct_reads(&self) -> bool {
        false
    }
    const RECEIVE_TURN: usize = READ_TURN_BYTES;

    fn parts(
        &mut self,
    ) -> (
        &mut crate::conn::Serving,
        &mut crate::conn::Slots<Self::Conn>,
    ) {
        (&mut self.serve, &mut self.conns)
    }

    fn now(&self) -> std::time::Instant {
        self.now
    }

    /// One `recv` within the connection's turn.
    fn receive_for(&mut self, who: Ticket, budget: &mut usize) -> bool {
        self.recv_in_turn(who, budget)
    }

    /// By the mover: at once, or later (posix-aio's helper thread).
    fn open_file(&mut self, who: Ticket, req: OpenRequest) -> Option<(OpenRequest, OpenResult)> {
        match self.mover.open(who, &req) {
            Opened::Now(res) => Some((req, res)),
            Opened::Later => {
                let c = self.conn(who);
                c.life.phase = Phase::Opening;
                c.open = Some(req);
                self.take_pipelined(who);
                None
            }
        }
    }

    fn transmit(&mut self, who: Ticket, r: Reply) {
        self.start_tx(who, r.resp, r.file);
    }

    /// Nothing to arm: the helpers' eventfd is in the epoll set.
    fn await_helpers(&mut self, _who: Ticket) {}

    fn h2_turn(&mut self, who: Ticket) {
        self.h2_service(who);
    }

    fn close_conn(&mut self, who: Ticket, linger: bool) {
        if linger {
            self.begin_close(who, true);
        } else {
            self.close(who);
        }
    }

    fn abort_slot(&mut self, who: Ticket) {
        self.close(who);
    }

    fn end_tx(&mut self, who: Ticket) -> Option<(Response, &'static str)> {
        let c = self.conns.get(who).expect("live connection");
        self.mover.release(&mut c.st);
        let mut tx = c.tx.take().expect("tx");
        if let Some(next) = tx.resp.take_next_part() {
            // A multipart body goes on with its next part, from the same
            // file.
            let file = tx.file.take();
            self.start_tx(who, next, file);
            return None;
        }
        Some((tx.resp, tx.outcome))
    }

    fn reloaded(&mut self) {
        self.mover.set_roots(self.serve.ctx.root.clone());
    }

    fn resume(&mut self, who: Ticket) {
        let c = self.conn(who);
        if c.tx.as_mut().is_some_and(|t| t.wake(Wait::Tick)) {
            self.pump(who);
        }
    }

    fn expire(&mut self, who: Ticket, _phase: Phase, _why: crate::metrics::Timeout) {
        self.close(who);
    }

    fn tls_records_out(&mut self, who: Ticket, got: Received) -> Received {
        let c = self.conn(who);
        let fd = c.fd.as_raw_fd();
        match c.tls.as_mut().expect("TLS connection").flush(fd) {
            Ok(_) => got,
            Err(_) => Received::Failed,
        }
    }

    fn h2_out(&mut self, _who: Ticket) -> super::h2::Frames {
        super::h2::Frames::default()
    }

    /// Nothing: the connection's turn writes its frames next.
    fn h2_input_taken(&mut self, _who: Ticket) {}

    fn h2_output(&mut self, who: Ticket) {
        self.enqueue(who);
    }

    /// A stream slot holds a duplicate of its connection's descriptor,
    /// never registered with epoll and never read or written.
    fn add_stream(&mut self, parent: Ticket, id: u32, life: crate::conn::Life) -> Option<Ticket> {
        let fd = self.conn(parent).fd.try_clone().ok()?;
        let proto = super::h2::Proto::Stream {
            parent,
            id,
            ended: false,
        };
        let who = self.conns.insert(super::Conn::new(fd, life, None, proto));
        self.streams += 1;
        Some(who)
    }

    /// On the slot's next turn. A new stream slot's first step is not
    /// run from inside its connection's own turn: a response found at
    /// once (a small cached file) would take the connection's link out of
    /// its slot while that turn still works on it, and about 1 stream in
    /// 140 under h2load -c 10 -m 32 was reset.
    fn proceed(&mut self, who: Ticket) {
        self.enqueue(who);
    }
}
