//! How the epoll engine does disk operations ([`super::poll::Disk`]):
//!
//! - [`Inline`] (`linux-sendfile`): in the loop, blocking it on a miss, as
//!   lighttpd 1.5's `linux-sendfile` backend does.
//! - [`Threads`] (`posix-aio`): what the page cache holds is read in the
//!   loop (`cachestat`, then `preadv2(RWF_NOWAIT)`; an open whose path is
//!   in the dentry cache, `RESOLVE_CACHED`); the rest goes to one pool of
//!   `--io-threads` threads shared by the process's workers, as lighttpd
//!   1.5's `posix-aio` and nginx's `aio threads` do. io_uring does the same
//!   inside the kernel: a read that would wait goes to its io-wq threads.
//!
//! - [`Kaio`] (`linux-aio-sendfile`): reads by Linux native AIO
//!   (`io_submit`, completions through an eventfd), as lighttpd 1.5's
//!   `linux-aio-sendfile` backend does; truly asynchronous on `O_DIRECT`
//!   descriptors (the worker reads with one), performed inside
//!   `io_submit` otherwise. Opens in the loop: native AIO has none.
//!
//! A read is carried on until every byte asked for is in, or the file
//! ends (as the ring's buffered reads are): a short count means the file
//! is shorter than the worker thought.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::JoinHandle;

use super::poll::Disk;
use super::Cqe;
use super::DiskOp;

/// Stack of an I/O thread: it only opens and reads into the worker's buffers.
const IO_THREAD_STACK: usize = 128 * 1024;

/// Where a read got to: bytes in, and why it stopped before the end.
struct Partial {
    got: usize,
    /// `None`: finished (every byte, or the end of the file).
    stop: Option<i32>,
}

/// Reads `op` from byte `from` of it on; with `nowait`, only what the page
/// cache holds (`RWF_NOWAIT`, stopping at `EAGAIN`).
///
/// # Safety
/// `op`'s buffers are valid for its lengths and nobody else's until its
/// completion.
unsafe fn read_from(op: DiskOp, from: usize, nowait: bool) -> Partial {
    let (fd, mut iov, off): (RawFd, Vec<libc::iovec>, u64) = match op {
        DiskOp::Read { fd, buf, len, off } => (
            fd,
            vec![libc::iovec {
                iov_base: buf.cast(),
                iov_len: len as usize,
            }],
            off,
        ),
        DiskOp::Readv { fd, iov, n, off } => {
            // SAFETY: the worker's iovecs, valid until the completion.
            (
                fd,
                unsafe { std::slice::from_raw_parts(iov, n as usize) }.to_vec(),
                off,
            )
        }
        DiskOp::Open { .. } => unreachable!("an open is not a read"),
    };
    let flags = if nowait { libc::RWF_NOWAIT } else { 0 };
    let mut got = 0usize;
    advance(&mut iov, from);
    got += from;
    loop {
        let first = iov.iter().position(|v| v.iov_len > 0);
        let Some(first) = first else {
            return Partial { got, stop: None };
        };
        let rest = &iov[first..];
        // SAFETY: the iovecs name the worker's buffers (this function's
        // contract); the kernel writes within them.
        let r = unsafe {
            libc::preadv2(
                fd,
                rest.as_ptr(),
                rest.len() as i32,
                (off + got as u64) as i64,
                flags,
            )
        };
        if r < 0 {
            let e = std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO);
            if e == libc::EINTR {
                continue;
            }
            return Partial { got, stop: Some(e) };
        }
        if r == 0 {
            return Partial { got, stop: None };
        }
        got += r as usize;
        advance(&mut iov, r as usize);
    }
}

/// Moves `iov` past its first `n` bytes.
fn advance(iov: &mut [libc::iovec], mut n: usize) {
    for v in iov.iter_mut() {
        let k = n.min(v.iov_len);
        // A pointer moved within the buffer it points into.
        v.iov_base = v.iov_base.cast::<u8>().wrapping_add(k).cast();
        v.iov_len -= k;
        n -= k;
        if n == 0 {
            break;
        }
    }
}

