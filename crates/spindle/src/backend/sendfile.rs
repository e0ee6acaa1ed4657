//! `linux-sendfile`: the classic baseline, lighttpd 1.4's design.
//!
//! The shared epoll loop ([`super::epoll`]) with the simplest possible
//! mover: paths are opened synchronously in the loop
//! (`openat2(RESOLVE_BENEATH)` and `fstat`), and file bytes go from the
//! page cache to the socket with `sendfile(2)`, called in the loop, one
//! `--chunk-size` per connection per turn. The head is sent first with
//! `MSG_MORE`, so the kernel holds it and it leaves in the same segment as
//! the first file bytes (sendfile pushes the last page of each call).
//!
//! Kernel behaviour relied on: `sendfile` to a non-blocking socket returns
//! `EAGAIN` when the socket buffer is full, but it *blocks* reading any
//! page that is not in the page cache, and the whole event loop waits with
//! it. That blocking is what the seed documents measured on a seek-bound
//! disk, and is exactly what this backend exists to show. `sendfile`
//! returning 0 before the promised length means the file shrank: the
//! connection is dropped, as nothing correct can follow.

use std::os::fd::AsRawFd;
use std::sync::Arc;

use spindle_core::OpenRequest;

use super::epoll::{self, Mover, Opened, Progress, Sock, Tx};
use super::WorkerContext;
use crate::conn::Ticket;
use crate::fs::Roots;

pub struct Sendfile {
    root: Arc<Roots>,
    /// File bytes one connection may send per turn.
    turn: u64,
}

impl Mover for Sendfile {
    type State = ();
    type Chunk = std::convert::Infallible;
    // A blocking sendfile cannot tell a page-cache hit from a disk read.
    const OUTCOME: &'static str = "sendfile";

    fn new(ctx: &WorkerContext) -> Result<Self, String> {
        Ok(Sendfile {
            root: ctx.root.clone(),
            turn: ctx.cfg.chunk_size,
        })
    }

    fn open(&mut self, _who: Ticket, req: &OpenRequest) -> Opened {
        Opened::Now(epoll::open_sync(&self.root, req))
    }

    fn set_roots(&mut self, roots: Arc<Roots>) {
        self.root = roots;
    }

    fn pump(&mut self, _who: Ticket, sock: &mut Sock, tx: &mut Tx, _st: &mut ()) -> Progress {
        let file = tx.file.as_ref().map_or(-1, |f| f.as_raw_fd());
        match epoll::sendfile_range(sock, tx, file, self.turn) {
            Ok(()) if tx.left == 0 => Progress::Done,
            Ok(()) => Progress::Yield,
            Err(s) => s,
        }
    }

    fn chunk_done(&mut self, _tx: &mut Tx, _st: &mut (), chunk: Self::Chunk) {
        match chunk {}
    }

    fn discard(&mut self, chunk: Self::Chunk) {
        match chunk {}
    }

    fn release(&mut self, _st: &mut ()) {}
}

/// Nothing to check beyond epoll itself.
pub fn probe() -> Result<(), String> {
    Ok(())
}
