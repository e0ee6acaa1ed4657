//! The worker: one per thread, for every backend.
//!
//! It says what to do as typed operations (`crate::io::Sub`) and reacts
//! to their completions; an engine carries them out (`crate::io`). On the
//! ring (`io-uring`, the default) every operation goes through io_uring:
//! multishot `ACCEPT` on the worker's `SO_REUSEPORT` sockets, multishot
//! `RECV` into a provided-buffer ring (so an idle connection holds no
//! receive buffer, and a request costs no new receive SQE), `OPENAT2`
//! beneath the root, `READ` of file chunks, `SEND`, `SHUTDOWN`, `CLOSE`,
//! and a `TIMEOUT` tick that drives the connection timers. The worker
//! sleeps only in `io_uring_enter`, so it never blocks on the disk: a
//! read of cached pages completes inline during submission, and a read
//! that misses the page cache is completed by the kernel's async
//! buffered-read path (or an io-wq thread, capped at `--max-inflight`),
//! while the loop keeps serving other connections. The seed backends run
//! the same worker on epoll (`crate::io::poll`), each with its own way to
//! do disk work (`crate::backend` has the table).
//!
//! Data path (docs/decisions.md has the measurements): a cached file of at
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
//!
//! What a connection does above its bytes is the connection layer's
//! ([`crate::conn`]). Where things are here:
//! this file holds the state (the worker, its connections and their
//! responses, the chunk buffers); `ring.rs` sets the worker up and
//! dispatches each completion; `accept.rs` accepts; `conn.rs` does for a
//! connection what the ring must (receive, opens, lingering close, the
//! tick);
//! `tx.rs` sends a response (head, `sendfile`, `SEND` from a buffer);
//! `tls.rs` puts HTTPS connections' bytes through rustls;
//! `read.rs` reads the body from disk (page cache or `O_DIRECT`, and the
//! `O_DIRECT` read-ahead); `pool.rs` lends chunk buffers; `probe.rs`
//! checks the kernel at start.

mod accept;
mod conn;
mod disk;
mod h2;
mod h3;
mod pool;
mod probe;
mod read;
mod ring;
mod sendfile;
mod tls;
mod tx;
mod wire;

pub use probe::probe;

use std::collections::VecDeque;
use std::os::fd::{OwnedFd, RawFd};
use std::rc::Rc;
use std::time::Instant;

use spindle_core::{OpenRequest, Response};

use crate::conn::{Life, Serving, Slots, WorkerContext};
use crate::fs;
use crate::io::Engine;

/// Submission queue entries per ring (the completion queue is four times this).
pub const RING_ENTRIES: u32 = 4096;
/// Size of one provided receive buffer.
pub const RECV_BUF_SIZE: usize = 4096;
/// Provided receive buffers per worker (a power of two).
pub const RECV_BUF_COUNT: u16 = 1024;
/// Bytes reserved in front of each chunk buffer for the response head.
pub const HEAD_RESERVE: usize = 4096;
/// Devices a worker keeps a depth of its own for (`disk.rs`); files on
/// further devices share the last one.
pub const MAX_DEVICES: usize = 16;

/// Bodies at least this large go out by `sendfile(2)` when their pages are
/// cached (by `cachestat(2)`); smaller ones are copied with one `READ` into
/// the buffer that already holds the head, so that head and body leave in
/// one `SEND`. See docs/decisions.md for the measurements behind the value.
pub const SENDFILE_MIN: u64 = 64 * 1024;

const NO_SLOT: u32 = 0xFF_FFFF;

/// The path and `open_how` of an `OPENAT2`; boxed so their addresses stay
/// fixed while the kernel reads them.
struct PendingOpen {
    req: OpenRequest,
    how: libc::open_how,
}

