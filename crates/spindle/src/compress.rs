//! Compression on the fly, made once and kept on disk (`--compress`).
//!
//! The session decides what may be compressed and names the result by the
//! version it is made from (`spindle_core::compress`). A worker opens that
//! name beneath the cache directory like any file; when it is missing, the
//! response goes uncompressed at once and the worker hands a
//! [`Job`] to the [`Compressor`]: a few helper threads shared by every
//! worker, at a lower priority ([`HELPER_NICE`]), with at most
//! [`MAX_QUEUED`] jobs waiting (past that a job is dropped; the next
//! request for the file asks again). A name being made is asked for once,
//! however many requests miss it meanwhile.
//!
//! A helper opens the file beneath its root, checks that it still has the
//! version of the name, compresses it into a temporary file in the cache
//! directory (`.tmp-*`), checks the version again (a file changed while it
//! was read gives nothing), makes the result durable (`fdatasync`) and
//! renames it into place, so that a name, once there, holds a whole
//! result even after a crash. A result that saves less than
//! [`MIN_SAVING_PERCENT`] of the file is stored as an empty file, which
//! the session takes as "send it as it is".
//!
//! The cache is bounded (`--compress-cache-size`): the helpers keep an
//! index of its files, their sizes and when each was last served, and
//! unlink the least recently served until the total fits. At start the
//! directory is scanned: temporary files left by a crash are removed, and
//! the results found are indexed by their modification time. A cache
//! directory that cannot be written (read-only, full, wrong owner) costs
//! one warning and the responses go uncompressed.

use std::collections::{HashMap, HashSet};
use std::ffi::{CStr, CString};
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use spindle_core::compress::{is_stored_name, Job};
use spindle_core::Encoding;

use crate::fs::{Root, Roots};
use crate::jobs::JobQueue;

/// Jobs waiting for a helper, across all workers.
pub const MAX_QUEUED: usize = 256;
/// The helpers' nice value: below every worker.
pub const HELPER_NICE: i32 = 10;
/// Bytes a helper reads of a file at a time.
pub const READ_BLOCK: usize = 64 * 1024;
/// Bytes between two looks at the file's version while it is read: a
/// file changed mid-way stops its compression soon, not at its end.
pub const RECHECK_EVERY: u64 = 1 << 20;
/// A result must save at least this share of the file to be kept.
pub const MIN_SAVING_PERCENT: u64 = 5;
/// The default cache directory (FHS: a cache the program can rebuild).
pub const DEFAULT_DIR: &str = "/var/cache/spindle/compress";
/// The default bound on the cache's bytes.
pub const DEFAULT_CACHE_BYTES: u64 = 1 << 30;
/// Helper threads by default: compressing is made once per file version,
/// and one helper keeps it from ever taking a second core from the
/// workers.
pub const DEFAULT_THREADS: usize = 1;
/// Most helper threads.
pub const MAX_THREADS: usize = 64;

/// Compression levels, one per coding (chosen in docs/decisions.md,
/// "Compression levels").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Levels {
    pub gzip: u32,
    pub br: u32,
    pub zstd: i32,
}

impl Default for Levels {
    fn default() -> Levels {
        Levels {
            gzip: 9,
            br: 11,
            zstd: 19,
        }
    }
}

impl Levels {
    /// Each level within its coding's range (the configuration's check).
    pub fn check(&self) -> Result<(), String> {
        if !(1..=9).contains(&self.gzip) {
            return Err(format!("compress-levels: gzip {} is not 1 to 9", self.gzip));
        }
        if !(0..=11).contains(&self.br) {
            return Err(format!("compress-levels: br {} is not 0 to 11", self.br));
        }
        if !(1..=19).contains(&self.zstd) {
            return Err(format!(
                "compress-levels: zstd {} is not 1 to 19",
                self.zstd
            ));
        }
        Ok(())
    }
}

/// What the compressor was configured with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub dir: PathBuf,
    pub max_bytes: u64,
    pub threads: usize,
    pub levels: Levels,
}

