//! The FUSE file system: a read-only mirror of the backing directory whose reads go
//! through the emulated disk. Metadata operations (lookup, getattr, readdir) are served
//! at once from the backing file system; only file data pays the disk model.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenAccMode, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, Request,
};

use crate::disk::{Disk, Finish};
use crate::fault::{Faults, ReadPlan};
use crate::layout::Layout;

/// Attribute and entry cache time given to the kernel: the backing set does not change
/// while it is mounted.
pub const ATTR_TTL: Duration = Duration::from_secs(3600);
/// Most inodes the mirror keeps track of.
pub const MAX_NODES: usize = 8_000_000;
/// Most files open on the mount at once.
pub const MAX_OPEN_FILES: usize = 65_536;
/// Largest single read accepted from the kernel (the kernel sends at most max_pages,
/// 1 MiB by default on Linux 6.x).
pub const MAX_READ_BYTES: u32 = 16 << 20;
/// Inode numbers of nodes that cannot use their backing inode number start here.
const SYNTHETIC_INO_BASE: u64 = 1 << 62;

struct Node {
    path: PathBuf,
}

struct Nodes {
    by_ino: HashMap<u64, Node>,
    by_key: HashMap<(u64, u64), u64>,
    next_synthetic: u64,
}

struct OpenFile {
    file: File,
    size: u64,
    pos: u64,
    /// Backing (device, inode): what faults are keyed by.
    key: (u64, u64),
}

struct Handles {
    map: HashMap<u64, Arc<OpenFile>>,
    next: u64,
}

/// The mirror.
pub struct SlowFs {
    root: PathBuf,
    root_dev: u64,
    root_key: (u64, u64),
    layout: Layout,
    disk: Disk,
    max_background: u16,
    nodes: RwLock<Nodes>,
    handles: Mutex<Handles>,
    faults: Faults,
}

fn errno(e: &std::io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

fn kind(ft: std::fs::FileType) -> FileType {
    if ft.is_dir() {
        FileType::Directory
    } else if ft.is_symlink() {
        FileType::Symlink
    } else if ft.is_fifo() {
        FileType::NamedPipe
    } else if ft.is_socket() {
        FileType::Socket
    } else if ft.is_char_device() {
        FileType::CharDevice
    } else if ft.is_block_device() {
        FileType::BlockDevice
    } else {
        FileType::RegularFile
    }
}

fn time(secs: i64, nsecs: i64) -> SystemTime {
    if secs >= 0 {
        UNIX_EPOCH + Duration::new(secs as u64, nsecs as u32)
    } else {
        UNIX_EPOCH
    }
}

fn attr(ino: u64, md: &std::fs::Metadata) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: md.len(),
        blocks: md.blocks(),
        atime: time(md.atime(), md.atime_nsec()),
        mtime: time(md.mtime(), md.mtime_nsec()),
        ctime: time(md.ctime(), md.ctime_nsec()),
        crtime: time(md.ctime(), md.ctime_nsec()),
        kind: kind(md.file_type()),
        perm: (md.mode() & 0o7777) as u16,
        nlink: md.nlink() as u32,
        uid: md.uid(),
        gid: md.gid(),
        rdev: md.rdev() as u32,
        blksize: md.blksize() as u32,
        flags: 0,
    }
}

