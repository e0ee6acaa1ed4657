//! Accepting connections: the multishot accepts, a new connection's slot
//! and session, the pause at `--max-connections`, the accept gate of a
//! binary handover, and the start of the drain.

use crate::io::Engine;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use crate::io::Sub;

use super::ring::{ud, Op};
use super::{Conn, Worker, NO_SLOT};
use crate::conn::policy::AcceptBackoff;
use crate::conn::Steps;
use crate::conn::StreamSteps;
use crate::metrics::Pause;

/// The worker's listening sockets and the multishot accepts on them.
pub(super) struct Accepting {
    pub(super) listeners: Vec<OwnedFd>,
    /// A multishot `ACCEPT` is in the ring, per listener.
    pub(super) armed: Vec<bool>,
    pub(super) backoff: AcceptBackoff,
    /// The accept gate is closed (a handover starting): no accept is
    /// armed; `gate_acked` once this worker told the gate so.
    pub(super) paused: bool,
    pub(super) gate_acked: bool,
}

impl Accepting {
    pub(super) fn new(listeners: Vec<OwnedFd>) -> Accepting {
        Accepting {
            armed: vec![false; listeners.len()],
            listeners,
            backoff: AcceptBackoff::default(),
            paused: false,
            gate_acked: false,
        }
    }
}

impl<E: Engine> Worker<E> {
    pub(super) fn arm_accept(&mut self, i: usize) {
        if self.accept.armed[i] || self.serve.draining || self.accept.paused || self.conns.full() {
            return;
        }
        let fd = self.accept.listeners[i].as_raw_fd();
        self.accept.armed[i] = true;
        self.push(Sub::Accept { fd }, ud(Op::Accept, i as u32, 0));
    }

    pub(super) fn cancel_accepts(&mut self) {
        for i in 0..self.accept.listeners.len() {
            if self.accept.armed[i] {
                let target = ud(Op::Accept, i as u32, 0);
                self.push(Sub::Cancel { target }, ud(Op::Cancel, NO_SLOT, 0));
            }
        }
    }

    // ----- accepting ----------------------------------------------------

    /// Closes a connection just accepted without serving it (an untrusted
    /// PROXY source, a TLS session that could not be made), and accepts
    /// again if the multishot accept ended.
    fn refuse(&mut self, fd: RawFd, i: usize, more: bool) {
        self.push(Sub::Close { fd }, ud(Op::Close, NO_SLOT, 0));
        if !more {
            self.arm_accept(i);
        }
    }

    pub(super) fn on_accept(&mut self, i: usize, res: i32, more: bool) {
        if !more {
            self.accept.armed[i] = false;
            self.ack_gate();
        }
        if res < 0 {
            match -res {
                libc::ECANCELED => {}
                e if AcceptBackoff::applies(e) => {
                    if self.serve.files.shed_half() > 0 {
                        // Cached descriptors were given back: try again now.
                        if !more {
                            self.arm_accept(i);
                        }
                        return;
                    }
                    self.accept.backoff.start(&self.serve.ctx, e, self.now);
                }
                _ => {
                    if !more {
                        self.arm_accept(i);
                    }
                }
            }
            return;
        }
        let fd = res;
        let Some(a) = self.serve.admit(i, fd, self.now) else {
            self.refuse(fd, i, more);
            return;
        };
        let tls = match a.tls.map(|cfg| super::tls::TlsState::new(&cfg)) {
            None => None,
            Some(Ok(t)) => Some(t),
            Some(Err(e)) => {
                crate::error!("TLS session: {e}");
                self.refuse(fd, i, more);
                return;
            }
        };
        if self.conns.full() {
            // Raced with a cancel: this one was already accepted. (One
            // accepted while draining is served: during a binary handover
            // its client connected to a socket that still serves.)
            self.push(Sub::Close { fd }, ud(Op::Close, NO_SLOT, 0));
            return;
        }
        let who = self.conns.insert(Conn::new(
            fd,
            a.life,
            super::h2::Proto::Http1,
            tls,
            self.now,
        ));
        let m = &self.serve.ctx.metrics;
        m.accepted.inc();
        m.open.set((self.conns.live() - self.streams) as u64);
        if self.conns.full() {
            // Stop accepting; the kernel's backlog holds new connections
            // until a slot frees up.
            m.pause(Pause::MaxConnections);
            self.cancel_accepts();
        }
        if !more && !self.conns.full() {
            self.arm_accept(i);
        }
        self.drive(who);
    }

    /// Tells the accept gate that none of this worker's accepts is left in
    /// the kernel, once per closing.
    fn ack_gate(&mut self) {
        if self.accept.paused && !self.accept.gate_acked && !self.accept.armed.iter().any(|&a| a) {
            self.accept.gate_acked = true;
            self.serve.ctx.shutdown.gate.ack();
        }
    }

    pub(super) fn on_wake(&mut self) {
        if !self.serve.ctx.shutdown.requested() {
            // The accept gate moved (a handover starting, or failed).
            let closed = self.serve.ctx.shutdown.gate.closed();
            if closed && !self.accept.paused {
                self.accept.paused = true;
                self.accept.gate_acked = false;
                self.cancel_accepts();
                self.ack_gate();
            } else if !closed && self.accept.paused {
                self.accept.paused = false;
                for i in 0..self.accept.listeners.len() {
                    self.arm_accept(i);
                }
            }
            self.arm_wake();
            return;
        }
        let idle = self.serve.start_drain(&self.conns, self.now, |c| &c.life);
        self.quic_drain();
        if self.serve.draining {
            self.cancel_accepts();
        }
        for who in idle {
            self.begin_close(who.slot, false);
        }
        if self.serve.draining {
            self.h2_drain();
        }
    }
}
