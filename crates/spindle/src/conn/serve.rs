//! [`Serving`]: a worker's side of serving, the same on every event loop:
//! its context, the open-file and small-file caches and what enters them,
//! directory listings, `--limit-rate`'s waiting list, finishing a response
//! (counters and the access-log line), taking a reload, the timeout sweep
//! and the drain, and a new connection's session.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use spindle_core::response::FileKind;
use spindle_core::{AuthCheck, FileMeta, ListRequest, OpenError, OpenRequest, Response, Step};

use super::life::{Life, Next, Phase, Waiting};
use super::policy::{client_string, inline_body, log_line, min_timeout, plain_session};
use super::policy::{proxied_session, RateLimit};
use super::table::{Slots, Ticket};
use super::WorkerContext;
use crate::config::FirstMiss;
use crate::filecache::{OpenFileCache, SMALL_FILE_MAX};
use crate::passwords::Outcome;

/// A path opened by the loop: its descriptor, metadata and device.
pub type OpenResult = Result<(OwnedFd, FileMeta, u64), OpenError>;

/// A file as found for a request: in the open-file cache, or just opened.
pub struct Found {
    result: Result<FileMeta, OpenError>,
    file: Option<Rc<OwnedFd>>,
    /// A small file's whole contents, from the cache.
    body: Option<Rc<[u8]>>,
    dev: Option<u64>,
    /// Just opened (not from the cache): a regular file may enter it.
    fresh: bool,
    /// The answer of an open (not of the cache): when it does not enter
    /// the cache, what the cache holds for the path is dropped.
    from_open: bool,
}

impl Found {
    /// What the loop's open (synchronous, or a completion) gave.
    pub fn opened(res: OpenResult) -> Found {
        match res {
            Ok((fd, meta, dev)) => Found {
                fresh: meta.kind == FileKind::Regular,
                result: Ok(meta),
                file: Some(Rc::new(fd)),
                body: None,
                dev: Some(dev),
                from_open: true,
            },
            Err(e) => Found {
                from_open: true,
                ..Found::failed(e)
            },
        }
    }

    /// A file the loop did not open (a pass-through object's scratch
    /// file): it never enters the open-file cache.
    pub fn passed(fd: OwnedFd, meta: FileMeta, dev: u64) -> Found {
        Found {
            result: Ok(meta),
            file: Some(Rc::new(fd)),
            body: None,
            dev: Some(dev),
            fresh: false,
            from_open: false,
        }
    }

    pub fn failed(e: OpenError) -> Found {
        Found {
            result: Err(e),
            file: None,
            body: None,
            dev: None,
            fresh: false,
            from_open: false,
        }
    }
}

/// What to do after an open: send a response, or look further.
pub enum Answer {
    Send(Reply),
    /// A precompressed sidecar to look for (this file is not sent: its
    /// descriptor closes, or stays cached).
    Open(OpenRequest),
    /// A directory to list (`--autoindex`).
    List(ListRequest),
    /// An object to find at the origin (`--origin`; `conn::edge`).
    Fetch(spindle_core::FetchRequest),
}

/// A response to transmit, with the file its range is read from.
#[derive(Debug)]
pub struct Reply {
    pub resp: Response,
    /// The file, when file bytes follow the head (not for a body put in
    /// the head from the cache).
    pub file: Option<Rc<OwnedFd>>,
    /// The file was just opened for this request and kept out of the
    /// open-file cache: its first use (recent.rs), which a loop may read
    /// with `O_DIRECT`.
    pub first_use: bool,
    /// The device the file lives on, where known.
    pub dev: Option<u64>,
}

/// A listing asked for: at once (from the cache, or a refusal), or later
/// through [`Serving::take_listed`].
pub enum Listed {
    Now(Response),
    Later,
}

/// The TLS configuration of a worker's HTTPS listeners: the one SIGHUP
/// replaces, and this worker's copy of it.
struct TlsConfigs {
    from: usize,
    shared: Option<Arc<crate::tls::Shared>>,
    copy: Option<(u64, Arc<rustls::ServerConfig>)>,
}