/// The compressor's counters (read by the metrics endpoint).
#[derive(Debug, Default)]
pub struct Counters {
    /// Results made, and the bytes read and written making them.
    pub made: AtomicU64,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    /// Jobs that gave nothing: the file changed or went, or the cache
    /// could not be written.
    pub failed: AtomicU64,
    /// Results removed to keep the cache within its bound.
    pub evicted: AtomicU64,
    /// Jobs queued or being made now.
    pub making: AtomicU64,
}

/// One stored result in the index.
#[derive(Debug, Clone, Copy)]
struct Entry {
    bytes: u64,
    /// The index's clock when it was made or last served.
    used: u64,
}

/// The cache directory's results, and the names being made.
#[derive(Debug, Default)]
struct Index {
    entries: HashMap<CString, Entry>,
    bytes: u64,
    clock: u64,
    making: HashSet<CString>,
}

impl Index {
    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// Adds (or replaces) `name`; returns the names to unlink so that the
    /// cache fits `max` (the least recently used first; never `name`).
    fn insert(&mut self, name: CString, bytes: u64, used: u64, max: u64) -> Vec<CString> {
        if let Some(old) = self.entries.insert(name.clone(), Entry { bytes, used }) {
            self.bytes -= old.bytes;
        }
        self.bytes += bytes;
        let mut out = Vec::new();
        if self.bytes <= max {
            return out;
        }
        let mut by_use: Vec<(u64, CString)> = self
            .entries
            .iter()
            .filter(|(n, _)| **n != name)
            .map(|(n, e)| (e.used, n.clone()))
            .collect();
        by_use.sort_unstable();
        for (_, n) in by_use {
            if self.bytes <= max {
                break;
            }
            let e = self.entries.remove(&n).expect("indexed");
            self.bytes -= e.bytes;
            out.push(n);
        }
        out
    }
}

struct Work {
    job: Job,
    roots: Arc<Roots>,
}

struct Shared {
    dir: Root,
    settings: Settings,
    index: Mutex<Index>,
    queue: JobQueue<Work>,
    counters: Arc<Counters>,
    /// One warning for a cache that cannot be written.
    warned: AtomicBool,
}

/// The helper threads and the cache directory they fill.
pub struct Compressor {
    shared: Arc<Shared>,
}

impl Compressor {
    /// Opens (creating it if need be) the cache directory, tidies and
    /// indexes it, and starts the helpers. `Err` is one line for the user.
    pub fn start(settings: Settings) -> Result<Arc<Compressor>, String> {
        std::fs::create_dir_all(&settings.dir)
            .map_err(|e| format!("compress-cache {}: {e}", settings.dir.display()))?;
        let dir = Root::open(&settings.dir).map_err(|e| format!("compress-cache: {e}"))?;
        let counters = Arc::new(Counters::default());
        let shared = Arc::new(Shared {
            index: Mutex::new(Index::default()),
            queue: JobQueue::new(MAX_QUEUED),
            counters,
            warned: AtomicBool::new(false),
            dir,
            settings,
        });
        scan(&shared)?;
        for i in 0..shared.settings.threads.clamp(1, MAX_THREADS) {
            let s = shared.clone();
            std::thread::Builder::new()
                .name(format!("spindle-zip{i}"))
                .spawn(move || helper(&s))
                .map_err(|e| format!("cannot start a compression thread: {e}"))?;
        }
        let z = Arc::new(Compressor { shared });
        let _ = RUNNING.set(z.clone());
        Ok(z)
    }

    /// The cache directory, as a root the workers open results beneath.
    pub fn dir(&self) -> Result<Root, String> {
        Root::open(self.shared.dir.path())
    }

    pub fn counters(&self) -> Arc<Counters> {
        self.shared.counters.clone()
    }

