//! The edge's helpers: threads shared by every worker that fetch slices
//! from the origin ([`Origin`]) and store them ([`Store`]). A worker asks
//! for a slice with [`Fetcher::want`] and goes on with its loop; the
//! answer arrives in its mailbox ([`Mailbox`], the eventfd its loop waits
//! on). A slice wanted by many requests at once is fetched once: the
//! others wait on the first one's fetch (`coalesced` in the counters).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use spindle_core::edge::meta::{Freshness, Meta};

use super::fetch::{Answer, Origin, Revalidated, Slice};
use super::store::{Object, Store};
use crate::jobs::{JobQueue, Mailbox};

/// Fetches waiting for a helper, across all workers; past it a want is
/// refused (the response is a 503).
pub const MAX_QUEUED: usize = 1024;
/// Requests waiting on one slice's fetch; past it a want is refused.
pub const MAX_WAITERS: usize = 4096;
/// Helper threads by default: each holds one origin request at a time,
/// so this is the edge's parallelism towards its origin.
pub const DEFAULT_THREADS: usize = 8;
/// Seconds an origin's 404 is remembered (nginx's `proxy_cache_valid
/// 404` is often set to a minute; Traffic Server's negative caching
/// defaults to 30 s): long enough that a flood of requests for a missing
/// name costs the origin one a while, short enough that a file put
/// there is soon seen.
pub const NOT_FOUND_TTL: i64 = 10;
/// Paths remembered as missing, at most; past it the list starts over.
pub const MAX_NOT_FOUND: usize = 65_536;

/// How the origin's answers turn into freshness (seconds).
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    /// Lifetime when the origin says nothing (nginx's `proxy_cache_valid`).
    pub default_ttl: u64,
    /// `stale-if-error` when the origin says nothing.
    pub stale_default: u64,
    /// The most `stale-if-error` the edge grants, whatever the origin says.
    pub stale_max: u64,
}

/// One slice a request needs: of the version `object` (None: slice 0 of
/// whatever version the origin has, for an object not stored yet). With
/// `revalidate`, `object` is a stale copy: the origin is asked whether it
/// still holds (a HEAD), and only if not is slice 0 of its new version
/// fetched.
#[derive(Debug, Clone)]
pub struct Want {
    pub path: Vec<u8>,
    pub index: u64,
    pub object: Option<Arc<Object>>,
    pub revalidate: bool,
}

impl Want {
    /// Slice `index` of `object`.
    pub fn slice(path: &[u8], index: u64, object: &Arc<Object>) -> Want {
        Want {
            path: path.to_vec(),
            index,
            object: Some(object.clone()),
            revalidate: false,
        }
    }

    /// The first slice of whatever version the origin has.
    pub fn first(path: &[u8]) -> Want {
        Want {
            path: path.to_vec(),
            index: 0,
            object: None,
            revalidate: false,
        }
    }

    /// Whether the stale `object` still holds, else the first slice of
    /// the origin's version.
    pub fn revalidation(path: &[u8], object: &Arc<Object>) -> Want {
        Want {
            path: path.to_vec(),
            index: 0,
            object: Some(object.clone()),
            revalidate: true,
        }
    }

    fn id(&self) -> SliceId {
        SliceId {
            path: self.path.clone(),
            vid: self.object.as_ref().map_or(0, |o| o.vid),
            index: self.index,
            revalidate: self.revalidate,
        }
    }
}

/// What became of a wanted slice.
#[derive(Debug, Clone)]
pub enum Landed {
    /// Stored in this object (for a `Want` without one: the version just
    /// made).
    Stored(Arc<Object>),
    /// The origin has no such object.
    NotFound,
    /// The origin's object is no longer the version asked for.
    Changed,
    /// No origin answered usefully, or the slice could not be stored.
    Failed(String),
    /// The cache's copy was replaced or dropped while the slice was
    /// fetched: the request asks anew (a first slice), or its response
    /// ends short.
    Dropped,
    /// The slice could not be held: pass-through memory is full
    /// (scratch.rs). The client may ask again.
    Busy,
}