/// What the loops share about serving (see the module comment).
pub struct Serving {
    pub ctx: WorkerContext,
    pub files: OpenFileCache,
    /// Directory listings (`--autoindex`): jobs out and the cache.
    pub lists: Option<crate::lister::Lists<Ticket>>,
    /// Password checks out, and recent successes (`auth` rules).
    checks: crate::passwords::Checks<Ticket>,
    /// Readable when the helpers finished listings or checks (shared by
    /// `lists` and `checks`, so that a loop waits on one descriptor).
    helpers_efd: Arc<OwnedFd>,
    /// `--limit-rate`, and the responses waiting for their allowance,
    /// resumed on the next tick.
    pub rate: Option<RateLimit>,
    pub throttled: Vec<Ticket>,
    /// Streaming responses of the edge's one of whose slices landed
    /// (or failed), resumed when the helpers' answers are taken.
    pub slice_wakes: Vec<Ticket>,
    /// Shutting down: accepting stopped, responses in flight finish.
    pub draining: bool,
    pub drain_deadline: Option<Instant>,
    /// No connection can expire before this: the tick skips the timeout
    /// sweep until then (see [`Serving::sweep`]).
    next_scan: Instant,
    tls: TlsConfigs,
    /// Compressed results served since the last tick, for the
    /// compressor's LRU order (at most [`SERVED_BATCH`]).
    served: Vec<std::ffi::CString>,
    /// The caching edge (`--origin`): its helpers and this worker's
    /// mailbox for their answers (on `helpers_efd`).
    pub(super) edge: Option<super::edge::EdgeSide>,
}

/// Served results a worker remembers between two ticks for the
/// compressor's LRU order; past it, the order forgets some (a result
/// served that often is recent anyway).
pub const SERVED_BATCH: usize = 4096;

/// A new connection's start: its life, and its TLS configuration on an
/// HTTPS listener.
pub struct Admitted {
    pub life: Life,
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

impl Serving {
    /// The HTTPS configuration every worker shares (reloads replace its
    /// contents): HTTP/3 builds its own TLS from it.
    pub fn tls_shared(&self) -> Option<Arc<crate::tls::Shared>> {
        self.tls.shared.clone()
    }

    pub fn new(mut ctx: WorkerContext) -> Result<Serving, String> {
        let helpers_efd = Arc::new(crate::sys::new_eventfd()?);
        let lists = ctx.lister.as_ref().map(|pool| {
            crate::lister::Lists::new(
                pool.clone(),
                ctx.root.clone(),
                ctx.cfg.dotfiles,
                ctx.session_cfg.compress.as_ref().map_or(0, |c| c.min_size),
                ctx.cfg.open_file_cache_valid,
                helpers_efd.clone(),
            )
        });
        let checks = crate::passwords::Checks::new(ctx.checker.clone(), helpers_efd.clone());
        let files = OpenFileCache::new(
            ctx.cfg.open_file_cache,
            ctx.cfg.open_file_cache_valid,
            ctx.cfg.small_file_cache as usize,
        );
        let tls = TlsConfigs {
            from: ctx.tls_from,
            shared: ctx.tls.take(),
            copy: None,
        };
        let edge = ctx.edge.clone().map(|edge| super::edge::EdgeSide {
            edge,
            mailbox: Arc::new(crate::jobs::Mailbox::new(helpers_efd.clone())),
        });
        let mut s = Serving {
            edge,
            rate: RateLimit::from_config(&ctx.cfg),
            ctx,
            files,
            lists,
            checks,
            helpers_efd,
            throttled: Vec::new(),
            slice_wakes: Vec::new(),
            draining: false,
            drain_deadline: None,
            next_scan: Instant::now(),
            tls,
            served: Vec::new(),
        };
        s.tls.copy = s.tls.shared.as_ref().map(|t| t.current());
        Ok(s)
    }

    // ----- a new connection -------------------------------------------

    /// The start of a connection accepted on listener `i`: its session
    /// (behind a trusted proxy, or counted under
    /// `--max-connections-per-ip`) and TLS configuration. `None`: close it
    /// unanswered (a PROXY listener's stranger).
    pub fn admit(&mut self, i: usize, fd: RawFd, now: Instant) -> Option<Admitted> {
        let ctx = &self.ctx;
        let proxied = ctx.proxied.contains(&i);
        let (mut session, per_ip) = if proxied {
            (proxied_session(&ctx.cfg, fd)?, None)
        } else {
            plain_session(ctx, fd)
        };
        let https = i >= self.tls.from;
        if https {
            session.set_tls();
        }
        let life = Life::new(session, per_ip, ctx, proxied, fd, now);
        let tls = if https {
            let copy = self.tls.copy.as_mut().expect("HTTPS listener without TLS");
            if let Some(shared) = &self.tls.shared {
                shared.refresh(copy);
            }
            Some(copy.1.clone())
        } else {
            None
        };
        Some(Admitted { life, tls })
    }

