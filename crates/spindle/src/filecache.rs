//! A per-worker cache of open file descriptors, like nginx's
//! `open_file_cache`: a hot file is opened once and served from the same
//! descriptor for up to `open-file-cache-valid` seconds, which saves the
//! `openat2`, `fcntl` and `close` of every request (a quarter of the
//! server's CPU on 1 KiB files, see ARCHITECTURE.md).
//!
//! Metadata is *not* cached: every request still `fstat`s the descriptor,
//! so a file rewritten in place gets a fresh `Content-Length`, `ETag` and
//! `Last-Modified` at once. What the cache can delay, by at most the
//! validity period, is noticing that a *path* now names another file
//! (a rename over it, a deletion, a symlink swap); until then the old file
//! keeps being served whole and consistent, as with nginx.
//!
//! Single-threaded by design (one cache per worker), bounded in entries.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::rc::Rc;
use std::time::{Duration, Instant};

struct Entry {
    fd: Rc<OwnedFd>,
    opened: Instant,
}

/// Open descriptors of regular files, by path relative to the root.
pub struct OpenFileCache {
    map: HashMap<Box<[u8]>, Entry>,
    max: usize,
    valid: Duration,
}

impl OpenFileCache {
    /// A cache of at most `max` entries (0 disables it).
    pub fn new(max: usize, valid: Duration) -> OpenFileCache {
        OpenFileCache {
            map: HashMap::with_capacity(max.min(4096)),
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

    /// Remembers a freshly opened regular file.
    pub fn insert(&mut self, path: &[u8], fd: Rc<OwnedFd>, now: Instant) {
        if self.max == 0 {
            return;
        }
        if self.map.len() >= self.max {
            let valid = self.valid;
            self.map.retain(|_, e| now.duration_since(e.opened) < valid);
            if self.map.len() >= self.max {
                // Still full of live entries: drop an arbitrary half. A
                // connection still sending from one keeps its own Rc.
                let mut n = 0;
                self.map.retain(|_, _| {
                    n += 1;
                    n % 2 == 0
                });
            }
        }
        self.map.insert(path.into(), Entry { fd, opened: now });
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
    use std::os::fd::AsRawFd;

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
        let mut off = OpenFileCache::new(0, Duration::from_secs(1));
        off.insert(b"a", fd(), t0);
        assert!(off.get(b"a", t0).is_none());
    }
}
