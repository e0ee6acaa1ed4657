//! The edge's disk cache (`--cache-dir`, bounded by `--cache-size`).
//!
//! Each version of an origin object is three files beneath the directory,
//! named by a hash of its path ([`key`]) and a version number this cache
//! gives it: `KK/KEY.VID.d`, the data, a sparse file of the object's
//! length into which slices are written at their offsets; `KEY.VID.m`,
//! what is kept of the origin's answer ([`Meta`], as text); `KEY.VID.p`,
//! which slices are in the data ([`Present`]). So a response is a range
//! of one file, sent through the same body path as any other.
//!
//! **A slice is marked only once it is on disk.** It is written with
//! `pwrite` and made durable with `fdatasync`, and only then is its bit set
//! in memory (where workers read it without a lock) and the map rewritten
//! (a temporary file renamed over the old). After a crash a slice whose
//! bit was not saved is fetched again; a bit is never saved for bytes that
//! are not. A new version gets new files: a worker still sending the old
//! one keeps its descriptor of the old data, which is unlinked, never
//! overwritten, so two versions are never spliced.
//!
//! **Bounded by bytes**, counting the slices stored, least recently used
//! object first out. Past the bound a new object takes its place at the
//! front of that order only if it was asked for more often lately than
//! each object it would push out (TinyLFU, `spindle_core::edge::admission`);
//! else it is stored on probation, last in line: the next object in
//! pushes it out, unless it is asked for again first (then it moves to
//! the front). It is stored all the same, so that requests that come
//! while it is fetched share that fetch. At start the directory is scanned: temporary files
//! are removed, every object whose three files agree is indexed (oldest
//! map first), anything else is removed.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use spindle_core::edge::admission::Frequency;
use spindle_core::edge::meta::Meta;
use spindle_core::edge::slice::{self, Present};

use super::scratch::Scratch;

/// The object size the admission sketch is sized for (`--cache-size` /
/// this many counters per row): small enough that a cache of small files
/// keeps its estimates apart, and bounded by `admission::MAX_WIDTH`.
pub const SKETCH_BYTES_PER_COUNTER: u64 = 64 << 10;
/// Objects an admission looks at, at most, as the ones a new object
/// would push out: past them it is judged on those.
pub const MAX_ADMISSION_VICTIMS: usize = 64;

/// One version of one object in the cache. Workers hold it (an `Arc`)
/// while they send from it and read its slice bits without a lock.
#[derive(Debug)]
pub struct Object {
    pub key: String,
    /// This cache's number for the version (names its files).
    pub vid: u64,
    pub meta: Arc<Meta>,
    /// When it was fetched or last revalidated (Unix seconds): `meta`'s
    /// time, moved on by [`Store::refresh`].
    fetched: AtomicI64,
    words: Box<[AtomicU64]>,
    /// Held while the map file is written.
    map_lock: Mutex<()>,
    /// A pass-through object's slices (scratch.rs): in memory, for one
    /// response, never indexed. `None`: a cached object, in the files.
    pub scratch: Option<Scratch>,
}

impl Object {
    fn new(
        key: String,
        vid: u64,
        meta: Meta,
        present: &Present,
        scratch: Option<Scratch>,
    ) -> Object {
        let bytes = present.to_bytes();
        let words = bytes
            .chunks_exact(8)
            .map(|c| AtomicU64::new(u64::from_le_bytes(c.try_into().expect("8 bytes"))))
            .collect();
        Object {
            key,
            vid,
            fetched: AtomicI64::new(meta.fetched),
            meta: Arc::new(meta),
            words,
            map_lock: Mutex::new(()),
            scratch,
        }
    }

    pub fn length(&self) -> u64 {
        self.meta.version.length
    }

    /// Whether it may be served at Unix time `now` without asking the
    /// origin.
    pub fn fresh(&self, now: i64) -> bool {
        let fetched = self.fetched.load(Ordering::Relaxed);
        self.meta.freshness.fresh(fetched, now)
    }

    /// Whether it may be served at `now` because the origin failed.
    pub fn stale_usable(&self, now: i64) -> bool {
        let fetched = self.fetched.load(Ordering::Relaxed);
        self.meta.freshness.stale_usable(fetched, now)
    }