    /// Asks for `job`'s result; `false` when it is already being made,
    /// the queue is full, or a helper holds the index (the next request
    /// asks again: a worker never waits for a helper).
    pub fn request(&self, job: Job, roots: &Arc<Roots>) -> bool {
        let c = &self.shared.counters;
        let Some(mut ix) = try_lock(&self.shared.index) else {
            return false;
        };
        // Made meanwhile: a miss is seen before the file is opened again,
        // and the job asked for after.
        if ix.entries.contains_key(&job.name) || ix.making.contains(&job.name) {
            return false;
        }
        let name = job.name.clone();
        // The queue's lock inside the index's: a helper never takes them
        // the other way round.
        let queued = self.shared.queue.push(Work {
            job,
            roots: roots.clone(),
        });
        if queued {
            ix.making.insert(name);
            c.making.fetch_add(1, Ordering::Relaxed);
        }
        queued
    }

    /// The results a worker served since it last told (once a tick, not
    /// once a response: the index's lock is shared by every worker) are
    /// the most recently used, and `names` is emptied; unless a helper
    /// holds the index now (the worker never waits for it), then they stay
    /// for the next time. The order is approximate either way.
    pub fn served(&self, names: &mut Vec<CString>) {
        if names.is_empty() {
            return;
        }
        let Some(mut ix) = try_lock(&self.shared.index) else {
            return;
        };
        let now = ix.tick();
        for name in names.drain(..) {
            if let Some(e) = ix.entries.get_mut(&name) {
                e.used = now;
            }
        }
    }

    /// The bytes the cache holds now.
    pub fn bytes(&self) -> u64 {
        lock(&self.shared.index).bytes
    }
}

/// The process's compressor, for the metrics endpoint.
static RUNNING: std::sync::OnceLock<Arc<Compressor>> = std::sync::OnceLock::new();

