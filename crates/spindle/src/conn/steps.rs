//! A request's steps, written once above the worker's I/O: what the
//! session asks for next (receive, open, authenticate, list, respond,
//! close) and where each answer leads (the open-file cache or an open,
//! a listing, a password check, the reply); an HTTPS connection's input;
//! a response's end (the next multipart part, the log line); the
//! timers' tick. HTTP/2's glue is in `conn::streams`.
//!
//! The worker implements [`Transport`]: what only it can do for a connection
//! (receive, start an open, transmit a reply, wait for the helpers,
//! close, end a response's buffers, write out records or frames), each a
//! primitive that knows nothing of HTTP, and [`Connection`], what the
//! steps read of its connection. It gets [`Steps`] for nothing, and calls
//! [`Steps::drive`] whenever a connection may go on: after it was
//! accepted, after bytes arrived, after a response was finished. The
//! body's path is the worker's (`start_tx` and `pump` in `worker/tx.rs`),
//! the same for every backend.

use std::os::fd::RawFd;
use std::time::Instant;

use spindle_core::{AuthCheck, FetchRequest, ListRequest, OpenRequest, Response};

use super::edge::{Fetched, Parking};
use super::h2::{H2State, Proto};
use super::life::{Life, Next, Phase};
use super::serve::{Answer, Found, Listed, OpenResult, Reply, Serving};
use super::streams::StreamSteps;
use super::table::{Slots, Ticket};
use super::tls::Tls;
use crate::metrics::Timeout;
use crate::tls::Received;

/// What the steps need to know of a loop's connection.
pub trait Connection {
    /// The loop's part of an HTTP/2 connection ([`H2State::out`]).
    type H2Out;
    fn life(&self) -> &Life;
    fn life_mut(&mut self) -> &mut Life;
    /// The protocol on its socket, or the HTTP/2 stream the slot serves.
    fn proto(&self) -> &Proto<H2State<Self::H2Out>>;
    fn proto_mut(&mut self) -> &mut Proto<H2State<Self::H2Out>>;
    /// Its socket (a stream slot's names its connection's).
    fn fd(&self) -> RawFd;
    /// On HTTPS, whether the handshake is under way; `None` on plain HTTP.
    fn tls_handshaking(&self) -> Option<bool>;
    /// Its loop watches for its input (a receive is armed, or the
    /// socket is watched), so a header or keep-alive timeout may expire.
    fn receiving(&self) -> bool;
    /// On HTTPS: its TLS session, where the records it makes go (behind
    /// those waiting), and its life.
    fn tls_parts(&mut self) -> Option<(&mut Tls, &mut Vec<u8>, &mut Life)>;

    /// An HTTP/2 connection: its streams are driven in slots of their own.
    fn is_h2(&self) -> bool {
        self.proto().is_h2()
    }

    /// A slot that serves one HTTP/2 stream.
    fn is_stream(&self) -> bool {
        self.proto().is_stream()
    }
}

/// A loop's primitives for a connection's steps.
pub trait Transport {
    type Conn: Connection;
    /// The loop reads a file's first use with `O_DIRECT` (see
    /// [`Serving::opened`]).
    fn direct_reads(&self) -> bool;

    /// The worker's serving state and its connections, borrowed apart.
    fn parts(&mut self) -> (&mut Serving, &mut Slots<Self::Conn>);
    /// The loop's time.
    fn now(&self) -> Instant;

