//! The file-system side of the security boundary, and file metadata.
//!
//! Every path the protocol core hands out is opened relative to a
//! directory descriptor of the document root with `openat2(2)` and
//! `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`: the kernel refuses any
//! resolution (through `..` or a symlink, absolute or relative) that would
//! leave the root, with `EXDEV`. Files are opened `O_NONBLOCK` so that a
//! FIFO in the tree cannot stall a worker in `open`, and `O_NOCTTY`;
//! anything that is not a regular file is then refused by the core.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use spindle_core::response::{FileKind, FileMeta};

/// `open_how.flags` for files served.
pub const OPEN_FLAGS: u64 =
    (libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC) as u64;
/// `open_how.resolve`: stay beneath the root, never follow /proc magic links.
pub const RESOLVE_FLAGS: u64 = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS;

/// The document root, held open as a directory descriptor.
#[derive(Debug)]
pub struct Root {
    fd: OwnedFd,
    path: PathBuf,
}

impl Root {
    /// Opens `path` as the root. Fails with a message for the user.
    pub fn open(path: &Path) -> Result<Root, String> {
        let abs = std::fs::canonicalize(path)
            .map_err(|e| format!("root directory {}: {e}", path.display()))?;
        let dir = std::fs::File::open(&abs)
            .map_err(|e| format!("root directory {}: {e}", abs.display()))?;
        let meta = dir
            .metadata()
            .map_err(|e| format!("root directory {}: {e}", abs.display()))?;
        if !meta.is_dir() {
            return Err(format!("root {} is not a directory", abs.display()));
        }
        Ok(Root {
            fd: OwnedFd::from(dir),
            path: abs,
        })
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens `rel` beneath the root, synchronously. Used by the epoll
    /// backends; the io_uring backend issues the same `openat2` through its
    /// ring.
    pub fn open_beneath(&self, rel: &CStr) -> io::Result<OwnedFd> {
        // SAFETY: an all-zero open_how is valid (mode 0, no flags).
        let mut how: libc::open_how = unsafe { std::mem::zeroed() };
        how.flags = OPEN_FLAGS;
        how.resolve = RESOLVE_FLAGS;
        // SAFETY: `rel` is a NUL-terminated string and `how` a live struct of
        // the size passed; the kernel only reads them during the call.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                self.fd.as_raw_fd(),
                rel.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: openat2 returned a new descriptor that nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
    }
}

/// `fstat` of a descriptor from [`Root::open_beneath`] (or the same
/// `openat2` through a ring), as the core wants it; for a regular file it
/// also clears `O_NONBLOCK`, which was only there to keep `open` of a FIFO
/// from blocking: io_uring would otherwise fail page-cache misses with
/// `EAGAIN` instead of completing them asynchronously. An open
/// descriptor's inode is in memory, so this never waits for the disk.
pub fn inspect_opened(fd: RawFd) -> io::Result<FileMeta> {
    let meta = file_meta(fd)?;
    if meta.kind == FileKind::Regular {
        // SAFETY: fcntl on a descriptor the caller owns; no pointers.
        if unsafe { libc::fcntl(fd, libc::F_SETFL, 0) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(meta)
}

/// `fstat` of an open file, as the core wants it.
pub fn file_meta(fd: RawFd) -> io::Result<FileMeta> {
    file_meta_nlink(fd).map(|(m, _)| m)
}

/// [`file_meta`] and the link count: 0 once the file has been deleted or
/// renamed over, which tells a cached descriptor is no longer what its
/// path names.
pub fn file_meta_nlink(fd: RawFd) -> io::Result<(FileMeta, u64)> {
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a live, writable stat buffer for the duration of the call.
    if unsafe { libc::fstat(fd, &mut st) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let kind = match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => FileKind::Regular,
        libc::S_IFDIR => FileKind::Directory,
        _ => FileKind::Other,
    };
    let meta = FileMeta {
        size: st.st_size as u64,
        mtime_sec: st.st_mtime,
        mtime_nsec: st.st_mtime_nsec as u32,
        ino: st.st_ino,
        kind,
    };
    Ok((meta, st.st_nlink))
}

/// Whether every page of `[offset, offset + len)` of `fd` is in the page
/// cache, by `cachestat(2)` (Linux 6.5+). `None` when the kernel lacks it.
pub fn range_cached(fd: RawFd, offset: u64, len: u64) -> Option<bool> {
    #[repr(C)]
    struct CachestatRange {
        off: u64,
        len: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct Cachestat {
        nr_cache: u64,
        nr_dirty: u64,
        nr_writeback: u64,
        nr_evicted: u64,
        nr_recently_evicted: u64,
    }
    const SYS_CACHESTAT: libc::c_long = 451;
    let page = 4096u64;
    let first = offset / page * page;
    let end = offset + len;
    let range = CachestatRange {
        off: first,
        len: end - first,
    };
    let mut cs = Cachestat::default();
    // SAFETY: both structs are live locals of the layout the kernel expects;
    // it reads `range` and writes `cs` during the call only.
    let rc = unsafe { libc::syscall(SYS_CACHESTAT, fd, &range, &mut cs, 0) };
    if rc < 0 {
        return None;
    }
    let pages = end.div_ceil(page) - first / page;
    Some(cs.nr_cache >= pages)
}