/// A response being transmitted.
struct Tx {
    resp: Response,
    head_sent: usize,
    /// Where the unsent rest of the head is.
    head_at: HeadAt,
    /// The next file byte to fetch, and how many are left to fetch.
    file_off: u64,
    file_left: u64,
    /// The body's bytes after `file_left` that may not be read yet: the
    /// edge's slices still being fetched (`Serving::edge_more`). When
    /// `file_left` runs out, the stored ones among them move over, or
    /// the response waits (`Wait::Slices`).
    withheld: u64,
    body_sent: u64,
    /// How its file bytes travel.
    route: Route,
    /// Whether it reads with `O_DIRECT`.
    direct: Direct,
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
    /// What it waits for before `pump` goes on.
    wait: Wait,
    /// A body of several chunks, or any large body after a miss (not
    /// direct): a mapping of the file that is never touched, for
    /// `mincore`, which tells which pages are filled (readahead inserts
    /// pages before their data arrives). Those go by `sendfile` (no copy,
    /// cannot wait); for the next page that is not filled yet, a one-page
    /// `READ` waits in the ring (`Op::PageWait`). The miss's own chunk is
    /// `READ` whole: its size sets the size of the first readahead window.
    map: Mapping,
    /// The readahead lead of a body sent through `map` after a miss
    /// (`read.rs` `lead`): how far it has touched, and its share of the
    /// worker's budget.
    lead: Option<read::Lead>,
    /// The version the file must still have when the body's last bytes
    /// go (`Worker::last_bytes_ok`); `None` once it was found to.
    unchecked: Option<spindle_core::response::Version>,
    /// When the response started, and the `--limit-rate` it started
    /// under (a reload applies to the next responses).
    started: Instant,
    rate: Option<crate::conn::policy::RateLimit>,
    /// The READ in flight (then the buffer) puts file bytes in record
    /// layout: each record's payload where a TLS record (or an HTTP/2
    /// DATA frame) is then built around it in place, no copy
    /// (`Worker::held_layout`); its iovecs, one per record, stay here
    /// until the READ completes.
    held: Option<crate::tlsrec::RecordLayout>,
    iov: Vec<libc::iovec>,
    reopen: Reopen,
}

impl Tx {
    /// No byte of this response has left or been promised: another
    /// response (the session's 500 or 503) can still take its place.
    fn nothing_out(&self) -> bool {
        self.head_sent == 0
            && self.body_sent == 0
            && self.head_at == HeadAt::Front
            && !self.resp.continued
    }

    /// Stops waiting for `what`: `true` if it was (then the caller
    /// pumps it on).
    fn wake(&mut self, what: Wait) -> bool {
        if self.wait != what {
            return false;
        }
        self.wait = Wait::Nothing;
        true
    }

    /// Where its body came from, for the access log.
    fn outcome(&self) -> &'static str {
        match (self.direct, self.route) {
            (Direct::On, _) | (_, Route::Shm) => "direct",
            (_, Route::Blocking) => "sendfile",
            (_, Route::Missed) => "read",
            // Every byte of a buffered body was READ.
            (_, Route::Buffer) if self.body_sent > 0 => "read",
            _ => "cache",
        }
    }
}

/// How a response's file bytes travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    /// A body under [`SENDFILE_MIN`], or one that passes through memory
    /// as plaintext (HTTPS, an HTTP/2 stream), or any under
    /// `--sendfile off`: every chunk is READ into the buffer behind the
    /// head (no `cachestat`, no `sendfile`).
    Buffer,
    /// A larger plain body none of whose chunks has missed: what the page
    /// cache holds goes by `sendfile`.
    Sendfile,
    /// A larger plain body after a chunk missed the page cache and was
    /// READ: every later chunk is READ too, or waited for in the ring,
    /// before it is sent, never sent straight from the cache on the word
    /// of `cachestat`. The miss started the kernel's readahead, which puts
    /// the next pages in the cache before their data has arrived;
    /// `cachestat` counts them, and a `sendfile` over them would wait for
    /// the disk in this thread. A READ of them waits in the ring instead,
    /// and completes at once when they are already there.
    Missed,
    /// `linux-sendfile` (a backend without `Cap::Buffers`): every body,
    /// whatever its size, goes by `sendfile` unprobed, and a miss blocks
    /// the loop in it, as the seed backend's does.
    Blocking,
    /// `linux-aio-sendfile` (a pool in shared memory): what `cachestat`
    /// finds cached goes by `sendfile` from the file; the rest is read
    /// with `O_DIRECT` by native AIO into a chunk buffer, a slot of the
    /// shared-memory file, and goes by `sendfile` from there (`Tx::reopen`
    /// holds the `O_DIRECT` descriptor).
    Shm,
}

