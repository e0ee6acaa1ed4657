//! [`Life`]: what every connection is doing above its bytes, the same on
//! every event loop. The loop keeps its own part of a connection (the
//! socket, operations in flight, the response's buffers, TLS records) next
//! to it.

use std::os::fd::RawFd;
use std::time::Instant;

use spindle_core::{AuthCheck, Checked, Listing, OpenError, OpenRequest, Response, Session, Step};

use super::policy::LINGER_TIMEOUT;
use super::WorkerContext;
use crate::metrics::Timeout;

/// What a connection is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for (more of) a request.
    Reading,
    /// Opening the requested path, or waiting for a directory listing.
    Opening,
    /// Transmitting a response.
    Sending,
    /// Write side shut; reading and discarding until EOF or timeout.
    Lingering,
    /// Waiting for operations in flight to end before the socket is
    /// closed.
    Closing,
}

/// What the loop must do next for a connection (from [`Life::next`]).
#[derive(Debug)]
pub enum Next {
    /// Receive more bytes, then call [`Life::next`] again.
    Receive,
    /// Open this path ([`super::Serving::lookup`] first).
    Open(OpenRequest),
    /// Check these credentials ([`super::Serving::authenticate`]).
    Authenticate(AuthCheck),
    /// Transmit this response.
    Respond(Response),
    /// Transmit this reply (a file's response that waited for the edge).
    Send(Box<super::serve::Reply>),
    /// Close the connection; with `linger`, shut the write side and read
    /// what the peer still sends for a while first.
    Close { linger: bool },
}

/// What a connection waits for from the helper threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    Nothing,
    /// A directory listing (`crate::lister`).
    Listing,
    /// A password check (`crate::passwords`).
    Password,
    /// The edge's first slice of an object (`conn::edge`).
    Origin,
    /// The edge's slices a response's body needs (`conn::edge`).
    Slices,
}

/// A connection's protocol session and the state around it that both
/// loops keep alike.
pub struct Life {
    pub session: Session,
    /// Its count under `--max-connections-per-ip`, given back on drop.
    _per_ip: Option<crate::perip::IpSlot>,
    /// When its current request was parsed (the log's request time).
    pub req_at: Instant,
    pub phase: Phase,
    pub peer_eof: bool,
    /// When the current phase times out (if it has a timeout).
    pub deadline: Instant,
    /// Bytes read and discarded while lingering.
    pub lingered: usize,
    /// Waiting for a request with none under way: counted in the idle
    /// gauge (`metrics.rs`) while set.
    idle: bool,
    /// What it waits for from the helpers, in `Phase::Opening`.
    waiting: Waiting,
    /// The socket, asked for its peer when a rule by address needs it.
    fd: RawFd,
    /// What its request holds of the edge (`--origin`).
    pub edge: super::edge::EdgeHold,
    /// How the edge's cache had its request's object, for the access log
    /// (`hit`, `revalidated`, `miss`, `stale`).
    pub cache_status: Option<&'static str>,
}

impl Life {
    /// A connection just accepted on socket `fd`. A PROXY header is part
    /// of the first request's head, so a proxied one starts on
    /// `--header-timeout`.
    pub fn new(
        session: Session,
        per_ip: Option<crate::perip::IpSlot>,
        ctx: &WorkerContext,
        proxied: bool,
        fd: RawFd,
        now: Instant,
    ) -> Life {
        let timeout = if proxied {
            ctx.cfg.header_timeout
        } else {
            ctx.cfg.keepalive_timeout
        };
        Life {
            session,
            _per_ip: per_ip,
            req_at: now,
            phase: Phase::Reading,
            peer_eof: false,
            deadline: now + timeout,
            lingered: 0,
            idle: false,
            waiting: Waiting::Nothing,
            fd,
            edge: super::edge::EdgeHold::Nothing,
            cache_status: None,
        }
    }

    /// Asks the session what to do next (in `Phase::Reading`), and keeps
    /// the idle gauge, the deadline and the drain's rule. `tls`: on an
    /// HTTPS connection, whether its handshake is under way (which counts
    /// as a request head); an HTTPS connection closes gracefully
    /// (close_notify, the FIN, then the peer's own close is awaited).
    pub fn next(
        &mut self,
        ctx: &WorkerContext,
        now: Instant,
        draining: bool,
        tls: Option<bool>,
    ) -> Next {
        let handshaking = tls == Some(true);
        debug_assert_eq!(self.phase, Phase::Reading);
        // Rules by address (`allow`, `deny`) need the client: a plain
        // connection's peer, asked for once, and only while such rules are
        // configured (a reload may add them to a connection already open).
        // A proxied session knows its client from the start.
        if self.session.client().is_none() && ctx.session_cfg.rules.by_address() {
            self.session.set_peer(crate::net::peer_addr(self.fd));
        }
        let step = self.session.next(&ctx.session_cfg);
        // A connection waiting for a request with none of it here is idle.
        let idle = matches!(step, Step::NeedInput)
            && !self.peer_eof
            && !self.session.mid_request()
            && !handshaking;
        self.set_idle(ctx, idle);
        match step {
            Step::NeedInput => {
                if self.peer_eof {
                    return Next::Close { linger: false };
                }
                let cfg = &ctx.cfg;
                self.deadline = now
                    + if idle {
                        cfg.keepalive_timeout
                    } else {
                        cfg.header_timeout
                    };
                // Draining: a keep-alive connection between requests
                // closes; a new one gets its first answer (it may have
                // been accepted just before a handover).
                if draining && idle && self.session.served() > 0 {
                    return Next::Close { linger: false };
                }
                Next::Receive
            }
            Step::Open(req) => {
                self.req_at = now;
                Next::Open(req)
            }
            Step::Authenticate(check) => {
                self.req_at = now;
                Next::Authenticate(check)
            }
            Step::List(_) => unreachable!("next() never lists"),
            Step::Fetch(_) => unreachable!("next() never fetches"),
            Step::Respond(resp) => {
                self.req_at = now;
                Next::Respond(resp)
            }
            Step::Close => Next::Close {
                linger: self.session.linger_advised() || tls.is_some(),
            },
        }
    }

