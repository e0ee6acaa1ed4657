//! HTTPS: a connection's TLS (`conn::tls`: rustls's handshake, then
//! spindle's own records), fed by the engine's `RECV`s and drained by its
//! `SEND`s (on either engine: the ring's, or epoll's for posix-aio).
//!
//! The TLS layer does no I/O: ciphertext goes in from the receive buffer a
//! `RECV` filled, and records come out into a buffer a `SEND` then sends,
//! so every socket operation stays in the ring and the worker still never
//! waits. The protocol loop does not change: plaintext is fed to the
//! session as plain bytes would be. A response's head and body go through
//! [`Worker::send_plain`] instead of a plain `SEND`: the bytes are sealed
//! at once into records in [`TlsState::out`] (one copy, encrypted in place
//! there) and sent by `Op::TlsSend`. The records are a copy, so the chunk
//! buffer is free again at once and the next chunk's `READ` overlaps their
//! `SEND`; a connection
//! holds at most two chunks of records (one in flight, one queued behind
//! it), and a response finishes only once its last record is out.
//! File bytes always come through a chunk buffer (`READ`, or `O_DIRECT`):
//! `sendfile` cannot encrypt (the kernel here has no kTLS).
//!
//! A connection the server closes gracefully (`Connection: close`, idle
//! keep-alive, shutdown) sends close_notify before its `SHUTDOWN`, so that
//! a client can tell the end of the stream from a cut (RFC 8446 §6.1).
//!
//! Not yet: kTLS.

use crate::io::Engine;
use std::sync::Arc;

use super::ring::Op;
use super::wire::Wire;
use super::Worker;

/// One connection's TLS session and its outgoing records.
pub(super) struct TlsState {
    pub(super) tls: crate::conn::tls::Tls,
    /// Records on their way, in the order sealed: copies in the queue's
    /// own segments, and records sealed in place in chunk buffers.
    pub(super) wire: Wire,
    /// Plaintext bytes of the response whose records wait behind the ones
    /// in flight: reported to `on_send` once they are all on the socket.
    plain_pending: usize,
    /// The response is done but its records are not all on the socket:
    /// pump it again once they are (then it finishes).
    pub(super) pump_on_drain: bool,
}

impl TlsState {
    pub(super) fn new(cfg: &Arc<rustls::ServerConfig>) -> Result<Box<TlsState>, rustls::Error> {
        Ok(Box::new(TlsState {
            tls: crate::conn::tls::Tls::new(cfg)?,
            wire: Wire::new(),
            plain_pending: 0,
            pump_on_drain: false,
        }))
    }

    /// A send of records is in flight.
    pub(super) fn sending(&self) -> bool {
        self.wire.q.sending()
    }

    /// Records are in flight or waiting, or plaintext waits for its report.
    pub(super) fn busy(&self) -> bool {
        !self.wire.q.is_empty() || self.plain_pending > 0
    }

    /// Where new records go (behind the ones already waiting), and the
    /// TLS layer.
    pub(super) fn dst(&mut self) -> (&mut Vec<u8>, &mut crate::conn::tls::Tls) {
        (self.wire.q.tail(), &mut self.tls)
    }

    /// Seals `plain` into records behind the ones already waiting.
    /// `false`: the link is over; close the connection.
    pub(super) fn encrypt(&mut self, plain: &[u8]) -> bool {
        let (dst, tls) = self.dst();
        tls.seal(dst, plain)
    }
}

/// The plaintext a response sends next: the rest of its head (from this
/// offset), or bytes `from..to` of a chunk buffer, or a chunk buffer
/// read in record layout (`Tx::held`) with this many file bytes.
pub(super) enum Plain {
    Head(usize),
    Buf(u32, usize, usize),
    Held(u32, crate::tlsrec::RecordLayout, usize),
}

pub(super) use crate::tls::Received;

impl<E: Engine> Worker<E> {
    /// Encrypts the response's next plaintext (its head, or bytes of a chunk
    /// buffer) and sends the records. When they are the only records in
    /// flight, the response's `on_send` hears of the plaintext at once: its
    /// chunk buffer is free again (the records are a copy) and the next
    /// chunk's `READ` overlaps this `SEND`. When records are in flight
    /// already, these wait behind them (`queued`) and `on_send` hears of
    /// them only once all are out, so a connection holds at most two
    /// chunks of records: backpressure stays the plain path's.
    pub(super) fn send_plain(&mut self, slot: u32, what: Plain) {
        let c = self.conns.live_at(slot);
        match c.proto {
            super::h2::Proto::Stream { .. } => return self.h2_stream_send(slot, what),
            super::h2::Proto::H3Stream { .. } => return self.h3_stream_send(slot, what),
            _ => {}
        }
        if let Plain::Held(b, layout, n) = what {
            return self.send_held(slot, b, layout, n);
        }
        let tx = c.tx.as_ref().expect("response in progress");
        let plain: &[u8] = match what {
            Plain::Head(from) => &tx.resp.front[from..],
            Plain::Buf(b, from, to) => &self.pool.bufs[b as usize].get()[from..to],
            Plain::Held(..) => unreachable!(),
        };
        let tls = c.tls.as_mut().expect("TLS connection");
        debug_assert_eq!(tls.plain_pending, 0, "one plaintext send at a time");
        let early = tls.wire.q.is_empty();
        let (n, ok) = (plain.len(), tls.encrypt(plain));
        if !ok {
            return self.abort(slot);
        }
        self.sealed(slot, n, early);
    }