    /// Whether slice `index` is on disk.
    pub fn has(&self, index: u64) -> bool {
        assert!(index < slice::count(self.length()), "slice {index}");
        self.words[(index / 64) as usize].load(Ordering::Acquire) & (1 << (index % 64)) != 0
    }

    /// How many of the `len` bytes from `off` are on disk without a gap
    /// (whole slices from the one holding `off`).
    pub fn stored_run(&self, off: u64, len: u64) -> u64 {
        if len == 0 {
            return 0;
        }
        let end = off + len;
        assert!(end <= self.length(), "{off}+{len} past {}", self.length());
        let stored_to = slice::covering(off..end)
            .take_while(|&i| self.has(i))
            .last()
            .map_or(off, |i| slice::bytes(i, self.length()).end);
        stored_to.min(end) - off
    }

    /// The first slice the bytes `range` need that is not on disk.
    pub fn first_missing(&self, range: std::ops::Range<u64>) -> Option<u64> {
        slice::covering(range).find(|&i| !self.has(i))
    }

    fn present(&self) -> Present {
        let bytes: Vec<u8> = self
            .words
            .iter()
            .flat_map(|w| w.load(Ordering::Acquire).to_le_bytes())
            .collect();
        Present::from_bytes(self.length(), &bytes).expect("a map of this length")
    }

    /// Marks slice `index` stored; whether it was already.
    fn mark(&self, index: u64) -> bool {
        let bit = 1 << (index % 64);
        self.words[(index / 64) as usize].fetch_or(bit, Ordering::Release) & bit != 0
    }

    /// A pass-through object's response has sent everything below `off`:
    /// the whole slices there are freed.
    pub fn sent_below(&self, off: u64) {
        let Some(sc) = &self.scratch else {
            return;
        };
        let len = self.length();
        let whole = (off / slice::SLICE_SIZE) * slice::SLICE_SIZE;
        let below = if off >= len { len } else { whole };
        sc.release_below(below, |from, to| {
            slice::covering(from..to)
                .filter(|&i| self.has(i))
                .map(|i| {
                    let b = slice::bytes(i, len);
                    b.end - b.start
                })
                .sum()
        });
    }

    /// The data file, relative to the cache directory.
    pub fn data_path(&self) -> PathBuf {
        file_path(&self.key, self.vid, 'd')
    }
}

/// The name of an object's path in the cache: 32 hex digits of its
/// SHA-256.
pub fn key(path: &[u8]) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, path);
    d.as_ref()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn file_path(key: &str, vid: u64, kind: char) -> PathBuf {
    PathBuf::from(&key[..2]).join(format!("{key}.{vid}.{kind}"))
}

struct Entry {
    obj: Arc<Object>,
    used: u64,
    bytes: u64,
    /// Stored last in line (admission refused it a place ahead).
    probation: bool,
}

/// Where `Index::clock` starts: ticks below it are probation's, counting
/// down (`Index::low`), so that they sort before every object used.
const CLOCK_START: u64 = 1 << 62;

struct Index {
    objects: HashMap<String, Entry>,
    /// `used` → key, oldest first.
    lru: BTreeMap<u64, String>,
    clock: u64,
    /// The last probation tick handed out (counts down from CLOCK_START).
    low: u64,
    bytes: u64,
    next_vid: u64,
    /// How often each name was asked for lately.
    freq: Frequency,
}

impl Index {
    fn new(max_bytes: u64) -> Index {
        Index {
            objects: HashMap::new(),
            lru: BTreeMap::new(),
            clock: CLOCK_START,
            low: CLOCK_START,
            bytes: 0,
            next_vid: 0,
            freq: Frequency::new((max_bytes / SKETCH_BYTES_PER_COUNTER) as usize),
        }
    }