impl SlowFs {
    /// A mirror of `root` (which must be a directory) on `disk`, laid out by `layout`.
    pub fn new(
        root: &Path,
        layout: Layout,
        disk: Disk,
        max_background: u16,
    ) -> std::io::Result<SlowFs> {
        let md = std::fs::metadata(root)?;
        if !md.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{} is not a directory", root.display()),
            ));
        }
        let mut by_ino = HashMap::new();
        by_ino.insert(
            INodeNo::ROOT.0,
            Node {
                path: root.to_path_buf(),
            },
        );
        let mut by_key = HashMap::new();
        by_key.insert((md.dev(), md.ino()), INodeNo::ROOT.0);
        Ok(SlowFs {
            root: root.to_path_buf(),
            root_dev: md.dev(),
            root_key: (md.dev(), md.ino()),
            layout,
            disk,
            max_background,
            nodes: RwLock::new(Nodes {
                by_ino,
                by_key,
                next_synthetic: SYNTHETIC_INO_BASE,
            }),
            handles: Mutex::new(Handles {
                map: HashMap::new(),
                next: 1,
            }),
            faults: Faults::none(),
        })
    }

    /// The same mirror with these faults injected (see [`crate::fault`]). Call
    /// [`Faults::start`] first, or hung reads are answered without their hold.
    pub fn with_faults(mut self, faults: Faults) -> SlowFs {
        self.faults = faults;
        self
    }

    /// The attributes and their TTL as the kernel should see them: a file that may
    /// shrink gets its current size and a zero TTL, so that every stat asks again.
    fn attr_of(&self, ino: u64, md: &std::fs::Metadata) -> (Duration, FileAttr) {
        let mut a = attr(ino, md);
        let key = (md.dev(), md.ino());
        if md.is_file() && self.faults.volatile_attr(key) {
            a.size = self.faults.size(key, a.size);
            return (Duration::ZERO, a);
        }
        (ATTR_TTL, a)
    }

    fn path_of(&self, ino: INodeNo) -> Option<PathBuf> {
        let nodes = self.nodes.read().unwrap_or_else(|p| p.into_inner());
        nodes.by_ino.get(&ino.0).map(|n| n.path.clone())
    }

    /// The FUSE inode number for a backing (dev, ino): the backing number itself where
    /// it is unambiguous, a synthetic one otherwise. Registers the path.
    fn register(&self, path: PathBuf, md: &std::fs::Metadata) -> Result<u64, Errno> {
        let key = (md.dev(), md.ino());
        if key == self.root_key {
            return Ok(INodeNo::ROOT.0);
        }
        {
            let nodes = self.nodes.read().unwrap_or_else(|p| p.into_inner());
            if let Some(&ino) = nodes.by_key.get(&key) {
                return Ok(ino);
            }
        }
        let mut nodes = self.nodes.write().unwrap_or_else(|p| p.into_inner());
        if let Some(&ino) = nodes.by_key.get(&key) {
            return Ok(ino);
        }
        if nodes.by_ino.len() >= MAX_NODES {
            return Err(Errno::ENFILE);
        }
        let natural = md.ino();
        let ino = if md.dev() == self.root_dev
            && natural > INodeNo::ROOT.0
            && natural < SYNTHETIC_INO_BASE
            && !nodes.by_ino.contains_key(&natural)
        {
            natural
        } else {
            let n = nodes.next_synthetic;
            nodes.next_synthetic += 1;
            n
        };
        nodes.by_ino.insert(ino, Node { path });
        nodes.by_key.insert(key, ino);
        Ok(ino)
    }

    fn dirent_ino(&self, md_dev: u64, md_ino: u64) -> u64 {
        let nodes = self.nodes.read().unwrap_or_else(|p| p.into_inner());
        nodes
            .by_key
            .get(&(md_dev, md_ino))
            .copied()
            .unwrap_or(md_ino.max(2))
    }
}