    /// Records were queued for `n` bytes of the response's plaintext;
    /// `early`: nothing was on its way before them, so the response hears
    /// of them at once (see `send_plain`).
    fn sealed(&mut self, slot: u32, n: usize, early: bool) {
        if !early {
            let tls = self.conn(slot).tls.as_mut().expect("TLS connection");
            tls.plain_pending = n;
        }
        self.tls_flush(slot);
        if early {
            self.on_send(slot, n as i32);
        }
    }

    /// HTTPS/1.1's zero-copy body: chunk buffer `b` holds `n` file bytes
    /// in record layout (the READ put them there); each record is sealed
    /// in place and sent from the buffer, which the queue hands back to
    /// the pool once it is out.
    fn send_held(&mut self, slot: u32, b: u32, layout: crate::tlsrec::RecordLayout, n: usize) {
        use crate::conn::tls::Sink;
        let c = self.conns.live_at(slot);
        let tx = c.tx.as_mut().expect("response in progress");
        debug_assert_eq!(tx.buf, Some(b));
        tx.buf = None;
        let tls = c.tls.as_mut().expect("TLS connection");
        debug_assert_eq!(tls.plain_pending, 0, "one plaintext send at a time");
        let early = tls.wire.q.is_empty();
        let mut freed = Vec::new();
        let mut sink = tls
            .tls
            .queue_sink(&mut tls.wire.q, &mut self.pool, &mut freed);
        for s in layout.slots(usize::MAX, n) {
            sink.put_held(b, &s, &[]);
        }
        sink.release(b);
        let ok = sink.finish();
        self.give_bufs(freed);
        if !ok {
            return self.abort(slot);
        }
        self.sealed(slot, n, early);
    }

    /// Starts a send of the waiting records if none is in flight.
    pub(super) fn tls_flush(&mut self, slot: u32) {
        let c = self.conns.live_at(slot);
        let fd = c.fd;
        let tls = c.tls.as_mut().expect("TLS connection");
        // The records live in the connection's boxed TlsState (and its
        // chunk buffers), untouched until this send completes.
        if let Some(sqe) = tls.wire.next_send(fd, &self.pool) {
            self.push_conn(slot, Op::TlsSend, sqe);
        }
    }

    /// Queues close_notify and pushes a `SEND` of it linked to the `SQE`
    /// pushed next (the `SHUTDOWN` of a graceful close), so the alert is on
    /// the socket before the FIN. Skipped while records are in flight: the
    /// close then goes without it, as before.
    pub(super) fn tls_close_notify(&mut self, slot: u32) {
        let c = self.conns.live_at(slot);
        let fd = c.fd;
        let tls = c.tls.as_mut().expect("TLS connection");
        if !tls.wire.q.is_empty() {
            return;
        }
        tls.tls.close_notify(tls.wire.q.tail());
        // As in tls_flush: the record stays put until this send completes.
        let Some(sqe) = tls.wire.next_send(fd, &self.pool) else {
            return;
        };
        self.push_conn_linked(slot, Op::TlsSend, sqe);
    }

    pub(super) fn on_tls_send(&mut self, slot: u32, res: i32) {
        let progress = self.now + self.serve.ctx.cfg.send_timeout;
        let mut freed = Vec::new();
        let c = self.conn(slot);
        let tls = c.tls.as_mut().expect("TLS connection");
        tls.wire.q.sent(res.max(0) as usize, &mut freed);
        self.give_bufs(freed);
        if !self.send_went(slot, res) {
            return;
        }
        let c = self.conn(slot);
        // Bytes moved: the response is making progress (--send-timeout
        // counts from the last one, as for a plain SEND).
        c.life.deadline = progress;
        let tls = c.tls.as_mut().expect("TLS connection");
        if !tls.wire.q.is_empty() {
            self.tls_flush(slot);
            return;
        }
        let plain = std::mem::take(&mut tls.plain_pending);
        if c.proto.is_h2() {
            // An HTTP/2 connection's records are out: frame the next ones.
            self.h2_flush(slot);
            self.h2_touch(slot);
        } else if plain > 0 {
            // The response's plaintext is all on the socket now.
            self.on_send(slot, plain as i32);
        } else if std::mem::take(&mut tls.pump_on_drain) {
            // A response waiting for its last records: it finishes now.
            self.pump(slot);
        }
    }
}
