//! Pipes that carry file pages to a socket without copying them.
//!
//! The io-uring backend sends what missed the page cache this way (see
//! `Tx::pipe` in backend/uring.rs): an io_uring `SPLICE` moves references
//! to the file's pages into a pipe, waiting for the disk in an io-wq
//! thread rather than in the worker; then `splice(2)` moves them on from
//! the pipe to the socket. The pages are uptodate once they are in the
//! pipe, so that second step never waits for the disk. Neither step copies
//! file bytes; a `READ` into a buffer would copy each one once more.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// The smallest pipe worth splicing through. The kernel gives a pipe 64 KiB
/// by default, and shrinks new ones to two pages once a user holds more
/// than `fs.pipe-user-pages-soft`; such a pipe would take an io-wq round
/// trip per 8 KiB, and the caller reads into a buffer instead.
pub const PIPE_MIN: usize = 64 * 1024;

/// A non-blocking pipe, both ends.
pub struct Pipe {
    r: OwnedFd,
    w: OwnedFd,
    cap: usize,
}

impl Pipe {
    /// A pipe that holds up to `want` bytes, or as many as the kernel allows
    /// (`fs.pipe-max-size`, 1 MiB by default, binds all but root). `None`
    /// when no pipe of at least [`PIPE_MIN`] can be had (out of
    /// descriptors, or over the per-user pipe budget).
    pub fn new(want: usize) -> Option<Pipe> {
        let mut fds = [0; 2];
        // SAFETY: `fds` is a live array of two c_ints the kernel fills in
        // during the call.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } != 0 {
            return None;
        }
        // SAFETY: pipe2 succeeded, so both descriptors are open and ours
        // alone.
        let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let mut size = want.max(PIPE_MIN).next_power_of_two();
        while size >= PIPE_MIN {
            // SAFETY: fcntl on a descriptor we own; no memory is passed.
            let got =
                unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETPIPE_SZ, size as libc::c_int) };
            if got >= PIPE_MIN as libc::c_int {
                return Some(Pipe {
                    r,
                    w,
                    cap: got as usize,
                });
            }
            size /= 2;
        }
        None
    }

    /// How many bytes the pipe holds when full, for page-aligned data.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// The write end, for the `SPLICE` that fills the pipe.
    pub fn write_fd(&self) -> RawFd {
        self.w.as_raw_fd()
    }

    /// Moves up to `len` bytes from the pipe to `sock` without blocking
    /// (`MSG_MORE` with `more`). `Err(errno)`; `EAGAIN` when the socket is
    /// full.
    pub fn drain_to(&self, sock: RawFd, len: usize, more: bool) -> Result<usize, i32> {
        let mut flags = libc::SPLICE_F_NONBLOCK;
        if more {
            flags |= libc::SPLICE_F_MORE;
        }
        loop {
            // SAFETY: no memory is passed (both offsets are null); the
            // kernel moves page references between two descriptors.
            let rc = unsafe {
                libc::splice(
                    self.r.as_raw_fd(),
                    std::ptr::null_mut(),
                    sock,
                    std::ptr::null_mut(),
                    len,
                    flags,
                )
            };
            if rc >= 0 {
                return Ok(rc as usize);
            }
            match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(e) => return Err(e),
                None => return Err(libc::EIO),
            }
        }
    }
}