impl Filesystem for SlowFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_background(self.max_background);
        // Async direct I/O: io_submit() of O_DIRECT reads returns at once instead of
        // waiting for the read (what linux-aio-sendfile relies on).
        let wanted = InitFlags::FUSE_ASYNC_DIO
            | InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_CACHE_SYMLINKS;
        let _ = config.add_capabilities(wanted & config.capabilities());
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let Some(dir) = self.path_of(parent) else {
            return reply.error(Errno::ENOENT);
        };
        let path = dir.join(name);
        match std::fs::symlink_metadata(&path) {
            Ok(md) => match self.register(path, &md) {
                Ok(ino) => {
                    let (ttl, a) = self.attr_of(ino, &md);
                    reply.entry(&ttl, &a, Generation(0))
                }
                Err(e) => reply.error(e),
            },
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let Some(path) = self.path_of(ino) else {
            return reply.error(Errno::ENOENT);
        };
        match std::fs::symlink_metadata(&path) {
            Ok(md) => {
                let (ttl, a) = self.attr_of(ino.0, &md);
                reply.attr(&ttl, &a)
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let Some(path) = self.path_of(ino) else {
            return reply.error(Errno::ENOENT);
        };
        match std::fs::read_link(&path) {
            Ok(t) => reply.data(t.as_os_str().as_bytes()),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if flags.acc_mode() != OpenAccMode::O_RDONLY {
            return reply.error(Errno::EROFS);
        }
        let Some(path) = self.path_of(ino) else {
            return reply.error(Errno::ENOENT);
        };
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) => return reply.error(errno(&e)),
        };
        let md = match file.metadata() {
            Ok(m) => m,
            Err(e) => return reply.error(errno(&e)),
        };
        let key = (md.dev(), md.ino());
        let of = Arc::new(OpenFile {
            pos: self.layout.position(md.dev(), md.ino()),
            size: md.len(),
            file,
            key,
        });
        let mut h = self.handles.lock().unwrap_or_else(|p| p.into_inner());
        if h.map.len() >= MAX_OPEN_FILES {
            return reply.error(Errno::EMFILE);
        }
        let fh = h.next;
        h.next += 1;
        h.map.insert(fh, of);
        drop(h);
        if self.faults.direct_io(key) {
            // A file with an injected fault bypasses the page cache, or the cache would
            // hide the fault: a cached page is never read again; a readahead read that
            // fails is retried by the kernel with a second read; a short reply to a
            // buffered read is taken as the end of the file (the kernel shrinks i_size)
            // instead of reaching the reader as a short read(). With FOPEN_DIRECT_IO
            // every read() becomes FUSE reads of exactly its range (split at max_pages),
            // even past the cached i_size, and returns what the daemon replied.
            return reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO);
        }
        // Keep the page cache across opens; never force direct I/O.
        reply.opened(FileHandle(fh), FopenFlags::FOPEN_KEEP_CACHE);
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let of = {
            let h = self.handles.lock().unwrap_or_else(|p| p.into_inner());
            h.map.get(&fh.0).cloned()
        };
        let Some(of) = of else {
            return reply.error(Errno::EBADF);
        };
        if size > MAX_READ_BYTES {
            return reply.error(Errno::EINVAL);
        }
        let len = (size as u64).min(of.size.saturating_sub(offset));
        let (len, hold) = match self.faults.plan(of.key, offset, len) {
            ReadPlan::Fail => return reply.error(Errno::EIO),
            ReadPlan::Serve { len, hold } => (len, hold),
        };
        if len == 0 {
            return reply.data(&[]);
        }
        // A hung read pays the model as usual, then its reply waits on the fault timer
        // thread until `hold` after arrival: no session or spindle thread waits for it.
        let held = hold.and_then(|d| Some((Instant::now() + d, self.faults.timer()?)));
        let pos = of.pos + offset;
        self.disk.submit(
            pos,
            len,
            Box::new(move || {
                let mut buf = vec![0u8; len as usize];
                let mut got = 0usize;
                let res = loop {
                    match of.file.read_at(&mut buf[got..], offset + got as u64) {
                        Ok(0) => break Ok(got),
                        Ok(n) => {
                            got += n;
                            if got == buf.len() {
                                break Ok(got);
                            }
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => break Err(e),
                    }
                };
                let finish = Box::new(move || match res {
                    Ok(n) => reply.data(&buf[..n]),
                    Err(e) => reply.error(errno(&e)),
                }) as Finish;
                match held {
                    Some((due, timer)) => Box::new(move || timer.at(due, finish)) as Finish,
                    None => finish,
                }
            }),
        );
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let mut h = self.handles.lock().unwrap_or_else(|p| p.into_inner());
        h.map.remove(&fh.0);
        drop(h);
        reply.ok();
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let Some(path) = self.path_of(ino) else {
            return reply.error(Errno::ENOENT);
        };
        let rd = match std::fs::read_dir(&path) {
            Ok(rd) => rd,
            Err(e) => return reply.error(errno(&e)),
        };
        let mut entries: Vec<(u64, FileType, std::ffi::OsString)> = Vec::new();
        for e in rd.flatten() {
            let Ok(ft) = e.file_type() else { continue };
            let backing_ino = std::os::unix::fs::DirEntryExt::ino(&e);
            entries.push((
                self.dirent_ino(self.root_dev, backing_ino),
                kind(ft),
                e.file_name(),
            ));
        }
        entries.sort_by(|a, b| a.2.cmp(&b.2));
        let parent_ino = if ino == INodeNo::ROOT {
            INodeNo::ROOT.0
        } else {
            path.parent()
                .and_then(|p| std::fs::metadata(p).ok())
                .map(|m| self.dirent_ino(m.dev(), m.ino()))
                .unwrap_or(INodeNo::ROOT.0)
        };
        let all = [
            (ino.0, FileType::Directory, std::ffi::OsString::from(".")),
            (
                parent_ino,
                FileType::Directory,
                std::ffi::OsString::from(".."),
            ),
        ]
        .into_iter()
        .chain(entries);
        for (i, (e_ino, k, name)) in all.enumerate().skip(offset as usize) {
            if reply.add(INodeNo(e_ino), (i + 1) as u64, k, &name) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match crate::sys::statvfs(&self.root) {
            Ok(s) => reply.statfs(
                s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.frsize,
            ),
            Err(e) => reply.error(errno(&e)),
        }
    }
}
