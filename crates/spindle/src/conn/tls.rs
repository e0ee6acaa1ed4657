//! A connection's TLS: the record layer of `tlsrec`
//! (rustls's handshake, then records of spindle's own), the ciphertext it
//! has not read yet, and the sinks that frame plaintext into records.
//!
//! No I/O. A loop appends what it received with [`Tls::receive`] and sends
//! what the calls append to its output buffer, in the order they were
//! appended (`tlsrec`'s invariant: records go out in the order sealed).
//! A body byte is copied once, by [`Records`], from where the loop holds
//! it into the record it is then encrypted in, in place; the record goes
//! to the socket from there.

use std::ops::Range;
use std::sync::Arc;

use super::sendq::{BufMem, SendQueue};
use crate::tlsrec::{Progress, RecordLayout, RecordSlot, TlsLink, MAX_PLAINTEXT};

pub use crate::tls::Received;

/// One connection's TLS.
pub struct Tls {
    link: TlsLink,
    /// Ciphertext received and not yet made into records (an incomplete
    /// one; `tlsrec::MAX_INBUF_BYTES` bounds it).
    inbuf: Vec<u8>,
}

impl Tls {
    /// A new connection's TLS; `cfg` must allow the record layer's
    /// takeover (`tls::server_config_with` sets it).
    pub fn new(cfg: &Arc<rustls::ServerConfig>) -> Result<Tls, rustls::Error> {
        Ok(Tls {
            link: TlsLink::new(cfg)?,
            inbuf: Vec::new(),
        })
    }

    pub fn handshaking(&self) -> bool {
        self.link.is_handshaking()
    }

    /// ALPN chose HTTP/2.
    pub fn alpn_h2(&self) -> bool {
        self.link.alpn() == Some(b"h2")
    }

    /// The handshake is over and ALPN did not choose HTTP/2: plaintext is
    /// HTTP/1.1 from now on.
    pub fn settled_http1(&self) -> bool {
        !self.handshaking() && !self.alpn_h2()
    }

    /// Ciphertext from the peer: its plaintext to `plain`, in order; the
    /// records the link has to send (handshake, tickets, a KeyUpdate, an
    /// alert) appended to `out`.
    pub fn receive(
        &mut self,
        data: &[u8],
        out: &mut Vec<u8>,
        plain: impl FnMut(&[u8]),
    ) -> Received {
        self.inbuf.extend_from_slice(data);
        let got = self.link.receive(&mut self.inbuf, out, plain);
        if self.inbuf.is_empty() && self.inbuf.capacity() > 2 * MAX_PLAINTEXT {
            self.inbuf = Vec::new();
        }
        match got {
            Ok(Progress::Handshaking | Progress::Established | Progress::Open) => Received::Ok,
            Ok(Progress::PeerClosed) => Received::Closed,
            Err(_) => Received::Failed,
        }
    }

    /// Appends records of `plain` to `out`. `false`: the link is over (a
    /// TLS 1.2 link whose keys are worn out: its close_notify is in
    /// `out`), and the connection must close.
    pub fn seal(&mut self, out: &mut Vec<u8>, plain: &[u8]) -> bool {
        self.link.seal_into(out, plain).is_ok()
    }

    /// A sink that frames what is written to it into records appended to
    /// `out` (see [`Records`]).
    pub fn records<'a>(&'a mut self, out: &'a mut Vec<u8>) -> Records<'a> {
        let ok = self.link.rekey_if_due(out).is_ok();
        Records {
            link: &mut self.link,
            out,
            f: Filling::new(ok),
        }
    }

    /// Where a chunk buffer's records go so that a read lands file bytes
    /// in place: after the handshake, with `prefix` plaintext bytes of
    /// each record before its file bytes (9 for a DATA frame's header).
    pub fn layout(&self, prefix: usize) -> Option<RecordLayout> {
        (!self.handshaking()).then(|| RecordLayout::for_link(&self.link, prefix))
    }

