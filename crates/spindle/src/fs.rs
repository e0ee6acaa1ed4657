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

/// The `open_how` of a file served: [`OPEN_FLAGS`] and [`RESOLVE_FLAGS`].
pub fn open_how() -> libc::open_how {
    // SAFETY: an all-zero open_how is valid (mode 0, no flags).
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = OPEN_FLAGS;
    how.resolve = RESOLVE_FLAGS;
    how
}

/// The document root, held open as a directory descriptor.
#[derive(Debug)]
pub struct Root {
    fd: OwnedFd,
    path: PathBuf,
}

/// The server's document root (0) and the virtual hosts' (1 and up), by
/// the number the core puts in `OpenRequest::root`, the compression
/// cache's directory (`spindle_core::compress::CACHE_ROOT`) and the edge's
/// (`spindle_core::edge::EDGE_ROOT`).
pub struct Roots(Vec<Root>, Option<Root>, Option<Root>);

impl Roots {
    pub fn new(main: Root, hosts: Vec<Root>) -> Roots {
        let mut v = vec![main];
        v.extend(hosts);
        Roots(v, None, None)
    }

    /// With the compression cache's directory.
    pub fn with_cache(mut self, dir: Root) -> Roots {
        self.1 = Some(dir);
        self
    }

    /// With the edge's cache directory (`--cache-dir`).
    pub fn with_edge(mut self, dir: Root) -> Roots {
        self.2 = Some(dir);
        self
    }