/// `Route::Shm`'s `O_DIRECT` descriptor: a second open of the response's
/// file (`crate::io::shm::reopen_direct`).
enum Reopen {
    Untried,
    Direct(OwnedFd),
    /// The file system refuses `O_DIRECT`: reads go through the page cache.
    Refused,
}

/// Whether a response reads its file with `O_DIRECT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direct {
    Never,
    /// The descriptor is this response's alone and the file was not used
    /// recently: what misses the page cache is read with `O_DIRECT`.
    FirstUse,
    /// `O_DIRECT` is set on the descriptor: every later chunk is read
    /// into the buffer (no `sendfile` from this descriptor).
    On,
}

/// What a response waits for before `pump` goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    Nothing,
    /// pump() found the buffer sent and the read-ahead still in flight:
    /// its completion continues the response.
    ReadAhead,
    /// Queued in the pool's waiters for a chunk buffer.
    PoolBuffer,
    /// `--limit-rate`: in `Serving::throttled` for the next tick.
    Tick,
    /// The edge's next slice: resumed from `Serving::slice_wakes`.
    Slices,
}

/// Where the unsent rest of a response's head is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HeadAt {
    /// In `resp.front`, from `head_sent` on.
    Front,
    /// Copied into the chunk buffer, in front of the file bytes (so that
    /// one SEND carries both).
    Buffer,
}

/// A response's mapping of its file for `mincore` (see `Tx::map`).
enum Mapping {
    Untried,
    Mapped(fs::FileMap),
    /// The file could not be mapped: misses are `READ` chunk by chunk.
    Failed,
}

impl Mapping {
    fn get(&self) -> Option<&fs::FileMap> {
        match self {
            Mapping::Mapped(m) => Some(m),
            _ => None,
        }
    }
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
/// `HEAD_RESERVE`: a heap block, or a slot of the pool's shared-memory
/// mapping (`linux-aio-sendfile`, `pool.rs`). Neither moves when the value
/// does, so a pointer handed to the kernel stays valid while the pool
/// holds it.
enum ChunkBuf {
    Heap {
        mem: Box<[u8]>,
        start: usize,
        len: usize,
    },
    Shm(pool::ShmSlot),
}

impl ChunkBuf {
    fn new(len: usize) -> ChunkBuf {
        let mem = vec![0u8; len + fs::DIRECT_ALIGN].into_boxed_slice();
        let start = mem.as_ptr().align_offset(fs::DIRECT_ALIGN);
        assert!(start < fs::DIRECT_ALIGN);
        ChunkBuf::Heap { mem, start, len }
    }

    fn get(&self) -> &[u8] {
        match self {
            ChunkBuf::Heap { mem, start, len } => &mem[*start..*start + *len],
            ChunkBuf::Shm(s) => s.get(),
        }
    }

