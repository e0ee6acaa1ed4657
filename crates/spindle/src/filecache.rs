//! A per-worker cache of open files, like nginx's `open_file_cache` and
//! lighttpd's stat cache: a hot file is opened once and served from the
//! same descriptor for up to `open-file-cache-valid` seconds, which saves
//! the `openat2`, `fcntl` and `close` of every request. Then the path is
//! opened again; if it still names the same file with the same metadata,
//! the entry lives on for another period with its descriptor, its watch
//! and its contents (as nginx revalidates), and only the new descriptor
//! is closed. One request opens the path; the others meanwhile (for at
//! most [`REOPEN_WAIT`]) are served from the entry, still watched: under
//! load a hot path is asked for many times while its open is in flight,
//! and each used to open it again (11,000 opens in 6 s at 120K req/s over
//! 1,100 paths, where 660 expiries called for 660).
//!
//! **Metadata and small contents, validated by inotify.** Each entry keeps
//! the file's `fstat` result and, for files of at most [`SMALL_FILE_MAX`]
//! bytes whose pages were all in the page cache, the bytes themselves
//! (within a per-worker budget, `small-file-cache`). Each cached file is
//! watched through inotify by its descriptor (see [`fs::Inotify`]), and the
//! driver calls [`OpenFileCache::batch`] whenever it has waited for new
//! work; the first lookup after that drains the event queue. A write, a
//! truncate, a `touch`, a chmod, an `unlink` or a rename over the file
//! queues its event inside the writer's system call, so any change that
//! finished before a request arrived drops the entry before that request
//! is looked up, and the request gets fresh metadata and bytes. That is
//! the same promise an `fstat` per request gives (the file can still
//! change between the lookup and the send, as with any server), for a read
//! of the event queue per batch of completions instead of a system call
//! per request. Nothing else is trusted across requests.
//!
//! When a file cannot be watched (no inotify, or `max_user_watches`
//! reached) its entry falls back to an `fstat` per request and never holds
//! contents; a file deleted or renamed over then shows a link count of 0,
//! which drops the entry.
//!
//! What the cache can delay, by at most the validity period, is noticing
//! changes inotify does not report: a path that now names another file
//! while the old one is still linked elsewhere (a symlink swapped, a parent
//! directory renamed), writes through a shared `mmap`, or changes made by
//! another machine on a network file system. Until then the old file keeps
//! being served whole and consistent, as with nginx's
//! `open_file_cache_valid` (whose default is 60 s, against our 10 s).
//!
//! Single-threaded by design (one cache per worker), bounded in entries
//! and in content bytes, evicted first-in first-out in O(1).

use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsRawFd, OwnedFd};
use std::rc::Rc;
use std::time::{Duration, Instant};

use foldhash::fast::RandomState;
use spindle_core::FileMeta;

use crate::fs;

/// Largest file whose contents the cache keeps in memory. Files up to this
/// size are answered with one `send` of head and body from memory; larger
/// ones go through the driver's sendfile or read path.
pub const SMALL_FILE_MAX: u64 = 16 * 1024;

/// How long the lookups of an expired entry are served from it while the
/// one request that asked for its reopen waits for the open; after that
/// the next lookup asks again.
pub const REOPEN_WAIT: Duration = Duration::from_secs(1);

/// Attempts to read a small file's contents from the page cache, per
/// entry. More than one: `RWF_NOWAIT` sometimes fails on pages that are
/// cached (on 1,000 freshly warmed 1 KiB files, 14% failed once and then
/// never again; a read that would start readahead is one kernel reason),
/// and the driver's own read of the file clears that.
const BODY_TRIES: u8 = 4;

/// Reads a small entry's contents if they are all in the page cache and
/// fit the budget (never waits for the disk), and charges the budget.
fn load_body(e: &Entry, used: &mut usize, budget: usize) -> Option<Rc<[u8]>> {
    let size = e.meta.size;
    if e.wd.is_none() || size == 0 || size > SMALL_FILE_MAX || *used + size as usize > budget {
        return None;
    }
    let bytes = fs::read_cached(e.fd.as_raw_fd(), size as usize)?;
    *used += bytes.len();
    Some(bytes.into())
}