    // ----- opening ----------------------------------------------------

    /// Looks a path up in the open-file cache (counted in the metrics):
    /// `None` when the loop must open it.
    pub fn lookup(&mut self, req: &OpenRequest, now: Instant) -> Option<Found> {
        let hit = self.files.lookup(&req.cache_key(), now);
        self.ctx.metrics.open_file(matches!(hit, Some(Ok(_))));
        Some(match hit? {
            Ok(h) => Found {
                result: Ok(h.meta),
                file: h.fd,
                body: h.body,
                dev: Some(h.dev),
                fresh: false,
                from_open: false,
            },
            Err(e) => Found::failed(crate::fs::open_error(e)),
        })
    }

    /// The session's answer to an open. A regular file just opened enters
    /// the open-file cache, unless `direct_reads` (the loop can read a
    /// file's first use with `O_DIRECT`) and `--first-miss` keeps a first
    /// use out of it (recent.rs, memory.rs). A small file's cached bytes go
    /// in the head.
    pub fn opened(
        &mut self,
        life: &mut Life,
        req: &OpenRequest,
        found: Found,
        direct_reads: bool,
        now: Instant,
    ) -> Answer {
        let Found {
            result,
            file,
            mut body,
            dev,
            fresh,
            from_open,
        } = found;
        let meta = result.as_ref().ok().copied();
        let small = meta
            .is_some_and(|m| m.kind == FileKind::Regular && m.size > 0 && m.size <= SMALL_FILE_MAX);
        let step = life.session.opened(&self.ctx.session_cfg, req, result);
        // A file the session answers with another open (its compressed
        // result, a sidecar) enters the cache too: else it is opened
        // again on every request.
        let bytes = match &step {
            Step::Respond(r) => r.file.map_or(0, |(_, n)| n),
            _ => meta.map_or(0, |m| m.size),
        };
        let first_use = match (fresh, meta, &file, dev) {
            (true, Some(meta), Some(fd), Some(dev)) => {
                if self.enters_cache(direct_reads, dev, meta.ino, bytes) {
                    body = self
                        .files
                        .insert(&req.cache_key(), fd.clone(), meta, dev, now);
                    false
                } else {
                    true
                }
            }
            _ => false,
        };
        if from_open && (first_use || !fresh) {
            // An expired entry waits for its path's open (filecache.rs):
            // one that found nothing, or something else, or a file kept
            // out of the cache, ends it.
            self.files.forget(&req.cache_key());
        }
        let mut resp = match step {
            Step::Respond(r) => r,
            Step::Open(next) => return Answer::Open(next),
            Step::List(list) => return Answer::List(list),
            Step::Fetch(f) => return Answer::Fetch(f),
            other => unreachable!("opened() gave {other:?}"),
        };
        if let Some(note) = life.session.take_compress_note() {
            self.compress_note(note);
        }
        let from_file = resp.file.is_some();
        let inlined = body.is_some_and(|b| inline_body(&mut resp, &b));
        if small && from_file {
            self.ctx.metrics.small_file(inlined);
        }
        let keep = !inlined && resp.file.is_some();
        Answer::Send(Reply {
            // Not O_DIRECT for a multipart body: the flag would outlive
            // the part that set it, under the next part's sendfile.
            first_use: first_use && keep && resp.parts.is_empty(),
            file: if keep { file } else { None },
            resp,
            dev,
        })
    }

    /// Whether a file just opened, whose response reads `bytes` of it,
    /// enters the open-file cache now, or is a first use kept out of it
    /// (`--first-miss`, recent.rs, memory.rs).
    fn enters_cache(&self, direct_reads: bool, dev: u64, ino: u64, bytes: u64) -> bool {
        !direct_reads
            || match self.ctx.cfg.first_miss {
                FirstMiss::Cache => true,
                FirstMiss::Direct => self.ctx.recent.used(dev, ino, bytes),
                // Recorded in either case, so that a file used while
                // memory had room is remembered once it is full.
                FirstMiss::Auto => {
                    self.ctx.recent.used(dev, ino, bytes) | self.ctx.memory.has_room()
                }
            }
    }