    /// The session wants more input: a receive is armed, and its
    /// completion drives the connection again.
    fn receive(&mut self, who: Ticket);
    /// Opens a path the open-file cache did not have: `Some` with its
    /// result when done at once, `None` when the loop reports it later
    /// (then through [`Steps::opened`]; the connection is `Opening`).
    fn open_file(&mut self, who: Ticket, req: OpenRequest) -> Option<(OpenRequest, OpenResult)>;
    /// Starts transmitting a reply.
    fn transmit(&mut self, who: Ticket, reply: Reply);
    /// The connection waits for the helpers (a listing, a password
    /// check); their answer comes through [`Steps::on_helpers`].
    fn await_helpers(&mut self, who: Ticket);
    /// An HTTP/2 connection's turn: its input, then its frames.
    fn h2_turn(&mut self, who: Ticket);
    /// The session closes the connection; `linger`: shut the write side
    /// and read what the peer still sends for a while first.
    fn close_conn(&mut self, who: Ticket, linger: bool);
    /// Drops a slot now, if it is still live: a stream the peer reset,
    /// or one whose exchange is over (RST_STREAM unless it ended).
    fn abort_slot(&mut self, who: Ticket);
    /// The response's last byte is out: its buffers go back and its
    /// state is dropped; `Some` with the response and where its body came
    /// from (the access log's outcome), or `None` when a multipart body
    /// went on with its next part instead.
    fn end_tx(&mut self, who: Ticket) -> Option<(Response, &'static str)>;
    /// The slot goes on with its next step (a connection after a
    /// response, a new stream slot): at once, or on its next turn.
    fn proceed(&mut self, who: Ticket);
    /// A configuration reload took effect (`Serving::take_reload`).
    fn reloaded(&mut self);
    /// A response that waited for the tick (`--limit-rate`) or for the
    /// edge's slices goes on, if it still waits for that.
    fn resume(&mut self, who: Ticket, waited: Waited);
    /// The connection's deadline passed in `phase`: it goes (or stops
    /// lingering).
    fn expire(&mut self, who: Ticket, phase: Phase, why: Timeout);
    /// Starts writing the TLS records that wait (what rustls said while
    /// receiving): `Failed` in place of `got` when the socket failed.
    fn tls_records_out(&mut self, who: Ticket, got: Received) -> Received;

    // ----- HTTP/2 (`conn::streams`) -----------------------------------

    /// The loop's part of a connection that turns HTTP/2.
    fn h2_out(&mut self, who: Ticket) -> <Self::Conn as Connection>::H2Out;
    /// An HTTP/2 connection's input was taken by its link.
    fn h2_input_taken(&mut self, who: Ticket);
    /// An HTTP/2 connection has frames to write, or a stream ended.
    fn h2_output(&mut self, who: Ticket);
    /// A slot for stream `id` of connection `parent`, serving `life`;
    /// `None` when none can be had (the stream is refused).
    fn add_stream(&mut self, parent: Ticket, id: u32, life: Life) -> Option<Ticket>;

    // ----- HTTP/3 (`crate::quic`) -------------------------------------

    /// An HTTP/3 stream slot's response is over: its stream ends.
    fn h3_stream_done(&mut self, who: Ticket);
}

/// A reply with nothing read from a file (a listing, an error page,
/// a password check's refusal).
fn in_memory(resp: spindle_core::Response) -> Reply {
    Reply {
        resp,
        file: None,
        first_use: false,
        dev: None,
    }
}

/// The steps, for every [`Transport`].
pub trait Steps: Transport {
    /// Asks the session what to do next, and starts doing it.
    fn drive(&mut self, who: Ticket) {
        let now = self.now();
        let (serve, conns) = self.parts();
        let c = conns.get(who).expect("live connection");
        if c.is_h2() {
            // Its streams are driven each in its own slot.
            return self.h2_turn(who);
        }
        let (stream, tls) = (c.is_stream(), c.tls_handshaking());
        let next = c.life_mut().next(&serve.ctx, now, serve.draining, tls);
        if stream && matches!(next, Next::Receive | Next::Close { .. }) {
            // A stream's session had its whole request; after its
            // response it is over.
            return self.abort_slot(who);
        }
        match next {
            Next::Receive => self.receive(who),
            Next::Open(req) => self.open_step(who, req),
            Next::Authenticate(check) => self.auth_step(who, check),
            Next::Respond(resp) => self.transmit(who, in_memory(resp)),
            Next::Send(_) => unreachable!("next() never sends a reply"),
            Next::Close { linger } => self.close_conn(who, linger),
        }
    }

