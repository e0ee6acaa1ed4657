//! Minimal bindings to Linux native AIO (`io_setup(2)`, `io_submit(2)`,
//! `io_getevents(2)`, `io_cancel(2)`, `io_destroy(2)`).
//!
//! The ABI below is written out by hand from `include/uapi/linux/aio_abi.h`;
//! no GPL code or `libaio` is involved. Native AIO is only truly asynchronous
//! for `O_DIRECT` file reads and writes (buffered reads block inside
//! `io_submit`) and for `IOCB_CMD_POLL` (Linux 4.18+), which is exactly the
//! subset spindle uses: the `linux-aio-sendfile` backend, pipetest's
//! `aio-poll` model and naio's `linux-aio-sendfile` sender.
//!
//! Safety model: the kernel writes into the buffer named by an [`Iocb`] at
//! some later time. [`Context::submit`] is therefore `unsafe`: the caller
//! promises the buffer (and the iocb itself, until `io_submit` returns)
//! stay valid until the matching [`IoEvent`] has been reaped or the
//! context has been destroyed (`io_destroy` waits for in-flight I/O).

use std::io;
use std::time::Duration;

/// `aio_context_t` from the kernel ABI.
pub type AioContext = libc::c_ulong;

pub const IOCB_CMD_PREAD: u16 = 0;
pub const IOCB_CMD_PWRITE: u16 = 1;
pub const IOCB_CMD_FSYNC: u16 = 2;
pub const IOCB_CMD_FDSYNC: u16 = 3;
pub const IOCB_CMD_POLL: u16 = 5;
pub const IOCB_CMD_NOOP: u16 = 6;
pub const IOCB_CMD_PREADV: u16 = 7;
pub const IOCB_CMD_PWRITEV: u16 = 8;

/// Ask the kernel to signal `aio_resfd` (an eventfd) when this iocb completes.
pub const IOCB_FLAG_RESFD: u32 = 1 << 0;
pub const IOCB_FLAG_IOPRIO: u32 = 1 << 1;

/// `struct iocb` (little-endian layout: `aio_key` precedes `aio_rw_flags`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Iocb {
    pub aio_data: u64,
    #[cfg(target_endian = "little")]
    pub aio_key: u32,
    #[cfg(target_endian = "little")]
    pub aio_rw_flags: i32,
    #[cfg(target_endian = "big")]
    pub aio_rw_flags: i32,
    #[cfg(target_endian = "big")]
    pub aio_key: u32,
    pub aio_lio_opcode: u16,
    pub aio_reqprio: i16,
    pub aio_fildes: u32,
    pub aio_buf: u64,
    pub aio_nbytes: u64,
    pub aio_offset: i64,
    pub aio_reserved2: u64,
    pub aio_flags: u32,
    pub aio_resfd: u32,
}

const _: () = assert!(std::mem::size_of::<Iocb>() == 64);

impl Iocb {
    /// A positional read of `len` bytes at `offset` into `buf`.
    pub fn pread(fd: i32, buf: *mut u8, len: usize, offset: u64, data: u64) -> Iocb {
        Iocb {
            aio_data: data,
            aio_lio_opcode: IOCB_CMD_PREAD,
            aio_fildes: fd as u32,
            aio_buf: buf as u64,
            aio_nbytes: len as u64,
            aio_offset: offset as i64,
            ..Default::default()
        }
    }

    /// A one-shot poll for `events` (`POLLIN`, `POLLOUT`, ...) on `fd`.
    /// The completion's `res` holds the ready mask.
    pub fn poll(fd: i32, events: i16, data: u64) -> Iocb {
        Iocb {
            aio_data: data,
            aio_lio_opcode: IOCB_CMD_POLL,
            aio_fildes: fd as u32,
            aio_buf: events as u16 as u64,
            ..Default::default()
        }
    }

    /// Signal `eventfd` when this request completes.
    pub fn with_resfd(mut self, eventfd: i32) -> Iocb {
        self.aio_flags |= IOCB_FLAG_RESFD;
        self.aio_resfd = eventfd as u32;
        self
    }
}

/// `struct io_event`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct IoEvent {
    /// The `aio_data` of the completed iocb.
    pub data: u64,
    /// The address of the completed iocb.
    pub obj: u64,
    /// Bytes transferred, or a negative errno.
    pub res: i64,
    pub res2: i64,
}

const _: () = assert!(std::mem::size_of::<IoEvent>() == 32);

/// An AIO context: the kernel's completion ring for up to `nr_events`
/// requests in flight. Destroyed (after in-flight requests finish) on drop.
#[derive(Debug)]
pub struct Context {
    ctx: AioContext,
    nr_events: u32,
}

