//! `posix-aio`: threads do the disk work, like lighttpd 1.5's posix-aio
//! backend and nginx's `aio threads`.
//!
//! The shared epoll loop ([`super::epoll`]) never waits for the disk. What
//! might wait goes to one pool of `--io-threads` threads, shared by every
//! worker of the process (the flag is the total, as disk concurrency is a
//! property of the disks, not of the workers):
//!
//! - **Opens.** The loop first tries `openat2(RESOLVE_BENEATH |
//!   RESOLVE_CACHED)`, which the kernel completes only from the dentry
//!   cache and otherwise refuses with `EAGAIN` without touching the disk;
//!   only then does a thread do the real `openat2` + `fstat`.
//! - **Reads.** A chunk of the file whose pages are all in the page cache
//!   (`cachestat(2)`) is sent by the loop with `sendfile(2)` from the file,
//!   zero-copy, as `linux-sendfile` would. Any other chunk is `pread` by a
//!   thread into a `--chunk-size` buffer, and the loop sends the buffer
//!   (the head and the first chunk in one `sendmsg`). Threads read into
//!   buffers rather than calling `sendfile` themselves so that they never
//!   touch a socket: the socket stays owned by the loop (no `EAGAIN`
//!   ping-pong between thread and loop, no two writers), and a thread's
//!   work is a plain disk read whose only result is bytes in memory. The
//!   price is one copy into user space and one back, which does not matter
//!   when the disk is the bottleneck, and cached chunks avoid it anyway.
//!
//! Completions come back to the worker through a per-worker queue and an
//! eventfd registered in its epoll set (written only when the queue goes
//! from empty to non-empty).
//!
//! Bounds, per worker: at most `--max-inflight` reads in flight, each
//! holding one of at most `--max-inflight` buffers, and at most
//! `--max-inflight` opens in flight. Responses beyond that wait in FIFOs
//! that hold each connection at most once, so the pool's job queue never
//! exceeds `workers × 2 × --max-inflight` (checked on every submission).
//!
//! Kernel behaviour relied on: `RESOLVE_CACHED` (Linux 5.12), `cachestat`
//! (Linux 6.5; without it every chunk goes to the pool). The cache check
//! is a hint: pages evicted between the check and the `sendfile` make the
//! loop wait for them, as `linux-sendfile` always does.

use std::collections::VecDeque;
use std::ffi::CStr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use spindle_core::{OpenError, OpenRequest};

use super::epoll::{self, Completion, Mover, Opened, Progress, ReadState, Sock, Tx};
use super::WorkerContext;
use crate::conn::{OpenResult, Ticket};
use crate::fs::{self, Root, Roots};
use crate::metrics::{ReadMode, WorkerMetrics};

/// Jobs queued per worker at most: its reads plus its opens.
const JOBS_PER_INFLIGHT: usize = 2;
/// Stack of an I/O thread: it only opens and reads into heap buffers.
const IO_THREAD_STACK: usize = 128 * 1024;

enum JobKind {
    Open {
        req: OpenRequest,
        roots: Arc<Roots>,
    },
    Read {
        file: OwnedFd,
        buf: Box<[u8]>,
        off: u64,
        len: usize,
    },
}

struct Job {
    who: Ticket,
    kind: JobKind,
    reply: Arc<Reply>,
}

/// A finished read: the buffer comes back with the result.
pub struct Chunk {
    buf: Box<[u8]>,
    res: Result<usize, i32>,
    /// How long the `pread` took, timed by the I/O thread (metrics).
    took: Duration,
}

/// Where a worker's completions land.
struct Reply {
    done: Mutex<Vec<(Ticket, Completion<Chunk>)>>,
    efd: OwnedFd,
}

impl Reply {
    fn push(&self, who: Ticket, c: Completion<Chunk>) {
        let was_empty = {
            let mut q = self.done.lock().unwrap_or_else(|e| e.into_inner());
            q.push((who, c));
            q.len() == 1
        };
        // The worker reads the eventfd before it takes the queue, so one
        // signal per empty-to-non-empty transition cannot be lost.
        if was_empty {
            crate::sys::signal_eventfd(self.efd.as_raw_fd());
        }
    }
}

struct Queue {
    jobs: VecDeque<Job>,
    stop: bool,
}

struct Shared {
    q: Mutex<Queue>,
    cv: Condvar,
    limit: usize,
}