    /// A response's word to the compression cache: a stored result was
    /// served (it is the most recently used), or one is missing (the
    /// helpers make it; this response went uncompressed).
    fn compress_note(&mut self, note: spindle_core::compress::Note) {
        let Some(z) = &self.ctx.compressor else {
            return;
        };
        match note {
            spindle_core::compress::Note::Served { name, .. } => {
                self.ctx.metrics.compress(true);
                if self.served.len() < SERVED_BATCH {
                    self.served.push(name);
                }
            }
            spindle_core::compress::Note::Make(job) => {
                self.ctx.metrics.compress(false);
                z.request(job, &self.ctx.root);
            }
        }
    }

    /// Each tick: tells the compressor which results were served.
    pub fn tell_served(&mut self) {
        if let Some(z) = &self.ctx.compressor {
            z.served(&mut self.served);
        }
    }

    // ----- listings ---------------------------------------------------

    /// Lists a directory the session asked for: from the worker's cache,
    /// or by the helpers (`crate::lister`), whose answer
    /// [`Serving::take_listed`] brings. On `Later` the connection waits
    /// ([`Life::await_listing`]).
    pub fn list(
        &mut self,
        life: &mut Life,
        req: &ListRequest,
        who: Ticket,
        now: Instant,
    ) -> Listed {
        let lists = self.lists.as_mut().expect("autoindex on");
        if let Some(l) = lists.lookup(req, now) {
            return Listed::Now(life.listed(&self.ctx, Ok(&l)));
        }
        if !lists.request(req, who) {
            return Listed::Now(life.listed(&self.ctx, Err(OpenError::Busy)));
        }
        life.await_helper(Waiting::Listing);
        Listed::Later
    }

    // ----- passwords --------------------------------------------------

    /// Checks the credentials the session asked about: from the worker's
    /// recent successes, or by the helper (`crate::passwords`), whose
    /// answer [`Serving::helpers_done`] brings. `None`: the connection
    /// waits.
    pub fn authenticate(
        &mut self,
        life: &mut Life,
        check: AuthCheck,
        who: Ticket,
        now: Instant,
    ) -> Option<Next> {
        match self.checks.check(check, who, now) {
            Outcome::Now(check, checked) => Some(life.authenticated(&self.ctx, check, checked)),
            Outcome::Later => {
                life.await_helper(Waiting::Password);
                None
            }
        }
    }

    /// The eventfd that becomes readable when the helpers finished
    /// listings or password checks.
    pub fn helpers_eventfd(&self) -> RawFd {
        self.helpers_efd.as_raw_fd()
    }

    /// What the helpers finished: for each connection that still waits
    /// (see [`Life::awaits`]), what to do next (a listing's response; a
    /// check's open, 401 or 503).
    pub fn helpers_done<C>(
        &mut self,
        slots: &mut Slots<C>,
        now: Instant,
        life: impl Fn(&mut C) -> &mut Life,
    ) -> Vec<(Ticket, Next)> {
        let mut out = Vec::new();
        if let Some(lists) = self.lists.as_mut() {
            for (waiters, result) in lists.take_done(now) {
                for who in waiters {
                    let Some(l) = slots.get(who).map(&life) else {
                        continue;
                    };
                    if l.awaits(Waiting::Listing) {
                        let resp = l.listed(&self.ctx, result.as_deref().map_err(|e| *e));
                        out.push((who, Next::Respond(resp)));
                    }
                }
            }
        }
        for (who, check, checked) in self.checks.take_done(now) {
            let Some(l) = slots.get(who).map(&life) else {
                continue;
            };
            if l.awaits(Waiting::Password) {
                out.push((who, l.authenticated(&self.ctx, check, checked)));
            }
        }
        out.extend(self.edge_done(slots, life));
        out
    }

    // ----- finishing --------------------------------------------------

    /// A response's last byte is on the socket: it is counted and logged
    /// (`outcome`: where its file bytes came from), and the connection
    /// waits for its next request.
    pub fn finished(
        &self,
        life: &mut Life,
        fd: RawFd,
        resp: &Response,
        outcome: &'static str,
        now: Instant,
    ) {
        let ctx = &self.ctx;
        ctx.metrics
            .request(life.session.last_method(), resp.status, resp.body_len);
        if let Some(why) = life.session.refusal() {
            ctx.metrics.refused(why);
        }
        let outcome = if resp.file.is_none() {
            "memory"
        } else {
            outcome
        };
        self.log(life, fd, resp.body_len, outcome, now);
        life.cache_status = None;
        life.edge = super::edge::EdgeHold::Nothing;
        life.session.sent();
        if self.draining {
            life.session.close();
        }
        life.phase = Phase::Reading;
        life.deadline = now + ctx.cfg.keepalive_timeout;
    }

