//! Pass-through: an origin's object the cache cannot keep is still
//! served, from a scratch file of the one response that asked for it.
//!
//! That is an answer marked `no-store` or `private` (which a shared cache
//! must not keep), or any object while the cache directory cannot be
//! written (full, read-only: one warning, see `Store::cannot_store`).
//! nginx and Traffic Server answer both without storing; spindle did with
//! a 502. The scratch file is an unnamed file in memory (`O_TMPFILE` in
//! [`SCRATCH_DIR`], gone with its last descriptor), into which the edge's
//! helpers write the response's slices as they would into the cache, so
//! the response streams through the same body path as a cached one
//! (`sendfile`, the loop's reads, TLS, HTTP/2, ranges). Slices the
//! response has sent are hole-punched, so a long download holds only the
//! slices around its send position (when it is the object's only reader:
//! requests that asked at once share the first slice's fetch, and so the
//! object, and then nothing is freed before the last one is done), and
//! the process holds at most
//! [`MAX_SCRATCH_BYTES`] of them: past that, a slice is refused and its
//! response answered 503 (or, mid-body, ended short).

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// Bytes of pass-through slices the process holds in memory at once.
pub const MAX_SCRATCH_BYTES: u64 = 256 << 20;
/// Where scratch files are made: a tmpfs, so that they are memory.
pub const SCRATCH_DIR: &str = "/dev/shm";

/// One response's scratch file.
#[derive(Debug)]
pub struct Scratch {
    file: File,
    /// Bytes written and not punched, charged to `pool`.
    held: AtomicU64,
    /// Offset below which the file has been punched.
    released: AtomicU64,
    /// Requests the object was handed to and that are not done with it.
    readers: AtomicU32,
    pool: Arc<AtomicU64>,
}

impl Scratch {
    /// An empty scratch file of `length` bytes (sparse: it costs memory
    /// only as slices are written), charged to `pool`.
    pub fn new(length: u64, pool: Arc<AtomicU64>) -> io::Result<Scratch> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_TMPFILE)
            .mode(0o600)
            .open(SCRATCH_DIR)?;
        file.set_len(length)?;
        Ok(Scratch {
            file,
            held: AtomicU64::new(0),
            released: AtomicU64::new(0),
            readers: AtomicU32::new(0),
            pool,
        })
    }

    /// Writes `bytes` at `off`, if the process's pool has room for them.
    pub fn write(&self, off: u64, bytes: &[u8]) -> io::Result<()> {
        let n = bytes.len() as u64;
        let before = self.pool.fetch_add(n, Ordering::AcqRel);
        if before + n > MAX_SCRATCH_BYTES {
            self.pool.fetch_sub(n, Ordering::AcqRel);
            return Err(io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!("pass-through slices hold {MAX_SCRATCH_BYTES} bytes already"),
            ));
        }
        self.held.fetch_add(n, Ordering::AcqRel);
        self.file.write_all_at(bytes, off)
    }

    /// Frees what lies below `off` (the response has sent it; a socket
    /// still holding pages of it keeps them, detached from the file).
    /// `written(from, to)`: the bytes of `from..to` that were written.
    /// Called by the one worker that sends the response.
    pub fn release_below(&self, off: u64, written: impl Fn(u64, u64) -> u64) {
        let from = self.released.load(Ordering::Acquire);
        if off <= from || self.readers.load(Ordering::Acquire) != 1 {
            return;
        }
        let bytes = written(from, off);
        if crate::fs::punch_hole(self.file.as_raw_fd(), from, off - from).is_ok() {
            self.released.store(off, Ordering::Release);
            self.held.fetch_sub(bytes, Ordering::AcqRel);
            self.pool.fetch_sub(bytes, Ordering::AcqRel);
        }
    }

    /// The object is handed to `n` more requests (before any of them can
    /// see it).
    pub fn add_readers(&self, n: usize) {
        self.readers.fetch_add(n as u32, Ordering::AcqRel);
    }

    /// One of its requests is done with it.
    pub fn leave(&self) {
        let before = self.readers.fetch_sub(1, Ordering::AcqRel);
        assert!(before > 0, "a reader left that was never counted");
    }

    /// A descriptor of the file for a response to send from.
    pub fn open(&self) -> io::Result<OwnedFd> {
        Ok(OwnedFd::from(self.file.try_clone()?))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        self.pool.fetch_sub(*self.held.get_mut(), Ordering::AcqRel);
    }
}
