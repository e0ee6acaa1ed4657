//! The epoll event loop shared by the `linux-sendfile`, `posix-aio` and
//! `linux-aio-sendfile` backends.
//!
//! This module owns everything but the file data path: accepting, reading
//! requests into the [`Session`], opening (through the mover, which may do
//! it asynchronously), timeouts, lingering close, the access log and the
//! graceful drain. How file bytes reach the socket is the job of a
//! [`Mover`], one small module per backend, in the spirit of lighttpd 1.4's
//! `network_write.c`: each response is a queue of head bytes followed by a
//! range of an open file ([`Tx`]), and the mover drains it. Neither this
//! loop nor any mover knows HTTP; status, headers and ranges come from the
//! core, exactly as in the io_uring backend, so every backend puts the same
//! bytes on the wire.
//!
//! Readiness is edge-triggered: every connection is registered once, for
//! `EPOLLIN | EPOLLOUT | EPOLLRDHUP`, and never modified again. The loop
//! keeps a `can_read`/`can_write` flag per connection, set by an event and
//! cleared by `EAGAIN`. That saves an `epoll_ctl` on every change of
//! direction (reading a request, then writing a response, then reading
//! again), and it lets the loop stop reading for backpressure (a pipelining
//! client, a full session buffer) or stop writing for fairness without
//! losing the readiness it has not consumed: the flag stays set and the
//! work resumes from the ready list. Each connection gets a bounded turn
//! (one request, one chunk of file, [`READ_TURN_BYTES`] of input) before
//! the loop moves on, so one fast client cannot starve the others.
//!
//! What a connection does above its bytes (phases, deadlines, caches,
//! listings, finishing, the drain) is the connection layer's
//! ([`crate::conn`]), shared with the io-uring loop. Here: `mover` is the
//! interface a mover implements ([`Mover`], [`Tx`]); `datapath` holds the
//! send/sendfile/open helpers the movers share; `event_loop` runs
//! `epoll_wait` and dispatches events; `conn` accepts, receives, lingers
//! and closes; `respond` carries a request from the session to the socket
//! (open, transmit, the mover's completions).

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::time::Instant;

use spindle_core::OpenRequest;

use crate::conn::{Life, Serving, Slots, Ticket, WorkerContext};

mod conn;
mod datapath;
mod event_loop;
mod h2;
mod mover;
mod respond;
mod tls;

pub use datapath::{between_chunks, last_bytes_ok, open_sync, send_head, sendfile_range};
pub use mover::{Completion, Mover, Opened, Progress, ReadState, Tx, Wait};
pub use tls::{EpollTls, Sock};

/// Events taken from the kernel per `epoll_wait`.
pub const MAX_EVENTS: usize = 256;
/// Per-worker receive buffer; one `recv` reads at most this much.
pub const RECV_BUF_SIZE: usize = 16 * 1024;
/// Input one connection may consume per turn before the others get theirs.
pub const READ_TURN_BYTES: usize = 64 * 1024;
/// Connections accepted per listener per turn.
pub const ACCEPT_BATCH: usize = 64;

const TOKEN_SHUTDOWN: u64 = u64::MAX;
const TOKEN_MOVER: u64 = u64::MAX - 1;
const TOKEN_HELPERS: u64 = u64::MAX - 2;
/// Listener tokens have the top bit, which a connection's ticket never
/// has (generations stay below 2^31: `conn::Slots`).
const TOKEN_LISTENER: u64 = 1 << 63;

// ----- the worker -------------------------------------------------------------

/// A connection as this loop keeps it: its life (`conn::Life`) and the
/// socket, readiness and response in transmission.
struct Conn<S> {
    fd: OwnedFd,
    life: Life,
    can_read: bool,
    can_write: bool,
    /// In the ready list.
    queued: bool,
    /// The path being opened, while `Opening`.
    open: Option<OpenRequest>,
    tx: Option<Tx>,
    st: S,
    /// HTTPS: the connection's TLS session (`tls.rs`).
    tls: Option<Box<EpollTls>>,
    /// The protocol on the socket, or the HTTP/2 stream this slot serves
    /// (`h2.rs`).
    proto: h2::Proto,
}

impl<S: Default> Conn<S> {
    /// A connection (or stream slot) about to be served. The first event
    /// (EPOLL_CTL_ADD reports present readiness) says whether a request is
    /// already waiting; until then it may write, and a stream slot's
    /// writes go to its connection's link.
    fn new(fd: OwnedFd, life: Life, tls: Option<Box<EpollTls>>, proto: h2::Proto) -> Conn<S> {
        Conn {
            fd,
            life,
            can_read: false,
            can_write: true,
            queued: false,
            open: None,
            tx: None,
            st: S::default(),
            tls,
            proto,
        }
    }
}

struct Worker<M: Mover> {
    serve: Serving,
    mover: M,
    epfd: OwnedFd,
    conns: Slots<Conn<M::State>>,
    listeners: Vec<OwnedFd>,
    accept_ready: Vec<bool>,
    accept_backoff: crate::conn::policy::AcceptBackoff,
    /// The accept gate is closed (a handover starting).
    accept_paused: bool,
    /// Connections with work left, each served a bounded turn.
    ready: VecDeque<Ticket>,
    done: Vec<(Ticket, Completion<M::Chunk>)>,
    rbuf: Box<[u8]>,
    /// Slots that serve an HTTP/2 stream, not a connection.
    streams: usize,
    now: Instant,
    next_tick: Instant,
}

/// Runs one epoll worker with mover `M` until shutdown.
pub fn run<M: Mover>(ctx: WorkerContext) -> Result<(), String> {
    let mover = M::new(&ctx)?;
    let mut w = Worker::new(ctx, mover)?;
    let _ = w.serve.ctx.ready.send(Ok(()));
    w.event_loop()
}