/// What a lookup hands the driver.
pub struct Hit {
    /// The open file; `None` when `body` holds all of it.
    pub fd: Option<Rc<OwnedFd>>,
    pub meta: FileMeta,
    /// The whole file, when it is small and was cached in memory.
    pub body: Option<Rc<[u8]>>,
    /// The device the file lives on.
    pub dev: u64,
}

struct Entry {
    fd: Rc<OwnedFd>,
    meta: FileMeta,
    body: Option<Rc<[u8]>>,
    /// Cached reads of the contents tried so far (at most [`BODY_TRIES`]
    /// per entry, so a file not in the page cache soon costs nothing more).
    body_tries: u8,
    /// The inotify watch; `None`: unwatched, `fstat` on every lookup.
    wd: Option<i32>,
    /// The device the file lives on; with `meta.ino`, which file this is.
    dev: u64,
    /// When the entry was opened or last revalidated.
    opened: Instant,
    /// Expired, when a lookup last asked for the path to be opened again.
    reopen_asked: Option<Instant>,
    gen: u64,
}

type Key = Box<[u8]>;

/// Open files with their metadata, by path relative to the root.
pub struct OpenFileCache {
    map: HashMap<Key, Entry, RandomState>,
    /// Insertion order, for eviction; an item whose generation no longer
    /// matches its map entry is stale and skipped.
    order: VecDeque<(Key, u64)>,
    /// Which entries each watch covers (several paths may name one inode).
    watches: HashMap<i32, Vec<(Key, u64)>, RandomState>,
    notify: Option<fs::Inotify>,
    /// The event queue must be drained before the next lookup.
    unsynced: bool,
    next_gen: u64,
    max: usize,
    valid: Duration,
    body_bytes: usize,
    body_budget: usize,
}

impl OpenFileCache {
    /// A cache of at most `max` entries (0 disables it), holding at most
    /// `body_budget` bytes of small-file contents (0: none).
    pub fn new(max: usize, valid: Duration, body_budget: usize) -> OpenFileCache {
        let notify = if max > 0 {
            fs::Inotify::new().ok()
        } else {
            None
        };
        OpenFileCache {
            map: HashMap::with_capacity_and_hasher(max.min(4096), RandomState::default()),
            order: VecDeque::with_capacity(max.min(4096)),
            watches: HashMap::with_capacity_and_hasher(max.min(4096), RandomState::default()),
            notify,
            unsynced: true,
            next_gen: 0,
            max,
            valid,
            body_bytes: 0,
            body_budget,
        }
    }

    /// File changes may have been reported since the last lookup: the
    /// next lookup drains the inotify queue first (one `read`). A driver
    /// calls this after every wait for new work, or, if it watches
    /// [`OpenFileCache::notify_fd`] for readability, only when that fd is
    /// reported readable in the same batch as the requests it goes on to
    /// serve (or earlier).
    pub fn batch(&mut self) {
        self.unsynced = true;
    }

    /// The inotify descriptor that becomes readable when a cached file
    /// changes; `None` when the cache has no watches (it is disabled, or
    /// inotify is unavailable and every lookup `fstat`s instead).
    pub fn notify_fd(&self) -> Option<std::os::fd::RawFd> {
        self.notify.as_ref().map(|n| n.fd())
    }

    /// Drops every entry whose file inotify reported as changed.
    fn sync(&mut self) {
        self.unsynced = false;
        let Some(notify) = &self.notify else {
            return;
        };
        let mut changed: Vec<i32> = Vec::new();
        let mut overflow = false;
        let ok = notify.drain(|wd, mask| {
            if mask & libc::IN_Q_OVERFLOW != 0 {
                overflow = true;
            } else {
                changed.push(wd);
            }
        });
        if overflow || !ok {
            // Events were lost: nothing watched can be trusted.
            self.clear();
            return;
        }
        for wd in changed {
            // IN_ONESHOT: the kernel removed the watch with this event.
            if let Some(keys) = self.watches.remove(&wd) {
                for (key, gen) in keys {
                    if self.map.get(&key).is_some_and(|e| e.gen == gen) {
                        let e = self.map.remove(&key).expect("entry");
                        self.forget_body(&e);
                    }
                }
            }
        }
    }

