//! HTTP/2 on the ring: a connection that negotiated `h2` by ALPN, or
//! opened with the HTTP/2 preface on a plain listener (prior knowledge),
//! keeps its protocol in an [`H2Io`] (`conn::H2State`); each of its streams is served by a
//! stream slot (`conn::h2` has the design). Here: what the ring does for
//! them.
//!
//! - The connection's received bytes (decrypted, over TLS) go to
//!   `H2Link::receive`; a new request becomes a stream slot, driven like a
//!   connection whose response is plaintext (`Conn::sends_plaintext`): its
//!   opens and READs are its own ring operations, and what it would send
//!   goes to `H2Link::write` instead of a socket.
//! - The connection's frames leave by one `SEND` at a time
//!   (`Op::H2Send`), or through rustls and `Op::TlsSend`; each completion
//!   frames the next batch ([`Worker::h2_flush`]).
//! - A stream slot never names the socket in an operation: no `RECV`,
//!   `SEND`, `SHUTDOWN` or `CLOSE`. It ends by `H2Link::end` (its
//!   response is over: END_STREAM) or `H2Link::abort` (RST_STREAM), and
//!   its slot is freed once its own operations are done. The connection
//!   aborts its stream slots before it closes, so a stream slot never
//!   outlives the socket it names.
//!
//! Invariant: `h2_flush` does not re-enter itself; stream slots that it
//! reports sent may write again, which only marks another round
//! (`Flush::Again`).

use super::ring::Op;
use super::tls::Plain;
use super::wire::Wire;
use super::Worker;
use crate::conn::h2::{H2State, Held, Wrote};
use crate::conn::tls::QueueSink;
use crate::conn::{Phase, StreamSteps, Ticket};
use crate::io::Engine;

/// What a slot's socket speaks, or which HTTP/2 stream it serves.
pub(super) type Proto = crate::conn::h2::Proto<H2Io>;

/// An HTTP/2 connection's protocol and its outgoing frames.
pub(super) type H2Io = H2State<H2Out>;

/// The ring's part of an HTTP/2 connection.
pub(super) struct H2Out {
    /// Frames on their way in plaintext (h2c); over TLS they go to the
    /// connection's `TlsState` as records instead.
    wire: Wire,
    flush: Flush,
}

impl H2Out {
    pub(super) fn new() -> H2Out {
        H2Out {
            wire: Wire::new(),
            flush: Flush::Idle,
        }
    }
}

/// Whether `h2_flush` is running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flush {
    Idle,
    Running,
    /// A call from inside it asked for another round.
    Again,
}

impl<E: Engine> Worker<E> {
    /// The connection made progress (bytes in or out, a stream began or
    /// ended): its deadline moves (see below), and it counts as idle
    /// while it has no stream. A client that stops reading is dropped
    /// after `--send-timeout`, as over HTTP/1.1.
    pub(super) fn h2_touch(&mut self, slot: u32) {
        let cfg = &self.serve.ctx.cfg;
        let c = self.conns.live_at(slot);
        let tls_busy = c.tls.as_ref().is_some_and(|t| t.busy());
        let Proto::H2(io) = &c.proto else {
            return;
        };
        let socket_busy = io.out.wire.q.sending() || tls_busy;
        let idle = io.link.streams() == 0 && !io.closing;
        c.life.set_idle(&self.serve.ctx, idle);
        let streams = io.link.streams() + usize::from(io.link.has_output());
        c.life.deadline = self.now + crate::conn::h2::timeout(cfg, socket_busy, streams);
    }

    /// After a receive on an HTTP/2 connection: go on receiving unless
    /// the peer is gone or its input waits to be parsed.
    pub(super) fn h2_after_recv(&mut self, slot: u32) {
        let c = self.conns.live_at(slot);
        match c.life.phase {
            Phase::Reading => {}
            _ => return self.after_recv(slot),
        }
        if c.life.peer_eof {
            return self.begin_close(slot, false);
        }
        let full = matches!(&c.proto, Proto::H2(io) if io.link.input_full());
        if full {
            self.cancel_recv(slot);
        } else {
            self.arm_recv(slot);
        }
    }

