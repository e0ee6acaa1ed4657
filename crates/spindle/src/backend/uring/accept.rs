//! Accepting connections: the multishot accepts, a new connection's slot
//! and session, the pause at `--max-connections`, the accept gate of a
//! binary handover, and the start of the drain.

use std::os::fd::{AsRawFd, RawFd};

use io_uring::{opcode, types};

use super::ring::{ud, Op};
use super::{Conn, Phase, Worker, NO_SLOT};
use crate::backend::{plain_session, proxied_session, AcceptBackoff};
use crate::metrics::Pause;

impl Worker {
    pub(super) fn arm_accept(&mut self, i: usize) {
        if self.accept_armed[i]
            || self.draining
            || self.accept_paused
            || self.live >= self.max_conns
        {
            return;
        }
        let fd = self.listeners[i].as_raw_fd();
        self.accept_armed[i] = true;
        self.push(
            opcode::AcceptMulti::new(types::Fd(fd))
                .flags(libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK)
                .build(),
            ud(Op::Accept, i as u32, 0),
        );
    }

    pub(super) fn cancel_accepts(&mut self) {
        for i in 0..self.listeners.len() {
            if self.accept_armed[i] {
                self.push(
                    opcode::AsyncCancel::new(ud(Op::Accept, i as u32, 0)).build(),
                    ud(Op::Cancel, NO_SLOT, 0),
                );
            }
        }
    }

    // ----- accepting ----------------------------------------------------

    /// Closes a connection just accepted without serving it (an untrusted
    /// PROXY source, a TLS session that could not be made), and accepts
    /// again if the multishot accept ended.
    fn refuse(&mut self, fd: RawFd, i: usize, more: bool) {
        self.push(
            opcode::Close::new(types::Fd(fd)).build(),
            ud(Op::Close, NO_SLOT, 0),
        );
        if !more {
            self.arm_accept(i);
        }
    }

    pub(super) fn on_accept(&mut self, i: usize, res: i32, more: bool) {
        if !more {
            self.accept_armed[i] = false;
            self.ack_gate();
        }
        if res < 0 {
            match -res {
                libc::ECANCELED => {}
                e if AcceptBackoff::applies(e) => {
                    if self.files.shed_half() > 0 {
                        // Cached descriptors were given back: try again now.
                        if !more {
                            self.arm_accept(i);
                        }
                        return;
                    }
                    self.accept_backoff.start(&self.ctx, e, self.now);
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
        let (session, per_ip) = if self.ctx.proxied.contains(&i) {
            match proxied_session(&self.ctx.cfg, fd) {
                Some(s) => (s, None),
                None => {
                    self.refuse(fd, i, more);
                    return;
                }
            }
        } else {
            plain_session(&self.ctx, fd)
        };
        if let (Some(shared), Some(copy)) = (&self.tls_shared, &mut self.tls_cfg) {
            shared.refresh(copy);
        }
        let tls = match (&self.tls_cfg, i >= self.tls_from) {
            (Some((_, cfg)), true) => match super::tls::TlsState::new(cfg) {
                Ok(t) => Some(t),
                Err(e) => {
                    crate::error!("TLS session: {e}");
                    self.refuse(fd, i, more);
                    return;
                }
            },
            _ => None,
        };
        if self.live >= self.max_conns {
            // Raced with a cancel: this one was already accepted. (One
            // accepted while draining is served: during a binary handover
            // its client connected to a socket that still serves.)
            self.push(
                opcode::Close::new(types::Fd(fd)).build(),
                ud(Op::Close, NO_SLOT, 0),
            );
            return;
        }
        let slot = crate::backend::vacant_slot(&mut self.free, &mut self.conns);
        let gen = self.next_gen;
        self.next_gen = self.next_gen.wrapping_add(1).max(1);
        self.conns[slot as usize] = Some(Conn {
            fd,
            gen,
            session,
            _per_ip: per_ip,
            req_at: self.now,
            phase: Phase::Reading,
            inflight: 0,
            recv_armed: false,
            recv_cancelling: false,
            peer_eof: false,
            deadline: self.now + self.ctx.cfg.keepalive_timeout,
            open: None,
            file: None,
            first_use: false,
            tx: None,
            lingered: 0,
            dev: 0,
            disk_waiting: false,
            tls,
            idle: false,
            disk_at: self.now,
            listing: false,
            bulk: crate::net::Bulk::Off,
        });
        self.live += 1;
        let m = &self.ctx.metrics;
        m.accepted.inc();
        m.open.set(self.live as u64);
        if self.live >= self.max_conns {
            // Stop accepting; the kernel's backlog holds new connections
            // until a slot frees up.
            m.pause(Pause::MaxConnections);
            self.cancel_accepts();
        }
        if !more && self.live < self.max_conns {
            self.arm_accept(i);
        }
        self.drive(slot);
    }

    /// Tells the accept gate that none of this worker's accepts is left in
    /// the kernel, once per closing.
    fn ack_gate(&mut self) {
        if self.accept_paused && !self.gate_acked && !self.accept_armed.iter().any(|&a| a) {
            self.gate_acked = true;
            self.ctx.shutdown.gate.ack();
        }
    }

    pub(super) fn on_wake(&mut self) {
        if !self.ctx.shutdown.requested() {
            // The accept gate moved (a handover starting, or failed).
            let closed = self.ctx.shutdown.gate.closed();
            if closed && !self.accept_paused {
                self.accept_paused = true;
                self.gate_acked = false;
                self.cancel_accepts();
                self.ack_gate();
            } else if !closed && self.accept_paused {
                self.accept_paused = false;
                for i in 0..self.listeners.len() {
                    self.arm_accept(i);
                }
            }
            self.arm_wake();
            return;
        }
        self.draining = true;
        self.drain_deadline = Some(self.now + self.ctx.cfg.drain_timeout);
        self.cancel_accepts();
        for slot in 0..self.conns.len() as u32 {
            let idle = matches!(&self.conns[slot as usize], Some(c) if c.phase == Phase::Reading && !c.session.mid_request() && c.session.served() > 0);
            if idle {
                self.begin_close(slot, false);
            }
        }
    }
}