impl Context {
    /// `io_setup(nr_events)`. Fails with `EAGAIN` when `fs.aio-max-nr` is
    /// exhausted and `ENOSYS` when the kernel lacks AIO.
    pub fn new(nr_events: u32) -> io::Result<Context> {
        let mut ctx: AioContext = 0;
        // SAFETY: io_setup writes one aio_context_t through the pointer, which
        // points at a live local.
        let rc = unsafe { libc::syscall(libc::SYS_io_setup, nr_events as libc::c_long, &mut ctx) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Context { ctx, nr_events })
    }

    /// How many requests the context was sized for.
    pub fn capacity(&self) -> u32 {
        self.nr_events
    }

    /// The raw context id.
    pub fn raw(&self) -> AioContext {
        self.ctx
    }

    /// `io_submit`: returns how many iocbs the kernel accepted (which may be
    /// fewer than given; the rest were not started).
    ///
    /// # Safety
    /// Every buffer named by the iocbs must stay valid, and not be moved or
    /// reused, until its completion has been reaped with [`Context::get_events`]
    /// or this context is dropped. The iocbs themselves need only live for
    /// the duration of the call.
    pub unsafe fn submit(&self, iocbs: &mut [Iocb]) -> io::Result<usize> {
        if iocbs.is_empty() {
            return Ok(0);
        }
        let mut ptrs: Vec<*mut Iocb> = iocbs.iter_mut().map(|c| c as *mut Iocb).collect();
        // SAFETY: `ptrs` points at iocbs that are alive for this call; the
        // kernel copies them during io_submit. Buffer lifetime is the caller's
        // promise (see the function's contract).
        let rc = unsafe {
            libc::syscall(
                libc::SYS_io_submit,
                self.ctx,
                ptrs.len() as libc::c_long,
                ptrs.as_mut_ptr(),
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(rc as usize)
    }

    /// `io_getevents`: waits for at least `min` completions (up to
    /// `events.len()`), or until `timeout` passes (`None` waits forever).
    /// Returns the filled prefix of `events`. `EINTR` is returned as an error.
    pub fn get_events<'a>(
        &self,
        min: usize,
        events: &'a mut [IoEvent],
        timeout: Option<Duration>,
    ) -> io::Result<&'a [IoEvent]> {
        let ts = timeout.map(|d| libc::timespec {
            tv_sec: d.as_secs() as libc::time_t,
            tv_nsec: d.subsec_nanos() as libc::c_long,
        });
        let ts_ptr = ts
            .as_ref()
            .map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: the kernel writes at most `events.len()` io_event structs
        // into `events`, which is a live, exclusively borrowed slice; `ts_ptr`
        // is null or points at a live local.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_io_getevents,
                self.ctx,
                min as libc::c_long,
                events.len() as libc::c_long,
                events.as_mut_ptr(),
                ts_ptr,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(&events[..rc as usize])
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: io_destroy waits for (or cancels) every in-flight request
        // before it returns, so no buffer is written after this point.
        unsafe {
            libc::syscall(libc::SYS_io_destroy, self.ctx);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    #[test]
    fn pread_and_poll_round_trip() {
        let ctx = Context::new(8).expect("io_setup");
        let mut f = tempfile_in_tmp();
        f.write_all(b"hello, aio").unwrap();
        let mut buf = vec![0u8; 10];
        let mut cbs = [Iocb::pread(f.as_raw_fd(), buf.as_mut_ptr(), 10, 0, 7)];
        // SAFETY: `buf` outlives the get_events call below, which reaps the read.
        let n = unsafe { ctx.submit(&mut cbs) }.unwrap();
        assert_eq!(n, 1);
        let mut evs = [IoEvent::default(); 4];
        let got = ctx.get_events(1, &mut evs, None).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].data, 7);
        assert_eq!(got[0].res, 10);
        assert_eq!(&buf, b"hello, aio");

        let mut fds = [0i32; 2];
        // SAFETY: pipe writes two fds into a live array.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let mut cbs = [Iocb::poll(fds[0], libc::POLLIN, 9)];
        // SAFETY: a poll iocb names no buffer.
        unsafe { ctx.submit(&mut cbs) }.unwrap();
        let none = ctx
            .get_events(0, &mut evs, Some(Duration::from_millis(10)))
            .unwrap();
        assert!(none.is_empty(), "poll completed before data arrived");
        // SAFETY: writes one byte from a live static buffer.
        assert_eq!(unsafe { libc::write(fds[1], b"x".as_ptr().cast(), 1) }, 1);
        let got = ctx.get_events(1, &mut evs, None).unwrap();
        assert_eq!(got[0].data, 9);
        assert!(got[0].res & libc::POLLIN as i64 != 0);
        // SAFETY: closing fds this test owns.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
    }

    fn tempfile_in_tmp() -> std::fs::File {
        let path = std::env::temp_dir().join(format!("linux-aio-test-{}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        f
    }
}
