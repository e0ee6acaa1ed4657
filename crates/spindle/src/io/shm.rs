//! Shared memory for `linux-aio-sendfile` (the seed's own design, lighttpd
//! 1.5): one `mmap`ed file in `/dev/shm` per worker is its buffer pool. A
//! chunk is read into it with native AIO (`O_DIRECT`, [`super::disk::Kaio`])
//! and sent from the shm file with `sendfile(2)`: from the disk to tmpfs
//! pages by DMA, and from there to the socket by page reference, never
//! through user space.
//!
//! - `sendfile` from tmpfs to TCP does not copy: the socket holds
//!   references to the shm pages until the peer has acknowledged them. A
//!   buffer's range is therefore hole-punched (`fallocate(PUNCH_HOLE)`)
//!   before the buffer is used again: the socket keeps the old pages,
//!   detached from the file, and the next write through the mapping
//!   faults in fresh ones.
//! - The file is created with `O_TMPFILE`, so it never has a name and
//!   nothing is left behind however the process ends (SIGKILL included);
//!   where `O_TMPFILE` is unsupported it gets a unique name that is
//!   unlinked right after `mmap`.
//! - The `O_DIRECT` descriptor a response reads with is a second open of
//!   its file ([`reopen_direct`], `/proc/self/fd/N`: the very inode already
//!   checked); the first stays buffered for `cachestat` and `sendfile`
//!   from the page cache. A file system that refuses `O_DIRECT` is logged
//!   once and remembered by `st_dev`; its files are then read through the
//!   same AIO path without it, which the kernel does inside `io_submit`.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Mutex;

/// Where the buffer files live.
pub const SHM_DIR: &str = "/dev/shm";
/// Most shared memory one worker maps for its buffers.
pub const MAX_SHM_BYTES: u64 = 256 << 20;

/// File systems (by `st_dev`) that refused `O_DIRECT`; each is logged once
/// per process.
static NO_DIRECT: Mutex<Vec<u64>> = Mutex::new(Vec::new());

/// The `mmap`ed shm file.
pub struct Shm {
    pub fd: OwnedFd,
    pub base: *mut u8,
    pub len: usize,
}

impl Shm {
    pub fn new(len: usize, worker: usize) -> Result<Shm, String> {
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
    pub fn punch(&self, off: u64, len: u64) {
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
        // SAFETY: unmaps exactly the mapping made in `new`; its owner drops
        // the AIO context (which waits for every read) before this.
        unsafe { libc::munmap(self.base.cast(), self.len) };
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
pub fn reopen_direct(fd: RawFd) -> Option<OwnedFd> {
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

pub fn aio_setup_error(e: std::io::Error) -> String {
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
    linux_aio::Context::new(1).map_err(aio_setup_error)?;
    Shm::new(crate::fs::DIRECT_ALIGN, usize::MAX).map(drop)
}