    /// A response cut off before its last byte (the client went, a send
    /// failed or timed out, its file changed, the edge's slice failed):
    /// its access-log line all the same, with the body bytes that went
    /// and the outcome `cut`, as nginx logs a download the client
    /// aborted.
    pub fn cut_off(&self, life: &Life, fd: RawFd, sent: u64, now: Instant) {
        self.log(life, fd, sent, "cut", now);
    }

    /// The request's access-log line, if there is a log.
    fn log(&self, life: &Life, fd: RawFd, bytes: u64, outcome: &'static str, now: Instant) {
        let ctx = &self.ctx;
        if !ctx.log.enabled() {
            return;
        }
        let line = log_line(
            &ctx.cfg,
            &client_string(&life.session, fd),
            &life.session,
            bytes,
            now.saturating_duration_since(life.req_at),
            outcome,
            life.cache_status,
        );
        ctx.log.log(line);
    }

    // ----- timers, reload and the drain ---------------------------------

    /// SIGHUP: takes a new configuration, between requests (reload.rs).
    /// `true`: the loop drops what depended on the old one too.
    pub fn take_reload(&mut self) -> bool {
        if !self.ctx.take_reload() {
            return false;
        }
        // Paths may name other files now (a new root, say).
        self.files.clear();
        if let Some(l) = self.lists.as_mut() {
            l.set_roots(self.ctx.root.clone(), self.ctx.cfg.dotfiles);
        }
        self.rate = RateLimit::from_config(&self.ctx.cfg);
        true
    }

    /// The connections whose deadline has passed, each counted under its
    /// timeout, or all that are not closing once the drain's deadline has
    /// passed, with the phase each was in. `life` gives a connection's
    /// [`Life`] and whether its loop is receiving for it.
    ///
    /// The sweep visits every slot; with 10,000 idle keep-alive
    /// connections, doing it every tick cost a few percent of the worker's
    /// CPU per request (docs/decisions.md, "Idle connections"). So it runs
    /// only once the earliest deadline it saw can have passed. That is
    /// sound because every deadline is set to the loop's time plus one of
    /// the timeouts in [`min_timeout`], so none set since the last sweep
    /// falls before `next_scan`. A connection that cannot expire now but
    /// keeps its deadline (Opening; Reading without a receive armed)
    /// counts too, so a passed one brings the next sweep to the next tick.
    pub fn sweep<C>(
        &mut self,
        slots: &Slots<C>,
        now: Instant,
        life: impl Fn(&C) -> (&Life, bool),
    ) -> Vec<(Ticket, Phase, crate::metrics::Timeout)> {
        let force = self.drain_deadline.is_some_and(|d| now >= d);
        let mut out = Vec::new();
        if !force && now < self.next_scan {
            #[cfg(debug_assertions)]
            for (_, c) in slots.iter() {
                let (l, receiving) = life(c);
                debug_assert!(
                    l.expired(now, receiving).is_none(),
                    "a connection expired before next_scan"
                );
            }
            return out;
        }
        let mut earliest = now + min_timeout(&self.ctx.cfg);
        for (t, c) in slots.iter() {
            let (l, receiving) = life(c);
            if l.phase == Phase::Closing {
                continue;
            }
            let why = if force {
                Some(crate::metrics::Timeout::Drain)
            } else {
                l.expired(now, receiving)
            };
            match why {
                Some(why) => {
                    self.ctx.metrics.timeout(why);
                    out.push((t, l.phase, why));
                }
                None => earliest = earliest.min(l.deadline),
            }
        }
        self.next_scan = earliest;
        out
    }

    /// Shutdown was asked for: the drain starts (once), and the keep-alive
    /// connections between requests are to be closed at once, which the
    /// returned tickets name.
    pub fn start_drain<C>(
        &mut self,
        slots: &Slots<C>,
        now: Instant,
        life: impl Fn(&C) -> &Life,
    ) -> Vec<Ticket> {
        if self.draining {
            return Vec::new();
        }
        self.draining = true;
        self.drain_deadline = Some(now + self.ctx.cfg.drain_timeout);
        slots.select(|c| life(c).between_requests())
    }
}
