//! What a driver tells the core of an opened path: its kind, size,
//! modification time and inode ([`FileMeta`]), and what identifies one
//! version of its contents ([`Version`]).

/// What a driver learned from `fstat` of an opened path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileMeta {
    pub size: u64,
    pub mtime_sec: i64,
    pub mtime_nsec: u32,
    pub ino: u64,
    pub kind: FileKind,
}

/// What identifies one version of a file's contents for HTTP: the size and
/// the modification time, as in the entity tag. A change that keeps both
/// is invisible to caches and conditional requests as well.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Version {
    pub size: u64,
    pub mtime_sec: i64,
    pub mtime_nsec: u32,
}

impl FileMeta {
    pub fn version(&self) -> Version {
        Version {
            size: self.size,
            mtime_sec: self.mtime_sec,
            mtime_nsec: self.mtime_nsec,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Regular,
    Directory,
    /// FIFOs, sockets, devices: never served.
    Other,
}