    /// Opens a path the session asked for: from the open-file cache, or
    /// by the loop.
    fn open_step(&mut self, who: Ticket, req: OpenRequest) {
        let now = self.now();
        let (serve, conns) = self.parts();
        let life = conns.get(who).expect("live connection").life_mut();
        if let Some(found) = serve.edge_open(life, &req) {
            return self.opened(who, &req, found);
        }
        if let Some(found) = self.parts().0.lookup(&req, now) {
            return self.opened(who, &req, found);
        }
        if let Some((req, res)) = self.open_file(who, req) {
            self.opened(who, &req, Found::opened(res));
        }
    }

    /// The session's answer to an open, transmitted (or the next path
    /// to open, or a directory to list).
    fn opened(&mut self, who: Ticket, req: &OpenRequest, found: Found) {
        let now = self.now();
        let direct = self.direct_reads();
        let (serve, conns) = self.parts();
        let life = conns.get(who).expect("live connection").life_mut();
        match serve.opened(life, req, found, direct, now) {
            Answer::Send(r) => self.send_or_park(who, r),
            Answer::Open(next) => self.open_step(who, next),
            Answer::List(list) => self.list_step(who, list),
            Answer::Fetch(f) => self.fetch_step(who, f),
        }
    }

    /// Finds an object at the origin ([`Serving::fetch`]).
    fn fetch_step(&mut self, who: Ticket, req: FetchRequest) {
        let (serve, conns) = self.parts();
        let life = conns.get(who).expect("live connection").life_mut();
        match serve.fetch(life, req, who) {
            Fetched::Now(next) => self.after_helper(who, next),
            Fetched::Later => self.await_helpers(who),
        }
    }

    /// Transmits a reply, unless it is the edge's and waits for slices
    /// ([`Serving::send_or_park`]).
    fn send_or_park(&mut self, who: Ticket, reply: Reply) {
        let (serve, conns) = self.parts();
        let life = conns.get(who).expect("live connection").life_mut();
        match serve.send_or_park(life, reply, who) {
            Parking::Ready(r) => self.transmit(who, r),
            Parking::Parked => self.await_helpers(who),
        }
    }

    /// Lists a directory the session asked for ([`Serving::list`]).
    fn list_step(&mut self, who: Ticket, req: ListRequest) {
        let now = self.now();
        let (serve, conns) = self.parts();
        let life = conns.get(who).expect("live connection").life_mut();
        match serve.list(life, &req, who, now) {
            Listed::Now(resp) => self.transmit(who, in_memory(resp)),
            Listed::Later => self.await_helpers(who),
        }
    }

    /// Checks credentials the session asked about
    /// ([`Serving::authenticate`]).
    fn auth_step(&mut self, who: Ticket, check: AuthCheck) {
        let now = self.now();
        let (serve, conns) = self.parts();
        let life = conns.get(who).expect("live connection").life_mut();
        match serve.authenticate(life, check, who, now) {
            Some(next) => self.after_helper(who, next),
            None => self.await_helpers(who),
        }
    }

    /// Goes on with what a listing or a password check decided.
    fn after_helper(&mut self, who: Ticket, next: Next) {
        match next {
            Next::Open(req) => self.open_step(who, req),
            Next::Respond(resp) => self.transmit(who, in_memory(resp)),
            Next::Send(reply) => self.transmit(who, *reply),
            other => unreachable!("a helper's answer gave {other:?}"),
        }
    }

