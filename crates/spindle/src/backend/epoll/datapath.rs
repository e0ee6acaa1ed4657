//! The data-path helpers the movers share (and the io_uring backend
//! borrows): `sendmsg` of the head, `sendfile(2)` of a file range, the
//! synchronous open beneath the root, and eventfds.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use spindle_core::{OpenError, OpenRequest};

use super::mover::{OpenResult, Progress, Tx};
use super::tls::Sock;
use super::MAX_SENDFILE;
use crate::backend::{truncated, version_holds};
use crate::fs::{self, Roots};

/// Why a transfer stopped early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// `EAGAIN`: the socket buffer is full.
    Full,
    /// The connection must be dropped.
    Fail,
}

impl From<Stop> for Progress {
    fn from(s: Stop) -> Progress {
        match s {
            Stop::Full => Progress::SocketFull,
            Stop::Fail => Progress::Fail,
        }
    }
}

pub(super) fn errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// One `sendmsg` of `a ++ b` (empty slices skipped), with `MSG_MORE` when
/// more bytes of the response will follow, so that the kernel does not
/// push a short segment now.
pub fn send_two(sock: RawFd, a: &[u8], b: &[u8], more: bool) -> Result<usize, Stop> {
    let mut iov = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; 2];
    let mut n = 0;
    for s in [a, b] {
        if !s.is_empty() {
            iov[n] = libc::iovec {
                iov_base: s.as_ptr() as *mut libc::c_void,
                iov_len: s.len(),
            };
            n += 1;
        }
    }
    debug_assert!(n > 0);
    // SAFETY: an all-zero msghdr is valid (no name, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = n as _;
    let flags = libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT | if more { libc::MSG_MORE } else { 0 };
    loop {
        // SAFETY: `msg` points at `n` iovecs describing live borrowed
        // slices; the kernel only reads them during the call.
        let rc = unsafe { libc::sendmsg(sock, &msg, flags) };
        if rc >= 0 {
            return Ok(rc as usize);
        }
        match errno() {
            libc::EINTR => continue,
            libc::EAGAIN => return Err(Stop::Full),
            _ => return Err(Stop::Fail),
        }
    }
}

/// Sends the unsent rest of the head; `more` keeps it corked (`MSG_MORE`)
/// so that it leaves with the first file bytes.
pub fn send_head(sock: &mut Sock, tx: &mut Tx, more: bool) -> Result<(), Stop> {
    while !tx.head_done() {
        let n = sock.send_two(tx.head_left(), &[], more)?;
        tx.head_sent += n;
    }
    Ok(())
}

/// `sendfile(2)` from `fd` at `*off` (advanced by the kernel).
pub fn sendfile(sock: RawFd, fd: RawFd, off: &mut u64, count: u64) -> Result<usize, i32> {
    let mut o = *off as libc::off_t;
    loop {
        // SAFETY: `o` is a live off_t the kernel reads and updates during
        // the call; no other memory is involved.
        let rc = unsafe { libc::sendfile(sock, fd, &mut o, count.min(MAX_SENDFILE) as usize) };
        if rc >= 0 {
            *off = o as u64;
            return Ok(rc as usize);
        }
        match errno() {
            libc::EINTR => continue,
            e => return Err(e),
        }
    }
}

/// Called by a mover before it hands the body's last bytes to the socket:
/// `Err(Progress::Changed)` when the file no longer has the version the
/// head described (size and modification time, [`fs::has_version`]), so
/// that a file changed in place ends in a short body, never in a mix of two
/// versions under the promised length. Bytes that `sendfile` queued
/// earlier are the page cache's own pages until the peer reads them; a
/// change after this check can still reach those (see docs/reliability.md).
pub fn last_bytes_ok(tx: &mut Tx) -> Result<(), Progress> {
    let Some(file) = tx.file.as_ref() else {
        return Ok(());
    };
    if version_holds(file.as_raw_fd(), tx.resp.version, &mut tx.verified) {
        Ok(())
    } else {
        Err(Progress::Changed)
    }
}

/// Sends the rest of the head (corked) and then up to `limit` bytes of the
/// file range of `tx` with `sendfile(2)` from `fd` at `tx.off`. `Ok` when
/// `limit` bytes (or the rest of the range) went out.
pub fn sendfile_range(sock: &mut Sock, tx: &mut Tx, fd: RawFd, limit: u64) -> Result<(), Progress> {
    debug_assert!(sock.zero_copy(), "sendfile over TLS");
    if tx.budget == 0 && tx.left > 0 {
        // --limit-rate: this turn's allowance is spent.
        return Err(Progress::Yield);
    }
    let limit = limit.min(tx.left).min(tx.budget);
    if limit == tx.left {
        last_bytes_ok(tx)?;
    }
    send_head(sock, tx, tx.left > 0)?;
    let end = tx.off + limit;
    while tx.off < end {
        let mut off = tx.off;
        match sendfile(sock.fd, fd, &mut off, end - tx.off) {
            Ok(0) => {
                truncated();
                return Err(Progress::Fail);
            }
            Ok(n) => {
                tx.off += n as u64;
                tx.left -= n as u64;
                tx.body_sent += n as u64;
                tx.budget = tx.budget.saturating_sub(n as u64);
            }
            Err(libc::EAGAIN) => return Err(Progress::SocketFull),
            Err(_) => return Err(Progress::Fail),
        }
    }
    Ok(())
}

/// Opens `req` beneath the root and inspects it, synchronously.
pub fn open_sync(roots: &Roots, req: &OpenRequest) -> OpenResult {
    let fd = roots
        .get(req.root)
        .open_beneath(&req.path)
        .map_err(open_error)?;
    let (meta, dev) = fs::inspect_opened(fd.as_raw_fd()).map_err(open_error)?;
    Ok((fd, meta, dev))
}

pub fn open_error(e: io::Error) -> OpenError {
    OpenError::from_errno(e.raw_os_error().unwrap_or(libc::EIO))
}

/// A fresh non-blocking eventfd.
pub fn new_eventfd() -> Result<OwnedFd, String> {
    // SAFETY: plain eventfd(2) call.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(format!("eventfd: {}", io::Error::last_os_error()));
    }
    // SAFETY: a fresh descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Reads (and so resets) an eventfd's counter.
pub fn drain_eventfd(fd: RawFd) -> u64 {
    let mut v: u64 = 0;
    // SAFETY: reads at most 8 bytes into a live u64.
    let rc = unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
    if rc == 8 {
        v
    } else {
        0
    }
}