    /// The cached file for `path`, unless it expired, or changed, or was
    /// deleted or renamed over since it was opened; then `None` is
    /// returned, so that the caller opens the path anew. A changed or
    /// deleted file's entry is dropped; an expired but watched one is kept
    /// for `insert` to revalidate.
    /// `Some(Err)` if the cached descriptor could not be `fstat`ed.
    pub fn lookup(&mut self, path: &[u8], now: Instant) -> Option<std::io::Result<Hit>> {
        if self.map.is_empty() {
            return None;
        }
        if self.unsynced {
            self.sync();
        }
        let e = self.map.get_mut(path)?;
        let mut stale = now.duration_since(e.opened) >= self.valid;
        if stale && e.wd.is_some() {
            // Expired: the path must be opened again, but the entry stays
            // until then, so that an open that finds the same file only
            // revalidates it (see `insert`), and serves the lookups that
            // come while that open is in flight. An open that fails drops
            // it (`forget`).
            let asked = e
                .reopen_asked
                .filter(|t| now.duration_since(*t) < REOPEN_WAIT);
            if asked.is_none() {
                e.reopen_asked = Some(now);
                return None;
            }
            stale = false;
        }
        if !stale && e.wd.is_none() {
            match fs::file_meta_nlink(e.fd.as_raw_fd()) {
                Ok((_, 0)) => stale = true,
                Ok((meta, _)) => e.meta = meta,
                Err(err) => return Some(Err(err)),
            }
        }
        if stale {
            self.remove(path);
            return None;
        }
        if e.body.is_none() && e.body_tries < BODY_TRIES {
            e.body_tries += 1;
            e.body = load_body(e, &mut self.body_bytes, self.body_budget);
        }
        Some(Ok(Hit {
            fd: if e.body.is_none() {
                Some(e.fd.clone())
            } else {
                None
            },
            meta: e.meta,
            body: e.body.clone(),
            dev: e.dev,
        }))
    }

    /// Remembers a freshly opened and `fstat`ed regular file (`dev` is the
    /// device it lives on), and returns its contents if they are small,
    /// cached in memory now, and within the budget.
    ///
    /// If the path's entry expired but is still watched, and the new
    /// descriptor is the same file (device and inode) with the same
    /// metadata, the entry is revalidated instead: it keeps its descriptor
    /// and its watch, and only re-reads small contents. The caller's new
    /// descriptor is not kept. That is what nginx does at the end of
    /// `open_file_cache_valid`; it saves the `inotify_add_watch`,
    /// `inotify_rm_watch` and `close` of a replacement, a tenth of all
    /// requests when every file is requested about once a second.
    pub fn insert(
        &mut self,
        path: &[u8],
        fd: Rc<OwnedFd>,
        meta: FileMeta,
        dev: u64,
        now: Instant,
    ) -> Option<Rc<[u8]>> {
        if self.max == 0 {
            return None;
        }
        if self.unsynced {
            self.sync();
        }
        if let Some(e) = self.map.get(path) {
            if e.wd.is_some() && e.dev == dev && e.meta == meta {
                return self.revalidate(path, now);
            }
            self.remove(path);
        }
        while self.map.len() >= self.max || self.order.len() >= 2 * self.max {
            if !self.pop_oldest() {
                break;
            }
        }
        self.next_gen += 1;
        let gen = self.next_gen;
        let key: Key = path.into();
        let wd = self
            .notify
            .as_ref()
            .and_then(|n| n.watch(fd.as_raw_fd()).ok());
        if let Some(wd) = wd {
            self.watches.entry(wd).or_default().push((key.clone(), gen));
        }
        let mut e = Entry {
            fd,
            meta,
            body: None,
            // An unwatched file's contents cannot be trusted across requests.
            body_tries: if wd.is_some() { 1 } else { BODY_TRIES },
            wd,
            dev,
            opened: now,
            reopen_asked: None,
            gen,
        };
        if wd.is_some() {
            e.body = load_body(&e, &mut self.body_bytes, self.body_budget);
        }
        let body = e.body.clone();
        self.order.push_back((key.clone(), gen));
        self.map.insert(key, e);
        body
    }