    /// Whether a new object of `length` bytes under `key` goes in first in
    /// line: while there is room, yes; past it, only if `key` was asked
    /// for more often than each of the least recently used objects, not on
    /// probation, whose bytes it needs (objects on probation go first
    /// anyway, but do not make room for a place ahead: a newcomer that
    /// only pushes out another newcomer is on probation too).
    fn admits(&self, key: &str, length: u64, max: u64) -> bool {
        let mut need = (self.bytes + length).saturating_sub(max);
        if need == 0 {
            return true;
        }
        let wanted = self.freq.estimate(key.as_bytes());
        let victims = self.lru.values().filter_map(|k| {
            let e = self.objects.get(k)?;
            let idle = k != key && Arc::strong_count(&e.obj) == 1;
            (idle && !e.probation).then_some((k, e.bytes))
        });
        for (k, bytes) in victims.take(MAX_ADMISSION_VICTIMS) {
            if self.freq.estimate(k.as_bytes()) >= wanted {
                return false;
            }
            need = need.saturating_sub(bytes);
            if need == 0 {
                break;
            }
        }
        true
    }
    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    fn touch(&mut self, key: &str) {
        let now = self.tick();
        if let Some(e) = self.objects.get_mut(key) {
            self.lru.remove(&e.used);
            e.used = now;
            e.probation = false;
            self.lru.insert(now, key.to_string());
        }
    }

    fn remove(&mut self, key: &str) -> Option<Arc<Object>> {
        let e = self.objects.remove(key)?;
        self.lru.remove(&e.used);
        self.bytes -= e.bytes;
        Some(e.obj)
    }

    /// Indexes `obj`: first in line, or, on `probation`, last.
    fn insert(&mut self, obj: Arc<Object>, bytes: u64, probation: bool) {
        let used = if probation {
            self.low -= 1;
            self.low
        } else {
            self.tick()
        };
        self.lru.insert(used, obj.key.clone());
        self.bytes += bytes;
        let e = Entry {
            obj,
            used,
            bytes,
            probation,
        };
        self.objects.insert(e.obj.key.clone(), e);
    }

    /// The least recently used objects to drop so that `max` bytes hold
    /// everything: never `keep`, and never one that a request or a fetch
    /// still holds (its `Arc` is shared), which would end that response
    /// short. When only those are left, the bound waits for them to be
    /// let go (the next slice stored drops them): it is exceeded by at
    /// most the objects in use, which the connections bound.
    fn over(&mut self, max: u64, keep: &str) -> Vec<Arc<Object>> {
        let mut out = Vec::new();
        while self.bytes > max {
            let objects = &self.objects;
            let idle = |k: &&String| {
                *k != keep
                    && objects
                        .get(*k)
                        .is_some_and(|e| Arc::strong_count(&e.obj) == 1)
            };
            let Some(key) = self.lru.values().find(idle).cloned() else {
                break;
            };
            out.extend(self.remove(&key));
        }
        out
    }
}

/// What the cache has done, for the metrics.
#[derive(Debug, Default)]
pub struct Counters {
    pub slices_stored: AtomicU64,
    pub evictions: AtomicU64,
    /// Objects served without storing (scratch.rs).
    pub passed: AtomicU64,
    /// New objects stored on probation (admission refused them a place
    /// ahead of objects asked for more often).
    pub probation: AtomicU64,
}

/// The cache directory and its index, shared by the edge's helpers (which
/// write) and the workers (which read objects' bits).
pub struct Store {
    dir: PathBuf,
    max_bytes: u64,
    index: Mutex<Index>,
    pub counters: Counters,
    /// Bytes of pass-through slices in memory (scratch.rs).
    scratch_bytes: Arc<AtomicU64>,
    /// The cache could not be written, and said so once.
    warned: AtomicBool,
}

