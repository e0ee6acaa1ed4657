//! Kernel calls both event loops use (and the listing helpers and the
//! main thread): one `sendmsg` of two slices, `sendfile(2)`, eventfds,
//! `errno`, the descriptor limit. Neutral: nothing here knows a loop, a
//! connection or HTTP.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// Largest single `sendfile(2)` call.
pub const MAX_SENDFILE: u64 = 1 << 30;

/// Why a transfer stopped early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// `EAGAIN`: the socket buffer is full.
    Full,
    /// The connection must be dropped.
    Fail,
}

pub fn errno() -> i32 {
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

/// Makes an eventfd readable (adds 1 to its counter).
pub fn signal_eventfd(fd: RawFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live u64 to an eventfd the caller owns.
    unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
}

/// Gives the calling thread a nice value of `niceness` (Linux keeps one
/// per thread): the scheduler then prefers the other threads. Best
/// effort: a failure leaves the thread as it was.
pub fn lower_thread_priority(niceness: i32) {
    // SAFETY: plain gettid(2) and setpriority(2) calls on this thread; no
    // memory is passed.
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, niceness);
    }
}

/// Free memory at the top of a malloc arena that glibc keeps rather than
/// hands back to the kernel. Its default (128 KiB) makes a worker that
/// builds responses of tens of KiB (a small file's bytes after its head)
/// shrink its arena with `madvise` and fault the pages in again on the
/// next response, over and over: 3% of a worker serving the Python
/// documentation gzip-compressed, by perf.
pub const MALLOC_TRIM_THRESHOLD: i32 = 32 << 20;

/// Sets [`MALLOC_TRIM_THRESHOLD`] (which also fixes glibc's mmap threshold
/// at its 128 KiB default). Best effort: another allocator ignores it.
pub fn keep_freed_memory() {
    // SAFETY: mallopt(3) takes two integers and touches only glibc's
    // malloc parameters; called at start, before the workers allocate.
    unsafe { libc::mallopt(libc::M_TRIM_THRESHOLD, MALLOC_TRIM_THRESHOLD) };
}

/// RLIMIT_NOFILE's soft limit (1024 if it cannot be read).
pub fn nofile_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into a live local struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur
    } else {
        1024
    }
}