    /// Renews the watched entry for `path` (see `insert`): it moves to the
    /// back of the eviction order under a new generation. Its small
    /// contents stay: the file is the same inode with the same size and
    /// modification time, and inotify reported no write (a write through
    /// a shared `mmap` changes the modification time, so it is not
    /// revalidated but replaced). Contents not read yet get their tries
    /// again.
    fn revalidate(&mut self, path: &[u8], now: Instant) -> Option<Rc<[u8]>> {
        self.next_gen += 1;
        let gen = self.next_gen;
        let e = self.map.get_mut(path).expect("entry to revalidate");
        let wd = e.wd.expect("only watched entries are revalidated");
        let old = std::mem::replace(&mut e.gen, gen);
        e.opened = now;
        e.reopen_asked = None;
        if e.body.is_none() {
            e.body_tries = 1;
            e.body = load_body(e, &mut self.body_bytes, self.body_budget);
        }
        let body = e.body.clone();
        let keys = self.watches.get_mut(&wd).expect("a watched entry's watch");
        let k = keys
            .iter_mut()
            .find(|(k, g)| *g == old && &**k == path)
            .expect("the entry's share of its watch");
        k.1 = gen;
        let key: Key = path.into();
        self.order.push_back((key, gen));
        while self.order.len() > 2 * self.max {
            if !self.pop_oldest() {
                break;
            }
        }
        body
    }

    /// Takes the oldest item off the eviction order and drops its entry,
    /// unless the item is stale (the entry was replaced or revalidated
    /// since). `false` when the order is empty.
    fn pop_oldest(&mut self) -> bool {
        let Some((key, gen)) = self.order.pop_front() else {
            return false;
        };
        if self.map.get(&key).is_some_and(|e| e.gen == gen) {
            self.remove(&key);
        }
        true
    }

    fn forget_body(&mut self, e: &Entry) {
        if let Some(b) = &e.body {
            self.body_bytes -= b.len();
        }
    }

    /// Drops the entry for `path`: its open found nothing, or not a
    /// regular file, or one kept out of the cache.
    pub fn forget(&mut self, path: &[u8]) {
        self.remove(path);
    }

    /// Drops the entry for `key` and its share of a watch.
    fn remove(&mut self, key: &[u8]) {
        let Some(e) = self.map.remove(key) else {
            return;
        };
        self.forget_body(&e);
        if let Some(wd) = e.wd {
            if let Some(keys) = self.watches.get_mut(&wd) {
                keys.retain(|(k, g)| !(*g == e.gen && &**k == key));
                if keys.is_empty() {
                    self.watches.remove(&wd);
                    if let Some(n) = &self.notify {
                        n.unwatch(wd);
                    }
                }
            }
        }
    }

    /// Drops every entry (a reload may have changed what paths name).
    pub fn clear(&mut self) {
        if let Some(n) = &self.notify {
            for wd in self.watches.keys() {
                n.unwatch(*wd);
            }
        }
        self.watches.clear();
        self.map.clear();
        self.order.clear();
        self.body_bytes = 0;
    }