/// A helper's answer to one waiter.
#[derive(Debug)]
pub struct Done<W> {
    pub who: W,
    /// What was asked: the path, the version (0: the origin's current,
    /// a first slice) and the slice. A connection's next request must
    /// not take a late answer to its previous one for its own.
    pub path: Vec<u8>,
    pub vid: u64,
    pub index: u64,
    pub landed: Landed,
}

/// What the fetcher has done, for the metrics.
#[derive(Debug, Default)]
pub struct Counters {
    /// Requests for an object found fresh (counted by the workers).
    pub hits: AtomicU64,
    /// Requests for an object not cached at all.
    pub misses: AtomicU64,
    pub fetches: AtomicU64,
    pub revalidations: AtomicU64,
    pub coalesced: AtomicU64,
    pub origin_bytes: AtomicU64,
    pub origin_errors: AtomicU64,
    pub store_errors: AtomicU64,
    pub refused: AtomicU64,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SliceId {
    path: Vec<u8>,
    /// 0: the origin's current version (a `Want` without an object).
    vid: u64,
    index: u64,
    revalidate: bool,
}

type Waiters<W> = Vec<(Arc<Mailbox<Done<W>>>, W)>;

struct Shared<W> {
    origin: Origin,
    store: Arc<Store>,
    policy: Policy,
    queue: JobQueue<Want>,
    waiting: Mutex<HashMap<SliceId, Waiters<W>>>,
    /// Paths the origin answered 404 for, and until when that holds.
    not_found: Mutex<HashMap<Vec<u8>, i64>>,
    counters: Counters,
}

/// The helpers and what they share.
pub struct Fetcher<W> {
    shared: Arc<Shared<W>>,
}

impl<W: Send + 'static> Fetcher<W> {
    /// Starts `threads` helpers.
    pub fn start(
        origin: Origin,
        store: Arc<Store>,
        policy: Policy,
        threads: usize,
    ) -> Result<Arc<Fetcher<W>>, String> {
        let shared = Arc::new(Shared {
            origin,
            store,
            policy,
            queue: JobQueue::new(MAX_QUEUED),
            waiting: Mutex::new(HashMap::new()),
            not_found: Mutex::new(HashMap::new()),
            counters: Counters::default(),
        });
        for i in 0..threads.max(1) {
            let s = shared.clone();
            std::thread::Builder::new()
                .name(format!("spindle-edge{i}"))
                .spawn(move || helper(&s))
                .map_err(|e| format!("starting the edge's helper threads: {e}"))?;
        }
        Ok(Arc::new(Fetcher { shared }))
    }

    pub fn counters(&self) -> &Counters {
        &self.shared.counters
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.shared.store
    }

    /// Whether the origin answered 404 for `path` in the last
    /// [`NOT_FOUND_TTL`] seconds.
    pub fn known_missing(&self, path: &[u8]) -> bool {
        lock(&self.shared.not_found)
            .get(path)
            .is_some_and(|&until| now() < until)
    }

