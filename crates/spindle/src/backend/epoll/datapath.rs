//! The data-path helpers the movers share (and the io_uring backend
//! borrows): `sendmsg` of the head, `sendfile(2)` of a file range, the
//! synchronous open beneath the root, and eventfds.

use std::os::fd::{AsRawFd, RawFd};

use spindle_core::OpenRequest;

use super::mover::{OpenResult, Progress, Tx};
use super::tls::Sock;
use crate::conn::policy::{truncated, version_holds};
use crate::fs::{self, Roots};
use crate::sys::{sendfile, Stop};

impl From<Stop> for Progress {
    fn from(s: Stop) -> Progress {
        match s {
            Stop::Full => Progress::SocketFull,
            Stop::Fail => Progress::Fail,
        }
    }
}

/// What a mover that reads chunks checks between them: with no file bytes
/// left, the rest of the head goes out and the response is done; else a
/// read in flight is waited for, or a used-up turn yields.
pub fn between_chunks(
    sock: &mut Sock,
    tx: &mut Tx,
    reading: bool,
    turn_done: bool,
) -> Option<Progress> {
    if tx.left == 0 {
        return Some(match send_head(sock, tx, false) {
            Ok(()) => Progress::Done,
            Err(s) => s.into(),
        });
    }
    if reading {
        return Some(Progress::Waiting);
    }
    turn_done.then_some(Progress::Yield)
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
    if version_holds(file.as_raw_fd(), &mut tx.unchecked) {
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
        .map_err(fs::open_error)?;
    let (meta, dev) = fs::inspect_opened(fd.as_raw_fd()).map_err(fs::open_error)?;
    Ok((fd, meta, dev))
}
