//! Thin wrappers around the raw system calls naio needs that `std` does not
//! offer: per-thread CPU clocks, epoll, non-blocking socket calls,
//! `sendfile`, pipes, eventfds, shared memory and `O_DIRECT` files.
//!
//! Every function here is a safe wrapper; the `unsafe` blocks only pass
//! pointers to live locals or to slices borrowed for the duration of the
//! call, so no buffer is referenced by the kernel after the call returns.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn cvt_size(rc: libc::ssize_t) -> io::Result<usize> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into a live local.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU time (user + system) used so far by the calling thread, in ns.
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time (user + system) used so far by the whole process, in ns,
/// from `getrusage(RUSAGE_SELF)`; includes threads that have exited.
pub fn process_cpu_ns() -> u64 {
    // SAFETY: an all-zero rusage is a valid value of a plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes one rusage into a live local.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    if rc != 0 {
        return 0;
    }
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// The kernel thread id of the calling thread.
pub fn gettid() -> i32 {
    // SAFETY: gettid takes no arguments and cannot fail.
    unsafe { libc::gettid() }
}

/// `recv(fd, buf, 0)`: bytes read, 0 at end of stream.
pub fn recv(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: the kernel writes at most buf.len() bytes into the borrowed slice
    // during the call.
    cvt_size(unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) })
}

/// `send(fd, buf, MSG_NOSIGNAL)`.
pub fn send(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: the kernel reads at most buf.len() bytes from the borrowed slice
    // during the call (plain send copies the data before returning).
    cvt_size(unsafe { libc::send(fd, buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL) })
}

/// `sendfile(out, in, &offset, len)`: bytes sent; `offset` is not advanced.
pub fn sendfile(out_fd: RawFd, in_fd: RawFd, offset: u64, len: usize) -> io::Result<usize> {
    let mut off = offset as libc::off_t;
    // SAFETY: `off` is a live local the kernel updates during the call.
    cvt_size(unsafe { libc::sendfile(out_fd, in_fd, &mut off, len) })
}

/// `shutdown(fd, how)`.
pub fn shutdown(fd: RawFd, how: libc::c_int) -> io::Result<()> {
    // SAFETY: shutdown takes no pointers.
    cvt(unsafe { libc::shutdown(fd, how) }).map(|_| ())
}

/// Set or clear `O_NONBLOCK`.
pub fn set_nonblocking(fd: RawFd, on: bool) -> io::Result<()> {
    // SAFETY: fcntl with F_GETFL/F_SETFL takes no pointers.
    let fl = cvt(unsafe { libc::fcntl(fd, libc::F_GETFL) })?;
    let fl = if on {
        fl | libc::O_NONBLOCK
    } else {
        fl & !libc::O_NONBLOCK
    };
    // SAFETY: as above.
    cvt(unsafe { libc::fcntl(fd, libc::F_SETFL, fl) }).map(|_| ())
}

/// An epoll instance.
pub struct Epoll {
    fd: OwnedFd,
}

impl Epoll {
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: epoll_create1 takes no pointers; the returned fd is owned here.
        let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        Ok(Epoll {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, events: u32, data: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: data };
        // SAFETY: `ev` is a live local read by the kernel during the call.
        cvt(unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut ev) }).map(|_| ())
    }

    pub fn add(&self, fd: RawFd, events: u32, data: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, events, data)
    }

    pub fn delete(&self, fd: RawFd) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0)
    }

    /// Waits up to `timeout_ms` (-1: forever); returns the filled prefix.
    /// `EINTR` yields an empty slice.
    pub fn wait<'a>(
        &self,
        events: &'a mut [libc::epoll_event],
        timeout_ms: i32,
    ) -> io::Result<&'a [libc::epoll_event]> {
        // SAFETY: the kernel writes at most events.len() entries into the
        // borrowed slice during the call.
        let rc = unsafe {
            libc::epoll_wait(
                self.fd.as_raw_fd(),
                events.as_mut_ptr(),
                events.len() as libc::c_int,
                timeout_ms,
            )
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(&events[..0]);
            }
            return Err(e);
        }
        Ok(&events[..rc as usize])
    }
}

/// An empty `epoll_event` array element.
pub fn epoll_event_zero() -> libc::epoll_event {
    libc::epoll_event { events: 0, u64: 0 }
}

