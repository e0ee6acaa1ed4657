//! The io_uring backend (the default).
//!
//! One ring per worker thread, and every operation goes through it:
//! multishot `ACCEPT` on the worker's `SO_REUSEPORT` sockets, multishot
//! `RECV` into a provided-buffer ring (so an idle connection holds no
//! receive buffer, and a request costs no new receive SQE),
//! `OPENAT2` beneath the root, `READ` of file chunks, `SEND`, `SHUTDOWN`,
//! `CLOSE`, and a `TIMEOUT` tick that drives the connection timers. The
//! worker sleeps only in `io_uring_enter`, so it never blocks on the disk:
//! a read of cached pages completes inline during submission, and a read
//! that misses the page cache is completed by the kernel's async
//! buffered-read path (or an io-wq thread, capped at `--max-inflight`),
//! while the loop keeps serving other connections.
//!
//! Data path (ARCHITECTURE.md has the measurements): a cached file of at
//! most 16 KiB goes out with its head in one `SEND` from the open-file
//! cache. Other bodies under 64 KiB are `READ` into a chunk buffer from a
//! bounded per-worker pool (`--max-inflight` buffers of `--chunk-size`
//! bytes), the head copied in front of them, and leave in one `SEND`.
//! Larger bodies go by `sendfile(2)` chunk by chunk while `cachestat(2)`
//! says the chunk is in the page cache; a chunk that is not is read
//! asynchronously: through the page cache (then sent by `sendfile` from
//! the pages the read brought in), or, on a file's first use once memory
//! is full (`recent.rs`, `memory.rs`), with `O_DIRECT` into the buffer and
//! sent from it, the next chunk read ahead into a second buffer meanwhile.
//!
//! Invariants (asserted): a connection slot is reused only after every
//! operation that names it has completed; every buffer handed to the
//! kernel (receive ring, chunk pool, open paths, the tick timespec) lives
//! in the worker until the ring has reported the operation's final
//! completion; the worker returns only when no operation is in flight.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::rc::Rc;
use std::time::Instant;

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use spindle_core::accesslog;
use spindle_core::response::FileKind;
use spindle_core::{OpenError, OpenRequest, Response, Session, Step};

use super::epoll::{self, Stop};
use super::{
    inline_body, min_timeout, truncated, unix_now, WorkerContext, ACCEPT_BACKOFF, LINGER_MAX_BYTES,
    LINGER_TIMEOUT, TICK,
};
use crate::config::FirstMiss;
use crate::filecache::OpenFileCache;
use crate::fs;
use crate::net;

/// Submission queue entries per ring (the completion queue is twice this).
pub const RING_ENTRIES: u32 = 4096;
/// Size of one provided receive buffer.
pub const RECV_BUF_SIZE: usize = 4096;
/// Provided receive buffers per worker (a power of two).
pub const RECV_BUF_COUNT: u16 = 1024;
/// Bytes reserved in front of each chunk buffer for the response head.
pub const HEAD_RESERVE: usize = 4096;

/// Bodies at least this large go out by `sendfile(2)` when their pages are
/// cached (by `cachestat(2)`); smaller ones are copied with one `READ` into
/// the buffer that already holds the head, so that head and body leave in
/// one `SEND`. See ARCHITECTURE.md for the measurements behind the value.
pub const SENDFILE_MIN: u64 = 64 * 1024;

const BGID: u16 = 0;
const NO_SLOT: u32 = 0xFF_FFFF;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Op {
    Accept = 1,
    Recv,
    Open,
    Read,
    Send,
    Shutdown,
    Close,
    Cancel,
    Tick,
    Wake,
    PollOut,
    /// A READ into a response's second buffer (`Tx::ahead`).
    ReadAhead,
    /// The open-file cache's inotify fd became readable (multishot poll).
    Notify,
}

impl Op {
    fn from_u8(v: u8) -> Op {
        match v {
            1 => Op::Accept,
            2 => Op::Recv,
            3 => Op::Open,
            4 => Op::Read,
            5 => Op::Send,
            6 => Op::Shutdown,
            7 => Op::Close,
            8 => Op::Cancel,
            9 => Op::Tick,
            10 => Op::Wake,
            11 => Op::PollOut,
            12 => Op::ReadAhead,
            13 => Op::Notify,
            _ => panic!("unknown op {v} in user_data"),
        }
    }
}

/// user_data: op in bits 0..8, slot in 8..32, generation in 32..64.
fn ud(op: Op, slot: u32, gen: u32) -> u64 {
    debug_assert!(slot <= NO_SLOT);
    op as u64 | (slot as u64) << 8 | (gen as u64) << 32
}

fn ud_parts(v: u64) -> (Op, u32, u32) {
    (
        Op::from_u8(v as u8),
        (v >> 8) as u32 & NO_SLOT,
        (v >> 32) as u32,
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for (more of) a request.
    Reading,
    /// `OPENAT2` in flight.
    Opening,
    /// Transmitting a response.
    Sending,
    /// Write side shut; reading and discarding until EOF or timeout.
    Lingering,
    /// Waiting for in-flight operations to finish, then `CLOSE`.
    Closing,
}

/// The path and `open_how` of an `OPENAT2`; boxed so their addresses stay
/// fixed while the kernel reads them.
struct PendingOpen {
    req: OpenRequest,
    how: types::OpenHow,
}

/// A response being transmitted.
struct Tx {
    resp: Response,
    head_sent: usize,
    /// The unsent rest of the head sits in the chunk buffer, in front of
    /// the file bytes (so that one SEND carries both).
    head_in_buf: bool,
    /// The next file byte to fetch, and how many are left to fetch.
    file_off: u64,
    file_left: u64,
    body_sent: u64,
    /// A body under [`SENDFILE_MIN`]: read into the buffer behind the head
    /// (no `cachestat`, no `sendfile`).
    small: bool,
    /// The descriptor is this response's alone and the file was not used
    /// recently: what misses the page cache is read with `O_DIRECT`.
    first_use: bool,
    /// `O_DIRECT` is set on the descriptor: every later chunk is read
    /// into the buffer (no `sendfile` from this descriptor).
    direct: bool,
    /// A chunk of this response missed the page cache and was READ:
    /// every later chunk is READ too before it is sent, never sent
    /// straight from the cache on the word of `cachestat`. The miss
    /// started the kernel's readahead, which puts the next pages in the
    /// cache before their data has arrived; `cachestat` counts them, and a
    /// `sendfile` over them would wait for the disk in this thread. A READ
    /// of them waits in the ring instead, and completes at once when they
    /// are already there.
    missed: bool,
    /// Pool buffer held by this response.
    buf: Option<u32>,
    /// Bytes of the buffer still to send: `buf_pos..buf_end`.
    buf_pos: usize,
    buf_end: usize,
    /// The READ in flight: block-alignment bytes before the wanted ones,
    /// and how many are wanted.
    read_skip: usize,
    read_want: usize,
    /// With O_DIRECT (no kernel readahead): the next chunk, read into a
    /// second buffer while the first is sent. `file_off` and `file_left`
    /// already count it.
    ahead: Option<Ahead>,
    /// pump() found the buffer sent and the read-ahead still in flight:
    /// its completion continues the response.
    await_ahead: bool,
    /// Queued in `pool_waiters` for a chunk buffer.
    waiting: bool,
}

/// A chunk being read ahead (see [`Tx::ahead`]).
struct Ahead {
    buf: u32,
    /// Block-alignment bytes before the wanted ones, and how many are wanted.
    skip: usize,
    want: usize,
    /// The READ's result, once it has completed (until then the buffer is
    /// the kernel's).
    res: Option<i32>,
}

/// A chunk buffer of `HEAD_RESERVE + chunk_size` bytes whose start is
/// aligned to [`fs::DIRECT_ALIGN`], so an `O_DIRECT` read may land at
/// `HEAD_RESERVE`. The heap block does not move when the value does, so a
/// pointer handed to the kernel stays valid while the pool holds it.
struct ChunkBuf {
    mem: Box<[u8]>,
    start: usize,
    len: usize,
}

impl ChunkBuf {
    fn new(len: usize) -> ChunkBuf {
        let mem = vec![0u8; len + fs::DIRECT_ALIGN].into_boxed_slice();
        let start = mem.as_ptr().align_offset(fs::DIRECT_ALIGN);
        assert!(start < fs::DIRECT_ALIGN);
        ChunkBuf { mem, start, len }
    }

    fn get(&self) -> &[u8] {
        &self.mem[self.start..self.start + self.len]
    }

    fn get_mut(&mut self) -> &mut [u8] {
        &mut self.mem[self.start..self.start + self.len]
    }
}

/// Sets `O_DIRECT` on a response's own descriptor; if the file system has
/// no direct I/O, the response reads through the page cache instead.
fn go_direct(file: RawFd, tx: &mut Tx) {
    debug_assert!(tx.first_use && !tx.direct);
    match fs::set_direct(file, true) {
        Ok(()) => tx.direct = true,
        Err(e) => {
            warn_direct(&e);
            tx.first_use = false;
        }
    }
}

/// Says once per process that `O_DIRECT` reads fell back to the page cache.
fn warn_direct(e: &std::io::Error) {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        crate::say!(
            "spindle: O_DIRECT refused by the file system ({e}); files used once are read through the page cache"
        );
    }
}

