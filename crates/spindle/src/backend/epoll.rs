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

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::rc::Rc;
use std::time::Instant;

use spindle_core::accesslog;
use spindle_core::response::{FileKind, FileMeta};
use spindle_core::{OpenError, OpenRequest, Response, Session, Step};

use super::{
    inline_body, min_timeout, truncated, unix_now, WorkerContext, ACCEPT_BACKOFF, LINGER_MAX_BYTES,
    LINGER_TIMEOUT, TICK,
};
use crate::filecache::OpenFileCache;
use crate::fs::{self, Root};
use crate::net;

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
const TOKEN_LISTENER: u64 = 1 << 63;
const MAX_GEN: u32 = (1 << 31) - 1;

/// Names one connection for as long as it lives: a slot is reused only
/// with a new generation, so a completion for a closed connection is
/// recognised and dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    pub slot: u32,
    pub gen: u32,
}

impl Ticket {
    fn token(self) -> u64 {
        (self.gen as u64) << 32 | self.slot as u64
    }
}

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
}

impl Tx {
    pub fn head_left(&self) -> &[u8] {
        &self.resp.head[self.head_sent..]
    }

    pub fn head_done(&self) -> bool {
        self.head_sent == self.resp.head.len()
    }

    fn progress(&self) -> u64 {
        self.head_sent as u64 + self.body_sent
    }

