//! Directory listings off the event loop (`--autoindex`).
//!
//! io_uring has no `getdents` operation, and a cold directory of 100,000
//! entries takes a `getdents64` and an `fstatat` per entry, any of which
//! may wait for the disk. So a worker never reads a directory itself: it
//! hands the job to [`Pool`], a few helper threads shared by all workers
//! ([`THREADS`], at most [`MAX_QUEUED`] jobs waiting; past that the
//! request gets a 503), which open the directory beneath the root, read
//! and `fstat` its entries and render the listing with the core's
//! [`listing::render`]. The result comes back through the worker's
//! mailbox (`crate::jobs`): a queue and an eventfd the worker's loop waits on (a ring
//! `READ` of it, on either engine).
//!
//! Each worker keeps the listings it rendered in a small cache
//! ([`Lists`]: [`CACHE_ENTRIES`] listings, [`CACHE_BYTES`] of them, oldest
//! out first), by directory and format. A listing is trusted while inotify
//! has reported nothing about its directory: the helper watches the
//! directory (by its open descriptor) *before* reading it, on an inotify
//! instance of the worker's, and the worker drains that queue before each
//! lookup, so an entry created, deleted, renamed, written or touched
//! before a request arrived is seen by that request. An event that
//! arrives while the directory is being read leaves that listing out of
//! the cache (it is still sent). Like the open-file cache, listings expire
//! after `open-file-cache-valid`, which bounds what inotify does not see
//! (a parent directory renamed, network file systems).
//!
//! With `--compress` on, a listing the session asked for in a coding is
//! compressed by the helper that rendered it, at [`LISTING_LEVELS`] (made
//! per listing, not once per file version, so lighter than the files'),
//! when it is at least `--compress-min-size` long and the saving is worth
//! it; the worker caches each coding's listing apart.

use std::collections::{HashMap, HashSet, VecDeque};
use std::os::fd::OwnedFd;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use spindle_core::listing::{self, Format, Listing};
use spindle_core::{Encoding, ListRequest, OpenError};

use crate::compress::{self, Levels, MIN_SAVING_PERCENT};
use crate::fs::{self, Inotify, Roots};
use crate::jobs::{JobQueue, Mailbox};

/// Helper threads that read directories, shared by all workers.
pub const THREADS: usize = 4;
/// Jobs waiting for a helper, across all workers; a request past it gets
/// a 503 with `Retry-After`.
pub const MAX_QUEUED: usize = 256;
/// Listings a worker keeps.
pub const CACHE_ENTRIES: usize = 64;
/// Bytes of listings a worker keeps; a larger listing is sent, not kept.
pub const CACHE_BYTES: usize = 64 << 20;
/// Levels of a compressed listing: the libraries' defaults for gzip and
/// zstd, and Brotli's usual level on the fly (a 10,000-entry listing,
/// 1.1 MB of HTML, read, rendered and compressed in 42-69 ms in each).
pub const LISTING_LEVELS: Levels = Levels {
    gzip: 6,
    br: 5,
    zstd: 3,
};

/// A finished job, for the worker that asked.
struct Done {
    token: u64,
    result: Result<Listing, OpenError>,
    wd: Option<i32>,
}

struct Job {
    token: u64,
    req: ListRequest,
    /// The roots the request's `root` numbers (the worker's, at the time).
    roots: Arc<Roots>,
    allow_dotfiles: bool,
    /// `--compress-min-size`: a shorter listing goes as it is.
    compress_min: u64,
    notify: Option<Arc<Inotify>>,
    mailbox: Arc<Mailbox<Done>>,
}

/// The helper threads and their queue.
pub struct Pool {
    queue: JobQueue<Job>,
}

impl Pool {
    /// Starts the helpers (they live as long as the process).
    pub fn start() -> Result<Arc<Pool>, String> {
        let pool = Arc::new(Pool {
            queue: JobQueue::new(MAX_QUEUED),
        });
        for i in 0..THREADS {
            let p = pool.clone();
            std::thread::Builder::new()
                .name(format!("spindle-list-{i}"))
                .spawn(move || p.run())
                .map_err(|e| format!("listing thread: {e}"))?;
        }
        Ok(pool)
    }