/// The process-wide pool of I/O threads. The last worker to drop its
/// handle stops and joins the threads.
struct Pool {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

static POOL: Mutex<Weak<Pool>> = Mutex::new(Weak::new());

impl Pool {
    fn shared(threads: usize, limit: usize) -> Result<Arc<Pool>, String> {
        let mut g = POOL.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = g.upgrade() {
            return Ok(p);
        }
        let shared = Arc::new(Shared {
            q: Mutex::new(Queue {
                jobs: VecDeque::new(),
                stop: false,
            }),
            cv: Condvar::new(),
            limit,
        });
        let mut handles = Vec::with_capacity(threads);
        for i in 0..threads {
            let s = shared.clone();
            let h = std::thread::Builder::new()
                .name(format!("spindle-io{i}"))
                .stack_size(IO_THREAD_STACK)
                .spawn(move || io_thread(&s))
                .map_err(|e| format!("cannot start I/O thread: {e}"))?;
            handles.push(h);
        }
        let p = Arc::new(Pool {
            shared,
            threads: handles,
        });
        *g = Arc::downgrade(&p);
        Ok(p)
    }

    fn submit(&self, job: Job) {
        let mut q = self.shared.q.lock().unwrap_or_else(|e| e.into_inner());
        assert!(
            q.jobs.len() < self.shared.limit,
            "I/O thread queue over its bound"
        );
        q.jobs.push_back(job);
        drop(q);
        self.shared.cv.notify_one();
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.q.lock().unwrap_or_else(|e| e.into_inner()).stop = true;
        self.shared.cv.notify_all();
        for h in self.threads.drain(..) {
            let _ = h.join();
        }
    }
}

fn io_thread(s: &Shared) {
    loop {
        let job = {
            let mut q = s.q.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                if q.stop {
                    // Jobs still queued belong to workers that have returned.
                    return;
                }
                if let Some(j) = q.jobs.pop_front() {
                    break j;
                }
                q = s.cv.wait(q).unwrap_or_else(|e| e.into_inner());
            }
        };
        let Job { who, kind, reply } = job;
        match kind {
            JobKind::Open { req, roots } => {
                let res = epoll::open_sync(&roots, &req);
                reply.push(who, Completion::Opened(res));
            }
            JobKind::Read {
                file,
                mut buf,
                off,
                len,
            } => {
                // The thread reads through its own duplicate of the
                // descriptor, so a connection closed meanwhile cannot make
                // it read whatever reuses the number.
                let f = std::fs::File::from(file);
                let start = Instant::now();
                let res = loop {
                    match f.read_at(&mut buf[..len], off) {
                        Ok(n) => break Ok(n),
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        Err(e) => break Err(e.raw_os_error().unwrap_or(libc::EIO)),
                    }
                };
                let took = start.elapsed();
                reply.push(who, Completion::Chunk(Chunk { buf, res, took }));
            }
        }
    }
}

/// `openat2` beneath the root that succeeds only if every component is in
/// the dentry cache. `None`: it would have needed the disk.
fn open_cached(root: &Root, path: &CStr) -> Option<OpenResult> {
    // SAFETY: an all-zero open_how is valid (mode 0, no flags).
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = fs::OPEN_FLAGS;
    how.resolve = fs::RESOLVE_FLAGS | libc::RESOLVE_CACHED;
    // SAFETY: `path` is NUL-terminated and `how` a live struct of the size
    // passed; the kernel only reads them during the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root.fd(),
            path.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EAGAIN) {
            return None;
        }
        return Some(Err(crate::fs::open_error(e)));
    }
    // SAFETY: openat2 returned a new descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    Some(match fs::inspect_opened(fd.as_raw_fd()) {
        Ok((meta, dev)) => Ok((fd, meta, dev)),
        Err(e) => Err(OpenError::from_errno(e.raw_os_error().unwrap_or(libc::EIO))),
    })
}

pub struct PosixAio {
    pool: Arc<Pool>,
    reply: Arc<Reply>,
    chunk: usize,
    /// Cached chunks go by `sendfile` (config `sendfile`); else every
    /// chunk is read into a buffer by an I/O thread.
    sendfile: bool,
    max_inflight: usize,
    bufs_made: usize,
    bufs_free: Vec<Box<[u8]>>,
    buf_waiters: VecDeque<Ticket>,
    reads_inflight: usize,
    opens_inflight: usize,
    /// The document roots opens go beneath (replaced on a reload).
    roots: Arc<Roots>,
    open_queue: VecDeque<(Ticket, OpenRequest)>,
    metrics: Arc<WorkerMetrics>,
}