    /// Counts the connection in the idle gauge, or takes it out (an
    /// HTTP/2 connection is idle while it has no stream).
    pub fn set_idle(&mut self, ctx: &WorkerContext, idle: bool) {
        if idle != self.idle {
            self.idle = idle;
            if idle {
                ctx.metrics.idle.inc();
            } else {
                ctx.metrics.idle.sub(1);
            }
        }
    }

    /// The session's answer to a listing (see `Serving::list`).
    pub fn listed(&mut self, ctx: &WorkerContext, result: Result<&Listing, OpenError>) -> Response {
        self.waiting = Waiting::Nothing;
        match self.session.listed(&ctx.session_cfg, result) {
            Step::Respond(r) => r,
            other => unreachable!("listed() gave {other:?}"),
        }
    }

    /// The session's answer to a password check (see
    /// `Serving::authenticate`): the open, or a 401 or 503.
    pub fn authenticated(
        &mut self,
        ctx: &WorkerContext,
        check: AuthCheck,
        checked: Checked,
    ) -> Next {
        self.waiting = Waiting::Nothing;
        match self.session.authenticated(&ctx.session_cfg, check, checked) {
            Step::Open(req) => Next::Open(req),
            Step::Respond(r) => Next::Respond(r),
            other => unreachable!("authenticated() gave {other:?}"),
        }
    }

    /// Waits for the helpers: a listing, or a password check.
    pub fn await_helper(&mut self, what: Waiting) {
        debug_assert_ne!(what, Waiting::Nothing);
        self.phase = Phase::Opening;
        self.waiting = what;
    }

    /// The helpers' answer it waited for came: later answers of the same
    /// kind (for the same request) are not for it.
    pub fn stop_waiting(&mut self) {
        self.waiting = Waiting::Nothing;
    }

    /// Whether a helper's answer of this kind is for this connection.
    pub fn awaits(&self, what: Waiting) -> bool {
        self.waiting == what && self.phase == Phase::Opening
    }

    /// A response's transmission starts.
    pub fn sending(&mut self, ctx: &WorkerContext, now: Instant) {
        self.phase = Phase::Sending;
        self.deadline = now + ctx.cfg.send_timeout;
    }

    /// The connection starts to close: it leaves the idle gauge, and its
    /// session takes no more requests. `Some(deadline)`: it lingers (it was
    /// asked to, and the peer may still be sending) until then, in
    /// `Phase::Lingering`; the loop shuts its write side.
    pub fn closing(&mut self, ctx: &WorkerContext, linger: bool, now: Instant) -> bool {
        self.set_idle(ctx, false);
        self.session.close();
        if linger && !self.peer_eof && self.phase != Phase::Lingering {
            self.phase = Phase::Lingering;
            self.deadline = now + LINGER_TIMEOUT;
            return true;
        }
        false
    }

    /// The connection is dropped without a close of its own (an error,
    /// a timeout): it leaves the idle gauge.
    pub fn gone(&mut self, ctx: &WorkerContext) {
        self.set_idle(ctx, false);
    }

    /// A keep-alive connection between requests, which the drain closes
    /// at once.
    pub fn between_requests(&self) -> bool {
        self.phase == Phase::Reading && !self.session.mid_request() && self.session.served() > 0
    }

    /// Whether the deadline has passed in a phase that has one, and which
    /// timeout that is. `receiving`: the loop is waiting for input (the
    /// io-uring loop keeps a deadline while its receive is not armed, and
    /// does not expire it then).
    pub fn expired(&self, now: Instant, receiving: bool) -> Option<Timeout> {
        let has = match self.phase {
            Phase::Reading => receiving,
            Phase::Sending | Phase::Lingering => true,
            Phase::Opening | Phase::Closing => false,
        };
        if !has || now < self.deadline {
            return None;
        }
        Some(match self.phase {
            Phase::Reading if self.idle => Timeout::Keepalive,
            Phase::Reading => Timeout::Header,
            Phase::Lingering => Timeout::Linger,
            _ => Timeout::Send,
        })
    }
}
