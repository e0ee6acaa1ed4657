//! A per-worker cache of open file descriptors, like nginx's
//! `open_file_cache`: a hot file is opened once and served from the same
//! descriptor for up to `open-file-cache-valid` seconds, which saves the
//! `openat2`, `fcntl` and `close` of every request (a quarter of the
//! server's CPU on 1 KiB files, see ARCHITECTURE.md).
//!
//! Metadata is *not* cached: every request still `fstat`s the descriptor,
//! so a file rewritten in place gets a fresh `Content-Length`, `ETag` and
//! `Last-Modified` at once, and a file that was deleted or renamed over
//! (the usual way to deploy) shows a link count of 0, which drops the entry
//! at once (see the drivers). What the cache can delay, by at most the
//! validity period, is noticing that a path now names another file while
//! the old one is still linked elsewhere (a symlink swapped, a directory
//! renamed); until then the old file keeps being served whole and
//! consistent, as with nginx's `open_file_cache_valid`.
//!
//! Single-threaded by design (one cache per worker), bounded in entries,
//! evicted first-in first-out in O(1).

use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsRawFd, OwnedFd};
use std::rc::Rc;
use std::time::{Duration, Instant};

use spindle_core::FileMeta;

use crate::fs;

struct Entry {
    fd: Rc<OwnedFd>,
    opened: Instant,
    gen: u64,
}

/// Open descriptors of regular files, by path relative to the root.
pub struct OpenFileCache {
    map: HashMap<Box<[u8]>, Entry>,
    /// Insertion order, for eviction; an item whose generation no longer
    /// matches its map entry is stale and skipped.
    order: VecDeque<(Box<[u8]>, u64)>,
    next_gen: u64,
    max: usize,
    valid: Duration,
}

impl OpenFileCache {
    /// A cache of at most `max` entries (0 disables it).
    pub fn new(max: usize, valid: Duration) -> OpenFileCache {
        OpenFileCache {
            map: HashMap::with_capacity(max.min(4096)),
            order: VecDeque::with_capacity(max.min(4096)),
            next_gen: 0,
            max,
            valid,
        }
    }

    /// The cached descriptor for `path`, if it is younger than the
    /// validity period.
    pub fn get(&mut self, path: &[u8], now: Instant) -> Option<Rc<OwnedFd>> {
        let e = self.map.get(path)?;
        if now.duration_since(e.opened) < self.valid {
            return Some(e.fd.clone());
        }
        self.map.remove(path);
        None
    }

    /// The cached descriptor for `path` with its fresh metadata, unless
    /// the file was deleted or renamed over since it was opened (its link
    /// count is 0), in which case the entry is dropped and `None` returned
    /// so that the caller opens the path anew.
    pub fn lookup(
        &mut self,
        path: &[u8],
        now: Instant,
    ) -> Option<(Rc<OwnedFd>, std::io::Result<FileMeta>)> {
        let fd = self.get(path, now)?;
        match fs::file_meta_nlink(fd.as_raw_fd()) {
            Ok((_, 0)) => {
                self.map.remove(path);
                None
            }
            Ok((meta, _)) => Some((fd, Ok(meta))),
            Err(e) => Some((fd, Err(e))),
        }
    }

    /// Remembers a freshly opened regular file.
    pub fn insert(&mut self, path: &[u8], fd: Rc<OwnedFd>, now: Instant) {
        if self.max == 0 {
            return;
        }
        while self.map.len() >= self.max || self.order.len() >= 2 * self.max {
            let Some((key, gen)) = self.order.pop_front() else {
                break;
            };
            if self.map.get(&key).is_some_and(|e| e.gen == gen) {
                self.map.remove(&key);
            }
        }
        self.next_gen += 1;
        let gen = self.next_gen;
        let key: Box<[u8]> = path.into();
        self.order.push_back((key.clone(), gen));
        self.map.insert(
            key,
            Entry {
                fd,
                opened: now,
                gen,
            },
        );
    }

    /// Closes about half the cached descriptors (the oldest), to give
    /// descriptors back when the process runs out. Returns how many.
    pub fn shed_half(&mut self) -> usize {
        let target = self.map.len() / 2;
        let before = self.map.len();
        while self.map.len() > target {
            let Some((key, gen)) = self.order.pop_front() else {
                break;
            };
            if self.map.get(&key).is_some_and(|e| e.gen == gen) {
                self.map.remove(&key);
            }
        }
        before - self.map.len()
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fd() -> Rc<OwnedFd> {
        Rc::new(OwnedFd::from(std::fs::File::open("/dev/null").unwrap()))
    }

    #[test]
    fn expiry_and_bound() {
        let t0 = Instant::now();
        let mut c = OpenFileCache::new(4, Duration::from_secs(1));
        let a = fd();
        c.insert(b"a", a.clone(), t0);
        assert_eq!(c.get(b"a", t0).unwrap().as_raw_fd(), a.as_raw_fd());
        assert!(c.get(b"a", t0 + Duration::from_secs(2)).is_none());
        assert!(c.is_empty());
        for i in 0..10u8 {
            c.insert(&[i], fd(), t0);
            assert!(c.len() <= 4);
        }
        assert_eq!(c.shed_half(), 2);
        assert_eq!(c.len(), 2);
        let mut off = OpenFileCache::new(0, Duration::from_secs(1));
        off.insert(b"a", fd(), t0);
        assert!(off.get(b"a", t0).is_none());
    }
}