/// Per response: the chunk buffer and how much of it is sent.
#[derive(Default)]
pub struct State {
    buf: Option<Box<[u8]>>,
    len: usize,
    sent: usize,
    read: ReadState,
    route: Route,
}

/// Where a response's chunks come from.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Route {
    /// From the page cache by `sendfile` where `cachestat` finds them.
    #[default]
    Cache,
    /// A chunk of this response was read by an I/O thread: later chunks
    /// are too. That `pread` started the kernel's readahead, which puts
    /// the next pages in the cache before their data has arrived;
    /// `cachestat` counts them, and a `sendfile` over them would make the
    /// event loop wait for the disk.
    Missed,
}

impl PosixAio {
    fn take_buf(&mut self) -> Option<Box<[u8]>> {
        if let Some(b) = self.bufs_free.pop() {
            return Some(b);
        }
        if self.bufs_made < self.max_inflight {
            self.bufs_made += 1;
            return Some(vec![0u8; self.chunk].into_boxed_slice());
        }
        None
    }

    fn submit_open(&mut self, who: Ticket, req: OpenRequest) {
        self.opens_inflight += 1;
        self.pool.submit(Job {
            who,
            kind: JobKind::Open {
                req,
                roots: self.roots.clone(),
            },
            reply: self.reply.clone(),
        });
    }
}

impl Mover for PosixAio {
    type State = State;
    type Chunk = Chunk;

    fn new(ctx: &WorkerContext) -> Result<Self, String> {
        let cfg = &ctx.cfg;
        let max_inflight = cfg.max_inflight as usize;
        let limit = cfg.workers as usize * JOBS_PER_INFLIGHT * max_inflight;
        let pool = Pool::shared(cfg.io_threads as usize, limit)?;
        Ok(PosixAio {
            pool,
            roots: ctx.root.clone(),
            reply: Arc::new(Reply {
                done: Mutex::new(Vec::new()),
                efd: crate::sys::new_eventfd()?,
            }),
            chunk: cfg.chunk_size as usize,
            sendfile: cfg.sendfile,
            max_inflight,
            bufs_made: 0,
            bufs_free: Vec::new(),
            buf_waiters: VecDeque::new(),
            reads_inflight: 0,
            opens_inflight: 0,
            open_queue: VecDeque::new(),
            metrics: ctx.metrics.clone(),
        })
    }

    fn completion_fd(&self) -> Option<RawFd> {
        Some(self.reply.efd.as_raw_fd())
    }

    fn set_roots(&mut self, roots: Arc<Roots>) {
        self.roots = roots;
    }

    fn open(&mut self, who: Ticket, req: &OpenRequest) -> Opened {
        if let Some(res) = open_cached(self.roots.get(req.root), &req.path) {
            return Opened::Now(res);
        }
        if self.opens_inflight < self.max_inflight {
            self.submit_open(who, req.clone());
        } else {
            self.open_queue.push_back((who, req.clone()));
        }
        Opened::Later
    }

