//! The I/O engine under a worker: io_uring's operations as one typed
//! enum ([`Sub`]), and the engines that carry them out and report their
//! completions as io_uring does (user data, result, flags). It knows
//! nothing of HTTP, connections or files served (TigerBeetle's
//! `src/io/linux.zig` is the model): the worker (`crate::worker`) says
//! what to do with which memory, and reads back what happened.
//!
//! - [`ring::Ring`]: the operations go to an io_uring (the default).
//! - [`poll::Poll`]: the same operations on epoll where the kernel's ring
//!   is missing or forbidden (seccomp filters, old kernels) or where a
//!   seed backend is asked for: socket operations wait for readiness and
//!   then run as plain syscalls; a disk operation runs by the backend's
//!   [`poll::Disk`]: in the loop (`linux-sendfile`), on a pool of
//!   threads (`posix-aio`), or by Linux native AIO (`linux-aio-sendfile`).
//!
//! Both keep io_uring's contract, which the worker relies on: every
//! pointer in a [`Sub`] stays valid until that operation's final
//! completion; a multishot operation reports [`F_MORE`] on every
//! completion but its last; a cancelled operation completes with
//! `-ECANCELED` (or normally, if it was already running); a receive picks
//! one of the provided buffers and names it in the flags.

pub mod disk;
pub mod poll;
pub mod ring;
pub mod shm;

/// The completion's buffer id is valid (`IORING_CQE_F_BUFFER`).
pub const F_BUFFER: u32 = 1;
/// More completions follow for this multishot operation (`IORING_CQE_F_MORE`).
pub const F_MORE: u32 = 2;
/// The buffer id's place in the flags (`IORING_CQE_BUFFER_SHIFT`).
const BUFFER_SHIFT: u32 = 16;

/// Whether more completions follow for the operation.
pub fn more(flags: u32) -> bool {
    flags & F_MORE != 0
}

/// The provided receive buffer a completion used.
pub fn buffer_id(flags: u32) -> Option<u16> {
    (flags & F_BUFFER != 0).then_some((flags >> BUFFER_SHIFT) as u16)
}

/// One completion: the operation's user data, its result (`-errno` on
/// failure) and its flags.
pub type Cqe = (u64, i32, u32);

/// An operation, as the worker asks for it. The pointers are the
/// worker's; see the module's contract.
#[derive(Debug, Clone, Copy)]
pub enum Sub {
    /// Multishot accept on a listening socket (non-blocking, close-on-exec).
    Accept {
        fd: i32,
    },
    /// A receive into a provided buffer; `multishot` keeps it armed.
    Recv {
        fd: i32,
        multishot: bool,
    },
    /// An open or a read of a file: what may wait for the disk.
    Disk(DiskOp),
    /// A read of an eventfd, once it has something to read.
    ReadEvent {
        fd: i32,
        buf: *mut u8,
    },
    Send {
        fd: i32,
        buf: *const u8,
        len: u32,
        flags: i32,
    },
    SendMsg {
        fd: i32,
        msg: *const libc::msghdr,
        flags: u32,
    },
    /// `sendfile(2)` of `len` bytes of `file` at `off` to the socket `fd`
    /// (epoll engine only: `linux-aio-sendfile` sends its shared-memory
    /// buffers so; io_uring has no such operation).
    SendFile {
        fd: i32,
        file: i32,
        off: u64,
        len: u32,
    },
    /// Waits until the socket is writable (`multishot` for a descriptor
    /// the worker watches: POLLIN then).
    Poll {
        fd: i32,
        mask: u32,
        multishot: bool,
    },
    /// Completes at once (with 0).
    Nop,
    Shutdown {
        fd: i32,
        how: i32,
    },
    Close {
        fd: i32,
    },
    /// Cancels the operation with this user data.
    Cancel {
        target: u64,
    },
    /// Ends the multishot poll with this user data.
    PollRemove {
        target: u64,
    },
    /// Completes (with `-ETIME`) after `ts`.
    Timeout {
        ts: *const Timespec,
    },
    /// Ends the timeout with this user data.
    TimeoutRemove {
        target: u64,
    },
}

/// An operation that may wait for the disk.
#[derive(Debug, Clone, Copy)]
pub enum DiskOp {
    /// `openat2` beneath `dir`.
    Open {
        dir: i32,
        path: *const libc::c_char,
        how: *const libc::open_how,
    },
    /// A read of a file at `off`.
    Read {
        fd: i32,
        buf: *mut u8,
        len: u32,
        off: u64,
    },
    /// A vectored read of a file at `off`.
    Readv {
        fd: i32,
        iov: *const libc::iovec,
        n: u32,
        off: u64,
    },
}

/// A relative time, as `struct __kernel_timespec`.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
pub struct Timespec {
    pub sec: i64,
    pub nsec: i64,
}

impl Timespec {
    pub fn of(d: std::time::Duration) -> Timespec {
        Timespec {
            sec: d.as_secs() as i64,
            nsec: d.subsec_nanos() as i64,
        }
    }

    pub fn duration(&self) -> std::time::Duration {
        std::time::Duration::new(self.sec as u64, self.nsec as u32)
    }
}

/// The receive buffers an engine picks from: `count` (a power of two) of
/// `size` bytes each.
#[derive(Debug, Clone, Copy)]
pub struct RecvBufs {
    pub count: u16,
    pub size: usize,
}

/// What a worker asks of its engine.
pub trait Engine: Sized {
    /// Queues `sub`; it starts at the latest by the next [`Engine::wait`].
    ///
    /// # Safety
    /// Every pointer in `sub` stays valid (and its memory untouched by the
    /// caller where the operation writes) until the operation's final
    /// completion has been returned by [`Engine::wait`].
    unsafe fn push(&mut self, sub: Sub, user_data: u64);

    /// As [`Engine::push`], and the operation pushed next starts only
    /// once this one has completed (io_uring's `IOSQE_IO_LINK`).
    ///
    /// # Safety
    /// As for [`Engine::push`].
    unsafe fn push_linked(&mut self, sub: Sub, user_data: u64);

    /// Starts what was pushed, waits for at least one completion, and
    /// appends every completion ready to `out`.
    fn wait(&mut self, out: &mut Vec<Cqe>) -> Result<(), String>;

    /// The first `len` bytes of receive buffer `bid` (from a completion).
    fn recv_buf(&self, bid: u16, len: usize) -> &[u8];

    /// Gives receive buffer `bid` back, for a later receive to pick.
    fn provide(&mut self, bid: u16);
}
