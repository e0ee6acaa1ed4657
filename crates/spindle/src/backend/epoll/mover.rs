//! The interface between the loop and a mover: the [`Mover`] trait, the
//! response in transmission ([`Tx`]) it drains, and the [`Ticket`] that
//! names a connection across asynchronous operations.

use std::os::fd::{OwnedFd, RawFd};
use std::rc::Rc;

use spindle_core::{OpenRequest, Response};

use super::tls::Sock;
pub use crate::conn::OpenResult;
use crate::conn::{Ticket, WorkerContext};

/// One response in transmission: the head (status line and header fields,
/// or a whole error page), then `left` bytes of `file` from `off`.
#[derive(Debug)]
pub struct Tx {
    pub resp: Response,
    pub head_sent: usize,
    /// The opened file (shared with the open-file cache).
    pub file: Option<Rc<OwnedFd>>,
    /// Next file offset not yet sent nor held in a mover's buffer.
    pub off: u64,
    /// File bytes not yet sent nor held in a mover's buffer.
    pub left: u64,
    /// File bytes handed to the socket.
    pub body_sent: u64,
    /// The version the file must still have when the body's last bytes
    /// go ([`super::last_bytes_ok`]); `None` once it was found to.
    pub unchecked: Option<spindle_core::response::Version>,
    /// When the response started, and the `--limit-rate` it started
    /// under (a reload applies to the next responses).
    pub started: std::time::Instant,
    pub rate: Option<crate::conn::policy::RateLimit>,
    /// What it waits for before the loop pumps it again.
    pub wait: Wait,
    /// Body bytes this turn may still send (`--limit-rate`; else
    /// unbounded): each mover sends no more, then yields.
    pub budget: u64,
    /// Where the body came from, for the JSON access log (a mover sets
    /// `read` or `direct` when it reads the disk).
    pub outcome: &'static str,
}

/// Where a mover's read of a response's next chunk stands.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum ReadState {
    #[default]
    Idle,
    /// In flight: its completion goes on.
    InFlight,
    /// The file ended before the length the head promised.
    Truncated,
    /// The read failed with this errno (logged where it is answered,
    /// `epoll::respond`).
    Failed(i32),
}

impl ReadState {
    /// What the response must stop with after the last read, if anything.
    pub fn stop(self) -> Option<Progress> {
        match self {
            ReadState::Failed(e) => Some(Progress::ReadFailed(e)),
            ReadState::Truncated => Some(Progress::Fail),
            ReadState::Idle | ReadState::InFlight => None,
        }
    }

    pub fn in_flight(self) -> bool {
        self == ReadState::InFlight
    }
}

/// What a response in transmission waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    Nothing,
    /// The mover: a read, or a buffer ([`Progress::Waiting`]).
    Mover,
    /// `--limit-rate`: in the worker's throttled list for the next tick.
    Tick,
}

impl Tx {
    /// Stops waiting for `what`: `true` if it was.
    pub fn wake(&mut self, what: Wait) -> bool {
        if self.wait != what {
            return false;
        }
        self.wait = Wait::Nothing;
        true
    }

    pub fn head_left(&self) -> &[u8] {
        &self.resp.front[self.head_sent..]
    }

    pub fn head_done(&self) -> bool {
        self.head_sent == self.resp.front.len()
    }

    pub(super) fn progress(&self) -> u64 {
        self.head_sent as u64 + self.body_sent
    }

    /// Accounts `n` bytes written from (rest of head ++ data).
    pub fn wrote(&mut self, mut n: usize) -> usize {
        let h = (self.resp.front.len() - self.head_sent).min(n);
        self.head_sent += h;
        n -= h;
        self.body_sent += n as u64;
        n
    }
}

/// What a mover's [`Mover::pump`] achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// The whole response has been handed to the socket.
    Done,
    /// The socket is full; pump again once it is writable.
    SocketFull,
    /// Waiting for the mover: a disk read in flight, or a buffer. The
    /// mover reports it through [`Mover::reap`] or [`Mover::next_waiter`].
    Waiting,
    /// Used up this turn; pump again after the other connections.
    Yield,
    /// The connection must be dropped (peer gone, file shrank).
    Fail,
    /// A disk read failed with this errno: the loop answers 500 (or 503)
    /// in the response's place if no byte of it is out yet, and keeps the
    /// connection; otherwise it drops the connection.
    ReadFailed(i32),
    /// The file changed (size or modification time) before the body's
    /// last bytes went out: the loop answers 503 in the response's place
    /// if none of it is out yet, else drops the connection.
    Changed,
}

/// The answer to [`Mover::open`].
pub enum Opened {
    Now(OpenResult),
    /// Reported later through [`Mover::reap`].
    Later,
}

/// A finished asynchronous operation of a mover.
pub enum Completion<C> {
    Opened(OpenResult),
    Chunk(C),
}

/// How file bytes get to the socket: the only part in which the epoll
/// backends differ.
pub trait Mover: Sized {
    /// Per-response state (buffers held, reads in flight).
    type State: Default;
    /// A finished disk read.
    type Chunk;

    fn new(ctx: &WorkerContext) -> Result<Self, String>;

    /// The access log's `outcome` of a body this mover did not read
    /// itself.
    const OUTCOME: &'static str = "cache";
    /// An fd that becomes readable when [`Mover::reap`] has work.
    fn completion_fd(&self) -> Option<RawFd> {
        None
    }
    /// Opens a path beneath the root, now or later.
    fn open(&mut self, who: Ticket, req: &OpenRequest) -> Opened;

    /// The document roots after a reload (`reload.rs`).
    fn set_roots(&mut self, roots: std::sync::Arc<crate::fs::Roots>);
    /// Moves bytes of `tx` to the non-blocking socket `sock`.
    fn pump(&mut self, who: Ticket, sock: &mut Sock, tx: &mut Tx, st: &mut Self::State)
        -> Progress;
    /// Collects finished operations.
    fn reap(&mut self, _out: &mut Vec<(Ticket, Completion<Self::Chunk>)>) {}
    /// Applies a finished read to the response that asked for it.
    fn chunk_done(&mut self, tx: &mut Tx, st: &mut Self::State, chunk: Self::Chunk);
    /// A finished read whose response is gone: free what it holds.
    fn discard(&mut self, chunk: Self::Chunk);
    /// The response is over (sent, or its connection is closing): free its
    /// buffers. A read still in flight is freed when it completes.
    fn release(&mut self, st: &mut Self::State);
    /// A response that waited for a buffer which is now free.
    fn next_waiter(&mut self) -> Option<Ticket> {
        None
    }
    /// Operations in flight.
    fn in_flight(&self) -> usize {
        0
    }
}