    /// Closes about half the cached descriptors (the oldest), to give
    /// descriptors back when the process runs out. Returns how many.
    pub fn shed_half(&mut self) -> usize {
        let target = self.map.len() / 2;
        let before = self.map.len();
        while self.map.len() > target {
            if !self.pop_oldest() {
                break;
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

    /// Bytes of file contents held.
    pub fn body_bytes(&self) -> usize {
        self.body_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn open(path: &std::path::Path) -> (Rc<OwnedFd>, FileMeta, u64) {
        let fd = OwnedFd::from(std::fs::File::open(path).unwrap());
        let (meta, dev) = fs::inspect_opened(fd.as_raw_fd()).unwrap();
        (Rc::new(fd), meta, dev)
    }

    fn append(path: &std::path::Path, bytes: &[u8]) {
        std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .unwrap()
            .write_all(bytes)
            .unwrap();
    }

    fn tmpdir(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("spindle-fc-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn expiry_and_bound() {
        let d = tmpdir("bound");
        let t0 = Instant::now();
        let mut c = OpenFileCache::new(4, Duration::from_secs(1), 1 << 20);
        let p = d.join("a");
        std::fs::write(&p, b"hello").unwrap();
        let (fd, meta, dev) = open(&p);
        assert_eq!(
            c.insert(b"a", fd.clone(), meta, dev, t0).as_deref(),
            Some(&b"hello"[..])
        );
        let hit = c.lookup(b"a", t0).unwrap().unwrap();
        assert!(hit.fd.is_none(), "the body stands for the descriptor");
        assert_eq!(hit.body.as_deref(), Some(&b"hello"[..]));
        assert_eq!(hit.meta, meta);
        assert_eq!(c.body_bytes(), 5);
        assert!(c.lookup(b"a", t0 + Duration::from_secs(2)).is_none());
        assert_eq!(c.len(), 1, "an expired watched entry waits for its reopen");
        for i in 0..10u8 {
            let (fd, meta, dev) = open(&p);
            c.insert(&[i], fd, meta, dev, t0);
            assert!(c.len() <= 4);
            assert!(c.body_bytes() <= 4 * 5);
        }
        assert_eq!(c.shed_half(), 2);
        assert_eq!(c.len(), 2);
        let mut off = OpenFileCache::new(0, Duration::from_secs(1), 1 << 20);
        let (fd, meta, dev) = open(&p);
        off.insert(b"a", fd, meta, dev, t0);
        assert!(off.lookup(b"a", t0).is_none());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn expiry_revalidates_the_same_file_and_replaces_another() {
        let d = tmpdir("revalidate");
        let t0 = Instant::now();
        let later = |s| t0 + Duration::from_secs(s);
        let mut c = OpenFileCache::new(100, Duration::from_secs(10), 1 << 20);
        std::fs::create_dir(d.join("sub")).unwrap();
        let p = d.join("sub/f");
        // Larger than SMALL_FILE_MAX, so that hits hand out the descriptor.
        std::fs::write(&p, vec![7u8; 20 << 10]).unwrap();
        let (first, meta, dev) = open(&p);
        c.insert(b"sub/f", first.clone(), meta, dev, t0);
        assert!(c.lookup(b"sub/f", later(11)).is_none(), "expired");
        // Reopened, it is the same file: the entry keeps its descriptor
        // and its watch, and is valid for another period from now.
        let (again, meta, dev) = open(&p);
        assert!(c
            .insert(b"sub/f", again.clone(), meta, dev, later(11))
            .is_none());
        drop(again);
        let hit = c.lookup(b"sub/f", later(20)).unwrap().unwrap();
        assert!(Rc::ptr_eq(hit.fd.as_ref().unwrap(), &first), "kept");
        drop(hit);
        assert_eq!(c.watches.len(), 1);
        assert!(c.lookup(b"sub/f", later(22)).is_none(), "expired again");
        // inotify does not report a rename of the parent: only expiry
        // notices that the path now names another file, which replaces
        // the entry.
        std::fs::rename(d.join("sub"), d.join("old")).unwrap();
        std::fs::create_dir(d.join("sub")).unwrap();
        std::fs::write(&p, vec![8u8; 20 << 10]).unwrap();
        c.batch();
        let meanwhile = c.lookup(b"sub/f", later(22)).unwrap().unwrap();
        assert!(
            Rc::ptr_eq(meanwhile.fd.as_ref().unwrap(), &first),
            "served from the entry while its reopen is in flight"
        );
        drop(meanwhile);
        let (other, meta, dev) = open(&p);
        c.insert(b"sub/f", other.clone(), meta, dev, later(22));
        let hit = c.lookup(b"sub/f", later(23)).unwrap().unwrap();
        assert!(Rc::ptr_eq(hit.fd.as_ref().unwrap(), &other), "replaced");
        assert_eq!(c.watches.len(), 1, "the old file's watch is gone");
        assert_eq!(Rc::strong_count(&first), 1, "the old descriptor is let go");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn an_expired_path_is_opened_once_and_served_meanwhile() {
        let d = tmpdir("reopen");
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut c = OpenFileCache::new(100, Duration::from_secs(10), 1 << 20);
        let p = d.join("f");
        std::fs::write(&p, b"small").unwrap();
        let (fd, meta, dev) = open(&p);
        c.insert(b"f", fd, meta, dev, t0);
        assert!(c.lookup(b"f", at(10_000)).is_none(), "expired: open it");
        for ms in [10_001, 10_500, 10_999] {
            let hit = c.lookup(b"f", at(ms)).unwrap().unwrap();
            assert_eq!(hit.body.as_deref(), Some(&b"small"[..]), "meanwhile");
        }
        assert!(
            c.lookup(b"f", at(11_000)).is_none(),
            "no open came back within REOPEN_WAIT: ask again"
        );
        // The open comes back with the same file: revalidated, the
        // contents kept (not read again), valid for another period.
        let (again, meta, dev) = open(&p);
        let body = c.insert(b"f", again, meta, dev, at(11_001));
        assert_eq!(body.as_deref(), Some(&b"small"[..]));
        assert_eq!(c.body_bytes(), 5);
        assert!(c.lookup(b"f", at(20_000)).is_some());
        assert!(c.lookup(b"f", at(21_001)).is_none(), "expired again");
        // An open that found nothing (or kept the file out) ends the entry.
        c.forget(b"f");
        assert!(c.lookup(b"f", at(21_002)).is_none());
        assert_eq!((c.len(), c.body_bytes(), c.watches.len()), (0, 0, 0));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn budget_bounds_contents() {
        let d = tmpdir("budget");
        let t0 = Instant::now();
        let mut c = OpenFileCache::new(100, Duration::from_secs(10), 10);
        for i in 0..5u8 {
            let p = d.join(format!("{i}"));
            std::fs::write(&p, b"1234").unwrap();
            let (fd, meta, dev) = open(&p);
            c.insert(&[i], fd, meta, dev, t0);
        }
        assert_eq!(c.body_bytes(), 8, "two 4-byte files fit a 10-byte budget");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn unwatched_files_are_fstated_on_every_lookup() {
        let d = tmpdir("unwatched");
        let t0 = Instant::now();
        let mut c = OpenFileCache::new(100, Duration::from_secs(10), 1 << 20);
        c.notify = None; // as when inotify is unavailable
        let p = d.join("f");
        std::fs::write(&p, b"one").unwrap();
        let (fd, meta, dev) = open(&p);
        assert!(
            c.insert(b"f", fd, meta, dev, t0).is_none(),
            "no contents unwatched"
        );
        append(&p, b"two");
        let hit = c.lookup(b"f", t0).unwrap().unwrap();
        assert_eq!(hit.meta.size, 6, "fresh metadata");
        assert!(hit.body.is_none() && hit.fd.is_some());
        std::fs::remove_file(&p).unwrap();
        assert!(c.lookup(b"f", t0).is_none(), "link count 0 noticed");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_change_drops_the_entry_at_the_next_batch() {
        let d = tmpdir("change");
        let t0 = Instant::now();
        let mut c = OpenFileCache::new(100, Duration::from_secs(10), 1 << 20);
        let p = d.join("f");
        std::fs::write(&p, b"one").unwrap();
        let (fd, meta, dev) = open(&p);
        c.insert(b"f", fd, meta, dev, t0);
        // Another path to the same inode shares the watch.
        let (fd2, meta2, dev2) = open(&p);
        c.insert(b"g", fd2, meta2, dev2, t0);
        c.batch();
        assert!(c.lookup(b"f", t0).is_some());
        append(&p, b"two");
        c.batch();
        assert!(c.lookup(b"f", t0).is_none(), "write noticed");
        assert!(
            c.lookup(b"g", t0).is_none(),
            "both paths of the inode dropped"
        );
        let (fd, meta, dev) = open(&p);
        c.insert(b"f", fd, meta, dev, t0);
        std::fs::remove_file(&p).unwrap();
        c.batch();
        assert!(c.lookup(b"f", t0).is_none(), "unlink noticed");
        assert_eq!(c.body_bytes(), 0);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