    /// Every document root's path, by number (the cache's not included).
    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.0.iter().map(|r| r.path())
    }

    /// Opens the configured root and every virtual host's. Fails with a
    /// message for the user.
    pub fn open(root: &Path, hosts: &[crate::config::VirtualHost]) -> Result<Roots, String> {
        let main = Root::open(root)?;
        let mut v = Vec::with_capacity(hosts.len());
        for h in hosts {
            v.push(Root::open(&h.root).map_err(|e| format!("host {}: {e}", h.names.join(",")))?);
        }
        Ok(Roots::new(main, v))
    }

    /// The root numbered `i` (the server's for a number it does not have;
    /// the core only hands out configured ones).
    pub fn get(&self, i: u16) -> &Root {
        if i == spindle_core::compress::CACHE_ROOT {
            if let Some(c) = &self.1 {
                return c;
            }
        }
        if i == spindle_core::edge::EDGE_ROOT {
            if let Some(c) = &self.2 {
                return c;
            }
        }
        debug_assert!((i as usize) < self.0.len(), "root {i} not configured");
        self.0.get(i as usize).unwrap_or(&self.0[0])
    }

    /// The server's own root.
    pub fn main(&self) -> &Root {
        &self.0[0]
    }
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

    /// Creates the new file `name` in this directory (never one that
    /// exists, never through a symlink), for writing.
    pub fn create_new(&self, name: &CStr) -> io::Result<std::fs::File> {
        // SAFETY: a NUL-terminated name beneath the directory's descriptor;
        // the result is checked.
        let fd = unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                name.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC | libc::O_NOFOLLOW,
                0o644,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new descriptor that nothing else owns.
        Ok(std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Removes `name` from this directory.
    pub fn unlink(&self, name: &CStr) -> io::Result<()> {
        // SAFETY: a NUL-terminated name beneath the directory's descriptor.
        if unsafe { libc::unlinkat(self.fd.as_raw_fd(), name.as_ptr(), 0) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Renames `from` to `to` within this directory (replacing `to`).
    pub fn rename(&self, from: &CStr, to: &CStr) -> io::Result<()> {
        let d = self.fd.as_raw_fd();
        // SAFETY: two NUL-terminated names beneath the same directory.
        if unsafe { libc::renameat(d, from.as_ptr(), d, to.as_ptr()) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Opens `rel` beneath the root, synchronously (the worker issues
    /// the same `openat2` as an operation of its engine).
    pub fn open_beneath(&self, rel: &CStr) -> io::Result<OwnedFd> {
        let how = open_how();
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
/// `openat2` through a ring), as the core wants it, and the device the file
/// lives on (with the inode, what identifies the file for
/// [`crate::recent::RecentFiles`] and the open-file cache). For a regular
/// file it also clears `O_NONBLOCK`, which was only there to keep `open` of
/// a FIFO from blocking: io_uring would otherwise fail page-cache misses
/// with `EAGAIN` instead of completing them asynchronously. An open
/// descriptor's inode is in memory, so this never waits for the disk.
pub fn inspect_opened(fd: RawFd) -> io::Result<(FileMeta, u64)> {
    let (meta, _, dev) = stat(fd)?;
    if meta.kind == FileKind::Regular {
        // SAFETY: fcntl on a descriptor the caller owns; no pointers.
        if unsafe { libc::fcntl(fd, libc::F_SETFL, 0) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok((meta, dev))
}

/// Frees `len` bytes of `fd`'s file from `off` (`fallocate` with
/// `PUNCH_HOLE`, keeping its size): they read as zeros after.
pub fn punch_hole(fd: RawFd, off: u64, len: u64) -> io::Result<()> {
    // SAFETY: fallocate on a descriptor the caller owns; no pointers.
    let r = unsafe {
        libc::fallocate(
            fd,
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            off as libc::off_t,
            len as libc::off_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Turns `O_DIRECT` on or off for an open regular file (`fcntl(F_SETFL)`;
/// `O_NONBLOCK` was already cleared by [`inspect_opened`]). Reads then
/// bypass the page cache: they go from the disk straight into the caller's
/// buffer, whose address, offset and length must be multiples of the file
/// system's alignment ([`DIRECT_ALIGN`] satisfies every block size up to
/// 4 KiB). Fails with `EINVAL` where the file system has no direct I/O.
///
/// The flag belongs to the open file description, so it must only be set
/// on a descriptor nothing else uses: `sendfile` from an `O_DIRECT` file
/// reads the disk synchronously.
pub fn set_direct(fd: RawFd, on: bool) -> io::Result<()> {
    let flags = if on { libc::O_DIRECT } else { 0 };
    // SAFETY: fcntl on a descriptor the caller owns; no pointers.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Alignment of `O_DIRECT` reads: buffer address, file offset and length.
pub const DIRECT_ALIGN: usize = 4096;

/// `fstat` of an open file, as the core wants it.
pub fn file_meta(fd: RawFd) -> io::Result<FileMeta> {
    file_meta_nlink(fd).map(|(m, _)| m)
}

/// [`file_meta`] and the link count: 0 once the file has been deleted or
/// renamed over, which tells a cached descriptor is no longer what its
/// path names.
pub fn file_meta_nlink(fd: RawFd) -> io::Result<(FileMeta, u64)> {
    stat(fd).map(|(m, nlink, _)| (m, nlink))
}

/// `fstat`: the core's metadata, the link count and the device.
fn stat(fd: RawFd) -> io::Result<(FileMeta, u64, u64)> {
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
    Ok((meta, st.st_nlink, st.st_dev))
}

/// Whether the open file `fd` can still give the bytes of `version` (size
/// and modification time, as the response's head described it): it has
/// that version, or it has grown past it (an append leaves the first bytes
/// as they were; a growing log or recording stays servable). One `fstat`:
/// the inode's attributes, no disk access. Linux gives a file a fine-
/// grained, distinct modification time on the first change after its times
/// were read (multigrain timestamps, 6.13+), so a write in place of the
/// same length shows here; a shorter file shows by its size. A write in
/// place that also makes the file longer looks like an append, and passes.
pub fn has_version(fd: RawFd, version: &spindle_core::response::Version) -> bool {
    match stat(fd) {
        Ok((meta, _, _)) => meta.size > version.size || meta.version() == *version,
        Err(_) => false,
    }
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

/// A read-only shared mapping of a file that is never touched, kept only to
/// ask `mincore(2)` which of the file's pages are *uptodate*: in the page
/// cache with their data read. `cachestat(2)` cannot tell: it also counts
/// pages that readahead has inserted and not yet filled, and a `sendfile`
/// over one of those waits for the disk. `mincore` on a file mapping asks
/// the page cache without faulting anything in (an unmapped PTE of a file
/// mapping is answered from the file's own pages), so neither the probe nor
/// the mapping reads the disk, and since the mapping is never accessed it
/// cannot raise `SIGBUS` when the file shrinks.
#[derive(Debug)]
pub struct FileMap {
    addr: *mut libc::c_void,
    len: usize,
}

/// Pages asked about per `mincore(2)` call (the result vector's size).
pub const MINCORE_BATCH: usize = 512;

impl FileMap {
    /// Maps the first `len` bytes of `fd` (at least one page).
    pub fn new(fd: RawFd, len: u64) -> io::Result<FileMap> {
        let len = usize::try_from(len.max(1))
            .map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?
            .next_multiple_of(page_size());
        // SAFETY: a fresh shared read-only mapping at an address the kernel
        // picks; nothing in this process ever reads or writes through it, so
        // no Rust reference to its memory exists.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(FileMap { addr, len })
    }

    /// How many bytes from `offset`, at most `len`, lie on pages that are
    /// uptodate in the page cache (whole pages, so the count may stop in
    /// the middle of `len` but never promises a page that is not ready).
    pub fn uptodate(&self, offset: u64, len: u64) -> io::Result<u64> {
        let page = page_size() as u64;
        let end = (offset + len).min(self.len as u64);
        if offset >= end {
            return Ok(0);
        }
        let mut vec = [0u8; MINCORE_BATCH];
        let mut at = offset / page * page;
        while at < end {
            let pages = ((end - at).div_ceil(page) as usize).min(MINCORE_BATCH);
            // SAFETY: `[at, at + pages pages)` lies inside the mapping (at is
            // page-aligned and below `self.len`, a multiple of the page size,
            // which `end` does not pass); the kernel writes `pages` bytes into
            // `vec`, which holds MINCORE_BATCH.
            let rc = unsafe {
                libc::mincore(
                    self.addr.cast::<u8>().add(at as usize).cast(),
                    pages * page_size(),
                    vec.as_mut_ptr(),
                )
            };
            if rc < 0 {
                return Err(io::Error::last_os_error());
            }
            for v in &vec[..pages] {
                if v & 1 == 0 {
                    return Ok(at.saturating_sub(offset).min(len));
                }
                at += page;
            }
        }
        Ok(end - offset)
    }
}

impl Drop for FileMap {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once; nothing refers
        // to its memory.
        unsafe { libc::munmap(self.addr, self.len) };
    }
}

/// The size of a page, as `mincore(2)` counts them.
pub fn page_size() -> usize {
    static PAGE_SIZE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *PAGE_SIZE.get_or_init(|| {
        // SAFETY: sysconf reads a constant of the system; no memory involved.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if p > 0 {
            p as usize
        } else {
            4096
        }
    })
}

/// A directory read for a listing (`--autoindex`): its descriptor, kept
/// open for the inotify watch, and its entries.
pub struct DirRead {
    pub fd: OwnedFd,
    pub entries: Vec<spindle_core::listing::Entry>,
    /// Reading stopped at [`spindle_core::listing::MAX_ENTRIES`].
    pub truncated: bool,
}

/// Opens directory `rel` beneath the root (the files' `openat2` rules),
/// calls `opened` with its descriptor (to watch it before it is read), and
/// reads the entries `keep` accepts, with the kind, size and modification
/// time of each (`fstatat`; a symlink is opened beneath the root and
/// `fstat`ed, and left out, as it would not be served, when it leads
/// outside or nowhere; FIFOs, sockets and devices are left out too).
/// Blocks on the disk: for a helper thread, never an event loop.
pub fn read_dir_beneath(
    root: &Root,
    rel: &CStr,
    opened: impl FnOnce(RawFd),
    keep: impl Fn(&[u8]) -> bool,
) -> io::Result<DirRead> {
    use spindle_core::listing::{Entry, MAX_ENTRIES};
    // SAFETY: an all-zero open_how is valid (mode 0, no flags).
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) as u64;
    how.resolve = RESOLVE_FLAGS;
    // SAFETY: `rel` is NUL-terminated and `how` a live struct of the size
    // passed; the kernel only reads them during the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root.fd(),
            rel.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: openat2 returned a new descriptor that nothing else owns.
    let dir = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    opened(dir.as_raw_fd());
    let mut entries = Vec::new();
    let mut truncated = false;
    #[repr(C, align(8))]
    struct Buf([u8; 64 * 1024]);
    let mut buf = Box::new(Buf([0; 64 * 1024]));
    'read: loop {
        // SAFETY: `buf` is a live, writable buffer of the length passed.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                dir.as_raw_fd(),
                buf.0.as_mut_ptr(),
                buf.0.len(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n == 0 {
            break;
        }
        let n = n as usize;
        let mut at = 0;
        // struct linux_dirent64: d_ino u64, d_off i64, d_reclen u16,
        // d_type u8, d_name (NUL-terminated).
        while at + 19 < n {
            let reclen = u16::from_ne_bytes([buf.0[at + 16], buf.0[at + 17]]) as usize;
            if reclen == 0 || at + reclen > n {
                break;
            }
            let name_area = &buf.0[at + 19..at + reclen];
            let len = name_area
                .iter()
                .position(|&b| b == 0)
                .unwrap_or(name_area.len());
            let name = &name_area[..len];
            at += reclen;
            if name == b"." || name == b".." || !keep(name) {
                continue;
            }
            if entries.len() >= MAX_ENTRIES {
                truncated = true;
                break 'read;
            }
            let Some((kind, size, mtime_sec)) = entry_meta(root, rel, dir.as_raw_fd(), name) else {
                continue;
            };
            entries.push(Entry {
                name: name.to_vec(),
                kind,
                size,
                mtime_sec,
            });
        }
    }
    Ok(DirRead {
        fd: dir,
        entries,
        truncated,
    })
}

/// Kind, size and modification time of one entry, as a listing shows it
/// (see [`read_dir_beneath`]); `None` to leave it out.
fn entry_meta(root: &Root, rel: &CStr, dir: RawFd, name: &[u8]) -> Option<(FileKind, u64, i64)> {
    let cname = std::ffi::CString::new(name).ok()?;
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `cname` is NUL-terminated and `st` a live, writable buffer.
    if unsafe { libc::fstatat(dir, cname.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) } < 0 {
        return None;
    }
    if st.st_mode & libc::S_IFMT == libc::S_IFLNK {
        // Where the link leads, by the rules a request would follow.
        let mut path = match rel.to_bytes() {
            b"." => Vec::new(),
            p => [p, b"/"].concat(),
        };
        path.extend_from_slice(name);
        let path = std::ffi::CString::new(path).ok()?;
        let fd = root.open_beneath(&path).ok()?;
        // SAFETY: as above, on a descriptor we own.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } < 0 {
            return None;
        }
    }
    let kind = match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => FileKind::Regular,
        libc::S_IFDIR => FileKind::Directory,
        _ => return None,
    };
    Some((kind, st.st_size as u64, st.st_mtime))
}

/// An inotify instance that watches open files by descriptor, for the
/// open-file cache: a watch turns "has this file changed since we looked?"
/// from an `fstat` per request into a read of the event queue per batch.
///
/// inotify reports writes (`IN_MODIFY`, truncation included), attribute
/// changes (`IN_ATTRIB`: chmod, `touch`, and the link count, which is how an
/// `unlink` or a rename over the file shows up while we hold it open) and
/// renames of the file itself (`IN_MOVE_SELF`). The event is queued by the
/// writer's own system call, before it returns. It does not see writes
/// through a shared `mmap`, nor changes made by another machine on a network
/// file system; the cache's validity period bounds those.
#[derive(Debug)]
pub struct Inotify {
    fd: OwnedFd,
}

/// The events that invalidate a cached file. `IN_ONESHOT`: the first event
/// removes the watch (the entry is dropped anyway).
pub const WATCH_MASK: u32 = libc::IN_MODIFY
    | libc::IN_ATTRIB
    | libc::IN_MOVE_SELF
    | libc::IN_DELETE_SELF
    | libc::IN_ONESHOT;

/// The events that invalidate a cached directory listing.
pub const DIR_WATCH_MASK: u32 = libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_MODIFY
    | libc::IN_ATTRIB
    | libc::IN_CLOSE_WRITE
    | libc::IN_MOVE_SELF
    | libc::IN_DELETE_SELF
    | libc::IN_ONESHOT;

impl Inotify {
    pub fn new() -> io::Result<Inotify> {
        // SAFETY: no pointers; returns a new descriptor or -1.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: inotify_init1 returned a new descriptor that nothing else owns.
        Ok(Inotify {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Watches the inode behind an open descriptor (through its
    /// `/proc/self/fd` link, so it is exactly that file, whatever its path
    /// names now). Two descriptors of one inode get the same watch number.
    pub fn watch(&self, file: RawFd) -> io::Result<i32> {
        let path = format!("/proc/self/fd/{file}\0");
        // SAFETY: `path` is NUL-terminated and lives through the call.
        let wd = unsafe {
            libc::inotify_add_watch(self.fd.as_raw_fd(), path.as_ptr().cast(), WATCH_MASK)
        };
        if wd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(wd)
    }

    /// Watches a directory by descriptor for changes to what a listing
    /// shows: entries created, deleted, moved in or out, written or
    /// changed in attributes, and the directory itself going
    /// ([`DIR_WATCH_MASK`]; one event, then the watch is gone).
    pub fn watch_dir(&self, dir: RawFd) -> io::Result<i32> {
        let path = format!("/proc/self/fd/{dir}\0");
        // SAFETY: `path` is NUL-terminated and lives through the call.
        let wd = unsafe {
            libc::inotify_add_watch(self.fd.as_raw_fd(), path.as_ptr().cast(), DIR_WATCH_MASK)
        };
        if wd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(wd)
    }

    pub fn unwatch(&self, wd: i32) {
        // SAFETY: no pointers. EINVAL (already gone) is harmless.
        unsafe { libc::inotify_rm_watch(self.fd.as_raw_fd(), wd) };
    }

    /// Reads every queued event without blocking and calls `f(wd, mask)`
    /// for each. Returns false if the queue could not be read (the caller
    /// should then distrust everything it watches).
    pub fn drain(&self, mut f: impl FnMut(i32, u32)) -> bool {
        // Aligned for `inotify_event`; room for many events per read. Left
        // uninitialised (this runs once per batch of completions): only the
        // bytes the kernel reports as written are read back.
        #[repr(C, align(8))]
        struct Buf([u8; 4096]);
        let mut buf = std::mem::MaybeUninit::<Buf>::uninit();
        let base = buf.as_mut_ptr().cast::<u8>();
        let len = std::mem::size_of::<Buf>();
        loop {
            // SAFETY: `buf` is a live, writable local of the length passed.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), base.cast(), len) };
            if n < 0 {
                let e = io::Error::last_os_error().raw_os_error();
                return e == Some(libc::EAGAIN) || e == Some(libc::EINTR);
            }
            let n = n as usize;
            let head = std::mem::size_of::<libc::inotify_event>();
            let mut at = 0;
            while at + head <= n {
                // SAFETY: the kernel wrote whole events into the first `n`
                // bytes; read_unaligned needs no alignment.
                let ev: libc::inotify_event =
                    unsafe { std::ptr::read_unaligned(base.add(at).cast()) };
                f(ev.wd, ev.mask);
                at += head + ev.len as usize;
            }
        }
    }
}

/// Reads one byte at `offset` if its page is in the page cache, and says
/// whether it was. The read is `preadv2(RWF_NOWAIT)`: on a page still being
/// filled it fails with `EAGAIN` instead of waiting, so a worker may call
/// it. What it is for: a buffered read that lands on a folio readahead
/// marked (`PG_readahead`, the first folio of the newest window) starts the
/// kernel's next readahead window at once, as the reader's own arrival
/// there would later. A page that is not in the cache is left alone
/// (`cachestat` first): a read there would start a window of its own and
/// leave a hole behind the current one.
pub fn touch_cached(fd: RawFd, offset: u64) -> bool {
    if range_cached(fd, offset, 1) != Some(true) {
        return false;
    }
    let Ok(at) = i64::try_from(offset) else {
        return false;
    };
    // EAGAIN (the page is being filled) still counts: the marker, if any,
    // was seen before the wait would have begun.
    let n = pread_nowait(fd, &mut [0u8], at);
    n >= 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN)
}

/// `preadv2(RWF_NOWAIT)` into `buf` at `offset`: the bytes the page cache
/// holds filled, or -1 with `EAGAIN` where it would wait for the disk.
fn pread_nowait(fd: RawFd, buf: &mut [u8], offset: i64) -> isize {
    let iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: `iov` describes `buf`, live and writable through the call;
    // the kernel does not write it after returning.
    unsafe { libc::preadv2(fd, &iov, 1, offset, libc::RWF_NOWAIT) }
}

/// The whole of a small file, if every byte of it is in the page cache:
/// `preadv2(RWF_NOWAIT)` copies cached pages and fails with `EAGAIN`
/// instead of waiting for the disk, so a worker may call it. `None` if the
/// file is not all cached, or is not `size` bytes long any more.
pub fn read_cached(fd: RawFd, size: usize) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; size + 1];
    let n = pread_nowait(fd, &mut buf, 0);
    // One byte more than expected was asked for: a file that grew since
    // its `fstat` reads long, and is refused here.
    if n != size as isize {
        return None;
    }
    buf.truncate(size);
    Some(buf)
}

/// The answer to an open that failed with `e`.
pub fn open_error(e: std::io::Error) -> spindle_core::OpenError {
    spindle_core::OpenError::from_errno(e.raw_os_error().unwrap_or(libc::EIO))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;

    /// A file of `len` bytes on a disk file system (the workspace's target
    /// directory; `/tmp` may be tmpfs, which cannot drop a file's pages),
    /// written back and dropped from the page cache. `None` where the pages
    /// stay: the test is skipped, says so, and fails under CI
    /// ([`test_skip::skip_or_fail`]).
    fn cold_file(name: &str, len: usize) -> Option<(std::path::PathBuf, std::fs::File)> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{name}-{}", std::process::id()));
        std::fs::write(&path, vec![7u8; len]).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        f.sync_all().unwrap();
        // SAFETY: posix_fadvise on a descriptor we own; no memory involved.
        let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(rc, 0, "posix_fadvise(DONTNEED)");
        if range_cached(f.as_raw_fd(), 0, 1) != Some(false) {
            test_skip::skip_or_fail(format!(
                "{} keeps its pages cached (or has no cachestat)",
                dir.display()
            ));
            let _ = std::fs::remove_file(&path);
            return None;
        }
        Some((path, f))
    }

    #[test]
    fn touch_cached_reads_only_what_the_cache_holds() {
        let Some((path, f)) = cold_file("touch-absent", 4 << 20) else {
            return;
        };
        let fd = f.as_raw_fd();
        // Absent: no read is started there (it would insert the page before
        // returning).
        assert!(!touch_cached(fd, 2 << 20));
        assert_eq!(range_cached(fd, 2 << 20, 1), Some(false));
        // Present: touched.
        let mut buf = vec![0u8; 4 << 20];
        f.read_exact_at(&mut buf, 0).unwrap();
        assert!(touch_cached(fd, 2 << 20));
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn touching_what_readahead_brought_starts_its_next_window() {
        let Some((path, f)) = cold_file("touch-marker", 8 << 20) else {
            return;
        };
        let fd = f.as_raw_fd();
        // A first read: the kernel reads a first window ahead of it (a few
        // hundred KiB), marking a folio in it; nothing reaches 6 MiB.
        let mut buf = vec![0u8; 64 << 10];
        f.read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(range_cached(fd, 6 << 20, 1), Some(false));
        // Touching page after page, never past the first absent one, walks
        // the readahead chain: each marked folio touched starts the next
        // window, whose pages are in the cache (filled or not) at once.
        let page = page_size() as u64;
        let mut at = 0;
        while at < 8 << 20 && touch_cached(fd, at) {
            at += page;
        }
        assert!(
            at > 6 << 20,
            "touching stopped at {at}: the marked folios did not start the next windows"
        );
        let _ = std::fs::remove_file(&path);
    }
}