    fn pump(&mut self, who: Ticket, sock: &mut Sock, tx: &mut Tx, st: &mut State) -> Progress {
        let mut turn = 0usize;
        loop {
            if let Some(p) = st.read.stop() {
                return p;
            }
            // 1. Bytes of a chunk buffer, after the rest of the head (the
            //    body's last ones once the file is checked).
            if st.sent < st.len {
                if tx.left == 0 {
                    if let Err(p) = epoll::last_bytes_ok(tx) {
                        return p;
                    }
                }
                if tx.budget == 0 {
                    // --limit-rate: this turn's allowance is spent.
                    return Progress::Yield;
                }
                let buf = st.buf.as_ref().expect("chunk buffer");
                let end =
                    st.sent + (st.len - st.sent).min(tx.budget.min(usize::MAX as u64) as usize);
                let n = match sock.send_two(tx.head_left(), &buf[st.sent..end], tx.left > 0) {
                    Ok(n) => n,
                    Err(s) => return s.into(),
                };
                let body = tx.wrote(n);
                tx.budget = tx.budget.saturating_sub(body as u64);
                st.sent += body;
                turn += body;
                if st.sent == st.len {
                    st.len = 0;
                    st.sent = 0;
                    if !self.buf_waiters.is_empty() {
                        // Fairness: let a waiting response have the buffer.
                        if let Some(b) = st.buf.take() {
                            self.bufs_free.push(b);
                        }
                    }
                }
                continue;
            }
            // 2. The head alone, a read to wait for, or the turn's end.
            if let Some(p) =
                epoll::between_chunks(sock, tx, st.read.in_flight(), turn >= self.chunk)
            {
                return p;
            }
            // 3. The next chunk: from the page cache by sendfile if it is
            // all there (and no chunk before it missed), else read by an
            // I/O thread.
            let n = (self.chunk as u64).min(tx.left);
            let file = tx.file.as_ref().expect("file for body");
            if self.sendfile
                && sock.zero_copy()
                && st.route == Route::Cache
                && fs::range_cached(file.as_raw_fd(), tx.off, n) == Some(true)
            {
                let fd = file.as_raw_fd();
                if let Err(s) = epoll::sendfile_range(sock, tx, fd, n) {
                    return s;
                }
                turn += n as usize;
                continue;
            }
            let buf = match st.buf.take().or_else(|| self.take_buf()) {
                Some(b) => b,
                None => {
                    self.buf_waiters.push_back(who);
                    return Progress::Waiting;
                }
            };
            tx.outcome = "read";
            let file = match tx.file.as_ref().expect("file for body").try_clone() {
                Ok(f) => f,
                Err(e) => {
                    crate::error!("cannot duplicate a file descriptor for an I/O thread: {e}; closing the connection");
                    self.bufs_free.push(buf);
                    return Progress::Fail;
                }
            };
            self.reads_inflight += 1;
            self.metrics.disk_read(ReadMode::PageCache);
            st.read = ReadState::InFlight;
            st.route = Route::Missed;
            self.pool.submit(Job {
                who,
                kind: JobKind::Read {
                    file,
                    buf,
                    off: tx.off,
                    len: n as usize,
                },
                reply: self.reply.clone(),
            });
            return Progress::Waiting;
        }
    }

    fn reap(&mut self, out: &mut Vec<(Ticket, Completion<Chunk>)>) {
        crate::sys::drain_eventfd(self.reply.efd.as_raw_fd());
        let batch = std::mem::take(&mut *self.reply.done.lock().unwrap_or_else(|e| e.into_inner()));
        for (who, c) in batch {
            match &c {
                Completion::Opened(_) => {
                    self.opens_inflight -= 1;
                    if let Some((w, req)) = self.open_queue.pop_front() {
                        self.submit_open(w, req);
                    }
                }
                Completion::Chunk(c) => {
                    self.reads_inflight -= 1;
                    self.metrics.disk_read_done(c.took);
                }
            }
            out.push((who, c));
        }
    }

    fn chunk_done(&mut self, tx: &mut Tx, st: &mut State, chunk: Chunk) {
        st.read = ReadState::Idle;
        match chunk.res {
            Ok(0) => {
                crate::conn::policy::truncated();
                st.read = ReadState::Truncated;
                self.bufs_free.push(chunk.buf);
            }
            Ok(n) => {
                let n = n.min(tx.left as usize);
                st.buf = Some(chunk.buf);
                st.len = n;
                st.sent = 0;
                tx.off += n as u64;
                tx.left -= n as u64;
            }
            Err(e) => {
                st.read = ReadState::Failed(e);
                self.bufs_free.push(chunk.buf);
            }
        }
    }

    fn discard(&mut self, chunk: Chunk) {
        self.bufs_free.push(chunk.buf);
    }

    fn release(&mut self, st: &mut State) {
        if let Some(b) = st.buf.take() {
            self.bufs_free.push(b);
        }
        st.len = 0;
        st.sent = 0;
        st.route = Route::Cache;
        if !st.read.in_flight() {
            st.read = ReadState::Idle;
        }
    }

    fn next_waiter(&mut self) -> Option<Ticket> {
        if self.bufs_free.is_empty() && self.bufs_made >= self.max_inflight {
            return None;
        }
        self.buf_waiters.pop_front()
    }

    fn in_flight(&self) -> usize {
        self.reads_inflight + self.opens_inflight
    }
}

/// Nothing to check beyond epoll and threads.
pub fn probe() -> Result<(), String> {
    Ok(())
}