/// `openat2` with `how`, plus `extra` resolve flags: the new descriptor,
/// or `-errno`.
///
/// # Safety
/// `path` is NUL-terminated and `how` live, until the call returns.
unsafe fn open(
    dir: RawFd,
    path: *const libc::c_char,
    how: *const libc::open_how,
    extra: u64,
) -> i32 {
    // SAFETY: the caller's `how`.
    let mut h = unsafe { *how };
    h.resolve |= extra;
    // SAFETY: `path` NUL-terminated (the caller's), `h` a live struct of
    // the size passed.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir,
            path,
            &h as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        -std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    } else {
        fd as i32
    }
}

/// A read's completion result.
fn result(p: Partial) -> i32 {
    match p.stop {
        Some(e) if p.got == 0 => -e,
        _ => p.got as i32,
    }
}

/// Whether every page `op` reads is in the page cache (`cachestat`).
fn cached(op: DiskOp) -> bool {
    let (fd, len, off) = match op {
        DiskOp::Read { fd, len, off, .. } => (fd, len as u64, off),
        DiskOp::Readv { fd, iov, n, off } => {
            // SAFETY: the worker's iovecs, valid until the completion.
            let v = unsafe { std::slice::from_raw_parts(iov, n as usize) };
            (fd, v.iter().map(|v| v.iov_len as u64).sum(), off)
        }
        DiskOp::Open { .. } => return false,
    };
    crate::fs::range_cached(fd, off, len) == Some(true)
}

/// Disk operations done in the loop.
pub struct Inline;

impl Disk for Inline {
    unsafe fn submit(&mut self, op: DiskOp, user_data: u64, done: &mut VecDeque<Cqe>) {
        let r = match op {
            // SAFETY: passed on from the caller.
            DiskOp::Open { dir, path, how } => unsafe { open(dir, path, how, 0) },
            // SAFETY: passed on from the caller.
            _ => result(unsafe { read_from(op, 0, false) }),
        };
        done.push_back((user_data, r, 0));
    }
}

/// An operation handed to an I/O thread, with where it got to in the loop.
struct Job {
    op: DiskOp,
    from: usize,
    user_data: u64,
    reply: Arc<Reply>,
}

// SAFETY: the pointers in `op` name the worker's memory, which it keeps
// valid and untouched until the completion comes back (the engine's
// contract); the thread is the only one to use them meanwhile.
unsafe impl Send for Job {}

/// Where a worker's completions land.
struct Reply {
    done: Mutex<Vec<Cqe>>,
    efd: OwnedFd,
}

impl Reply {
    fn push(&self, c: Cqe) {
        let was_empty = {
            let mut q = self.done.lock().unwrap_or_else(|e| e.into_inner());
            q.push(c);
            q.len() == 1
        };
        // The worker drains the eventfd before it takes the queue, so one
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
        let r = match job.op {
            // SAFETY: the worker keeps the path and `how` until the
            // completion (`Job`'s Send).
            DiskOp::Open { dir, path, how } => unsafe { open(dir, path, how, 0) },
            // SAFETY: as above, for the buffers.
            op => result(unsafe { read_from(op, job.from, false) }),
        };
        job.reply.push((job.user_data, r, 0));
    }
}

/// Disk operations that would wait go to the process's I/O threads.
pub struct Threads {
    pool: Arc<Pool>,
    reply: Arc<Reply>,
}

impl Threads {
    /// A worker's handle on the pool of `threads` (started by the first
    /// worker), whose queue holds at most `limit` jobs.
    pub fn new(threads: usize, limit: usize) -> Result<Threads, String> {
        Ok(Threads {
            pool: Pool::shared(threads, limit)?,
            reply: Arc::new(Reply {
                done: Mutex::new(Vec::new()),
                efd: crate::sys::new_eventfd()?,
            }),
        })
    }

    fn hand_over(&self, op: DiskOp, from: usize, user_data: u64) {
        self.pool.submit(Job {
            op,
            from,
            user_data,
            reply: self.reply.clone(),
        });
    }
}