impl Store {
    /// Opens (creating it if need be) the cache directory and indexes
    /// what it holds. `Err` is one line for the user.
    pub fn open(dir: &Path, max_bytes: u64) -> Result<Store, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("cache-dir {}: {e}", dir.display()))?;
        let s = Store {
            dir: dir.to_path_buf(),
            max_bytes,
            index: Mutex::new(Index::new(max_bytes)),
            counters: Counters::default(),
            scratch_bytes: Arc::new(AtomicU64::new(0)),
            warned: AtomicBool::new(false),
        };
        s.scan()
            .map_err(|e| format!("cache-dir {}: {e}", dir.display()))?;
        Ok(s)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The bytes of slices the cache holds.
    pub fn bytes(&self) -> u64 {
        self.lock().bytes
    }

    /// A request for `path`: the object stored for it, if any, marked as
    /// just used; and the request counted for admission, hit or miss.
    pub fn get(&self, path: &[u8]) -> Option<Arc<Object>> {
        let k = key(path);
        let mut ix = self.lock();
        let n = ix.objects.len();
        ix.freq.add(k.as_bytes(), n);
        let obj = ix.objects.get(&k)?.obj.clone();
        ix.touch(&k);
        Some(obj)
    }

    /// The object stored for `path`, if any, as it is (not a request).
    pub fn peek(&self, path: &[u8]) -> Option<Arc<Object>> {
        self.lock().objects.get(&key(path)).map(|e| e.obj.clone())
    }

    /// Whether a new object of `length` bytes for `path` would go in first
    /// in line (see `Index::admits`), rather than on probation.
    pub fn admits(&self, path: &[u8], length: u64) -> bool {
        self.lock().admits(&key(path), length, self.max_bytes)
    }

    /// A new version of `path`'s object, with no slice yet, in place of
    /// any older one (whose files are unlinked; descriptors open on them
    /// still read the old bytes).
    pub fn begin(&self, path: &[u8], meta: Meta) -> std::io::Result<Arc<Object>> {
        assert!(meta.version.length <= slice::MAX_OBJECT);
        let k = key(path);
        let vid = {
            let mut ix = self.lock();
            ix.next_vid += 1;
            ix.next_vid
        };
        let present = Present::new(meta.version.length);
        let obj = Arc::new(Object::new(k.clone(), vid, meta, &present, None));
        let made = (|| {
            std::fs::create_dir_all(self.dir.join(&k[..2]))?;
            let data = File::create(self.dir.join(obj.data_path()))?;
            data.set_len(obj.length())?;
            self.write_atomically(&file_path(&k, vid, 'p'), &present.to_bytes())?;
            self.write_atomically(&file_path(&k, vid, 'm'), obj.meta.to_text().as_bytes())
        })();
        if let Err(e) = made {
            // A disk that filled part way: nothing of it is left.
            self.unlink(&obj);
            return Err(e);
        }
        let old = {
            let mut ix = self.lock();
            let old = ix.remove(&k);
            let probation = !ix.admits(&k, obj.length(), self.max_bytes);
            if probation {
                self.counters.probation.fetch_add(1, Ordering::Relaxed);
            }
            ix.insert(obj.clone(), 0, probation);
            old
        };
        if let Some(o) = old {
            self.unlink(&o);
        }
        Ok(obj)
    }

    /// Stores slice `index` of `obj` (exactly its bytes), durable before
    /// it is marked; then drops the least recently used objects past the
    /// bound. `Ok(true)`: the slice is stored (now or before); `Ok(false)`:
    /// the object was replaced or evicted meanwhile, and nothing is.
    pub fn put(&self, obj: &Arc<Object>, index: u64, bytes: &[u8]) -> std::io::Result<bool> {
        let span = slice::bytes(index, obj.length());
        assert_eq!(bytes.len() as u64, span.end - span.start, "slice {index}");
        if obj.has(index) {
            return Ok(true);
        }
        if let Some(sc) = &obj.scratch {
            sc.write(span.start, bytes)?;
            obj.mark(index);
            return Ok(true);
        }
        if !self.current(obj) {
            return Ok(false);
        }
        let data = match File::options()
            .write(true)
            .open(self.dir.join(obj.data_path()))
        {
            Ok(f) => f,
            // Evicted or replaced since the look above.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        };
        data.write_all_at(bytes, span.start)?;
        data.sync_data()?;
        let gone = {
            let mut ix = self.lock();
            if ix
                .objects
                .get(&obj.key)
                .is_none_or(|e| e.obj.vid != obj.vid)
            {
                return Ok(false);
            }
            if obj.mark(index) {
                // Another helper stored it meanwhile.
                return Ok(true);
            }
            let e = ix.objects.get_mut(&obj.key).expect("current");
            e.bytes += bytes.len() as u64;
            ix.bytes += bytes.len() as u64;
            ix.over(self.max_bytes, &obj.key)
        };
        // The map is written under the object's own lock, not the index's
        // (workers take that one): each write holds every bit set so far,
        // so the last one written has them all. If it fails, the slice is
        // served from memory's bit until a restart, then fetched again.
        let saved = {
            let _one_writer = obj.map_lock.lock().unwrap_or_else(|e| e.into_inner());
            self.write_atomically(
                &file_path(&obj.key, obj.vid, 'p'),
                &obj.present().to_bytes(),
            )
        };
        self.counters.slices_stored.fetch_add(1, Ordering::Relaxed);
        self.warned.store(false, Ordering::Relaxed);
        for o in gone {
            self.counters.evictions.fetch_add(1, Ordering::Relaxed);
            self.unlink(&o);
        }
        saved.map(|()| true)
    }

    /// The origin said `obj` is still its version (a 304): fresh again
    /// from `now`, and so recorded.
    pub fn refresh(&self, obj: &Object, now: i64) -> std::io::Result<()> {
        obj.fetched.store(now, Ordering::Relaxed);
        if !self.current(obj) {
            return Ok(());
        }
        let _one_writer = obj.map_lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut meta = (*obj.meta).clone();
        meta.fetched = now;
        let text = meta.to_text();
        self.write_atomically(&file_path(&obj.key, obj.vid, 'm'), text.as_bytes())
    }

    /// An object of `path` served without storing (scratch.rs): never
    /// indexed, with a version number of its own (so that its slices are
    /// fetched for it alone).
    pub fn pass_through(&self, path: &[u8], meta: Meta) -> std::io::Result<Arc<Object>> {
        assert!(meta.version.length <= slice::MAX_OBJECT);
        let vid = {
            let mut ix = self.lock();
            ix.next_vid += 1;
            ix.next_vid
        };
        let scratch = Scratch::new(meta.version.length, self.scratch_bytes.clone())?;
        let present = Present::new(meta.version.length);
        self.counters.passed.fetch_add(1, Ordering::Relaxed);
        Ok(Arc::new(Object::new(
            key(path),
            vid,
            meta,
            &present,
            Some(scratch),
        )))
    }

    /// The cache could not be written (`e`): one warning, until a slice
    /// is stored again.
    pub fn cannot_store(&self, e: &std::io::Error) {
        if !self.warned.swap(true, Ordering::Relaxed) {
            crate::warn!(
                "cache-dir {}: cannot store ({e}); serving from the origin without storing until it can",
                self.dir.display()
            );
        }
    }

    /// Bytes of pass-through slices in memory now.
    pub fn scratch_bytes(&self) -> u64 {
        self.scratch_bytes.load(Ordering::Relaxed)
    }

    /// Drops `path`'s object (the origin no longer has it).
    pub fn forget(&self, path: &[u8]) {
        self.drop_where(&key(path), |_| true);
    }

    /// Drops `obj`, if it is still the version the cache holds for its
    /// path (the origin's copy moved on: the next request fetches anew).
    pub fn forget_version(&self, obj: &Object) {
        self.drop_where(&obj.key, |held| held.vid == obj.vid);
    }

    /// Removes `key`'s object from the index if `which` says so, and
    /// unlinks its files once the lock is let go.
    fn drop_where(&self, key: &str, which: impl Fn(&Object) -> bool) {
        let gone = {
            let mut index = self.lock();
            match index.objects.get(key) {
                Some(e) if which(&e.obj) => index.remove(key),
                _ => None,
            }
        };
        if let Some(o) = gone {
            self.unlink(&o);
        }
    }

    /// Whether `obj` is the version the cache holds for its path.
    fn current(&self, obj: &Object) -> bool {
        self.lock()
            .objects
            .get(&obj.key)
            .is_some_and(|e| e.obj.vid == obj.vid)
    }

    /// Writes `bytes` to `rel` whole or not at all: a temporary file,
    /// `fdatasync`, rename.
    fn write_atomically(&self, rel: &Path, bytes: &[u8]) -> std::io::Result<()> {
        let path = self.dir.join(rel);
        let name = path.file_name().expect("a file").to_string_lossy();
        let tmp = path.with_file_name(format!(".tmp-{}-{name}", std::process::id()));
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_data()?;
        std::fs::rename(&tmp, &path)
    }

    fn unlink(&self, o: &Object) {
        for kind in ['p', 'm', 'd'] {
            let _ = std::fs::remove_file(self.dir.join(file_path(&o.key, o.vid, kind)));
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Indexes what the directory holds, oldest map first; removes
    /// temporary files, older versions, and objects whose files disagree.
    fn scan(&self) -> std::io::Result<()> {
        let mut found: Vec<(std::time::SystemTime, Arc<Object>, u64)> = Vec::new();
        let mut best: HashMap<String, u64> = HashMap::new();
        let mut max_vid = 0;
        let mut doomed = Vec::new();
        for sub in std::fs::read_dir(&self.dir)?.flatten() {
            if !sub.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            for ent in std::fs::read_dir(sub.path())?.flatten() {
                let name = ent.file_name().to_string_lossy().into_owned();
                let parts: Vec<&str> = name.split('.').collect();
                let vid = parts.get(1).and_then(|v| v.parse::<u64>().ok());
                match (parts.as_slice(), vid) {
                    ([k, _, "m"], Some(vid)) if k.len() == 32 => {
                        max_vid = max_vid.max(vid);
                        match self.load(k, vid) {
                            Some((when, obj, bytes)) => {
                                let b = best.entry(k.to_string()).or_insert(vid);
                                *b = (*b).max(vid);
                                found.push((when, Arc::new(obj), bytes));
                            }
                            None => doomed.push((k.to_string(), vid)),
                        }
                    }
                    ([_, _, "d" | "p"], Some(vid)) => max_vid = max_vid.max(vid),
                    _ => {
                        if name.starts_with(".tmp-") {
                            let _ = std::fs::remove_file(ent.path());
                        }
                    }
                }
            }
        }
        found.sort_by_key(|f| f.0);
        let mut ix = self.lock();
        ix.next_vid = max_vid;
        for (_, obj, bytes) in found {
            if best.get(&obj.key) == Some(&obj.vid) {
                ix.insert(obj, bytes, false);
            } else {
                doomed.push((obj.key.clone(), obj.vid));
            }
        }
        let gone = ix.over(self.max_bytes, "");
        drop(ix);
        for (k, vid) in doomed {
            for kind in ['p', 'm', 'd'] {
                let _ = std::fs::remove_file(self.dir.join(file_path(&k, vid, kind)));
            }
        }
        for o in gone {
            self.unlink(&o);
        }
        // Data files whose record is gone (a crash between the data and
        // the record): nothing names them.
        for sub in std::fs::read_dir(&self.dir)?.flatten() {
            let Ok(rd) = std::fs::read_dir(sub.path()) else {
                continue;
            };
            for ent in rd.flatten() {
                let name = ent.file_name().to_string_lossy().into_owned();
                if let Some(stem) = name.strip_suffix(".d").or(name.strip_suffix(".p")) {
                    if !ent.path().with_file_name(format!("{stem}.m")).exists() {
                        let _ = std::fs::remove_file(ent.path());
                    }
                }
            }
        }
        Ok(())
    }

    /// An object's three files read back, if they agree: (the map's
    /// modification time, the object, its stored bytes).
    fn load(&self, k: &str, vid: u64) -> Option<(std::time::SystemTime, Object, u64)> {
        let text = std::fs::read_to_string(self.dir.join(file_path(k, vid, 'm'))).ok()?;
        let meta = Meta::from_text(&text)?;
        let len = meta.version.length;
        let data = std::fs::metadata(self.dir.join(file_path(k, vid, 'd'))).ok()?;
        if data.len() != len || len > slice::MAX_OBJECT {
            return None;
        }
        let p_path = self.dir.join(file_path(k, vid, 'p'));
        let present = Present::from_bytes(len, &std::fs::read(&p_path).ok()?)?;
        let when = std::fs::metadata(&p_path).ok()?.modified().ok()?;
        let bytes = (0..present.slices())
            .filter(|&i| present.has(i))
            .map(|i| {
                let b = slice::bytes(i, len);
                b.end - b.start
            })
            .sum();
        Some((
            when,
            Object::new(k.to_string(), vid, meta, &present, None),
            bytes,
        ))
    }
}

#[cfg(test)]
mod tests;