    fn run(&self) {
        loop {
            let job = self.queue.pop();
            let mut wd = None;
            let dir = job.req.dir().to_vec();
            let allow = job.allow_dotfiles;
            let read = fs::read_dir_beneath(
                job.roots.get(job.req.root),
                &job.req.path,
                |fd| {
                    // Watched before it is read: a change from here on is
                    // reported (see the module's comment).
                    wd = job.notify.as_ref().and_then(|n| n.watch_dir(fd).ok());
                },
                |name| listing::visible(&dir, name, allow),
            );
            let result = match read {
                Ok(r) => {
                    let l = listing::render(&dir, r.entries, r.truncated, job.req.format, allow);
                    Ok(compressed(l, &job))
                }
                Err(e) => Err(OpenError::from_errno(e.raw_os_error().unwrap_or(libc::EIO))),
            };
            job.mailbox.post(Done {
                token: job.token,
                result,
                wd,
            });
        }
    }

    fn submit(&self, job: Job) -> bool {
        self.queue.push(job)
    }
}

/// The listing compressed in the coding the request asked for, if it is
/// long enough and the saving is worth it; else as it is.
fn compressed(l: Listing, job: &Job) -> Listing {
    let Some(coding) = job.req.coding else {
        return l;
    };
    let len = l.body.len() as u64;
    if len < job.compress_min {
        return l;
    }
    match compress::compress_bytes(coding, &LISTING_LEVELS, &l.body) {
        Ok(c) if (c.len() as u64) * 100 <= len * (100 - MIN_SAVING_PERCENT) => l.encoded(coding, c),
        _ => l,
    }
}

/// A listing's key: its root's number, its path, its format, its coding.
type Key = (Vec<u8>, Format, Option<Encoding>);

fn key(req: &ListRequest) -> Key {
    let mut k = req.root.to_le_bytes().to_vec();
    k.extend_from_slice(req.path.as_bytes());
    (k, req.format, req.coding)
}

/// A finished job: the connections waiting for it, and the listing (or
/// why the directory could not be listed).
pub type Finished<W> = (Vec<W>, Result<Rc<Listing>, OpenError>);

struct Cached {
    listing: Rc<Listing>,
    wd: i32,
    at: Instant,
    gen: u64,
}

struct Pending<W> {
    key: Key,
    waiters: Vec<W>,
}

/// One worker's side: its mailbox, the jobs it has out (several requests
/// for one listing share a job), and its cache of listings. `W` names a
/// waiting connection (slot and generation).
pub struct Lists<W> {
    pool: Arc<Pool>,
    roots: Arc<Roots>,
    mailbox: Arc<Mailbox<Done>>,
    notify: Option<Arc<Inotify>>,
    allow_dotfiles: bool,
    compress_min: u64,
    valid: Duration,
    cache: HashMap<Key, Cached>,
    order: VecDeque<(Key, u64)>,
    bytes: usize,
    watches: HashMap<i32, Vec<Key>>,
    pending: HashMap<u64, Pending<W>>,
    by_key: HashMap<Key, u64>,
    /// Watches that reported an event while jobs were out: a job that
    /// set up one of them may have read the directory before the change.
    touched: HashSet<i32>,
    /// Events were lost (queue overflow) while jobs were out.
    overflowed: bool,
    next: u64,
}

impl<W: Copy> Lists<W> {
    pub fn new(
        pool: Arc<Pool>,
        roots: Arc<Roots>,
        allow_dotfiles: bool,
        compress_min: u64,
        valid: Duration,
        efd: Arc<OwnedFd>,
    ) -> Lists<W> {
        Lists {
            pool,
            roots,
            mailbox: Arc::new(Mailbox::new(efd)),
            notify: Inotify::new().ok().map(Arc::new),
            allow_dotfiles,
            compress_min,
            valid,
            cache: HashMap::new(),
            order: VecDeque::new(),
            bytes: 0,
            watches: HashMap::new(),
            pending: HashMap::new(),
            by_key: HashMap::new(),
            touched: HashSet::new(),
            overflowed: false,
            next: 0,
        }
    }

    /// After a reload: the roots (and dotfiles) to list beneath from now
    /// on; every cached listing goes, as its path may name another
    /// directory now.
    pub fn set_roots(&mut self, roots: Arc<Roots>, allow_dotfiles: bool) {
        self.roots = roots;
        self.allow_dotfiles = allow_dotfiles;
        let keys: Vec<Key> = self.cache.keys().cloned().collect();
        for k in keys {
            self.remove(&k);
        }
    }

    /// Drops the listings whose directory inotify reported as changed.
    fn sync(&mut self) {
        let Some(n) = self.notify.clone() else {
            return;
        };
        let mut changed = Vec::new();
        let mut overflow = false;
        let ok = n.drain(|wd, mask| {
            if mask & libc::IN_Q_OVERFLOW != 0 {
                overflow = true;
            } else {
                changed.push(wd);
            }
        });
        if overflow || !ok {
            self.overflowed |= !self.pending.is_empty();
            let keys: Vec<Key> = self.cache.keys().cloned().collect();
            for k in keys {
                self.remove(&k);
            }
            return;
        }
        for wd in changed {
            if !self.pending.is_empty() {
                self.touched.insert(wd);
            }
            if let Some(keys) = self.watches.remove(&wd) {
                for k in keys {
                    self.remove(&k);
                }
            }
        }
    }

