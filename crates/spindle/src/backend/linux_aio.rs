//! `linux-aio-sendfile`: the seed's own design (lighttpd 1.5), done the way
//! the blog describes, without its SIGUSR1 thread hack.
//!
//! Per worker there is one shared-memory file in `/dev/shm`, `mmap`ed: it
//! *is* the buffer pool, cut into slots of `--chunk-size` bytes. A chunk of
//! a file is read with Linux native AIO (`io_submit` of an `O_DIRECT`
//! `IOCB_CMD_PREAD`, through `crates/linux-aio`) into a slot through the
//! mapping, and then `sendfile(2)` sends it from the shm file at the slot's
//! offset to the socket: the data moves from the disk to tmpfs pages by
//! DMA and from there to the socket by page reference, and never passes
//! through user space. At most `--max-inflight` reads are in the kernel at
//! once (one per slot; the mapping is capped at [`MAX_SHM_BYTES`] per
//! worker, which can only lower that). Completions reach the event loop
//! through an eventfd named in each iocb with `IOCB_FLAG_RESFD` and
//! registered in the loop's epoll set; the loop reaps them with a
//! non-blocking `io_getevents`. The heads go out with `MSG_MORE` right
//! before the first `sendfile`, so they share its first segment.
//!
//! Opens are synchronous in the loop (`openat2` + `fstat`), as they were in
//! lighttpd 1.5: native AIO has no asynchronous open. A chunk whose pages
//! are all in the page cache already (`cachestat(2)`) is sent straight
//! from the file with `sendfile`, as `linux-sendfile` would: an `O_DIRECT`
//! read would fetch it from the disk again.
//!
//! Kernel behaviour relied on:
//! - `O_DIRECT` AIO reads are truly asynchronous (buffered AIO reads block
//!   in `io_submit`). They need the file offset, the length and the buffer
//!   address aligned to the logical block size; [`DIO_ALIGN`] = 4096 covers
//!   every common device. A range that starts mid-block is read from the
//!   aligned offset below it, and sent from the right offset inside the
//!   slot; a file's tail is read with its length rounded up, and the kernel
//!   stops the transfer at end of file, so only real bytes are sent.
//! - The `O_DIRECT` descriptor is a second open of the same file, by
//!   reopening `/proc/self/fd/N` (the very inode already checked, no path
//!   race); the first stays buffered for `cachestat` and the cached path.
//!   A file system that refuses `O_DIRECT` (`EINVAL`: some FUSE mounts,
//!   older tmpfs) is logged once and remembered by `st_dev`; its files are
//!   then read through the same AIO path without `O_DIRECT`, which the
//!   kernel performs synchronously inside `io_submit`.
//! - `sendfile` from tmpfs to TCP does not copy: the socket holds
//!   references to the shm pages until the peer has acknowledged them. A
//!   slot is therefore never read into again while the socket may still
//!   refer to its pages: after its bytes are handed to the socket, its
//!   range of the shm file is hole-punched (`fallocate(PUNCH_HOLE)`). The
//!   socket keeps the old pages alive, detached from the file, and the
//!   next read into the slot faults in fresh ones.
//! - The shm file is created with `O_TMPFILE`, so it never has a name and
//!   nothing is left behind however the process ends (SIGKILL included);
//!   where `O_TMPFILE` is unsupported it gets a unique name that is
//!   unlinked right after `mmap`. The memory goes with the last reference:
//!   the mapping is removed when the worker returns (which it does after
//!   draining on SIGTERM), after `io_destroy` has waited for every read in
//!   flight.
//! - A read that returns less than asked (end of file moved) sends what it
//!   got; one that returns nothing new means the file shrank, and the
//!   connection is dropped.

use std::collections::VecDeque;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use linux_aio::{Context, IoEvent, Iocb};
use spindle_core::OpenRequest;

use super::epoll::{self, Completion, Mover, Opened, Progress, ReadState, Sock, Tx};
use super::WorkerContext;
use crate::conn::Ticket;
use crate::fs::{self, Roots};
use crate::metrics::{ReadMode, WorkerMetrics};

/// Where the buffer files live.
pub const SHM_DIR: &str = "/dev/shm";
/// Alignment of `O_DIRECT` offsets, lengths and buffers.
pub const DIO_ALIGN: u64 = 4096;
/// Most shared memory one worker maps for its slots.
pub const MAX_SHM_BYTES: u64 = 256 << 20;
/// Completions taken per `io_getevents`.
const REAP_BATCH: usize = 64;