impl Disk for Threads {
    unsafe fn submit(&mut self, op: DiskOp, user_data: u64, done: &mut VecDeque<Cqe>) {
        match op {
            DiskOp::Open { dir, path, how } => {
                // SAFETY: passed on from the caller.
                let r = unsafe { open(dir, path, how, libc::RESOLVE_CACHED) };
                if r == -libc::EAGAIN {
                    return self.hand_over(op, 0, user_data);
                }
                done.push_back((user_data, r, 0));
            }
            _ => {
                // Only what `cachestat` finds cached is tried in the loop:
                // a `RWF_NOWAIT` read of a miss still starts the kernel's
                // readahead, in this thread (a fifth more CPU per cold
                // fetch, and the submission may wait for the device's
                // queue).
                if !cached(op) {
                    return self.hand_over(op, 0, user_data);
                }
                // SAFETY: passed on from the caller.
                let p = unsafe { read_from(op, 0, true) };
                // EOPNOTSUPP: the file system cannot say (FUSE, some
                // network file systems); the thread reads.
                if matches!(p.stop, Some(libc::EAGAIN | libc::EOPNOTSUPP)) {
                    return self.hand_over(op, p.got, user_data);
                }
                done.push_back((user_data, result(p), 0));
            }
        }
    }

    fn event_fd(&self) -> Option<RawFd> {
        Some(self.reply.efd.as_raw_fd())
    }

    fn reap(&mut self, done: &mut VecDeque<Cqe>) {
        crate::sys::drain_eventfd(self.reply.efd.as_raw_fd());
        let mut q = self.reply.done.lock().unwrap_or_else(|e| e.into_inner());
        done.extend(q.drain(..));
    }
}

/// Completions taken per `io_getevents`.
const REAP_BATCH: usize = 64;

/// Reads by Linux native AIO; opens in the loop.
pub struct Kaio {
    ctx: linux_aio::Context,
    efd: OwnedFd,
    inflight: usize,
    events: Vec<linux_aio::IoEvent>,
}

impl Kaio {
    /// A context for `depth` reads in flight.
    pub fn new(depth: u32) -> Result<Kaio, String> {
        Ok(Kaio {
            ctx: linux_aio::Context::new(depth).map_err(super::shm::aio_setup_error)?,
            efd: crate::sys::new_eventfd()?,
            inflight: 0,
            events: vec![linux_aio::IoEvent::default(); REAP_BATCH],
        })
    }
}

impl Disk for Kaio {
    unsafe fn submit(&mut self, op: DiskOp, user_data: u64, done: &mut VecDeque<Cqe>) {
        let iocb = match op {
            DiskOp::Open { dir, path, how } => {
                // SAFETY: passed on from the caller.
                let r = unsafe { open(dir, path, how, 0) };
                done.push_back((user_data, r, 0));
                return;
            }
            DiskOp::Read { fd, buf, len, off } => {
                linux_aio::Iocb::pread(fd, buf, len as usize, off, user_data)
            }
            DiskOp::Readv { fd, iov, n, off } => linux_aio::Iocb {
                aio_lio_opcode: linux_aio::IOCB_CMD_PREADV,
                aio_fildes: fd as u32,
                aio_buf: iov as u64,
                aio_nbytes: n as u64,
                aio_offset: off as i64,
                aio_data: user_data,
                ..Default::default()
            },
        };
        let mut iocb = iocb.with_resfd(self.efd.as_raw_fd());
        if self.inflight >= self.ctx.capacity() as usize {
            // The worker keeps its reads within the pool's buffers, which
            // is the context's depth; past it the kernel would refuse.
            done.push_back((user_data, -libc::EAGAIN, 0));
            return;
        }
        // SAFETY: the buffers the iocb names stay valid until its
        // completion (the caller's promise); the kernel copies the iocb
        // (and an iovec array) during the call.
        match unsafe { self.ctx.submit(std::slice::from_mut(&mut iocb)) } {
            Ok(1) => self.inflight += 1,
            Ok(_) => done.push_back((user_data, -libc::EAGAIN, 0)),
            Err(e) => done.push_back((user_data, -e.raw_os_error().unwrap_or(libc::EIO), 0)),
        }
    }

    fn event_fd(&self) -> Option<RawFd> {
        Some(self.efd.as_raw_fd())
    }

    fn reap(&mut self, done: &mut VecDeque<Cqe>) {
        crate::sys::drain_eventfd(self.efd.as_raw_fd());
        while self.inflight > 0 {
            let got =
                match self
                    .ctx
                    .get_events(0, &mut self.events, Some(std::time::Duration::ZERO))
                {
                    Ok(g) => g,
                    Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                    Err(e) => panic!("io_getevents failed: {e}"),
                };
            let n = got.len();
            for ev in got {
                done.push_back((ev.data, ev.res as i32, 0));
            }
            self.inflight -= n;
            if n < REAP_BATCH {
                break;
            }
        }
    }
}