    fn get_mut(&mut self) -> &mut [u8] {
        match self {
            ChunkBuf::Heap { mem, start, len } => &mut mem[*start..*start + *len],
            ChunkBuf::Shm(s) => s.get_mut(),
        }
    }
}

/// A connection as this loop keeps it: its life (`conn::Life`) beside
/// what only the ring needs.
struct Conn {
    /// The socket; a stream slot names its connection's (for the log and
    /// the rules by address) and never does I/O on it.
    fd: RawFd,
    life: Life,
    /// The protocol on the socket, or the HTTP/2 stream this slot serves.
    proto: h2::Proto,
    /// Ring operations in flight that name this slot.
    inflight: u32,
    /// Its `RECV` (until the operation's final completion).
    recv: Recv,
    open: Option<Box<PendingOpen>>,
    file: Option<Rc<OwnedFd>>,
    /// `file` was opened for this request and kept out of the open-file
    /// cache: the file's first use (see recent.rs).
    first_use: bool,
    tx: Option<Tx>,
    /// The device of the file being sent, as an index into
    /// `Worker::devices`: whose depth its disk reads count against.
    dev: usize,
    /// Queued in that device's `waiters` for a disk-read slot.
    disk_waiting: bool,
    /// HTTPS: the connection's TLS session (`tls.rs`); boxed, so that the
    /// records a `SEND` is sending do not move with the slot vector.
    tls: Option<Box<tls::TlsState>>,
    /// When the disk read in flight (`Op::Read`, `ReadAhead` or
    /// `PageWait`; at most one at a time) was issued: the loop's time.
    disk_at: Instant,
    /// In bulk sending (`net::set_bulk`) while a body of more than one
    /// loop turn goes by `sendfile` (`Worker::send_ready`); `finish_tx`
    /// ends it.
    bulk: crate::net::Bulk,
}

impl Conn {
    /// A connection (or stream slot) about to be served, nothing in flight.
    fn new(
        fd: RawFd,
        life: Life,
        proto: h2::Proto,
        tls: Option<Box<tls::TlsState>>,
        now: Instant,
    ) -> Conn {
        Conn {
            fd,
            life,
            proto,
            inflight: 0,
            recv: Recv::Off,
            open: None,
            file: None,
            first_use: false,
            tx: None,
            dev: 0,
            disk_waiting: false,
            tls,
            disk_at: now,
            bulk: crate::net::Bulk::Off,
        }
    }

    /// Its responses pass through memory as plaintext (HTTPS, or an
    /// HTTP/2 stream): bodies are read into buffers, never `sendfile`d.
    fn sends_plaintext(&self) -> bool {
        self.tls.is_some() || self.proto.is_stream()
    }
}

/// A connection's receive on the ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Recv {
    Off,
    /// A `RECV` (one-shot or multishot) is armed.
    Armed,
    /// ... and a cancel for it is on its way.
    Cancelling,
}

/// One device's disk reads: the depth allowed (`depth.rs`), the reads in
/// flight (`Op::Read` and `Op::ReadAhead` of response bodies), and the
/// responses waiting for one of them to end.
struct Device {
    dev: u64,
    depth: crate::depth::Depth,
    inflight: u32,
    waiters: VecDeque<u32>,
}

struct Worker<E: Engine> {
    /// The ring (`crate::io`): every operation goes through it.
    io: E,
    /// What every loop shares about serving (`conn::Serving`).
    serve: Serving,
    conns: Slots<Conn>,
    /// Every operation in flight, for the shutdown invariant.
    ring_inflight: usize,
    /// Chunk buffers (`pool.rs`).
    pool: pool::Pool,
    /// Disk-read depth per device, at most [`MAX_DEVICES`] (`disk.rs`).
    devices: Vec<Device>,
    accept: accept::Accepting,
    /// Operations on the worker's own descriptors that are kept armed.
    armed: ring::Armed,
    /// What those operations read into, and the tick's timespec, boxed so
    /// that their addresses stay fixed while the kernel holds them.
    fixed: ring::Fixed,
    /// Cloned by every response that holds a readahead lead
    /// (`read::Lead`): its strong count, less this one, is how many share
    /// `read::LEAD_BUDGET`.
    leaders: Rc<()>,
    /// Slots in `conns` that serve an HTTP/2 stream, not a connection (the
    /// open-connections gauge leaves them out).
    streams: usize,
    /// Receives to arm again once this batch of completions is handled
    /// (they failed for want of a provided buffer).
    rearm: Vec<u32>,
    now: Instant,
    /// HTTP/3 (`--http3`): the UDP socket and the QUIC driver (`h3.rs`).
    quic: Option<Box<h3::QuicIo>>,
}