/// File systems (by `st_dev`) that refused `O_DIRECT`; each is logged once
/// per process.
static NO_DIRECT: Mutex<Vec<u64>> = Mutex::new(Vec::new());

/// The `mmap`ed shm file.
struct Shm {
    fd: OwnedFd,
    base: *mut u8,
    len: usize,
}

impl Shm {
    fn new(len: usize, worker: usize) -> Result<Shm, String> {
        let dir = CString::new(SHM_DIR).expect("no NUL");
        // SAFETY: open(2) of a NUL-terminated path; no other memory.
        let raw = unsafe {
            libc::open(
                dir.as_ptr(),
                libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC,
                0o600,
            )
        };
        let (raw, name) = if raw >= 0 {
            (raw, None)
        } else {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let name = CString::new(format!(
                "{SHM_DIR}/spindle-aio-{}-{worker}-{nanos}",
                std::process::id()
            ))
            .expect("no NUL");
            // SAFETY: as above.
            let raw = unsafe {
                libc::open(
                    name.as_ptr(),
                    libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_CLOEXEC,
                    0o600,
                )
            };
            if raw < 0 {
                return Err(format!(
                    "cannot create a buffer file in {SHM_DIR}: {}",
                    std::io::Error::last_os_error()
                ));
            }
            (raw, Some(name))
        };
        // SAFETY: a fresh descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let unlink = |name: &Option<CString>| {
            if let Some(n) = name {
                // SAFETY: unlink(2) of a NUL-terminated path.
                unsafe { libc::unlink(n.as_ptr()) };
            }
        };
        // SAFETY: ftruncate on a descriptor we own.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } < 0 {
            let e = std::io::Error::last_os_error();
            unlink(&name);
            return Err(format!(
                "cannot size a {len}-byte buffer file in {SHM_DIR}: {e}"
            ));
        }
        // SAFETY: maps `len` bytes of a file we own and just sized; the
        // mapping is only ever unmapped in Drop.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        // Nothing is left behind from here on, however the process ends.
        unlink(&name);
        if base == libc::MAP_FAILED {
            return Err(format!(
                "cannot map the buffer file: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(Shm {
            fd,
            base: base.cast(),
            len,
        })
    }

    /// Drops the pages of `[off, off + len)` from the file. Anything that
    /// still refers to them (a socket's send queue) keeps them; the next
    /// access through the mapping gets new zeroed pages.
    fn punch(&self, off: u64, len: u64) {
        // SAFETY: fallocate on a descriptor we own; no memory passed.
        let rc = unsafe {
            libc::fallocate(
                self.fd.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                off as libc::off_t,
                len as libc::off_t,
            )
        };
        // tmpfs has supported hole punching since Linux 3.5; without it, a
        // slot's pages could be overwritten under a socket, so stop.
        assert!(
            rc == 0,
            "punching the shm buffer failed: {}",
            std::io::Error::last_os_error()
        );
    }
}

