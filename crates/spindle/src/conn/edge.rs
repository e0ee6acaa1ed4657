//! The caching edge's steps (`--origin`, issue 49), written once for
//! both loops and every protocol.
//!
//! A request the session could not serve from the root comes here as a
//! [`FetchRequest`]. A fresh object in the cache is opened at once; else
//! the edge's helpers fetch its first slice (which fixes the version and
//! its length) and the connection waits ([`Waiting::Origin`]). Once the
//! session has made its response, the slices its body needs are checked.
//! A body of one range streams: it waits ([`Waiting::Slices`]) only for
//! the slice of its first byte, then goes while the helpers fetch the
//! next ones ahead of it (one, then twice as many each time, up to
//! [`SLICES_AHEAD`]); the loop sends only bytes
//! already on disk ([`Serving::edge_more`]) and waits for the rest. A
//! multipart body waits until all its slices are stored. Every slice is
//! of the version the head names (the helpers fetch with `If-Match`), so
//! nothing is ever spliced: a slice that fails after the head went ends
//! the response short (the connection closed, or the stream reset),
//! and one that fails before it is still a clean 5xx.

use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use spindle_core::edge::slice;
use spindle_core::edge::EDGE_ROOT;
use spindle_core::{EdgeFound, FetchRequest, OpenRequest, Response, Step};

use super::life::{Life, Next, Waiting};
use super::serve::{Found, Reply, Serving};
use super::table::{Slots, Ticket};
use crate::edge::fetcher::{Done, Landed, Want};
use crate::edge::store::Object;
use crate::jobs::Mailbox;

/// Slices one response asks the helpers for at once; the next ones are
/// asked for when those have landed.
pub const SLICES_AHEAD: usize = 8;
/// Fetches of a first slice per request: one more when the object
/// changed at the origin under the first.
pub const MAX_TRIES: u8 = 2;
/// `errno` EAGAIN: what [`spindle_core::Session::body_failed`] answers
/// with a 503 and `Retry-After`.
const EAGAIN: i32 = 11;

/// A worker's side of the edge: the helpers, and its mailbox for them
/// (on the worker's helpers eventfd).
pub struct EdgeSide {
    pub edge: Arc<crate::edge::Edge>,
    pub mailbox: Arc<Mailbox<Done<Ticket>>>,
}

/// What a request holds of the edge.
#[derive(Default)]
pub enum EdgeHold {
    #[default]
    Nothing,
    /// Its first slice is being fetched; `stale` may answer if the
    /// origin fails.
    Fetching {
        path: Vec<u8>,
        stale: Option<Arc<Object>>,
        tries: u8,
    },
    /// Found: its cache file is being opened, or its response made.
    Found { path: Vec<u8>, obj: Reader },
    /// Its response waits for `outstanding` slices.
    Parked {
        path: Vec<u8>,
        obj: Reader,
        reply: Box<Reply>,
        outstanding: usize,
    },
    /// Its body of one range is being sent while its later slices are
    /// fetched: those before `asked_to` have been asked for, `ahead` of
    /// the stored ones at a time.
    Streaming {
        path: Vec<u8>,
        obj: Reader,
        asked_to: u64,
        ahead: u64,
        flow: Flow,
    },
}

/// A request's hold on the object it answers from. A pass-through
/// object (scratch.rs) counts its readers: the fetcher counted this one
/// when it handed the object over, and it is let go here, so that only a
/// lone reader frees what it has sent.
pub struct Reader(Arc<Object>);

impl Reader {
    /// Takes over `obj` as handed to this request.
    fn adopt(obj: Arc<Object>) -> Reader {
        Reader(obj)
    }
}

impl std::ops::Deref for Reader {
    type Target = Arc<Object>;
    fn deref(&self) -> &Arc<Object> {
        &self.0
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        if let Some(sc) = &self.0.scratch {
            sc.leave();
        }
    }
}

impl EdgeHold {
    /// Whether `done` answers what this request asked: its first slice
    /// (of its path), or a slice of the object it sends.
    fn asked(&self, done: &Done<Ticket>) -> bool {
        match self {
            EdgeHold::Fetching { path, .. } => done.path == *path,
            EdgeHold::Parked { path, obj, .. } | EdgeHold::Streaming { path, obj, .. } => {
                done.path == *path && done.vid == obj.vid
            }
            EdgeHold::Nothing | EdgeHold::Found { .. } => false,
        }
    }
}

/// How a streaming body's slices are coming.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Coming,
    /// One failed (the origin, the version, or the store): the body ends
    /// where the stored bytes end.
    Broken,
}