    /// A sink that queues what is written to it on `q`: copied bytes
    /// sealed into records in the queue's own segments, and held chunk
    /// records sealed in place in the loop's buffers (see [`QueueSink`]).
    pub fn queue_sink<'a, M: BufMem>(
        &'a mut self,
        q: &'a mut SendQueue,
        mem: &'a mut M,
        freed: &'a mut Vec<u32>,
    ) -> QueueSink<'a, M> {
        let ok = self.link.rekey_if_due(q.tail()).is_ok();
        q.trim();
        QueueSink {
            link: Some(&mut self.link),
            q,
            mem,
            freed,
            f: Filling::new(ok),
        }
    }

    /// Appends close_notify to `out` (nothing during the handshake).
    pub fn close_notify(&mut self, out: &mut Vec<u8>) {
        self.link.close_notify(out);
    }
}

/// Where framed plaintext goes: a plain connection's send buffer, or
/// records ([`Records`]), or a connection's send queue ([`QueueSink`]),
/// which also takes file bytes held in the loop's chunk buffers.
pub trait Sink {
    /// Appends `bytes`.
    fn put(&mut self, bytes: &[u8]);
    /// Plaintext bytes put so far.
    fn plain_len(&self) -> usize;
    /// Appends the record at `slot` of chunk buffer `buf` (its payload
    /// already there), with `prefix` written in front of the payload: no
    /// copy of the payload. Only a sink with the loop's buffers
    /// ([`QueueSink`]) is given held chunks.
    fn put_held(&mut self, buf: u32, slot: &RecordSlot, prefix: &[u8]) {
        let _ = (buf, slot, prefix);
        unreachable!("this sink takes no chunk buffers");
    }
    /// Appends a copy of `range` of chunk buffer `buf` (what a short
    /// window lets go of a held record).
    fn put_copy(&mut self, buf: u32, range: Range<usize>) {
        let _ = (buf, range);
        unreachable!("this sink takes no chunk buffers");
    }
    /// Nothing more of chunk buffer `buf` will be put: it goes back to
    /// the loop's pool once its bytes are out.
    fn release(&mut self, buf: u32) {
        let _ = buf;
        unreachable!("this sink takes no chunk buffers");
    }
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }

    fn plain_len(&self) -> usize {
        self.len()
    }
}

/// Plaintext written into TLS records as it comes: each byte is copied
/// once, into the record being filled in `out` (after the room for its
/// header), and a record is sealed in place there once it holds
/// [`MAX_PLAINTEXT`] bytes, or at [`Records::finish`]. Small writes (an
/// HTTP/2 frame header, a control frame) share a record with what
/// follows them.
pub struct Records<'a> {
    link: &'a mut TlsLink,
    out: &'a mut Vec<u8>,
    f: Filling,
}

impl Records<'_> {
    /// Seals the record being filled, if any. `false`: the link is over
    /// (see [`Tls::seal`]); what was written may be lost.
    pub fn finish(mut self) -> bool {
        self.f.seal(self.link, self.out);
        !self.f.failed
    }
}

impl Sink for Records<'_> {
    fn put(&mut self, bytes: &[u8]) {
        self.f.put(self.link, self.out, bytes);
    }

    fn plain_len(&self) -> usize {
        self.f.plain
    }
}

/// The record a sink fills with copied plaintext at the end of its
/// output, what [`Records`] and [`QueueSink`] share. Dropped unsealed is
/// a bug (debug builds assert it): call `seal` before.
struct Filling {
    /// Where the record being filled starts (its header room) in `out`.
    open: Option<usize>,
    /// Plaintext bytes put so far.
    plain: usize,
    /// The link is over; nothing more is written.
    failed: bool,
}

impl Filling {
    fn new(ok: bool) -> Filling {
        Filling {
            open: None,
            plain: 0,
            failed: !ok,
        }
    }

    fn put(&mut self, link: &mut TlsLink, out: &mut Vec<u8>, mut bytes: &[u8]) {
        let head = link.header_room();
        while !bytes.is_empty() && !self.failed {
            let start = *self.open.get_or_insert_with(|| {
                out.resize(out.len() + head, 0);
                out.len() - head
            });
            let filled = out.len() - start - head;
            let n = bytes.len().min(MAX_PLAINTEXT - filled);
            out.extend_from_slice(&bytes[..n]);
            self.plain += n;
            bytes = &bytes[n..];
            if filled + n == MAX_PLAINTEXT {
                self.seal(link, out);
            }
        }
    }

