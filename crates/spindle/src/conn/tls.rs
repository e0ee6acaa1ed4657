//! A connection's TLS, for both loops: the record layer of `tlsrec`
//! (rustls's handshake, then records of spindle's own), the ciphertext it
//! has not read yet, and the sinks that frame plaintext into records.
//!
//! No I/O. A loop appends what it received with [`Tls::receive`] and sends
//! what the calls append to its output buffer, in the order they were
//! appended (`tlsrec`'s invariant: records go out in the order sealed).
//! A body byte is copied once, by [`Records`], from where the loop holds
//! it into the record it is then encrypted in, in place; the record goes
//! to the socket from there.

use std::sync::Arc;

use crate::tlsrec::{Progress, TlsLink, MAX_PLAINTEXT};

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
            open: None,
            plain: 0,
            failed: !ok,
        }
    }

    /// Appends close_notify to `out` (nothing during the handshake).
    pub fn close_notify(&mut self, out: &mut Vec<u8>) {
        self.link.close_notify(out);
    }
}

/// Where framed plaintext goes: a plain connection's send buffer, or
/// records ([`Records`]).
pub trait Sink {
    /// Appends `bytes`.
    fn put(&mut self, bytes: &[u8]);
    /// Plaintext bytes put so far.
    fn plain_len(&self) -> usize;
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
    /// The record being filled: where its header room starts in `out`.
    open: Option<usize>,
    plain: usize,
    failed: bool,
}

impl Records<'_> {
    /// Seals the record being filled, if any. `false`: the link is over
    /// (see [`Tls::seal`]); what was written may be lost.
    pub fn finish(mut self) -> bool {
        self.seal_open();
        !self.failed
    }

    fn seal_open(&mut self) {
        let Some(start) = self.open.take() else {
            return;
        };
        let len = self.out.len() - start - self.link.header_room();
        self.out.resize(self.out.len() + self.link.tail_room(), 0);
        match self.link.seal_in_place(&mut self.out[start..], len) {
            Ok(n) => self.out.truncate(start + n),
            Err(_) => {
                self.out.truncate(start);
                self.failed = true;
            }
        }
    }
}

impl Sink for Records<'_> {
    fn put(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() && !self.failed {
            let start = match self.open {
                Some(s) => s,
                None => {
                    let s = self.out.len();
                    self.out.resize(s + self.link.header_room(), 0);
                    self.open = Some(s);
                    s
                }
            };
            let filled = self.out.len() - start - self.link.header_room();
            let n = bytes.len().min(MAX_PLAINTEXT - filled);
            self.out.extend_from_slice(&bytes[..n]);
            self.plain += n;
            bytes = &bytes[n..];
            if filled + n == MAX_PLAINTEXT {
                self.seal_open();
            }
        }
    }

    fn plain_len(&self) -> usize {
        self.plain
    }
}

impl Drop for Records<'_> {
    fn drop(&mut self) {
        debug_assert!(
            self.open.is_none() || std::thread::panicking(),
            "records dropped unsealed: call finish()"
        );
    }
}