/// A pipe whose capacity is raised to at least `want` bytes (up to the
/// system's `fs.pipe-max-size`). Returns (read end, write end, capacity).
pub fn pipe_with_capacity(want: usize) -> io::Result<(OwnedFd, OwnedFd, usize)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two descriptors into a live local array.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: both descriptors are fresh and owned from here on.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: F_SETPIPE_SZ/F_GETPIPE_SZ take an integer, no pointers.
    let cap = unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETPIPE_SZ, want as libc::c_int) };
    let cap = if cap < 0 {
        // SAFETY: as above.
        cvt(unsafe { libc::fcntl(w.as_raw_fd(), libc::F_GETPIPE_SZ) })?
    } else {
        cap
    };
    Ok((r, w, cap as usize))
}

/// An eventfd (non-blocking, close-on-exec).
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd takes no pointers; the fd is owned from here on.
    let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
    // SAFETY: fresh descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Reads and resets an eventfd counter; 0 when it was not signalled.
pub fn eventfd_drain(fd: RawFd) -> io::Result<u64> {
    let mut v = 0u64;
    // SAFETY: reads 8 bytes into a live local.
    let rc = unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::WouldBlock {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(v)
}

/// Opens `path` read-only with `O_DIRECT`.
pub fn open_direct(path: &Path) -> io::Result<OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)?;
    Ok(OwnedFd::from(f))
}

/// A shared, writable mapping of a file in `/dev/shm` (the lighttpd
/// linux-aio-sendfile buffer). The file is unlinked at once; the descriptor
/// stays open for `sendfile` and hole punching.
pub struct ShmBuf {
    fd: OwnedFd,
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is owned by this value and only reached through it.
unsafe impl Send for ShmBuf {}

impl ShmBuf {
    pub fn new(dir: &Path, tag: &str, len: usize) -> io::Result<ShmBuf> {
        let path = dir.join(format!("naio-{}-{tag}", std::process::id()));
        let cpath = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in shm path"))?;
        // SAFETY: `cpath` is a live NUL-terminated string for the call.
        let fd = cvt(unsafe {
            libc::open(
                cpath.as_ptr(),
                libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
                0o600,
            )
        })?;
        // SAFETY: fresh descriptor, owned from here on.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: `cpath` is live; the file stays reachable through `fd`.
        unsafe { libc::unlink(cpath.as_ptr()) };
        // SAFETY: ftruncate takes no pointers.
        cvt(unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) })?;
        // SAFETY: maps `len` bytes of a file we own; unmapped in Drop.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(ShmBuf {
            fd,
            ptr: ptr.cast(),
            len,
        })
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Address of byte `off` of the mapping (`off < len`).
    pub fn addr(&self, off: usize) -> *mut u8 {
        assert!(off < self.len);
        self.ptr.wrapping_add(off)
    }

    /// Drops the pages behind `[off, off+len)` from the shm file, so the next
    /// write there lands in fresh pages. Pages still referenced by socket
    /// buffers (sendfile passes page references, not copies) keep their old
    /// contents until the network stack lets go of them.
    pub fn punch(&self, off: usize, len: usize) -> io::Result<()> {
        // SAFETY: fallocate takes no pointers.
        cvt(unsafe {
            libc::fallocate(
                self.fd.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                off as libc::off_t,
                len as libc::off_t,
            )
        })
        .map(|_| ())
    }
}

impl Drop for ShmBuf {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`; the AIO context
        // that wrote into it is dropped before this value (see send.rs).
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// Anonymous, page-aligned, zeroed memory (for io_uring buffer rings).
pub struct AnonMap {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is owned by this value and only reached through it.
unsafe impl Send for AnonMap {}

impl AnonMap {
    pub fn new(len: usize) -> io::Result<AnonMap> {
        // SAFETY: a fresh private anonymous mapping; unmapped in Drop.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(AnonMap {
            ptr: ptr.cast(),
            len,
        })
    }

    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }
}

impl Drop for AnonMap {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`; owners drop the
        // io_uring that referenced it first.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// Moves the calling thread into the network namespace at `path`
/// (e.g. `/run/netns/NAME`). Only the calling thread changes namespace.
pub fn setns_net(path: &Path) -> io::Result<()> {
    let f = std::fs::File::open(path)?;
    // SAFETY: setns takes a descriptor we hold open for the call.
    cvt(unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) }).map(|_| ())
}