struct Conn {
    fd: RawFd,
    gen: u32,
    session: Session,
    phase: Phase,
    /// Ring operations in flight that name this slot.
    inflight: u32,
    /// A multishot `RECV` is armed (until its final completion).
    recv_armed: bool,
    /// ... and a cancel for it is on its way.
    recv_cancelling: bool,
    peer_eof: bool,
    deadline: Instant,
    open: Option<Box<PendingOpen>>,
    file: Option<Rc<OwnedFd>>,
    /// `file` was opened for this request and kept out of the open-file
    /// cache: the file's first use (see recent.rs).
    first_use: bool,
    tx: Option<Tx>,
    lingered: usize,
}

struct Worker {
    ring: IoUring,
    ctx: WorkerContext,
    conns: Vec<Option<Conn>>,
    free: Vec<u32>,
    live: usize,
    max_conns: usize,
    next_gen: u32,
    /// Every operation in flight, for the shutdown invariant.
    ring_inflight: usize,
    // Receive buffers, provided to the kernel through a buffer ring.
    recv_bufs: Box<[u8]>,
    br_entries: *mut types::BufRingEntry,
    br_layout: std::alloc::Layout,
    br_tail: u16,
    // Chunk buffer pool.
    pool: Vec<ChunkBuf>,
    pool_free: Vec<u32>,
    pool_limit: usize,
    pool_waiters: VecDeque<u32>,
    chunk_size: usize,
    // Accepting.
    accept_armed: Vec<bool>,
    accept_resume: Option<Instant>,
    listeners: Vec<OwnedFd>,
    // Timers and shutdown.
    now: Instant,
    tick_ts: Box<types::Timespec>,
    tick_armed: bool,
    /// A multishot poll on the open-file cache's inotify fd is in flight:
    /// the cache then drains inotify only in batches where it fired,
    /// instead of with one `read` after every wait.
    notify_armed: bool,
    wake_buf: Box<u64>,
    draining: bool,
    drain_deadline: Option<Instant>,
    /// No connection can expire before this: the tick skips the timeout
    /// scan until then (see on_tick).
    next_scan: Instant,
    rearm: Vec<u32>,
    warned_emfile: bool,
    files: OpenFileCache,
}

/// Checks that io_uring is usable here and supports every operation the
/// backend uses.
pub fn probe() -> Result<(), String> {
    let ring = IoUring::new(8).map_err(|e| {
        let why = match e.raw_os_error() {
            Some(libc::EPERM) => {
                "it is disabled (sysctl kernel.io_uring_disabled) or blocked by a seccomp filter"
            }
            Some(libc::ENOSYS) => "this kernel was built without it",
            _ => "setup failed",
        };
        format!("io_uring is unavailable: {why} ({e}); choose another --backend")
    })?;
    let mut p = io_uring::Probe::new();
    ring.submitter()
        .register_probe(&mut p)
        .map_err(|e| format!("io_uring probe failed: {e}"))?;
    for (code, name) in [
        (opcode::AcceptMulti::CODE, "ACCEPT"),
        (opcode::Recv::CODE, "RECV"),
        (opcode::OpenAt2::CODE, "OPENAT2"),
        (opcode::Read::CODE, "READ"),
        (opcode::Send::CODE, "SEND"),
        (opcode::Shutdown::CODE, "SHUTDOWN"),
        (opcode::Close::CODE, "CLOSE"),
        (opcode::PollAdd::CODE, "POLL_ADD"),
    ] {
        if !p.is_supported(code) {
            return Err(format!(
                "io_uring on this kernel lacks {name} (Linux 6.1 or later is needed); choose another --backend"
            ));
        }
    }
    Ok(())
}

/// Runs one io_uring worker until shutdown.
pub fn run(ctx: WorkerContext) -> Result<(), String> {
    let mut w = Worker::new(ctx)?;
    let _ = w.ctx.ready.send(Ok(()));
    w.event_loop()?;
    Ok(())
}

impl Worker {
    fn new(ctx: WorkerContext) -> Result<Worker, String> {
        let ring = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_submit_all()
            .setup_cqsize(RING_ENTRIES * 4)
            .build(RING_ENTRIES)
            .map_err(|e| format!("io_uring setup failed: {e}"))?;
        // Disk reads that cannot complete inline go to io-wq's bounded
        // workers; cap them at the configured number of reads in flight.
        let inflight = ctx.cfg.max_inflight;
        let mut max = [inflight, inflight];
        let _ = ring.submitter().register_iowq_max_workers(&mut max);

        let count = RECV_BUF_COUNT as usize;
        let recv_bufs = vec![0u8; count * RECV_BUF_SIZE].into_boxed_slice();
        let br_layout = std::alloc::Layout::from_size_align(
            count * std::mem::size_of::<types::BufRingEntry>(),
            4096,
        )
        .expect("buffer ring layout");
        // SAFETY: the layout has a non-zero size.
        let br_entries =
            unsafe { std::alloc::alloc_zeroed(br_layout) }.cast::<types::BufRingEntry>();
        if br_entries.is_null() {
            return Err("out of memory for the receive buffer ring".into());
        }
        // SAFETY: `br_entries` points at `count` zeroed, page-aligned entries
        // that stay allocated until Worker::drop, which runs only after the
        // ring (and with it the registration) is gone.
        unsafe {
            ring.submitter()
                .register_buf_ring_with_flags(br_entries as u64, RECV_BUF_COUNT, BGID, 0)
                .map_err(|e| format!("io_uring provided buffers unavailable: {e}"))?;
        }
        let max_conns = ctx.cfg.max_connections_per_worker();
        let mut ctx = ctx;
        let listeners = std::mem::take(&mut ctx.listeners);
        let mut w = Worker {
            ring,
            conns: Vec::new(),
            free: Vec::new(),
            live: 0,
            max_conns,
            next_gen: 1,
            ring_inflight: 0,
            recv_bufs,
            br_entries,
            br_layout,
            br_tail: 0,
            pool: Vec::new(),
            pool_free: Vec::new(),
            pool_limit: ctx.cfg.max_inflight as usize,
            pool_waiters: VecDeque::new(),
            chunk_size: ctx.cfg.chunk_size as usize,
            accept_armed: vec![false; listeners.len()],
            accept_resume: None,
            listeners,
            now: Instant::now(),
            tick_ts: Box::new(
                types::Timespec::new()
                    .sec(TICK.as_secs())
                    .nsec(TICK.subsec_nanos()),
            ),
            tick_armed: false,
            notify_armed: false,
            wake_buf: Box::new(0),
            draining: false,
            drain_deadline: None,
            next_scan: Instant::now(),
            rearm: Vec::new(),
            warned_emfile: false,
            files: OpenFileCache::new(
                ctx.cfg.open_file_cache,
                ctx.cfg.open_file_cache_valid,
                ctx.cfg.small_file_cache as usize,
            ),
            ctx,
        };
        for bid in 0..RECV_BUF_COUNT {
            w.provide_recv_buf(bid);
        }
        for i in 0..w.listeners.len() {
            w.arm_accept(i);
        }
        w.arm_tick();
        w.arm_notify();
        let efd = w.ctx.shutdown.eventfd;
        let ptr = (&mut *w.wake_buf as *mut u64).cast::<u8>();
        w.push(
            opcode::Read::new(types::Fd(efd), ptr, 8).build(),
            ud(Op::Wake, NO_SLOT, 0),
        );
        Ok(w)
    }