/// How much more of a body the loop may send now
/// ([`Serving::edge_more`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum More {
    /// This many bytes from the offset asked about (0 only when none
    /// were asked about).
    Now(u64),
    /// None yet: the loop waits, and is resumed when a slice lands.
    Wait,
    /// The rest will never come: the response ends short.
    Broken,
}

/// A fetch's answer: now, or through the helpers.
pub enum Fetched {
    Now(Next),
    Later,
}

/// A response, given its slices: it goes, or it waits.
pub enum Parking {
    Ready(Reply),
    Parked,
}

fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Whether the response's body streams while its slices are fetched: one
/// range of file bytes (a multipart body waits for all of its slices).
fn streams(resp: &Response) -> bool {
    resp.parts.is_empty() && resp.file.is_some_and(|(_, len)| len > 0)
}

/// The slices the response must have stored before its head goes: the
/// first of a streaming body; else all its body reads.
fn slices_before_head(resp: &Response) -> Vec<u64> {
    let mut needed = needed_slices(resp);
    if streams(resp) {
        needed.truncate(1);
    }
    needed
}

/// The slices the response's body reads (of every part), in order, each
/// once; none for a response without file bytes.
fn needed_slices(resp: &Response) -> Vec<u64> {
    let ranges = resp
        .file
        .iter()
        .chain(resp.parts.iter().filter_map(|p| p.file.as_ref()));
    let mut out: Vec<u64> = ranges
        .filter(|(_, len)| *len > 0)
        .flat_map(|&(off, len)| slice::covering(off..off + len))
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The session's open of `obj`'s cache file.
fn found(life: &mut Life, path: Vec<u8>, obj: Arc<Object>) -> Next {
    let rel = obj.data_path();
    let open = OpenRequest {
        path: CString::new(rel.as_os_str().as_bytes()).expect("hex and dots"),
        root: EDGE_ROOT,
    };
    let meta = obj.meta.clone();
    life.edge = EdgeHold::Found {
        path,
        obj: Reader::adopt(obj),
    };
    match life.session.edge_found(EdgeFound { open, meta }) {
        Step::Open(o) => Next::Open(o),
        other => unreachable!("edge_found() gave {other:?}"),
    }
}

/// The error log's line for a slice the origin did not give.
fn warn_failed(path: &[u8], landed: &Landed) {
    let path = String::from_utf8_lossy(path);
    match landed {
        Landed::Stored(_) => {}
        Landed::Failed(e) => crate::warn!("origin: {}: {e}", path.escape_debug()),
        Landed::Changed => crate::warn!(
            "origin: {}: its copy changed at the origin while a response read it",
            path.escape_debug()
        ),
        Landed::NotFound => crate::warn!(
            "origin: {}: gone while a response read it",
            path.escape_debug()
        ),
        Landed::Busy | Landed::Dropped => crate::warn!(
            "origin: {}: {landed}; the response ends short",
            path.escape_debug()
        ),
    }
}

fn failed(serve: &Serving, life: &mut Life, status: u16) -> Next {
    life.edge = EdgeHold::Nothing;
    match life.session.edge_failed(&serve.ctx.session_cfg, status) {
        Step::Respond(r) => Next::Respond(r),
        other => unreachable!("edge_failed() gave {other:?}"),
    }
}

impl Serving {
    fn edge_side(&self) -> &EdgeSide {
        self.edge.as_ref().expect("an origin is configured")
    }

    /// Finds the object the session asked for: in the cache and fresh,
    /// at once; else its first slice is asked of the helpers.
    pub fn fetch(&mut self, life: &mut Life, req: FetchRequest, who: Ticket) -> Fetched {
        let side = self.edge_side();
        if side.edge.known_missing(&req.path) {
            return Fetched::Now(failed(self, life, 404));
        }
        let cached = side.edge.store().get(&req.path);
        let counters = side.edge.counters();
        let want = match &cached {
            Some(obj) if obj.fresh(now_unix()) && (obj.length() == 0 || obj.has(0)) => {
                counters.hits.fetch_add(1, Ordering::Relaxed);
                life.cache_status = Some("hit");
                return Fetched::Now(found(life, req.path, obj.clone()));
            }
            Some(stale) if !stale.fresh(now_unix()) => Want::revalidation(&req.path, stale),
            // Just made, its first slice still being stored: join that
            // fetch (or, if it just ended, take its result).
            Some(_) => Want::first(&req.path),
            None => {
                counters.misses.fetch_add(1, Ordering::Relaxed);
                Want::first(&req.path)
            }
        };
        // The copy that may answer if the origin fails (and names a
        // revalidation's result): only a stale one asked about.
        let stale = cached.filter(|_| want.revalidate);
        if !side.edge.want(want, &side.mailbox, who) {
            return Fetched::Now(failed(self, life, 503));
        }
        life.edge = EdgeHold::Fetching {
            path: req.path,
            stale,
            tries: 1,
        };
        life.await_helper(Waiting::Origin);
        Fetched::Later
    }

    /// A response of the edge's goes once every slice its body reads is
    /// stored; else it waits for them. Any other goes at once.
    pub fn send_or_park(&mut self, life: &mut Life, reply: Reply, who: Ticket) -> Parking {
        let EdgeHold::Found { path, obj } = std::mem::take(&mut life.edge) else {
            return Parking::Ready(reply);
        };
        let needed = slices_before_head(&reply.resp);
        if needed.is_empty() {
            return Parking::Ready(reply);
        }
        let parked = EdgeHold::Parked {
            path,
            obj,
            reply: Box::new(reply),
            outstanding: 0,
        };
        match self.ask_slices(life, parked, &needed, who) {
            Some(reply) => Parking::Ready(reply),
            None => Parking::Parked,
        }
    }

    /// Asks for the next missing slices of a parked response: `Some`, the
    /// reply to send now (all stored; or a 503 in its place when the
    /// helpers refused); `None`, it waits (`life.edge` holds it).
    fn ask_slices(
        &mut self,
        life: &mut Life,
        parked: EdgeHold,
        needed: &[u64],
        who: Ticket,
    ) -> Option<Reply> {
        let EdgeHold::Parked {
            path, obj, reply, ..
        } = parked
        else {
            unreachable!("not parked");
        };
        let missing: Vec<u64> = needed
            .iter()
            .copied()
            .filter(|&i| !obj.has(i))
            .take(SLICES_AHEAD)
            .collect();
        if missing.is_empty() {
            if streams(&reply.resp) {
                let asked_to = needed.last().map_or(0, |&i| i + 1);
                life.edge = EdgeHold::Streaming {
                    path,
                    obj,
                    asked_to,
                    ahead: 1,
                    flow: Flow::Coming,
                };
            }
            return Some(*reply);
        }
        let side = self.edge_side();
        let mut outstanding = 0;
        for &index in &missing {
            if side
                .edge
                .want(Want::slice(&path, index, &obj), &side.mailbox, who)
            {
                outstanding += 1;
            }
        }
        if outstanding == 0 {
            return Some(self.in_place_of(life));
        }
        life.edge = EdgeHold::Parked {
            path,
            obj,
            reply,
            outstanding,
        };
        life.await_helper(Waiting::Slices);
        None
    }

    /// How many of a body's `left` bytes from `off` the loop may send now:
    /// those on disk without a gap (all of them for a body not the
    /// edge's). The next slices past them are asked for (each once), one
    /// at first and twice as many at each call, up to [`SLICES_AHEAD`], as
    /// the kernel's readahead grows: a player that reads a file's start
    /// and seeks costs the origin a slice or two, not eight. A landing
    /// resumes the response ([`Serving::slice_wakes`]).
    pub fn edge_more(&mut self, life: &mut Life, off: u64, left: u64, who: Ticket) -> More {
        let EdgeHold::Streaming {
            path,
            obj,
            asked_to,
            ahead,
            flow,
        } = &mut life.edge
        else {
            return More::Now(left);
        };
        if left == 0 {
            return More::Now(0);
        }
        obj.sent_below(off);
        let n = obj.stored_run(off, left);
        if n < left && *flow == Flow::Coming {
            let first = (off + n) / slice::SLICE_SIZE;
            let end = slice::covering(off..off + left).end.min(first + *ahead);
            *ahead = (*ahead * 2).min(SLICES_AHEAD as u64);
            let side = self.edge.as_ref().expect("an origin is configured");
            for index in (*asked_to).max(first)..end {
                if obj.has(index) {
                    continue;
                }
                if !side
                    .edge
                    .want(Want::slice(path, index, obj), &side.mailbox, who)
                {
                    // Refused (the helpers are full): asked again later,
                    // unless the body needs it now.
                    if index == first && n == 0 {
                        *flow = Flow::Broken;
                    }
                    break;
                }
                *asked_to = index + 1;
            }
        }
        match (n, *flow) {
            (0, Flow::Coming) => More::Wait,
            (0, Flow::Broken) => More::Broken,
            (n, _) => More::Now(n),
        }
    }

    /// The open of a pass-through object's data (scratch.rs), which has no
    /// path: a descriptor of its scratch file, kept out of the open-file
    /// cache. `None` for every other open.
    pub fn edge_open(&self, life: &Life, req: &OpenRequest) -> Option<Found> {
        let EdgeHold::Found { obj, .. } = &life.edge else {
            return None;
        };
        let scratch = obj.scratch.as_ref()?;
        if req.root != EDGE_ROOT {
            return None;
        }
        let opened = scratch.open().and_then(|fd| {
            let (meta, dev) = crate::fs::inspect_opened(fd.as_raw_fd())?;
            Ok((fd, meta, dev))
        });
        Some(match opened {
            Ok((fd, meta, dev)) => Found::passed(fd, meta, dev),
            Err(e) => Found::failed(crate::fs::open_error(e)),
        })
    }

    /// A 503 with `Retry-After` in place of a parked response none of
    /// whose bytes went (its reply, and so its file, is dropped by the
    /// caller).
    fn in_place_of(&self, life: &mut Life) -> Reply {
        life.edge = EdgeHold::Nothing;
        let resp = life.session.body_failed(&self.ctx.session_cfg, EAGAIN);
        Reply {
            resp,
            file: None,
            first_use: false,
            dev: None,
        }
    }

    /// What the edge's helpers finished: for each request that still
    /// waits, what to do next.
    pub fn edge_done<C>(
        &mut self,
        slots: &mut Slots<C>,
        life: impl Fn(&mut C) -> &mut Life,
    ) -> Vec<(Ticket, Next)> {
        let Some(side) = &self.edge else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for done in side.mailbox.take() {
            let who = done.who;
            let Some(l) = slots.get(who).map(&life) else {
                continue;
            };
            if !l.edge.asked(&done) {
                // A late answer for an earlier request on this connection
                // (a slice fetched ahead of a response that has ended).
                continue;
            }
            let next = if l.awaits(Waiting::Origin) {
                self.first_slice(l, done)
            } else if l.awaits(Waiting::Slices) {
                self.next_slice(l, done)
            } else {
                if let EdgeHold::Streaming { path, flow, .. } = &mut l.edge {
                    if !matches!(done.landed, Landed::Stored(_)) {
                        warn_failed(path, &done.landed);
                        *flow = Flow::Broken;
                    }
                    self.slice_wakes.push(who);
                }
                None
            };
            if let Some(n) = next {
                // Answers still to come for this request (a parked
                // response's other slices) are not for the next step.
                l.stop_waiting();
                out.push((who, n));
            }
        }
        out
    }

    /// A request's first slice landed (or did not): what next, or `None`
    /// while it is fetched again.
    fn first_slice(&mut self, life: &mut Life, done: Done<Ticket>) -> Option<Next> {
        let EdgeHold::Fetching { path, stale, tries } = std::mem::take(&mut life.edge) else {
            unreachable!("waits for the origin without a fetch");
        };
        Some(match done.landed {
            Landed::Stored(obj) => {
                // The stale copy, revalidated; else a version just fetched.
                let same = stale.as_ref().is_some_and(|s| s.vid == obj.vid);
                life.cache_status = Some(match (same, obj.scratch.is_some()) {
                    (true, _) => "revalidated",
                    (false, true) => "pass",
                    (false, false) => "miss",
                });
                found(life, path, obj)
            }
            Landed::NotFound => failed(self, life, 404),
            Landed::Changed | Landed::Dropped if tries < MAX_TRIES => {
                let side = self.edge_side();
                if !side.edge.want(Want::first(&path), &side.mailbox, done.who) {
                    return Some(failed(self, life, 503));
                }
                life.edge = EdgeHold::Fetching {
                    path,
                    stale,
                    tries: tries + 1,
                };
                life.await_helper(Waiting::Origin);
                return None;
            }
            Landed::Failed(e) => match stale.filter(|o| o.stale_usable(now_unix())) {
                Some(obj) => {
                    life.cache_status = Some("stale");
                    found(life, path, obj)
                }
                None => {
                    crate::warn!(
                        "origin: {}: {e}",
                        String::from_utf8_lossy(&path).escape_debug()
                    );
                    failed(self, life, 502)
                }
            },
            Landed::Changed | Landed::Dropped => failed(self, life, 502),
            Landed::Busy => failed(self, life, 503),
        })
    }

    /// One of a parked response's slices landed (or did not).
    fn next_slice(&mut self, life: &mut Life, done: Done<Ticket>) -> Option<Next> {
        let EdgeHold::Parked {
            path,
            obj,
            reply,
            outstanding,
        } = std::mem::take(&mut life.edge)
        else {
            unreachable!("parked without a response");
        };
        if !matches!(done.landed, Landed::Stored(_)) {
            warn_failed(&path, &done.landed);
            return Some(Next::Send(Box::new(self.in_place_of(life))));
        }
        let outstanding = outstanding - 1;
        let needed = slices_before_head(&reply.resp);
        let parked = EdgeHold::Parked {
            path,
            obj,
            reply,
            outstanding,
        };
        if outstanding > 0 {
            life.edge = parked;
            return None;
        }
        self.ask_slices(life, parked, &needed, done.who)
            .map(|r| Next::Send(Box::new(r)))
    }
}
