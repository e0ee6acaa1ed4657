//! HTTPS on the epoll loop (the posix-aio backend, io-uring's fallback):
//! a connection's TLS (`conn::tls`: rustls's handshake, then spindle's own
//! records) between the loop's non-blocking socket calls and the protocol
//! session.
//!
//! The TLS layer does no I/O. Ciphertext read by `recv` goes through
//! [`EpollTls::received`] into the session; a mover hands plaintext to
//! [`Sock::send_two`] as it would hand it to the socket, and it is
//! sealed at once into records in [`EpollTls::out`] and written as far as the
//! socket takes it. Records the socket would not take wait in `out`, at
//! most [`TLS_OUT_MAX`] bytes of them: past that a send reports the socket
//! full, so backpressure is the plain path's. A response counts as done
//! only once its last record is on the socket (`Worker::pump`), and an
//! `EPOLLOUT` writes what waits before anything else (`Worker::service`).
//! File bytes always come through the mover's buffers: `sendfile` cannot
//! encrypt (no kernel TLS here), so [`Sock::zero_copy`] is false.

use std::os::fd::RawFd;
use std::sync::Arc;

use crate::sys::{send_two, Stop};

/// Ciphertext one connection may hold unsent before sends report the
/// socket full (a socket buffer's worth).
pub const TLS_OUT_MAX: usize = 256 * 1024;
/// Plaintext taken per [`Sock::send_two`] call (sealed into 16 KiB
/// records).
const ENCRYPT_STEP: usize = 64 * 1024;

/// One connection's TLS session and the records not yet on the socket.
pub struct EpollTls {
    pub(super) tls: crate::conn::tls::Tls,
    /// Records to write, from `out_sent` on.
    out: Vec<u8>,
    out_sent: usize,
}

impl EpollTls {
    pub fn new(cfg: &Arc<rustls::ServerConfig>) -> Result<Box<EpollTls>, rustls::Error> {
        Ok(Box::new(EpollTls {
            tls: crate::conn::tls::Tls::new(cfg)?,
            out: Vec::new(),
            out_sent: 0,
        }))
    }

    /// The TLS session, and where its records go (behind those waiting).
    pub fn parts(&mut self) -> (&mut crate::conn::tls::Tls, &mut Vec<u8>) {
        (&mut self.tls, &mut self.out)
    }

    /// Records wait to be written.
    pub fn pending(&self) -> bool {
        self.out_sent < self.out.len()
    }

    /// Queues close_notify and writes it if the socket takes it now (a
    /// closing connection does not wait for it).
    pub fn close_notify(&mut self, fd: RawFd) {
        self.tls.close_notify(&mut self.out);
        let _ = self.flush(fd);
    }

    /// Writes as much of the waiting records as the socket takes:
    /// `Ok(true)` when nothing waits any more.
    pub fn flush(&mut self, fd: RawFd) -> Result<bool, Stop> {
        while self.out_sent < self.out.len() {
            match send_two(fd, &self.out[self.out_sent..], &[], false) {
                Ok(n) => self.out_sent += n,
                Err(Stop::Full) => return Ok(false),
                Err(Stop::Fail) => return Err(Stop::Fail),
            }
        }
        self.out.clear();
        self.out_sent = 0;
        Ok(true)
    }

    /// Encrypts up to [`ENCRYPT_STEP`] bytes of `a ++ b` and writes what
    /// the socket takes; the bytes taken count as sent (their records wait
    /// in `out`). `Err(Full)` while [`TLS_OUT_MAX`] bytes wait.
    fn send_two(&mut self, fd: RawFd, a: &[u8], b: &[u8]) -> Result<usize, Stop> {
        if !self.flush(fd)? && self.out.len() - self.out_sent >= TLS_OUT_MAX {
            return Err(Stop::Full);
        }
        let mut taken = 0;
        for s in [a, b] {
            let part = &s[..s.len().min(ENCRYPT_STEP - taken)];
            if !part.is_empty() {
                if !self.tls.seal(&mut self.out, part) {
                    return Err(Stop::Fail);
                }
                taken += part.len();
            }
        }
        self.flush(fd)?;
        Ok(taken)
    }
}

/// What [`EpollTls::fill_records`] did.
pub enum Filled {
    /// Records were made and all written: fill again.
    More,
    /// Nothing was framed: the link has nothing ready.
    Empty,
    /// Records wait for the socket (or it said it was full before).
    Full,
}

impl EpollTls {
    /// An HTTP/2 connection's frames, framed straight into records behind
    /// the waiting ones (once fewer than [`TLS_OUT_MAX`] bytes wait), then
    /// written as far as the socket takes them. `can_write`: the socket
    /// has not said it is full since its last `EPOLLOUT`.
    pub fn fill_records(
        &mut self,
        fd: RawFd,
        link: &mut crate::conn::h2::H2Link,
        sent: &mut Vec<(crate::conn::Ticket, usize)>,
        can_write: bool,
    ) -> Result<Filled, Stop> {
        if self.out.len() - self.out_sent >= TLS_OUT_MAX {
            return Ok(Filled::Full);
        }
        let before = self.out.len();
        let mut records = self.tls.records(&mut self.out);
        link.fill(&mut records, sent);
        if !records.finish() {
            return Err(Stop::Fail);
        }
        let made = self.out.len() > before;
        if !can_write {
            return Ok(if made { Filled::Full } else { Filled::Empty });
        }
        match self.flush(fd)? {
            false => Ok(Filled::Full),
            true if made => Ok(Filled::More),
            true => Ok(Filled::Empty),
        }
    }
}

/// The socket a mover writes a response to: plain, through the
/// connection's TLS session, or (an HTTP/2 stream) into its connection's
/// link, which frames it.
pub struct Sock<'a> {
    pub fd: RawFd,
    pub tls: Option<&'a mut EpollTls>,
    pub h2: Option<(&'a mut crate::conn::h2::H2Link, u32)>,
}

impl Sock<'_> {
    /// One send of `a ++ b`, as [`send_two`]; over TLS, encrypted first;
    /// on a stream, taken whole unless the stream's earlier bytes still
    /// wait to be framed (then `Full`, until `fill` reports them).
    pub fn send_two(&mut self, a: &[u8], b: &[u8], more: bool) -> Result<usize, Stop> {
        if let Some((link, id)) = self.h2.as_mut() {
            if link.stream_owes(*id) {
                return Err(Stop::Full);
            }
            for part in [a, b] {
                if !part.is_empty() && link.write(*id, part) == crate::conn::h2::Wrote::Gone {
                    return Err(Stop::Fail);
                }
            }
            return Ok(a.len() + b.len());
        }
        match self.tls.as_deref_mut() {
            Some(t) => t.send_two(self.fd, a, b),
            None => send_two(self.fd, a, b, more),
        }
    }

    /// Whether file bytes may go by `sendfile` from the page cache.
    pub fn zero_copy(&self) -> bool {
        self.tls.is_none() && self.h2.is_none()
    }
}