    /// Accounts `n` bytes written from (rest of head ++ data).
    pub fn wrote(&mut self, mut n: usize) -> usize {
        let h = (self.resp.head.len() - self.head_sent).min(n);
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
    /// The connection must be dropped (peer gone, file shrank, I/O error).
    Fail,
}

/// The answer to [`Mover::open`].
pub enum Opened {
    Now(OpenResult),
    /// Reported later through [`Mover::reap`].
    Later,
}

/// An opened path: its descriptor, its metadata and the device it lives on.
pub type OpenResult = Result<(OwnedFd, FileMeta, u64), OpenError>;

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
    /// An fd that becomes readable when [`Mover::reap`] has work.
    fn completion_fd(&self) -> Option<RawFd> {
        None
    }
    /// Opens a path beneath the root, now or later.
    fn open(&mut self, who: Ticket, req: &OpenRequest) -> Opened;
    /// Moves bytes of `tx` to the non-blocking socket `sock`.
    fn pump(&mut self, who: Ticket, sock: RawFd, tx: &mut Tx, st: &mut Self::State) -> Progress;
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

// ----- shared data-path helpers ---------------------------------------------

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

fn errno() -> i32 {
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
pub fn send_head(sock: RawFd, tx: &mut Tx, more: bool) -> Result<(), Stop> {
    while !tx.head_done() {
        let n = send_two(sock, tx.head_left(), &[], more)?;
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

/// Sends the rest of the head (corked) and then up to `limit` bytes of the
/// file range of `tx` with `sendfile(2)` from `fd` at `tx.off`. `Ok` when
/// `limit` bytes (or the rest of the range) went out.
pub fn sendfile_range(sock: RawFd, tx: &mut Tx, fd: RawFd, limit: u64) -> Result<(), Stop> {
    let limit = limit.min(tx.left);
    send_head(sock, tx, tx.left > 0)?;
    let end = tx.off + limit;
    while tx.off < end {
        let mut off = tx.off;
        match sendfile(sock, fd, &mut off, end - tx.off) {
            Ok(0) => {
                truncated();
                return Err(Stop::Fail);
            }
            Ok(n) => {
                tx.off += n as u64;
                tx.left -= n as u64;
                tx.body_sent += n as u64;
            }
            Err(libc::EAGAIN) => return Err(Stop::Full),
            Err(_) => return Err(Stop::Fail),
        }
    }
    Ok(())
}

/// Opens `req` beneath the root and inspects it, synchronously.
pub fn open_sync(root: &Root, req: &OpenRequest) -> OpenResult {
    let fd = root.open_beneath(&req.path).map_err(open_error)?;
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
    accept_resume: Option<Instant>,
    warned_emfile: bool,
    ready: VecDeque<Ticket>,
    done: Vec<(Ticket, Completion<M::Chunk>)>,
    files: OpenFileCache,
    rbuf: Box<[u8]>,
    now: Instant,
    next_tick: Instant,
    draining: bool,
    drain_deadline: Option<Instant>,
    /// No connection can expire before this: the tick skips the timeout
    /// scan until then (see on_tick).
    next_scan: Instant,
}

/// Runs one epoll worker with mover `M` until shutdown.
pub fn run<M: Mover>(ctx: WorkerContext) -> Result<(), String> {
    let mover = M::new(&ctx)?;
    let mut w = Worker::new(ctx, mover)?;
    let _ = w.ctx.ready.send(Ok(()));
    w.event_loop()
}

fn epoll_add(epfd: RawFd, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
    let mut ev = libc::epoll_event { events, u64: token };
    // SAFETY: `ev` is a live epoll_event the kernel copies during the call.
    if unsafe { libc::epoll_ctl(epfd, libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl<M: Mover> Worker<M> {
    fn new(mut ctx: WorkerContext, mover: M) -> Result<Worker<M>, String> {
        // sendfile(2) has no MSG_NOSIGNAL: a peer that resets must give
        // EPIPE, not kill the process. (Rust binaries ignore SIGPIPE
        // already; this keeps it true when the crate is used as a library.)
        // SAFETY: installs SIG_IGN, no handler code involved.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
        // SAFETY: plain epoll_create1(2).
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            return Err(format!("epoll_create1: {}", io::Error::last_os_error()));
        }
        // SAFETY: a fresh descriptor nothing else owns.
        let epfd = unsafe { OwnedFd::from_raw_fd(ep) };
        let listeners = std::mem::take(&mut ctx.listeners);
        for (i, l) in listeners.iter().enumerate() {
            net::set_nonblocking(l.as_raw_fd(), true).map_err(|e| format!("listener: {e}"))?;
            epoll_add(
                ep,
                l.as_raw_fd(),
                (libc::EPOLLIN | libc::EPOLLET) as u32,
                TOKEN_LISTENER | i as u64,
            )
            .map_err(|e| format!("epoll_ctl: {e}"))?;
        }
        epoll_add(
            ep,
            ctx.shutdown.eventfd,
            libc::EPOLLIN as u32,
            TOKEN_SHUTDOWN,
        )
        .map_err(|e| format!("epoll_ctl: {e}"))?;
        if let Some(fd) = mover.completion_fd() {
            epoll_add(ep, fd, libc::EPOLLIN as u32, TOKEN_MOVER)
                .map_err(|e| format!("epoll_ctl: {e}"))?;
        }
        let now = Instant::now();
        let files = OpenFileCache::new(
            ctx.cfg.open_file_cache,
            ctx.cfg.open_file_cache_valid,
            ctx.cfg.small_file_cache as usize,
        );
        Ok(Worker {
            max_conns: ctx.cfg.max_connections_per_worker(),
            accept_ready: vec![true; listeners.len()],
            listeners,
            ctx,
            mover,
            epfd,
            conns: Vec::new(),
            free: Vec::new(),
            live: 0,
            next_gen: 1,
            accept_resume: None,
            warned_emfile: false,
            ready: VecDeque::new(),
            done: Vec::new(),
            files,
            rbuf: vec![0u8; RECV_BUF_SIZE].into_boxed_slice(),
            now,
            next_tick: now + TICK,
            draining: false,
            drain_deadline: None,
            next_scan: Instant::now(),
        })
    }

    fn event_loop(&mut self) -> Result<(), String> {
        let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; MAX_EVENTS];
        loop {
            if self.draining && self.live == 0 {
                // Reads still in flight belong to nobody now; wait for them
                // (their buffers are the mover's) until the drain deadline.
                let late = self.drain_deadline.is_some_and(|d| self.now >= d);
                if self.mover.in_flight() == 0 || late {
                    return Ok(());
                }
            }
            let timeout = if !self.ready.is_empty() || self.can_accept_more() {
                0
            } else {
                let until = self.next_tick.saturating_duration_since(Instant::now());
                until.as_millis().min(TICK.as_millis()) as i32 + 1
            };
            // SAFETY: `events` is a live buffer of MAX_EVENTS entries the
            // kernel fills during the call.
            let n = unsafe {
                libc::epoll_wait(
                    self.epfd.as_raw_fd(),
                    events.as_mut_ptr(),
                    MAX_EVENTS as i32,
                    timeout,
                )
            };
            self.now = Instant::now();
            self.files.batch();
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EINTR) {
                    return Err(format!("epoll_wait failed: {e}"));
                }
            }
            for ev in &events[..n.max(0) as usize] {
                let (token, bits) = (ev.u64, ev.events);
                self.on_event(token, bits);
            }
            // One turn for each connection that still had work.
            for _ in 0..self.ready.len() {
                let Some(t) = self.ready.pop_front() else {
                    break;
                };
                if let Some(c) = self.live_conn(t) {
                    c.queued = false;
                    self.service(t);
                }
            }
            if self.now >= self.next_tick {
                self.next_tick = self.now + TICK;
                self.on_tick();
            }
            self.accept_all();
            self.wake_waiters();
        }
    }

    fn on_event(&mut self, token: u64, bits: u32) {
        match token {
            TOKEN_SHUTDOWN => self.on_wake(),
            TOKEN_MOVER => self.on_completions(),
            t if t & TOKEN_LISTENER != 0 => {
                let i = (t & 0xFFFF_FFFF) as usize;
                self.accept_ready[i] = true;
                self.accept_some(i);
            }
            t => {
                let who = Ticket {
                    slot: t as u32,
                    gen: (t >> 32) as u32,
                };
                let Some(c) = self.live_conn(who) else { return };
                let err = (libc::EPOLLHUP | libc::EPOLLERR) as u32;
                if bits & (libc::EPOLLIN as u32 | libc::EPOLLRDHUP as u32 | err) != 0 {
                    c.can_read = true;
                }
                if bits & (libc::EPOLLOUT as u32 | err) != 0 {
                    c.can_write = true;
                }
                self.service(who);
            }
        }
    }

    fn live_conn(&mut self, who: Ticket) -> Option<&mut Conn<M::State>> {
        match self.conns.get_mut(who.slot as usize) {
            Some(Some(c)) if c.gen == who.gen => Some(c),
            _ => None,
        }
    }

    fn conn(&mut self, who: Ticket) -> &mut Conn<M::State> {
        self.live_conn(who).expect("live connection")
    }

    fn enqueue(&mut self, who: Ticket) {
        let c = self.conn(who);
        if !c.queued {
            c.queued = true;
            self.ready.push_back(who);
        }
    }

    /// Does what a connection can do now.
    fn service(&mut self, who: Ticket) {
        match self.conn(who).phase {
            Phase::Reading => self.drive(who),
            Phase::Opening => {
                self.read_ahead(who);
            }
            Phase::Sending => {
                if self.read_ahead(who) {
                    self.pump(who);
                }
            }
            Phase::Lingering => self.linger(who),
        }
    }

    // ----- accepting ----------------------------------------------------

    fn can_accept(&self) -> bool {
        !self.draining && self.live < self.max_conns && self.accept_resume.is_none()
    }

    fn can_accept_more(&self) -> bool {
        self.can_accept() && self.accept_ready.iter().any(|&r| r)
    }

    fn accept_all(&mut self) {
        for i in 0..self.listeners.len() {
            if self.accept_ready[i] {
                self.accept_some(i);
            }
        }
    }

    fn accept_some(&mut self, i: usize) {
        let lfd = self.listeners[i].as_raw_fd();
        for _ in 0..ACCEPT_BATCH {
            if !self.can_accept() || !self.accept_ready[i] {
                return;
            }
            // SAFETY: accept4 with null address pointers writes nothing.
            let fd = unsafe {
                libc::accept4(
                    lfd,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                )
            };
            if fd < 0 {
                let e = errno();
                match e {
                    libc::EAGAIN => self.accept_ready[i] = false,
                    libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM => {
                        if self.files.shed_half() > 0 {
                            // Cached descriptors were given back: go on.
                            continue;
                        }
                        if !self.warned_emfile {
                            crate::say!(
                                "spindle: worker {}: accept: {}; pausing accepts for {:?} (raise the fd limit with ulimit -n, or lower --max-connections)",
                                self.ctx.id,
                                io::Error::from_raw_os_error(e),
                                ACCEPT_BACKOFF
                            );
                            self.warned_emfile = true;
                        }
                        self.accept_resume = Some(self.now + ACCEPT_BACKOFF);
                    }
                    // ECONNABORTED, EINTR, EPROTO...: that one is gone; next.
                    _ => {}
                }
                continue;
            }
            // SAFETY: accept4 returned a new descriptor nothing else owns.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            self.add_conn(fd);
        }
    }

    fn add_conn(&mut self, fd: OwnedFd) {
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.conns.push(None);
                (self.conns.len() - 1) as u32
            }
        };
        let gen = self.next_gen;
        // Generations stay below 2^31, so a connection's token never has
        // the top bit that marks listeners and the other special tokens.
        self.next_gen = (self.next_gen + 1) & MAX_GEN;
        self.next_gen = self.next_gen.max(1);
        let who = Ticket { slot, gen };
        let bits = (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32;
        if let Err(e) = epoll_add(self.epfd.as_raw_fd(), fd.as_raw_fd(), bits, who.token()) {
            crate::say!(
                "spindle: worker {}: epoll_ctl: {e}; dropping a connection",
                self.ctx.id
            );
            self.free.push(slot);
            return;
        }
        self.conns[slot as usize] = Some(Conn {
            fd,
            gen,
            session: Session::new(),
            phase: Phase::Reading,
            // The first event (EPOLL_CTL_ADD reports present readiness)
            // says whether a request is already waiting.
            can_read: false,
            can_write: true,
            peer_eof: false,
            queued: false,
            deadline: self.now + self.ctx.cfg.keepalive_timeout,
            open: None,
            tx: None,
            st: M::State::default(),
            waiting: false,
            lingered: 0,
        });
        self.live += 1;
    }

    // ----- reading and the protocol ---------------------------------------

    /// One `recv` into the session. Returns whether anything happened
    /// (bytes or EOF); false when there was nothing to read or the
    /// connection was dropped (then it is gone: check before using it).
    fn recv_once(&mut self, who: Ticket) -> Recv {
        let c = self.conns[who.slot as usize]
            .as_mut()
            .expect("live connection");
        if !c.can_read || c.peer_eof {
            return Recv::Nothing;
        }
        // SAFETY: receives at most rbuf.len() bytes into the worker's
        // buffer, which is live and not otherwise borrowed.
        let rc = unsafe {
            libc::recv(
                c.fd.as_raw_fd(),
                self.rbuf.as_mut_ptr().cast(),
                self.rbuf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if rc > 0 {
            let n = rc as usize;
            if c.phase == Phase::Lingering {
                c.lingered += n;
            } else {
                c.session.feed(&self.rbuf[..n]);
                // This loop also reads outside epoll_wait (right after a
                // response): a file change reported before these bytes
                // were sent must be seen by the lookup they lead to.
                self.files.batch();
            }
            return Recv::Data(n);
        }
        if rc == 0 {
            c.peer_eof = true;
            c.can_read = false;
            return Recv::Eof;
        }
        match errno() {
            libc::EAGAIN => {
                c.can_read = false;
                Recv::Nothing
            }
            libc::EINTR => Recv::Data(0),
            _ => {
                // ECONNRESET and friends: the peer is gone.
                c.peer_eof = true;
                self.close(who);
                Recv::Gone
            }
        }
    }

    /// Reads pipelined input while a response is being produced, as far as
    /// the session takes it. Returns false if the connection was dropped.
    fn read_ahead(&mut self, who: Ticket) -> bool {
        let cfg = self.ctx.session_cfg.clone();
        let mut budget = READ_TURN_BYTES;
        loop {
            let c = self.conn(who);
            if !c.session.wants_input(&cfg) {
                return true;
            }
            match self.recv_once(who) {
                Recv::Data(n) => {
                    budget = budget.saturating_sub(n.max(1));
                    if budget == 0 {
                        self.enqueue(who);
                        return true;
                    }
                }
                Recv::Eof | Recv::Nothing => return true,
                Recv::Gone => return false,
            }
        }
    }

    /// Asks the session what to do next, and starts doing it.
    fn drive(&mut self, who: Ticket) {
        let cfg = self.ctx.session_cfg.clone();
        let (keepalive, header_timeout) =
            (self.ctx.cfg.keepalive_timeout, self.ctx.cfg.header_timeout);
        let mut budget = READ_TURN_BYTES;
        loop {
            let (now, draining) = (self.now, self.draining);
            let c = self.conn(who);
            debug_assert_eq!(c.phase, Phase::Reading);
            match c.session.next(&cfg) {
                Step::NeedInput => {
                    if c.peer_eof {
                        self.close(who);
                        return;
                    }
                    let mid = c.session.mid_request();
                    c.deadline = now + if mid { header_timeout } else { keepalive };
                    if draining && !mid {
                        self.close(who);
                        return;
                    }
                    match self.recv_once(who) {
                        Recv::Data(n) => {
                            budget = budget.saturating_sub(n.max(1));
                            if budget == 0 {
                                self.enqueue(who);
                                return;
                            }
                        }
                        Recv::Eof => {}
                        Recv::Nothing | Recv::Gone => return,
                    }
                }
                Step::Open(req) => {
                    if let Some(hit) = self.files.lookup(req.path.as_bytes(), now) {
                        // A cached file: no open, metadata fresh (see filecache).
                        match hit {
                            Ok(h) => self.opened_file(who, &req, h.fd, Ok(h.meta), h.body),
                            Err(e) => self.opened_file(who, &req, None, Err(open_error(e)), None),
                        }
                        return;
                    }
                    match self.mover.open(who, &req) {
                        Opened::Now(res) => self.opened(who, &req, res),
                        Opened::Later => {
                            let c = self.conn(who);
                            c.phase = Phase::Opening;
                            c.open = Some(req);
                            self.read_ahead(who);
                        }
                    }
                    return;
                }
                Step::Respond(resp) => {
                    self.start_tx(who, resp, None);
                    return;
                }
                Step::Close => {
                    let linger = c.session.linger_advised();
                    self.begin_close(who, linger);
                    return;
                }
            }
        }
    }

    fn opened(&mut self, who: Ticket, req: &OpenRequest, res: OpenResult) {
        let now = self.now;
        match res {
            Ok((fd, meta, dev)) => {
                let fd = Rc::new(fd);
                let body = if meta.kind == FileKind::Regular {
                    self.files
                        .insert(req.path.as_bytes(), fd.clone(), meta, dev, now)
                } else {
                    None
                };
                self.opened_file(who, req, Some(fd), Ok(meta), body);
            }
            Err(e) => self.opened_file(who, req, None, Err(e), None),
        }
    }

    /// The session's answer to an open (from the cache or the mover), sent:
    /// a small file's cached bytes go in the head (start_tx then drops the
    /// descriptor, as there is no file range left).
    fn opened_file(
        &mut self,
        who: Ticket,
        req: &OpenRequest,
        file: Option<Rc<OwnedFd>>,
        result: Result<FileMeta, OpenError>,
        body: Option<Rc<[u8]>>,
    ) {
        let cfg = self.ctx.session_cfg.clone();
        let mut resp = self.conn(who).session.opened(&cfg, req, result);
        if let Some(b) = body {
            inline_body(&mut resp, &b);
        }
        self.start_tx(who, resp, file);
    }

    // ----- transmitting -------------------------------------------------

    fn start_tx(&mut self, who: Ticket, resp: Response, file: Option<Rc<OwnedFd>>) {
        let deadline = self.now + self.ctx.cfg.send_timeout;
        let c = self.conn(who);
        let (off, left) = resp.file.unwrap_or((0, 0));
        c.phase = Phase::Sending;
        c.deadline = deadline;
        c.tx = Some(Tx {
            resp,
            head_sent: 0,
            file: if left > 0 { file } else { None },
            off,
            left,
            body_sent: 0,
        });
        // Input that is already waiting is left in the socket until this
        // response is done (or until the next edge, for a long response):
        // trying to read it now would mostly cost an EAGAIN per request.
        self.pump(who);
    }

    fn pump(&mut self, who: Ticket) {
        let send_timeout = self.ctx.cfg.send_timeout;
        let now = self.now;
        let c = self.conns[who.slot as usize]
            .as_mut()
            .expect("live connection");
        if c.phase != Phase::Sending || c.waiting || !c.can_write {
            return;
        }
        let tx = c.tx.as_mut().expect("response in progress");
        let before = tx.progress();
        let p = self.mover.pump(who, c.fd.as_raw_fd(), tx, &mut c.st);
        if tx.progress() != before {
            c.deadline = now + send_timeout;
        }
        match p {
            Progress::Done => self.finish_tx(who),
            Progress::SocketFull => c.can_write = false,
            Progress::Waiting => c.waiting = true,
            Progress::Yield => self.enqueue(who),
            Progress::Fail => self.close(who),
        }
    }

    fn finish_tx(&mut self, who: Ticket) {
        let keepalive = self.now + self.ctx.cfg.keepalive_timeout;
        let c = self.conns[who.slot as usize]
            .as_mut()
            .expect("live connection");
        self.mover.release(&mut c.st);
        let tx = c.tx.take().expect("tx");
        if self.ctx.log.enabled() {
            let line = accesslog::format_line(
                &net::peer_string(c.fd.as_raw_fd()),
                unix_now(),
                &c.session.log_info(),
                tx.resp.body_len,
            );
            self.ctx.log.log(line);
        }
        drop(tx);
        c.session.sent();
        if self.draining {
            c.session.close();
        }
        c.phase = Phase::Reading;
        c.deadline = keepalive;
        // The next request is served on the connection's next turn.
        self.enqueue(who);
    }

    fn on_completions(&mut self) {
        let mut done = std::mem::take(&mut self.done);
        self.mover.reap(&mut done);
        for (who, comp) in done.drain(..) {
            match comp {
                Completion::Opened(res) => match self.live_conn(who) {
                    Some(c) if c.phase == Phase::Opening => {
                        let req = c.open.take().expect("open in flight");
                        self.opened(who, &req, res);
                    }
                    _ => drop(res),
                },
                Completion::Chunk(chunk) => match self.conns.get_mut(who.slot as usize) {
                    Some(Some(c)) if c.gen == who.gen && c.phase == Phase::Sending && c.waiting => {
                        c.waiting = false;
                        let tx = c.tx.as_mut().expect("tx");
                        self.mover.chunk_done(tx, &mut c.st, chunk);
                        self.pump(who);
                    }
                    _ => self.mover.discard(chunk),
                },
            }
        }
        self.done = done;
    }

    /// Resumes responses that waited for a mover buffer now free.
    fn wake_waiters(&mut self) {
        while let Some(who) = self.mover.next_waiter() {
            if let Some(c) = self.live_conn(who) {
                if c.phase == Phase::Sending && c.waiting {
                    c.waiting = false;
                    self.pump(who);
                }
            }
        }
    }

    // ----- closing --------------------------------------------------------

    /// Starts closing. With `linger`, the write side is shut first and
    /// input is drained for a while, so a peer that is still sending
    /// receives our last response instead of a reset.
    fn begin_close(&mut self, who: Ticket, linger: bool) {
        let deadline = self.now + LINGER_TIMEOUT;
        let c = self.conns[who.slot as usize]
            .as_mut()
            .expect("live connection");
        c.session.close();
        if linger && !c.peer_eof && c.phase != Phase::Lingering {
            self.mover.release(&mut c.st);
            c.tx = None;
            c.phase = Phase::Lingering;
            c.deadline = deadline;
            // SAFETY: shutdown(2) on a socket this connection owns.
            unsafe { libc::shutdown(c.fd.as_raw_fd(), libc::SHUT_WR) };
            self.linger(who);
            return;
        }
        self.close(who);
    }

    fn linger(&mut self, who: Ticket) {
        let mut budget = READ_TURN_BYTES;
        loop {
            let c = self.conn(who);
            if c.peer_eof || c.lingered > LINGER_MAX_BYTES {
                self.close(who);
                return;
            }
            match self.recv_once(who) {
                Recv::Data(n) => {
                    budget = budget.saturating_sub(n.max(1));
                    if budget == 0 {
                        self.enqueue(who);
                        return;
                    }
                }
                Recv::Eof => {}
                Recv::Nothing | Recv::Gone => return,
            }
        }
    }

    /// Drops the connection now: frees the mover's buffers (a read in
    /// flight is freed when it completes), closes the socket (which also
    /// removes it from the epoll set) and the file.
    fn close(&mut self, who: Ticket) {
        let Some(mut c) = self.conns[who.slot as usize].take() else {
            return;
        };
        debug_assert_eq!(c.gen, who.gen);
        self.mover.release(&mut c.st);
        drop(c);
        self.free.push(who.slot);
        self.live -= 1;
    }

    // ----- timers and shutdown ------------------------------------------

    fn on_tick(&mut self) {
        let now = self.now;
        if self.accept_resume.is_some_and(|t| now >= t) {
            self.accept_resume = None;
            self.warned_emfile = false;
        }
        let force = self.drain_deadline.is_some_and(|d| now >= d);
        if !force && now < self.next_scan {
            // Skipping the scan is sound: every deadline is the loop's time
            // plus one of the timeouts in `backend::min_timeout`, so none set since
            // the last scan falls before `next_scan` (see uring.rs).
            #[cfg(debug_assertions)]
            for c in self.conns.iter().flatten() {
                debug_assert!(
                    !Self::expired(c, now),
                    "a connection expired before next_scan"
                );
            }
            return;
        }
        let mut earliest = now + min_timeout(&self.ctx.cfg);
        for slot in 0..self.conns.len() {
            let Some(c) = &self.conns[slot] else { continue };
            let who = Ticket {
                slot: slot as u32,
                gen: c.gen,
            };
            if force || Self::expired(c, now) {
                self.close(who);
            } else {
                // Opening keeps a deadline it cannot expire on; a passed one
                // brings the next scan to the next tick, as before.
                earliest = earliest.min(c.deadline);
            }
        }
        self.next_scan = earliest;
    }

    /// Whether a connection's deadline has passed in a phase that has one.
    fn expired(c: &Conn<M::State>, now: Instant) -> bool {
        match c.phase {
            Phase::Reading | Phase::Sending | Phase::Lingering => now >= c.deadline,
            Phase::Opening => false,
        }
    }

    fn on_wake(&mut self) {
        drain_eventfd(self.ctx.shutdown.eventfd);
        if !self.ctx.shutdown.requested() || self.draining {
            return;
        }
        self.draining = true;
        self.drain_deadline = Some(self.now + self.ctx.cfg.drain_timeout);
        for slot in 0..self.conns.len() {
            let idle = match &self.conns[slot] {
                Some(c) if c.phase == Phase::Reading && !c.session.mid_request() => Some(c.gen),
                _ => None,
            };
            if let Some(gen) = idle {
                self.close(Ticket {
                    slot: slot as u32,
                    gen,
                });
            }
        }
    }
}

enum Recv {
    /// Bytes were received (0 after EINTR).
    Data(usize),
    /// The peer closed its side.
    Eof,
    /// Nothing to read now.
    Nothing,
    /// The connection failed and was dropped.
    Gone,
}