/// The compressor's metrics, in Prometheus' text format (nothing when
/// compression is off).
/// `hits` and `misses` are the workers' counts (`WorkerMetrics`).
pub fn metrics_text(hits: u64, misses: u64) -> String {
    let Some(z) = RUNNING.get() else {
        return String::new();
    };
    let c = &z.shared.counters;
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let mut o = String::new();
    let mut fam = |name: &str, kind: &str, help: &str, samples: &[(&str, u64)]| {
        crate::metrics::family_text(&mut o, name, kind, help, samples)
    };
    fam(
        "spindle_compress_lookups_total",
        "counter",
        "Responses that could go compressed: hit (sent from a stored result) or miss (sent as they are; the result asked for).",
        &[("{result=\"hit\"}", hits), ("{result=\"miss\"}", misses)],
    );
    fam(
        "spindle_compress_jobs_total",
        "counter",
        "Compressions finished: made (stored; an empty result when it did not pay) or failed (the file changed or went, or the cache could not be written).",
        &[("{result=\"made\"}", get(&c.made)), ("{result=\"failed\"}", get(&c.failed))],
    );
    fam(
        "spindle_compress_bytes_total",
        "counter",
        "Bytes compressed: in (read from files) and out (written to the cache).",
        &[
            ("{side=\"in\"}", get(&c.bytes_in)),
            ("{side=\"out\"}", get(&c.bytes_out)),
        ],
    );
    fam(
        "spindle_compress_evictions_total",
        "counter",
        "Stored results removed to keep the cache within --compress-cache-size.",
        &[("", get(&c.evicted))],
    );
    fam(
        "spindle_compress_in_progress",
        "gauge",
        "Compressions queued or running now.",
        &[("", get(&c.making))],
    );
    fam(
        "spindle_compress_cache_bytes",
        "gauge",
        "Bytes of stored results in the cache.",
        &[("", z.bytes())],
    );
    o
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The lock if it is free now (a poisoned one is taken as free).
fn try_lock<T>(m: &Mutex<T>) -> Option<std::sync::MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// Removes what a crash left half made, and indexes the results, oldest
/// first; then unlinks the oldest past the bound.
fn scan(s: &Shared) -> Result<(), String> {
    let path = s.dir.path();
    let rd =
        std::fs::read_dir(path).map_err(|e| format!("compress-cache {}: {e}", path.display()))?;
    let mut found: Vec<(std::time::SystemTime, CString, u64)> = Vec::new();
    for ent in rd.flatten() {
        let name = ent.file_name();
        let bytes = name.as_bytes();
        if bytes.starts_with(b".tmp-") {
            let _ = std::fs::remove_file(ent.path());
            continue;
        }
        let Some(n) = name.to_str().filter(|n| is_stored_name(n)) else {
            continue;
        };
        let Ok(meta) = ent.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        let when = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
        found.push((when, CString::new(n).expect("no NUL"), meta.len()));
    }
    found.sort();
    let mut ix = lock(&s.index);
    for (_, name, bytes) in found {
        let used = ix.tick();
        for gone in ix.insert(name, bytes, used, s.settings.max_bytes) {
            unlink(s, &gone);
        }
    }
    Ok(())
}

fn unlink(s: &Shared, name: &CStr) {
    let _ = s.dir.unlink(name);
    s.counters.evicted.fetch_add(1, Ordering::Relaxed);
}

fn helper(s: &Shared) {
    crate::sys::lower_thread_priority(HELPER_NICE);
    loop {
        let w = s.queue.pop();
        let name = w.job.name.clone();
        match make(s, &w) {
            Ok(Some(bytes)) => {
                let gone = {
                    let mut ix = lock(&s.index);
                    let used = ix.tick();
                    ix.insert(name.clone(), bytes, used, s.settings.max_bytes)
                };
                for g in gone {
                    unlink(s, &g);
                }
            }
            Ok(None) => {
                s.counters.failed.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                s.counters.failed.fetch_add(1, Ordering::Relaxed);
                if !s.warned.swap(true, Ordering::Relaxed) {
                    crate::errlog::write(
                        crate::errlog::Level::Warn,
                        format_args!(
                            "compress-cache {}: {e}; files are sent uncompressed until it can be written (said once)",
                            s.dir.path().display()
                        ),
                    );
                }
            }
        }
        lock(&s.index).making.remove(&name);
        s.counters.making.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Whether the open file `f` still has the version the job names.
fn same_version(f: &File, job: &Job) -> bool {
    use std::os::unix::fs::MetadataExt;
    f.metadata().is_ok_and(|m| {
        m.ino() == job.src.ino
            && m.size() == job.src.size
            && m.mtime() == job.src.mtime_sec
            && m.mtime_nsec() == i64::from(job.src.mtime_nsec)
    })
}

/// Makes the job's result: `Ok(Some(bytes))` stored (0: not worth it),
/// `Ok(None)` the file is gone or changed, `Err` the cache could not be
/// written.
fn make(s: &Shared, w: &Work) -> std::io::Result<Option<u64>> {
    let job = &w.job;
    let Ok(fd) = w.roots.get(job.root).open_beneath(&job.path) else {
        return Ok(None);
    };
    let mut src = File::from(fd);
    if !same_version(&src, job) {
        return Ok(None);
    }
    let tmp = Temp::create(&s.dir, &job.name)?;
    let out = std::io::BufWriter::with_capacity(READ_BLOCK, tmp.file()?);
    let written = match encode(&mut src, out, job, &s.settings.levels) {
        Ok(n) => n,
        // A read error or a short read: the file changed or went.
        Err(Fault::Read) => return Ok(None),
        Err(Fault::Write(e)) => return Err(e),
    };
    if written.0 != job.src.size || !same_version(&src, job) {
        return Ok(None);
    }
    let keep = u128::from(written.1) * 100
        <= u128::from(job.src.size) * u128::from(100 - MIN_SAVING_PERCENT);
    let f = tmp.file()?;
    if !keep {
        f.set_len(0)?;
    }
    f.sync_data()?;
    tmp.rename_to(&job.name)?;
    let c = &s.counters;
    c.made.fetch_add(1, Ordering::Relaxed);
    c.bytes_in.fetch_add(written.0, Ordering::Relaxed);
    c.bytes_out.fetch_add(written.1, Ordering::Relaxed);
    Ok(Some(if keep { written.1 } else { 0 }))
}

enum Fault {
    Read,
    Write(std::io::Error),
}

/// Counts the bytes written through it.
struct Counted<W: Write> {
    inner: W,
    n: u64,
}

impl<W: Write> Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.n += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Compresses all of `src` into `out` in the job's coding: (bytes read,
/// bytes written). A change of the file's version seen on the way is a
/// [`Fault::Read`].
fn encode<W: Write>(
    src: &mut File,
    out: W,
    job: &Job,
    levels: &Levels,
) -> Result<(u64, u64), Fault> {
    let out = Counted { inner: out, n: 0 };
    let mut buf = vec![0u8; READ_BLOCK];
    let mut read = 0u64;
    let pump = |w: &mut dyn Write| -> Result<(), Fault> {
        loop {
            let n = match src.read(&mut buf) {
                Ok(0) => return Ok(()),
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => return Err(Fault::Read),
            };
            if (read + n as u64) / RECHECK_EVERY != read / RECHECK_EVERY && !same_version(src, job)
            {
                return Err(Fault::Read);
            }
            read += n as u64;
            w.write_all(&buf[..n]).map_err(Fault::Write)?;
        }
    };
    let out = encoded(job.coding, levels, out, pump)?;
    Ok((read, out.n))
}

/// `data` compressed in `coding` at its level of `levels` (a listing's
/// body, made in memory by a listing helper).
pub fn compress_bytes(coding: Encoding, levels: &Levels, data: &[u8]) -> std::io::Result<Vec<u8>> {
    let out = Vec::with_capacity(data.len() / 4);
    encoded(coding, levels, out, |w| {
        w.write_all(data).map_err(Fault::Write)
    })
    .map_err(|f| match f {
        Fault::Write(e) => e,
        Fault::Read => std::io::Error::other("read fault without a read"),
    })
}

/// Runs `pump` into an encoder of `coding` over `out`, finishes the
/// encoder and hands `out` back, flushed.
fn encoded<W: Write>(
    coding: Encoding,
    levels: &Levels,
    out: W,
    pump: impl FnOnce(&mut dyn Write) -> Result<(), Fault>,
) -> Result<W, Fault> {
    let mut out = match coding {
        Encoding::Gzip => {
            let mut z = flate2::write::GzEncoder::new(out, flate2::Compression::new(levels.gzip));
            pump(&mut z)?;
            z.finish().map_err(Fault::Write)?
        }
        Encoding::Br => {
            let params = brotli::enc::BrotliEncoderParams {
                quality: levels.br as i32,
                lgwin: 22,
                ..Default::default()
            };
            let mut b = brotli::CompressorWriter::with_params(out, READ_BLOCK, &params);
            pump(&mut b)?;
            b.flush().map_err(Fault::Write)?;
            b.into_inner()
        }
        Encoding::Zstd => {
            let mut z =
                zstd::stream::write::Encoder::new(out, levels.zstd).map_err(Fault::Write)?;
            pump(&mut z)?;
            z.finish().map_err(Fault::Write)?
        }
    };
    out.flush().map_err(Fault::Write)?;
    Ok(out)
}

/// A temporary file in the cache directory, removed unless renamed.
struct Temp<'a> {
    dir: &'a Root,
    name: Option<CString>,
    file: File,
}

impl<'a> Temp<'a> {
    fn create(dir: &'a Root, final_name: &CStr) -> std::io::Result<Temp<'a>> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let name = CString::new(format!(
            ".tmp-{}-{n}-{}",
            std::process::id(),
            final_name.to_string_lossy()
        ))
        .expect("no NUL");
        let file = dir.create_new(&name)?;
        Ok(Temp {
            dir,
            name: Some(name),
            file,
        })
    }

    /// The file, to write (a second handle on the same open file).
    fn file(&self) -> std::io::Result<File> {
        self.file.try_clone()
    }

    fn rename_to(mut self, name: &CStr) -> std::io::Result<()> {
        let from = self.name.take().expect("not renamed yet");
        let r = self.dir.rename(&from, name);
        if r.is_err() {
            self.name = Some(from);
        }
        r
    }
}

impl Drop for Temp<'_> {
    fn drop(&mut self) {
        if let Some(n) = &self.name {
            let _ = self.dir.unlink(n);
        }
    }
}