    // ----- submission helpers -------------------------------------------

    fn push(&mut self, sqe: squeue::Entry, user_data: u64) {
        let sqe = sqe.user_data(user_data);
        loop {
            // SAFETY: every buffer an entry names is owned by the worker (or
            // by a connection slot that is not reused while the entry is in
            // flight) and outlives the operation; see the module invariants.
            let pushed = unsafe { self.ring.submission().push(&sqe) };
            if pushed.is_ok() {
                break;
            }
            // Submission queue full: hand what is queued to the kernel.
            if let Err(e) = self.ring.submit() {
                if e.raw_os_error() != Some(libc::EBUSY) && e.raw_os_error() != Some(libc::EINTR) {
                    panic!("io_uring_enter failed: {e}");
                }
            }
        }
        self.ring_inflight += 1;
    }

    fn push_conn(&mut self, slot: u32, op: Op, sqe: squeue::Entry) {
        let c = self.conns[slot as usize].as_mut().expect("live slot");
        c.inflight += 1;
        let gen = c.gen;
        self.push(sqe, ud(op, slot, gen));
    }

    fn provide_recv_buf(&mut self, bid: u16) {
        let mask = RECV_BUF_COUNT - 1;
        // SAFETY: `br_entries` holds RECV_BUF_COUNT entries; the index is
        // masked into range. The kernel only consumes entries below the
        // tail, and this one is published by the tail store that follows.
        unsafe {
            let e = &mut *self.br_entries.add((self.br_tail & mask) as usize);
            e.set_addr(self.recv_bufs.as_ptr().add(bid as usize * RECV_BUF_SIZE) as u64);
            e.set_len(RECV_BUF_SIZE as u32);
            e.set_bid(bid);
        }
        self.br_tail = self.br_tail.wrapping_add(1);
        // SAFETY: the tail lives inside the entries allocation; the kernel
        // reads it with acquire semantics, so it is stored with release.
        unsafe {
            let tail =
                types::BufRingEntry::tail(self.br_entries) as *const std::sync::atomic::AtomicU16;
            (*tail).store(self.br_tail, std::sync::atomic::Ordering::Release);
        }
    }

    fn arm_accept(&mut self, i: usize) {
        if self.accept_armed[i] || self.draining || self.live >= self.max_conns {
            return;
        }
        let fd = self.listeners[i].as_raw_fd();
        self.accept_armed[i] = true;
        self.push(
            opcode::AcceptMulti::new(types::Fd(fd))
                .flags(libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK)
                .build(),
            ud(Op::Accept, i as u32, 0),
        );
    }

    fn cancel_accepts(&mut self) {
        for i in 0..self.listeners.len() {
            if self.accept_armed[i] {
                self.push(
                    opcode::AsyncCancel::new(ud(Op::Accept, i as u32, 0)).build(),
                    ud(Op::Cancel, NO_SLOT, 0),
                );
            }
        }
    }

    fn arm_tick(&mut self) {
        if self.tick_armed {
            return;
        }
        self.tick_armed = true;
        let ts: *const types::Timespec = &*self.tick_ts;
        self.push(opcode::Timeout::new(ts).build(), ud(Op::Tick, NO_SLOT, 0));
    }

    fn arm_notify(&mut self) {
        if self.notify_armed || self.draining {
            return;
        }
        let Some(fd) = self.files.notify_fd() else {
            return;
        };
        self.notify_armed = true;
        self.push(
            opcode::PollAdd::new(types::Fd(fd), libc::POLLIN as u32)
                .multi(true)
                .build(),
            ud(Op::Notify, NO_SLOT, 0),
        );
    }

    // ----- the loop -----------------------------------------------------