/// The receive buffers a worker's engine picks from.
const RECV_BUFS: crate::io::RecvBufs = crate::io::RecvBufs {
    count: RECV_BUF_COUNT,
    size: RECV_BUF_SIZE,
};

/// Runs one io_uring worker until shutdown.
pub fn run(ctx: WorkerContext) -> Result<(), String> {
    // Disk reads that cannot complete inline go to io-wq's bounded
    // workers; cap them at the configured number of reads in flight.
    let io = crate::io::ring::Ring::new(RING_ENTRIES, ctx.cfg.max_inflight, RECV_BUFS)?;
    run_on(ctx, io, heap_pool)
}

/// Runs one worker on epoll (`posix-aio`) until shutdown: the same worker,
/// its disk operations done by the process's pool of `--io-threads`
/// threads when they would wait.
pub fn run_threads(ctx: WorkerContext) -> Result<(), String> {
    let cfg = &ctx.cfg;
    // Each connection has at most one open or one read in flight, and
    // each chunk buffer one read ahead.
    let per_worker = cfg.max_connections_per_worker() + 2 * cfg.max_inflight as usize;
    let disk =
        crate::io::disk::Threads::new(cfg.io_threads as usize, cfg.workers as usize * per_worker)?;
    run_on(ctx, crate::io::poll::Poll::new(RECV_BUFS, disk)?, heap_pool)
}

/// Runs one worker on epoll (`linux-sendfile`) until shutdown: the same
/// worker, its opens done in the loop and every body sent by `sendfile`
/// (`Route::Blocking`), so a page-cache miss blocks the loop, as the seed
/// backend's does.
pub fn run_inline(ctx: WorkerContext) -> Result<(), String> {
    run_on(
        ctx,
        crate::io::poll::Poll::new(RECV_BUFS, crate::io::disk::Inline)?,
        heap_pool,
    )
}

/// Runs one worker on epoll (`linux-aio-sendfile`, the seed's design)
/// until shutdown: the same worker, its chunk buffers slots of a
/// shared-memory file, a miss read into one with `O_DIRECT` by native AIO
/// and sent from there by `sendfile` (`Route::Shm`); opens in the loop.
pub fn run_kaio(ctx: WorkerContext) -> Result<(), String> {
    let cfg = &ctx.cfg;
    let pool = pool::Pool::in_shm(cfg.max_inflight as usize, cfg.chunk_size as usize, ctx.id)?;
    let disk = crate::io::disk::Kaio::new(pool.limit as u32)?;
    let io = crate::io::poll::Poll::new(RECV_BUFS, disk)?;
    run_on(ctx, io, |_| Ok(pool))
}

/// The chunk pool on the heap: `--max-inflight` buffers of `--chunk-size`.
fn heap_pool(ctx: &WorkerContext) -> Result<pool::Pool, String> {
    let cfg = &ctx.cfg;
    Ok(pool::Pool::new(
        cfg.max_inflight as usize,
        cfg.chunk_size as usize,
    ))
}

fn run_on<E: Engine>(
    ctx: WorkerContext,
    io: E,
    pool: impl FnOnce(&WorkerContext) -> Result<pool::Pool, String>,
) -> Result<(), String> {
    let pool = pool(&ctx)?;
    let mut w = Worker::new(ctx, io, pool)?;
    let _ = w.serve.ctx.ready.send(Ok(()));
    w.event_loop()?;
    Ok(())
}