impl Drop for Shm {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`; LinuxAio drops
        // its AIO context (which waits for every read) before this.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// A finished read into a slot.
pub struct Chunk {
    slot: u32,
    res: i64,
}

/// Per response.
#[derive(Default)]
pub struct State {
    /// The slot held (between a read's submission and the end of sending).
    slot: Option<u32>,
    read: ReadState,
    /// Unsent bytes of the slot: their offset in the shm file, and count.
    data_off: u64,
    data_left: u64,
    /// Whether the slot's pages were handed to the socket.
    pages: Pages,
    /// Of the read in flight: real bytes start `skew` into the slot, and
    /// `want` of them belong to the response.
    skew: u64,
    want: u64,
    /// The `O_DIRECT` reopen of the file.
    direct: Reopen,
}

/// Whether a slot's pages were handed to the socket (`sendfile` from the
/// shm file): such a slot is cleaned before reuse (`free_slot`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Pages {
    #[default]
    Clean,
    Handed,
}

/// The `O_DIRECT` reopen of a response's file.
#[derive(Debug, Default)]
enum Reopen {
    #[default]
    Untried,
    Direct(OwnedFd),
    /// The file system refuses `O_DIRECT`: reads go through the original.
    Refused,
}

pub struct LinuxAio {
    // Field order is drop order: the AIO context first (io_destroy waits
    // for reads in flight), then the mapping they write into.
    ctx: Context,
    shm: Shm,
    efd: OwnedFd,
    root: std::sync::Arc<Roots>,
    slot_size: u64,
    free: Vec<u32>,
    /// The response each read in flight belongs to, by slot.
    owner: Vec<Option<Ticket>>,
    waiters: VecDeque<Ticket>,
    inflight: usize,
    events: Vec<IoEvent>,
    /// When each slot's read in flight was submitted (metrics).
    started: Vec<Instant>,
    metrics: std::sync::Arc<WorkerMetrics>,
}

impl LinuxAio {
    fn free_slot(&mut self, slot: u32, dirty: bool) {
        if dirty {
            self.punch(slot);
        }
        self.free.push(slot);
    }

    fn punch(&self, slot: u32) {
        self.shm.punch(slot as u64 * self.slot_size, self.slot_size);
    }

    /// Pump step 1: the head (corked), then the slot's bytes by
    /// `sendfile` from the shared memory, as far as the allowance and the
    /// socket take them. The bytes sent, or how the response goes on.
    fn send_slot(&mut self, sock: &mut Sock, tx: &mut Tx, st: &mut State) -> Result<u64, Progress> {
        if tx.left == 0 {
            epoll::last_bytes_ok(tx)?;
        }
        if tx.budget == 0 {
            // --limit-rate: this turn's allowance is spent.
            return Err(Progress::Yield);
        }
        epoll::send_head(sock, tx, true).map_err(Progress::from)?;
        let mut off = st.data_off;
        let want = st.data_left.min(tx.budget);
        let n = match crate::sys::sendfile(sock.fd, self.shm.fd.as_raw_fd(), &mut off, want) {
            Ok(0) => return Err(Progress::Fail),
            Ok(n) => n as u64,
            Err(libc::EAGAIN) => return Err(Progress::SocketFull),
            Err(_) => return Err(Progress::Fail),
        };
        st.pages = Pages::Handed;
        st.data_off += n;
        st.data_left -= n;
        tx.body_sent += n;
        tx.budget = tx.budget.saturating_sub(n);
        if st.data_left == 0 {
            let slot = st.slot.expect("slot with data");
            if tx.left > 0 && self.waiters.is_empty() {
                // Keep it for the next chunk, cleaned.
                self.punch(slot);
            } else {
                st.slot = None;
                self.free_slot(slot, st.pages == Pages::Handed);
            }
            st.pages = Pages::Clean;
        }
        Ok(n)
    }

    /// Pump step 3b: an `O_DIRECT` read of the next chunk into `slot`,
    /// submitted to the AIO context; its completion goes on.
    fn read_slot(&mut self, who: Ticket, tx: &mut Tx, st: &mut State, slot: u32) -> Progress {
        st.slot = Some(slot);
        let fd = Self::read_fd(tx, st);
        let aligned = tx.off & !(DIO_ALIGN - 1);
        let skew = tx.off - aligned;
        let want = tx.left.min(self.slot_size - skew);
        let len = (skew + want).div_ceil(DIO_ALIGN) * DIO_ALIGN;
        debug_assert!(len <= self.slot_size);
        let start = slot as u64 * self.slot_size;
        // SAFETY: `start + len` lies inside the mapping (slot < slots,
        // len <= slot_size), so the pointer stays in bounds.
        let buf = unsafe { self.shm.base.add(start as usize) };
        let mut cb = [Iocb::pread(fd, buf, len as usize, aligned, slot as u64)
            .with_resfd(self.efd.as_raw_fd())];
        tx.outcome = "direct";
        // SAFETY: the kernel writes `len` bytes at `buf`, inside the
        // slot this response holds; the slot is not handed out again
        // until the read's completion has been reaped (`owner`), and the
        // mapping outlives the context (field drop order), whose
        // io_destroy waits for reads in flight.
        match unsafe { self.ctx.submit(&mut cb) } {
            Ok(1) => {}
            Ok(_) => {
                crate::error!("io_submit accepted no read; closing the connection");
                return Progress::Fail;
            }
            Err(e) => {
                crate::error!("io_submit failed: {e}; closing the connection");
                return Progress::Fail;
            }
        }
        self.owner[slot as usize] = Some(who);
        self.inflight += 1;
        // A clock read per disk read (vDSO, no system call).
        self.started[slot as usize] = Instant::now();
        self.metrics
            .disk_read(if matches!(st.direct, Reopen::Direct(_)) {
                ReadMode::Direct
            } else {
                ReadMode::PageCache
            });
        st.read = ReadState::InFlight;
        st.skew = skew;
        st.want = want;
        Progress::Waiting
    }

    /// The descriptor to read `tx`'s file through: its `O_DIRECT` reopen,
    /// or the buffered original where the file system refuses `O_DIRECT`.
    fn read_fd(tx: &Tx, st: &mut State) -> RawFd {
        let file = tx.file.as_ref().expect("file for body").as_raw_fd();
        if let Reopen::Untried = st.direct {
            st.direct = match reopen_direct(file) {
                Some(d) => Reopen::Direct(d),
                None => Reopen::Refused,
            };
        }
        match &st.direct {
            Reopen::Direct(d) => d.as_raw_fd(),
            _ => file,
        }
    }
}

fn dev_of(fd: RawFd) -> Option<u64> {
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a live, writable stat buffer for the duration of the call.
    if unsafe { libc::fstat(fd, &mut st) } < 0 {
        return None;
    }
    Some(st.st_dev)
}

/// Opens the file behind `fd` again, with `O_DIRECT`. `None` (after
/// logging once per file system) when that is refused.
fn reopen_direct(fd: RawFd) -> Option<OwnedFd> {
    let dev = dev_of(fd)?;
    if NO_DIRECT
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(&dev)
    {
        return None;
    }
    let path = CString::new(format!("/proc/self/fd/{fd}")).expect("no NUL");
    // SAFETY: open(2) of a NUL-terminated path; no other memory.
    let raw = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECT | libc::O_CLOEXEC,
        )
    };
    if raw >= 0 {
        // SAFETY: a fresh descriptor nothing else owns.
        return Some(unsafe { OwnedFd::from_raw_fd(raw) });
    }
    let e = std::io::Error::last_os_error();
    let mut no = NO_DIRECT.lock().unwrap_or_else(|e| e.into_inner());
    if !no.contains(&dev) {
        no.push(dev);
        let why = if e.raw_os_error() == Some(libc::EINVAL) {
            "the file system refuses O_DIRECT".to_string()
        } else {
            format!("reopening a file with O_DIRECT failed: {e}")
        };
        crate::warn!(
            "linux-aio-sendfile: device {}:{}: {why}; reading its files with buffered AIO instead (those reads block the event loop)",
            libc::major(dev),
            libc::minor(dev)
        );
    }
    None
}

impl Mover for LinuxAio {
    type State = State;
    type Chunk = Chunk;

    fn new(ctx: &WorkerContext) -> Result<Self, String> {
        let cfg = &ctx.cfg;
        let slot_size = cfg.chunk_size;
        debug_assert_eq!(
            slot_size % DIO_ALIGN,
            0,
            "config keeps chunk-size a multiple of 4096"
        );
        let slots = (cfg.max_inflight as u64)
            .min(MAX_SHM_BYTES / slot_size)
            .max(1);
        let aio = Context::new(slots as u32).map_err(aio_setup_error)?;
        let shm = Shm::new((slots * slot_size) as usize, ctx.id)?;
        Ok(LinuxAio {
            ctx: aio,
            shm,
            efd: crate::sys::new_eventfd()?,
            root: ctx.root.clone(),
            slot_size,
            free: (0..slots as u32).rev().collect(),
            owner: vec![None; slots as usize],
            waiters: VecDeque::new(),
            inflight: 0,
            events: vec![IoEvent::default(); REAP_BATCH],
            started: vec![Instant::now(); slots as usize],
            metrics: ctx.metrics.clone(),
        })
    }

    fn completion_fd(&self) -> Option<RawFd> {
        Some(self.efd.as_raw_fd())
    }

    fn open(&mut self, _who: Ticket, req: &OpenRequest) -> Opened {
        // Synchronous, as in lighttpd 1.5: native AIO cannot open files.
        Opened::Now(epoll::open_sync(&self.root, req))
    }

    fn set_roots(&mut self, roots: std::sync::Arc<Roots>) {
        self.root = roots;
    }

    fn pump(&mut self, who: Ticket, sock: &mut Sock, tx: &mut Tx, st: &mut State) -> Progress {
        let mut turn = 0u64;
        loop {
            if let Some(p) = st.read.stop() {
                return p;
            }
            // 1. Bytes in the slot: head (corked), then sendfile from shm.
            if st.data_left > 0 {
                match self.send_slot(sock, tx, st) {
                    Ok(n) => turn += n,
                    Err(p) => return p,
                }
                continue;
            }
            // 2. The head alone, a read to wait for, or the turn's end.
            if let Some(p) =
                epoll::between_chunks(sock, tx, st.read.in_flight(), turn >= self.slot_size)
            {
                return p;
            }
            // 3. The next chunk: straight from the page cache if it is all
            // there, else an O_DIRECT read into a slot.
            let n = self.slot_size.min(tx.left);
            let file = tx.file.as_ref().expect("file for body").as_raw_fd();
            if fs::range_cached(file, tx.off, n) == Some(true) {
                if let Err(s) = epoll::sendfile_range(sock, tx, file, n) {
                    return s;
                }
                turn += n;
                continue;
            }
            let slot = match st.slot.or_else(|| self.free.pop()) {
                Some(s) => s,
                None => {
                    self.waiters.push_back(who);
                    return Progress::Waiting;
                }
            };
            return self.read_slot(who, tx, st, slot);
        }
    }

    fn reap(&mut self, out: &mut Vec<(Ticket, Completion<Chunk>)>) {
        crate::sys::drain_eventfd(self.efd.as_raw_fd());
        while self.inflight > 0 {
            let got = match self
                .ctx
                .get_events(0, &mut self.events, Some(Duration::ZERO))
            {
                Ok(g) => g,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => panic!("io_getevents failed: {e}"),
            };
            let n = got.len();
            let now = Instant::now();
            for ev in got {
                let slot = ev.data as u32;
                let who = self.owner[slot as usize]
                    .take()
                    .expect("completion for an idle slot");
                self.inflight -= 1;
                self.metrics
                    .disk_read_done(now.saturating_duration_since(self.started[slot as usize]));
                out.push((who, Completion::Chunk(Chunk { slot, res: ev.res })));
            }
            if n < REAP_BATCH {
                break;
            }
        }
    }

    fn chunk_done(&mut self, tx: &mut Tx, st: &mut State, chunk: Chunk) {
        debug_assert_eq!(st.slot, Some(chunk.slot));
        st.read = ReadState::Idle;
        if chunk.res < 0 {
            st.read = ReadState::Failed(-chunk.res as i32);
            return;
        }
        let got = chunk.res as u64;
        if got <= st.skew {
            crate::conn::policy::truncated();
            st.read = ReadState::Truncated;
            return;
        }
        let avail = (got - st.skew).min(st.want);
        st.data_off = chunk.slot as u64 * self.slot_size + st.skew;
        st.data_left = avail;
        tx.off += avail;
        tx.left -= avail;
    }

    fn discard(&mut self, chunk: Chunk) {
        // Read into fresh pages and never sent from: free as it is.
        self.free.push(chunk.slot);
    }

    fn release(&mut self, st: &mut State) {
        if let Some(slot) = st.slot.take() {
            if !st.read.in_flight() {
                self.free_slot(slot, st.pages == Pages::Handed);
            }
            // A read in flight: the slot is freed when it is reaped.
        }
        // Everything else belongs to this response too, the O_DIRECT
        // reopen included: the next response on the connection starts from
        // scratch and reopens its own file (left "tried", it would read
        // through the buffered descriptor, and a buffered AIO read waits
        // for the disk inside io_submit).
        *st = State::default();
    }

    fn next_waiter(&mut self) -> Option<Ticket> {
        if self.free.is_empty() {
            return None;
        }
        self.waiters.pop_front()
    }

    fn in_flight(&self) -> usize {
        self.inflight
    }
}

fn aio_setup_error(e: std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ENOSYS) => "native AIO is not available in this kernel (CONFIG_AIO); choose another --backend".into(),
        Some(libc::EAGAIN) => format!(
            "io_setup: {e}; the system-wide AIO limit is exhausted (raise sysctl fs.aio-max-nr, or lower --max-inflight)"
        ),
        _ => format!("io_setup: {e}"),
    }
}

/// Checks that native AIO and a buffer file in /dev/shm are available.
pub fn probe() -> Result<(), String> {
    Context::new(1).map_err(aio_setup_error)?;
    Shm::new(DIO_ALIGN as usize, usize::MAX).map(drop)
}