    /// A stream slot's plaintext (its in-memory body, or body bytes of a
    /// chunk buffer), handed to its connection.
    pub(super) fn h2_stream_send(&mut self, slot: u32, what: Plain) {
        let c = self.conns.live_at(slot);
        let Proto::Stream { parent, id, .. } = c.proto else {
            unreachable!("h2_stream_send on a connection")
        };
        // The connection's protocol is taken out of its slot for the
        // write, so that the stream's bytes can be read in place.
        let p = self
            .conns
            .get(parent)
            .expect("a stream outlives its connection");
        let Proto::H2(mut io) = std::mem::replace(&mut p.proto, Proto::Http1) else {
            unreachable!("a stream's parent is HTTP/2")
        };
        let c = self.conns.live_at(slot);
        let tx = c.tx.as_mut().expect("response in progress");
        let (n, wrote) = match what {
            Plain::Head(from) => {
                let plain = &tx.resp.front[from..];
                (plain.len(), io.link.write(id, plain))
            }
            Plain::Buf(b, from, to) => {
                let plain = &self.pool.bufs[b as usize].get()[from..to];
                (plain.len(), io.link.write(id, plain))
            }
            Plain::Held(buf, layout, payload) => {
                let held = Held {
                    buf,
                    layout,
                    payload,
                };
                let wrote = io.link.write_held(id, held);
                if wrote != Wrote::Gone {
                    // The link's now (sent from where it lies).
                    debug_assert_eq!(tx.buf, Some(buf));
                    tx.buf = None;
                }
                (payload, wrote)
            }
        };
        self.conns.live_at(parent.slot).proto = Proto::H2(io);
        match wrote {
            Wrote::Now => self.on_send(slot, n as i32),
            Wrote::Later => {}
            Wrote::Gone => self.abort(slot),
        }
        self.h2_flush(parent.slot);
    }

    /// Closes a stream slot: RST_STREAM unless its response ended, then
    /// the slot goes once its own operations are done.
    pub(super) fn h2_stream_close(&mut self, slot: u32) {
        let now = self.now;
        let c = self.conns.live_at(slot);
        if c.life.phase == Phase::Closing {
            return;
        }
        let Proto::Stream { parent, id, ended } = c.proto else {
            unreachable!()
        };
        c.life.closing(&self.serve.ctx, false, now);
        c.life.phase = Phase::Closing;
        if let Some(p) = self.conns.get(parent) {
            if let Proto::H2(io) = &mut p.proto {
                if !ended {
                    io.link.abort(id);
                }
            }
            if !matches!(p.life.phase, Phase::Closing | Phase::Lingering) {
                self.h2_flush(parent.slot);
                self.h2_touch(parent.slot);
            }
        }
        self.maybe_release(slot);
    }

    /// Before an HTTP/2 connection closes: its stream slots go first.
    pub(super) fn h2_abort_streams(&mut self, slot: u32) {
        let Proto::H2(io) = &self.conns.live_at(slot).proto else {
            return;
        };
        for who in io.link.slots() {
            if self.conns.get(who).is_some() {
                self.abort(who.slot);
            }
        }
    }