    /// Seals the record being filled, if any.
    fn seal(&mut self, link: &mut TlsLink, out: &mut Vec<u8>) {
        let Some(start) = self.open.take() else {
            return;
        };
        let len = out.len() - start - link.header_room();
        out.resize(out.len() + link.tail_room(), 0);
        match link.seal_in_place(&mut out[start..], len) {
            Ok(n) => out.truncate(start + n),
            Err(_) => {
                out.truncate(start);
                self.failed = true;
            }
        }
    }
}

impl Drop for Filling {
    fn drop(&mut self) {
        debug_assert!(
            self.open.is_none() || std::thread::panicking(),
            "a record dropped unsealed: call finish()"
        );
    }
}

/// What [`H2Link::fill`](super::h2::H2Link::fill) and a response write,
/// on their way to a connection's [`SendQueue`]: over TLS, copied bytes
/// are sealed into records in the queue's own segments (as [`Records`]
/// does), and a held chunk's records are framed and sealed where the
/// disk read put their payload, then queued from there; in plaintext
/// (h2c) the same without records. Call [`QueueSink::finish`].
pub struct QueueSink<'a, M: BufMem> {
    /// None: plaintext.
    link: Option<&'a mut TlsLink>,
    q: &'a mut SendQueue,
    mem: &'a mut M,
    /// Chunk buffers let go of with nothing queued: free them now.
    freed: &'a mut Vec<u32>,
    f: Filling,
}

impl<'a, M: BufMem> QueueSink<'a, M> {
    /// A plaintext sink (h2c).
    pub fn plain(q: &'a mut SendQueue, mem: &'a mut M, freed: &'a mut Vec<u32>) -> Self {
        q.trim();
        QueueSink {
            link: None,
            q,
            mem,
            freed,
            f: Filling::new(true),
        }
    }

    /// Seals the record being filled, if any. `false`: the link is over
    /// (see [`Tls::seal`]); what was written may be lost.
    pub fn finish(mut self) -> bool {
        self.seal_open();
        self.q.trim();
        !self.f.failed
    }

    fn seal_open(&mut self) {
        if let Some(link) = self.link.as_deref_mut() {
            self.f.seal(link, self.q.tail());
        }
    }
}

impl<M: BufMem> Sink for QueueSink<'_, M> {
    fn put(&mut self, bytes: &[u8]) {
        match self.link.as_deref_mut() {
            Some(link) => self.f.put(link, self.q.tail(), bytes),
            None => {
                self.q.tail().extend_from_slice(bytes);
                self.f.plain += bytes.len();
            }
        }
    }

    fn plain_len(&self) -> usize {
        self.f.plain
    }

    fn put_held(&mut self, buf: u32, slot: &RecordSlot, prefix: &[u8]) {
        if self.f.failed {
            return;
        }
        self.seal_open();
        let mem = self.mem.mem_mut(buf);
        let at = slot.payload.start - prefix.len();
        mem[at..slot.payload.start].copy_from_slice(prefix);
        debug_assert_eq!(slot.plaintext_len, prefix.len() + slot.payload.len());
        let range = match self.link.as_deref_mut() {
            None => at..slot.payload.end,
            Some(link) => {
                let rec = slot.record.start..slot.record.end;
                match link.seal_in_place(&mut mem[rec], slot.plaintext_len) {
                    Ok(n) => slot.record.start..slot.record.start + n,
                    Err(_) => {
                        self.f.failed = true;
                        return;
                    }
                }
            }
        };
        self.f.plain += slot.plaintext_len;
        let queued = self.q.push_buf(buf, range, false);
        debug_assert!(queued);
    }

    fn put_copy(&mut self, buf: u32, range: Range<usize>) {
        // Through a scratch copy: the queue and the buffers are apart.
        let bytes = self.mem.mem(buf)[range].to_vec();
        self.put(&bytes);
    }

    fn release(&mut self, buf: u32) {
        self.seal_open();
        if !self.q.push_buf(buf, 0..0, true) {
            self.freed.push(buf);
        }
    }
}