    /// Ciphertext received on an HTTPS connection: decrypted, and its
    /// plaintext fed to the session, or, once ALPN chose it, to HTTP/2;
    /// what rustls has to say (handshake, tickets, alerts) is written. A
    /// connection that negotiated `h2` turns HTTP/2 before its first
    /// plaintext, and its SETTINGS go first. The connection may be gone
    /// after (HTTP/2's input can close it).
    fn tls_received(&mut self, who: Ticket, data: &[u8]) -> Received {
        let (serve, conns) = self.parts();
        let http2 = serve.ctx.cfg.serves_http2();
        let c = conns.get(who).expect("live connection");
        let (tls, dst, life) = c.tls_parts().expect("TLS connection");
        if tls.settled_http1() {
            // HTTPS/1.1's every request: straight into the session.
            let got = tls.receive(data, dst, |p| life.session.feed(p));
            return self.tls_records_out(who, got);
        }
        // During the handshake the plaintext that may follow it in the
        // same bytes waits here until ALPN says whose it is.
        let mut plain = Vec::new();
        let got = tls.receive(data, dst, |p| plain.extend_from_slice(p));
        // HTTP/2 once the handshake is over: its SETTINGS go in records,
        // which need the traffic keys.
        let h2 = http2 && tls.alpn_h2() && !tls.handshaking();
        let got = self.tls_records_out(who, got);
        let c = self.parts().1.get(who).expect("live connection");
        if h2 && !c.is_h2() {
            self.h2_begin(who);
            self.h2_output(who);
        }
        let c = self.parts().1.get(who).expect("live connection");
        if c.is_h2() {
            if !plain.is_empty() {
                self.h2_received(who, &plain);
            }
        } else {
            c.life_mut().session.feed(&plain);
        }
        got
    }

    /// A response's last byte is on the socket: the next part of a
    /// multipart body, or END_STREAM on a stream, the counters and the
    /// access-log line, and the connection goes on.
    fn finish(&mut self, who: Ticket) {
        let Some((resp, outcome)) = self.end_tx(who) else {
            return;
        };
        self.h2_stream_done(who);
        let now = self.now();
        let (serve, conns) = self.parts();
        let c = conns.get(who).expect("live connection");
        let fd = c.fd();
        serve.finished(c.life_mut(), fd, &resp, outcome, now);
        self.proceed(who);
    }

    /// The connection timers' tick: a reload taken between requests,
    /// throttled responses resumed, and the connections whose deadline
    /// passed expired ([`Serving::sweep`]).
    fn tick_steps(&mut self) {
        let now = self.now();
        if self.parts().0.take_reload() {
            self.reloaded();
        }
        self.parts().0.tell_served();
        // --limit-rate: the responses that used their allowance go on.
        let throttled = std::mem::take(&mut self.parts().0.throttled);
        self.resume_sending(throttled, Waited::Tick);
        let (serve, conns) = self.parts();
        let expired = serve.sweep(conns, now, |c| (c.life(), c.receiving()));
        for (who, phase, why) in expired {
            if self.parts().1.get(who).is_none() {
                // A stream slot its connection's close took with it.
                continue;
            }
            self.expire(who, phase, why);
        }
    }

    /// Listings and password checks the helpers finished: each to the
    /// connection still waiting for it.
    fn on_helpers(&mut self) {
        let now = self.now();
        let (serve, conns) = self.parts();
        let done = serve.helpers_done(conns, now, |c| c.life_mut());
        for (who, next) in done {
            self.after_helper(who, next);
        }
        // The edge's streaming responses whose slices landed.
        let wakes = std::mem::take(&mut self.parts().0.slice_wakes);
        self.resume_sending(wakes, Waited::Slices);
    }

    /// Resumes those of `who` still sending a response that waited.
    fn resume_sending(&mut self, who: Vec<Ticket>, waited: Waited) {
        for w in who {
            let (_, conns) = self.parts();
            if conns
                .get(w)
                .is_some_and(|c| c.life().phase == Phase::Sending)
            {
                self.resume(w, waited);
            }
        }
    }
}

/// What a paused response waited for ([`Transport::resume`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    /// `--limit-rate`'s next tick.
    Tick,
    /// The edge's next slice ([`Serving::edge_more`]).
    Slices,
}

impl<T: Transport + ?Sized> Steps for T {}