    /// Frames what the connection's streams have ready and starts sending
    /// it, unless a send is in flight (its completion calls this again).
    /// Reports the stream slots whose bytes are now framed, feeds input
    /// that waited for `out` to drain, and closes the connection once it
    /// is over and everything is out.
    pub(super) fn h2_flush(&mut self, slot: u32) {
        {
            let c = self.conns.live_at(slot);
            let Proto::H2(io) = &mut c.proto else {
                return;
            };
            if io.out.flush != Flush::Idle {
                io.out.flush = Flush::Again;
                return;
            }
            io.out.flush = Flush::Running;
        }
        loop {
            let c = self.conns.live_at(slot);
            if matches!(c.life.phase, Phase::Closing | Phase::Lingering) {
                break;
            }
            let Proto::H2(io) = &mut c.proto else {
                unreachable!()
            };
            io.out.flush = Flush::Running;
            let ms = io.ms(self.now);
            let Some(sent) = self.h2_frame_out(slot) else {
                self.begin_close(slot, false);
                break;
            };
            // Input held back while `out` was full, and the connection's
            // events (a Close once a drained connection's streams end).
            let c = self.conns.live_at(slot);
            let Proto::H2(io) = &mut c.proto else {
                unreachable!()
            };
            let todo = io.link.resume(ms);
            self.h2_todo(self.who(slot), todo);
            for (who, n) in sent {
                let live = self
                    .conns
                    .get(who)
                    .is_some_and(|s| s.life.phase == Phase::Sending);
                if live {
                    self.on_send(who.slot, n as i32);
                }
            }
            let c = self.conns.live_at(slot);
            let Proto::H2(io) = &mut c.proto else {
                unreachable!()
            };
            if io.out.flush != Flush::Again {
                break;
            }
        }
        let c = self.conns.live_at(slot);
        let tls_busy = c.tls.as_ref().is_some_and(|t| t.busy());
        let Proto::H2(io) = &mut c.proto else {
            unreachable!()
        };
        io.out.flush = Flush::Idle;
        if io.out.wire.q.is_empty() && io.link.streams() == 0 {
            // An idle connection keeps no batch-sized buffer.
            io.out.wire.q.shrink();
        }
        let done = io.closing && !io.out.wire.q.sending() && !tls_busy && !io.link.has_output();
        let starved =
            c.recv == super::Recv::Off && !io.link.input_full() && c.life.phase == Phase::Reading;
        if done {
            self.begin_close(slot, true);
        } else if starved {
            self.arm_recv(slot);
        }
    }

    /// One batch of frames on its way: framed into the connection's send
    /// queue (at most two batches, one in flight and one queued), over
    /// TLS as records; a held chunk's records are framed and sealed in
    /// place, other body bytes copied once, into their record. Returns
    /// the stream slots whose bytes are now framed; `None` when the TLS
    /// link is over (the connection must close).
    fn h2_frame_out(&mut self, slot: u32) -> Option<Vec<(Ticket, usize)>> {
        let c = self.conns.live_at(slot);
        let fd = c.fd;
        let Proto::H2(io) = &mut c.proto else {
            unreachable!()
        };
        let mut sent = Vec::new();
        let mut freed = Vec::new();
        let mut ok = true;
        if let Some(tls) = c.tls.as_mut() {
            if !tls.wire.q.waiting() {
                let mut sink = tls
                    .tls
                    .queue_sink(&mut tls.wire.q, &mut self.pool, &mut freed);
                io.link.fill(&mut sink, &mut sent);
                ok = sink.finish();
            }
        } else if !io.out.wire.q.waiting() {
            let mut sink = QueueSink::plain(&mut io.out.wire.q, &mut self.pool, &mut freed);
            io.link.fill(&mut sink, &mut sent);
            ok = sink.finish();
        }
        freed.extend(io.link.take_dropped());
        let plain = c.tls.is_none();
        self.give_bufs(freed);
        if !ok {
            return None;
        }
        if plain {
            self.h2_send_next(slot, fd);
        } else {
            self.tls_flush(slot);
        }
        Some(sent)
    }

    /// Starts a `SEND` of the plaintext frames waiting, if none is in
    /// flight.
    fn h2_send_next(&mut self, slot: u32, fd: i32) {
        let Proto::H2(io) = &mut self.conns.live_at(slot).proto else {
            unreachable!()
        };
        // The frames live in the connection's boxed H2Io (and its chunk
        // buffers), untouched until this send completes.
        if let Some(sqe) = io.out.wire.next_send(fd, &self.pool) {
            self.push_conn(slot, Op::H2Send, sqe);
        }
    }

    /// A `SEND` of frames completed.
    pub(super) fn on_h2_send(&mut self, slot: u32, res: i32) {
        let mut freed = Vec::new();
        if let Proto::H2(io) = &mut self.conns.live_at(slot).proto {
            io.out.wire.q.sent(res.max(0) as usize, &mut freed);
        }
        self.give_bufs(freed);
        if !self.send_went(slot, res) {
            return;
        }
        let fd = self.conns.live_at(slot).fd;
        self.h2_send_next(slot, fd);
        self.h2_flush(slot);
        self.h2_touch(slot);
    }

    /// The connection goes: the chunk buffers its link and its queue
    /// hold (nothing is in flight any more).
    pub(super) fn h2_reclaim(io: &mut H2Io, freed: &mut Vec<u32>) {
        freed.extend(io.link.drop_all());
        io.out.wire.q.clear(freed);
    }
}