    /// Asks for a slice; its [`Done`] goes to `mailbox` for `who`. A slice
    /// already being fetched is waited for, not fetched again. `false`:
    /// refused (the queue or the slice's waiters are full).
    pub fn want(&self, want: Want, mailbox: &Arc<Mailbox<Done<W>>>, who: W) -> bool {
        let s = &self.shared;
        let id = want.id();
        let mut waiting = lock(&s.waiting);
        // Stored since the caller looked: answered at once. (A helper
        // stores the slice, and a new object's index entry, before it
        // takes the waiters, so a want either sees it or joins the fetch:
        // never a second fetch.)
        let stored = match &want.object {
            Some(o) => (!want.revalidate && o.has(want.index)).then(|| o.clone()),
            // The first slice: another request's fetch may have stored
            // the object since this one looked.
            None => s
                .store
                .peek(&want.path)
                .filter(|o| o.fresh(now()) && (o.length() == 0 || o.has(0))),
        };
        if let Some(o) = stored {
            mailbox.post(Done {
                who,
                path: want.path.clone(),
                vid: want.object.as_ref().map_or(0, |o| o.vid),
                index: want.index,
                landed: Landed::Stored(o),
            });
            return true;
        }
        if let Some(w) = waiting.get_mut(&id) {
            if w.len() >= MAX_WAITERS {
                s.counters.refused.fetch_add(1, Ordering::Relaxed);
                return false;
            }
            w.push((mailbox.clone(), who));
            s.counters.coalesced.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        // The queue's lock inside the waiters': a helper never takes them
        // the other way round.
        if !s.queue.push(want) {
            s.counters.refused.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        waiting.insert(id, vec![(mailbox.clone(), who)]);
        true
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

fn helper<W>(s: &Shared<W>) {
    loop {
        let want = s.queue.pop();
        let id = want.id();
        let landed = fetch(s, &want);
        if matches!(landed, Landed::NotFound) {
            let mut nf = lock(&s.not_found);
            if nf.len() >= MAX_NOT_FOUND {
                nf.clear();
            }
            nf.insert(want.path.clone(), now() + NOT_FOUND_TTL);
        }
        let waiters = lock(&s.waiting).remove(&id).unwrap_or_default();
        if let Landed::Stored(o) = &landed {
            // A first slice hands its object to every waiter: each is a
            // reader of a pass-through object from now on.
            if let (None, Some(sc)) = (&want.object, &o.scratch) {
                sc.add_readers(waiters.len());
            }
        }
        for (mailbox, who) in waiters {
            mailbox.post(Done {
                who,
                path: want.path.clone(),
                vid: want.object.as_ref().map_or(0, |o| o.vid),
                index: want.index,
                landed: landed.clone(),
            });
        }
    }
}

/// Fetches and stores one slice (after a revalidation, if asked: a stale
/// copy that still holds is fresh again, and nothing is fetched).
fn fetch<W>(s: &Shared<W>, want: &Want) -> Landed {
    let c = &s.counters;
    let t = now();
    let mut want = want.clone();
    if want.revalidate {
        let stale = want.object.take().expect("a revalidation of a copy");
        c.revalidations.fetch_add(1, Ordering::Relaxed);
        match s.origin.revalidate(&want.path, &stale.meta.version, t) {
            Ok(Revalidated::Same) => {
                return match s.store.refresh(&stale, t) {
                    Ok(()) => Landed::Stored(stale),
                    Err(e) => stored_failed(c, e),
                };
            }
            Ok(Revalidated::NotFound) => {
                s.store.forget(&want.path);
                return Landed::NotFound;
            }
            Ok(Revalidated::Changed) => {}
            Err(e) => {
                c.origin_errors.fetch_add(1, Ordering::Relaxed);
                return Landed::Failed(e.to_string());
            }
        }
    }
    let want = &want;
    c.fetches.fetch_add(1, Ordering::Relaxed);
    let pinned = want.object.as_ref().map(|o| &o.meta.version);
    let slice = match s.origin.slice(&want.path, want.index, pinned, t) {
        Ok(Answer::Slice(sl)) => sl,
        Ok(Answer::NotFound) => return Landed::NotFound,
        Ok(Answer::Changed) => {
            // The stored version is no longer the origin's: out, so that
            // the next request fetches the new one.
            if let Some(o) = &want.object {
                s.store.forget_version(o);
            }
            return Landed::Changed;
        }
        Err(e) => {
            c.origin_errors.fetch_add(1, Ordering::Relaxed);
            return Landed::Failed(e.to_string());
        }
    };
    c.origin_bytes
        .fetch_add(slice.bytes.len() as u64, Ordering::Relaxed);
    let landed = store_slice(s, want, &slice, t);
    super::fetch::recycle(slice.bytes);
    landed
}

/// Stores a slice just fetched: into the object asked for, or, for a
/// first slice, the one [`first_object`] picks.
fn store_slice<W>(s: &Shared<W>, want: &Want, slice: &Slice, t: i64) -> Landed {
    let c = &s.counters;
    let obj = match &want.object {
        Some(o) => o.clone(),
        None => match first_object(s, want, slice, t) {
            Ok(o) => o,
            Err(landed) => return landed,
        },
    };
    if obj.length() == 0 {
        return Landed::Stored(obj);
    }
    match s.store.put(&obj, want.index, &slice.bytes) {
        Ok(true) => Landed::Stored(obj),
        // Replaced or evicted meanwhile: the request asks anew.
        Ok(false) => Landed::Dropped,
        Err(e) if obj.scratch.is_some() => scratch_failed(c, e),
        // The first slice of a version just made could not be written
        // (the disk is full): this response passes through.
        Err(e) if want.object.is_none() => {
            c.store_errors.fetch_add(1, Ordering::Relaxed);
            s.store.cannot_store(&e);
            s.store.forget_version(&obj);
            let o = match s.store.pass_through(&want.path, (*obj.meta).clone()) {
                Ok(o) => o,
                Err(e) => return scratch_failed(c, e),
            };
            match s.store.put(&o, want.index, &slice.bytes) {
                Ok(_) => Landed::Stored(o),
                Err(e) => scratch_failed(c, e),
            }
        }
        Err(e) => stored_failed(c, e),
    }
}

/// The object a first slice goes into: the version another request's
/// fetch stored meanwhile (kept, not replaced by a copy of itself), a new
/// one, or, when the answer may not be stored (`no-store`, `private`) or
/// the cache cannot be written, one that passes through (scratch.rs).
fn first_object<W>(
    s: &Shared<W>,
    want: &Want,
    slice: &Slice,
    t: i64,
) -> Result<Arc<Object>, Landed> {
    let c = &s.counters;
    let meta = meta_of(slice, s.policy, t);
    if meta.freshness.store {
        match s.store.peek(&want.path) {
            Some(cur) if cur.meta.version.same(&slice.version) => return Ok(cur),
            _ => match s.store.begin(&want.path, meta.clone()) {
                Ok(o) => return Ok(o),
                Err(e) => {
                    c.store_errors.fetch_add(1, Ordering::Relaxed);
                    s.store.cannot_store(&e);
                }
            },
        }
    }
    s.store
        .pass_through(&want.path, meta)
        .map_err(|e| scratch_failed(c, e))
}

/// A pass-through slice that could not be held: memory full (the client
/// may ask again), or the scratch file failed.
fn scratch_failed(c: &Counters, e: std::io::Error) -> Landed {
    if e.kind() == std::io::ErrorKind::OutOfMemory {
        c.refused.fetch_add(1, Ordering::Relaxed);
        return Landed::Busy;
    }
    c.store_errors.fetch_add(1, Ordering::Relaxed);
    Landed::Failed(format!("a pass-through slice: {e}"))
}

fn stored_failed(c: &Counters, e: std::io::Error) -> Landed {
    c.store_errors.fetch_add(1, Ordering::Relaxed);
    Landed::Failed(format!("storing a slice: {e}"))
}

/// What the cache keeps of a first slice's answer.
fn meta_of(slice: &Slice, p: Policy, fetched: i64) -> Meta {
    Meta {
        version: slice.version.clone(),
        fields: slice.fields.clone(),
        fetched,
        freshness: Freshness::of(
            slice.field("cache-control"),
            slice.field("expires"),
            slice.date.as_deref(),
            p.default_ttl,
            p.stale_default,
            p.stale_max,
        ),
    }
}

impl std::fmt::Display for Landed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Landed::Stored(o) => write!(f, "stored in version {}", o.vid),
            Landed::NotFound => write!(f, "not found at the origin"),
            Landed::Changed => write!(f, "changed at the origin"),
            Landed::Dropped => write!(f, "the cache's copy was replaced or dropped"),
            Landed::Failed(e) => write!(f, "{e}"),
            Landed::Busy => write!(f, "pass-through memory full"),
        }
    }
}
