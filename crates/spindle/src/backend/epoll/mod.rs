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
//! The module is laid out as follows: `mover` is the interface a mover
//! implements ([`Mover`], [`Tx`], [`Ticket`]); `datapath` holds the
//! send/sendfile/open/eventfd helpers the movers share; `event_loop` runs
//! `epoll_wait` and dispatches events; `conn` is a connection's life
//! around its responses (accept, receive, lingering close, timeouts,
//! drain); `respond` takes a request from the session to the socket
//! (open, transmit, the mover's completions).

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::time::Instant;

use spindle_core::{OpenRequest, Session};

use super::WorkerContext;
use crate::filecache::OpenFileCache;

mod conn;
mod datapath;
mod event_loop;
mod mover;
mod respond;
mod tls;

pub use datapath::{
    drain_eventfd, last_bytes_ok, new_eventfd, open_error, open_sync, send_head, send_two,
    sendfile, sendfile_range, Stop,
};
pub use mover::{Completion, Mover, OpenResult, Opened, Progress, Ticket, Tx};
pub use tls::{EpollTls, Sock};

/// Events taken from the kernel per `epoll_wait`.
pub const MAX_EVENTS: usize = 256;
/// Per-worker receive buffer; one `recv` reads at most this much.
pub const RECV_BUF_SIZE: usize = 16 * 1024;
/// Input one connection may consume per turn before the others get theirs.
pub const READ_TURN_BYTES: usize = 64 * 1024;
/// Connections accepted per listener per turn.
pub const ACCEPT_BATCH: usize = 64;
/// Largest single `sendfile(2)` call.
pub const MAX_SENDFILE: u64 = 1 << 30;

const TOKEN_SHUTDOWN: u64 = u64::MAX;
const TOKEN_MOVER: u64 = u64::MAX - 1;
const TOKEN_LISTED: u64 = u64::MAX - 2;
const TOKEN_LISTENER: u64 = 1 << 63;
const MAX_GEN: u32 = (1 << 31) - 1;

// ----- the worker -------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for (more of) a request.
    Reading,
    /// The mover is opening the requested path.
    Opening,
    /// Transmitting a response.
    Sending,
    /// Write side shut; reading and discarding until EOF or timeout.
    Lingering,
}

struct Conn<S> {
    fd: OwnedFd,
    gen: u32,
    session: Session,
    /// Its count under `--max-connections-per-ip`, given back on drop.
    _per_ip: Option<crate::perip::IpSlot>,
    /// When its current request was parsed (the log's request time).
    req_at: Instant,
    phase: Phase,
    can_read: bool,
    can_write: bool,
    peer_eof: bool,
    /// In the ready list.
    queued: bool,
    deadline: Instant,
    /// The path being opened, while `Opening`.
    open: Option<OpenRequest>,
    tx: Option<Tx>,
    st: S,
    /// The response waits for the mover (a read or a buffer).
    waiting: bool,
    lingered: usize,
    /// HTTPS: the connection's TLS session (`tls.rs`).
    tls: Option<Box<EpollTls>>,
    /// Waiting for a request with none under way: counted in the idle
    /// gauge (`metrics.rs`) while set.
    idle: bool,
    /// Waiting (in `Phase::Opening`) for a directory listing from the
    /// helpers (`crate::lister`).
    listing: bool,
}

struct Worker<M: Mover> {
    ctx: WorkerContext,
    mover: M,
    epfd: OwnedFd,
    conns: Vec<Option<Conn<M::State>>>,
    free: Vec<u32>,
    live: usize,
    max_conns: usize,
    next_gen: u32,
    listeners: Vec<OwnedFd>,
    accept_ready: Vec<bool>,
    accept_backoff: crate::backend::AcceptBackoff,
    ready: VecDeque<Ticket>,
    done: Vec<(Ticket, Completion<M::Chunk>)>,
    files: OpenFileCache,
    /// Directory listings (`--autoindex`): jobs out and the cache; the
    /// mailbox's eventfd is in the epoll set (`TOKEN_LISTED`).
    lists: Option<crate::lister::Lists<Ticket>>,
    rbuf: Box<[u8]>,
    now: Instant,
    next_tick: Instant,
    /// `--limit-rate`, and the responses waiting for their allowance,
    /// resumed on the next tick.
    rate: Option<crate::backend::RateLimit>,
    throttled: Vec<Ticket>,
    draining: bool,
    /// The accept gate is closed (a handover starting).
    accept_paused: bool,
    drain_deadline: Option<Instant>,
    /// No connection can expire before this: the tick skips the timeout
    /// scan until then (see on_tick).
    next_scan: Instant,
    /// The TLS configuration new HTTPS connections get, and its generation
    /// (a SIGHUP reload makes a new one; see `crate::tls::Shared`).
    tls_cfg: Option<(u64, std::sync::Arc<rustls::ServerConfig>)>,
}

/// Runs one epoll worker with mover `M` until shutdown.
pub fn run<M: Mover>(ctx: WorkerContext) -> Result<(), String> {
    let mover = M::new(&ctx)?;
    let mut w = Worker::new(ctx, mover)?;
    let _ = w.ctx.ready.send(Ok(()));
    w.event_loop()
}