    fn remove(&mut self, key: &Key) {
        if let Some(c) = self.cache.remove(key) {
            self.bytes -= c.listing.body.len();
            if let Some(keys) = self.watches.get_mut(&c.wd) {
                keys.retain(|k| k != key);
                if keys.is_empty() {
                    self.watches.remove(&c.wd);
                    self.unwatch(c.wd);
                }
            }
        }
    }

    /// Removes a watch no cached listing uses.
    fn unwatch(&mut self, wd: i32) {
        // A job out may share this watch (one per inode): it is gone now,
        // so that job's result must not be kept.
        if !self.pending.is_empty() {
            self.touched.insert(wd);
        }
        if let Some(n) = &self.notify {
            n.unwatch(wd);
        }
    }

    /// The cached listing for this request, if it is still valid.
    pub fn lookup(&mut self, req: &ListRequest, now: Instant) -> Option<Rc<Listing>> {
        if self.cache.is_empty() {
            return None;
        }
        self.sync();
        let key = key(req);
        let c = self.cache.get(&key)?;
        if now.duration_since(c.at) >= self.valid {
            self.remove(&key);
            return None;
        }
        Some(c.listing.clone())
    }

    /// Asks a helper for this listing on behalf of `who` (or joins the
    /// job already out for it). False when the helpers' queue is full.
    pub fn request(&mut self, req: &ListRequest, who: W) -> bool {
        let key = key(req);
        if let Some(t) = self.by_key.get(&key) {
            self.pending
                .get_mut(t)
                .expect("pending job")
                .waiters
                .push(who);
            return true;
        }
        self.next += 1;
        let token = self.next;
        let job = Job {
            token,
            req: req.clone(),
            roots: self.roots.clone(),
            allow_dotfiles: self.allow_dotfiles,
            compress_min: self.compress_min,
            notify: self.notify.clone(),
            mailbox: self.mailbox.clone(),
        };
        if !self.pool.submit(job) {
            return false;
        }
        self.by_key.insert(key.clone(), token);
        self.pending.insert(
            token,
            Pending {
                key,
                waiters: vec![who],
            },
        );
        true
    }

    /// The jobs done since the last call: each with the connections that
    /// wait for it. Keeps the listings that may be cached.
    pub fn take_done(&mut self, now: Instant) -> Vec<Finished<W>> {
        let done = self.mailbox.take();
        // Events queued before these results are taken count as touching
        // them (see `touched`).
        self.sync();
        let mut out = Vec::with_capacity(done.len());
        for d in done {
            let Some(p) = self.pending.remove(&d.token) else {
                continue;
            };
            self.by_key.remove(&p.key);
            let result = d.result.map(Rc::new);
            if let (Ok(l), Some(wd)) = (&result, d.wd) {
                let keep =
                    !self.touched.contains(&wd) && !self.overflowed && l.body.len() <= CACHE_BYTES;
                if keep {
                    self.insert(p.key, l.clone(), wd, now);
                } else if !self.watches.contains_key(&wd) {
                    self.unwatch(wd);
                }
            }
            out.push((p.waiters, result));
        }
        if self.pending.is_empty() {
            self.touched.clear();
            self.overflowed = false;
        }
        out
    }

    fn insert(&mut self, key: Key, listing: Rc<Listing>, wd: i32, now: Instant) {
        self.remove(&key);
        let len = listing.body.len();
        while !self.cache.is_empty()
            && (self.cache.len() >= CACHE_ENTRIES || self.bytes + len > CACHE_BYTES)
        {
            let Some((k, gen)) = self.order.pop_front() else {
                break;
            };
            if self.cache.get(&k).is_some_and(|c| c.gen == gen) {
                self.remove(&k);
            }
        }
        self.next += 1;
        let gen = self.next;
        self.bytes += len;
        self.watches.entry(wd).or_default().push(key.clone());
        self.order.push_back((key.clone(), gen));
        self.cache.insert(
            key,
            Cached {
                listing,
                wd,
                at: now,
                gen,
            },
        );
        if self.order.len() > 4 * CACHE_ENTRIES {
            // Items of listings dropped by events pile up otherwise.
            let cache = &self.cache;
            self.order
                .retain(|(k, g)| cache.get(k).is_some_and(|c| c.gen == *g));
        }
    }
}