    fn event_loop(&mut self) -> Result<(), String> {
        let mut cqes: Vec<(u64, i32, u32)> = Vec::with_capacity(RING_ENTRIES as usize);
        loop {
            if self.draining && self.live == 0 {
                self.stop_timers_and_listeners();
                if self.ring_inflight == 0 {
                    return Ok(());
                }
            }
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR) | Some(libc::EBUSY)) => {}
                Err(e) => return Err(format!("io_uring_enter failed: {e}")),
            }
            self.now = Instant::now();
            cqes.clear();
            cqes.extend(
                self.ring
                    .completion()
                    .map(|c| (c.user_data(), c.result(), c.flags())),
            );
            // A change to a cached file must be seen by every request that
            // arrives after it. inotify queues its event, and wakes the
            // poll, inside the syscall that changed the file, so the
            // poll's completion is queued before that of any request sent
            // afterwards: it is in this batch or an earlier one. Checking
            // the whole batch before serving any of it covers both.
            if !self.notify_armed
                || cqes
                    .iter()
                    .any(|&(u, _, _)| matches!(ud_parts(u).0, Op::Notify))
            {
                self.files.batch();
            }
            for &(user_data, res, flags) in &cqes {
                self.complete(user_data, res, flags);
            }
            for slot in std::mem::take(&mut self.rearm) {
                if let Some(c) = &self.conns[slot as usize] {
                    if matches!(
                        c.phase,
                        Phase::Reading | Phase::Opening | Phase::Sending | Phase::Lingering
                    ) {
                        self.arm_recv(slot);
                    }
                }
            }
        }
    }

    fn stop_timers_and_listeners(&mut self) {
        if self.notify_armed {
            self.notify_armed = false;
            self.push(
                opcode::PollRemove::new(ud(Op::Notify, NO_SLOT, 0)).build(),
                ud(Op::Cancel, NO_SLOT, 0),
            );
        }
        if self.tick_armed {
            self.tick_armed = false;
            self.push(
                opcode::TimeoutRemove::new(ud(Op::Tick, NO_SLOT, 0)).build(),
                ud(Op::Cancel, NO_SLOT, 0),
            );
        }
    }

    fn complete(&mut self, user_data: u64, res: i32, flags: u32) {
        let (op, slot, gen) = ud_parts(user_data);
        let more = cqueue::more(flags);
        if !more {
            self.ring_inflight -= 1;
        }
        match op {
            Op::Accept => self.on_accept(slot as usize, res, more),
            Op::Tick => {
                if self.tick_armed {
                    self.tick_armed = false;
                    self.on_tick();
                }
            }
            Op::Wake => self.on_wake(),
            Op::Notify => {
                if !more {
                    // The multishot poll ended: the inotify queue is drained
                    // after every wait from now on. A poll the kernel ended
                    // without an error (it may, e.g. when the completion
                    // queue overflowed) is armed again; after an error, or
                    // the cancel at shutdown, it is not, so that a poll
                    // that keeps failing cannot spin the loop.
                    self.notify_armed = false;
                    if res >= 0 {
                        self.arm_notify();
                    }
                }
            }
            Op::Cancel => {}
            Op::Close if slot == NO_SLOT => {}
            _ => {
                let Some(c) = self.conns[slot as usize].as_mut() else {
                    panic!("completion {op:?} for empty slot {slot}");
                };
                assert_eq!(c.gen, gen, "completion for a reused slot");
                if !more {
                    // Only the final completion of a multishot ends it.
                    c.inflight -= 1;
                }
                match op {
                    Op::Recv => self.on_recv(slot, res, flags),
                    Op::Open => self.on_open(slot, res),
                    Op::Read => self.on_read(slot, res),
                    Op::ReadAhead => self.on_read_ahead(slot, res),
                    Op::Send => self.on_send(slot, res),
                    Op::Shutdown => self.maybe_release(slot),
                    Op::PollOut => {
                        if self.conn(slot).phase == Phase::Sending && res >= 0 {
                            self.pump(slot);
                        } else if self.conn(slot).phase == Phase::Sending {
                            self.abort(slot);
                        } else {
                            self.maybe_release(slot);
                        }
                    }
                    Op::Close => unreachable!("connection closes carry NO_SLOT"),
                    _ => unreachable!(),
                }
            }
        }
    }

    // ----- accepting ----------------------------------------------------

    fn on_accept(&mut self, i: usize, res: i32, more: bool) {
        if !more {
            self.accept_armed[i] = false;
        }
        if res < 0 {
            match -res {
                libc::ECANCELED => {}
                libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM => {
                    if self.files.shed_half() > 0 {
                        // Cached descriptors were given back: try again now.
                        if !more {
                            self.arm_accept(i);
                        }
                        return;
                    }
                    if !self.warned_emfile {
                        crate::say!(
                            "spindle: worker {}: accept: {}; pausing accepts for {:?} (raise the fd limit with ulimit -n, or lower --max-connections)",
                            self.ctx.id,
                            std::io::Error::from_raw_os_error(-res),
                            ACCEPT_BACKOFF
                        );
                        self.warned_emfile = true;
                    }
                    self.accept_resume = Some(self.now + ACCEPT_BACKOFF);
                }
                _ => {
                    if !more {
                        self.arm_accept(i);
                    }
                }
            }
            return;
        }
        let fd = res;
        if self.draining || self.live >= self.max_conns {
            // Raced with a cancel: this one was already accepted.
            self.push(
                opcode::Close::new(types::Fd(fd)).build(),
                ud(Op::Close, NO_SLOT, 0),
            );
            return;
        }
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.conns.push(None);
                (self.conns.len() - 1) as u32
            }
        };
        let gen = self.next_gen;
        self.next_gen = self.next_gen.wrapping_add(1).max(1);
        self.conns[slot as usize] = Some(Conn {
            fd,
            gen,
            session: Session::new(),
            phase: Phase::Reading,
            inflight: 0,
            recv_armed: false,
            recv_cancelling: false,
            peer_eof: false,
            deadline: self.now + self.ctx.cfg.keepalive_timeout,
            open: None,
            file: None,
            first_use: false,
            tx: None,
            lingered: 0,
        });
        self.live += 1;
        if self.live >= self.max_conns {
            // Stop accepting; the kernel's backlog holds new connections
            // until a slot frees up.
            self.cancel_accepts();
        }
        if !more && self.live < self.max_conns {
            self.arm_accept(i);
        }
        self.drive(slot);
    }

    // ----- the protocol loop -------------------------------------------

    fn conn(&mut self, slot: u32) -> &mut Conn {
        self.conns[slot as usize].as_mut().expect("live slot")
    }

    /// Asks the session what to do next, and starts doing it.
    fn drive(&mut self, slot: u32) {
        let cfg = self.ctx.session_cfg.clone();
        let now = self.now;
        let (keepalive, header_timeout) =
            (self.ctx.cfg.keepalive_timeout, self.ctx.cfg.header_timeout);
        let draining = self.draining;
        let c = self.conn(slot);
        debug_assert_eq!(c.phase, Phase::Reading);
        match c.session.next(&cfg) {
            Step::NeedInput => {
                if c.peer_eof {
                    self.begin_close(slot, false);
                    return;
                }
                c.deadline = now
                    + if c.session.mid_request() {
                        header_timeout
                    } else {
                        keepalive
                    };
                if draining && !c.session.mid_request() {
                    self.begin_close(slot, false);
                    return;
                }
                self.arm_recv(slot);
            }
            Step::Open(req) => {
                // A cached file: no open, metadata fresh (see filecache).
                if let Some(hit) = self.files.lookup(req.path.as_bytes(), now) {
                    match hit {
                        Ok(h) => self.respond_opened(slot, &req, Ok(h.meta), h.fd, h.body, None),
                        Err(e) => self.respond_opened(
                            slot,
                            &req,
                            Err(OpenError::from_errno(e.raw_os_error().unwrap_or(libc::EIO))),
                            None,
                            None,
                            None,
                        ),
                    }
                    return;
                }
                let c = self.conn(slot);
                c.phase = Phase::Opening;
                let pending = Box::new(PendingOpen {
                    req,
                    how: types::OpenHow::new()
                        .flags(fs::OPEN_FLAGS)
                        .resolve(fs::RESOLVE_FLAGS),
                });
                let path = pending.req.path.as_ptr();
                let how: *const types::OpenHow = &pending.how;
                c.open = Some(pending);
                let root = self.ctx.root.fd();
                self.push_conn(
                    slot,
                    Op::Open,
                    opcode::OpenAt2::new(types::Fd(root), path, how).build(),
                );
                self.arm_recv(slot);
            }
            Step::Respond(resp) => self.start_tx(slot, resp),
            Step::Close => {
                let mut linger = c.session.linger_advised();
                if !linger && !c.recv_armed && !c.peer_eof && net::has_unread_input(c.fd) {
                    // Bytes arrived after the last request while nothing
                    // was receiving: closing over them would send a reset,
                    // which can destroy the response before it is read.
                    linger = true;
                }
                self.begin_close(slot, linger);
            }
        }
    }

    fn arm_recv(&mut self, slot: u32) {
        let cfg = self.ctx.session_cfg.clone();
        let c = self.conn(slot);
        let want = match c.phase {
            Phase::Lingering => true,
            Phase::Closing => false,
            // Nothing sent after the last request is read as a request;
            // what arrives anyway is found at the close (see drive).
            _ => c.session.wants_input(&cfg) && !c.session.closes_after_response(),
        };
        if c.recv_armed || c.peer_eof || !want {
            return;
        }
        c.recv_armed = true;
        c.recv_cancelling = false;
        let fd = c.fd;
        let sqe = if c.session.served() == 0 && c.phase != Phase::Lingering {
            // Until a response has kept the connection open, one-shot: a
            // connection-per-fetch client then leaves no receive armed
            // while its response is sent, so its close needs no cancel
            // and its FIN wakes nothing (5 µs a connection in the
            // profile, docs/benchmarks.md "hot").
            opcode::Recv::new(types::Fd(fd), std::ptr::null_mut(), RECV_BUF_SIZE as u32)
                .buf_group(BGID)
                .build()
                .flags(squeue::Flags::BUFFER_SELECT)
        } else {
            // Multishot: one SQE keeps receiving until cancelled, EOF, an
            // error, or no provided buffer is left (ENOBUFS); each
            // completion carries one buffer, picked by the kernel only
            // when data arrives.
            opcode::RecvMulti::new(types::Fd(fd), BGID).build()
        };
        self.push_conn(slot, Op::Recv, sqe);
    }

    /// Stops the multishot receive (flow control or closing).
    fn cancel_recv(&mut self, slot: u32) {
        let c = self.conn(slot);
        if !c.recv_armed || c.recv_cancelling {
            return;
        }
        c.recv_cancelling = true;
        let gen = c.gen;
        self.push(
            opcode::AsyncCancel::new(ud(Op::Recv, slot, gen)).build(),
            ud(Op::Cancel, NO_SLOT, 0),
        );
    }

    fn on_recv(&mut self, slot: u32, res: i32, flags: u32) {
        let cfg = self.ctx.session_cfg.clone();
        let c = self.conn(slot);
        if !cqueue::more(flags) {
            c.recv_armed = false;
            c.recv_cancelling = false;
        }
        if res > 0 {
            let bid = cqueue::buffer_select(flags).expect("recv completed without a buffer");
            let start = bid as usize * RECV_BUF_SIZE;
            let data = &self.recv_bufs[start..start + res as usize];
            let c = self.conns[slot as usize].as_mut().expect("live slot");
            let mut full = false;
            match c.phase {
                Phase::Lingering => c.lingered += res as usize,
                Phase::Closing => {}
                _ => {
                    c.session.feed(data);
                    full = !c.session.wants_input(&cfg);
                }
            }
            self.provide_recv_buf(bid);
            if full {
                // Backpressure: a pipelining client is ahead of us by a
                // whole head's worth of bytes; stop receiving until the
                // session has caught up (drive() re-arms).
                self.cancel_recv(slot);
            }
        } else if res == 0 {
            c.peer_eof = true;
        } else if res == -libc::ENOBUFS {
            // Every receive buffer is in use at this instant; retry once
            // this batch of completions has returned some.
            self.rearm.push(slot);
            return;
        } else if res != -libc::ECANCELED {
            // ECONNRESET and friends: the peer is gone.
            c.peer_eof = true;
            if c.phase != Phase::Closing {
                self.abort(slot);
            } else {
                self.maybe_release(slot);
            }
            return;
        }
        let c = self.conn(slot);
        match c.phase {
            Phase::Reading => self.drive(slot),
            Phase::Lingering => {
                if c.peer_eof || c.lingered > LINGER_MAX_BYTES {
                    c.phase = Phase::Closing;
                    self.cancel_recv(slot);
                    self.maybe_release(slot);
                } else {
                    self.arm_recv(slot);
                }
            }
            Phase::Closing => self.maybe_release(slot),
            Phase::Opening | Phase::Sending => self.arm_recv(slot),
        }
    }

    fn on_open(&mut self, slot: u32, res: i32) {
        let pending = self.conn(slot).open.take().expect("open in flight");
        let mut file = None;
        let mut fresh = None;
        let result = if res >= 0 {
            // SAFETY: OPENAT2 returned a new descriptor that nothing else owns.
            let fd = unsafe { OwnedFd::from_raw_fd(res) };
            match fs::inspect_opened(fd.as_raw_fd()) {
                Ok((meta, dev)) => {
                    file = Some(Rc::new(fd));
                    if meta.kind == FileKind::Regular {
                        fresh = Some((meta, dev));
                    }
                    Ok(meta)
                }
                Err(e) => Err(OpenError::from_errno(e.raw_os_error().unwrap_or(libc::EIO))),
            }
        } else {
            Err(OpenError::from_errno(-res))
        };
        let c = self.conn(slot);
        if c.phase == Phase::Closing {
            self.maybe_release(slot);
            return;
        }
        self.respond_opened(slot, &pending.req, result, file, None, fresh);
    }

    /// The session's answer to an open, sent. `body`: a small file's bytes
    /// from the open-file cache, which go in the head; otherwise the
    /// connection keeps the descriptor for the body. `fresh`: the file was
    /// just opened (not from the cache); a second use (see recent.rs)
    /// enters the open-file cache, a first use keeps its descriptor to
    /// itself so that a page-cache miss may read it with O_DIRECT.
    fn respond_opened(
        &mut self,
        slot: u32,
        req: &OpenRequest,
        result: Result<spindle_core::FileMeta, OpenError>,
        file: Option<Rc<OwnedFd>>,
        mut body: Option<Rc<[u8]>>,
        fresh: Option<(spindle_core::FileMeta, u64)>,
    ) {
        let c = self.conns[slot as usize].as_mut().expect("live slot");
        let mut resp = c.session.opened(&self.ctx.session_cfg, req, result);
        let mut first_use = false;
        if let (Some((meta, dev)), Some(fd)) = (fresh, &file) {
            let bytes = resp.file.map_or(0, |(_, n)| n);
            let again = match self.ctx.cfg.first_miss {
                FirstMiss::Cache => true,
                FirstMiss::Direct => self.ctx.recent.used(dev, meta.ino, bytes),
                // Recorded in either case, so that a file used while memory
                // had room is remembered once it is full.
                FirstMiss::Auto => {
                    self.ctx.recent.used(dev, meta.ino, bytes) | self.ctx.memory.has_room()
                }
            };
            if again {
                body = self
                    .files
                    .insert(req.path.as_bytes(), fd.clone(), meta, dev, self.now);
            } else {
                first_use = true;
            }
        }
        let c = self.conns[slot as usize].as_mut().expect("live slot");
        if !body.is_some_and(|b| inline_body(&mut resp, &b)) && resp.file.is_some() {
            c.file = file;
            c.first_use = first_use;
        }
        self.start_tx(slot, resp);
    }

    // ----- transmitting -------------------------------------------------

    fn start_tx(&mut self, slot: u32, resp: Response) {
        let send_timeout = self.ctx.cfg.send_timeout;
        let now = self.now;
        let c = self.conn(slot);
        c.phase = Phase::Sending;
        c.deadline = now + send_timeout;
        let (file_off, file_left) = resp.file.unwrap_or((0, 0));
        // O_DIRECT belongs to the open file description: only a
        // descriptor that nothing else holds may have it.
        let first_use = c.first_use && c.file.as_ref().is_some_and(|f| Rc::strong_count(f) == 1);
        c.tx = Some(Tx {
            resp,
            head_sent: 0,
            head_in_buf: false,
            file_off,
            file_left,
            body_sent: 0,
            small: file_left < SENDFILE_MIN,
            first_use,
            direct: false,
            missed: false,
            buf: None,
            buf_pos: 0,
            buf_end: 0,
            read_skip: 0,
            read_want: 0,
            ahead: None,
            await_ahead: false,
            waiting: false,
        });
        self.pump(slot);
    }

    /// Issues the next operation of the response in progress.
    fn pump(&mut self, slot: u32) {
        let chunk = self.chunk_size;
        let c = self.conns[slot as usize].as_mut().expect("live slot");
        let fd = c.fd;
        let tx = c.tx.as_mut().expect("response in progress");
        let buffered = tx.buf_pos < tx.buf_end;
        // 1. The head alone: when no file bytes follow, or when file bytes
        //    wait in the buffer without it (it did not fit in front).
        if tx.head_sent < tx.resp.head.len() && !tx.head_in_buf && (tx.file_left == 0 || buffered) {
            let h = &tx.resp.head[tx.head_sent..];
            let more = if tx.file_left > 0 || buffered {
                libc::MSG_MORE
            } else {
                0
            };
            let sqe = opcode::Send::new(types::Fd(fd), h.as_ptr(), h.len() as u32)
                .flags(libc::MSG_NOSIGNAL | more)
                .build();
            self.push_conn(slot, Op::Send, sqe);
            return;
        }
        // 2. Bytes in the chunk buffer, the rest of the head leading them.
        if buffered {
            let b = tx.buf.expect("buffered bytes without a buffer");
            let p = &self.pool[b as usize].get()[tx.buf_pos..tx.buf_end];
            let more = if tx.file_left > 0 { libc::MSG_MORE } else { 0 };
            let sqe = opcode::Send::new(types::Fd(fd), p.as_ptr(), p.len() as u32)
                .flags(libc::MSG_NOSIGNAL | more)
                .build();
            self.push_conn(slot, Op::Send, sqe);
            self.read_ahead(slot);
            return;
        }
        // 3. Done.
        if tx.file_left == 0 && tx.ahead.is_none() {
            self.finish_tx(slot);
            return;
        }
        // 4. The next chunk straight from the page cache with sendfile,
        //    when all of it is there (so it never waits for the disk). Not
        //    for small bodies (one READ into the buffer behind the head and
        //    one SEND are cheaper), and not once a chunk has missed
        //    (Tx::missed). That also covers a descriptor gone O_DIRECT
        //    (sendfile would then read the disk synchronously) and a
        //    response holding a buffer: both come only from a READ.
        debug_assert!(tx.missed || (!tx.direct && tx.buf.is_none()));
        if !tx.small && !tx.missed {
            let file = c.file.as_ref().expect("file for body").as_raw_fd();
            loop {
                let n = (chunk as u64).min(tx.file_left);
                if fs::range_cached(file, tx.file_off, n) != Some(true) {
                    break;
                }
                if tx.head_sent < tx.resp.head.len() {
                    // The head goes first by a direct send (MSG_MORE: it
                    // joins the file bytes in one segment), saving a ring
                    // round trip; if the socket is full, by the ring, which
                    // waits for space (and then this step runs again).
                    match epoll::send_two(fd, &tx.resp.head[tx.head_sent..], &[], true) {
                        Ok(k) => tx.head_sent += k,
                        Err(Stop::Full) => {}
                        Err(Stop::Fail) => {
                            self.abort(slot);
                            return;
                        }
                    }
                    if tx.head_sent < tx.resp.head.len() {
                        let h = &tx.resp.head[tx.head_sent..];
                        let sqe = opcode::Send::new(types::Fd(fd), h.as_ptr(), h.len() as u32)
                            .flags(libc::MSG_NOSIGNAL | libc::MSG_MORE)
                            .build();
                        self.push_conn(slot, Op::Send, sqe);
                        return;
                    }
                }
                let mut off = tx.file_off;
                match epoll::sendfile(fd, file, &mut off, n) {
                    Ok(0) => {
                        // The file shrank under us (see on_read).
                        truncated();
                        self.abort(slot);
                        return;
                    }
                    Ok(r) => {
                        let r = r as u64;
                        tx.file_off += r;
                        tx.file_left -= r;
                        tx.body_sent += r;
                        c.deadline = self.now + self.ctx.cfg.send_timeout;
                        if tx.file_left == 0 {
                            self.finish_tx(slot);
                            return;
                        }
                        if r < n {
                            // The socket buffer is full: wait until it drains.
                            self.push_conn(
                                slot,
                                Op::PollOut,
                                opcode::PollAdd::new(types::Fd(fd), libc::POLLOUT as u32).build(),
                            );
                            return;
                        }
                    }
                    Err(libc::EAGAIN) => {
                        self.push_conn(
                            slot,
                            Op::PollOut,
                            opcode::PollAdd::new(types::Fd(fd), libc::POLLOUT as u32).build(),
                        );
                        return;
                    }
                    Err(_) => {
                        self.abort(slot);
                        return;
                    }
                }
            }
        }
        // 5. The chunk read ahead, if there is one: its buffer becomes the
        //    response's (the drained one goes back to the pool) ...
        if let Some(a) = &tx.ahead {
            if a.res.is_none() {
                tx.await_ahead = true;
                return;
            }
            self.take_ahead(slot);
            return;
        }
        // ... or an asynchronous READ into a chunk buffer, at HEAD_RESERVE
        //    (the head goes in front once the bytes are in): through the page
        //    cache, or with O_DIRECT on a file's first use (recent.rs).
        let b = match tx.buf {
            Some(b) => b,
            None => match self.take_pool_buf() {
                Some(b) => b,
                None => {
                    let c = self.conns[slot as usize].as_mut().expect("live slot");
                    c.tx.as_mut().expect("tx").waiting = true;
                    self.pool_waiters.push_back(slot);
                    return;
                }
            },
        };
        let c = self.conns[slot as usize].as_mut().expect("live slot");
        let file = c.file.as_ref().expect("file for body").as_raw_fd();
        let tx = c.tx.as_mut().expect("tx");
        tx.buf = Some(b);
        if tx.first_use && !tx.direct {
            // A first use whose chunk is not all in the page cache (a large
            // body's was probed in step 4). Not RWF_NOWAIT for the probe: a
            // buffered read that would wait still starts readahead into the
            // page cache before it fails with EAGAIN.
            let n = (chunk as u64).min(tx.file_left);
            if !tx.small || fs::range_cached(file, tx.file_off, n) != Some(true) {
                go_direct(file, tx);
            }
        }
        let (skip, want, len) = if tx.direct {
            // Whole aligned blocks: from the block holding file_off, and
            // to the end of a block (past the end of the file, the read
            // stops there).
            let skip = (tx.file_off % fs::DIRECT_ALIGN as u64) as usize;
            let want = ((chunk - skip) as u64).min(tx.file_left) as usize;
            (skip, want, (skip + want).next_multiple_of(fs::DIRECT_ALIGN))
        } else {
            let want = (chunk as u64).min(tx.file_left) as usize;
            (0, want, want)
        };
        tx.read_skip = skip;
        tx.read_want = want;
        tx.missed = true;
        let offset = tx.file_off - skip as u64;
        let dst = self.pool[b as usize].get_mut()[HEAD_RESERVE..HEAD_RESERVE + len].as_mut_ptr();
        let sqe = opcode::Read::new(types::Fd(file), dst, len as u32)
            .offset(offset)
            .build();
        self.push_conn(slot, Op::Read, sqe);
    }

    /// O_DIRECT reads get no readahead from the kernel, so a response that
    /// reads with O_DIRECT keeps the next chunk's READ in flight while it
    /// sends the current one, in a second buffer, if the pool has one that
    /// no other response is waiting for.
    fn read_ahead(&mut self, slot: u32) {
        let chunk = self.chunk_size;
        let c = self.conns[slot as usize].as_ref().expect("live slot");
        let tx = c.tx.as_ref().expect("response in progress");
        if !tx.direct || tx.ahead.is_some() || tx.file_left == 0 || !self.pool_waiters.is_empty() {
            return;
        }
        let Some(b) = self.take_pool_buf() else {
            return;
        };
        let c = self.conns[slot as usize].as_mut().expect("live slot");
        let file = c.file.as_ref().expect("file for body").as_raw_fd();
        let tx = c.tx.as_mut().expect("response in progress");
        let skip = (tx.file_off % fs::DIRECT_ALIGN as u64) as usize;
        let want = ((chunk - skip) as u64).min(tx.file_left) as usize;
        let len = (skip + want).next_multiple_of(fs::DIRECT_ALIGN);
        let offset = tx.file_off - skip as u64;
        tx.file_off += want as u64;
        tx.file_left -= want as u64;
        tx.ahead = Some(Ahead {
            buf: b,
            skip,
            want,
            res: None,
        });
        let dst = self.pool[b as usize].get_mut()[HEAD_RESERVE..HEAD_RESERVE + len].as_mut_ptr();
        let sqe = opcode::Read::new(types::Fd(file), dst, len as u32)
            .offset(offset)
            .build();
        self.push_conn(slot, Op::ReadAhead, sqe);
    }

    fn on_read_ahead(&mut self, slot: u32, res: i32) {
        let c = self.conns[slot as usize].as_mut().expect("live slot");
        let tx = c.tx.as_mut().expect("read-ahead without a response");
        let a = tx
            .ahead
            .as_mut()
            .expect("read-ahead completion without one");
        a.res = Some(res);
        if c.phase == Phase::Closing {
            // Only this buffer: the main one may still be under a SEND
            // being cancelled.
            let b = tx.ahead.take().expect("read-ahead").buf;
            self.give_pool_buf(b);
            self.maybe_release(slot);
            return;
        }
        if std::mem::take(&mut tx.await_ahead) {
            self.pump(slot);
        }
    }

    /// Makes the completed read-ahead the response's buffer, and sends it.
    fn take_ahead(&mut self, slot: u32) {
        let c = self.conns[slot as usize].as_mut().expect("live slot");
        let file = c.file.as_ref().expect("file for body").as_raw_fd();
        let tx = c.tx.as_mut().expect("response in progress");
        debug_assert!(tx.buf_pos == tx.buf_end, "buffer not yet sent");
        let a = tx.ahead.take().expect("read-ahead");
        let res = a.res.expect("read-ahead completed");
        let old = tx.buf.replace(a.buf);
        if res == -libc::EINVAL {
            // As in on_read: the file system wants a stricter alignment.
            // The chunk is read again through the page cache.
            warn_direct(&std::io::Error::from_raw_os_error(libc::EINVAL));
            tx.file_off -= a.want as u64;
            tx.file_left += a.want as u64;
            tx.buf = old;
            if fs::set_direct(file, false).is_err() {
                self.give_pool_buf(a.buf);
                self.abort(slot);
                return;
            }
            tx.direct = false;
            tx.first_use = false;
            self.give_pool_buf(a.buf);
            self.pump(slot);
            return;
        }
        if let Some(old) = old {
            self.give_pool_buf(old);
        }
        let c = self.conns[slot as usize].as_mut().expect("live slot");
        let tx = c.tx.as_mut().expect("response in progress");
        if res < 0 || (res as usize) < a.skip + a.want {
            // A short read: the file shrank (see on_read).
            if res >= 0 {
                truncated();
            }
            self.abort(slot);
            return;
        }
        tx.buf_pos = HEAD_RESERVE + a.skip;
        tx.buf_end = tx.buf_pos + a.want;
        self.pump(slot);
    }

    fn on_read(&mut self, slot: u32, res: i32) {
        let progress_deadline = self.now + self.ctx.cfg.send_timeout;
        let c = self.conns[slot as usize].as_mut().expect("live slot");
        if c.phase == Phase::Closing {
            self.release_tx(slot);
            self.maybe_release(slot);
            return;
        }
        let file = c.file.as_ref().expect("file for body").as_raw_fd();
        let tx = c.tx.as_mut().expect("tx");
        if res == -libc::EINVAL && tx.direct {
            // The file system wants a stricter alignment than DIRECT_ALIGN:
            // read this file through the page cache after all.
            warn_direct(&std::io::Error::from_raw_os_error(libc::EINVAL));
            if fs::set_direct(file, false).is_err() {
                self.abort(slot);
                return;
            }
            tx.direct = false;
            tx.first_use = false;
            self.pump(slot);
            return;
        }
        let (skip, want) = (tx.read_skip, tx.read_want);
        // EOF before the promised length: the file shrank while being
        // sent. Nothing correct can follow the bytes already sent under
        // this Content-Length, so the connection is dropped. An O_DIRECT
        // read starts `skip` bytes early, in whole blocks, so it must
        // reach past `skip + want`.
        let short = if tx.direct {
            res >= 0 && (res as usize) < skip + want
        } else {
            res == 0
        };
        if short {
            truncated();
        }
        if res <= 0 || short {
            self.abort(slot);
            return;
        }
        let got = if tx.direct { want } else { res as usize };
        debug_assert!(got <= want);
        let start = tx.file_off;
        tx.file_off += got as u64;
        tx.file_left -= got as u64;
        let data = HEAD_RESERVE + skip;
        tx.buf_pos = data;
        tx.buf_end = data + got;
        // A buffered READ leaves what it read in the page cache. Unless the
        // body is small, send the chunk from there with sendfile (no second
        // copy; the socket is non-blocking and the range is cached, so it
        // cannot wait), and keep the buffer's copy only for what the socket
        // would not take now, or for pages reclaimed in between.
        if !tx.small && !tx.direct && fs::range_cached(file, start, got as u64) == Some(true) {
            if tx.head_sent < tx.resp.head.len() {
                match epoll::send_two(c.fd, &tx.resp.head[tx.head_sent..], &[], true) {
                    Ok(k) => tx.head_sent += k,
                    Err(Stop::Full) => {}
                    Err(Stop::Fail) => {
                        self.abort(slot);
                        return;
                    }
                }
            }
            if tx.head_sent == tx.resp.head.len() {
                let mut sent = 0u64;
                while sent < got as u64 {
                    let mut off = start + sent;
                    match epoll::sendfile(c.fd, file, &mut off, got as u64 - sent) {
                        Ok(0) => {
                            // The file shrank since the READ.
                            truncated();
                            self.abort(slot);
                            return;
                        }
                        Ok(r) => sent += r as u64,
                        Err(libc::EAGAIN) => break,
                        Err(_) => {
                            self.abort(slot);
                            return;
                        }
                    }
                }
                tx.buf_pos += sent as usize;
                tx.body_sent += sent;
                if sent > 0 {
                    c.deadline = progress_deadline;
                }
            }
        }
        // The rest of the head, if any, goes right in front of the file
        // bytes (over the block-alignment bytes an O_DIRECT read brought),
        // so one SEND carries both. Nothing of the file has been sent yet:
        // sendfile above runs only after the whole head.
        let head_left = tx.resp.head.len() - tx.head_sent;
        let b = tx.buf.expect("READ without a buffer") as usize;
        if head_left > 0 && head_left <= tx.buf_pos {
            debug_assert_eq!(tx.buf_pos, data);
            let at = tx.buf_pos - head_left;
            self.pool[b].get_mut()[at..tx.buf_pos].copy_from_slice(&tx.resp.head[tx.head_sent..]);
            tx.buf_pos = at;
            tx.head_in_buf = true;
        }
        if tx.buf_pos == tx.buf_end {
            // All sent by sendfile: the buffer can serve someone else.
            tx.buf = None;
            self.give_pool_buf(b as u32);
        }
        self.pump(slot);
    }

    fn on_send(&mut self, slot: u32, res: i32) {
        let send_timeout = self.ctx.cfg.send_timeout;
        let now = self.now;
        let others_waiting = !self.pool_waiters.is_empty();
        let c = self.conn(slot);
        if c.phase == Phase::Closing {
            self.release_tx(slot);
            self.maybe_release(slot);
            return;
        }
        if res <= 0 {
            self.abort(slot);
            return;
        }
        c.deadline = now + send_timeout;
        let tx = c.tx.as_mut().expect("tx");
        let mut n = res as usize;
        if !tx.head_in_buf && tx.head_sent < tx.resp.head.len() {
            // A SEND of the head alone (pump steps 1 and 4).
            tx.head_sent += n;
        } else {
            tx.buf_pos += n;
            debug_assert!(tx.buf_pos <= tx.buf_end);
            // Count file bytes (the head may lead the buffer).
            if tx.head_in_buf && tx.head_sent < tx.resp.head.len() {
                let h = (tx.resp.head.len() - tx.head_sent).min(n);
                tx.head_sent += h;
                n -= h;
            }
            tx.body_sent += n as u64;
            if tx.buf_pos == tx.buf_end && tx.file_left > 0 && others_waiting {
                // Fairness: hand the buffer to a waiting response and queue up.
                let b = tx.buf.take().expect("buffer");
                self.give_pool_buf(b);
                // Takes the buffer back if nobody was waiting for it after
                // all, or queues for one.
                self.pump(slot);
                return;
            }
        }
        self.pump(slot);
    }

    fn finish_tx(&mut self, slot: u32) {
        self.release_tx(slot);
        let c = self.conns[slot as usize].as_mut().expect("live slot");
        let tx = c.tx.take().expect("tx");
        c.file = None;
        if self.ctx.log.enabled() {
            let line = accesslog::format_line(
                &net::peer_string(c.fd),
                unix_now(),
                &c.session.log_info(),
                tx.resp.body_len,
            );
            self.ctx.log.log(line);
        }
        c.session.sent();
        if self.draining {
            c.session.close();
        }
        c.phase = Phase::Reading;
        self.drive(slot);
    }

    /// Returns the response's chunk buffers to the pool: the main one (its
    /// operation has completed whenever this is called) and a read-ahead
    /// buffer whose READ has completed; one still being read stays with the
    /// response until on_read_ahead.
    fn release_tx(&mut self, slot: u32) {
        let c = self.conns[slot as usize].as_mut().expect("live slot");
        if let Some(tx) = c.tx.as_mut() {
            let main = tx.buf.take();
            let ahead = match &tx.ahead {
                Some(a) if a.res.is_some() => tx.ahead.take().map(|a| a.buf),
                _ => None,
            };
            for b in [main, ahead].into_iter().flatten() {
                self.give_pool_buf(b);
            }
        }
    }

    fn take_pool_buf(&mut self) -> Option<u32> {
        if let Some(b) = self.pool_free.pop() {
            return Some(b);
        }
        if self.pool.len() < self.pool_limit {
            self.pool
                .push(ChunkBuf::new(HEAD_RESERVE + self.chunk_size));
            return Some((self.pool.len() - 1) as u32);
        }
        None
    }

    fn give_pool_buf(&mut self, b: u32) {
        self.pool_free.push(b);
        // Wake the first waiter that is still sending.
        while let Some(s) = self.pool_waiters.pop_front() {
            let Some(c) = self.conns[s as usize].as_mut() else {
                continue;
            };
            if c.phase != Phase::Sending {
                continue;
            }
            let Some(tx) = c.tx.as_mut() else { continue };
            if tx.waiting {
                tx.waiting = false;
                self.pump(s);
                break;
            }
        }
    }

    // ----- closing --------------------------------------------------------

    /// Drops the connection now (error, timeout, shutdown deadline).
    fn abort(&mut self, slot: u32) {
        self.begin_close(slot, false);
    }

    /// Starts closing. With `linger`, the write side is shut first and
    /// input is drained for a while, so a peer that is still sending
    /// receives our last response instead of a reset.
    fn begin_close(&mut self, slot: u32, linger: bool) {
        let now = self.now;
        let c = self.conn(slot);
        if c.phase == Phase::Closing {
            return;
        }
        c.session.close();
        if linger && !c.peer_eof && c.phase != Phase::Lingering {
            c.phase = Phase::Lingering;
            c.deadline = now + LINGER_TIMEOUT;
            let fd = c.fd;
            self.push_conn(
                slot,
                Op::Shutdown,
                opcode::Shutdown::new(types::Fd(fd), libc::SHUT_WR).build(),
            );
            self.arm_recv(slot);
            return;
        }
        c.phase = Phase::Closing;
        let gen = c.gen;
        let sending = c.inflight > 0 && c.tx.is_some();
        self.cancel_recv(slot);
        if sending {
            // A SEND (or a POLLOUT wait) for a peer that stopped reading
            // waits for socket space forever; cancel it (a no-op if none is
            // in flight). A READ of the file cannot be cut short and simply
            // completes.
            for op in [Op::Send, Op::PollOut] {
                self.push(
                    opcode::AsyncCancel::new(ud(op, slot, gen)).build(),
                    ud(Op::Cancel, NO_SLOT, 0),
                );
            }
        }
        // The chunk buffer, if any, goes back to the pool only when no
        // READ or SEND can still be using it (see maybe_release).
        self.maybe_release(slot);
    }

    /// Closes the socket and frees the slot once nothing names it.
    fn maybe_release(&mut self, slot: u32) {
        let c = self.conn(slot);
        if c.phase == Phase::Lingering && c.inflight == 0 && !c.recv_armed {
            c.phase = Phase::Closing;
        }
        if c.phase != Phase::Closing || c.inflight > 0 {
            return;
        }
        self.release_tx(slot);
        let c = self.conns[slot as usize].take().expect("live slot");
        debug_assert!(c.open.is_none());
        if let Some(tx) = &c.tx {
            debug_assert!(tx.buf.is_none(), "chunk buffer leaked");
            debug_assert!(tx.ahead.is_none(), "read-ahead buffer leaked");
        }
        self.push(
            opcode::Close::new(types::Fd(c.fd)).build(),
            ud(Op::Close, NO_SLOT, 0),
        );
        drop(c.file);
        self.free.push(slot);
        self.live -= 1;
        if self.live < self.max_conns {
            for i in 0..self.listeners.len() {
                if self.accept_resume.is_none() {
                    self.arm_accept(i);
                }
            }
        }
    }

    // ----- timers and shutdown ------------------------------------------

    fn on_tick(&mut self) {
        let now = self.now;
        if self.ctx.id == 0 && self.ctx.cfg.first_miss == FirstMiss::Auto {
            // One file read per tick, for every worker (memory.rs).
            self.ctx.memory.refresh();
        }
        if self.accept_resume.is_some_and(|t| now >= t) {
            self.accept_resume = None;
            self.warned_emfile = false;
            for i in 0..self.listeners.len() {
                self.arm_accept(i);
            }
        }
        let force = self.drain_deadline.is_some_and(|d| now >= d);
        if force || now >= self.next_scan {
            self.scan_timeouts(force);
        } else {
            // The scan visits every slot; with 10,000 idle keep-alive
            // connections, doing it every tick cost about 2.5% of the
            // worker's CPU per request (docs/benchmarks.md "idle"). Skipping
            // it is sound because every deadline is set to the loop's time
            // plus one of the timeouts in `backend::min_timeout`, so none set since
            // the last scan falls before `next_scan`.
            #[cfg(debug_assertions)]
            for c in self.conns.iter().flatten() {
                debug_assert!(
                    !Self::expired(c, now),
                    "a connection expired before next_scan"
                );
            }
        }
        if !(self.draining && self.live == 0) {
            self.arm_tick();
        }
    }

    /// Whether a connection's deadline has passed in a phase that has one.
    fn expired(c: &Conn, now: Instant) -> bool {
        match c.phase {
            Phase::Reading => c.recv_armed && now >= c.deadline,
            Phase::Sending | Phase::Lingering => now >= c.deadline,
            Phase::Opening | Phase::Closing => false,
        }
    }

    /// Drops the connections whose deadline has passed (all but those
    /// closing, with `force`), and sets `next_scan` to the earliest
    /// deadline left. A connection that cannot expire now but keeps its
    /// deadline (Opening; Reading without a receive armed) counts too, so
    /// a passed one brings the next scan to the next tick, as before.
    fn scan_timeouts(&mut self, force: bool) {
        let now = self.now;
        let mut earliest = now + min_timeout(&self.ctx.cfg);
        for slot in 0..self.conns.len() as u32 {
            let Some(c) = &self.conns[slot as usize] else {
                continue;
            };
            if force && c.phase != Phase::Closing {
                self.abort(slot);
            } else if Self::expired(c, now) {
                if c.phase == Phase::Lingering {
                    self.conn(slot).phase = Phase::Closing;
                    self.cancel_recv(slot);
                    self.maybe_release(slot);
                } else {
                    self.abort(slot);
                }
            } else if c.phase != Phase::Closing {
                earliest = earliest.min(c.deadline);
            }
        }
        self.next_scan = earliest;
    }

    fn on_wake(&mut self) {
        if !self.ctx.shutdown.requested() {
            return;
        }
        self.draining = true;
        self.drain_deadline = Some(self.now + self.ctx.cfg.drain_timeout);
        self.cancel_accepts();
        for slot in 0..self.conns.len() as u32 {
            let idle = matches!(&self.conns[slot as usize], Some(c) if c.phase == Phase::Reading && !c.session.mid_request());
            if idle {
                self.begin_close(slot, false);
            }
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // The ring is dropped after this body runs (fields drop after
        // `drop`), so unregister first: the kernel must stop referring to
        // the buffer ring memory before it is freed.
        let _ = self.ring.submitter().unregister_buf_ring(BGID);
        // SAFETY: allocated in `new` with this layout; the kernel no longer
        // refers to it after unregister_buf_ring.
        unsafe { std::alloc::dealloc(self.br_entries.cast(), self.br_layout) };
    }
}
